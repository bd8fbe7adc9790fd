"""Shrinking a failing fault schedule to the faults that matter (`mallory shrink`).

`ddmin` is Zeller's delta debugging, pure; `phases` applies it and two more reductions
(shorter windows, weaker faults) to a schedule, pure, against any oracle; `replay_oracle`
is the live oracle (each candidate replayed K times on fresh clusters), `journal` keeps
every verdict on disk so an interrupted shrink loses nothing it learned.
"""
