"""Events, the prefix-closed Lamport timeline, and window abstractions. Pure Python, no I/O."""

from mallory.timeline.event import Batch, ClockPair, Event, Kind

__all__ = ["Batch", "ClockPair", "Event", "Kind"]
