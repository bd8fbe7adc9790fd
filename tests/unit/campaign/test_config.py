"""CampaignConfig: campaign.json's keys stay what they were, every campaign.json written
before still loads, nothing recorded is dropped, and a bad value is refused naming its
field."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import orjson
import pytest

from mallory.campaign.config import Calibration, CampaignConfig, ConfigError, LoopConfig

#: campaign.json's keys, in order, as `mallory fuzz` has written them since --backend
#: (older code and the report read these)
KEYS = ["version", "command", "sut", "port", "nodes", "policy", "reward", "temperature", "prior", "seed", "faults",
        "workload", "concurrency", "rate", "steps", "window_s", "reset_s", "abstraction", "threshold", "calibrate",
        "backend"]

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
    threshold=0.55, calibrate=40, backend="docker", calibration=Calibration(windows=38, threshold=0.55),
    extra={"from_a_newer_mallory": {"kept": [1, 2]}},
)


def test_campaign_json_keeps_its_keys_and_order():
    assert list(CampaignConfig(sut="redis-replication").to_json()) == KEYS
    calibrated = replace(EVERYTHING_SET, extra={})
    assert list(calibrated.to_json()) == [*KEYS, "calibration"]
    assert calibrated.to_json()["calibration"] == {"windows": 38, "threshold": 0.55}


def test_round_trip_through_campaign_json():
    written = orjson.dumps(EVERYTHING_SET.to_json(), option=orjson.OPT_INDENT_2)
    assert CampaignConfig.from_json(orjson.loads(written), "c/campaign.json") == EVERYTHING_SET


def test_an_old_campaign_json_loads_with_defaults():
    config = CampaignConfig.from_json(OLD_CAMPAIGN_JSON, "old/campaign.json")
    assert (config.prior, config.calibrate, config.backend, config.calibration, config.extra) == (None, 0, "netns", None, {})
    assert config.to_json() == {**OLD_CAMPAIGN_JSON, "prior": None, "calibrate": 0, "backend": "netns"}


def test_keys_it_does_not_know_are_kept_for_writing_back():
    config = CampaignConfig.from_json({**OLD_CAMPAIGN_JSON, "warp": 9, "notes": {"by": "a newer mallory"}}, "c")
    assert config.extra == {"warp": 9, "notes": {"by": "a newer mallory"}}
    calibrated = replace(config, threshold=0.6, calibration=Calibration(windows=10, threshold=0.6)).to_json()
    assert calibrated["warp"] == 9 and calibrated["notes"] == {"by": "a newer mallory"}
    assert calibrated["threshold"] == 0.6 and calibrated["calibration"] == {"windows": 10, "threshold": 0.6}


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
        ("policy", "sarsa", "must be one of epsilon-greedy, qlearning, random"),
        ("reward", "fame", "must be one of novelty, paper"),
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
        ("abstraction", "lamport", "must be one of event-count, event-history, vector-clock"),
        ("threshold", 0, "must be in (0, 1]"),
        ("threshold", 1.5, "must be in (0, 1]"),
        ("calibrate", -1, "must be at least 0"),
        ("calibrate", 2, "must be 0 (off) or at least 3"),
        ("calibrate", 10_001, "must be at most 10000"),
        ("backend", "k8s", "must be one of docker, netns"),
    ],
)
def test_every_bad_value_is_refused_naming_its_field(field, value, problem):
    with pytest.raises(ConfigError) as made:
        CampaignConfig(**{"sut": "redis-replication", field: value})
    assert made.value.field == field and str(made.value).startswith(f"campaign configuration: {field} {problem}")

    if isinstance(value, float) and not math.isfinite(value):
        return  # JSON has no NaN or infinity: no campaign.json can hold them
    with pytest.raises(ConfigError) as read:
        CampaignConfig.from_json({**OLD_CAMPAIGN_JSON, field: value}, "c/campaign.json")
    message = str(read.value)
    assert message.startswith(f"c/campaign.json: {field} {problem}") and "\n" not in message


@pytest.mark.parametrize(
    "value, message",
    [
        ({"nodes": 3}, "sut is missing"),
        ({"sut": "redis-replication", "calibration": {"windows": 0, "threshold": 0.5}}, "calibration.windows must be at least 1"),
        ({"sut": "redis-replication", "calibration": {"windows": 4, "threshold": 2}}, "calibration.threshold must be in (0, 1]"),
        ({"sut": "redis-replication", "calibration": 0.5}, "calibration must be an object of windows and threshold"),
    ],
)
def test_a_missing_sut_or_a_bad_calibration_is_refused(value, message):
    with pytest.raises(ConfigError, match="^" + re.escape(f"c/campaign.json: {message}")):
        CampaignConfig.from_json(value, "c/campaign.json")


def test_unknown_keys_may_not_stand_in_for_known_fields():
    with pytest.raises(ConfigError, match="extra must not hold known fields"):
        CampaignConfig(sut="redis-replication", extra={"nodes": 4})


def test_numbers_are_normalised_so_equal_configurations_compare_equal():
    from_json = CampaignConfig.from_json({"sut": "redis-replication", "rate": 50, "faults": ["kill"]}, "c")
    assert from_json == CampaignConfig(sut="redis-replication", rate=50.0, faults=("kill",))
    assert isinstance(from_json.rate, float) and from_json.faults == ("kill",)


def test_the_loop_config_is_the_configurations_share():
    config = CampaignConfig(sut="redis-replication", steps=7, window_s=1.5, reset_s=0.5, seed=11)
    assert config.loop_config() == LoopConfig(steps=7, window_s=1.5, reset_s=0.5, seed=11)
    assert CampaignConfig(sut="redis-replication").loop_config() == LoopConfig()
