"""Campaign directories made by hand for the report's tests (and the README's screenshots,
scripts/screenshots.sh): written through CampaignDir (the campaign's own writer) around a
synthetic event recording, with a log bug's bundle and, given histories, the bundles their
checks find."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

from mallory.campaign.checks import ScheduleChecks
from mallory.campaign.config import CampaignConfig
from mallory.campaign.directory import CampaignDir
from mallory.harness.runner import RunConfig
from mallory.history.ops import Op, write_edn
from mallory.timeline.codec import write_records
from mallory.timeline.synthetic import synthetic_stream
from tests.unit.report.timeline_checks import committed

STREAM = dict(n_events=3000, n_nodes=3, packet_share=0.4, events_per_s=500, seed=4)


class NoNodes:
    """An SUT with no node to scan: only the history is checked."""

    backend = SimpleNamespace(nodes=[])

    def log_paths(self, node: str) -> list[Path]:
        return []


def record_histories(d: CampaignDir, schedule: dict, histories: Sequence[list[Op]]) -> None:
    """Schedules 1, 2, ... (copies of `schedule`), each of whose workloads recorded one of
    `histories`, checked and recorded as a live campaign's loop does."""
    checks = ScheduleChecks(NoNodes(), d, None, RunConfig())
    for index, history in enumerate(histories, start=1):
        record = {**schedule, "index": index}
        checks.begin_schedule(index)
        with open(d.run_dir(index) / "history.edn", "w") as f:
            write_edn(history, f)
        for e in checks.check_schedule(index, record):
            d.record_bug(e.signature, e.report, record, e.files, d.config(), e.sighting)
        d.write_schedule(index, record)


def make_campaign(root: Path, policy: str, states: list[int], pairs: list[int] | None = None, step_s: float = 1.5,
                  stats: dict | None = None, histories: Sequence[list[Op]] = (), **config) -> tuple[Path, list]:
    """A campaign whose first schedule's steps reached `states` (and `pairs`: None, as before
    event-pair coverage), a step every `step_s` seconds, and found a log bug; then one
    schedule per history of `histories`, checked as a campaign checks them. `stats` and
    `config` add to or override its fuzzer_stats and CampaignConfig."""
    d = CampaignDir(root)
    d.create(CampaignConfig(policy=policy, seed=1, nodes=3, sut="none", steps=3, window_s=1.0, reset_s=1.0, **config))
    (root / "events").mkdir()
    with open(root / "events" / "events.jsonl", "wb") as f:
        write_records(f, synthetic_stream(**STREAM))
    entries = committed(synthetic_stream(**STREAM))
    t0 = min(e.real_ns for e in entries)
    second = 1_000_000_000
    steps = [{"step": i, "action": a, "report": {"nodes": ["n2"], "started_ns": t0 + i * second} if a != "heal" else None,
              "refused": None, "window_ns": [t0 + i * second, t0 + i * second + 900_000_000], "late": False,
              "state": i, "new": True, "reward": 0.0}
             for i, a in enumerate(["partition:one", "pause:one", "heal"])]
    schedule = {"index": 0, "seed": 1, "started_ns": t0, "steps": steps, "ended_ns": t0 + 4 * second}
    for i, n in enumerate(states):
        d.append_plot({"relative_time": step_s * (i + 1), "schedules_done": 0, "steps_done": i + 1, "corpus_count": n,
                       "saved_crashes": 0, "late_steps": 0, "action": steps[i % 3]["action"], "state": i, "new_state": 1,
                       "feedback_ms": 90 + i, **({"edges_found": pairs[i]} if pairs else {})})
    d.write_stats({"start_time": t0 // 10**9, "run_time": step_s * len(states), "distinct_states": states[-1],
                   **({"pairs_covered": pairs[-1]} if pairs else {}), **(stats or {})})
    d.write_schedule(0, schedule)
    run = d.run_dir(0)
    (run / "logs").mkdir()
    (run / "logs" / "n2-sut.log").write_text("assertion failed: two leaders in term 3\n")
    d.record_bug("log-assertion-0123456789ab", {"oracle": "log", "kind": "assertion", "node": "n2",
                                                "message": "assertion failed: two leaders in term 3", "details": {"line": 1}},
                 schedule, [run], d.config())
    record_histories(d, schedule, histories)
    return root, entries
