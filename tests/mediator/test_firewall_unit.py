"""The firewall's per-packet decisions, driven with fake queued packets (no NFQUEUE)."""

from mallory.mediator.firewall import Firewall
from mallory.observer.packet import ip_int, parse
from tests.mediator.packets import ipv4, tcp

NODES = {"n1": "10.9.1.2", "n2": "10.9.2.2", "n3": "10.9.3.2"}


class FakeQueuedPacket:
    """A fake of netfilterqueue.Packet: records the verdict it was given."""

    def __init__(self, buf: bytes):
        self.buf = buf
        self.verdict = None
        self.retained = False

    def get_payload(self):
        return self.buf

    def retain(self):
        self.retained = True

    def accept(self):
        assert self.verdict is None
        self.verdict = "accept"

    def drop(self):
        assert self.verdict is None
        self.verdict = "drop"


def firewall():
    fw = Firewall(NODES)
    fw.injected = []
    fw._inject = lambda buf, dst, copies: fw.injected.extend([(buf, dst)] * copies)  # fake raw socket
    return fw


def pkt(src, dst, seq=1, payload=b"ping"):
    return FakeQueuedPacket(tcp(NODES[src], NODES[dst], 1000, 2000, seq, payload))


def test_plain_forwarding_records_id_link_and_payload():
    fw = firewall()
    p = pkt("n1", "n2", payload=b"\x01\x02\x03\x04\x05")
    fw.handle(p)
    assert p.verdict == "accept"
    rec = fw.log.get(parse(p.buf).id)
    assert (rec.src, rec.dst, rec.data, rec.verdict) == ("n1", "n2", "01020304", "accept")
    assert fw.counts["seen"] == 1 and fw.counts["accepted"] == 1


def test_drop_only_on_named_links_and_heal_restores():
    fw = firewall()
    report = fw.drop([("n1", "n2")])
    assert report["links"] == ["n1->n2"] and report["applied_us"] >= 0
    a, b, c = pkt("n1", "n2"), pkt("n2", "n1"), pkt("n1", "n3")
    for p in (a, b, c):
        fw.handle(p)
    assert (a.verdict, b.verdict, c.verdict) == ("drop", "accept", "accept")
    fw.heal(None)
    d = pkt("n1", "n2", seq=2)
    fw.handle(d)
    assert d.verdict == "accept" and fw.counts["dropped"] == 1


def test_outside_traffic_is_never_faulted():
    fw = firewall()
    fw.drop([("n1", "n2")])
    control = FakeQueuedPacket(tcp("10.9.0.1", NODES["n2"], 5, 6, 7))
    fw.handle(control)
    assert control.verdict == "accept" and fw.counts["outside"] == 1 and fw.counts["seen"] == 0


def test_icmp_between_nodes_obeys_rules_without_an_id():
    fw = firewall()
    fw.drop([("n1", "n2")])
    ping = FakeQueuedPacket(ipv4(NODES["n1"], NODES["n2"], 1, b"\x08\x00" + b"\x00" * 6))
    fw.handle(ping)
    assert ping.verdict == "drop" and fw.counts["no_id"] == 1 and len(fw.log) == 0


def test_delay_holds_then_releases_in_order_per_link():
    fw = firewall()
    fw.delay([("n1", "n2")], 50_000_000)
    held = [pkt("n1", "n2", seq=i) for i in range(3)]
    other = pkt("n2", "n1")
    for p in held:
        fw.handle(p)
    fw.handle(other)
    assert other.verdict == "accept"
    assert all(p.retained and p.verdict is None for p in held)
    # A shorter delay afterwards must not overtake the packets already held.
    fw.delay([("n1", "n2")], 1_000_000)
    late = pkt("n1", "n2", seq=9)
    fw.handle(late)
    first_due = fw._held[("n1", "n2")][0].due
    assert fw.release_due(first_due - 1) == first_due
    assert all(p.verdict is None for p in held + [late])
    fw.release_due(first_due + 10**9)
    assert [p.verdict for p in held + [late]] == ["accept"] * 4
    assert fw.counts["delayed"] == 4 and fw.counts["released"] == 4


def test_heal_releases_and_drop_discards_held_packets():
    fw = firewall()
    fw.delay([("n1", "n2"), ("n1", "n3")], 10**9)
    a, b = pkt("n1", "n2"), pkt("n1", "n3")
    fw.handle(a)
    fw.handle(b)
    assert fw.heal([("n1", "n2")])["held_released"] == 1 and a.verdict == "accept"
    assert fw.drop([("n1", "n3")])["held_dropped"] == 1 and b.verdict == "drop"
    assert fw.held() == 0


def test_duplicate_accepts_and_injects_copies():
    fw = firewall()
    fw.duplicate([("n1", "n2")], 2)
    p = pkt("n1", "n2")
    fw.handle(p)
    assert p.verdict == "accept"
    assert fw.injected == [(p.buf, ip_int(NODES["n2"]))] * 2


def test_a_truncated_packet_is_accepted_untouched():
    fw = firewall()
    fw.drop([("n1", "n2")])
    short = FakeQueuedPacket(b"\x45" + b"\x00" * 5)  # shorter than an IPv4 header
    fw._safe_handle(short)
    assert short.verdict == "accept" and fw.counts["outside"] == 1


def test_a_packet_the_code_fails_on_is_accepted_and_counted():
    class Exploding(FakeQueuedPacket):
        def get_payload(self):
            raise RuntimeError("boom")

    fw = firewall()
    p = Exploding(b"")
    fw._safe_handle(p)
    assert p.verdict == "accept" and fw.counts["errors"] == 1 and "boom" in fw.last_error
