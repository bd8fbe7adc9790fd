"""The model interface against toy protocols whose reachable states are known by hand."""

from __future__ import annotations

import itertools

import orjson
import pytest

from mallory.errors import MalloryError
from mallory.learner.checkpoint import CheckpointError
from mallory.learner.learner import Learner
from mallory.learner.model import (
    Model,
    ModelCoverage,
    ModelReplay,
    ModelSeen,
    ModelTrace,
    Step,
    cut_off,
    state_key,
)
from mallory.learner.rewards import make_reward
from mallory.learner.states import StateMatch

NODES = ("n1", "n2", "n3")


# A lock service: at most one holder. Reachable: free, or held by one of the n nodes
# (n + 1 states); transitions: acquire and release by each node (2n).
LOCK = {
    "NAME": "lock",
    "initial": lambda nodes: "free",
    "ACTIONS": {
        "acquire": lambda holder, step: step.node if holder == "free" else None,
        "release": lambda holder, step: "free" if holder == step.node else None,
    },
    "abstract": lambda holder: holder,
    "EVENTS": {"lock-acquired": "acquire", "lock-released": "release"},
}


def _lock_model() -> Model:
    return Model.from_namespace(LOCK, "lock")


def every_sequence(length: int) -> list[list[Step]]:
    events = [Step(e, n) for e in ("lock-acquired", "lock-released") for n in NODES]
    return [list(seq) for k in range(length + 1) for seq in itertools.product(events, repeat=k)]


def test_the_lock_reaches_its_known_states_and_transitions_and_no_more():
    model = _lock_model()
    coverage = ModelCoverage()
    for sequence in every_sequence(4):
        replay = ModelReplay(model, NODES)
        coverage.add(replay.run(sequence))
    assert set(coverage.states) == {"'free'", "'n1'", "'n2'", "'n3'"}  # n + 1
    assert len(coverage.transitions) == 2 * len(NODES)
    assert "'free' -acquire-> 'n2'" in coverage.transitions and "'n2' -release-> 'free'" in coverage.transitions


def test_a_step_the_model_cannot_take_is_a_mismatch_and_changes_nothing():
    replay = ModelReplay(_lock_model(), NODES)
    trace = replay.run([Step("lock-acquired", "n1"), Step("lock-acquired", "n2"), Step("lock-released", "n3"),
                        Step("compaction", "n2"), Step("lock-released", "n1")])
    assert trace.mismatches == ("lock-acquired", "lock-released")  # n2 while n1 held it; n3 never held it
    assert trace.states == {"'free'", "'n1'"}
    assert trace.transitions == {"'free' -acquire-> 'n1'", "'n1' -release-> 'free'"}
    coverage = ModelCoverage()
    seen = coverage.add(trace)
    assert coverage.mismatches == {"lock-acquired": 1, "lock-released": 1} and coverage.mismatch_count() == 2
    assert seen == ModelSeen(states=2, new_states=2, transitions=2, new_transitions=2, mismatches=2, rarest=1)


# Two-phase commit with a coordinator and two participants, after the textbook: a
# participant is working, prepared, committed or aborted; the coordinator commits only when
# both are prepared, and may abort while undecided. Reachable, by hand: undecided, each
# participant working, prepared or aborted (9); committed, each prepared or committed (4);
# aborted, each working, prepared or aborted (9): 22. `two_phase_reachable` counts them
# once more by search, independently of the replay.
def _tpc_model() -> Model:
    def prepare(s, st):
        c, ps = s
        return (c, {**ps, st.node: "prepared"}) if c == "init" and ps[st.node] == "working" else None

    def refuse(s, st):
        c, ps = s
        return (c, {**ps, st.node: "aborted"}) if ps[st.node] == "working" and c != "committed" else None

    def decide_commit(s, st):
        c, ps = s
        return ("committed", ps) if c == "init" and all(v == "prepared" for v in ps.values()) else None

    def decide_abort(s, st):
        c, ps = s
        return ("aborted", ps) if c == "init" else None

    def learn(s, st):
        c, ps = s
        if c == "committed" and ps[st.node] == "prepared":
            return (c, {**ps, st.node: "committed"})
        if c == "aborted" and ps[st.node] in ("working", "prepared"):
            return (c, {**ps, st.node: "aborted"})
        return None

    return Model.from_namespace({
        "NAME": "2pc",
        "initial": lambda nodes: ("init", {n: "working" for n in nodes}),
        "ACTIONS": {"prepare": prepare, "refuse": refuse, "commit": decide_commit, "abort": decide_abort,
                    "learn": learn},
        "abstract": lambda s: (s[0], tuple(sorted(s[1].items()))),
        "EVENTS": {"prepared": "prepare", "refused": "refuse", "tm-commit": "commit", "tm-abort": "abort",
                   "decision-applied": "learn"},
    }, "2pc")


