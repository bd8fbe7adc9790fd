"""The Python twin of the pass's id function (the C++ side is checked in test_build_events)."""

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mallory.instrument.event_ids import event_id, fnv1a64, relative_path
from mallory.timeline.event import Kind


def test_fnv1a64_reference_vectors():
    # Published FNV-1a 64 test vectors.
    assert fnv1a64(b"") == 0xCBF29CE484222325
    assert fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a64(b"foobar") == 0x85944171F73967E8


def test_event_id_hashes_relpath_line_kind():
    assert event_id("src/raft.c", 120, Kind.FUNC) == fnv1a64(b"src/raft.c:120:FUNC")
    assert event_id("src/raft.c", 120, "BLOCK") == fnv1a64(b"src/raft.c:120:BLOCK")
    assert event_id("src/raft.c", 120, Kind.FUNC) != event_id("src/raft.c", 120, Kind.BLOCK)


def test_event_id_rejects_non_code_kinds_and_bad_lines():
    with pytest.raises(ValueError):
        event_id("a.c", 1, Kind.SEND)
    with pytest.raises(ValueError):
        event_id("a.c", 0, Kind.FUNC)


def test_relative_path_inside_and_outside_root(tmp_path):
    (tmp_path / "proj" / "src").mkdir(parents=True)
    source = tmp_path / "proj" / "src" / "x.c"
    source.write_text("")
    outside = tmp_path / "other.c"
    outside.write_text("")
    assert relative_path(source, tmp_path / "proj") == "src/x.c"
    assert relative_path(outside, tmp_path / "proj") == os.path.realpath(outside)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "proj")
    assert relative_path(link / "src" / "x.c", link) == "src/x.c"


@given(st.text(min_size=1, max_size=40), st.integers(1, 10**6), st.sampled_from(["FUNC", "BLOCK"]))
def test_ids_are_unsigned_64_bit_and_deterministic(path, line, kind):
    ident = event_id(path, line, kind)
    assert 0 <= ident < 2**64
    assert ident == event_id(path, line, kind)
