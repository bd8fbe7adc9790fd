"""The round-fault samplers (nemesis/faults/round_schedule.py): their distributions against
the probabilities the module states (counts over many seeds), the (d, k) bounds, well-formed
and deterministic schedules, and the pattern bound against an exact enumeration."""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections import Counter

import pytest

from mallory.errors import MalloryError
from nemesis.faults.round_schedule import (
    Round,
    RoundFault,
    fault_probability,
    incident_links,
    lossy_sync_rounds,
    pattern_bound,
    poisson_crashes,
    random_drop_rounds,
    recovery_after,
    schedule_probability,
)

NODES = ["n1", "n2", "n3"]
#: chi-square critical values at p = 0.001 by degrees of freedom
CHI2_CRIT_001 = {3: 16.27, 45: 80.08}


def chi_square(counts: Counter, expected: dict, n: int) -> float:
    return sum((counts[key] - n * p) ** 2 / (n * p) for key, p in expected.items())


def one_round_outcomes(nodes, d, kind, eligible=None):
    """Every round the sampler can draw from `eligible` (all nodes when None), with the
    stated probability of each, enumerated independently of the sampler."""
    eligible = list(nodes) if eligible is None else eligible
    big = min(d, len(eligible))
    out = {}
    for m in range(big + 1):
        for chosen in itertools.combinations(eligible, m):
            per_node = []
            for node in chosen:
                links = incident_links(node, nodes)
                options = [(RoundFault(node, "isolate", tuple(sorted(links))), 1.0 if kind == "isolate" else 0.5)]
                if kind == "lossy-sync":
                    for size in range(1, len(links)):
                        for subset in itertools.combinations(links, size):
                            options.append((RoundFault(node, "lossy", tuple(sorted(subset))), 0.5 / (2 ** len(links) - 2)))
                per_node.append(options)
            for combo in itertools.product(*per_node):
                faults = tuple(f for f, _ in combo)
                key = Round(faults, tuple(sorted({link for f in faults for link in f.links})))
                out[key] = math.prod(q for _, q in combo) / (big + 1) / math.comb(len(eligible), m)
    return out


@pytest.mark.parametrize("kind, dof", [("isolate", 3), ("lossy-sync", 45)])
def test_one_round_follows_the_stated_distribution(kind, dof):
    expected = one_round_outcomes(NODES, 1, kind)
    assert len(expected) == dof + 1  # 1 + 3 (isolate) or 1 + 3 * (1 + 14) (lossy-sync)
    assert math.fsum(expected.values()) == pytest.approx(1.0)
    for outcome, p in expected.items():  # the module's exact probability is the enumerated one
        assert schedule_probability([outcome], NODES, 1, 0, kind) == pytest.approx(p)
    n = 40_000
    counts = Counter(lossy_sync_rounds(random.Random(seed), NODES, 1, 1, 0, kind)[0] for seed in range(n))
    assert set(counts) <= set(expected)
    assert chi_square(counts, expected, n) < CHI2_CRIT_001[dof]


def test_with_d_two_and_a_recovering_node_the_draw_is_among_the_eligible_only():
    expected = one_round_outcomes(NODES, 2, "isolate", eligible=["n1", "n3"])
    n = 20_000
    counts = Counter(lossy_sync_rounds(random.Random(seed), NODES, 1, 2, 3, "isolate", {"n2": 1})[0] for seed in range(n))
    assert set(counts) == set(expected)  # n2 never faulty; m in 0..2 over {n1, n3}
    assert chi_square(counts, expected, n) < CHI2_CRIT_001[3]


@pytest.mark.parametrize("d, k", [(1, 0), (1, 1), (2, 2), (3, 1)])
def test_d_and_k_hold_in_every_round_across_two_schedules(d, k):
    nodes = ["n1", "n2", "n3", "n4", "n5"]
    faulty_counts = Counter()
    for seed in range(300):
        rng = random.Random(seed)
        first = lossy_sync_rounds(rng, nodes, 9, d, k)
        carried = recovery_after(first, nodes, k)
        second = lossy_sync_rounds(rng, nodes, 9, d, k, recovering=carried)
        last_faulty: dict[str, int] = {}
        for index, round_ in enumerate([*first, *second]):
            faulty = [f.node for f in round_.faults]
            faulty_counts[len(faulty)] += 1
            assert len(faulty) <= d and len(set(faulty)) == len(faulty)
            for node in faulty:
                assert index - last_faulty.get(node, -k - 1) > k, (seed, index, node)
                last_faulty[node] = index
        assert schedule_probability(first, nodes, d, k) > 0
        assert schedule_probability(second, nodes, d, k, recovering=carried) > 0
    assert set(faulty_counts) == set(range(d + 1))  # every count up to d happens


def test_schedules_are_well_formed_and_deterministic_under_a_seed():
    for seed in range(50):
        a = lossy_sync_rounds(random.Random(seed), NODES, 12, 2, 1)
        assert a == lossy_sync_rounds(random.Random(seed), NODES, 12, 2, 1)
        for round_ in a:
            assert list(round_.links) == sorted({link for f in round_.faults for link in f.links})
            for fault in round_.faults:
                own = set(incident_links(fault.node, NODES))
                assert fault.links and set(fault.links) <= own and list(fault.links) == sorted(fault.links)
                assert (set(fault.links) == own) == (fault.how == "isolate")
    assert random_drop_rounds(random.Random(3), NODES, 8, 0.3) == random_drop_rounds(random.Random(3), NODES, 8, 0.3)
    assert poisson_crashes(random.Random(3), NODES, 30.0, 0.5, 1.0) == poisson_crashes(random.Random(3), NODES, 30.0, 0.5, 1.0)
    assert len({tuple(lossy_sync_rounds(random.Random(s), NODES, 12, 1, 1)) for s in range(20)}) == 20


