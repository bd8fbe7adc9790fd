"""CampaignConfig: campaign.json's keys stay what they were, every campaign.json written
before still loads (and resumes), nothing recorded is dropped, and a bad value is refused
naming its field. No root needed."""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import replace

import orjson
import pytest

from mallory.campaign.config import Calibration, CampaignConfig, ConfigError, LoopConfig
from mallory.campaign.directory import PLOT_COLUMNS, CampaignDir, read_bundle_config
from mallory.campaign.loop import Campaign
from mallory.cli import main
from mallory.commands import fuzz
from mallory.errors import MalloryError
from mallory.learner.learner import Learner
from tests.unit.campaign.test_loop import (
    FakeChecker,
    FakeClock,
    FakeNemesis,
    FakeTimeline,
)

#: campaign.json's keys, in order, as `mallory fuzz` has written them since --backend
#: (older code and the report read these)
KEYS = ["version", "command", "sut", "port", "nodes", "policy", "reward", "temperature", "prior", "context", "seed",
        "faults",
        "workload", "concurrency", "rate", "steps", "window_s", "reset_s", "abstraction", "threshold", "calibrate",
        "backend", "waypoints", "filter_sets", "model", "preset", "rounds_d", "rounds_k", "drop_p", "crash_rate",
        "fresh_data"]

#: a campaign.json as the first `mallory fuzz` wrote it (b447f2e): before --prior,
#: --calibrate and --backend
OLD_CAMPAIGN_JSON = {
    "version": "0.1.0", "command": ["/usr/bin/mallory", "fuzz", "--sut", "redis-replication", "--out", "c"],
    "sut": "redis-replication", "port": 6379, "nodes": 3, "policy": "qlearning", "reward": "paper",
    "temperature": None, "seed": 3, "faults": None, "workload": "list-append", "concurrency": 5, "rate": 50.0,
    "steps": 12, "window_s": 2.5, "reset_s": 5.0, "abstraction": "event-history", "threshold": 0.7,
}

EVERYTHING_SET = CampaignConfig(
    version="0.1.0", command=("mallory", "fuzz"), sut="/specs/raft-kv.toml", port=7000, nodes=5, policy="epsilon-greedy",
    reward="novelty", temperature=0.05, prior="optimistic", seed=-4, faults=("partition", "kill:one"),
    workload="rw-register", concurrency=2, rate=12.5, steps=7, window_s=1.5, reset_s=0.0, abstraction="vector-clock",
    threshold=0.55, calibrate=40, backend="docker", model="/specs/model.py", rounds_d=2, rounds_k=0, drop_p=0.5,
    crash_rate=1.0, fresh_data=True, calibration=Calibration(windows=38, threshold=0.55),
    extra={"from_a_newer_mallory": {"kept": [1, 2]}},
)


def write_campaign_json(root, value: dict) -> None:
    """A campaign directory as CampaignDir.create lays it out, with `value` as campaign.json."""
    for sub in ("schedules", "bugs", "runs"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "campaign.json").write_bytes(orjson.dumps(value, option=orjson.OPT_INDENT_2))
    (root / "plot_data").write_text("# " + ", ".join(PLOT_COLUMNS) + "\n")


def test_campaign_json_keeps_its_keys_and_order():
    assert list(CampaignConfig(sut="redis-replication").to_json()) == KEYS
    calibrated = replace(EVERYTHING_SET, extra={})
    assert list(calibrated.to_json()) == [*KEYS, "calibration"]
    assert calibrated.to_json()["calibration"] == {"windows": 38, "threshold": 0.55}


def test_round_trip_through_the_campaign_directory(tmp_path):
    directory = CampaignDir(tmp_path / "c")
    directory.create(EVERYTHING_SET)
    assert directory.config() == EVERYTHING_SET
    assert orjson.loads((tmp_path / "c" / "campaign.json").read_bytes()) == EVERYTHING_SET.to_json()
    assert CampaignConfig.from_json(EVERYTHING_SET.to_json(), "x") == EVERYTHING_SET


