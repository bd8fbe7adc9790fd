"""Log-derived events (mallory/observer/log_events.py) on real etcd 3.4 log lines (captured
from a 3-member etcd cluster: elections, a paused leader, a killed and restarted member,
snapshots), event names, the tail's rotation/truncation/partial-line/restart handling,
and the spec and observer wiring."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mallory.errors import MalloryError
from mallory.harness.spec import SpecError, parse_spec
from mallory.observer.log_events import (
    FileTail,
    LineMatcher,
    LogPattern,
    LogWatcher,
    WatchedPattern,
    event_name,
    load_log_events,
    log_event_id,
    message_of,
    parse_log_events,
    write_watch_file,
)
from mallory.timeline.event import Kind

FIXTURES = Path(__file__).parent / "fixtures"
LEADER_LOG = FIXTURES / "etcd-3.4-leader.log"
RESTARTED_LOG = FIXTURES / "etcd-3.4-follower-restarted.log"

ETCD_PATTERNS = [
    ("became leader at term", "became-leader"),
    ("elected leader", "elected-leader"),
    ("lost leader", "lost-leader"),
    ("saved snapshot", "saved-snapshot"),
    ("added member", "added-member"),
]


def watcher(path: Path, entries, cursor: Path | None = None) -> LogWatcher:
    return LogWatcher("n1", [WatchedPattern(p, n, str(path)) for p, n in entries], str(cursor) if cursor else None)


def names(w: LogWatcher) -> list[str]:
    return [e.data for e in w.poll_events()]


def grown(tmp_path: Path) -> Path:
    """An empty log file, created before the watcher starts (so it reads from offset 0)."""
    path = tmp_path / "sut.log"
    path.write_bytes(b"")
    return path


# -- real etcd lines ------------------------------------------------------------------------


def test_etcd_leader_log_gives_the_named_events_in_order(tmp_path):
    log = grown(tmp_path)
    w = watcher(log, ETCD_PATTERNS)
    assert w.poll_events() == []
    log.write_bytes(LEADER_LOG.read_bytes())
    events = w.poll_events()
    got = [e.data for e in events]
    text = LEADER_LOG.read_text()
    expected = []
    for line in text.splitlines():
        for pattern, name in ETCD_PATTERNS:
            if pattern in line:
                expected.append(name)
                break
    assert got == expected
    assert got.index("became-leader") < got.index("saved-snapshot")
    assert got.count("added-member") == 3
    assert all(e.kind is Kind.LOG and e.node == "n1" and e.id == log_event_id(e.data) for e in events)
    assert [e.ts for e in events] == sorted({e.ts for e in events})  # distinct, in line order


def test_unnamed_pattern_names_events_by_normalised_message(tmp_path):
    log = grown(tmp_path)
    w = watcher(log, [(r'"caller":"raft/', "")])
    log.write_bytes(RESTARTED_LOG.read_bytes())
    got = names(w)
    assert "<hex> became follower at term <n>" in got
    assert "raft.node: <hex> elected leader <hex> at term <n>" in got
    assert "raft.node: <hex> lost leader <hex> at term <n>" in got
    # one kind per message shape, whatever the terms and ids
    assert len(set(got)) < len(got)
    assert not any(re.search(r"\d{2}|[0-9a-f]{16}", n) for n in got)


def test_restarted_member_log_event_order(tmp_path):
    log = grown(tmp_path)
    w = watcher(log, [("saved snapshot", "saved-snapshot"), ("recovered v3 backend from snapshot", "recovered-from-snapshot"),
                      ("restarting local member", "restarted")])
    log.write_bytes(RESTARTED_LOG.read_bytes())
    got = names(w)
    assert got[0] == "saved-snapshot"
    assert got.index("recovered-from-snapshot") < got.index("restarted")
    assert names(w) == []


def test_first_entry_in_configuration_order_wins():
    m = LineMatcher([("leader", "any-leader"), ("became leader", "became-leader")])
    assert m.name("a became leader at term 2") == "any-leader"
    m = LineMatcher([("became leader", "became-leader"), ("leader", "any-leader")])
    assert m.name("a became leader at term 2") == "became-leader"
    assert m.name("a follower") is None


def test_patterns_that_need_their_line_alone_are_matched_line_by_line():
    # a back reference and an absolute anchor mean something else in a chunk of lines
    m = LineMatcher([(r"(\w+) then \1", "repeat"), (r"\Astart", "start"), (r"(?i)PANIC", "panic")])
    assert m.line_by_line
    text = "x then y\nfoo then foo\nstart here\nnot start\nbig panic\n"
    assert m.names(text) == ["repeat", "start", "panic"]
    assert not LineMatcher([(r"(?i)PANIC", "panic"), ("^a.*b$", "ab")]).line_by_line


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="ab \t:01x\\n", max_size=12), max_size=12))
def test_chunk_scan_agrees_with_line_by_line(lines):
    entries = [("a b", "ab"), ("^1", "one"), ("x$", "x-end"), (r"b\s*:", ""), (r"(?s)0.*1", "span"), ("(?i)AX", "ax")]
    m = LineMatcher(entries)
    joined = "\n".join(line.replace("\n", " ") for line in lines)
    assert m.names(joined) == [n for n in map(m.name, joined.split("\n")) if n is not None]


def test_message_of_zap_json_and_text_lines():
    line = LEADER_LOG.read_text().splitlines()[65]
    assert "became leader" in line
    assert message_of(line) == "a023d910eeb241cb became leader at term 2"
    assert message_of("2026-11-21 21:51:37.600174 I | raft: ab became leader") == "I | raft: ab became leader"
    assert event_name("{not json") == "{not json"


# -- tailing ----------------------------------------------------------------------------------


def test_partial_lines_wait_for_their_newline(tmp_path):
    log = grown(tmp_path)
    w = watcher(log, [("became leader", "became-leader")])
    with open(log, "ab") as f:
        f.write(b"x became lea")
        f.flush()
        assert names(w) == []
        f.write(b"der at term 3\nnext")
        f.flush()
        assert names(w) == ["became-leader"]
        f.write(b" became leader\n")
        f.flush()
        assert names(w) == ["became-leader"]


def test_existing_content_is_an_earlier_runs_and_is_skipped(tmp_path):
    log = tmp_path / "sut.log"
    log.write_bytes(b"old became leader\n")
    w = watcher(log, [("became leader", "L")])
    assert names(w) == []
    with open(log, "ab") as f:
        f.write(b"new became leader\n")
    assert names(w) == ["L"]


def test_a_file_created_after_the_start_is_read_from_its_beginning(tmp_path):
    log = tmp_path / "later.log"
    w = watcher(log, [("became leader", "L")])
    assert names(w) == []
    log.write_bytes(b"a became leader\nb became leader\n")
    assert names(w) == ["L", "L"]


def test_rotation_by_rename_reads_the_old_file_to_its_end_first(tmp_path):
    log = grown(tmp_path)
    w = watcher(log, [(r"line (\d+)", "")])
    with open(log, "ab") as f:
        f.write(b"line 1\n")
    assert len(names(w)) == 1
    with open(log, "ab") as f:
        f.write(b"line 2\nline 3 no newline")
    os.rename(log, tmp_path / "sut.log.1")
    log.write_bytes(b"line 4\n")
    got = names(w)
    assert got == ["line <n>", "line <n> no newline", "line <n>"]  # 2, the unterminated 3, then 4
    assert w.files[0][0].rotations == 1


def test_truncation_starts_over(tmp_path):
    log = grown(tmp_path)
    w = watcher(log, [("leader", "L")])
    log.write_bytes(b"a leader\n" * 10)
    assert names(w) == ["L"] * 10
    log.write_bytes(b"b leader\n")  # truncated (O_TRUNC: same inode) and rewritten shorter
    assert names(w) == ["L"]
    assert w.files[0][0].truncations == 1


def test_the_sut_restarting_appends_without_loss_or_duplicates(tmp_path):
    log = grown(tmp_path)
    w = watcher(log, [(r"msg (\d+)", "m")])
    lines = LEADER_LOG.read_bytes().splitlines(keepends=True)
    total = 0
    for start in range(0, 60, 20):  # three "process lifetimes", each opening the log for append
        with open(log, "ab") as f:
            for i in range(start, start + 20):
                f.write(b"msg %d " % i + lines[i])
        total += len(names(w))
    assert total == 60


def test_a_restarted_observer_resumes_at_its_cursor(tmp_path):
    log = grown(tmp_path)
    cursor = tmp_path / "cursor.json"
    first = watcher(log, [(r"msg (\d+)", "")], cursor)
    with open(log, "ab") as f:
        f.write(b"msg 1\nmsg 2\nmsg 3 partial")
    assert len(first.poll_events()) == 2
    first.checkpoint()
    first.close()
    with open(log, "ab") as f:  # written while no observer ran
        f.write(b" end\nmsg 4\n")
    second = watcher(log, [(r"msg \d+", "")], cursor)
    got = second.poll_events()
    assert [e.data for e in got] == ["msg <n> partial end", "msg <n>"]


def test_a_torn_cursor_falls_back_to_the_files_end(tmp_path):
    log = tmp_path / "sut.log"
    log.write_bytes(b"x leader\n")
    cursor = tmp_path / "cursor.json"
    cursor.write_text("{torn")
    w = watcher(log, [("leader", "L")], cursor)
    assert names(w) == []


def test_very_long_lines_are_cut(tmp_path):
    log = grown(tmp_path)
    w = watcher(log, [("x", "X")])
    log.write_bytes(b"x" * ((1 << 20) + 10))
    assert names(w) == ["X"]  # given out without waiting for a newline that may never come
    assert w.files[0][0].position()[2] == (1 << 20) + 10
    with open(log, "ab") as f:
        f.write(b"x\n")
    assert names(w) == ["X"]


def test_tail_of_missing_file_reports_nothing(tmp_path):
    tail = FileTail(str(tmp_path / "nope.log"))
    assert tail.read_lines() == []
    assert tail.position() is None


# -- configuration ------------------------------------------------------------------------------

SPEC = """
name = "x"
[start]
command = ["srv", "{port}"]
[ports]
client = 7000
[[log_events]]
pattern = 'became leader at term (\\d+)'
name = "became-leader"
[[log_events]]
pattern = 'snapshot'
file = "{log_dir}/raft-{port_client}.log"
"""


def test_spec_log_events_parse():
    spec = parse_spec(SPEC)
    assert spec.log_events == (
        LogPattern(r"became leader at term (\d+)", "became-leader", ""),
        LogPattern("snapshot", "", "{log_dir}/raft-{port_client}.log"),
    )


@pytest.mark.parametrize(
    "entry, message",
    [
        ("pattern = '('", "log_events[0].pattern: not a valid regex"),
        ("name = 'x'", "log_events[0].pattern: required"),
        ("pattern = 'a'\nfile = '{nope}/x'", "log_events[0].file: unknown placeholder {nope}"),
        ("pattern = 'a'\ncolour = 'red'", "log_events[0].colour: unknown field"),
    ],
)
def test_broken_log_events_are_spec_errors(entry, message):
    text = SPEC.split("[[log_events]]")[0] + "[[log_events]]\n" + entry + "\n"
    with pytest.raises(SpecError, match=re.escape(message)):
        parse_spec(text, source="s.toml")


def test_log_events_must_be_a_list():
    with pytest.raises(MalloryError, match="must be a list"):
        parse_log_events({"pattern": "x"}, "f.json")


def test_watch_file_round_trips_paths_with_braces(tmp_path):
    watched = [WatchedPattern("a", "A", str(tmp_path / "odd{dir}" / "x.log")), WatchedPattern("b", "", "/var/log/y.log")]
    path = tmp_path / "watch.json"
    write_watch_file(str(path), watched)
    patterns, ports = load_log_events(str(path))
    assert ports == {}
    assert [p.file.format_map({}) for p in patterns] == [w.path for w in watched]
    assert [(p.pattern, p.name) for p in patterns] == [("a", "A"), ("b", "")]


def test_load_log_events_from_a_spec_names_its_ports(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SPEC)
    patterns, ports = load_log_events(str(path))
    assert len(patterns) == 2 and ports == {"client": 7000}
    bad = tmp_path / "bad.json"
    bad.write_text("[1]")
    with pytest.raises(MalloryError, match="no log_events"):
        load_log_events(str(bad))


# -- the observer ---------------------------------------------------------------------------------


class FakeSender:
    """Stands in for BatchSender: keeps what the observer submits."""

    def __init__(self) -> None:
        self.batches: list[tuple[list, int, int]] = []

    def submit(self, events, until_ns, lost=0) -> None:
        self.batches.append((events, until_ns, lost))


def test_observer_batches_log_events_in_time_order_before_the_cut(tmp_path):
    import time

    from mallory.observer.observer import Observer
    from mallory.timeline.event import Event

    log = grown(tmp_path)
    cursor = tmp_path / "cursor.json"
    sender = FakeSender()
    logs = watcher(log, ETCD_PATTERNS, cursor)
    obs = Observer("n1", None, sender, logs=logs)
    packet_ts = time.monotonic_ns()
    log.write_bytes(LEADER_LOG.read_bytes())
    obs.poll_logs()  # stamped after packet_ts, added before the packet below
    obs._events.append(Event("n1", Kind.SEND, packet_ts, 1, "00"))
    obs.cut()
    [(events, until, _)] = sender.batches
    assert events[0].kind is Kind.SEND
    assert [e.data for e in events[1:]][:2] == ["added-member", "added-member"]
    assert [e.ts for e in events] == sorted(e.ts for e in events)
    assert all(e.ts < until for e in events)
    assert obs.log_events == len(events) - 1
    # the cut saved the cursor: a restarted watcher reads nothing twice
    with open(log, "ab") as f:
        f.write(LEADER_LOG.read_bytes().splitlines(keepends=True)[65])  # "became leader"
    again = watcher(log, ETCD_PATTERNS, cursor)
    assert names(again) == ["became-leader"]


def test_observer_loop_reads_the_logs_between_cuts(tmp_path):
    import threading

    from mallory.observer.observer import Observer
    from mallory.polling import wait_until

    log = grown(tmp_path)
    sender = FakeSender()
    obs = Observer("n1", None, sender, interval=3600.0, logs=watcher(log, ETCD_PATTERNS))
    stop = threading.Event()
    loop = threading.Thread(target=obs.run, args=(stop,))
    loop.start()
    try:
        log.write_bytes(LEADER_LOG.read_bytes())
        wait_until(lambda: obs.log_events, 30, "the observer loop to read the log")
        assert sender.batches == []  # read by the loop's own poll, not by a cut
    finally:
        stop.set()
        loop.join(30)
    assert not loop.is_alive()
    assert [e.data for e in obs._events][:2] == ["added-member", "added-member"]


def test_observe_refuses_a_broken_log_events_file(tmp_path):
    import subprocess
    import sys

    bad = tmp_path / "bad.json"
    bad.write_text('{"log_events": [{"pattern": "("}]}')
    argv = [sys.executable, "-m", "mallory.cli", "observe", "--node", "n1", "--mediator", "127.0.0.1:9",
            "--no-packets", "--nice", "0", "--log-events", str(bad)]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == 254
    assert "log_events[0].pattern: not a valid regex" in result.stderr
    assert "Traceback" not in result.stderr
