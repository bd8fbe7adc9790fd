"""TCP keepalive of the observer -> mediator connection, the same at both ends: `Keepalive`.

The mediator's receiver (mallory/mediator/receiver.py) sets it on every connection it
accepts, the observer's sender (mallory/observer/sender.py) on every connection it makes:
each end finds on its own a peer whose host, namespace or link vanished without a FIN or
RST, and ends that connection with ETIMEDOUT about `dead_after_s` after the peer's last
byte. It lives here, below both (README, "Layout"), so that there is one definition.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class Keepalive:
    """TCP keepalive of a connection: after `idle_s` seconds without a byte from the peer
    its kernel is probed every `interval_s` seconds, and after `probes` unanswered probes,
    `dead_after_s` after the last byte, the connection ends with ETIMEDOUT (or the error an
    ICMP message gave, e.g. EHOSTUNREACH).

    A healthy connection is never idle that long (an observer sends a batch every
    `--interval`, 0.1 s by default, and the mediator acks each), so probes go only to a
    peer that went quiet. 20 s of idle is far beyond any interval in use; 4 probes 5 s
    apart survive a lost probe or two on a busy link; 40 s in all stays within the minute
    a dead observer's thread and buffers may be held."""

    idle_s: int = 20
    interval_s: int = 5
    probes: int = 4

    @property
    def dead_after_s(self) -> int:
        return self.idle_s + self.interval_s * self.probes

    def apply(self, sock: socket.socket) -> None:
        """Set the socket options on `sock`. TCP_USER_TIMEOUT too: while data of ours is in
        flight unacknowledged (an ack the mediator wrote, or batches the observer sent, just
        as the peer vanished) the kernel sends no probes and would retransmit for
        tcp_retries2 (~15 min); the user timeout ends that after `dead_after_s` too (and,
        with keepalive on, it is what Linux ends a probed connection by, at the same time:
        tcp(7))."""
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, self.idle_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, self.interval_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, self.probes)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, self.dead_after_s * 1000)


KEEPALIVE = Keepalive()


def end_cause(exc: OSError) -> str:
    """How both ends name the error that ended a connection in their `ended` counts: its
    errno's name ("ETIMEDOUT": the peer went without a word; "ECONNRESET"), else the
    exception's class name (e.g. "TimeoutError" for a socket timeout)."""
    return errno.errorcode.get(exc.errno, type(exc).__name__)
