"""What the mediator's own memory is made of, for its /metrics ("memory").

A soak samples RSS from outside, and RSS alone cannot tell a leak from the high-water mark
of a burst: memory freed after a burst mostly stays resident (pymalloc frees an arena only
once every object in it is gone; glibc keeps freed chunks in its heaps and returns only the
top of each). These figures, read each minute next to the event rate, can:

* `python_blocks` (sys.getallocatedblocks): memory blocks of Python objects alive now. A
  structure that keeps more and more objects makes it rise at a constant load; after a
  burst it falls back, even while RSS stays up.
* `malloc` (glibc's mallinfo2, over every arena): `in_use_mb`, chunks of malloc's heaps
  handed out and not freed (Python objects over 512 bytes, such as a batch's line, lists'
  item arrays, dict and set tables, numpy arrays; pymalloc's own arenas are mmapped
  apart and not counted); `free_mb`, freed chunks the heaps keep: what a burst leaves
  behind; `heap_mb`, the heaps' size (in use + free); `mmap_mb`, chunks mmapped on their
  own (returned whole when freed). None where the C library has no mallinfo2 (not glibc,
  or glibc before 2.33).
* `pymalloc` (CPython's own statistics, `_PyObject_DebugMallocStats`): `arenas_mb`, the
  1 MiB arenas pymalloc holds (mmapped: anonymous memory that neither glibc account nor
  `[heap]` shows); `blocks_mb`, the bytes of the blocks alive in them. Arenas that grow while
  blocks do not are fragmentation: an arena goes back only once every block in it is freed.
  None where CPython does not export it or does not use pymalloc.
* `rss_mb` / `anon_mb` (/proc/self/status): what the soak sees, read at the same moment.
  What is left of `anon_mb` after the two allocators' shares is thread stacks and memory
  that C libraries map for themselves.
* `threads`: Python threads alive (one per observer connection and per API request in
  flight, besides the mediator's own): a connection whose thread never ends shows here.

Reading costs a /proc read and a walk of malloc's free chunks, each arena locked in turn
(without the GIL): ~3 ms with 50,000 free chunks (135 MB fragmented), far less in a mediator
that is well. Fine once a second; not per batch.
"""

from __future__ import annotations

import ctypes
import gc
import re
import sys
import threading
from pathlib import Path

_MB = 1024 * 1024


class _Mallinfo2(ctypes.Structure):
    """glibc's struct mallinfo2 (malloc.h), every field a size_t in bytes or a count."""

    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _libc_function(name: str, restype, argtypes: list):  # the C library's `name`, or None
    try:
        function = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    function.restype = restype
    function.argtypes = argtypes
    return function


_mallinfo2 = _libc_function("mallinfo2", _Mallinfo2, [])
_malloc_trim = _libc_function("malloc_trim", ctypes.c_int, [ctypes.c_size_t])
_open_memstream = _libc_function("open_memstream", ctypes.c_void_p,
                                 [ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t)])
_fclose = _libc_function("fclose", ctypes.c_int, [ctypes.c_void_p])
_free = _libc_function("free", None, [ctypes.c_void_p])
try:  # CPython's private dump of pymalloc's state, to a C stream; called with the GIL held
    _pymalloc_stats = ctypes.pythonapi._PyObject_DebugMallocStats
    _pymalloc_stats.argtypes, _pymalloc_stats.restype = [ctypes.c_void_p], ctypes.c_int
except AttributeError:
    _pymalloc_stats = None


def return_free_memory() -> bool | None:
    """Give freed memory back to the system: first a full collection, which also empties
    CPython's free lists (the last 2,000 freed tuples of each size, among others, each
    holding its pymalloc arena resident, so pymalloc can free the arenas left empty); then
    glibc's malloc_trim(0) (every arena, whole free pages inside a heap too, not only its
    top). A burst's freed batches and tables otherwise stay resident as a high-water mark.
    True if malloc_trim returned something, False if not, None without malloc_trim. Costs a
    collection's pause (tens of ms in a busy mediator) plus ~1 ms per 10 MB of malloc's free
    chunks, each arena locked in turn: once a minute, not per batch."""
    gc.collect()
    if _malloc_trim is None:
        return None
    return bool(_malloc_trim(0))


def malloc_account() -> dict[str, float] | None:
    """glibc malloc's account over all arenas in MB (see the module docstring), or None
    without mallinfo2."""
    if _mallinfo2 is None:
        return None
    info = _mallinfo2()
    return {"heap_mb": round(info.arena / _MB, 2), "in_use_mb": round(info.uordblks / _MB, 2),
            "free_mb": round(info.fordblks / _MB, 2), "mmap_mb": round(info.hblkhd / _MB, 2)}


def pymalloc_figures(stats_text: str) -> dict[str, float] | None:
    """`arenas_mb` and `blocks_mb` from the text of `_PyObject_DebugMallocStats` (the lines
    "N arenas * 1048576 bytes/arena = ..." and "# bytes in allocated blocks = ..."), or None
    when it lacks them."""
    arenas = re.search(r"^\d+ arenas \* \d+ bytes/arena\s+=\s+([\d,]+)$", stats_text, re.MULTILINE)
    blocks = re.search(r"^# bytes in allocated blocks\s+=\s+([\d,]+)$", stats_text, re.MULTILINE)
    if arenas is None or blocks is None:
        return None
    return {"arenas_mb": round(int(arenas.group(1).replace(",", "")) / _MB, 2),
            "blocks_mb": round(int(blocks.group(1).replace(",", "")) / _MB, 2)}


def pymalloc_account() -> dict[str, float] | None:
    """pymalloc's arenas and live blocks in MB (see the module docstring), or None without its
    statistics or a C library with open_memstream. Walks pymalloc's arenas: ~0.1 ms for 20."""
    if _pymalloc_stats is None or _open_memstream is None or _fclose is None or _free is None:
        return None
    buffer, size = ctypes.c_char_p(), ctypes.c_size_t()
    stream = _open_memstream(ctypes.byref(buffer), ctypes.byref(size))
    if not stream:
        return None
    try:
        written = _pymalloc_stats(stream)
    finally:
        _fclose(stream)  # sets buffer and size
    try:
        text = ctypes.string_at(buffer, size.value).decode("ascii", "replace")
    finally:
        _free(ctypes.cast(buffer, ctypes.c_void_p))
    return pymalloc_figures(text) if written else None


def resident_mb(status_text: str) -> dict[str, float | None]:
    """VmRSS and RssAnon of a /proc/PID/status text in MB (None for a field it lacks)."""
    out: dict[str, float | None] = {}
    for key, name in (("rss_mb", "VmRSS"), ("anon_mb", "RssAnon")):
        found = re.search(rf"^{name}:\s+(\d+) kB", status_text, re.MULTILINE)
        out[key] = round(int(found.group(1)) / 1024, 2) if found else None
    return out


def process_memory() -> dict[str, object]:
    """This process's memory now: rss_mb, anon_mb, python_blocks, malloc, pymalloc, threads."""
    try:
        resident = resident_mb(Path("/proc/self/status").read_text())
    except OSError:  # no procfs
        resident = {"rss_mb": None, "anon_mb": None}
    return {**resident, "python_blocks": sys.getallocatedblocks(), "malloc": malloc_account(),
            "pymalloc": pymalloc_account(), "threads": threading.active_count()}
