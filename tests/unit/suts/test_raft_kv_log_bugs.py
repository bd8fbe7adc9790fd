"""raft-kv's `[[log_bugs]]` (suts/raft/raft.toml) on libraft 0.15's real trace: the line
libraft writes when a new leader's log contradicts a committed entry is one finding,
named for what broke, signed the same whatever the terms and indexes; the ordinary
mismatches of Raft's log repair are not bugs; the built-in adapter carries the lines."""

from __future__ import annotations

import re

from mallory.harness.adapter import DeclaresLogBugs
from mallory.harness.spec import load_spec
from mallory.oracles.logs import DEFAULT_PATTERNS, scan_log
from mallory.suts.raft_kv.adapter import DEFAULT_SPEC, RaftKvAdapter

SPEC = load_spec(DEFAULT_SPEC)
PATTERNS = SPEC.log_bugs + DEFAULT_PATTERNS

#: n1's log in campaign raft10, schedule 12 (logs/n1-sut.log, lines 4079-4087): n3 leads
#: term 342 without the committed entries 10211..10344 and sends AppendEntries; libraft on
#: n1 finds its committed entry 10254 of term 313 where n3 has term 333, and shuts down
RAFT10_N1 = """\
LIBRAFT   1795757329252840648 src/election.c:263 remote log shorter than local -> not granting vote
LIBRAFT   1795757329252919156 src/uv_send.c:213 no connection available -> enqueue message
LIBRAFT   1795757329252927498 src/recv_append_entries.c:36 self:4194488463900190094 from:13628964739164703378@10.106.3.2:7001 leader_commit:10188 n_entries:0 prev_log_index:10254 prev_log_term:333, term:342
LIBRAFT   1795757329252931354 src/replication.c:951 conflicting terms 313 and 333 for entry 10254 (commit index 10309) -> shutdown
LIBRAFT   1795757329252933317 src/recv.c:76 recv: 1: server is shutting down
LIBRAFT   1795757329252934238 src/convert.c:38 clear follower state
LIBRAFT   1795757329252935390 src/convert.c:23 old_state:1 new_state:0
[raft-kv 10.106.1.2:7001 term 342 unavailable] state unavailable (was follower)
[raft-kv 10.106.1.2:7001 term 342 unavailable] raft unavailable (): exiting, restart to recover
"""


def test_a_committed_entry_conflict_is_one_finding_named_for_it():
    (finding,) = scan_log(RAFT10_N1.splitlines(), "n1", PATTERNS)
    assert (finding.oracle, finding.kind, finding.node) == ("log", "libraft-committed-entry-conflict", "n1")
    assert finding.details == {"line": 4} and "conflicting terms 313 and 333" in finding.message
    assert finding.key == ("conflicting terms <n> and <n> for entry <n> (commit index <n>) -> shutdown",)
    assert finding.signature.startswith("log-libraft-committed-entry-conflict-")


def test_its_signature_does_not_change_with_the_terms_and_indexes():
    (first,) = scan_log(RAFT10_N1.splitlines(), "n1", PATTERNS)
    other = re.sub(r"\d+", lambda m: str(int(m.group()) * 7 + 1), RAFT10_N1)  # other terms, indexes, times, line
    (second,) = scan_log(other.splitlines(), "n3", PATTERNS)
    assert second.signature == first.signature and second.message != first.message


def test_a_new_entry_conflicting_with_a_committed_one_is_the_other_bug():
    # the text of src/replication.c:993 at v0.15.0, as the trace writes it
    line = "LIBRAFT   1795757329252931354 src/replication.c:993 new index conflicts with committed entry -> shutdown"
    (finding,) = scan_log([line], "n2", PATTERNS)
    assert finding.kind == "libraft-committed-entry-overwrite"
    (conflict,) = scan_log(RAFT10_N1.splitlines(), "n1", PATTERNS)
    assert finding.signature != conflict.signature


def test_the_mismatches_raft_repairs_are_not_bugs():
    repairs = [
        "LIBRAFT   1795757329252931354 src/replication.c:944 no entry at index 10254 -> reject",
        "LIBRAFT   1795757329252931354 src/replication.c:958 previous term mismatch -> reject",
        "LIBRAFT   1795757329252931354 src/replication.c:997 log mismatch -> truncate (10255)",
        "LIBRAFT   1795757329252931354 src/replication.c:692 log mismatch -> send old entries to 2",
    ]
    assert scan_log(repairs, "n1", PATTERNS) == []


def test_the_built_in_adapter_carries_the_specs_log_bugs():
    class Backend:
        nodes = ["n1", "n2", "n3"]

    adapter = RaftKvAdapter(SPEC, Backend())  # type: ignore[arg-type]
    assert isinstance(adapter, DeclaresLogBugs) and adapter.log_bugs == SPEC.log_bugs
    assert {p.name for p in adapter.log_bugs} == {"libraft-committed-entry-conflict", "libraft-committed-entry-overwrite"}