def two_phase_reachable() -> int:
    """The reachable states of 2PC with two participants, by breadth-first search over the
    same rules written once more as a successor function."""
    start = ("init", ("working", "working"))
    seen, frontier = {start}, [start]
    while frontier:
        c, ps = frontier.pop()
        nexts = []
        for i, p in enumerate(ps):
            def put(v, i=i):
                return tuple(v if j == i else q for j, q in enumerate(ps))
            if c == "init" and p == "working":
                nexts.append((c, put("prepared")))
            if p == "working" and c != "committed":
                nexts.append((c, put("aborted")))
            if c == "committed" and p == "prepared":
                nexts.append((c, put("committed")))
            if c == "aborted" and p in ("working", "prepared"):
                nexts.append((c, put("aborted")))
        if c == "init" and all(p == "prepared" for p in ps):
            nexts.append(("committed", ps))
        if c == "init":
            nexts.append(("aborted", ps))
        for n in nexts:
            if n not in seen:
                seen.add(n)
                frontier.append(n)
    return len(seen)


def test_two_phase_commit_replayed_exhaustively_reaches_exactly_its_reachable_states():
    model = _tpc_model()
    nodes = ("p1", "p2")
    events = [Step("prepared", n) for n in nodes] + [Step("refused", n) for n in nodes] + [
        Step("tm-commit", "tm"), Step("tm-abort", "tm")] + [Step("decision-applied", n) for n in nodes]
    coverage = ModelCoverage()
    for k in range(6):
        for sequence in itertools.product(events, repeat=k):
            coverage.add(ModelReplay(model, nodes).run(sequence))
    assert two_phase_reachable() == 22
    assert len(coverage.states) == 22
    assert coverage.mismatch_count() > 0  # e.g. a commit before both prepared
    assert "('committed', (('p1', 'committed'), ('p2', 'committed')))" in coverage.states


def test_replay_continues_across_windows_and_restart_goes_back_to_the_initial_state():
    replay = ModelReplay(_lock_model(), NODES)
    assert replay.run([Step("lock-acquired", "n3")]).states == {"'free'", "'n3'"}
    assert replay.run([]).states == {"'n3'"}  # the state a window starts in counts
    replay.restart()
    assert replay.key() == "'free'"


def test_state_keys_are_canonical_and_refuse_what_is_not_a_value():
    assert state_key(frozenset({"b", "a"})) == state_key(frozenset({"a", "b"})) == "{'a', 'b'}"
    assert state_key((1, ("x",), None, True)) == "(1, ('x',), None, True)"
    with pytest.raises(TypeError, match="list"):
        state_key(("ok", ["no"]))


@pytest.mark.parametrize("missing", ["NAME", "initial", "ACTIONS", "abstract", "EVENTS"])
def test_a_module_without_a_name_of_the_contract_is_refused_naming_it(missing):
    namespace = dict(LOCK)
    del namespace[missing]
    with pytest.raises(MalloryError, match=f"lock.py: a model module needs {missing}"):
        Model.from_namespace(namespace, "lock.py")


