"""The [messages] section (mallory/observer/messages.py): what it accepts, the one-line
error for each mistake, the observer's file, and an observer that frames declared flows."""

from __future__ import annotations

import pytest

from mallory.errors import MalloryError
from mallory.harness.spec import SpecError, parse_spec
from mallory.observer.framing import MessageSplitter
from mallory.observer.messages import (
    LengthField,
    MessageFormat,
    PeerMessages,
    TypeField,
    load_watch_file,
    parse_messages,
    peer_messages,
    write_watch_file,
)
from mallory.observer.nfq import NF_INET_LOCAL_IN, NF_INET_LOCAL_OUT
from mallory.observer.observer import Observer
from mallory.observer.packet import id_and_data
from mallory.timeline.event import (
    CONTINUATION,
    Kind,
    bytes_part,
    is_message_name,
    message_data,
    message_part,
    message_types,
    packet_data,
)

from .test_framing import packet

PORTS = {"client": 7000, "peer": 7001}
SPEC = """
name = "s"
[start]
command = ["prog"]
[ports]
client = 7000
peer = 7001
"""


def classify(head: bytes) -> str:
    return "hello"


def test_a_full_declaration_round_trips_through_the_observers_file(tmp_path):
    fmt = parse_messages({"ports": ["peer", "client"], "length": {"offset": 2, "size": 2, "order": "little",
                                                                  "counts": "message", "max": 4096},
                          "type": {"offset": 1, "names": {"0x10": "hello-msg", "3": "bye"}, "default": "misc"}},
                         "s.toml", PORTS)
    assert fmt == MessageFormat(ports=("peer", "client"),
                                length=LengthField(2, 2, "little", "message", 0, 4096),
                                type=TypeField(1, 1, "big", {16: "hello-msg", 3: "bye"}, "misc"))
    path = str(tmp_path / "m.json")
    write_watch_file(path, peer_messages(fmt, PORTS, "s.toml"))
    assert load_watch_file(path) == PeerMessages(fmt, (7000, 7001))
    lines = parse_messages({"delimiter": "\r\n", "classifier": f"{__name__}:classify", "peek": 9}, "s")
    write_watch_file(path, PeerMessages(lines, (7001,)))
    assert load_watch_file(path).format == lines


