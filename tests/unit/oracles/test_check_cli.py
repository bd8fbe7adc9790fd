"""`mallory check`: verdicts as exit codes (0 valid, 1 invalid, 2 unknown), explanations,
JSON output, and malformed input reported by line with exit 254."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from mallory.cli import main
from mallory.history.ops import write_edn
from tests.unit.oracles.test_conformance import CONFORMANCE
from tests.unit.oracles.test_elle_anomalies import _ring
from tests.unit.oracles.txn_histories import concurrent


def _write(tmp_path: Path, name: str, ops) -> Path:
    buf = io.StringIO()
    write_edn(ops, buf)
    path = tmp_path / name
    path.write_text(buf.getvalue())
    return path


def test_valid_invalid_and_unknown_exit_codes(tmp_path, capsys):
    good = _write(tmp_path, "good.edn", concurrent("ax1", "rx1"))
    bad = _write(tmp_path, "bad.edn", concurrent("ax1ry1", "ax2ay1", "rx12"))
    assert main(["check", str(good)]) == 0
    assert "list-append: valid" in capsys.readouterr().out
    assert main(["check", str(bad), "--consistency-models", "serializable"]) == 1
    out = capsys.readouterr().out
    assert "INVALID" in out and "G1c" in out and "not: read-committed" in out and "contradiction" in out
    slow = _write(tmp_path, "ring.edn", _ring(5000))
    assert main(["check", str(slow), "--time-limit", "0"]) == 2
    assert "cycle-search-timeout" in capsys.readouterr().out


def test_checker_is_inferred_for_every_format(capsys):
    cases = {
        "porcupine/test_data/jepsen/etcd_001.log": (1, "cas-register"),
        "porcupine/test_data/kv/c01-ok.txt": (0, "kv"),
        "knossos/data/mutex/bad/etcd.edn": (1, "mutex"),
        "knossos/data/cas-register/good/memstress3-0.edn": (0, "cas-register"),
        "elle-cli/histories/elle/paper-example.json": (1, "list-append"),
    }
    for rel, (code, checker) in cases.items():
        assert main(["check", str(CONFORMANCE / rel)]) == code, rel
        assert capsys.readouterr().out.startswith(checker + ":")


def test_json_output(capsys):
    path = CONFORMANCE / "knossos/data/cas-register/bad/cas-failure.edn"
    assert main(["check", str(path), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["valid"] is False and result["checker"] == "cas-register"
    stuck = result["anomalies"]["nonlinearizable"][0]["stuck_op"]
    assert stuck["op"].startswith("read")


def test_anomalies_option_and_unknown_names(tmp_path, capsys):
    internal = _write(tmp_path, "internal.edn", concurrent("ax1ax2", "ax3rx12"))
    assert main(["check", str(internal), "--consistency-models", "read-uncommitted"]) == 0
    capsys.readouterr()
    assert main(["check", str(internal), "--consistency-models", "read-uncommitted", "--anomalies", "internal"]) == 1
    capsys.readouterr()
    assert main(["check", str(internal), "--consistency-models", "made-up"]) == 254
    assert "unknown consistency model" in capsys.readouterr().err


def test_malformed_history_exits_254_naming_the_line(tmp_path):
    path = tmp_path / "broken.edn"
    path.write_text('{:type :invoke :process 0 :f :read}\n{:type :ok :process 0 :f :read :value [1 2}\n')
    proc = subprocess.run([sys.executable, "-m", "mallory.cli", "check", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 254
    assert f"{path}:2:" in proc.stderr and "Traceback" not in proc.stderr


def test_option_lists_are_comma_separated_or_repeated(tmp_path, capsys):
    internal = _write(tmp_path, "internal.edn", concurrent("ax1ax2", "ax3rx12"))
    for args in (["--anomalies", "G0,internal"], ["--anomalies", "G0", "--anomalies", ":internal"]):
        assert main(["check", *args, str(internal), "--consistency-models", "read-uncommitted"]) == 1
        assert "internal" in capsys.readouterr().out
    assert main(["check", "--consistency-models", "read-uncommitted,serializable", str(internal)]) == 1
