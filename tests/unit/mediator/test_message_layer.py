"""The message layer's order of start and stop (mallory/mediator/message_layer.py), with its
parts replaced by fakes that record calls: nothing diverted before the proxy listens and
the capture reads; on stop the proxy goes first (it resets the proxied connections while the
rules still bring their last packets to the gateway), then the rules, then the capture."""

from __future__ import annotations

import pytest

from mallory.errors import MalloryError
from mallory.instrument.catalogue import Catalogue
from mallory.mediator.firewall import Firewall
from mallory.mediator.message_layer import LayerConfig, MessageLayer
from mallory.observer.messages import MessageFormat, PeerMessages, TypeField

ADDRESSES = {"n1": "10.9.1.2", "n2": "10.9.2.2"}
DECLARED = PeerMessages(MessageFormat(delimiter=b"\n", type=TypeField(names={65: "append"})), (7001,))


class FakePart:
    """A fake layer part: records its calls in the shared `calls`; `fail` makes its start
    raise."""

    def __init__(self, name: str, calls: list[str], fail: bool = False) -> None:
        self.name, self.calls, self.fail = name, calls, fail
        self.error = None

    def _start(self, *args) -> None:
        self.calls.append(f"{self.name} start")
        if self.fail:
            raise MalloryError(f"{self.name} failed")

    def _stop(self) -> None:
        self.calls.append(f"{self.name} stop")

    start = install = _start
    stop = remove = _stop


def layer(calls: list[str], failing: str = "") -> MessageLayer:
    config = LayerConfig(DECLARED, Catalogue(), capture_queue=1, filter_sets={})
    made = MessageLayer(config, ADDRESSES, Firewall(ADDRESSES))
    made.proxy.stop()  # the real parts' pipes: they are replaced
    made.capture.stop()
    made.capture, made.proxy, made.diversion = (FakePart(n, calls, n == failing) for n in ("capture", "proxy", "rules"))
    return made


def test_start_diverts_last_and_stop_resets_the_connections_before_the_rules_go():
    calls: list[str] = []
    m = layer(calls)
    m.start()
    assert calls == ["capture start", "proxy start", "rules start"]
    calls.clear()
    m.stop()
    m.stop()  # again: nothing more
    assert calls == ["proxy stop", "rules stop", "capture stop"]


def test_a_failed_start_undoes_what_was_started():
    calls: list[str] = []
    with pytest.raises(MalloryError, match="rules failed"):
        layer(calls, failing="rules").start()
    assert calls == ["capture start", "proxy start", "rules start", "proxy stop", "capture stop"]
