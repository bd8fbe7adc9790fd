"""raft-kv (suts/raft): the project's KV server on Canonical Raft; adapter with membership
changes, and the TXN line client that the pysyncobj service speaks too."""
