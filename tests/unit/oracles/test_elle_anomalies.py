"""Elle's anomaly cases rebuilt from its definitions: each is found and named, and a
near-miss history next to it (one read changed) is not flagged."""

from __future__ import annotations

import pytest

from mallory.history.edn import Keyword
from mallory.history.ops import Op
from mallory.oracles.depgraph import WW, DepGraph, strongly_connected
from mallory.oracles.elle import ElleOptions, check_elle
from tests.unit.oracles.txn_histories import HistoryBuilder, concurrent

SER = ElleOptions(consistency_models=("serializable",))


def la(ops, opts=SER):
    return check_elle(ops, "list-append", opts)


def rw(ops, opts=SER):
    return check_elle(ops, "rw-register", opts)


def assert_flags(result, anomaly):
    assert result.valid is False, result.render()
    assert anomaly in result.anomaly_types, result.render()
    assert anomaly in result.anomalies and result.anomalies[anomaly][0]["text"]


def assert_clean(result):
    assert result.valid is True, result.render()
    assert result.anomaly_types == []


# (name, anomaly, history, near-miss history, options)
LIST_APPEND_CASES = [
    ("G0", "G0",
     concurrent("ax1ay1", "ax2ay2", "rx12ry21"),
     concurrent("ax1ay1", "ax2ay2", "rx12ry12"), SER),
    ("G1a", "G1a",
     concurrent("ax1", "rx1", types={0: "fail"}),
     concurrent("ax1", "rx1", types={0: "info"}), SER),
    ("G1b", "G1b",
     concurrent("ax1ax2", "rx1"),
     concurrent("ax1ax2", "rx12"), SER),
    ("G1c (Elle's README example)", "G1c",
     concurrent("ax1ry1", "ax2ay1", "rx12"),
     concurrent("ax1ry_", "ax2ay1", "rx12"), SER),
    ("G-single-item", "G-single-item",
     concurrent("ax1", "rx1ay1", "ry1rx_"),
     concurrent("ax1", "rx1ay1", "ry1rx1"), SER),
    ("G-nonadjacent-item", "G-nonadjacent-item",
     concurrent("rx_rq1", "ax1ay1", "ry1rz_", "az1aq1"),
     concurrent("rx_rq_", "ax1ay1", "ry1rz_", "az1aq1"), SER),
    ("G2-item (write skew)", "G2-item",
     concurrent("rx_ay1", "ry_ax1"),
     concurrent("rx_ay1", "ry1ax1"), SER),
    ("internal", "internal",
     concurrent("ax1ax2ax4", "ax3rx1234"),
     concurrent("ax1ax2ax4", "ax3rx1243"), ElleOptions(consistency_models=(), anomalies=("internal",))),
    ("dirty update", "dirty-update",
     concurrent("ax1", "ax2", "rx12", types={0: "fail"}),
     concurrent("ax1", "ax2", "rx2", types={0: "fail"}), SER),
    ("duplicate elements", "duplicate-elements",
     concurrent("ax1", "rx11"),
     concurrent("ax1", "rx1"), SER),
    ("incompatible order", "incompatible-order",
     concurrent("ax1", "ax2", "rx12", "rx21"),
     concurrent("ax1", "ax2", "rx12", "rx1"), SER),
    ("lost update", "lost-update",
     concurrent("rx_ax1", "rx_ax2", "rx12"),
     concurrent("rx_ax1", "rx1ax2", "rx12"), SER),
]


@pytest.mark.parametrize("name,anomaly,bad,good,opts", LIST_APPEND_CASES, ids=[c[0] for c in LIST_APPEND_CASES])
def test_list_append_anomaly_is_named_and_near_miss_is_clean(name, anomaly, bad, good, opts):
    assert_flags(la(bad, opts), anomaly)
    assert_clean(la(good, opts))


def test_readme_example_rules_out_read_committed():
    result = la(concurrent("ax1ry1", "ax2ay1", "rx12"))
    assert result.anomaly_types == ["G1c"]
    assert result.not_models == ["read-committed"]
    assert "serializable" in result.also_not
    text = result.anomalies["G1c"][0]["text"]
    assert "a contradiction" in text and "wr" in text and "ww" in text


def test_g0_rules_out_read_uncommitted_and_names_the_cycle_edges():
    result = la(concurrent("ax1ay1", "ax2ay2", "rx12ry21"))
    assert result.anomaly_types == ["G0"]  # G1c is implied by G0 and not searched again
    assert result.not_models == ["read-uncommitted"]
    assert {step["rel"] for step in result.anomalies["G0"][0]["cycle"]} == {"ww"}


def test_unobserved_append_orders_after_the_longest_read():
    # Elle's unobserved-write-test: y never shows 1, so 1 (and 3) come after [2].
    b = HistoryBuilder()
    for p, t in enumerate(["ax1ay1", "ax2ay2", "ax3ay3", "rx12", "ry2"]):
        b.invoke(p, t)
    for p in range(5):
        b.complete(p)
    result = la(b.ops)
    assert {"G0", "G-single-item"} <= set(result.anomaly_types), result.render()