def test_an_old_campaign_json_loads_with_defaults_and_resumes(tmp_path):
    root = tmp_path / "old"
    write_campaign_json(root, OLD_CAMPAIGN_JSON)
    written = (root / "campaign.json").read_bytes()
    directory = CampaignDir(root)
    config = directory.config()
    assert (config.prior, config.calibrate, config.backend, config.calibration, config.extra) == (None, 0, "netns", None, {})
    assert config.to_json() == {**OLD_CAMPAIGN_JSON, "prior": None, "context": "state", "calibrate": 0,
                                "backend": "netns", "waypoints": None, "filter_sets": None, "model": None,
                                "preset": None, "rounds_d": 1, "rounds_k": 1, "drop_p": 0.2, "crash_rate": 0.2,
                                "fresh_data": False}

    # Resume, as `mallory fuzz --resume` does: the loop runs from the directory's configuration.
    clock, nemesis = FakeClock(), FakeNemesis()
    learner = Learner.create(policy=config.policy, reward=config.reward, seed=config.seed, threshold=config.threshold)
    campaign = Campaign(directory, learner, FakeTimeline(clock, nemesis), nemesis, config.loop_config(),
                        checker=FakeChecker(), sleeper=clock)
    campaign.run(schedules=4)
    assert [len(s["steps"]) for s in directory.read_schedules()] == [12] * 4
    assert (root / "campaign.json").read_bytes() == written, "resuming rewrites nothing"
    assert [read_bundle_config(root / "bugs" / bug) for bug in directory.known_bugs()] == [config]


def test_keys_it_does_not_know_are_written_back(tmp_path):
    root = tmp_path / "newer"
    write_campaign_json(root, {**OLD_CAMPAIGN_JSON, "warp": 9, "notes": {"by": "a newer mallory"}})
    directory = CampaignDir(root)
    config = directory.config()
    assert config.extra == {"warp": 9, "notes": {"by": "a newer mallory"}}
    directory.write_config(replace(config, threshold=0.6, calibration=Calibration(windows=10, threshold=0.6)))
    rewritten = orjson.loads((root / "campaign.json").read_bytes())
    assert rewritten["warp"] == 9 and rewritten["notes"] == {"by": "a newer mallory"}
    assert rewritten["threshold"] == 0.6 and rewritten["calibration"] == {"windows": 10, "threshold": 0.6}
    directory.record_bug("log:x", {}, {"index": 0}, config=directory.config())
    assert read_bundle_config(root / "bugs" / "log_x").extra == config.extra


@pytest.mark.parametrize(
    "field, value, problem",
    [
        ("version", 1, "must be a string"),
        ("command", "mallory fuzz", "must be a list of strings"),
        ("sut", "", "must be a non-empty string"),
        ("sut", None, "must be a non-empty string"),
        ("port", 0, "must be at least 1"),
        ("port", 70000, "must be at most 65535"),
        ("port", "6379", "must be an integer"),
        ("nodes", 0, "must be at least 1"),
        ("nodes", 2.0, "must be an integer"),
        ("nodes", True, "must be an integer"),
        ("policy", "sarsa", "must be one of bonus-max, epsilon-greedy, modelfuzz, poisson-crash, qlearning, random, "
                            "random-drop, rounds"),
        ("reward", "fame", "must be one of model, none, novelty, pair-novelty, pairs, paper"),
        ("reward", "model", "'model' needs a protocol model (--model FILE)"),
        ("model", "", "must be a non-empty string"),
        ("temperature", 0, "must be positive"),
        ("temperature", "hot", "must be a number"),
        ("prior", "pessimistic", "must be one of optimistic, shared"),
        ("seed", 1.5, "must be an integer"),
        ("faults", [], "must be a non-empty list of non-empty strings"),
        ("faults", ["kill", ""], "must be a non-empty list of non-empty strings"),
        ("faults", "kill", "must be a non-empty list of non-empty strings"),
        ("workload", "bank", "must be one of list-append, none, register, rw-register"),
        ("concurrency", 0, "must be at least 1"),
        ("rate", 0, "must be positive"),
        ("rate", float("inf"), "must be a number"),
        ("steps", 0, "must be at least 1"),
        ("window_s", 0, "must be positive"),
        ("window_s", float("nan"), "must be a number"),
        ("reset_s", -1, "must not be negative"),
        ("abstraction", "lamport", "must be one of code-history, event-count, event-history, message-history, vector-clock"),
        ("threshold", 0, "must be in (0, 1]"),
        ("threshold", 1.5, "must be in (0, 1]"),
        ("calibrate", -1, "must be at least 0"),
        ("calibrate", 2, "must be 0 (off) or at least 3"),
        ("calibrate", 10_001, "must be at most 10000"),
        ("backend", "k8s", "must be one of docker, netns"),
        ("fresh_data", 1, "must be true or false"),
        ("filter_sets", "", "must be a non-empty string"),
        ("rounds_d", 0, "must be at least 1"),
        ("rounds_d", 4, "must be at most the 3 nodes, got 4"),
        ("rounds_d", 1.0, "must be an integer"),
        ("rounds_k", -1, "must be at least 0"),
        ("drop_p", 0, "must be in (0, 1]"),
        ("drop_p", 1.5, "must be in (0, 1]"),
        ("crash_rate", 0, "must be positive"),
        ("crash_rate", float("inf"), "must be a number"),
    ],
)
def test_every_bad_value_is_refused_naming_its_field(tmp_path, field, value, problem):
    with pytest.raises(ConfigError) as made:
        CampaignConfig(**{"sut": "redis-replication", field: value})
    assert made.value.field == field and str(made.value).startswith(f"campaign configuration: {field} {problem}")

    if isinstance(value, float) and not math.isfinite(value):
        return  # JSON has no NaN or infinity: no campaign.json can hold them
    write_campaign_json(tmp_path / "c", {**OLD_CAMPAIGN_JSON, field: value})
    with pytest.raises(MalloryError) as read:
        CampaignDir(tmp_path / "c").config()
    message = str(read.value)
    assert message.startswith(f"{tmp_path / 'c' / 'campaign.json'}: {field} {problem}") and "\n" not in message


