"""The annotation scanner: finds `// INSTRUMENT_FUNC` / `// INSTRUMENT_BLOCK` comments in C and
C++ sources (and headers) and turns them into the targets the LLVM pass places.

    // INSTRUMENT_FUNC snapshot-taken        on the line(s) above a function definition
    // INSTRUMENT_BLOCK rollback             on the line(s) above a statement
    // INSTRUMENT_BB                         Mallory's original spelling of INSTRUMENT_BLOCK

The optional word(s) after the marker are the event's label. A target covers lines
[first, last]: `first` is the first code line after the marker (the line the id is built
from); `last` extends to the `{` of a function header written over several lines, or past a
`case X:` / `default:` / `label:` / `{` / `else` line to the statement that follows it.
Annotations that cannot be placed are reported as `ScanWarning`s with file:line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from mallory.instrument.event_ids import relative_path

_MARKER = re.compile(r"^\s*//\s*INSTRUMENT_(FUNC|BLOCK|BB)\b(.*)$")
_TRAILING_MARKER = re.compile(r"\S.*//\s*INSTRUMENT_(FUNC|BLOCK|BB)\b")
_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
_LABEL_LINE = re.compile(r"^(case\b.*|default\s*|[A-Za-z_]\w*\s*):\s*$")
_OPENER_LINE = re.compile(r"^(\{|else|else\s*\{|do|do\s*\{|\}\s*else\s*\{?)$")
_FUNC_HEADER_SPAN = 12


@dataclass(frozen=True)
class Target:
    kind: str  # "FUNC" or "BLOCK"
    path: str  # real absolute path
    first: int
    last: int
    label: str
    marker_line: int


@dataclass(frozen=True)
class ScanWarning:
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: warning: {self.message}"


def _code_lines(lines: list[str]) -> list[bool]:
    """Per line: does it hold code (not blank, not only comment)? Tracks /* */ roughly."""
    result = []
    in_block = False
    for line in lines:
        text = line
        code = ""
        while text:
            if in_block:
                end = text.find("*/")
                if end < 0:
                    text = ""
                else:
                    in_block = False
                    text = text[end + 2:]
            else:
                start_block, start_line = text.find("/*"), text.find("//")
                if start_line >= 0 and (start_block < 0 or start_line < start_block):
                    code += text[:start_line]
                    text = ""
                elif start_block >= 0:
                    code += text[:start_block]
                    in_block = True
                    text = text[start_block + 2:]
                else:
                    code += text
                    text = ""
        result.append(bool(code.strip()))
    return result


def _next_code(is_code: list[bool], after: int) -> int | None:
    for j in range(after + 1, len(is_code)):
        if is_code[j]:
            return j
    return None


def scan_text(path: str, text: str) -> tuple[list[Target], list[ScanWarning]]:
    """Targets and warnings of one file's text; `path` is used as given in both."""
    lines = text.splitlines()
    is_code = _code_lines(lines)
    targets: list[Target] = []
    warnings: list[ScanWarning] = []
    for i, line in enumerate(lines):
        marker = _MARKER.match(line)
        if not marker:
            if _TRAILING_MARKER.search(line) and is_code[i]:
                warnings.append(ScanWarning(path, i + 1, "annotation after code on the same line is ignored: "
                                        "put it on its own line above the code it marks"))
            continue
        kind = "FUNC" if marker.group(1) == "FUNC" else "BLOCK"
        label = " ".join(marker.group(2).split())
        where = f"INSTRUMENT_{marker.group(1)}"
        if i > 0 and lines[i - 1].rstrip().endswith("\\"):
            warnings.append(ScanWarning(path, i + 1, f"{where} inside a macro definition cannot be placed"))
            continue
        j = _next_code(is_code, i)
        if j is None:
            warnings.append(ScanWarning(path, i + 1, f"{where}: no code line follows"))
            continue
        code = lines[j].strip()
        if code.startswith("#"):
            warnings.append(ScanWarning(path, i + 1, f"{where} is followed by a preprocessor line "
                                    f"({code.split()[0]}) at line {j + 1}, not by code"))
            continue
        if kind == "FUNC":
            last = _function_header_end(lines, j)
            if last is None:
                warnings.append(ScanWarning(path, i + 1, f"{where}: line {j + 1} does not start a function "
                                        "definition (a declaration or not a function)"))
                continue
        else:
            if code.startswith("}") and not _OPENER_LINE.match(code):
                warnings.append(ScanWarning(path, i + 1, f"{where}: no statement follows (the block ends at line {j + 1})"))
                continue
            last = j
            while _LABEL_LINE.match(lines[last].strip()) or _OPENER_LINE.match(lines[last].strip()):
                nxt = _next_code(is_code, last)
                if nxt is None:
                    break
                last = nxt
        targets.append(Target(kind, path, j + 1, last + 1, label, i + 1))
    return targets, warnings


def _function_header_end(lines: list[str], first: int) -> int | None:
    """The index of the line holding the definition's `{`; None for a declaration."""
    seen_paren = False
    for k in range(first, min(first + _FUNC_HEADER_SPAN, len(lines))):
        code = lines[k].split("//")[0]
        seen_paren |= "(" in code
        brace, semi = code.find("{"), code.find(";")
        if semi >= 0 and (brace < 0 or semi < brace):
            return None
        if brace >= 0:
            return k if seen_paren else None
    return None


def scan_file(path: str) -> tuple[list[Target], list[ScanWarning]]:
    real = os.path.realpath(path)
    try:
        with open(real, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return [], []
    if "INSTRUMENT_" not in text:
        return [], []
    return scan_text(real, text)


def include_closure(sources: Iterable[str], include_dirs: Iterable[str] = (), quote_dirs: Iterable[str] = (),
                    limit: int = 5000) -> list[str]:
    """The sources plus every header they include that resolves in the sources' own directories,
    -iquote or -I directories (system headers are not scanned)."""
    include_dirs, quote_dirs = list(include_dirs), list(quote_dirs)
    seen: dict[str, None] = {}
    stack = [os.path.realpath(s) for s in sources]
    while stack and len(seen) < limit:
        path = stack.pop()
        if path in seen or not os.path.isfile(path):
            continue
        seen[path] = None
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        here = os.path.dirname(path)
        for line in text.splitlines():
            m = _INCLUDE.match(line)
            if not m:
                continue
            dirs = ([here, *quote_dirs] if m.group(1) == '"' else []) + include_dirs
            for d in dirs:
                candidate = os.path.realpath(os.path.join(d, m.group(2)))
                if os.path.isfile(candidate):
                    stack.append(candidate)
                    break
    return list(seen)


def write_targets(path: str, targets: Iterable[Target], build_root: str) -> None:
    """The pass's input: one target per line, KIND first last abspath relpath label (tab-separated)."""
    with open(path, "w", encoding="utf-8") as f:
        for t in targets:
            rel = relative_path(t.path, build_root)
            f.write(f"{t.kind}\t{t.first}\t{t.last}\t{t.path}\t{rel}\t{t.label}\n")

