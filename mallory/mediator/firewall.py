"""The gateway firewall: every packet between nodes crosses NFQUEUE on FORWARD.

For each packet it computes the packet id (observer/packet.py),
names the link (src node -> dst node) from the node addresses, remembers its id in
`SeenPackets` (the ingest joins observer events with it), and gives the verdict the `RuleTable`
says: accept, drop, hold for a delay then accept (in order per link), or accept and inject
copies through a raw socket (the copy leaves the gateway through OUTPUT, so it is not
queued again).

Verdicts (`process`): accepts are gathered and given as ONE batch verdict per drain of the
queue (mediator/queue.py), which is what makes the firewall fast; drops are given at once.
A held packet stays in the kernel's queue until its own accept, and a batch verdict would
release it too, so while any packet is held, accepts are given one by one.

Threading: one thread owns the queue. It waits in select() on the queue socket and a wake
pipe, with a timeout at the next held packet's release time; so a delayed packet is
released within a fraction of a millisecond of its due time, and a rule change (queued by
the API thread, which then wakes the loop) takes effect before the next drain.

Without the queue (unit tests, a mediator started with --no-firewall) `apply` runs changes
directly; `process` takes any object with the queue's verdict methods.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from time import monotonic_ns
from typing import Protocol

from mallory.errors import MalloryError
from mallory.mediator.queue import ForwardQueue
from mallory.mediator.rules import Link, RuleTable
from mallory.observer.packet import ADDRESSES, id_of, ip_int, ip_str

CHAIN = "MALLORY-MEDIATOR"
_NO_ADDRESSES = (0, 0)


class SeenPackets:
    """The ids of the last inter-node packets the firewall saw, for the ingest's join (did the
    gateway see the packet an observer reports?): at least the last `capacity // 2` ids, at
    most `capacity`. Two generations of sets: when the newer one holds `capacity // 2` ids it
    becomes the older and the older is dropped whole. A set and a deque of 200,000 ids cost
    17 MB and rebuilt their table every ~100k packets; the join needs only the last seconds
    (an observer's batch overtakes its packet by milliseconds; the ingest gives up on an id
    within 2 s), and 32,768 packets are ≥ 14 s even at 140k packets a minute."""

    def __init__(self, capacity: int = 65_536) -> None:
        if capacity < 2:
            raise ValueError(f"SeenPackets capacity must be at least 2, not {capacity}")
        self.capacity = capacity
        self._generation = capacity // 2
        self._newer: set[int] = set()
        self._older: set[int] = set()

    def add(self, packet_id: int) -> None:
        newer = self._newer
        if packet_id not in newer and packet_id not in self._older:
            newer.add(packet_id)
            if len(newer) >= self._generation:
                self._older, self._newer = newer, set()

    def __contains__(self, packet_id: int) -> bool:
        return packet_id in self._newer or packet_id in self._older

    def __len__(self) -> int:
        return len(self._newer) + len(self._older)


class _Held:
    __slots__ = ("due", "packet_id", "copies", "buf", "dst")

    def __init__(self, due: int, packet_id: int, copies: int, buf: bytes, dst: int) -> None:
        self.due = due
        self.packet_id = packet_id
        self.copies = copies
        self.buf = buf
        self.dst = dst


class Verdicts(Protocol):
    """What the firewall needs of a queue (ForwardQueue in mallory/mediator/queue.py)."""

    def accept(self, packet_id: int) -> None: ...

    def drop(self, packet_id: int) -> None: ...

    def accept_upto(self, packet_id: int) -> None: ...


class Firewall:
    def __init__(self, node_addresses: Mapping[str, str], seen: SeenPackets | None = None) -> None:
        self.nodes = sorted(node_addresses)
        self.node_by_ip = {ip_int(addr): node for node, addr in node_addresses.items()}
        self.table = RuleTable(self.nodes)
        self.seen = seen if seen is not None else SeenPackets()
        self.counts = {
            "seen": 0,  # inter-node packets through the queue
            "accepted": 0,  # let through at once (outside packets included)
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
        self._held_count = 0
        #: Packets each link's rule acted on (dropped, held, duplicated) since it was set.
        self.affected: dict[Link, int] = {}
        self._next_due: int | None = None  # release time of the first held packet (loop thread)
        #: Where verdicts go: the ForwardQueue once `start`ed (tests may set another).
        self.queue: Verdicts | None = None
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

    def process(self, packets: list[tuple[int, bytes]]) -> None:
        """Decide and give verdicts for packets read from the queue, in queue order."""
        queue = self.queue
        assert queue is not None, "no queue to give verdicts to"
        counts = self.counts
        node_by_ip = self.node_by_ip
        seen_add = self.seen.add
        held = self._held
        affected = self.affected
        rules = self.table.rules
        now = monotonic_ns()
        batch_upto = 0  # accepts not yet given: every queued id <= this one
        copies_after: list[tuple[bytes, int, int]] = []
        for packet_id, buf in packets:
            src_ip, dst_ip = ADDRESSES.unpack_from(buf, 12) if len(buf) >= 20 else _NO_ADDRESSES
            src = node_by_ip.get(src_ip)
            dst = node_by_ip.get(dst_ip)
            drop = False
            delay_ns = copies = 0
            if src is None or dst is None:
                counts["outside"] += 1
            else:
                counts["seen"] += 1
                link = (src, dst)
                rule = rules.get(link) if rules else None
                if rule is not None:
                    drop, delay_ns, copies = rule.drop, rule.delay_ns, rule.copies
                if not drop and self._held_count and held.get(link):
                    delay_ns = delay_ns or 1  # behind packets still held on the link, in order
                if rule is not None and (drop or rule.delay_ns or copies):
                    affected[link] = affected.get(link, 0) + 1
                packet_id_seen = id_of(buf)
                if packet_id_seen is None:
                    counts["no_id"] += 1
                else:
                    seen_add(packet_id_seen)
            if drop:
                counts["dropped"] += 1
                queue.drop(packet_id)
            elif not delay_ns:
                counts["accepted"] += 1
                if self._held_count:
                    queue.accept(packet_id)
                else:
                    batch_upto = packet_id
                if copies:
                    copies_after.append((buf, dst_ip, copies))
            else:
                counts["delayed"] += 1
                if batch_upto:
                    queue.accept_upto(batch_upto)  # before this packet is held, never after
                    batch_upto = 0
                waiting = held.get(link)
                if waiting is None:
                    waiting = held[link] = deque()
                due = now + delay_ns
                if waiting and waiting[-1].due > due:
                    due = waiting[-1].due  # never overtake an earlier packet on the link
                waiting.append(_Held(due, packet_id, copies, buf, dst_ip))
                self._held_count += 1
                if self._next_due is None or due < self._next_due:
                    self._next_due = due
        if batch_upto:
            queue.accept_upto(batch_upto)
        for buf, dst_ip, copies in copies_after:
            self._inject(buf, dst_ip, copies)

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
        queue = self.queue
        if now is None:
            now = monotonic_ns()
        next_due = None
        for waiting in self._held.values():
            while waiting and waiting[0].due <= now:
                entry = waiting.popleft()
                self._held_count -= 1
                queue.accept(entry.packet_id)
                self.counts["released"] += 1
                if entry.copies:
                    self._inject(entry.buf, entry.dst, entry.copies)
            if waiting and (next_due is None or waiting[0].due < next_due):
                next_due = waiting[0].due
        self._next_due = next_due
        return next_due

    def held(self) -> int:
        return self._held_count

    def _flush_held(self, links: list[Link], accept: bool) -> int:
        n = 0
        for link in links:
            waiting = self._held.pop(link, None)
            while waiting:
                entry = waiting.popleft()
                self._held_count -= 1
                if accept:
                    self.queue.accept(entry.packet_id)
                    self.counts["released"] += 1
                else:
                    self.queue.drop(entry.packet_id)
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
            released = self._flush_held(list(self._held) if links is None else links, True)
            affected = {f"{s}->{d}": self.affected.pop((s, d), 0) for s, d in healed}
            return {"links": healed, "held_released": released, "affected": affected}

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

    def start(self, queue_num: int, fail_open: bool = True) -> None:
        """Bind NFQUEUE `queue_num` and serve it from a thread until `stop`."""
        queue = ForwardQueue(queue_num, fail_open=fail_open)
        self.queue = queue
        self._running = True
        self._thread = threading.Thread(target=self._loop, args=(queue,), name="firewall", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        self._wake()
        if self._thread is not None:
            self._thread.join(2.0)
        if self._thread is None or not self._thread.is_alive():
            wake_r, wake_w, self._wake_r, self._wake_w = self._wake_r, self._wake_w, -1, -1
            if wake_r >= 0:
                os.close(wake_r)
                os.close(wake_w)

    def _wake(self) -> None:
        if self._wake_w < 0:
            return
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def _loop(self, queue: ForwardQueue) -> None:
        fd = queue.fileno()
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
                # Drain in bounded slices so rule changes and releases are served between them.
                while True:
                    self._run_commands()
                    packets = queue.read()
                    if packets:
                        try:
                            self.process(packets)
                        except Exception as exc:  # never leave packets without a verdict
                            self.counts["errors"] += len(packets)
                            self.last_error = f"{type(exc).__name__}: {exc}"
                            queue.accept_upto(packets[-1][0])
                    if self._next_due is not None and monotonic_ns() >= self._next_due:
                        self.release_due()
                    if not packets or self._stop:
                        break
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            self._running = False
            self._run_commands()
            self._flush_held(list(self._held), True)
            try:
                for _ in range(1024):  # what is still queued leaves unfaulted, not dropped
                    packets = queue.read()
                    if not packets:
                        break
                    queue.accept_upto(packets[-1][0])
            finally:
                queue.close()

    def stats(self) -> dict[str, object]:
        rules = [{**r, "affected": self.affected.get((r["src"], r["dst"]), 0)} for r in self.table.to_json()]
        return {**self.counts, "bypassed": getattr(self.queue, "bypassed", 0), "held": self.held(),
                "rule_changes": self.rule_changes, "rules": rules}


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
