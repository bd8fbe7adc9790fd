"""The ring writer for Python: the C runtime itself (libmallory_rt.so) through ctypes.

Loading the runtime instead of re-implementing RING.md in Python keeps one writer
implementation (atomic fetch-add claim, per-slot stamps, drops), so Python events are
byte-for-byte C events and both kinds of writer may share a ring. The library is loaded
with `PyDLL`: the hook is a few atomics and never blocks, so keeping the GIL is cheaper
than releasing and retaking it. Each hook site gets its arguments converted once
(`emitter`), so a hit is one C call with ready-made arguments.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable

from mallory.errors import MalloryError
from mallory.observer.ring import RingReader
from mallory.timeline.event import Kind

#: A hook site's emitter: call it to write its event.
Emit = Callable[[], None]

#: Overrides where the shared runtime is (default: the toolchain's build, built if needed).
RUNTIME_ENV = "MALLORY_RUNTIME_SO"


def runtime_path() -> str:
    """libmallory_rt.so: $MALLORY_RUNTIME_SO, else the LLVM toolchain's build of it."""
    explicit = os.environ.get(RUNTIME_ENV)
    if explicit:
        return explicit
    from mallory.instrument import toolchain

    return str(toolchain.ensure_built().runtime_shared)


class RingWriter:
    """Writes code events into the ring named by this process's MALLORY_SHM."""

    def __init__(self, library: str) -> None:
        try:
            lib = ctypes.PyDLL(library, mode=ctypes.RTLD_LOCAL)
        except OSError as exc:
            raise MalloryError(f"cannot load the Mallory runtime {library}: {exc}") from None
        # getattr: a literal `lib.__mallory_event` would be name-mangled inside this class
        self._event = getattr(lib, "__mallory_event")
        self._event.restype = None

    def emitter(self, ident: int, kind: Kind) -> Emit:
        """A zero-argument callable that writes the event (ident, kind) each time it is called."""
        return functools.partial(self._event, ctypes.c_uint64(ident), ctypes.c_uint32(int(kind)))


def writer_from_env() -> RingWriter | None:
    """The writer for $MALLORY_SHM; None when it is unset (the program then runs plain).

    A name that is set but names no valid ring is an error here, where the C runtime would
    silently record nothing: a Python program is started by a launcher that can say so.
    """
    name = os.environ.get("MALLORY_SHM")
    if not name:
        return None
    with RingReader(name):  # checks magic, version and sizes, as the runtime will
        pass
    return RingWriter(runtime_path())