@pytest.mark.parametrize(
    "value, message",
    [
        ({"nodes": 3}, "sut is missing"),
        ({"sut": "redis-replication", "calibration": {"windows": 0, "threshold": 0.5}}, "calibration.windows must be at least 1"),
        ({"sut": "redis-replication", "calibration": {"windows": 4, "threshold": 2}}, "calibration.threshold must be in (0, 1]"),
        ({"sut": "redis-replication", "calibration": 0.5}, "calibration must be an object of largest, steady_states, threshold, windows"),
    ],
)
def test_a_missing_sut_or_a_bad_calibration_is_refused(value, message):
    with pytest.raises(ConfigError, match="^" + re.escape(f"c/campaign.json: {message}")):
        CampaignConfig.from_json(value, "c/campaign.json")


def test_filter_sets_need_the_netns_backend_and_faults_that_name_them():
    CampaignConfig(sut="s", filter_sets="/f.py", faults=("partition", "filters:drop-votes"))
    with pytest.raises(ConfigError, match="filter_sets needs the netns backend"):
        CampaignConfig(sut="s", filter_sets="/f.py", backend="docker")
    with pytest.raises(ConfigError, match="faults names none: add filters"):
        CampaignConfig(sut="s", filter_sets="/f.py", faults=("partition",))
    with pytest.raises(ConfigError, match="faults names filters, but no filter-set file gives any"):
        CampaignConfig(sut="s", faults=("partition", "filters:x"))


def test_unknown_keys_may_not_stand_in_for_known_fields():
    with pytest.raises(ConfigError, match="extra must not hold known fields"):
        CampaignConfig(sut="redis-replication", extra={"nodes": 4})


def test_numbers_are_normalised_so_equal_configurations_compare_equal():
    from_json = CampaignConfig.from_json({"sut": "redis-replication", "rate": 50, "faults": ["kill"], "calibrate": 20,
                                          "abstraction": "code-history", "context": "faults"}, "c")
    assert from_json == CampaignConfig(sut="redis-replication", rate=50.0, faults=("kill",))
    assert isinstance(from_json.rate, float) and from_json.faults == ("kill",)


def test_the_loop_config_is_the_configurations_share():
    config = CampaignConfig(sut="redis-replication", steps=7, window_s=1.5, reset_s=0.5, seed=11, fresh_data=True)
    assert config.loop_config() == LoopConfig(steps=7, window_s=1.5, reset_s=0.5, seed=11, fresh_data=True)
    assert CampaignConfig(sut="redis-replication").loop_config() == LoopConfig()


def fuzz_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    fuzz.configure(parser)
    return parser.parse_args(argv)


def test_fuzz_options_default_to_the_fields_defaults():
    config = fuzz.config_from_args(fuzz_args("--sut", "redis-replication", "--out", "c"))
    assert replace(config, version="", command=()) == CampaignConfig(sut="redis-replication")


def test_fuzz_fresh_data_is_off_unless_asked():
    assert fuzz.config_from_args(fuzz_args("--sut", "redis-replication", "--out", "c")).fresh_data is False
    assert fuzz.config_from_args(fuzz_args("--sut", "redis-replication", "--out", "c", "--fresh-data")).fresh_data


def test_fuzz_refuses_a_bad_option_naming_it(tmp_path, capsys):
    for option, value, message in [("--nodes", "0", "--nodes must be at least 1"),
                                   ("--window", "0", "--window must be positive"),
                                   ("--reward", "fame", "--reward must be one of model, none, novelty, pair-novelty, pairs, paper"),
                                   ("--reward", "model", "--reward 'model' needs a protocol model (--model FILE)"),
                                   ("--model", str(tmp_path / "none.py"), f"--model {tmp_path / 'none.py'}: no such file")]:
        code = main(["fuzz", "--out", str(tmp_path / "c"), "--sut", "redis-replication", option, value])
        assert code == 254 and message in capsys.readouterr().err
        assert not (tmp_path / "c").exists()


