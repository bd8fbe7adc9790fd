"""The one operation model of a Jepsen-style history, and its EDN and JSON readers and
writers. Pure Python: the harness records with it, the oracles check it."""
