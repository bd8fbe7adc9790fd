"""Schedules of round faults (pure, no I/O): the lossy-synchronous sampler and its two
baselines, random message drop and Poisson crashes. A seeded `random.Random` in, a schedule
out; the same seed gives the same schedule.

The lossy-synchronous model (Drăgoi, Enea, Ozkan, Majumdar, Niksic: "Testing consensus
implementations using communication closure", OOPSLA'20). An execution is a sequence of
communication-closed rounds: a message sent in a round is received in that round or lost
for good. A round fault makes one process *faulty* for one round, in one of two ways:

    isolate   every message to and from it is lost (both directions of its 2(n-1) links)
    lossy     the messages of a nonempty, proper subset of its 2(n-1) directed links are lost

A schedule is (d, k)-bounded when at most d processes are faulty in every round and a
process faulty in round r is correct in rounds r+1 .. r+k: k rounds of recovery, in which it
hears everyone and is heard by everyone, before it may fail again (k = 0: none asked). The
paper prioritises executions by such a bound on the failures and the rate at which they are
recovered; this module's reading of it is the one of issue 19 (at most d faulty processes
per round, recovery periods of k rounds).

The sampler (`lossy_sync_rounds`), round after round:

    E = the processes not recovering (eligible), e = |E|, D = min(d, e)
    m ~ uniform on {0, .., D}
    F = a uniform m-subset of E
    each p in F: isolated or lossy with probability 1/2 each (kind "isolate": always
    isolated); a lossy fault loses one of the 2^(2(n-1)) - 2 nonempty proper subsets of
    p's links, uniformly

So every (d, k)-bounded schedule can be drawn, and `schedule_probability` gives its exact
probability: the product over its rounds of 1/(D+1) * 1/C(e, m) * the product over F of q,
q = 1/2 for an isolation and 1/(2 (2^(2(n-1)) - 2)) for a given lossy fault (kind "isolate":
q = 1 for an isolation). This is exponentially small in the number of rounds, as any
whole-schedule probability is; what a bug needs is a few faults at the right rounds,
whatever happens in the others.

The bound (PCT-style: it depends on how many faults a bug needs, not on how long the
schedule is). A fault pattern is c faults (round, process, fault), at most one per round,
that is itself (d, k)-bounded from the schedule's starting recovery. A sampled schedule
contains it with probability at least

    (q / (n * (d+1)^(k+1)))^c

because in a round where the pattern wants p faulty with a given fault (p eligible, as the
rounds before have kept it correct), m = 1 and F = {p} has probability 1/(D+1) * 1/e >=
1/((d+1) n), the fault then q; and in each of the (at most k) rounds before it, p is kept
correct with probability at least P(m = 0) >= 1/(d+1). For 3 nodes, d = 1, k = 1: 1/24 per
isolation under "lossy-sync", 1/12 under "isolate". tests/unit/nemesis/test_round_schedule.py
checks the exact probabilities and this bound against counts over many seeds.

The baselines:
    random drop      every directed link loses the messages of every round independently
                     with probability p (`random_drop_rounds`)
    Poisson crashes  crashes arrive as a Poisson process of rate λ per second over the
                     cluster; each kills a node chosen uniformly among those up, which is
                     restarted `downtime_s` later (`poisson_crashes`)
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mallory.errors import MalloryError
from nemesis.faults.targets import Link

#: the kinds of round fault a lossy-synchronous schedule may use
KINDS = ("isolate", "lossy-sync")


@dataclass(frozen=True)
class RoundFault:
    """One process faulty for one round: `how` is "isolate" or "lossy", `links` the
    directed links whose messages the round loses (sorted)."""

    node: str
    how: str
    links: tuple[Link, ...]


@dataclass(frozen=True)
class Round:
    """One round of a schedule: its faults (none in a random-drop round) and every
    directed link whose messages it loses (sorted, no repeats)."""

    faults: tuple[RoundFault, ...]
    links: tuple[Link, ...]


@dataclass(frozen=True)
class Crash:
    """A node killed `at_s` seconds into the schedule and started again at `back_s`."""

    at_s: float
    node: str
    back_s: float


def incident_links(node: str, nodes: Sequence[str]) -> list[Link]:
    """Both directions of every link of `node`, in a fixed order (out, then in, by peer)."""
    peers = [n for n in nodes if n != node]
    return [(node, p) for p in peers] + [(p, node) for p in peers]


def _check_nodes(nodes: Sequence[str]) -> None:
    if len(nodes) < 2 or len(set(nodes)) != len(nodes):
        raise MalloryError(f"round faults need at least two distinct nodes, got {list(nodes)}")


def _check_bounds(d: int, k: int, kind: str) -> None:
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise MalloryError(f"rounds: d must be an integer >= 1, got {d!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise MalloryError(f"rounds: k must be an integer >= 0, got {k!r}")
    if kind not in KINDS:
        raise MalloryError(f"rounds: unknown kind {kind!r} (kinds: {', '.join(KINDS)})")


def _round_of(faults: Sequence[RoundFault]) -> Round:
    return Round(tuple(faults), tuple(sorted({link for f in faults for link in f.links})))


def lossy_sync_rounds(
    rng: random.Random,
    nodes: Sequence[str],
    rounds: int,
    d: int,
    k: int,
    kind: str = "lossy-sync",
    recovering: Mapping[str, int] | None = None,
) -> list[Round]:
    """`rounds` rounds drawn as the module docstring says. `recovering`: node -> how many
    more rounds it must stay correct at the start (the tail of the schedule before this
    one, see `recovery_after`); absent nodes are eligible."""
    _check_nodes(nodes)
    _check_bounds(d, k, kind)
    left = {n: int((recovering or {}).get(n, 0)) for n in nodes}
    out = []
    for _ in range(rounds):
        eligible = [n for n in nodes if left[n] == 0]
        m = rng.randint(0, min(d, len(eligible)))
        chosen = set(rng.sample(eligible, m))
        faults = []
        for node in (n for n in nodes if n in chosen):
            links = incident_links(node, nodes)
            if kind == "isolate" or rng.random() < 0.5:
                faults.append(RoundFault(node, "isolate", tuple(sorted(links))))
                continue
            # a nonempty proper subset, uniformly: a bit mask other than none and all
            mask = rng.randint(1, 2 ** len(links) - 2)
            faults.append(RoundFault(node, "lossy", tuple(sorted(link for i, link in enumerate(links) if mask >> i & 1))))
        for node in nodes:
            left[node] = k if node in chosen else max(0, left[node] - 1)
        out.append(_round_of(faults))
    return out


def recovery_after(schedule: Sequence[Round], nodes: Sequence[str], k: int,
                   recovering: Mapping[str, int] | None = None) -> dict[str, int]:
    """node -> rounds of recovery it still owes after `schedule` (which started with
    `recovering`): what the next schedule starts with, so that recovery holds across two
    schedules drawn one after the other."""
    left = {n: int((recovering or {}).get(n, 0)) for n in nodes}
    for round_ in schedule:
        faulty = {f.node for f in round_.faults}
        for node in nodes:
            left[node] = k if node in faulty else max(0, left[node] - 1)
    return {n: v for n, v in left.items() if v}


def fault_probability(fault: RoundFault, nodes: Sequence[str], kind: str) -> float:
    """q: the probability that a process drawn faulty gets exactly this fault (0 for one
    the sampler never draws)."""
    links = set(incident_links(fault.node, nodes))
    if set(fault.links) == links and fault.how == "isolate":
        return 1.0 if kind == "isolate" else 0.5
    if kind == "isolate" or fault.how != "lossy" or not fault.links or not set(fault.links) < links:
        return 0.0
    return 0.5 / (2 ** len(links) - 2)


def schedule_probability(
    schedule: Sequence[Round],
    nodes: Sequence[str],
    d: int,
    k: int,
    kind: str = "lossy-sync",
    recovering: Mapping[str, int] | None = None,
) -> float:
    """The exact probability that `lossy_sync_rounds` with these arguments draws
    `schedule` (0.0 for one it cannot draw: not (d, k)-bounded, or not well formed)."""
    _check_nodes(nodes)
    _check_bounds(d, k, kind)
    left = {n: int((recovering or {}).get(n, 0)) for n in nodes}
    p = 1.0
    for round_ in schedule:
        faulty = [f.node for f in round_.faults]
        eligible = [n for n in nodes if left[n] == 0]
        if len(set(faulty)) != len(faulty) or not set(faulty) <= set(eligible) or len(faulty) > d:
            return 0.0
        if round_ != _round_of(sorted(round_.faults, key=lambda f: nodes.index(f.node))):
            return 0.0
        p *= 1 / (min(d, len(eligible)) + 1) / math.comb(len(eligible), len(faulty))
        for fault in round_.faults:
            p *= fault_probability(fault, nodes, kind)
        for node in nodes:
            left[node] = k if node in faulty else max(0, left[node] - 1)
    return p


def pattern_bound(q: float, faults: int, nodes: int, d: int, k: int) -> float:
    """The module docstring's lower bound on the probability that a sampled schedule of
    `nodes` nodes contains a given (d, k)-bounded pattern of `faults` faults (at most one
    per round), each of which a faulty process gets with probability `q`
    (`fault_probability`)."""
    return (q / (nodes * (d + 1) ** (k + 1))) ** faults


def random_drop_rounds(rng: random.Random, nodes: Sequence[str], rounds: int, p: float) -> list[Round]:
    """`rounds` rounds in which every directed link loses its messages independently with
    probability `p` (the random-drop baseline: no process is "faulty", links are)."""
    _check_nodes(nodes)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise MalloryError(f"random drop: p must be a probability in [0, 1], got {p!r}")
    every = [(a, b) for a in nodes for b in nodes if a != b]
    return [Round((), tuple(sorted(link for link in every if rng.random() < p))) for _ in range(rounds)]


def poisson_crashes(rng: random.Random, nodes: Sequence[str], duration_s: float, rate: float,
                    downtime_s: float) -> list[Crash]:
    """Crashes in [0, duration_s): arrivals of a Poisson process of `rate` per second;
    each kills a node drawn uniformly among those up at that moment (an arrival while
    every node is down is dropped), which comes back `downtime_s` later or at
    `duration_s`, whichever is first. Sorted by time."""
    if not nodes:
        raise MalloryError("Poisson crashes need at least one node")
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0 or math.isinf(rate):
        raise MalloryError(f"Poisson crashes: the rate must be a positive number per second, got {rate!r}")
    if not downtime_s >= 0 or not duration_s >= 0:
        raise MalloryError(f"Poisson crashes: times must not be negative (duration {duration_s}, downtime {downtime_s})")
    out: list[Crash] = []
    t = rng.expovariate(rate)
    while t < duration_s:
        up = [n for n in nodes if not any(c.node == n and c.at_s <= t < c.back_s for c in out)]
        if up:
            out.append(Crash(t, rng.choice(up), min(t + downtime_s, duration_s)))
        t += rng.expovariate(rate)
    return out
