"""Pictures of verdicts, as SVG text (pure: no I/O).

- `cycles.cycle_svg(case)`: an Elle-style cycle: transactions as nodes, their
  dependencies (ww, wr, rw, process, realtime) as labelled arrows;
- `linear.linear_svg(case)`: Knossos/Porcupine-style, the operations around the point
  where no linearization of a register history exists, processes as lanes;
- `latency.latency_svg(ops)`: Jepsen's latency-raw, each client operation's latency
  against when it was invoked, by outcome, with the fault periods shaded;
- `verdict.case_svg(case)`: the picture an anomaly case calls for, if any;
  `verdict.run_pictures(ops, anomalies)`: a run's pictures, named as the files beside
  its results.edn.

The campaign's checks write them into each run directory; the report embeds them in bug
pages. Every element a reader may count carries a class and data attributes.
"""
