"""Waypoint files: parsing, name resolution through the catalogue, levels of windows."""

from __future__ import annotations

import pytest

from mallory.campaign.waypoints import (
    event_types,
    load_waypoints,
    parse_waypoints,
    waypoint_names,
)
from mallory.errors import MalloryError
from mallory.instrument.catalogue import Catalogue, CodeEvent
from mallory.observer.log_events import log_event_id

CATALOGUE = Catalogue([
    CodeEvent(0x1A, "sut.c", 10, "become_leader", "FUNC", "became-leader"),
    CodeEvent(0x2B, "sut.c", 20, "truncate", "FUNC", "truncate"),
    CodeEvent(0x3C, "sut.c", 30, "apply", "BLOCK", ""),
])
FAMILIES = ["partition", "kill", "pause"]

TEXT = """
[[waypoint]]
name = "cut-off"
faults = ["partition"]

[[waypoint]]
name = "new-leader-while-cut-off"
events = ["became-leader"]
faults = ["partition"]

[[waypoint]]
name = "rollback"
events = ["truncate", "snapshot-installed"]
"""


def load(text: str = TEXT):
    return parse_waypoints(text, "w.toml", CATALOGUE, ["snapshot-installed"], FAMILIES)


def test_names_resolve_to_the_timeline_types_of_code_and_log_events():
    assert event_types("became-leader", CATALOGUE) == {"FUNC:1a", f"LOG:{log_event_id('became-leader'):x}"}
    waypoints = load()
    assert waypoints.names == ["cut-off", "new-leader-while-cut-off", "rollback"]
    snapshot = f"LOG:{log_event_id('snapshot-installed'):x}"
    assert waypoints.waypoints[2].types == (event_types("truncate", CATALOGUE), frozenset({snapshot}))


def test_a_window_is_at_the_last_waypoint_it_satisfies():
    waypoints = load()
    snapshot = f"LOG:{log_event_id('snapshot-installed'):x}"
    assert waypoints.level(set(), []) == 0
    assert waypoints.level({"FUNC:1a"}, []) == 0  # a leader change without a partition
    assert waypoints.level(set(), ["partition", "kill"]) == 1
    assert waypoints.level({"FUNC:1a", "BLOCK:3c"}, ["partition"]) == 2
    assert waypoints.level({"FUNC:2b"}, ["partition"]) == 1  # the rollback needs both events
    assert waypoints.level({"FUNC:2b", snapshot}, []) == 3  # later waypoints win, faults or not


@pytest.mark.parametrize("text, message", [
    ("[[waypoint]]\nname = 'x'\nevents = ['no-such']\n", r"waypoint 1 \(x\): no event named 'no-such' \(known: became-leader, snapshot-installed, truncate\)"),
    ("[[waypoint]]\nname = 'x'\nfaults = ['flood']\n", r"no fault family 'flood'"),
    ("[[waypoint]]\nname = 'x'\n", r"give events, faults or both"),
    ("[[waypoint]]\nevents = ['truncate']\n", r"waypoint 1: needs a name"),
    ("[[waypoint]]\nname = 'x'\nevents = 'truncate'\n", r"events must be a list of names"),
    ("[[waypoint]]\nname = 'x'\nlevel = 3\nevents = ['truncate']\n", r"fields are events, faults, name"),
    ("[[waypoint]]\nname = 'x'\nevents = ['truncate']\n[[waypoint]]\nname = 'x'\nevents = ['truncate']\n", r"same name"),
    ("name = 'x'\n", r"expected one or more \[\[waypoint\]\] tables"),
    ("[[waypoint\n", r"not valid TOML"),
])
def test_a_broken_file_is_refused_naming_the_file_and_the_entry(text, message):
    with pytest.raises(MalloryError, match=message) as excinfo:
        load(text)
    assert str(excinfo.value).startswith("w.toml")


def test_the_names_of_a_file_come_in_its_order_without_a_catalogue(tmp_path):
    path = tmp_path / "w.toml"
    path.write_text(TEXT.replace("snapshot-installed", "an-event-no-catalogue-knows"))
    assert waypoint_names(path) == ["cut-off", "new-leader-while-cut-off", "rollback"]
    path.write_text("[[waypoint]]\nevents = ['truncate']\n")
    with pytest.raises(MalloryError, match="a waypoint has no name"):
        waypoint_names(path)
    with pytest.raises(MalloryError, match="cannot read waypoints"):
        waypoint_names(tmp_path / "gone.toml")


@pytest.mark.parametrize("sut, source, spec", [("example", "example_sut.c", "example.toml"), ("raft", "raft_kv.c", "raft.toml")])
def test_the_shipped_waypoint_files_name_events_their_sut_has(sut, source, spec):
    """Every event a shipped file names is an annotation of the SUT's source or a log event
    of its spec (the catalogue is made from the source's labels, as the build would)."""
    import re

    from mallory import paths
    from mallory.harness.spec import load_spec
    from nemesis.nemesis import default_families

    labels = re.findall(r"// INSTRUMENT_(FUNC|BLOCK) ([a-z0-9-]+)", (paths.SUTS / sut / source).read_text())
    catalogue = Catalogue([CodeEvent(i + 1, source, i, "f", kind, label) for i, (kind, label) in enumerate(labels)])
    log_names = [p.name for p in load_spec(paths.SUTS / sut / spec).log_events if p.name]
    families = [f.family for f in default_families()]
    waypoints = load_waypoints(paths.SUTS / sut / "waypoints.toml", catalogue, log_names, families)
    assert len(waypoints.waypoints) >= 4