def test_internal_is_not_read_atomic():
    result = la(concurrent("ax1ax2ax4", "ax3rx1234"), ElleOptions(consistency_models=(), anomalies=("internal",)))
    assert result.anomaly_types == ["internal"]
    assert result.anomalies["internal"][0]["expected"] == "[... 3]"
    assert result.not_models == ["read-atomic"]


def test_process_variant_needs_the_process_edge():
    # T2 -wr-> T1 -process-> T3 -wr-> T2 (T1, T3 on process 0), all concurrent in real time.
    opts = ElleOptions(consistency_models=("strong-session-serializable",))

    def history(p3):
        b = HistoryBuilder()
        b.invoke(1, "ax1ry1").invoke(0, "rx1").complete(0).invoke(p3, "ay1").complete(p3).complete(1)
        return b.ops

    assert_flags(la(history(0), opts), "G1c-process")
    assert "G1c" not in la(history(0), opts).anomaly_types
    assert_clean(la(history(2), opts))


def test_realtime_variant_needs_strict_serializability():
    b = HistoryBuilder()
    b.txn(0, "ax1").txn(1, "rx_")  # the read starts after the append completed
    result = la(b.ops, ElleOptions(consistency_models=("strict-serializable",)))
    assert_flags(result, "G-single-item-realtime")
    # Elle: G-single-item-realtime implies G-nonadjacent-realtime
    assert result.not_models == ["strong-snapshot-isolation"]
    assert "strict-serializable" in result.also_not
    assert_clean(la(b.ops, SER))  # serializable allows the read to be ordered first
    assert_clean(la(concurrent("ax1", "rx_"), ElleOptions(consistency_models=("strict-serializable",))))


G_SINGLE_ITEM = HistoryBuilder().txn(0, "ax1ay1").txn(0, "rx1ry").ops  # T0 -wr-> T1 -rw-> T0, on x and y
G_NONADJACENT_ITEM = concurrent("rx_rq1", "ax1ay1", "ry1rz_", "az1aq1")
WRITE_SKEW = concurrent("rx_ay1", "ry_ax1")  # G2-item alone: two adjacent rw edges


def test_repeatable_read_prohibits_g_single_item():
    # Elle's list_append_test.clj:1118: G-single-item implies G-nonadjacent-item, which implies G2-item
    result = la(G_SINGLE_ITEM, ElleOptions(consistency_models=("repeatable-read",)))
    assert result.valid is False and result.anomaly_types == ["G-single-item"], result.render()
    assert result.not_models == ["consistent-view", "repeatable-read"]


@pytest.mark.parametrize("models,anomalies,history,found", [
    (("consistent-view",), (), G_SINGLE_ITEM, ["G-single-item"]),
    ((), ("G-single",), G_SINGLE_ITEM, ["G-single-item"]),
    (("snapshot-isolation",), (), G_NONADJACENT_ITEM, ["G-nonadjacent-item"]),
    ((), ("G-nonadjacent",), G_NONADJACENT_ITEM, ["G-nonadjacent-item"]),
    (("consistent-view",), (), WRITE_SKEW, []),
    (("snapshot-isolation",), (), WRITE_SKEW, []),
    (("repeatable-read",), (), WRITE_SKEW, ["G2-item"]),
], ids=["consistent-view G-single-item", "G-single G-single-item", "snapshot-isolation G-nonadjacent-item",
        "G-nonadjacent G-nonadjacent-item", "consistent-view write skew", "snapshot-isolation write skew",
        "repeatable-read write skew"])
def test_asking_for_an_anomaly_finds_the_item_cycles_that_imply_it(models, anomalies, history, found):
    result = la(history, ElleOptions(consistency_models=models, anomalies=anomalies))
    assert result.valid is (not found) and result.anomaly_types == found, result.render()


def test_indeterminate_append_may_have_committed():
    # An :info append observed by a read is not an aborted read, and orders like an ok one.
    result = la(concurrent("ax1", "rx1", types={0: "info"}))
    assert_clean(result)


# rw-register ----------------------------------------------------------------------------

def test_rw_register_aborted_read():
    assert_flags(rw(concurrent("wx1", "rx1", register=True, types={0: "fail"})), "G1a")
    assert_clean(rw(concurrent("wx1", "rx1", register=True)))


def test_rw_register_write_skew_from_initial_reads():
    assert_flags(rw(concurrent("rx_wy1", "ry_wx1", register=True)), "G2-item")
    assert_clean(rw(concurrent("rx_wy1", "ry1wx1", register=True)))


def test_rw_register_lost_update():
    assert_flags(rw(concurrent("rx_wx1", "rx_wx2", register=True)), "lost-update")
    assert_clean(rw(concurrent("rx_wx1", "rx1wx2", register=True)))


