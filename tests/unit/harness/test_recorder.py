"""EDN writing and the history recorder: exact Jepsen lines, dense indices, flushed writes."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mallory.harness.history import HistoryRecorder, edn_writer, jsonl_writer
from mallory.history import edn as oracle_edn
from mallory.history.edn import Keyword, dumps
from mallory.history.ops import Op, read_history, write_edn, write_jsonl


def test_edn_scalars_and_collections() -> None:
    assert dumps(None) == "nil"
    assert dumps(True) == "true" and dumps(False) == "false"
    assert dumps(-12) == "-12"
    assert dumps(2**70) == str(2**70)
    assert dumps(Keyword("append")) == ":append"
    assert dumps("a\"b\\c\nd\te\x01") == '"a\\"b\\\\c\\nd\\te\\u0001"'
    assert dumps([Keyword("r"), 3, None]) == "[:r 3 nil]"
    assert dumps({Keyword("a"): 1, 2: "x"}) == '{:a 1, 2 "x"}'
    assert dumps(frozenset({2, 1})) == "#{1 2}"
    with pytest.raises(TypeError):
        dumps(object())
    with pytest.raises(TypeError):
        dumps(float("nan"))


def test_op_line_is_jepsen_history_edn() -> None:
    op = Op(3, 4, "ok", "txn", [[Keyword("append"), 9, 2], [Keyword("r"), 9, [1, 2]]], time=1200)
    assert op.to_edn() == (
        "{:index 3, :time 1200, :type :ok, :process 4, :f :txn, :value [[:append 9 2] [:r 9 [1 2]]]}"
    )
    nem = Op(4, "nemesis", "info", "kill", ["n1"], time=1300, error=Keyword("timeout"))
    assert nem.to_edn() == '{:index 4, :time 1300, :type :info, :process :nemesis, :f :kill, :value ["n1"], :error :timeout}'
    assert nem.to_json() == {
        "index": 4, "time": 1300, "type": "info", "process": "nemesis", "f": "kill", "value": ["n1"], "error": "timeout",
    }  # fmt: skip


edn_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text() | st.from_regex(r"[a-z][a-z0-9\-]{0,8}", fullmatch=True).map(Keyword),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.integers() | st.text(max_size=5), children, max_size=3),
    max_leaves=20,
)


@settings(deadline=None)  # the machine is shared: time is not what this tests
@given(edn_values)
def test_edn_reads_back_through_the_oracles_reader(value: object) -> None:
    back = oracle_edn.loads(dumps(value))
    assert back == value
    assert isinstance(back, Keyword) == isinstance(value, Keyword)


class FakeClock:
    """A settable monotonic clock that can be made to step backwards."""

    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def test_recorder_indices_times_and_pairing(tmp_path: Path) -> None:
    clock = FakeClock()
    rec = HistoryRecorder(
        [edn_writer(tmp_path / "history.edn"), jsonl_writer(tmp_path / "history.jsonl")], clock=clock
    )
    clock.now = 1_500
    rec.invoke(0, "read", None)
    clock.now = 1_400  # a clock that steps back must not make :time go back
    rec.nemesis("pause", ["n1"])
    clock.now = 2_000
    rec.complete(0, "ok", 3)
    with pytest.raises(RuntimeError):
        rec.complete(0, "ok", 3)  # nothing open any more
    rec.invoke(1, "write", 4)
    with pytest.raises(RuntimeError):
        rec.invoke(1, "write", 5)  # one op in flight per process
    with pytest.raises(ValueError):
        rec.complete(1, "invoke", None)
    ops = rec.ops
    assert [o.index for o in ops] == [0, 1, 2, 3]
    assert [o.time for o in ops] == [500, 500, 1000, 1000]
    assert ops[1].process == "nemesis" and ops[1].type == "info"
    assert ops[2].f == "read"  # a completion carries its invoke's f
    clock.now = 900  # the time now is on the ops' clock, and never before the last op
    assert rec.elapsed_ns() == 1000
    clock.now = 3_000
    assert rec.elapsed_ns() == 2000

    # Written and flushed before close: a killed harness would leave exactly these lines.
    edn_lines = (tmp_path / "history.edn").read_text().splitlines()
    json_lines = (tmp_path / "history.jsonl").read_text().splitlines()
    assert len(edn_lines) == len(json_lines) == 4
    assert edn_lines[1] == "{:index 1, :time 500, :type :info, :process :nemesis, :f :pause, :value [\"n1\"]}"
    assert orjson.loads(json_lines[2]) == {"index": 2, "time": 1000, "type": "ok", "process": 0, "f": "read", "value": 3}
    rec.close()


def test_recorder_is_consistent_under_threads(tmp_path: Path) -> None:
    rec = HistoryRecorder.to_dir(tmp_path)

    def worker(p: int) -> None:
        for i in range(200):
            rec.invoke(p, "write", i)
            rec.complete(p, "ok", i)

    threads = [threading.Thread(target=worker, args=(p,)) for p in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rec.close()
    lines = [orjson.loads(l) for l in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [l["index"] for l in lines] == list(range(8 * 200 * 2))
    times = [l["time"] for l in lines]
    assert times == sorted(times)
    open_: dict[int, int] = {}
    for l in lines:
        if l["type"] == "invoke":
            assert l["process"] not in open_
            open_[l["process"]] = l["value"]
        else:
            assert open_.pop(l["process"]) == l["value"]
    assert not open_


def test_the_recorders_files_read_back_as_its_ops(tmp_path: Path) -> None:
    """One op model, one writer per format: what the recorder writes is what the checkers read."""
    rec = HistoryRecorder.to_dir(tmp_path)
    rec.invoke(0, "txn", [[Keyword("append"), 3, 1], [Keyword("r"), 3, None]])
    with rec.nemesis_action("kill", ["n1"]) as outcome:
        outcome["value"] = {"n1": "killed"}
    rec.complete(0, "ok", [[Keyword("append"), 3, 1], [Keyword("r"), 3, [1]]])
    rec.invoke(1, "read", None)
    rec.complete(1, "info", None, Keyword("timeout"))
    rec.close()
    ops = rec.ops
    for name in ("history.edn", "history.jsonl"):
        _, back = read_history(tmp_path / name)
        assert back == ops, name
    edn_text, jsonl_bytes = io.StringIO(), io.BytesIO()
    write_edn(ops, edn_text)
    write_jsonl(ops, jsonl_bytes)
    assert (tmp_path / "history.edn").read_text() == edn_text.getvalue()
    assert (tmp_path / "history.jsonl").read_bytes() == jsonl_bytes.getvalue()


def test_listeners_see_ops_in_order(tmp_path: Path) -> None:
    rec = HistoryRecorder([], keep=False)
    seen: list[int] = []
    rec.add_listener(lambda op: seen.append(op.index))
    rec.invoke(0, "read", None)
    rec.complete(0, "fail", None, Keyword("timeout"))
    assert seen == [0, 1]
    assert rec.ops == []  # keep=False stores nothing


RECORD_FOREVER = """
import sys
import time
from pathlib import Path
from mallory.history.edn import Keyword
from mallory.harness.history import HistoryRecorder
rec = HistoryRecorder.to_dir(Path(sys.argv[1]), keep=False)
print("go", flush=True)
i = 0
while True:
    rec.invoke(i % 5, "txn", [[Keyword("append"), i % 7, i], [Keyword("r"), i % 7, None]])
    rec.complete(i % 5, "ok", [[Keyword("append"), i % 7, i], [Keyword("r"), i % 7, list(range(i % 4))]])
    i += 1
    time.sleep(0.0005)  # keep the file small: the point is where the kill lands, not volume
