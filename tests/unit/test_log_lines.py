"""Log lines: one `LogPattern` and one normaliser for the log oracle and the log events."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from mallory.log_lines import LogPattern, normalise
from mallory.observer.log_events import parse_log_events
from mallory.oracles.logs import DEFAULT_PATTERNS, scan_log


def test_one_pattern_for_the_log_oracle_and_the_log_events():
    configured = parse_log_events([{"pattern": r"stale term \d+", "name": "stale-term"}], "x.toml")
    assert configured == (LogPattern(r"stale term \d+", "stale-term"),)
    [finding] = scan_log(["rejecting append from stale term 4"], patterns=configured)
    assert finding.kind == "stale-term" and finding.key == ("stale term <n>",)
    panic = next(p for p in DEFAULT_PATTERNS if p.name == "panic")
    assert isinstance(panic, LogPattern) and panic.regex.search("PANIC: oops")  # in any case


WORDS = st.text(alphabet="ghijklmnopqrstuvwxyz:;()[]=,/-", min_size=1, max_size=8)
NUMBERS = st.integers(min_value=0, max_value=10**19).map(str) | st.floats(0, 1e6, allow_nan=False).map(lambda f: f"{f:.3f}")
HEX_IDS = st.integers(min_value=0, max_value=2**64 - 1).map(lambda i: f"{i:016x}").filter(
    lambda h: re.search(r"[a-f]", h) is not None and re.search(r"\d", h) is not None
)
ADDRESSES = st.tuples(*[st.integers(0, 255)] * 4, st.integers(1, 65535)).map(lambda t: "%d.%d.%d.%d:%d" % t)
QUOTED = st.text(alphabet=st.characters(blacklist_characters='"\\\n'), max_size=10).map(lambda s: f'"{s}"')
SLOTS = {"<n>": NUMBERS, "<hex>": HEX_IDS, "<addr>": ADDRESSES, "<q>": QUOTED}
TEMPLATES = st.lists(WORDS | st.sampled_from(sorted(SLOTS)), min_size=1, max_size=10)


@st.composite
def two_fillings(draw):
    template = draw(TEMPLATES)
    fill = lambda: " ".join(draw(SLOTS[t]) if t in SLOTS else t for t in template)  # noqa: E731
    return template, fill(), fill()


@settings(max_examples=300, deadline=None)
@given(two_fillings())
def test_normaliser_gives_one_kind_whatever_the_variable_parts(case):
    template, first, second = case
    assert normalise(first) == normalise(second)
    assert normalise(first) == normalise(" ".join(template))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_normaliser_is_idempotent_and_leaves_no_digits(text):
    once = normalise(text, 96)
    assert normalise(once, 96) == once
    assert not re.search(r"\d", once)
    assert len(once) <= 96


def test_normaliser_examples():
    assert normalise("a023d910eeb241cb became leader at term 5") == normalise("77fbfd6041c9f8ba became leader at term 6")
    assert normalise("x became leader at term 5") != normalise("x became follower at term 5")
    assert normalise("took 794.839µs to dial http://10.1.2.3:2380 at 2026-11-21T21:51:37.703Z") == (
        "took <n>µs to dial http://<addr> at <time>"
    )
    assert normalise('member "n1" id 0xdeadbeef') == "member <q> id <hex>"


def test_normalise_message_blanks_what_varies():
    a = normalise("10:00:01 node 10.0.0.3:7000 lost lease 0xdeadbeef after 1500ms")
    b = normalise("11:22:33 node 10.0.0.9:7001 lost lease 0x1234 after 20ms")
    assert a == b
