import base64
import random

import orjson
import pytest

from mallory.errors import MalloryError
from mallory.learner.learner import LEVEL_STRIDE, WAYPOINT_REWARD, Learner
from mallory.learner.policies import POLICIES, SAMPLER_FAULTS
from tests.unit.learner.summaries import random_summary, steady_windows

ACTIONS = ["partition:majority", "partition:one", "kill:one", "pause:all", "clock:bump"]


def windows(seed: int, count: int) -> list[frozenset[str]]:
    """A mix of recurring steady windows and occasional new behaviour."""
    rng = random.Random(seed)
    steady = steady_windows(rng, count)
    return [w if rng.random() < 0.7 else random_summary(rng, rng.randrange(20, 120)) for w in steady]


def drive(learner: Learner, summaries: list[frozenset[str]], start: int = 0) -> list:
    """The campaign loop: schedules of 12 steps; returns everything observable."""
    trace = []
    for step, summary in enumerate(summaries, start):
        match, reward = learner.observe(summary)
        action = learner.next_action(ACTIONS)
        trace.append((match, reward, action))
        if step % 12 == 11:
            learner.end_schedule()
    return trace


@pytest.mark.parametrize("policy", sorted(set(POLICIES) - set(SAMPLER_FAULTS)))  # those choose among ACTIONS
@pytest.mark.parametrize("reward", ["paper", "novelty"])
def test_checkpoint_round_trip_makes_the_same_next_choices(policy, reward):
    stream = windows(1, 200)
    original = Learner.create(policy=policy, reward=reward, seed=5)
    drive(original, stream[:95])  # stops mid-schedule, with an action in flight
    saved = original.to_checkpoint()
    restored = Learner.from_checkpoint(saved)
    assert restored.to_checkpoint() == saved
    assert drive(restored, stream[95:], start=95) == drive(original, stream[95:], start=95)
    assert restored.store.visit_counts == original.store.visit_counts
    assert restored.to_checkpoint() == original.to_checkpoint()


def test_checkpoint_with_a_pending_transition_learns_it_after_restore():
    stream = windows(2, 40)
    original = Learner.create(seed=9)
    drive(original, stream[:30])
    original.observe(stream[30])  # pending: (state, action) -> this window, not yet learnt
    restored = Learner.from_checkpoint(original.to_checkpoint())
    assert restored.next_action(ACTIONS) == original.next_action(ACTIONS)
    assert restored.policy.q == original.policy.q


def test_restored_store_gives_identical_lookups():
    stream = windows(3, 150)
    original = Learner.create(threshold=0.8)
    for summary in stream[:100]:
        original.observe(summary)
    restored = Learner.from_checkpoint(original.to_checkpoint())
    assert restored.store.lsh_params == original.store.lsh_params
    assert [restored.store.peek(s) for s in stream] == [original.store.peek(s) for s in stream]
    assert [restored.store.lookup(s) for s in stream[100:]] == [original.store.lookup(s) for s in stream[100:]]


def test_observe_then_act_learns_from_the_first_window_after_the_action():
    rng = random.Random(4)
    a, b = random_summary(rng, 50), random_summary(rng, 50)
    learner = Learner.create(policy="qlearning", reward="paper", seed=1)
    match, reward = learner.observe(a)
    assert (match.state_id, match.is_new, reward) == (0, True, 0.0)
    first = learner.next_action(ACTIONS)
    match, reward = learner.observe(a)  # back in a seen state: reward -1, learnt at the next choice
    assert (match.state_id, match.is_new, reward) == (0, False, -1.0)
    assert learner.policy.q == {}
    second = learner.next_action(ACTIONS)
    assert learner.policy.q_value(0, first) == 0.0 + 0.1 * (-1.0 + 0.6 * 0.0 - 0.0)
    before = learner.policy.q_value(0, second)
    assert learner.observe(b)[1] == 0.0  # the first window after `second`: a new state
    assert learner.observe(a)[1] == -1.0  # a later window: it only moves the state
    assert learner.state == 0
    learner.end_schedule()  # terminal update with the reward of b, no bootstrap
    assert learner.policy.q_value(0, second) == before + 0.1 * (0.0 - before)
    assert learner.state is None
    with pytest.raises(MalloryError, match="observe a window"):
        learner.next_action(ACTIONS)


