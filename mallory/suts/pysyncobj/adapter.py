"""The pysyncobj KV service (suts/pysyncobj) as a built-in SUT: its shipped spec, plus
transactions for the list-append and rw-register workloads and its replicas' applied
commands for the divergence oracle.

The service speaks raft-kv's `TXN r:k a:k:v w:k:v ...` line (see
`mallory/suts/raft_kv/client.py`) and applies each as one pysyncobj log entry, so
`RaftTxnClient` is its transaction client too; registers use the spec's line client. It
answers raft-kv's `DIGEST` lines from a hash chain over its applied commands.
"""

from __future__ import annotations

from mallory import paths
from mallory.cluster.backend import ClusterBackend
from mallory.harness.spec import load_spec
from mallory.suts.raft_kv.adapter import RaftKvProtocolAdapter

SUT_DIR = paths.SUTS / "pysyncobj"
SPEC = SUT_DIR / "pysyncobj.toml"


class PysyncobjAdapter(RaftKvProtocolAdapter):
    @classmethod
    def default(cls, backend: ClusterBackend) -> PysyncobjAdapter:
        return cls(load_spec(SPEC), backend)