"""


def test_a_killed_recorder_loses_at_most_the_op_in_flight(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-c", RECORD_FOREVER, str(tmp_path)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"go\n"
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    _, edn_ops = read_history(tmp_path / "history.edn")  # every line whole: reads without error
    _, json_ops = read_history(tmp_path / "history.jsonl")
    assert len(edn_ops) > 100
    assert len(edn_ops) - len(json_ops) in (0, 1)  # killed between the two writes of one op
    assert [o.index for o in edn_ops] == list(range(len(edn_ops)))


def test_nemesis_action_records_jepsens_pair_and_errors() -> None:
    rec = HistoryRecorder([])
    with rec.nemesis_action("kill", ["n1"]) as outcome:
        outcome["value"] = {"n1": "killed"}
    with pytest.raises(OSError):
        with rec.nemesis_action("pause", ["n2"]):
            raise OSError("no such process")
    ops = rec.ops
    assert [(o.type, o.process, o.f, o.value) for o in ops] == [
        ("info", "nemesis", "kill", ["n1"]),
        ("info", "nemesis", "kill", {"n1": "killed"}),
        ("info", "nemesis", "pause", ["n2"]),
        ("info", "nemesis", "pause", ["n2"]),
    ]
    assert ops[3].error == ["nemesis-error", "OSError: no such process"]
    assert ops[3].to_edn().endswith(':error [:nemesis-error "OSError: no such process"]}')