@pytest.mark.parametrize("raw, error", [
    ([], "messages: must be a table"),
    ({"delimiter": "\n", "type": {}, "colour": 1}, "messages.colour: unknown field"),
    ({"type": {}}, "needs exactly one of length, delimiter, framer (has none)"),
    ({"delimiter": "\n", "length": {"header": 4}, "type": {}}, "(has length, delimiter)"),
    ({"delimiter": "\n"}, "needs exactly one of type, classifier (has none)"),
    ({"framer": "mallory.suts.raft_kv.wire:LIBRAFT_UV", "type": {}}, "messages.type: not with `framer`"),
    ({"ports": ["raft"], "delimiter": "\n", "type": {}}, "messages.ports: names no port in [ports]: 'raft'"),
    ({"ports": [], "delimiter": "\n", "type": {}}, "messages.ports: must be a non-empty list"),
    ({"delimiter": "", "type": {}}, "messages.delimiter: must be a non-empty string"),
    ({"delimiter": "\u20ac", "type": {}}, "messages.delimiter: must be a non-empty string of bytes"),
    ({"length": {"size": 3, "header": 4}, "type": {}}, "messages.length.size: must be one of 1, 2, 4, 8, not 3"),
    ({"length": {"order": "middle", "header": 4}, "type": {}}, "messages.length.order: must be one of big, little"),
    ({"length": {"counts": "words"}, "type": {}}, "messages.length.counts: must be one of body, message"),
    ({"length": {"offset": 2, "size": 4, "header": 4}, "type": {}}, "messages.length.header: the body follows the header"),
    ({"length": {"header": 4, "max": 0}, "type": {}}, "messages.length.max: must be an integer 1.."),
    ({"length": {"header": 4, "offset": -1}, "type": {}}, "messages.length.offset: must be an integer 0.."),
    ({"delimiter": "\n", "type": {"offset": 5000}}, "messages.type.offset: must be an integer 0..4096, not 5000"),
    ({"length": 4, "type": {}}, "messages.length: must be a table"),
    ({"delimiter": "\n", "type": {"width": 1}}, "messages.type.width: unknown field"),
    ({"delimiter": "\n", "type": {"names": {"x": "a-b"}}}, "messages.type.names: 'x' is not a number"),
    ({"delimiter": "\n", "type": {"names": {"256": "big-one"}}}, "messages.type.names: '256' does not fit in 1 byte"),
    ({"delimiter": "\n", "type": {"names": {"1": "beef"}}}, "messages.type.names.1: 'beef' is not a message name"),
    ({"delimiter": "\n", "type": {"names": {"1": "cont"}}}, "messages.type.names.1: 'cont' is not a message name"),
    ({"delimiter": "\n", "type": {"default": "two words"}}, "messages.type.default: 'two words' is not a message name"),
    ({"delimiter": "\n", "classifier": "no_colon"}, "messages.classifier: must be a 'module:attribute' reference"),
    ({"delimiter": "\n", "classifier": "mallory.no_such_module:f"}, "messages.classifier: cannot import mallory.no_such_module"),
    ({"delimiter": "\n", "classifier": f"{__name__}:nothing"}, "has no nothing"),
    ({"delimiter": "\n", "classifier": f"{__name__}:PORTS"}, "is not a function"),
    ({"framer": f"{__name__}:classify"}, "is not a framer (no cut method)"),
    ({"delimiter": "\n", "type": {}, "peek": 0}, "messages.peek: must be an integer 1..4096, not 0"),
])
def test_each_mistake_gets_one_line_naming_the_field(raw, error):
    with pytest.raises(MalloryError) as caught:
        parse_messages(raw, "s.toml", PORTS)
    message = str(caught.value)
    assert message.startswith("s.toml: messages") and error in message and "\n" not in message


def test_a_spec_with_a_broken_messages_section_is_a_spec_error():
    with pytest.raises(SpecError, match=r"^t.toml: messages.type.size: must be one of 1, 2, 4, 8, not 5$"):
        parse_spec(SPEC + '[messages]\ndelimiter = "\\n"\ntype = { size = 5 }\n', "t.toml")
    assert parse_spec(SPEC, "t.toml").messages is None
    spec = parse_spec(SPEC + '[messages]\ndelimiter = "\\n"\ntype = { names = { "65" = "append" } }\n', "t.toml")
    assert spec.messages.type.names == {65: "append"} and spec.messages.ports == ("peer",)


def test_message_names_never_read_as_payload_hex():
    assert all(map(is_message_name, ["append", "vote-request", "g1", "ADD", "x"]))
    assert not any(map(is_message_name, ["add", "a1", "17030300", "cont", "", "?", "a b", "x" * 33]))
    assert message_data(["vote", "append", "vote"]) == "append+vote"
    assert message_types("append+vote") == ("append", "vote")
    assert message_types("17030300") == message_types("cont") == message_types("?") == message_types("") == ()
    assert message_types("append+vote#41203320") == ("append", "vote") and message_types("cont#cont") == ()


def test_a_declared_flows_data_keeps_what_it_would_be_without_the_declaration():
    assert packet_data("append+vote", "41203320") == "append+vote#41203320"
    assert packet_data("?", "cont") == "?#cont" and packet_data("", "") == ""
    for data, messages, raw in [("append#41203320", "append", "41203320"), ("41203320", "41203320", "41203320"),
                                ("cont#cont", "cont", "cont"), ("", "", "")]:
        assert (message_part(data), bytes_part(data)) == (messages, raw)


