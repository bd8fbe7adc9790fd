"""The gateway firewall: every packet between nodes crosses NFQUEUE on FORWARD.

For each packet it computes the packet id and payload abstraction (observer/packet.py),
names the link (src node -> dst node) from the node addresses, records it in the
`PacketLog` (joined with observer events by id), and gives the verdict the `RuleTable`
says: accept, drop, hold for a delay then accept (in order per link), or accept and inject
copies through a raw socket (the copy leaves the gateway through OUTPUT, so it is not
queued again).

Threading: one thread owns the queue. It waits in select() on the NFQUEUE socket and a
wake pipe, with a timeout at the next held packet's release time; so a delayed packet is
released within a fraction of a millisecond of its due time, and a rule change (queued by
the API thread, which then wakes the loop) takes effect before the next packet. NFQUEUE
allows the verdict of a retained packet after its callback returned, from the same thread.

Without the queue (unit tests, a mediator started with --no-firewall) `apply` runs changes
directly; `handle` is the per-packet decision and takes any object with NFQUEUE's packet
methods (get_payload, accept, drop, retain).
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import threading
import time
from collections import deque
from time import monotonic_ns
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from mallory.errors import MalloryError
from mallory.mediator.rules import Link, RuleTable
from mallory.observer.packet import ADDRESSES, id_and_data, ip_int, ip_str

CHAIN = "MALLORY-MEDIATOR"
_NO_ADDRESSES = (0, 0)


class PacketRecord(NamedTuple):
    """What the mediator saw of one packet (ts: the mediator's monotonic ns)."""

    id: int
    ts: int
    src: str
    dst: str
    data: str
    verdict: str  # "accept", "drop", "delay", "duplicate"


class PacketLog:
    """The last `capacity` packets the firewall saw, by packet id (for the ingest join).

    Stored as plain tuples (ts, src, dst, data, verdict): the firewall adds one per packet.
    """

    def __init__(self, capacity: int = 200_000) -> None:
        self.capacity = capacity
        self._by_id: dict[int, tuple[int, str, str, str, str]] = {}
        self._order: deque[int] = deque()

    def add(self, packet_id: int, ts: int, src: str, dst: str, data: str, verdict: str) -> None:
        by_id = self._by_id
        if packet_id not in by_id:
            self._order.append(packet_id)
            if len(self._order) > self.capacity:
                by_id.pop(self._order.popleft(), None)
        by_id[packet_id] = (ts, src, dst, data, verdict)

    def get(self, packet_id: int) -> PacketRecord | None:
        found = self._by_id.get(packet_id)
        return None if found is None else PacketRecord(packet_id, *found)

    def __contains__(self, packet_id: int) -> bool:
        return packet_id in self._by_id

    def __len__(self) -> int:
        return len(self._by_id)


class _Held:
    __slots__ = ("due", "packet", "copies", "buf", "dst")

    def __init__(self, due: int, packet: Any, copies: int, buf: bytes, dst: int) -> None:
        self.due = due
        self.packet = packet
        self.copies = copies
        self.buf = buf
        self.dst = dst


class Firewall:
    def __init__(self, node_addresses: Mapping[str, str], log: PacketLog | None = None) -> None:
        self.nodes = sorted(node_addresses)
        self.node_by_ip = {ip_int(addr): node for node, addr in node_addresses.items()}
        self.table = RuleTable(self.nodes)
        self.log = log if log is not None else PacketLog()
        self.counts = {
            "seen": 0,  # inter-node packets through the queue
            "accepted": 0,
            "dropped": 0,
            "delayed": 0,
            "duplicated": 0,  # copies injected
            "released": 0,  # delayed packets accepted after their delay
            "outside": 0,  # queued packets not between two nodes (accepted untouched)
            "no_id": 0,  # inter-node packets that are not TCP/UDP (ICMP, fragments)
            "errors": 0,  # packets the code failed on (accepted)
        }
        self.last_error = ""
        self.rule_changes = 0
        self._held: dict[Link, deque[_Held]] = {}
        self._next_due: int | None = None  # release time of the first held packet (loop thread)
        self._raw: socket.socket | None = None
        self._commands: deque[tuple[Callable[[], dict], threading.Event, list]] = deque()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._running = False
        self._stop = False
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    # -- the per-packet decision ------------------------------------------------------------

    def handle(self, packet: Any) -> None:
        buf = packet.get_payload()
        counts = self.counts
        src_ip, dst_ip = ADDRESSES.unpack_from(buf, 12) if len(buf) >= 20 else _NO_ADDRESSES
        node_by_ip = self.node_by_ip
        src = node_by_ip.get(src_ip)
        dst = node_by_ip.get(dst_ip)
        if src is None or dst is None:
            counts["outside"] += 1
            packet.accept()
            return
        counts["seen"] += 1
        now = monotonic_ns()
        rules = self.table.rules
        rule = rules.get((src, dst)) if rules else None
        if rule is None:
            verdict = "accept"
        elif rule.drop:
            verdict = "drop"
        elif rule.delay_ns:
            verdict = "delay"
        elif rule.copies:
            verdict = "duplicate"
        else:
            verdict = "accept"
        found = id_and_data(buf)
        if found is None:
            counts["no_id"] += 1
        else:
            self.log.add(found[0], now, src, dst, found[1], verdict)
        if verdict == "accept":
            counts["accepted"] += 1
            packet.accept()
        elif verdict == "drop":
            counts["dropped"] += 1
            packet.drop()
        elif verdict == "delay":
            counts["delayed"] += 1
            packet.retain()
            link = (src, dst)
            queue = self._held.get(link)
            if queue is None:
                queue = self._held[link] = deque()
            due = now + rule.delay_ns
            if queue and queue[-1].due > due:
                due = queue[-1].due  # never overtake an earlier packet on the link
            queue.append(_Held(due, packet, rule.copies, buf, dst_ip))
            if self._next_due is None or due < self._next_due:
                self._next_due = due
        else:
            counts["accepted"] += 1
            packet.accept()
            self._inject(buf, dst_ip, rule.copies)

    def _on_queued(self, packet: Any) -> None:
        """The queue callback. Under a flood nfq.run() keeps calling it without returning to
        the loop, so rule changes and due releases are also served from here."""
        self._safe_handle(packet)
        if self._commands:
            self._run_commands()
            self._next_due = self.release_due()
        elif self._next_due is not None and monotonic_ns() >= self._next_due:
            self._next_due = self.release_due()

    def _safe_handle(self, packet: Any) -> None:
        """`handle` for the queue: a packet that breaks the code is accepted, not stuck."""
        try:
            self.handle(packet)
        except Exception as exc:
            self.counts["errors"] += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            try:
                packet.accept()
            except Exception:
                pass  # its verdict was already given

    def _inject(self, buf: bytes, dst_ip: int, copies: int) -> None:
        if self._raw is None:
            self._raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        target = (ip_str(dst_ip), 0)
        for _ in range(copies):
            try:
                self._raw.sendto(buf, target)
                self.counts["duplicated"] += 1
            except OSError:
                pass  # a copy that cannot leave is simply not duplicated

    def release_due(self, now: int | None = None) -> int | None:
        """Accept held packets whose time has come; the next due time (ns) or None."""
        if now is None:
            now = time.monotonic_ns()
        next_due = None
        for queue in self._held.values():
            while queue and queue[0].due <= now:
                held = queue.popleft()
                held.packet.accept()
                self.counts["released"] += 1
                if held.copies:
                    self._inject(held.buf, held.dst, held.copies)
            if queue and (next_due is None or queue[0].due < next_due):
                next_due = queue[0].due
        return next_due

    def held(self) -> int:
        return sum(len(q) for q in self._held.values())

    def _flush_held(self, links: list[Link], accept: bool) -> int:
        n = 0
        for link in links:
            queue = self._held.pop(link, None)
            while queue:
                held = queue.popleft()
                if accept:
                    held.packet.accept()
                    self.counts["released"] += 1
                else:
                    held.packet.drop()
                    self.counts["dropped"] += 1
                n += 1
        return n

    # -- rule changes -----------------------------------------------------------------------

    def drop(self, links: list[Link]) -> dict:
        return self.apply(lambda: {"links": self.table.drop(links), "held_dropped": self._flush_held(links, False)})

    def delay(self, links: list[Link], delay_ns: int) -> dict:
        return self.apply(lambda: {"links": self.table.delay(links, delay_ns)})

    def duplicate(self, links: list[Link], copies: int) -> dict:
        return self.apply(lambda: {"links": self.table.duplicate(links, copies)})

    def heal(self, links: list[Link] | None) -> dict:
        def change() -> dict:
            healed = self.table.heal(links)
            return {"links": healed, "held_released": self._flush_held(list(self._held) if links is None else links, True)}

        return self.apply(change)

    def apply(self, change: Callable[[], dict], timeout: float = 2.0) -> dict:
        """Run a change in the firewall thread (or here when no queue runs); its report plus
        `applied_us`: from this call to the change being in effect for the next packet."""
        t0 = time.monotonic_ns()
        if not self._running:
            report = change()
            report["applied_us"] = round((time.monotonic_ns() - t0) / 1000, 1)
        else:
            done = threading.Event()
            box: list = []
            self._commands.append((change, done, box))
            self._wake()
            if not done.wait(timeout):
                raise MalloryError("the firewall thread did not apply the change in time")
            if isinstance(box[0], BaseException):
                raise box[0]
            report, applied_ns = box[0]
            report["applied_us"] = round((applied_ns - t0) / 1000, 1)
        self.rule_changes += 1
        report["links"] = [f"{s}->{d}" for s, d in report["links"]]
        return report

    def _run_commands(self) -> None:
        while self._commands:
            change, done, box = self._commands.popleft()
            try:
                box.append((change(), time.monotonic_ns()))
            except BaseException as exc:  # handed back to the API thread
                box.append(exc)
            done.set()

    # -- the queue loop ---------------------------------------------------------------------

    def start(self, queue_num: int, max_len: int = 8192) -> None:
        """Bind NFQUEUE `queue_num` and serve it from a thread until `stop`."""
        from netfilterqueue import NetfilterQueue

        nfq = NetfilterQueue()
        nfq.bind(queue_num, self._on_queued, max_len=max_len)
        self._running = True
        self._thread = threading.Thread(target=self._loop, args=(nfq,), name="firewall", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        self._wake()
        if self._thread is not None:
            self._thread.join(2.0)

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def _loop(self, nfq: Any) -> None:
        fd = nfq.get_fd()
        try:
            while not self._stop:
                next_due = self._next_due
                timeout = 0.5 if next_due is None else max(0.0, (next_due - monotonic_ns()) / 1e9)
                readable, _, _ = select.select([fd, self._wake_r], [], [], timeout)
                if self._wake_r in readable:
                    try:
                        os.read(self._wake_r, 4096)
                    except BlockingIOError:
                        pass
                    self._run_commands()
                if fd in readable:
                    nfq.run(block=False)
                self._next_due = self.release_due()
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            self._running = False
            self._run_commands()
            self._flush_held(list(self._held), True)
            nfq.unbind()

    def stats(self) -> dict[str, object]:
        return {**self.counts, "held": self.held(), "rule_changes": self.rule_changes, "rules": self.table.to_json()}


# -- iptables -------------------------------------------------------------------------------


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["iptables", "-w", *args], capture_output=True, text=True, check=check)
    except FileNotFoundError:
        raise MalloryError("iptables not found (apt-get install iptables)") from None
    except subprocess.CalledProcessError as exc:
        raise MalloryError(f"iptables {' '.join(args)}: {exc.stderr.strip()}") from None


def install_queue_rules(node_addresses: Mapping[str, str], queue_num: int) -> None:
    """Queue every forwarded packet between two nodes; --queue-bypass lets packets through
    while nobody listens, so a dead mediator means no faults, not no network."""
    remove_queue_rules()
    _iptables("-N", CHAIN)
    addrs = sorted(node_addresses.values())
    for src in addrs:
        for dst in addrs:
            if src != dst:
                _iptables("-A", CHAIN, "-s", src, "-d", dst, "-j", "NFQUEUE",
                          "--queue-num", str(queue_num), "--queue-bypass")
    _iptables("-I", "FORWARD", "1", "-j", CHAIN)


def remove_queue_rules() -> None:
    while _iptables("-D", "FORWARD", "-j", CHAIN, check=False).returncode == 0:
        pass
    _iptables("-F", CHAIN, check=False)
    _iptables("-X", CHAIN, check=False)