def test_a_mapping_to_an_undefined_action_is_refused():
    namespace = {**LOCK, "EVENTS": {"lock-acquired": "grab"}}
    with pytest.raises(MalloryError, match="lock.py: .*does not define: grab"):
        Model.from_namespace(namespace, "lock.py")


def test_model_coverage_counts_windows_and_survives_a_checkpoint():
    coverage = ModelCoverage()
    coverage.add(ModelTrace(frozenset({"a", "b"}), frozenset({"a -x-> b"}), ("e",)))
    seen = coverage.add(ModelTrace(frozenset({"b", "c"}), frozenset({"b -y-> c"})))
    assert seen == ModelSeen(states=2, new_states=1, transitions=1, new_transitions=1, mismatches=0, rarest=1)
    assert coverage.add(ModelTrace(frozenset({"b"}))).rarest == 3
    assert coverage.add(ModelTrace(frozenset({"b"}), frozenset({"b -z-> b"}))).rarest == 1, "a new transition"
    restored = ModelCoverage.from_state(orjson.loads(orjson.dumps(coverage.to_state())))
    assert restored == coverage


@pytest.mark.parametrize("state", [{"states": [["a", 0]], "transitions": [], "mismatches": []},
                                   {"states": [], "transitions": [[1, 1]], "mismatches": []}, {"states": []}])
def test_a_corrupt_model_checkpoint_is_refused(state):
    with pytest.raises(CheckpointError, match="model"):
        ModelCoverage.from_state(state)


def test_the_model_reward_pays_for_new_model_states_and_decays_with_the_rarest():
    reward = make_reward("model")
    match = StateMatch(0, False, 1.0, 9)
    assert reward(match, model=ModelSeen(3, 1, 2, 0, 0, rarest=1)) == 0.0
    assert reward(match, model=ModelSeen(3, 0, 2, 0, 0, rarest=4)) == pytest.approx(-0.5)
    assert make_reward("model", power=1.0)(match, model=ModelSeen(3, 0, 2, 0, 0, rarest=4)) == pytest.approx(-0.75)
    assert reward(StateMatch(0, True, 1.0, 1)) == -1.0  # no model: nothing to pay for


def test_the_learner_feeds_model_traces_into_its_coverage_and_its_checkpoint():
    learner = Learner.create(policy="random", reward="model", seed=1)
    _, reward = learner.observe(frozenset({"x"}), model=ModelTrace(frozenset({"s0", "s1"}), frozenset({"s0 -a-> s1"})))
    assert reward == 0.0
    _, reward = learner.observe_window(frozenset({"y"}), model=ModelTrace(frozenset({"s1"})))
    assert reward == pytest.approx(-1 + 2**-0.5)
    assert learner.observe_window(None, model=ModelTrace(frozenset({"s9"}))) is None  # late: not counted
    assert learner.model_coverage.states == {"s0": 1, "s1": 2}
    restored = Learner.from_checkpoint(learner.to_checkpoint())
    assert restored.model_coverage == learner.model_coverage


def test_a_checkpoint_from_before_models_resumes_with_no_model_coverage():
    learner = Learner.create(seed=3)
    learner.observe(frozenset({"x"}))
    document = orjson.loads(learner.to_checkpoint())
    del document["model"]
    restored = Learner.from_checkpoint(orjson.dumps(document))
    assert restored.model_coverage == ModelCoverage()


def test_cut_off_names_the_nodes_without_a_two_way_majority():
    nodes = ("n1", "n2", "n3")
    assert cut_off(nodes, [("n3", "n1"), ("n1", "n3"), ("n3", "n2"), ("n2", "n3")]) == {"n3"}
    assert cut_off(nodes, [("n1", "n2")]) == frozenset()  # one direction lost: n1 and n2 still have n3
    assert cut_off(nodes, [("n1", "n2"), ("n3", "n1")]) == {"n1"}  # a link lost either way is no link
    assert cut_off(nodes, []) == frozenset()