def test_a_sampler_policy_takes_its_fault_alone_unless_told_and_needs_it_enabled(tmp_path, capsys):
    config = fuzz.config_from_args(fuzz_args("--sut", "etcd", "--out", "c", "--policy", "rounds", "--rounds-k", "0"))
    assert (config.policy, config.faults, config.rounds_d, config.rounds_k) == ("rounds", ("rounds:lossy-sync",), 1, 0)
    config = fuzz.config_from_args(fuzz_args("--sut", "etcd", "--out", "c", "--policy", "poisson-crash",
                                             "--faults", "crash,partition", "--crash-rate", "0.5"))
    assert (config.faults, config.crash_rate) == (("crash", "partition"), 0.5)
    with pytest.raises(ConfigError) as made:
        CampaignConfig(sut="etcd", policy="random-drop")  # the default set leaves the opt-in families out
    assert made.value.field == "faults" and "must include rounds:random-drop" in str(made.value)
    for argv, message in [
        (("--policy", "rounds", "--faults", "partition,kill"),
         "--faults must include rounds:lossy-sync, the fault policy rounds takes, got partition,kill"),
        (("--policy", "rounds", "--rounds-d", "0"), "--rounds-d must be at least 1, got 0"),
        (("--policy", "rounds", "--rounds-d", "4"), "--rounds-d must be at most the 3 nodes, got 4"),
        (("--policy", "rounds", "--rounds-k", "-2"), "--rounds-k must be at least 0, got -2"),
        (("--policy", "random-drop", "--drop-p", "1.5"), "--drop-p must be in (0, 1], got 1.5"),
        (("--policy", "poisson-crash", "--crash-rate", "0"), "--crash-rate must be positive, got 0"),
        (("--faults", "rounds:lossy"), "unknown spec 'lossy' in 'rounds:lossy' (rounds specs: lossy-sync, isolate, "
                                       "random-drop)"),
    ]:
        code = main(["fuzz", "--out", str(tmp_path / "c"), "--sut", "etcd", *argv])
        err = capsys.readouterr().err
        assert code == 254 and message in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "c").exists()


def test_a_key_whose_default_changed_means_what_it_meant_when_absent():
    """Campaigns from before calibration existed did not calibrate: absent, calibrate is 0,
    while a new campaign calibrates by default."""
    assert CampaignConfig.from_json({"sut": "etcd"}, "c").calibrate == 0
    assert CampaignConfig(sut="etcd").calibrate == 20
    assert CampaignConfig.from_json({"sut": "etcd", "calibrate": 20}, "c").calibrate == 20


#: plot_data headers of older campaigns: before pairs_covered (10 columns), and before
#: AFL++'s columns came first (12)
OLD_PLOT_HEADERS = {
    "before pairs": "# relative_time_s, schedules_done, steps_done, distinct_states, bugs, late_steps, action, state, "
                    "new_state, feedback_ms",
    "before afl": "# relative_time_s, schedules_done, steps_done, distinct_states, bugs, late_steps, action, state, "
                  "new_state, feedback_ms, pairs_covered, waypoint",
}


@pytest.mark.parametrize("era", sorted(OLD_PLOT_HEADERS))
def test_a_resumed_campaign_keeps_writing_the_plot_columns_it_started_with(tmp_path, era):
    """Lines appended after a resume by this version go under the old header's columns
    (renamed ones under their old names) and parse by it."""
    from mallory.report.campaign_data import parse_plot_data

    root = tmp_path / "old"
    write_campaign_json(root, OLD_CAMPAIGN_JSON)
    (root / "plot_data").write_text(OLD_PLOT_HEADERS[era] + "\n")
    row = {c: 1 for c in PLOT_COLUMNS} | {"action": "noop", "relative_time": 2.5, "corpus_count": 3,
                                          "saved_crashes": 2, "edges_found": 7}
    CampaignDir(root).append_plot(row)
    (parsed,) = parse_plot_data((root / "plot_data").read_text())
    assert (parsed.time_s, parsed.distinct_states, parsed.bugs) == (2.5, 3, 2)
    assert parsed.pairs_covered == (None if era == "before pairs" else 7)
    fresh = CampaignDir(tmp_path / "new")
    fresh.create(CampaignConfig(sut="etcd"))
    fresh.append_plot(row)
    assert (tmp_path / "new" / "plot_data").read_text().startswith("# relative_time, cycles_done, cur_item,")
    assert parse_plot_data((tmp_path / "new" / "plot_data").read_text())[0].pairs_covered == 7
