"""bench/bench_message_layer.py's pure parts: its arguments, the files it starts the message
layer with (the spec parses and names the bench's messages, the scenario delivers every one
and never ends its run), the stream check and the report. Nothing here needs root."""

from __future__ import annotations

import pytest

from mallory.harness.scenario_file import load_scenario
from mallory.harness.spec import load_spec
from mallory.mediator.proxy import Delivery
from mallory.mediator.scenario_driver import ScenarioDriver
from mallory.observer.framing import stream_factory
from mallory.observer.messages import load_watch_file
from mallory.scenario.events import Message
from tests.unit.bench.bench_module import load_bench

bench = load_bench("bench_message_layer")


def test_arguments_default_and_bounds():
    args = bench.parse_args([])
    assert (args.seconds, args.round_trips, args.warmup) == (5.0, 2000, 100)
    args = bench.parse_args(["--seconds", "0.5", "--round-trips", "10000", "--warmup", "0"])
    assert (args.seconds, args.round_trips, args.warmup) == (0.5, 10000, 0)
    for bad in (["--seconds", "0"], ["--round-trips", "0"], ["--round-trips", "10001"], ["--warmup", "-1"]):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)


def test_the_spec_declares_the_peer_port_and_names_ping_and_pong(tmp_path):
    files = bench.write_layer_files(tmp_path)
    spec = load_spec(files.spec)
    assert spec.ports == {"client": bench.CLIENT_PORT, "peer": bench.PEER_PORT}
    declared = load_watch_file(str(files.messages))
    assert declared.ports == (bench.PEER_PORT,)
    pieces = stream_factory(declared.format)().feed(b"ping 1\npong 1\nping 22\npo")
    assert [(p.data, p.name) for p in pieces] == [(b"ping 1\n", "ping"), (b"pong 1\n", "pong"), (b"ping 22\n", "ping")]
    assert files.mediator_args() == ["--scenario", str(files.scenario), "--messages", str(files.messages)]


def test_the_scenario_has_the_engine_deliver_every_message_and_never_end(tmp_path):
    files = bench.write_layer_files(tmp_path)
    driver = ScenarioDriver(load_scenario(files.scenario), ["n1", "n2"])
    for seq in range(50):
        ping = Message(f"m{2 * seq + 1}", "n1", "n2", "ping")
        assert driver.on_message(ping).deliver == (Delivery(ping.id),)
        driver.on_delivered(ping)
        pong = Message(f"m{2 * seq + 2}", "n2", "n1", "pong")
        assert driver.on_message(pong).deliver == (Delivery(pong.id),)
        driver.on_delivered(pong)
    report = driver.report()
    assert not report["ended"]
    assert report["events"] == 200  # every SEND and RECV went through the engine
    assert report["messages"] == {"n1->n2": {"ping": {"sent": 50, "delivered": 50}},
                                  "n2->n1": {"pong": {"sent": 50, "delivered": 50}}}


def test_the_stream_check_takes_the_stream_in_any_chunks_across_its_wrap():
    stream = bench.PingStream(count=3)
    assert stream.data == b"ping 0\nping 1\nping 2\n"
    sent = stream.data * 3
    for start, end in ((0, 5), (5, 20), (20, 45), (45, len(sent))):
        assert stream.received(sent[start:end])
    assert stream.intact


@pytest.mark.parametrize("wrong", [
    b"ping 0\nping 2\n",  # a message lost
    b"ping 0\nping 0\n",  # one repeated
    b"ping 0\nping 1\nping 2\nping 3\n",  # the wrap not made
    b"pong 0\n",  # changed
])
def test_the_stream_check_catches_a_stream_that_is_not_the_one_sent(wrong):
    stream = bench.PingStream(count=3)
    assert not stream.received(wrong)
    assert not stream.received(b"ping 0\n")  # once broken it stays so
    assert not stream.intact


def test_the_report_gives_both_numbers_their_ratio_and_the_latency_added():
    without = bench.Measurement(100_000.0, True, [0.2] * 98 + [1.0, 1.0])
    with_layer = bench.Measurement(25_000.0, True, [0.5] * 98 + [3.0, 3.0], relayed=125_400)
    lines = bench.report(without, with_layer)
    assert lines[1].split()[-3:] == ["100,000", "25,000", "0.25"]
    assert lines[2].split()[-3:] == ["0.200", "0.500", "2.50"]
    assert lines[3].split()[-3:] == ["1.000", "3.000", "3.00"]
    assert lines[4] == "added latency (p50): +0.300 ms per round trip, +0.150 ms per message"
    assert lines[5] == "stream intact: without yes, with yes; messages relayed by the proxy: 125400"


def test_a_ratio_over_nothing_is_not_a_number_and_a_small_one_keeps_its_digits():
    assert bench.ratio(5.0, 0.0) == "n/a"
    assert bench.ratio(None, 2.0) == "n/a"
    assert bench.ratio(3.0, 2.0) == "1.50"
    assert bench.ratio(37_786.0, 13_689_991.0) == "0.0028"  # not "0.00"
