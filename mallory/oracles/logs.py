"""The log oracle: user-configurable patterns over node logs, and deaths by signal.

Default patterns catch what usually means a bug in a distributed system's log: fatal
errors, panics (Go, Rust), failed assertions, segfaults and aborts, uncaught exceptions,
and "two leaders"-style split-brain messages. A SUT spec declares the lines that mean its
own safety invariants broke as `[[log_bugs]]` tables (`parse_log_bugs`; the campaign scans
with those first, then the defaults). Each match is a finding whose signature is the
pattern name plus the normalised line (times, numbers, addresses, ids blanked), so the same
message from another node, term or run is the same bug.

`death_finding` turns a process's exit into a finding when it died by a signal the
harness did not send (by default SIGKILL/SIGTERM/SIGINT are the harness's own), signed by
the signal and the last line the process logged. Its details keep the process's last log
lines and, when the fault shim (nemesis/preload/mallory_faults.c) caught the crash, the
backtrace it wrote into the process's output (`crash_backtrace`); the shim's lines are
never taken for the process's own (`log_tail`, `scan_log`).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable

from mallory.errors import MalloryError
from mallory.log_lines import LogPattern, normalise, spec_regex, spec_tables
from mallory.oracles.triage import Finding

#: a finding's key keeps this much of the line's normalised message
KEY_CHARS = 200
#: how many of a dying node's last log lines a finding keeps
LAST_LINES = 30
#: what starts every line the fault shim writes into a crashing process's output
SHIM_PREFIX = "==mallory== "
_BACKTRACE_START = re.compile(r"^==mallory== caught (?P<signal>SIG[A-Z]+)")
_FRAME = re.compile(
    r"^==mallory== #\d+ (?P<address>0x[0-9a-f]+) (?P<module>\S+)\+(?P<offset>0x[0-9a-f]+)(?: \((?P<symbol>\S+)\))?$"
)


def _p(name: str, regex: str) -> LogPattern:
    return LogPattern("(?i)" + regex, name)  # levels and messages come in any case: FATAL, Fatal


DEFAULT_PATTERNS: tuple[LogPattern, ...] = (
    _p("panic", r"\bpanic(?:ked)?\b[:(]|\bthread '.*' panicked at\b|\bkernel panic\b"),
    _p("fatal", r"\bfatal\b(?: error)?[:\] ]|\[fatal\]|\bFATAL\b"),
    _p("assertion", r"assertion (?:`.*' )?failed|\bAssertion\b.*\bfailed\b|\bAssertionError\b|\bassert(?:ion)? failure\b"),
    _p("segfault", r"segmentation fault|\bSIGSEGV\b|\bsegfault\b"),
    _p("abort", r"\bSIGABRT\b|\baborted \(core dumped\)"),
    _p("uncaught-exception", r"Traceback \(most recent call last\)|\buncaught exception\b|\bunhandled exception\b"),
    _p("two-leaders", r"\btwo leaders\b|\bmultiple leaders\b|\bmore than one leader\b|\bsplit[- ]brain\b"),
)


#: what a `[[log_bugs]]` entry may be called: it names a bug (and its bundle directory)
LOG_BUG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
LOG_BUG_FIELDS = ("name", "pattern")


def parse_log_bugs(raw: object, source: str) -> tuple[LogPattern, ...]:
    """Validate a SUT spec's `[[log_bugs]]`: a list of `{name, pattern}` tables, each a line
    the SUT logs only when a safety invariant of its own broke. `pattern` is a Python regex
    searched in each line (case-sensitive unless it says `(?i)`); `name` (letters, digits,
    `.`, `_`, `-`) is the kind of the finding a matching line gives. Errors are one line
    naming `source` and the entry."""
    found = []
    for _, where, entry in spec_tables(raw, source, "log_bugs", LOG_BUG_FIELDS, "a `name` and a `pattern`"):
        name = entry.get("name")
        if not isinstance(name, str) or not LOG_BUG_NAME.fullmatch(name):
            raise MalloryError(f"{where}.name: required: the bug's name, 1-64 letters, digits, '.', '_' or '-', "
                               f"not {name!r}")
        regex = spec_regex(entry, where)
        pattern = regex.pattern
        if regex.search("") is not None:  # it would make a bug of every line
            raise MalloryError(f"{where}.pattern: matches the empty string, so every line: {pattern!r}")
        found.append(LogPattern(pattern, name))
    return tuple(found)


def scan_log(lines: Iterable[str], node: str | None = None,
             patterns: Iterable[LogPattern] = DEFAULT_PATTERNS) -> list[Finding]:
    """One finding per matching line (the first pattern that matches names it); the fault
    shim's lines are not the process's own and match nothing (a crash it caught is the
    death oracle's)."""
    pats = list(patterns)
    out = []
    for lineno, line in enumerate(lines, 1):
        if line.startswith(SHIM_PREFIX):
            continue
        for pat in pats:
            m = pat.regex.search(line)
            if m is None:
                continue
            text = line.rstrip("\n")
            message = normalise(text[m.start():], KEY_CHARS)
            out.append(Finding("log", pat.name, (message,), text.strip()[:300], node, {"line": lineno}))
            break
    return out


def log_tail(log: str, n: int = LAST_LINES) -> list[str]:
    """The last `n` non-blank lines a process logged (the fault shim's left out)."""
    return [line for line in log.splitlines() if line.strip() and not line.startswith(SHIM_PREFIX)][-n:]


def crash_backtrace(log: str) -> list[dict[str, str | None]]:
    """The frames of the last backtrace the fault shim wrote into a process's output when
    it caught a crash, innermost first: address, module (the object's path), offset in it,
    and the nearest dynamic symbol (None when the shim found none). Empty when there is none."""
    frames: list[dict[str, str | None]] = []
    for line in log.splitlines():
        if _BACKTRACE_START.match(line):
            frames = []
        elif m := _FRAME.match(line.rstrip()):
            frames.append(m.groupdict())
    return frames


HARNESS_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT})


def death_finding(returncode: int | None, node: str | None = None, *, log: str = "",
                  expected: frozenset[int] = HARNESS_SIGNALS) -> Finding | None:
    """A finding when a process died by an unexpected signal.

    returncode as subprocess reports it (negative = killed by that signal) or a shell's
    exit status (128 + signal number). `log`: what the process wrote to its log during the
    schedule; its last line, normalised, joins the signal in the key, so crashes at
    different places are different bugs and one crash seen again is the same. Its last
    lines and the shim's backtrace (when there is one) are the finding's details.
    """
    if returncode is None:
        return None
    if returncode < 0:
        signum = -returncode
    elif 128 < returncode < 128 + 65:
        signum = returncode - 128
    else:
        return None
    if signum in expected:
        return None
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    tail = log_tail(log)
    last = tail[-1].strip() if tail else ""
    message = f"process died by {name}" + (f" after: {last[:300]}" if last else "")
    details = {"signal": signum, "last_line": last, "last_log_lines": tail, "backtrace": crash_backtrace(log)}
    return Finding("signal", f"killed-by-{name}", (name, normalise(last, KEY_CHARS)), message, node, details)
