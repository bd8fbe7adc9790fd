"""`--policy modelfuzz` in the campaign loop: it plays its plans exactly (seed, draws,
windows), keeps its corpus in the campaign directory, and the corpus survives resume; a
campaign without a protocol model refuses it."""

from __future__ import annotations

import orjson
import pytest

from mallory.campaign.config import CampaignConfig, ConfigError, LoopConfig
from mallory.campaign.directory import CampaignDir
from mallory.campaign.loop import Campaign, ScriptedStep, schedule_seed, step_rng
from mallory.campaign.model import bind_model, load_model
from mallory.learner.learner import Learner
from mallory.learner.policies import ModelFuzzPolicy
from tests.unit.campaign.test_loop import FakeClock, FakeNemesis
from tests.unit.campaign.test_model import CATALOGUE, NODES, TracingTimeline, lock_file  # noqa: F401 (a fixture)

WINDOW_S, STEPS, SEED = 2.5, 6, 4


class DrawingNemesis(FakeNemesis):
    """Records each fault's first random number: which draw its targets came from."""

    def __init__(self) -> None:
        super().__init__()
        self.draws: list[tuple[str, float]] = []

    def enact(self, action: str, rng) -> dict:
        self.draws.append((action, rng.random()))
        return super().enact(action, rng)


def modelfuzz_campaign(tmp_path, lock_file, create: bool = True) -> Campaign:  # noqa: F811
    clock, nemesis = FakeClock(), DrawingNemesis()
    directory = CampaignDir(tmp_path / "campaign")
    if create:
        directory.create(CampaignConfig(sut="fake", policy="modelfuzz", reward="model", model=str(lock_file),
                                        seed=SEED))
    saved = directory.load_learner()
    learner = Learner.from_checkpoint(saved) if saved else Learner.create(policy="modelfuzz", reward="model", seed=SEED)
    feed = bind_model(load_model(lock_file), NODES, CATALOGUE, ["lock-released"])
    return Campaign(directory, learner, TracingTimeline(clock, nemesis), nemesis,
                    LoopConfig(steps=STEPS, window_s=WINDOW_S, reset_s=1.0, seed=SEED), sleeper=clock, model=feed)


def played(record: dict) -> tuple:
    """A schedule's record as a plan's seed and steps (a step at the campaign's window has
    none of its own)."""
    return record["seed"], [(s["action"], s["draw"], None if s["window_s"] == WINDOW_S else s["window_s"])
                            for s in record["steps"]]


def read_corpus(directory: CampaignDir) -> list[dict]:
    return [orjson.loads(p.read_bytes()) for p in sorted((directory.root / "corpus").glob("*.json"))]


def planned(entry: dict) -> tuple:
    return entry["seed"], [(s["action"], s["draw"], s["window_s"]) for s in entry["steps"]]


def test_the_loop_plays_each_plan_exactly_and_writes_the_corpus_beside_the_checkpoint(tmp_path, lock_file):  # noqa: F811
    campaign = modelfuzz_campaign(tmp_path, lock_file)
    plans = []
    plan = campaign.learner.plan

    def planning(*args):  # the plans the loop got, to compare with what it enacted
        plans.append(plan(*args))
        return plans[-1]

    campaign.learner.plan = planning
    campaign.run(schedules=8)
    records = campaign.dir.read_schedules()
    assert [played(r) for r in records] == [(p.seed, [tuple(s) for s in p.steps]) for p in plans]
    # what was enacted, not only what was recorded: each fault drew its targets from the
    # plan's seed and the step's draw, and each window lasted the step's window
    planned_steps = [(p.seed, s) for p in plans for s in p.steps]
    assert campaign.nemesis.draws == [(s.action, step_rng(seed, s.draw).random())
                                      for seed, s in planned_steps if s.action not in ("heal", "noop")]
    spans = [s["window_ns"][1] - s["window_ns"][0] for r in records for s in r["steps"]]
    assert all(abs(span - (s.window_s or WINDOW_S) * 1e9) < 1e3 for span, (_, s) in zip(spans, planned_steps))
    assert any(s.window_s is not None for p in plans for s in p.steps), "a window was mutated"
    # the first schedule is random and draws as the loop does; the others mutate an entry,
    # whose seed they keep so that their unmutated faults hit the same nodes
    assert records[0]["plan"] == {"parent": None, "mutations": []}
    assert plans[0].seed == schedule_seed(SEED, 0) and [s.draw for s in plans[0].steps] == list(range(STEPS))
    corpus = read_corpus(campaign.dir)
    for record in records[1:]:
        assert record["plan"]["parent"] is not None and record["plan"]["mutations"]
        assert record["seed"] == corpus[record["plan"]["parent"]]["seed"]
    policy = campaign.learner.learner.policy
    assert isinstance(policy, ModelFuzzPolicy) and corpus == policy.corpus.to_state() and corpus
    assert all(planned(entry) in [played(r) for r in records] for entry in corpus), "kept: what was played"


def test_the_corpus_survives_resume_and_a_missing_file_is_written_again(tmp_path, lock_file):  # noqa: F811
    first = modelfuzz_campaign(tmp_path, lock_file)
    first.run(schedules=4)
    kept = first.learner.learner.policy.corpus
    (first.dir.root / "corpus" / "000000.json").unlink()  # as if killed between checkpoint and corpus
    resumed = modelfuzz_campaign(tmp_path, lock_file, create=False)
    assert resumed.learner.learner.policy.corpus == kept
    resumed.run(schedules=1)
    assert read_corpus(resumed.dir)[:len(kept.entries)] == kept.to_state()
    assert resumed.dir.read_schedules()[-1]["plan"]["parent"] is not None, "it goes on mutating what it kept"


def test_a_replayed_schedule_plays_its_script_under_its_own_seed_and_asks_no_plan(tmp_path, lock_file):  # noqa: F811
    """replay and shrink re-enact a recorded schedule: modelfuzz neither plans it (its seed
    would replace the recorded one, and with it every target) nor keeps it."""
    campaign = modelfuzz_campaign(tmp_path, lock_file)
    record = campaign.run_schedule(0, script=[ScriptedStep("novel", 5), ScriptedStep("dull-1", 9)], seed=1234)
    assert record["seed"] == 1234 and "plan" not in record
    assert campaign.nemesis.draws == [("novel", step_rng(1234, 5).random()), ("dull-1", step_rng(1234, 9).random())]
    assert campaign.learner.learner.policy.corpus.entries == []


def test_without_a_model_the_policy_is_refused():
    with pytest.raises(ConfigError, match=r"'modelfuzz' needs a protocol model \(--model FILE\)"):
        CampaignConfig(sut="fake", policy="modelfuzz")