def test_tuple_actions_round_trip_and_unwritable_actions_are_user_errors():
    learner = Learner.create(seed=2)
    actions = [("partition", "majority"), ("kill", 1), None]
    learner.observe(frozenset({"x"}))
    learner.next_action(actions)
    learner.observe(frozenset({"y"}))
    learner.next_action(actions)
    restored = Learner.from_checkpoint(learner.to_checkpoint())
    assert restored.policy.q == learner.policy.q
    learner.observe(frozenset({"z"}))
    learner.next_action([object()])
    learner.observe(frozenset({"z"}))
    learner.next_action(actions)
    with pytest.raises(MalloryError, match="cannot be checkpointed"):
        learner.to_checkpoint()


def good_document() -> dict:
    learner = Learner.create(seed=3)
    drive(learner, windows(5, 20))
    learner.observe(frozenset({"tail"}))
    return orjson.loads(learner.to_checkpoint())


def mutations():
    def set_path(path, value):
        def mutate(doc):
            node = doc
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
            return doc

        return mutate

    def delete(path):
        def mutate(doc):
            node = doc
            for key in path[:-1]:
                node = node[key]
            del node[path[-1]]
            return doc

        return mutate

    return {
        "foreign format": set_path(["format"], "something-else"),
        "future version": set_path(["version"], 2),
        "no store": delete(["store"]),
        "bad num_perm type": set_path(["store", "num_perm"], "128"),
        "bad threshold": set_path(["store", "threshold"], 7),
        "bool seed": set_path(["store", "seed"], True),
        "bad base64": set_path(["store", "signatures", "b64"], "***"),
        "short signatures": set_path(["store", "signatures", "shape"], [1, 128]),
        "wrong dtype": set_path(["store", "signatures", "dtype"], "float64"),
        "visits mismatch": set_path(["store", "visits"], [1]),
        "zero visits": lambda d: (d["store"]["visits"].__setitem__(0, 0), d)[1],
        "even permutation": set_path(["store", "permutations", "b64"], base64.b64encode(bytes(1024)).decode()),
        "too many bands": set_path(["store", "lsh_bands"], 200),
        "unknown policy": set_path(["policy", "name"], "ucb"),
        "bad policy param": set_path(["policy", "params", "alpha"], 3),
        "bad rng": set_path(["policy", "rng"], [3, [1, 2], None]),
        "bad q row": set_path(["policy", "q"], [[0, "a"]]),
        "unknown reward": set_path(["reward", "name"], "bonus"),
        "state out of range": set_path(["state"], 10_000),
        "bad pending": set_path(["pending"], [0, "a", "x", 0]),
        "q action object": set_path(["policy", "q"], [[0, {"a": 1}, 0.5]]),
    }


@pytest.mark.parametrize("name", sorted(mutations()))
def test_corrupt_checkpoints_are_user_errors(name):
    document = mutations()[name](good_document())
    with pytest.raises(MalloryError, match="bad learner checkpoint"):
        Learner.from_checkpoint(orjson.dumps(document))


@pytest.mark.parametrize("data", [b"", b"not json", b"[1, 2]", b'{"format": "mallory-learner"}', b"\x80\x04pickle"])
def test_foreign_bytes_are_user_errors(data):
    with pytest.raises(MalloryError, match="bad learner checkpoint"):
        Learner.from_checkpoint(data)


