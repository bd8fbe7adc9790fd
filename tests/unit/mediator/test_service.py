"""The mediator's own event stream (service.Mediator): a ticker that stops is not silent."""

import pytest

from mallory.cli import main
from mallory.mediator import service
from mallory.mediator.service import Mediator
from tests.unit.mediator.test_transport import wait_for


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the ticker's, on purpose
def test_what_ends_the_own_stream_is_kept():
    mediator = Mediator({"n1": "10.9.1.2", "n2": "10.9.2.2"}, token="t", api_address=("127.0.0.1", 0),
                        batch_address=("127.0.0.1", 0), batch_interval=0.01)

    def broken_subscriber(entries):
        if any(e.event.data == "boom" for e in entries):
            raise RuntimeError("a subscriber's bug")

    mediator.ingest.subscribers.append(broken_subscriber)
    mediator.start()
    try:
        assert wait_for(lambda: mediator.ingest.stats()["nodes"].get("mediator", {}).get("batches", 0) >= 3)
        assert mediator.stream_error is None
        mediator.fault_reported("boom")
        assert wait_for(lambda: mediator.stream_error is not None)
        assert isinstance(mediator.stream_error, RuntimeError)
    finally:
        mediator.stop()


def test_the_own_stream_returns_free_memory_every_trim_interval(monkeypatch):
    trims = []
    monkeypatch.setattr(service, "return_free_memory", lambda: trims.append(1) or len(trims) % 2 == 1)
    mediator = Mediator({"n1": "10.9.1.2"}, token="t", api_address=("127.0.0.1", 0),
                        batch_address=("127.0.0.1", 0), batch_interval=0.01)
    mediator.TRIM_INTERVAL_S = 0.05
    mediator.start()
    try:
        assert wait_for(lambda: len(trims) >= 4)
    finally:
        mediator.stop()
    assert mediator.trims == (len(trims) + 1) // 2  # only the calls that returned memory count
    assert mediator.metrics()["memory"]["trims"] == mediator.trims
    assert mediator.metrics()["memory"]["free_ms"] >= 0
    assert mediator.ingest.stats()["nodes"]["mediator"]["batches"] > len(trims)  # not every tick


def test_the_command_exits_once_the_own_stream_stopped(capsys, monkeypatch):
    """Without its ticker nothing flushes the mediator's own events: they would pile up in
    memory with every client op, so the command ends (the campaign's watchdog sees it)."""
    monkeypatch.setenv("MALLORY_TOKEN", "t")
    stopped = []

    def start_then_break(self):
        self.stream_error = OSError(28, "No space left on device")
        return self

    monkeypatch.setattr(service.Mediator, "start", start_then_break)
    monkeypatch.setattr(service.Mediator, "stop", lambda self: stopped.append(True))
    code = main(["mediator", "--node", "n1=10.9.1.2", "--api", "127.0.0.1:0", "--no-firewall", "--batch", "127.0.0.1:0"])
    err = capsys.readouterr().err
    assert code == 254 and "own event stream stopped" in err and "No space left" in err and stopped == [True], err
