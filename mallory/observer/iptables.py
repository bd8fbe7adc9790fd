"""The observer's iptables rules: inter-node TCP/UDP on INPUT and OUTPUT to its NFQUEUE.

Two chains of our own, jumped to first from INPUT and OUTPUT, so installing and removing
never touches anyone else's rules:

    MALLORY-OBS-OUT: -d PEER -p tcp|udp -j NFQUEUE --queue-num Q --queue-bypass
    MALLORY-OBS-IN:  -s PEER -p tcp|udp -j NFQUEUE --queue-num Q --queue-bypass
    (or, in nflog mode, -j NFLOG --nflog-group Q --nflog-size 128: a copy, no verdict)

Only traffic with the other nodes (PEER addresses) is queued: the observer's own batches
to the mediator and the harness's client traffic are not inter-node and pass untouched.
--queue-bypass lets packets through while no observer is bound (killed, not yet started).
The rules live in the node's namespace and vanish with it.
"""

from __future__ import annotations

import subprocess
from typing import Sequence

from mallory.errors import MalloryError

CHAIN_IN = "MALLORY-OBS-IN"
CHAIN_OUT = "MALLORY-OBS-OUT"
NFLOG_SIZE = 128  # bytes of each packet copied: headers + 4 payload bytes


def _iptables(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["iptables", "-w", *args], capture_output=True, text=True)


def rules_script(queue: int, peers: Sequence[str], mode: str = "nfqueue") -> str:
    """The iptables-restore input that installs the chains and the jumps. mode "nflog"
    sends a copy to NFLOG group `queue` instead (truncated to the observer's copy range)."""
    if mode == "nfqueue":
        target = f"-j NFQUEUE --queue-num {queue} --queue-bypass"
    elif mode == "nflog":
        target = f"-j NFLOG --nflog-group {queue} --nflog-size {NFLOG_SIZE}"
    else:
        raise MalloryError(f"observer: unknown capture mode {mode!r} (nfqueue, nflog)")
    lines = ["*filter", f":{CHAIN_IN} - [0:0]", f":{CHAIN_OUT} - [0:0]"]
    for peer in peers:
        for proto in ("tcp", "udp"):
            lines.append(f"-A {CHAIN_OUT} -d {peer} -p {proto} {target}")
            lines.append(f"-A {CHAIN_IN} -s {peer} -p {proto} {target}")
    lines += [f"-I INPUT 1 -j {CHAIN_IN}", f"-I OUTPUT 1 -j {CHAIN_OUT}", "COMMIT", ""]
    return "\n".join(lines)


def install(queue: int, peers: Sequence[str], mode: str = "nfqueue") -> None:
    """Capture traffic with `peers` (addresses or CIDRs); replaces rules of an earlier run."""
    if not peers:
        raise MalloryError("observer: no peer addresses to watch (give --peer or --run)")
    remove()
    result = subprocess.run(
        ["iptables-restore", "-w", "--noflush"], input=rules_script(queue, peers, mode), capture_output=True, text=True
    )
    if result.returncode != 0:
        raise MalloryError(f"observer: iptables-restore failed: {result.stderr.strip()}")


def remove() -> None:
    """Remove the jumps and chains if present (idempotent)."""
    for hook, chain in (("INPUT", CHAIN_IN), ("OUTPUT", CHAIN_OUT)):
        while _iptables("-D", hook, "-j", chain).returncode == 0:
            pass
        _iptables("-F", chain)
        _iptables("-X", chain)
