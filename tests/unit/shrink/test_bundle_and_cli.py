"""The shrunk bundle on disk, and `mallory shrink`'s refusals of bad input (no cluster)."""

from __future__ import annotations

import json

import pytest

from mallory.campaign.loop import ScriptedStep, script_of
from mallory.cli import main
from mallory.errors import MalloryError
from mallory.shrink.bundle import bundle_signature, steps_json, write_shrunk_bundle


def fake_replay_dir(root, signature: str):
    """A replay's campaign directory as LiveReplay leaves it, written by hand (a fake)."""
    bundle = root / "bugs" / signature
    (bundle / "000000").mkdir(parents=True)
    (bundle / "000000" / "history.edn").write_text("")
    steps = [{"step": 0, "action": "kill:one", "draw": 4, "window_s": 1.5}]
    (bundle / "schedule.json").write_text(json.dumps({"index": 0, "seed": 9, "steps": steps, "findings": [signature]}))
    (bundle / "campaign.json").write_text(json.dumps({"window_s": 2.5}))
    (bundle / "report.json").write_text("{}")
    return root


def test_shrunk_bundle_is_a_bundle_with_provenance_and_replaces_an_old_one(tmp_path):
    signature = "log-assertion-0123456789ab"
    replay = fake_replay_dir(tmp_path / "replays" / "0003", signature)
    out = tmp_path / "elsewhere" / "min"
    out.mkdir(parents=True)
    (out / "stale").write_text("from an earlier shrink")
    steps = [ScriptedStep("kill:one", 4, 1.5)]
    write_shrunk_bundle(out, replay, signature, {"shrunk_from": "/orig", "steps": steps_json(steps)})
    assert not (out / "stale").exists()
    assert (out / "000000" / "history.edn").exists()
    assert bundle_signature(out) == signature  # named "min", still knows its bug
    assert bundle_signature(replay / "bugs" / signature) == signature
    schedule = json.loads((out / "schedule.json").read_text())
    assert script_of(schedule) == steps  # what `mallory replay` and a second shrink re-enact
    assert json.loads((out / "provenance.json").read_text())["shrunk_from"] == "/orig"


def test_no_bundle_of_that_signature_is_an_error(tmp_path):
    replay = fake_replay_dir(tmp_path / "r", "log-a-1")
    with pytest.raises(MalloryError, match="no bundle of log-b-2"):
        write_shrunk_bundle(tmp_path / "out", replay, "log-b-2", {})
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--replays", "0"], "--replays must be at least 1"),
        (["--min-fraction", "0"], "--min-fraction must be in"),
        (["--min-fraction", "1.5"], "--min-fraction must be in"),
        (["--min-window", "0"], "--min-window must be positive"),
        ([], "is not a bug bundle: it has no campaign.json"),
    ],
)
def test_bad_input_is_refused_before_anything_runs(tmp_path, capsys, args, message):
    code = main(["shrink", str(tmp_path / "nothing"), *args])
    assert code == 254
    assert message in capsys.readouterr().err
    assert not (tmp_path / "nothing").exists()


def test_a_schedule_without_steps_is_refused(tmp_path, capsys):
    (tmp_path / "campaign.json").write_text(json.dumps({"sut": "redis-replication", "window_s": 1.0}))
    (tmp_path / "schedule.json").write_text(json.dumps({"index": 0, "steps": []}))
    assert main(["shrink", str(tmp_path)]) == 254
    assert "no steps to shrink" in capsys.readouterr().err
    assert not (tmp_path / "shrunk.work").exists()
