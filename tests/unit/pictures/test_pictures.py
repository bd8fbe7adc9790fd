"""The pictures of verdicts drawn from real checker output: each cycle's transactions and
labelled dependencies, the ops around a linearizability failure, a run's latency dots and
fault periods; all well-formed SVG that says what it draws."""

from __future__ import annotations

from mallory.history.edn import Keyword
from mallory.history.ops import NEMESIS, Op, pair_calls
from mallory.oracles.check import check_history
from mallory.pictures.cycles import cycle_svg
from mallory.pictures.latency import FaultPeriod, fault_periods, latency_svg
from mallory.pictures.linear import linear_svg
from mallory.pictures.verdict import LATENCY_FILE, case_svg, run_pictures
from tests.unit.oracles.txn_histories import concurrent
from tests.unit.pictures.histories import MS, failover_history, register_history
from tests.unit.pictures.svg_checks import cycle_parts, dots, elements, parse_svg


def test_each_cycle_is_its_transactions_and_labelled_dependencies():
    result = check_history(failover_history(), "edn")
    cycles = [case for cases in result.anomalies.values() for case in cases if "cycle" in case]
    assert len(cycles) >= 3 and any(len(c["cycle"]) > 10 for c in cycles)
    for case in cycles:
        txns, deps = cycle_parts(cycle_svg(case))
        assert txns == [str(step["from"]) for step in case["cycle"]]
        assert deps == [(str(s["from"]), s["rel"], str(s["to"])) for s in case["cycle"]]
    labels = {t.text for c in cycles for t in parse_svg(cycle_svg(c)).iter("{http://www.w3.org/2000/svg}text")}
    assert {"rw", "wr", "realtime"} <= labels


def test_a_cycle_of_two_draws_its_two_arrows_apart():
    (case,) = check_history(concurrent("rx_ay1", "ry_ax1"), "edn").anomalies["G2-item"]
    root = parse_svg(cycle_svg(case))
    paths = [g.find("{http://www.w3.org/2000/svg}path").get("d") for g in elements(root, "g", "dep")]
    assert len(paths) == 2 and paths[0] != paths[1]


def test_the_ops_around_a_linearizability_failure():
    (case,) = check_history(register_history(), "edn").anomalies["nonlinearizable"]
    root = parse_svg(linear_svg(case))
    bars = elements(root, "g", "op")
    assert len(bars) == len(case["around"]) == 7
    statuses = [b.get("data-status") for b in bars]
    assert statuses.count("stuck") == 1 and statuses.count("linearized") == case["prefix_length"] == 6
    (stuck,) = [b for b in bars if b.get("data-status") == "stuck"]
    assert int(stuck.get("data-index")) == case["stuck_op"]["index"]
    assert {b.get("data-process") for b in bars} == {"0", "1", "2", "3"}
    assert len(elements(root, "line", "stuck-point")) == 1


def test_latency_dots_by_outcome_and_fault_periods():
    ops = failover_history()
    root = parse_svg(latency_svg(ops))
    calls = pair_calls(ops)
    counts = {p.get("data-type"): int(p.get("data-count")) for p in elements(root, "path", "points")}
    assert counts == {t: sum(c.status == t for c in calls) for t in ("ok", "info")}
    assert all(dots(p) == int(p.get("data-count")) for p in elements(root, "path", "points"))
    (fault,) = elements(root, "rect", "fault")
    assert fault.get("data-fault") == "kill:primaries"
    plot = [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.get("fill") == "none"][0]
    # shaded from 4 s to 8 s of a history that ends at 12 s
    end_s = max(op.time for op in ops) / 1e9
    x0, width = float(plot.get("x")), float(plot.get("width"))
    assert abs(float(fault.get("x")) - (x0 + 4 / end_s * width)) < 0.2
    assert abs(float(fault.get("width")) - 4 / end_s * width) < 0.2
    assert latency_svg(concurrent("ax1", "rx1")) is None  # no times: no plot


def test_fault_periods_from_nemesis_ops():
    def nemesis(f, ms):
        return Op(0, NEMESIS, Keyword("info"), Keyword(f), None, ms * MS)

    ops = [nemesis("partition:one", 1), nemesis("partition:one", 2), nemesis("noop", 3), nemesis("kill:one", 4),
           nemesis("heal", 5), nemesis("start", 6), nemesis("stop", 7), nemesis("pause:all", 8), nemesis("x", 9)]
    assert fault_periods(ops) == [
        FaultPeriod("partition:one", 1 * MS, 5 * MS), FaultPeriod("kill:one", 4 * MS, 5 * MS),
        FaultPeriod("start", 6 * MS, 7 * MS), FaultPeriod("pause:all", 8 * MS, 9 * MS), FaultPeriod("x", 9 * MS, 9 * MS)]


def test_a_runs_pictures_are_named_by_anomaly_and_case():
    ops = failover_history()
    result = check_history(ops, "edn")
    names = [p.name for p in run_pictures(ops, result.anomalies)]
    cycles = [f"{kind}-{k}.svg" for kind, cases in result.anomalies.items()
              for k, case in enumerate(cases, start=1) if "cycle" in case]
    assert names == [LATENCY_FILE, *cycles]
    assert case_svg(result.anomalies["incompatible-order"][0]) is None  # words, not a picture
    lin = check_history(register_history(), "edn")
    assert [p.name for p in run_pictures(register_history(), lin.anomalies)] == [LATENCY_FILE, "nonlinearizable-1.svg"]
