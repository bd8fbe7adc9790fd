"""Root-cause grouping: one history, one finding, whatever its anomalies; its signature
names the checker and the class (the weakest of serializable / strong-session-serializable
/ strict-serializable it violates, or nonlinearizable), never keys, values, counts or the
mix of anomaly types; crashes are told apart by what they logged last."""

from __future__ import annotations

import signal

from mallory.history.ops import Op
from mallory.oracles.check import check_history
from mallory.oracles.logs import death_finding
from mallory.oracles.triage import deduplicate, findings_from_result, history_class
from tests.unit.oracles.txn_histories import HistoryBuilder, concurrent
from tests.unit.pictures.histories import (
    failover_history,
    register_history,
    stale_read_history,
)


def finding(ops: list[Op]):
    (found,) = findings_from_result(check_history(ops, "edn"))
    return found


def renamed(ops: list[Op], key_shift: int, value_shift: int) -> list[Op]:
    """The same history on other keys, with other values appended (and read)."""
    def mop(m):
        f, k, v = m
        v = [x + value_shift for x in v] if isinstance(v, list) else (v + value_shift if isinstance(v, int) else v)
        return [f, k + key_shift, v]
    return [Op(op.index, op.process, op.type, op.f, [mop(m) for m in op.value] if op.is_client else op.value, op.time)
            for op in ops]


def test_one_history_gives_one_finding_listing_every_anomaly_it_saw():
    result = check_history(failover_history(), "edn")
    assert len(result.anomaly_types) >= 4, result.render()
    (found,) = findings_from_result(result)
    assert found.oracle == "list-append" and found.kind == "not-serializable" and found.key == ()
    assert found.seen == tuple(result.anomaly_types)
    assert set(found.details["anomalies"]) == set(result.anomaly_types)  # the bug page shows each
    assert found.message == "list-append history not serializable: " + ", ".join(result.anomaly_types)
    assert findings_from_result(check_history(concurrent("ax1", "rx1"), "edn")) == []


def test_signature_ignores_keys_values_and_transaction_counts():
    g1c = finding(concurrent("ax1ry1", "ax2ay1", "rx12"))
    assert finding(concurrent("ay5rx7", "ay6ax7", "ry56")).signature == g1c.signature  # other keys and values
    assert finding(concurrent("az1", "ax1ry1", "ax2ay1", "rz1", "rx12", "aq3")).signature == g1c.signature  # more txns
    base = finding(failover_history())
    moved = finding(renamed(failover_history(), key_shift=1000, value_shift=50))
    assert moved.seen == base.seen and moved.signature == base.signature


def test_different_anomaly_mixes_of_one_class_are_one_bug():
    mixes = [concurrent("ax1ry1", "ax2ay1", "rx12"),  # G1c
             concurrent("rx_ay1", "ry_ax1"),  # G2-item (write skew)
             failover_history()]  # incompatible-order, G-single-item, realtime cycles
    found = [finding(ops) for ops in mixes]
    assert len({f.seen for f in found}) == 3
    (bug,) = deduplicate(found).values()
    assert bug.count == 3 and bug.first.kind == "not-serializable"


def test_classes_stay_apart():
    stale = finding(stale_read_history())  # only real time is violated: a stale read
    assert stale.kind == "not-strict-serializable" and stale.seen == ("G-single-item-realtime",)
    lost = finding(failover_history())
    rw_skew = finding(concurrent("rx_wy1", "ry_wx1", register=True))  # rw-register: another checker
    assert rw_skew.kind == "not-serializable"
    register = finding(register_history())
    assert register.oracle == "register" and register.kind == "nonlinearizable"
    assert len({f.signature for f in (stale, lost, rw_skew, register)}) == 4


def test_linearizability_is_one_class_whatever_op_cannot_be_placed():
    stuck_read = finding(register_history())
    # a read of a value nobody wrote, after a write completed: here too a read is stuck, on
    # another value, in a history of another length
    ops = [Op(0, 0, "invoke", "write", 7), Op(1, 0, "ok", "write", 7), Op(2, 1, "invoke", "read", None),
           Op(3, 1, "ok", "read", 9)]
    other = finding(ops)
    assert other.details["anomalies"]["nonlinearizable"][0]["stuck_op"]["op"] != \
        stuck_read.details["anomalies"]["nonlinearizable"][0]["stuck_op"]["op"]
    assert other.signature == stuck_read.signature


def test_history_class_is_the_weakest_model_violated():
    assert history_class(check_history(concurrent("ax1ay1", "ax2ay2", "rx12ry21"), "edn")) == "not-serializable"  # G0
    b = HistoryBuilder()
    b.txn(0, "ax1").txn(1, "rx_")
    assert history_class(check_history(b.ops, "edn")) == "not-strict-serializable"


def test_deaths_are_told_apart_by_the_last_line_logged():
    crash = "12 Nov 10:00:01.123 * Ready to accept connections\n4242:M 12 Nov 10:00:03.456 # assertion in replica 3\n"
    again = "77:M 13 Nov 11:30:09.001 # assertion in replica 5\n\n"
    other = "77:M 13 Nov 11:30:09.001 # out of memory allocating 512 bytes\n"
    first = death_finding(-signal.SIGSEGV, "n1", log=crash)
    assert first.message == "process died by SIGSEGV after: 4242:M 12 Nov 10:00:03.456 # assertion in replica 3"
    assert death_finding(-signal.SIGSEGV, "n2", log=again).signature == first.signature
    assert death_finding(-signal.SIGSEGV, "n1", log=other).signature != first.signature
    assert death_finding(-signal.SIGABRT, "n1", log=crash).signature != first.signature
    assert death_finding(-signal.SIGSEGV, "n1").key == ("SIGSEGV", "")
