"""AddressSanitizer / LeakSanitizer reports in node logs, as findings.

A report starts at `==PID==ERROR: AddressSanitizer: KIND ...` (or `LeakSanitizer:
detected memory leaks`) and ends at its `SUMMARY:` line. From each we keep the kind, the
access (READ/WRITE of size N) when there is one, and the frames of the first stack; for a
leak, every `Direct/Indirect leak of N byte(s) ... allocated from:` block is its own
finding. The signature uses the kind and the top frames that belong to the program
(sanitizer interceptors, allocator functions and libc start-up frames are skipped), as
"function file:line", never addresses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mallory.oracles.triage import Finding

TOP_FRAMES = 3

_HEADER = re.compile(r"==(\d+)==ERROR: (AddressSanitizer|LeakSanitizer): (.*)")
_FRAME_IN = re.compile(r"^\s*#(\d+)\s+0x[0-9a-fA-F]+\s+in\s+(.+?)\s+(\S+)$")
_FRAME_BARE = re.compile(r"^\s*#(\d+)\s+0x[0-9a-fA-F]+\s+\((.+?)\)$")
_ACCESS = re.compile(r"^(READ|WRITE) of size (\d+) at ")
_LEAK = re.compile(r"^(Direct|Indirect) leak of (\d+) byte\(s\) in (\d+) object\(s\) allocated from:")
_SUMMARY = re.compile(r"^SUMMARY: (\w+Sanitizer): (.*)")
_SKIP_FUNCS = re.compile(
    r"^(__interceptor_|__asan_|__lsan_|__sanitizer|__libc_start|_start$|malloc$|calloc$|realloc$|free$|"
    r"operator new|operator delete|__wrap_|___interceptor_)"
)


@dataclass
class Frame:
    function: str
    location: str  # "file:line" or "(module+0xoff)"

    @property
    def short(self) -> str:
        loc = self.location
        m = re.match(r"(.*?):(\d+)(?::\d+)?$", loc)
        if m:
            loc = f"{m.group(1).rsplit('/', 1)[-1]}:{m.group(2)}"
        else:
            loc = re.sub(r"\+0x[0-9a-fA-F]+", "", loc).strip("()").rsplit("/", 1)[-1]
        return f"{self.function} {loc}".strip()


def _parse_frame(line: str) -> Frame | None:
    m = _FRAME_IN.match(line)
    if m:
        return Frame(m.group(2), m.group(3))
    m = _FRAME_BARE.match(line)
    if m:
        return Frame("", "(" + m.group(2) + ")")
    return None


def _program_frames(frames: list[Frame]) -> list[Frame]:
    keep = [
        f for f in frames
        if not (f.function and _SKIP_FUNCS.match(f.function)) and "libsanitizer" not in f.location
    ]
    return keep or frames


def _stack(lines: list[str], start: int) -> tuple[list[Frame], int]:
    """Frames from lines[start:] until the first non-frame line after at least one frame."""
    frames: list[Frame] = []
    i = start
    while i < len(lines):
        frame = _parse_frame(lines[i])
        if frame is None:
            if frames or lines[i].strip() == "":
                if frames:
                    break
                i += 1
                continue
            break
        frames.append(frame)
        i += 1
    return frames, i


def parse_asan(text: str, node: str | None = None) -> list[Finding]:
    """Every ASan/LSan finding in `text` (a node's log, stderr of a test program...)."""
    lines = text.splitlines()
    findings: list[Finding] = []
    i = 0
    while i < len(lines):
        m = _HEADER.search(lines[i])
        if m is None:
            i += 1
            continue
        pid, tool, rest = m.groups()
        end = i + 1
        while end < len(lines) and not _SUMMARY.match(lines[end].strip()) and not _HEADER.search(lines[end]):
            end += 1
        block = lines[i:end + 1] if end < len(lines) and _SUMMARY.match(lines[end].strip()) else lines[i:end]
        report = "\n".join(block)
        if tool == "LeakSanitizer":
            findings.extend(_leaks(block, report, node))
        else:
            findings.append(_error(rest, block, report, node))
        i = end + 1 if end < len(lines) and _SUMMARY.match(lines[end].strip()) else end
    return findings


def _error(rest: str, block: list[str], report: str, node: str | None) -> Finding:
    kind = rest.split(" on ", 1)[0].split(" ", 1)[0].strip().rstrip(":") or "unknown"
    if rest.startswith("attempting double-free"):
        kind = "double-free"
    elif rest.startswith("attempting free on address which was not malloc"):
        kind = "bad-free"
    access = ""
    start = 1
    for j, line in enumerate(block[1:4], 1):
        a = _ACCESS.match(line.strip())
        if a:
            access = f"{a.group(1)} of size {a.group(2)}"
            start = j + 1
            break
    frames, _ = _stack(block, start)
    top = [f.short for f in _program_frames(frames)[:TOP_FRAMES]]
    message = f"AddressSanitizer: {kind}" + (f" ({access})" if access else "") + (f" in {top[0]}" if top else "")
    return Finding("asan", kind, tuple(top), message, node,
                   {"access": access, "frames": [f.short for f in frames], "report": report})


def _leaks(block: list[str], report: str, node: str | None) -> list[Finding]:
    out = []
    for j, line in enumerate(block):
        m = _LEAK.match(line.strip())
        if m is None:
            continue
        which, size, objects = m.groups()
        frames, _ = _stack(block, j + 1)
        top = [f.short for f in _program_frames(frames)[:TOP_FRAMES]]
        kind = f"{which.lower()}-leak"
        message = f"LeakSanitizer: {which.lower()} leak of {size} byte(s) in {objects} object(s)" + (
            f" allocated in {top[0]}" if top else "")
        out.append(Finding("asan", kind, tuple(top), message, node,
                           {"bytes": int(size), "objects": int(objects), "frames": [f.short for f in frames],
                            "report": report}))
    return out
