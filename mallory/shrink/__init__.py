"""Shrinking a failing fault schedule to the faults that matter (`mallory shrink`).

`ddmin` is Zeller's delta debugging, pure; `phases` applies it and two more reductions
(shorter windows, weaker faults) to a schedule, pure, against any oracle; the live oracle
is `fraction.FractionOracle` over `live_replay.LiveReplay` (each candidate replayed up to
K times on fresh clusters); `journal` keeps every replay on disk so an interrupted shrink
loses nothing it learned; `bundle` writes the minimal schedule as a bundle of its own.
"""
