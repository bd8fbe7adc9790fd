"""The pysyncobj KV service (suts/pysyncobj) as a built-in SUT: its shipped spec, plus
transactions for the list-append and rw-register workloads.

The service speaks raft-kv's `TXN r:k a:k:v w:k:v ...` line (see
`mallory/harness/raft_client.py`) and applies each as one pysyncobj log entry, so
`RaftTxnClient` is its transaction client too; registers use the spec's line client.
"""

from __future__ import annotations

from pathlib import Path

from mallory.harness.spec import load_spec
from mallory.harness.spec_adapter import TxnLineSpecAdapter
from nemesis.backend import ClusterBackend

SUT_DIR = Path(__file__).resolve().parents[2] / "suts" / "pysyncobj"
SPEC = SUT_DIR / "pysyncobj.toml"


class PysyncobjAdapter(TxnLineSpecAdapter):
    @classmethod
    def default(cls, backend: ClusterBackend) -> PysyncobjAdapter:
        return cls(load_spec(SPEC), backend)