def test_schedules_the_sampler_cannot_draw_have_probability_zero():
    isolate_n1 = Round((RoundFault("n1", "isolate", tuple(sorted(incident_links("n1", NODES)))),),
                       tuple(sorted(incident_links("n1", NODES))))
    isolate_n2 = Round((RoundFault("n2", "isolate", tuple(sorted(incident_links("n2", NODES)))),),
                       tuple(sorted(incident_links("n2", NODES))))
    both = Round(isolate_n1.faults + isolate_n2.faults, tuple(sorted(set(isolate_n1.links) | set(isolate_n2.links))))
    assert schedule_probability([isolate_n1, isolate_n1], NODES, 1, 0) == pytest.approx((1 / 2 / 3 / 2) ** 2)
    assert schedule_probability([isolate_n1, isolate_n1], NODES, 1, 1) == 0.0  # n1 had to recover
    assert schedule_probability([both], NODES, 1, 0) == 0.0  # more than d
    assert schedule_probability([Round(isolate_n1.faults, ())], NODES, 1, 0) == 0.0  # links do not add up
    lossy_everything = Round((RoundFault("n1", "lossy", isolate_n1.links),), isolate_n1.links)
    assert schedule_probability([lossy_everything], NODES, 1, 0) == 0.0  # lossy is a proper subset


def test_the_pattern_bound_holds_against_an_exact_enumeration_and_the_counts():
    """Pattern: n1 isolated in round 1, n2 in round 3, under d = 1, k = 1 ("isolate"), in 5
    rounds whatever else happens. Its exact probability is the sum over every schedule
    containing it; the sampler's frequency matches that, and both are above the bound."""
    d, k, rounds = 1, 1, 5
    choices = list(one_round_outcomes(NODES, d, "isolate"))  # empty, or one node isolated

    def contains(schedule):
        return ({f.node for f in schedule[1].faults} == {"n1"} and {f.node for f in schedule[3].faults} == {"n2"})

    exact = math.fsum(schedule_probability(list(s), NODES, d, k, "isolate")
                      for s in itertools.product(choices, repeat=rounds) if contains(s))
    bound = pattern_bound(fault_probability(choices[1].faults[0], NODES, "isolate"), 2, len(NODES), d, k)
    assert bound == pytest.approx((1 / (3 * 2 ** 2)) ** 2)
    assert exact >= bound
    n = 30_000
    hits = sum(contains(lossy_sync_rounds(random.Random(seed), NODES, rounds, d, k, "isolate")) for seed in range(n))
    sigma = math.sqrt(exact * (1 - exact) / n)
    assert abs(hits / n - exact) < 4 * sigma, (hits / n, exact)


def test_a_probability_sums_to_one_over_every_two_round_schedule():
    choices = list(one_round_outcomes(NODES, 1, "lossy-sync"))
    total = math.fsum(schedule_probability([a, b], NODES, 1, 1) for a in choices for b in choices)
    assert total == pytest.approx(1.0)


def test_random_drop_loses_each_link_round_with_probability_p():
    p, n = 0.3, 4000
    dropped = Counter()
    for seed in range(n):
        (round_,) = random_drop_rounds(random.Random(seed), NODES, 1, p)
        assert not round_.faults
        dropped.update(round_.links)
    links = [(a, b) for a in NODES for b in NODES if a != b]
    assert set(dropped) == set(links)
    for link in links:  # binomial(n, p) each: within 4 standard deviations
        assert abs(dropped[link] - n * p) < 4 * math.sqrt(n * p * (1 - p)), (link, dropped[link])
    assert random_drop_rounds(random.Random(1), NODES, 3, 0.0) == [Round((), ())] * 3


def test_poisson_crashes_arrive_at_rate_lambda_and_never_overlap_on_a_node():
    rate, duration, n = 0.5, 20.0, 3000
    counts = [len(poisson_crashes(random.Random(seed), NODES, duration, rate, 0.0)) for seed in range(n)]
    # Poisson(rate * duration) = Poisson(10): mean and variance 10, within a few standard errors
    assert abs(statistics.fmean(counts) - 10) < 4 * math.sqrt(10 / n)
    assert abs(statistics.variance(counts) - 10) < 1.0
    for seed in range(200):
        crashes = poisson_crashes(random.Random(seed), NODES, 10.0, 2.0, 1.5)
        assert [c.at_s for c in crashes] == sorted(c.at_s for c in crashes)
        for c in crashes:
            assert 0 <= c.at_s < c.back_s <= 10.0 and c.back_s == min(c.at_s + 1.5, 10.0)
            assert not any(o is not c and o.node == c.node and o.at_s <= c.at_s < o.back_s for o in crashes)


@pytest.mark.parametrize("call, message", [
    (lambda: lossy_sync_rounds(random.Random(0), NODES, 3, 0, 1), "d must be an integer >= 1, got 0"),
    (lambda: lossy_sync_rounds(random.Random(0), NODES, 3, 1, -1), "k must be an integer >= 0, got -1"),
    (lambda: lossy_sync_rounds(random.Random(0), NODES, 3, 1, 1, "partition"), "unknown kind 'partition'"),
    (lambda: lossy_sync_rounds(random.Random(0), ["n1"], 3, 1, 1), "at least two distinct nodes"),
    (lambda: random_drop_rounds(random.Random(0), NODES, 3, 1.5), "p must be a probability in [0, 1], got 1.5"),
    (lambda: poisson_crashes(random.Random(0), NODES, 3.0, 0, 1.0), "rate must be a positive number"),
])
def test_bad_parameters_are_one_line_errors(call, message):
    with pytest.raises(MalloryError) as raised:
        call()
    assert message in str(raised.value) and "\n" not in str(raised.value)
