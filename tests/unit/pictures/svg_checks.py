"""Reading the verdicts' pictures back: well-formed SVG, and the elements a test counts."""

from __future__ import annotations

import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"


def parse_svg(text: str) -> ET.Element:
    """The picture's root, after checking it is one well-formed <svg> element."""
    root = ET.fromstring(text)
    assert root.tag == f"{SVG}svg", root.tag
    return root


def elements(root: ET.Element, tag: str, cls: str) -> list[ET.Element]:
    """Every <tag class="cls"> in the picture."""
    return [e for e in root.iter(f"{SVG}{tag}") if e.get("class") == cls]


def cycle_parts(text: str) -> tuple[list[str], list[tuple[str, str, str]]]:
    """A cycle picture's transactions and its (from, rel, to) dependencies."""
    root = parse_svg(text)
    txns = [g.get("data-txn") for g in elements(root, "g", "txn")]
    deps = [(g.get("data-from"), g.get("data-rel"), g.get("data-to")) for g in elements(root, "g", "dep")]
    return txns, deps


def dots(path: ET.Element) -> int:
    """How many dots a latency plot's points path draws (one move-to each)."""
    return path.get("d").count("M")