def test_an_observer_with_a_format_names_declared_flows_and_keeps_hex_elsewhere():
    class Sender:
        def submit(self, events, until_ns, lost=0):
            self.events = events

    fmt = parse_messages({"delimiter": "\n", "type": {"names": {"86": "vote", "97": "append-reply"}}}, "s")
    sender = Sender()
    obs = Observer("n1", None, sender, messages=MessageSplitter(PeerMessages(fmt, (7001,))))
    syn = packet(b"", 99, flags=0x02)
    framed = packet(b"V 3 n1\na 3 1 4 1\n", 100, flags=0x18)
    other = packet(b"PUT k v\n", 5, dport=7000)
    obs.on_packets([(0, NF_INET_LOCAL_OUT, 9, syn), (1, NF_INET_LOCAL_OUT, 10, framed), (2, NF_INET_LOCAL_OUT, 11, other)])
    obs.cut()
    assert [(e.kind, e.id, e.data) for e in sender.events] == [
        (Kind.SEND, id_and_data(syn)[0], ""),
        (Kind.SEND, id_and_data(framed)[0], "append-reply+vote#" + b"V 3 ".hex()),
        (Kind.SEND, id_and_data(other)[0], b"PUT ".hex()),
    ]


def test_an_undeclared_flow_reads_alike_with_a_format_or_without_one():
    # Observer keeps two packet loops (one per case, so no format costs nothing per
    # packet): on flows the format does not declare they must give the same events.
    class Sender:
        def submit(self, events, until_ns, lost=0):
            self.events = events

    client = [
        packet(b"", 1, dport=7000, flags=0x02),  # SYN: no payload
        packet(b"PUT k " + b"v" * 20, 2, dport=7000, flags=0x10),  # a write's first segment, no PSH
        packet(b"v" * 30 + b"\n", 28, dport=7000, flags=0x18),  # ... and its last
        packet(b"GET k\n", 59, dport=7000, flags=0x18),  # a new write
        packet(b"OK\n", 900, sport=7000, dport=40000, flags=0x18),
        packet(b"ping", 7, dport=7001, proto=17),  # UDP on the declared port: not a TCP flow
        b"junk",  # no event
    ]
    batch = [(i, NF_INET_LOCAL_IN if i == 4 else NF_INET_LOCAL_OUT, 10 + i, p) for i, p in enumerate(client)]
    fmt = parse_messages({"delimiter": "\n", "type": {"names": {"86": "vote"}}}, "s")
    events = []
    for messages in (None, MessageSplitter(PeerMessages(fmt, (7001,)))):
        sender = Sender()
        obs = Observer("n1", None, sender, messages=messages)
        obs.on_packets(batch)
        obs.cut()
        events.append([(e.kind, e.ts, e.id, e.data) for e in sender.events])
    without, with_format = events
    assert with_format == without
    assert [data for _, _, _, data in without] == [
        "", b"PUT ".hex(), CONTINUATION, b"GET ".hex(), b"OK\n".hex(), b"ping".hex()]
    assert without[4][0] is Kind.RECV and {kind for kind, _, _, _ in without[:4]} == {Kind.SEND}


def test_observe_takes_the_format_from_a_spec_or_the_campaigns_file(tmp_path):
    from mallory.commands.observe import _message_splitter
    from mallory.suts.raft_kv.adapter import DEFAULT_SPEC

    assert _message_splitter(str(DEFAULT_SPEC)).ports == {7001}
    path = str(tmp_path / "m.json")
    write_watch_file(path, PeerMessages(parse_messages({"delimiter": "\n", "type": {}}, "s"), (9000,)))
    assert _message_splitter(path).ports == {9000}
    bare = tmp_path / "bare.toml"
    bare.write_text(SPEC)
    with pytest.raises(MalloryError, match=r"bare.toml: the spec has no \[messages\] section$"):
        _message_splitter(str(bare))
    (tmp_path / "bad.json").write_text('{"port_numbers": [], "messages": {}}')
    with pytest.raises(MalloryError, match='needs "port_numbers"'):
        _message_splitter(str(tmp_path / "bad.json"))