def test_rw_register_intermediate_read():
    assert_flags(rw(concurrent("wx1wx2", "rx1", register=True)), "G1b")
    assert_clean(rw(concurrent("wx1wx2", "rx2", register=True)))


def test_rw_register_internal():
    opts = ElleOptions(consistency_models=(), anomalies=("internal",))
    assert_flags(rw(concurrent("wx1rx2", register=True), opts), "internal")
    assert_clean(rw(concurrent("wx1rx1", register=True), opts))


def test_rw_register_cyclic_versions_with_writes_follow_reads():
    bad = concurrent("rx1wx2", "rx2wx1", register=True)
    opts = ElleOptions(consistency_models=("serializable",), wfr_keys=True)
    assert_flags(rw(bad, opts), "cyclic-versions")
    assert "cyclic-versions" not in rw(bad, SER).anomaly_types  # no version source without the option


def test_rw_register_garbage_read_is_stricter_than_elle_and_says_so():
    result = rw(concurrent("wx2", "rx3", register=True))
    assert_flags(result, "garbage-read")
    assert any("stricter" in n for n in result.notes)


def test_sequential_keys_orders_versions_by_process():
    b = HistoryBuilder(register=True)
    b.txn(0, "wx1").txn(0, "wx2").txn(1, "rx2").txn(1, "rx1")
    opts = ElleOptions(consistency_models=("serializable",), sequential_keys=True)
    result = rw(b.ops, opts)
    assert result.valid is False, result.render()
    assert_clean(rw(HistoryBuilder(register=True).txn(0, "wx1").txn(0, "wx2").txn(1, "rx1").txn(1, "rx2").ops, opts))


# budget and graph machinery ---------------------------------------------------------------

def _ring(n):
    """n transactions, each appending to its own key and reading its predecessor's: one
    wr cycle (G1c) through all n."""
    ops = []
    for typ in ("invoke", "ok"):
        for i in range(n):
            k, prev = Keyword(f"k{i}"), Keyword(f"k{(i - 1) % n}")
            read = None if typ == "invoke" else [1]
            ops.append(Op(len(ops), i, Keyword(typ), Keyword("txn"), [["append", k, 1], ["r", prev, read]]))
    return ops


def test_cycle_search_out_of_time_is_unknown_not_a_crash():
    ops = _ring(5000)
    result = la(ops, ElleOptions(consistency_models=("serializable",), time_limit=0.0))
    assert result.valid == "unknown", result.render()
    assert "cycle-search-timeout" in result.anomaly_types
    assert la(ops).valid is False  # with time, the G1c is found


def test_tarjan_is_iterative_on_a_100k_cycle():
    n = 100_000
    g = DepGraph(n)
    for i in range(n):
        g.add(i, (i + 1) % n, WW)
    comps = strongly_connected(g, WW)
    assert len(comps) == 1 and len(comps[0]) == n
    g2 = DepGraph(n)
    for i in range(n - 1):
        g2.add(i, i + 1, WW)
    assert strongly_connected(g2, WW) == []


@pytest.mark.parametrize("name,anomaly,bad,good,opts", LIST_APPEND_CASES, ids=[c[0] for c in LIST_APPEND_CASES])
def test_every_cycle_edge_is_explained_by_its_key(name, anomaly, bad, good, opts):
    result = la(bad, opts)
    for kind, cases in result.anomalies.items():
        for case in cases:
            if "cycle" in case:
                assert "dependency" not in case["text"], case["text"]
                for step in case["cycle"]:
                    if step["rel"] in ("ww", "wr", "rw"):
                        assert f"({step['rel']}" in case["text"]


def test_linearizable_keys_orders_versions_by_real_time():
    # Elle's rw_register_test: wx1, then rx2, then rx1, with :linearizable-keys? is cyclic-versions.
    b = HistoryBuilder(register=True)
    b.txn(0, "wx1").txn(1, "rx2").txn(2, "rx1")
    opts = ElleOptions(consistency_models=("serializable",), linearizable_keys=True)
    result = rw(b.ops, opts)
    assert_flags(result, "cyclic-versions")
    assert "cyclic-versions" not in rw(b.ops, SER).anomaly_types


def test_reachability_through_the_condensation():
    from mallory.oracles.depgraph import WR, Reachability

    g = DepGraph(5)
    g.add(0, 1, WW)
    g.add(1, 0, WR)  # 0 and 1 form a component
    g.add(1, 2, WW)
    g.add(3, 2, WW)
    g.add(2, 4, WR)
    reach = Reachability(g, WW | WR, set(range(5)))
    assert reach.reaches(0, 4) and reach.reaches(1, 0) and reach.reaches(3, 4)
    assert not reach.reaches(4, 0) and not reach.reaches(0, 3) and not reach.reaches(2, 1)
    only_ww = Reachability(g, WW, set(range(5)))
    assert only_ww.reaches(0, 2) and not only_ww.reaches(1, 0) and not only_ww.reaches(0, 4)
