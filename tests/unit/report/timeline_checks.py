"""Reading the report's timeline outputs back, and the happens-before relation computed
independently of the code under test, for the timeline tests."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence

from mallory.report.shiviz import SHIVIZ_REGEX
from mallory.timeline.builder import Committed, TimelineBuilder
from mallory.timeline.codec import Record
from mallory.timeline.window import Timeline


def committed(records: Iterable[Record], nodes: list[str] | None = None) -> list[Committed]:
    """The whole recorded timeline, in commit order."""
    timeline = Timeline(TimelineBuilder(nodes=nodes))
    for record in records:
        timeline.add(record)
    timeline.finish()
    return timeline.take(0, 2**63 - 1)


def ancestors(entries: Sequence[Committed]) -> list[int]:
    """For each entry (a causal order), the bitset of entries that happen before it within
    the slice: the transitive closure of program order and SEND -> RECV edges."""
    position = {(e.event.node, e.index): i for i, e in enumerate(entries)}
    last_on_node: dict[str, int] = {}
    out: list[int] = []
    for i, e in enumerate(entries):
        before = 0
        prev = last_on_node.get(e.event.node)
        if prev is not None:
            before |= out[prev] | (1 << prev)
        if e.send is not None:
            j = position.get((e.send.event.node, e.send.index))
            if j is not None:
                assert j < i, "a SEND after its RECV in commit order"
                before |= out[j] | (1 << j)
        last_on_node[e.event.node] = i
        out.append(before)
    return out


def shiviz_python_regex() -> re.Pattern:
    """ShiViz's documented expression, JavaScript named groups `(?<x>` in Python's syntax."""
    return re.compile(SHIVIZ_REGEX.replace("(?<", "(?P<"))


def parse_shiviz(text: str) -> tuple[str, str, list[tuple[str, str, dict]]]:
    """(regex line, delimiter line, [(event, host, clock)]) as ShiViz reads the file."""
    regex_line, delimiter, log = text.split("\n", 2)
    pattern = re.compile(regex_line.replace("(?<", "(?P<").replace("\\n", "\n"))
    events = [(m["event"], m["host"], json.loads(m["clock"])) for m in pattern.finditer(log)]
    return regex_line, delimiter, events


def svg_elements(svg: str) -> tuple[list[dict], list[dict], list[dict]]:
    """(events, arrows, faults) of a timeline SVG, as attribute dicts."""
    root = ET.fromstring(svg)
    events = [dict(c.attrib) for c in root.iter("circle") if c.get("class") == "ev"]
    arrows = [dict(l.attrib) for l in root.iter("line") if l.get("class") == "msg"]
    faults = [dict(r.attrib) for r in root.iter("rect") if r.get("class") == "fault"]
    return events, arrows, faults


def assert_view_matches(svg: str, expected: Sequence[Committed]) -> None:
    """The diagram holds exactly the expected entries, each node's in its order left to
    right, and an arrow for every message with both ends among them, pointing right."""
    events, arrows, _ = svg_elements(svg)
    drawn = {(e["data-node"], int(e["data-index"])): e for e in events}
    assert len(drawn) == len(events), "an event is drawn twice"
    assert set(drawn) == {(e.event.node, e.index) for e in expected}
    for e in expected:
        d = drawn[(e.event.node, e.index)]
        assert (d["data-kind"], int(d["data-lamport"])) == (e.event.kind.name, e.lamport)
    by_node: dict[str, list[dict]] = {}
    for d in events:
        by_node.setdefault(d["data-node"], []).append(d)
    for node, ds in by_node.items():
        ds.sort(key=lambda d: int(d["data-index"]))
        xs = [float(d["cx"]) for d in ds]
        assert xs == sorted(xs) and len(set(xs)) == len(xs), f"{node}'s events out of causal order"
        assert len({d["cy"] for d in ds}) == 1, f"{node}'s events are not on one lane"
    inside = {(e.event.node, e.index) for e in expected}
    messages = {(f"{e.send.event.node}#{e.send.index}", f"{e.event.node}#{e.index}")
                for e in expected if e.send is not None and (e.send.event.node, e.send.index) in inside}
    assert {(a["data-send"], a["data-recv"]) for a in arrows} == messages
    for a in arrows:
        assert float(a["x1"]) < float(a["x2"]), f"message {a['data-send']} -> {a['data-recv']} points back"
