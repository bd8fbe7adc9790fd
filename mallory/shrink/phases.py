"""The three reductions of a failing schedule, pure, against any oracle.

1. **drop faults**: ddmin over the steps, complements only (see `ddmin`); each step keeps
   its own random draw, so a kept fault hits the targets it hit before;
2. **shorten windows**: per step, the window after it (how long the fault acts before the
   next step) is tried at the floor, then halved while the bug still comes back;
3. **weaken faults**: per step, a weaker spec of the same family (fewer nodes, fewer
   links; see WEAKER), weakest first, among the faults the campaign enabled.

`fails(candidate)` answers whether the bug still comes back; the live answer is replays
on fresh clusters (`FractionOracle`), a test's answer a deterministic fake.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from mallory.campaign.loop import ScriptedStep
from mallory.shrink.ddmin import ddmin

Schedule = list[ScriptedStep]
Fails = Callable[[Schedule], bool]

#: node specs (kill, stop, pause): fewer nodes is weaker
_NODES = {"all": ("one", "minority", "majority"), "majority": ("one", "minority"), "minority": ("one",)}
#: partition specs: fewer links cut is weaker (one node alone cuts the fewest)
_PARTITION = {"majorities-ring": ("one", "majority"), "bridge": ("one", "majority"), "majority": ("one",)}
#: packet link specs: `pair` is two links, `one` every link of one node, `all` every link
_LINKS = {"all": ("pair", "one"), "one": ("pair",)}
#: family -> spec -> weaker specs of that family, weakest first. Clock, disk and membership
#: specs are different faults, not stronger and weaker versions of one: none is weakened.
WEAKER: dict[str, dict[str, tuple[str, ...]]] = {
    "kill": _NODES,
    "stop": _NODES,
    "pause": _NODES,
    "partition": _PARTITION,
    "delay": _LINKS,
    "drop": _LINKS,
    "duplicate": _LINKS,
}

#: windows are rounded to this (seconds): finer differences are below a cluster's noise
WINDOW_GRAIN_S = 0.05


def weaker_actions(action: str) -> tuple[str, ...]:
    """Weaker labels of the same family, weakest first ("kill:all" -> "kill:one", ...)."""
    family, _, spec = action.partition(":")
    return tuple(f"{family}:{weaker}" for weaker in WEAKER.get(family, {}).get(spec, ()))


def shorter_windows(window_s: float, floor_s: float) -> list[float]:
    """Windows to try for a step, in order: the floor, then halvings of the current window
    down to (not including) the floor. The caller stops at the first that loses the bug."""
    if window_s <= floor_s:
        return []
    out = [floor_s]
    w = _grain(window_s / 2)
    while w > floor_s:
        out.append(w)
        w = _grain(w / 2)
    return out


def _grain(seconds: float) -> float:
    return round(round(seconds / WINDOW_GRAIN_S) * WINDOW_GRAIN_S, 3)


def drop_faults(steps: Sequence[ScriptedStep], fails: Fails) -> Schedule:
    return ddmin(list(steps), fails, subsets=False)


def shorten_windows(steps: Sequence[ScriptedStep], fails: Fails, floor_s: float) -> Schedule:
    current = list(steps)
    for i, step in enumerate(current):
        tries = shorter_windows(step.window_s or 0.0, floor_s)
        # floor first (the biggest cut); if it loses the bug, halve from the top instead
        if tries and _try(current, i, replace(step, window_s=tries[0]), fails):
            continue
        for w in tries[1:]:
            if not _try(current, i, replace(current[i], window_s=w), fails):
                break
    return current


def weaken_faults(steps: Sequence[ScriptedStep], fails: Fails, allowed: Callable[[str], bool]) -> Schedule:
    current = list(steps)
    for i, step in enumerate(current):
        for weaker in weaker_actions(step.action):
            if allowed(weaker) and _try(current, i, replace(step, action=weaker), fails):
                break
    return current


def _try(current: Schedule, i: int, changed: ScriptedStep, fails: Fails) -> bool:
    """Replace step i by `changed` in place if the bug still comes back with it."""
    candidate = [*current[:i], changed, *current[i + 1 :]]
    if fails(candidate):
        current[i] = changed
        return True
    return False


def shrink_schedule(
    steps: Sequence[ScriptedStep],
    fails: Fails,
    *,
    floor_s: float,
    allowed: Callable[[str], bool] = lambda action: True,
    on_phase: Callable[[str, Schedule], None] = lambda name, result: None,
) -> Schedule:
    """Drop faults, then shorten windows, then weaken faults. Every step needs its
    window_s set (the loop's window when the record had none)."""
    current = drop_faults(steps, fails)
    on_phase("drop faults", current)
    current = shorten_windows(current, fails, floor_s)
    on_phase("shorten windows", current)
    current = weaken_faults(current, fails, allowed)
    on_phase("weaken faults", current)
    return current
