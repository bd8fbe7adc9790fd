"""The linearizability checker on small hand-made histories whose answer is known."""

from __future__ import annotations

import gc
import random

import pytest

from mallory.history.edn import Keyword
from mallory.history.ops import Op, read_history_text
from mallory.oracles.linearizability import check_linearizable
from mallory.mediator.memory import pymalloc_account
from mallory.oracles.models import make_model


class H:
    """Build a register history: calls and returns in real-time order."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def inv(self, p, f, value=None):
        self.ops.append(Op(len(self.ops), p, Keyword("invoke"), Keyword(f), value))
        return self

    def ret(self, p, f, value=None, typ="ok"):
        self.ops.append(Op(len(self.ops), p, Keyword(typ), Keyword(f), value))
        return self


def cas():
    return make_model("cas-register", 0)


def test_sequential_register_is_linearizable():
    h = H().inv(0, "write", 1).ret(0, "write", 1).inv(0, "read").ret(0, "read", 1)
    assert check_linearizable(h.ops, cas()).valid is True


def test_stale_read_after_completed_write_is_not():
    h = H().inv(0, "write", 1).ret(0, "write", 1).inv(1, "read").ret(1, "read", 0)
    r = check_linearizable(h.ops, cas())
    assert r.valid is False
    case = r.anomalies["nonlinearizable"][0]
    assert case["prefix_length"] == 1 and case["stuck_op"]["op"] == "read -> 0"
    assert "cannot be placed" in r.explanation[0]


def test_concurrent_read_may_see_either_value():
    for seen in (0, 1):
        h = H().inv(0, "write", 1).inv(1, "read").ret(1, "read", seen).ret(0, "write", 1)
        assert check_linearizable(h.ops, cas()).valid is True


def test_indeterminate_write_may_or_may_not_take_effect():
    took = H().inv(0, "write", 1).ret(0, "write", 1, "info").inv(1, "read").ret(1, "read", 1)
    never = H().inv(0, "write", 1).ret(0, "write", 1, "info").inv(1, "read").ret(1, "read", 0)
    unmatched = H().inv(0, "write", 1).inv(1, "read").ret(1, "read", 0).inv(1, "read").ret(1, "read", 1)
    for h in (took, never, unmatched):
        assert check_linearizable(h.ops, cas()).valid is True
    # ...but once seen, it cannot be unseen
    flip = H().inv(0, "write", 1).ret(0, "write", 1, "info").inv(1, "read").ret(1, "read", 1) \
        .inv(1, "read").ret(1, "read", 0)
    assert check_linearizable(flip.ops, cas()).valid is False


def test_failed_ops_have_no_effect_and_cas_needs_the_old_value():
    h = H().inv(0, "write", 5).ret(0, "write", 5, "fail").inv(1, "read").ret(1, "read", 0)
    assert check_linearizable(h.ops, cas()).valid is True
    ok_cas = H().inv(0, "cas", [0, 2]).ret(0, "cas", [0, 2]).inv(1, "read").ret(1, "read", 2)
    assert check_linearizable(ok_cas.ops, cas()).valid is True
    bad_cas = H().inv(0, "cas", [3, 2]).ret(0, "cas", [3, 2])
    assert check_linearizable(bad_cas.ops, cas()).valid is False


def test_mutex_double_acquire_is_not_linearizable():
    h = H().inv(0, "acquire").ret(0, "acquire").inv(1, "acquire").ret(1, "acquire")
    assert check_linearizable(h.ops, make_model("mutex")).valid is False
    h2 = H().inv(0, "acquire").ret(0, "acquire").inv(0, "release").ret(0, "release") \
        .inv(1, "acquire").ret(1, "acquire")
    assert check_linearizable(h2.ops, make_model("mutex")).valid is True


def test_etcd_flavour_failed_cas_observed_a_mismatch():
    log = "\n".join([
        "INFO  jepsen.util - 0\t:invoke\t:write\t1",
        "INFO  jepsen.util - 0\t:ok\t:write\t1",
        "INFO  jepsen.util - 1\t:invoke\t:cas\t[1 2]",
        "INFO  jepsen.util - 1\t:fail\t:cas\t[1 2]",
    ])
    fmt, ops = read_history_text(log)
    assert fmt == "porcupine-etcd"
    etcd = make_model("cas-register", None, "etcd")
    assert check_linearizable(ops, etcd).valid is False  # the value was 1, the cas must have matched
    knossos = make_model("cas-register", None, "knossos")
    assert check_linearizable(ops, knossos).valid is True  # Knossos drops failed ops


def test_kv_is_checked_per_key_and_names_the_key():
    lines = "\n".join([
        '{:process 0, :type :invoke, :f :put, :key "a", :value "x"}',
        '{:process 0, :type :ok, :f :put, :key "a", :value "x"}',
        '{:process 1, :type :invoke, :f :append, :key "b", :value "y"}',
        '{:process 1, :type :ok, :f :append, :key "b", :value "y"}',
        '{:process 0, :type :invoke, :f :get, :key "a", :value nil}',
        '{:process 0, :type :ok, :f :get, :key "a", :value "x"}',
        '{:process 1, :type :invoke, :f :get, :key "b", :value nil}',
        '{:process 1, :type :ok, :f :get, :key "b", :value "yy"}',
    ])
    fmt, ops = read_history_text(lines)
    assert fmt == "porcupine-kv"
    r = check_linearizable(ops, make_model("kv"))
    assert r.valid is False
    assert r.stats["partitions"] == 2
    assert r.anomalies["nonlinearizable"][0]["key"] == "'b'"


def hard_history(n_procs: int, n_ops: int, seed: int) -> list[Op]:
    """Many concurrent writes that never complete plus reads of values never written:
    the search must explore a huge space before it can say no."""
    rng = random.Random(seed)
    h = H()
    for p in range(n_procs):
        h.inv(p, "write", p + 1)
    for i in range(n_ops):
        p = n_procs + i
        h.inv(p, "read").ret(p, "read", rng.randint(1, n_procs))
    h.inv(10_000, "read").ret(10_000, "read", 999)
    return h.ops


def test_budget_exhaustion_is_unknown():
    ops = hard_history(18, 200, 1)
    r = check_linearizable(ops, cas(), max_states=2_000)
    assert r.valid == "unknown"
    assert "states" in r.explanation[0]
    r = check_linearizable(ops, cas(), time_limit=0.0)
    assert r.valid == "unknown"
    r = check_linearizable(ops, cas(), memory_limit=1_000_000)
    assert r.valid == "unknown" and "memory" in r.explanation[0]


def _random_register_history(seed: int) -> list[Op]:
    rng = random.Random(seed)
    h = H()
    open_: dict[int, tuple[str, object]] = {}
    state = 0
    # A random concurrent history of a real register (so mostly linearizable), with a
    # corrupted read now and then; compare with an exhaustive permutation search.
    events = []
    for _ in range(8):
        p = rng.randrange(3)
        if p in open_:
            f, v = open_.pop(p)
            if f == "write":
                state = v
                events.append(("ret", p, f, v))
            else:
                val = state if rng.random() > 0.2 else rng.randint(0, 3)
                events.append(("ret", p, f, val))
        else:
            if rng.random() < 0.5:
                v = rng.randint(0, 3)
                open_[p] = ("write", v)
                events.append(("inv", p, "write", v))
            else:
                open_[p] = ("read", None)
                events.append(("inv", p, "read", None))
    for kind, p, f, v in events:
        (h.inv if kind == "inv" else h.ret)(p, f, v)
    return h.ops


def test_agrees_with_brute_force_on_small_random_histories():
    verdicts = []
    for seed in range(60):
        ops = _random_register_history(seed)
        got = check_linearizable(ops, cas()).valid
        assert got is _brute_force(ops), seed
        verdicts.append(got)
    assert True in verdicts and False in verdicts  # both answers were exercised


def _brute_force(ops: list[Op]) -> bool:
    import itertools

    from mallory.history.ops import pair_calls

    calls = pair_calls(ops)
    done = [c for c in calls if c.done is not None]
    pending = [c for c in calls if c.done is None and c.f == "write"]
    for k in range(len(pending) + 1):
        for chosen in itertools.combinations(pending, k):
            group = done + list(chosen)
            for order in itertools.permutations(group):
                ok, state = True, 0
                for i, c in enumerate(order):
                    # real time: nothing later in the order may have completed before c began
                    if any(d.done is not None and d.end < c.start for d in order[i + 1:]):
                        ok = False
                        break
                    if c.f == "write":
                        state = c.invoke.value
                    elif c.done.value != state:
                        ok = False
                        break
                if ok:
                    return True
    return False


@pytest.mark.skipif(pymalloc_account() is None, reason="no pymalloc statistics here")
def test_a_large_search_gives_its_memory_back():
    """The memo of a search that gave up on its budget (~40 MB of tuples here) must not stay
    resident in pymalloc's arenas after the check, as a long campaign checks many histories."""
    gc.collect()
    before = pymalloc_account()["arenas_mb"]
    r = check_linearizable(hard_history(18, 200, 1), cas(), max_states=300_000)
    assert r.valid == "unknown" and r.stats["states"] > 300_000
    assert pymalloc_account()["arenas_mb"] - before < 8