def test_truncated_checkpoint_is_a_user_error():
    learner = Learner.create()
    drive(learner, windows(6, 30))
    data = learner.to_checkpoint()
    with pytest.raises(MalloryError, match="bad learner checkpoint"):
        Learner.from_checkpoint(data[: len(data) // 2])


DRIVER = """
import hashlib, random, sys
from mallory.learner.learner import LEVEL_STRIDE, WAYPOINT_REWARD, Learner
from tests.unit.learner.test_learner import ACTIONS, windows
learner = Learner.create(policy=sys.argv[1], reward="novelty", seed=4)
trace = []
for step, summary in enumerate(windows(8, 120)):
    match, reward = learner.observe(summary)
    trace.append((match.state_id, reward, learner.next_action(frozenset(ACTIONS))))
    if step % 12 == 11:
        learner.end_schedule()
print(hashlib.sha256(repr(trace).encode() + learner.to_checkpoint()).hexdigest())
"""


@pytest.mark.parametrize("policy", ["qlearning", "epsilon-greedy"])
def test_runs_are_identical_across_processes_with_different_hash_seeds(policy):
    import os
    import subprocess
    import sys

    from mallory.paths import HOME as root

    digests = set()
    for hash_seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(root)}
        done = subprocess.run(
            [sys.executable, "-c", DRIVER, policy], env=env, cwd=root, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        digests.add(done.stdout.strip())
    assert len(digests) == 1


def test_pairs_accumulate_into_coverage_and_survive_a_checkpoint():
    learner = Learner.create(policy="random", reward="pairs", seed=1)
    assert learner.observe(frozenset({"x"}), {"a>b", "b>c"})[1] == 0.0  # new pairs
    assert learner.observe(frozenset({"y"}), {"a>b"})[1] == -1.0  # a new state, but no new pair
    assert learner.observe_window(None, {"c>d"}) is None  # late: nothing counted
    assert learner.coverage.counts == {"a>b": 2, "b>c": 1}
    restored = Learner.from_checkpoint(learner.to_checkpoint())
    assert restored.coverage.counts == learner.coverage.counts


def test_a_checkpoint_from_before_coverage_and_waypoints_still_resumes():
    learner = Learner.create(seed=3)
    drive(learner, windows(5, 20))
    document = orjson.loads(learner.to_checkpoint())
    del document["coverage"], document["level"]
    restored = Learner.from_checkpoint(orjson.dumps(document))
    assert len(restored.coverage) == 0 and restored.level == 0
    assert restored.next_action(ACTIONS) == learner.next_action(ACTIONS)


def test_waypoints_raise_the_level_once_and_give_the_policy_a_table_per_level():
    rng = random.Random(7)
    a, b = random_summary(rng, 40), random_summary(rng, 40)
    learner = Learner.create(policy="qlearning", reward="paper", seed=2)
    match, reward = learner.observe(a)
    assert (learner.level, learner.state, reward) == (0, match.state_id, 0.0)
    first = learner.next_action(ACTIONS)
    match, reward = learner.observe(b, waypoint=2)  # a new state that reaches waypoint 2
    assert reward == 0.0 + WAYPOINT_REWARD and learner.level == 2
    assert learner.state == 2 * LEVEL_STRIDE + match.state_id
    learner.next_action(ACTIONS)  # learns (level 0, a) --first--> (level 2, b)
    assert learner.policy.q_value(0, first) == 0.1 * (WAYPOINT_REWARD + 0.6 * 0.0)
    match, reward = learner.observe(a, waypoint=1)  # lower waypoints neither lower nor pay
    assert reward == -1.0 and learner.level == 2 and learner.state == 2 * LEVEL_STRIDE + match.state_id
    restored = Learner.from_checkpoint(learner.to_checkpoint())
    assert (restored.level, restored.state) == (learner.level, learner.state)
    learner.end_schedule()
    assert learner.level == 0
    with pytest.raises(MalloryError, match="waypoint level"):
        learner.observe(a, waypoint=-1)


def test_the_faults_context_learns_over_fault_configurations_not_window_states():
    """With context "faults" the policy's state is the multiset of fault families in
    force: two different windows under the same faults are one context, and the same
    window under other faults another; the store still counts the windows' states."""
    rng = random.Random(3)
    a, b = random_summary(rng, 40), random_summary(rng, 40)
    learner = Learner.create(policy="qlearning", seed=1, context="faults")
    learner.observe(a, faults=[])
    assert learner.state == 0
    first = learner.next_action(ACTIONS)
    learner.observe(a, faults=["partition"])  # a seen window: reward -1
    assert learner.state == 1 and len(learner.store) == 1
    learner.next_action(ACTIONS)
    assert learner.policy.q_value(0, first) == 0.1 * -1.0  # learnt for (no faults) -> first
    learner.observe(a, faults=["kill", "partition"])
    learner.observe(b, faults=["partition", "kill"])  # order does not matter
    assert learner.state == 2 and learner.configurations == {(): 0, ("partition",): 1, ("kill", "partition"): 2}
    restored = Learner.from_checkpoint(learner.to_checkpoint())
    assert (restored.context, restored.configurations, restored.state) == ("faults", learner.configurations, 2)
    assert restored.next_action(ACTIONS) == learner.next_action(ACTIONS)
    with pytest.raises(MalloryError, match="unknown learner context 'mood'"):
        Learner.create(context="mood")
    document = orjson.loads(learner.to_checkpoint())
    document["context"] = "mood"
    with pytest.raises(MalloryError, match="bad learner checkpoint: checkpoint.context 'mood'"):
        Learner.from_checkpoint(orjson.dumps(document))


def test_a_checkpoint_from_before_contexts_learns_over_states():
    learner = Learner.create(seed=3)
    drive(learner, windows(5, 20))
    document = orjson.loads(learner.to_checkpoint())
    del document["context"], document["configurations"]
    restored = Learner.from_checkpoint(orjson.dumps(document))
    assert restored.context == "state" and restored.next_action(ACTIONS) == learner.next_action(ACTIONS)


def test_an_action_taken_elsewhere_is_learnt_as_the_transition_the_cluster_went_through():
    """`take` stands for `next_action` when a worker chose from a copy of the policy: the
    update lands on the action taken, even over an answer `next_action` already gave."""
    rng = random.Random(4)
    a = random_summary(rng, 50)
    learner = Learner.create(policy="qlearning", reward="paper", seed=1)
    learner.observe(a)
    chosen = learner.next_action(ACTIONS)
    taken = next(action for action in ACTIONS if action != chosen)
    learner.take(taken, ACTIONS)  # the worker fell back and took another action
    learner.observe(a)  # seen again: reward -1
    learner.take(ACTIONS[0], ACTIONS)
    assert learner.policy.q_value(0, taken) == 0.1 * -1.0
    assert learner.policy.q_value(0, chosen) == 0.0
    with pytest.raises(MalloryError, match="not one of the actions offered"):
        learner.take("membership:add", ACTIONS)
    learner.end_schedule()
    with pytest.raises(MalloryError, match="observe a window"):
        learner.take(ACTIONS[0], ACTIONS)


def test_forks_share_what_is_learnt_and_keep_their_own_trajectories():
    rng = random.Random(6)
    a, b, c = (random_summary(rng, 60) for _ in range(3))
    main = Learner.create(policy="qlearning", reward="paper", seed=1, context="faults")
    one, two = main.fork(), main.fork()
    one.observe(a, pairs=["x>y"], faults=["kill"])
    two.observe(b, pairs=["y>z"], faults=["partition"])
    assert len(main.store) == 2 and len(main.coverage) == 2
    assert main.configurations == {("kill",): 0, ("partition",): 1}
    assert (one.state, two.state, main.state) == (0, 1, None)
    action = one.next_action(ACTIONS)
    one.observe(c, faults=["kill"])  # new: reward 0 ...
    two.next_action(ACTIONS)  # ... two's choice does not flush one's transition
    assert main.policy.q == {}
    one.end_schedule()
    assert action in main.policy.q[0], "one's transition is learnt into the shared table"
    assert two.state == 1, "one's schedule ending leaves two's trajectory alone"
    restored = Learner.from_checkpoint(main.to_checkpoint())
    assert len(restored.store) == 3 and restored.configurations == main.configurations
