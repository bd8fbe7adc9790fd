"""`mallory fuzz --filter-sets` for real (root; unrun where it was written): the example SUT
on a netns cluster whose mediator relays the peer port message by message, the learner
choosing filter sets as faults. Each set is in force for exactly its step's window and then
out; what it did to the messages is in the step's record and matches what it says.

    sudo .venv/bin/pytest tests/live/campaign/test_filter_sets.py -q
"""

from __future__ import annotations

import subprocess
import time

from mallory.campaign.directory import CampaignDir
from mallory.timeline.codec import read_records
from mallory.timeline.event import Batch, Kind
from tests.live.campaign.test_fuzz import assert_gone, fuzz, spec  # noqa: F401 (spec: a fixture)

SETS = """\
from mallory.scenario import *

FILTER_SETS = {
    "isolate-n2": [IsolateNode("n2")],
    "drop-appends-to-a-node": [If(IsMessageType("append") & IsMessageTo(role("follower"))).Then(Drop())],
}
"""


def test_filter_sets_are_faults_in_force_for_one_window(spec, tmp_path):  # noqa: F811
    sets = tmp_path / "sets.py"
    sets.write_text(SETS)
    out = tmp_path / "campaign"
    argv = fuzz("--sut", str(spec), "--nodes", "3", "--schedules", "2", "--steps", "4", "--window", "1.5",
                "--reset", "1", "--workload", "register", "--rate", "20", "--faults", "filters",
                "--filter-sets", str(sets), "--policy", "random", "--seed", "5", "--calibrate", "0",
                "--out", str(out))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # no seeded bugs: nothing to find
    d = CampaignDir(out)
    filtered = [step for record in d.read_schedules() for step in record["steps"]
                if step["action"].startswith("filters:") and step["refused"] is None]
    # the random policy over 8 steps of 4 actions (two sets, heal, noop) takes no set with
    # probability 1/256
    assert filtered, "the random policy takes a filter set"
    for step in filtered:
        report = step["report"]
        assert report["verified"] and report["healed"] and step["healed_after_window"], step
        ended = report["heal_evidence"]["ended"]
        assert ended is not None and ended["set"] == report["spec"], report
        messages = ended["messages"]
        for link, by_type in messages.items():
            for counts in by_type.values():
                # an account counts the deliveries of the messages it saw sent only (one sent
                # before the switch and written after it is not this set's)
                assert counts.get("delivered", 0) <= counts.get("sent", 0), (link, counts)
        if report["spec"] == "isolate-n2":
            for link, by_type in messages.items():
                touches_n2 = "n2" in link.split("->")
                for counts in by_type.values():
                    assert counts.get("dropped", 0) == (counts.get("sent", 0) if touches_n2 else 0), (link, counts)
        else:
            follower = report["params"]["roles"]["follower"]
            for link, by_type in messages.items():
                for kind, counts in by_type.items():
                    cut = kind == "append" and link.endswith("->" + follower)
                    assert counts.get("dropped", 0) == (counts.get("sent", 0) if cut else 0), (link, kind, counts)
            # (the example SUT cannot tell its leader, so the "follower" drawn may be the
            # leader, which is sent no appends: nothing to drop then)
        assert messages, "every window carries peer messages through the layer"
    for record in d.read_schedules():
        assert record["reset"]["healthy"], record["reset"]
    # each set went in and out of force in the timeline, in pairs
    faults = []
    for path in sorted((out / "events").glob("events*.jsonl")):
        with open(path, "rb") as f:
            faults += [e.data for r in read_records(f, str(path)) if isinstance(r, Batch)
                       for e in r.events if e.kind is Kind.FAULT and e.data.startswith("filters")]
    # each set went into force (the mediator's switch, and the campaign's report of the
    # fault: two events) and out of it again before the next step (one "filters-off")
    ons = [f for f in faults if f != "filters-off"]
    assert len(ons) == 2 * len(filtered) and faults.count("filters-off") == len(filtered), faults
    assert_gone(out)


def test_a_campaign_without_filter_sets_runs_no_message_layer(spec, tmp_path):  # noqa: F811
    out = tmp_path / "campaign"
    argv = fuzz("--sut", str(spec), "--nodes", "3", "--schedules", "1", "--steps", "1", "--window", "1",
                "--reset", "1", "--workload", "register", "--faults", "partition", "--calibrate", "0",
                "--out", str(out))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        seen = _mediator_argv_while_running(proc, str(out / "events"))
    finally:
        output = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, output
    assert seen and "--messages" not in seen and "--filter-sets" not in seen, seen


def _mediator_argv_while_running(proc: subprocess.Popen, record_dir: str) -> str:
    """The command line of the campaign's mediator (the one recording into `record_dir`),
    read from ps while the campaign runs ("" if never seen)."""
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        ps = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout
        for line in ps.splitlines():
            if "mallory.cli mediator" in line and record_dir in line:
                return line
        time.sleep(0.2)
    return ""
