"""What every SUT shares, Jepsen-style: the adapter protocols, TOML specs and the generic
spec adapter, clients (the line protocol), workloads, the runner and history recording.
Imports no built-in SUT (mallory/suts)."""
