"""The firewall's per-packet decisions and verdicts, against a fake queue (no NFQUEUE)."""

import itertools

import pytest

from mallory.mediator.firewall import Firewall, SeenPackets
from mallory.observer.packet import ip_int, parse
from tests.unit.mediator.packets import ipv4, tcp

NODES = {"n1": "10.9.1.2", "n2": "10.9.2.2", "n3": "10.9.3.2"}


class FakeQueue:
    """A fake of ForwardQueue's verdict side with the kernel's semantics: a batch verdict
    accepts every still-queued packet with an id up to its own."""

    def __init__(self):
        self.queued: set[int] = set()
        self.verdicts: dict[int, str] = {}
        self.order: list[int] = []  # accepted ids in the order they left
        self.ids = itertools.count(1)

    def enqueue(self, bufs):
        packets = [(next(self.ids), b) for b in bufs]
        self.queued.update(pid for pid, _ in packets)
        return packets

    def _give(self, pid, verdict):
        assert pid in self.queued, f"verdict for packet {pid} that is not queued"
        self.queued.discard(pid)
        self.verdicts[pid] = verdict
        if verdict == "accept":
            self.order.append(pid)

    def accept(self, pid):
        self._give(pid, "accept")

    def drop(self, pid):
        self._give(pid, "drop")

    def accept_upto(self, pid):
        for q in sorted(q for q in self.queued if q <= pid):
            self._give(q, "accept")


def firewall():
    fw = Firewall(NODES)
    fw.queue = FakeQueue()
    fw.injected = []
    fw._inject = lambda buf, dst, copies: fw.injected.extend([(buf, dst)] * copies)  # fake raw socket
    return fw


def pkt(src, dst, seq=1, payload=b"ping"):
    return tcp(NODES[src], NODES[dst], 1000, 2000, seq, payload)


def run(fw, *bufs):
    packets = fw.queue.enqueue(bufs)
    fw.process(packets)
    return [pid for pid, _ in packets]


def test_plain_forwarding_remembers_packet_ids_and_batches_verdicts():
    fw = firewall()
    buf = pkt("n1", "n2", payload=b"\x01\x02\x03\x04\x05")
    ids = run(fw, buf, pkt("n2", "n1"), pkt("n1", "n3"))
    assert [fw.queue.verdicts[i] for i in ids] == ["accept"] * 3
    assert parse(buf).id in fw.seen and len(fw.seen) == 3
    assert fw.counts["seen"] == 3 and fw.counts["accepted"] == 3


def test_drop_only_on_named_links_and_heal_restores():
    fw = firewall()
    report = fw.drop([("n1", "n2")])
    assert report["links"] == ["n1->n2"] and report["applied_us"] >= 0
    a, b, c = run(fw, pkt("n1", "n2"), pkt("n2", "n1"), pkt("n1", "n3"))
    v = fw.queue.verdicts
    assert (v[a], v[b], v[c]) == ("drop", "accept", "accept")
    run(fw, pkt("n1", "n2", seq=3), pkt("n1", "n3", seq=3))
    assert fw.stats()["rules"] == [{"src": "n1", "dst": "n2", "drop": True, "delay_ms": 0.0, "copies": 0, "affected": 2}]
    assert fw.heal(None)["affected"] == {"n1->n2": 2}
    (d,) = run(fw, pkt("n1", "n2", seq=2))
    assert v[d] == "accept" and fw.counts["dropped"] == 2 and fw.affected == {}


def test_outside_traffic_is_never_faulted():
    fw = firewall()
    fw.drop([("n1", "n2")])
    (control,) = run(fw, tcp("10.9.0.1", NODES["n2"], 5, 6, 7))
    assert fw.queue.verdicts[control] == "accept" and fw.counts["outside"] == 1 and fw.counts["seen"] == 0


def test_icmp_between_nodes_obeys_rules_without_an_id():
    fw = firewall()
    fw.drop([("n1", "n2")])
    (ping,) = run(fw, ipv4(NODES["n1"], NODES["n2"], 1, b"\x08\x00" + b"\x00" * 6))
    assert fw.queue.verdicts[ping] == "drop" and fw.counts["no_id"] == 1 and len(fw.seen) == 0


