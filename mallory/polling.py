"""Waiting for a condition on a live system (a process ready, a file written, a counter up)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from mallory.errors import MalloryError

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll `predicate` until it returns something truthy and return that; after `timeout`
    seconds raise MalloryError naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise MalloryError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
