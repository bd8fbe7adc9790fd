"""Bug detection: transactional and linearizability checkers, ASan and log oracles. Pure Python.

Public entry points (what the harness, the campaign and `mallory check` use):

- histories (`mallory.history`): `ops.Op` (also what the harness records), `ops.Call`,
  `ops.read_history(path, fmt="auto")`, `ops.read_history_text(text, fmt)`,
  `ops.pair_calls(ops)`, `ops.write_edn(ops, stream)` (Jepsen history.edn),
  `ops.write_jsonl(ops, stream)`, one op's line: `ops.edn_line(op)`, `ops.json_line(op)`;
  EDN values: `edn.Keyword`, `edn.Symbol`, `edn.loads`, `edn.read_all`, `edn.dumps`.
- one call for any checker: `check.check_history(ops, fmt, check.CheckOptions(...))` ->
  `result.CheckResult` (valid True/False/"unknown", anomaly_types, anomalies, explanation,
  not_models/also_not, notes, stats; `.exit_code`, `.render()`, `.to_json()`).
- Elle-style: `elle.check_elle(ops, "list-append" | "rw-register", elle.ElleOptions(...))`;
  the workloads' analysers in `list_append` and `rw_register`, what they share (the
  dependency graph, the cycle search and its explanations, the verdict) in `txn`, the
  graph and cycle shapes in `depgraph`, the anomaly/model tables in `consistency`.
- linearizability: `linearizability.check_linearizable(ops, models.make_model(name, initial))`
  for register, cas-register, mutex, kv, multi-register.
- findings: `asan.parse_asan(text, node)`, `logs.scan_log(lines, node, patterns)`,
  `logs.parse_log_bugs(tables, source)` (a spec's `[[log_bugs]]`, as
  `mallory.log_lines.LogPattern`s, the class the observer's log events use too), `logs.death_finding(returncode, node, log=...)`,
  `triage.findings_from_result(result)` (one per invalid history), `triage.deduplicate(findings)`;
  every `triage.Finding` has a filesystem-safe `.signature` for `bugs/<signature>/`, the same
  for every sighting of one root cause (see `triage`).
"""