def test_delay_holds_then_releases_in_order_per_link_and_no_batch_covers_a_held_packet():
    fw = firewall()
    fw.delay([("n1", "n2")], 50_000_000)
    ids = run(fw, pkt("n2", "n1"), pkt("n1", "n2", seq=0), pkt("n2", "n3"), pkt("n1", "n2", seq=1), pkt("n3", "n1"))
    v = fw.queue.verdicts
    held = [ids[1], ids[3]]
    assert all(i not in v for i in held)  # still queued
    assert [v[i] for i in (ids[0], ids[2], ids[4])] == ["accept"] * 3  # the others went at once
    # A shorter delay afterwards must not overtake the packets already held.
    fw.delay([("n1", "n2")], 1_000_000)
    (late,) = run(fw, pkt("n1", "n2", seq=9))
    first_due = fw._held[("n1", "n2")][0].due
    assert fw.release_due(first_due - 1) == first_due
    assert all(i not in v for i in held + [late])
    fw.release_due(first_due + 10**9)
    assert [v[i] for i in held + [late]] == ["accept"] * 3
    assert fw.queue.order[-3:] == held + [late]
    assert fw.counts["delayed"] == 3 and fw.counts["released"] == 3 and fw.held() == 0
    # With nothing held, accepts go back to one batch verdict per drain.
    ids = run(fw, pkt("n2", "n1", seq=5), pkt("n2", "n1", seq=6))
    assert [v[i] for i in ids] == ["accept", "accept"]


def test_heal_releases_and_drop_discards_held_packets():
    fw = firewall()
    fw.delay([("n1", "n2"), ("n1", "n3")], 10**9)
    a, b = run(fw, pkt("n1", "n2"), pkt("n1", "n3"))
    assert fw.heal([("n1", "n2")])["held_released"] == 1 and fw.queue.verdicts[a] == "accept"
    assert fw.drop([("n1", "n3")])["held_dropped"] == 1 and fw.queue.verdicts[b] == "drop"
    assert fw.held() == 0


def test_duplicate_accepts_and_injects_copies():
    fw = firewall()
    fw.duplicate([("n1", "n2")], 2)
    buf = pkt("n1", "n2")
    (p,) = run(fw, buf)
    assert fw.queue.verdicts[p] == "accept"
    assert fw.injected == [(buf, ip_int(NODES["n2"]))] * 2


def test_a_truncated_packet_is_accepted_untouched():
    fw = firewall()
    fw.drop([("n1", "n2")])
    (short,) = run(fw, b"\x45" + b"\x00" * 5)  # shorter than an IPv4 header
    assert fw.queue.verdicts[short] == "accept" and fw.counts["outside"] == 1


def test_a_shorter_or_removed_delay_never_lets_a_packet_overtake_held_ones():
    fw = firewall()
    fw.delay([("n1", "n2")], 10**9)
    first = run(fw, pkt("n1", "n2", seq=0))
    fw.delay([("n1", "n2")], 0)  # delay removed while a packet is still held
    second = run(fw, pkt("n1", "n2", seq=1), pkt("n2", "n1", seq=1))
    v = fw.queue.verdicts
    assert first[0] not in v and second[0] not in v  # waits behind the held one
    assert v[second[1]] == "accept"  # the other direction is not held up
    fw.release_due(fw._held[("n1", "n2")][0].due)
    assert fw.queue.order[-2:] == [first[0], second[0]]
    assert fw.affected == {("n1", "n2"): 1}  # only the real delay counts as the rule's doing


def test_seen_packets_keep_at_least_the_last_half_capacity_and_forget_older_ones():
    seen = SeenPackets(capacity=8)
    for packet_id in range(1, 8):
        seen.add(packet_id)
        seen.add(packet_id)  # a packet seen twice (a retransmission's id) counts once
        assert len(seen) <= 8 and all(recent in seen for recent in range(max(1, packet_id - 3), packet_id + 1))
    assert len(seen) == 7 and 1 in seen
    seen.add(8)  # the newer generation is full: the older one (1-4) goes whole
    assert len(seen) == 4 and all(i not in seen for i in range(1, 5)) and all(i in seen for i in range(5, 9))
    with pytest.raises(ValueError):
        SeenPackets(capacity=1)
