"""Jepsen-driven mode on a real in-process mediator: a harness declares its fault catalogue,
asks for next faults, reports the faults it enacted, and ends the test (no root needed)."""

from __future__ import annotations

import threading
import time

import pytest

from mallory.errors import MalloryError
from mallory.learner.learner import Learner
from mallory.mediator.advisor import Advisor
from mallory.mediator.client import MediatorClient
from mallory.mediator.service import Mediator
from mallory.polling import wait_until
from mallory.timeline.event import Batch, ClockPair, Event, Kind

NODES = {"n1": "10.9.1.2", "n2": "10.9.2.2"}
TOKEN = "advisor-test"
CATALOGUE = ["partition:majority", "kill:one", "pause:one", "noop"]


@pytest.fixture
def mediator(tmp_path):
    m = Mediator(NODES, token=TOKEN, api_address=("127.0.0.1", 0), batch_address=("127.0.0.1", 0),
                 batch_interval=0.02).start()
    m.advisor = Advisor(m.windows, Learner.create(policy="qlearning", seed=5), checkpoint=tmp_path / "learner",
                        wait_s=2.0)
    yield m
    m.stop()


def client(m: Mediator) -> MediatorClient:
    host, port = m.api.server_address[:2]
    return MediatorClient(host, port, TOKEN)


class FakeObservers:
    """Stands in for the nodes' observers: a batch per node every 20 ms, complete up to now,
    each with one code event of the current id (the mediator cannot tell the difference)."""

    def __init__(self, m: Mediator) -> None:
        self.m = m
        self.seq = 0
        self.code_id = 100
        self.stop = threading.Event()
        for n in NODES:
            m.ingest.on_clock(ClockPair(n, 0, 0))
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.02):
            now = time.time_ns()
            for n in NODES:
                self.m.ingest.on_batch(Batch(n, self.seq, now, [Event(n, Kind.FUNC, now - 1_000, self.code_id)]))
            self.seq += 1


def test_next_faults_come_from_the_catalogue_and_windows_follow_the_requests(mediator, tmp_path):
    committed = []
    mediator.ingest.subscribers.append(committed.extend)
    c = client(mediator)
    obs = FakeObservers(mediator)
    assert c._call("POST", "/advisor/catalogue", {"actions": CATALOGUE}) == {"actions": CATALOGUE}
    c.test_start("jepsen-1")
    answers = []
    for i in range(6):
        obs.code_id = 100 + i % 2
        time.sleep(0.1)
        answer = c._call("POST", "/advisor/next", {})
        assert answer["action"] in CATALOGUE
        assert c._call("POST", "/nemesis", {"f": answer["action"]}) == {"ok": True}
        answers.append(answer)
    complete = [a for a in answers if not a["late"]]
    assert len(complete) >= 5, answers
    assert all(a["state"] is not None and a["events"] > 0 for a in complete)
    # each window starts where the previous request's ended: aligned to the harness
    assert all(a["window_ns"][1] == b["window_ns"][0] for a, b in zip(answers, answers[1:]))
    # the reported faults entered the timeline as FAULT events of the mediator's own stream
    # (committed once the observers' batches pass them: they still run)
    def faults() -> list[str]:
        return [e.event.data for e in list(committed) if e.event.kind is Kind.FAULT]

    wait_until(lambda: len(faults()) >= len(answers), 10, "the reported faults in the timeline")
    assert faults() == [a["action"] for a in answers]
    obs.stop.set()
    ended = c.test_end()
    assert ended["advisor"]["requests"] == 6
    saved = Learner.from_checkpoint((tmp_path / "learner").read_bytes())
    assert len(saved.store) == ended["advisor"]["states"] >= 1
    assert c.status()["advisor"]["requests"] == 6


def test_advisor_requests_are_checked(mediator):
    c = client(mediator)
    with pytest.raises(MalloryError, match="no catalogue yet"):
        c._call("POST", "/advisor/next", {})
    for bad, reason in (({"actions": []}, "1..256"), ({"actions": ["a", "a"]}, "twice"), ({}, "missing field 'actions'")):
        with pytest.raises(MalloryError, match=reason):
            c._call("POST", "/advisor/catalogue", bad)
    with pytest.raises(MalloryError, match="non-empty string"):
        c._call("POST", "/nemesis", {"f": ""})


def test_a_mediator_without_advisor_says_how_to_get_one(tmp_path):
    m = Mediator(NODES, token=TOKEN, api_address=("127.0.0.1", 0), batch_address=("127.0.0.1", 0)).start()
    try:
        with pytest.raises(MalloryError, match="409 .*--advisor"):
            client(m)._call("POST", "/advisor/next", {})
    finally:
        m.stop()
