"""The Jepsen-like side: SUT adapters, workloads, history recording."""
