"""`# INSTRUMENT_FUNC` / `# INSTRUMENT_BLOCK` comments in Python sources, placed by an AST rewrite.

    # INSTRUMENT_FUNC became-leader        on the line(s) above a `def` (or its decorators):
    def on_leader(self): ...               the function's entry, after its docstring
    # INSTRUMENT_BLOCK stale-read          on the line(s) above any statement:
    return self.cache[key]                 reached each time that statement is

`# INSTRUMENT_BB` is an alias of INSTRUMENT_BLOCK; the words after the marker are the
label. As in C, the id's line is the first code line after the comment
(`mallory.instrument.event_ids`), and its path is the file's path relative to the
annotated root. The rewrite inserts one call statement per site, located at the marked
line, so tracebacks and line numbers of the program are unchanged. A hook call is
`_mallory_hook_<id>()`, a name the launcher puts in builtins (`hook_name`; one leading
underscore, so it is not mangled inside a class body).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass

from mallory.instrument.annotations import ScanWarning
from mallory.instrument.event_ids import event_id, relative_path
from mallory.timeline.event import Kind

_MARKER = re.compile(r"^#\s*INSTRUMENT_(FUNC|BLOCK|BB)\b(.*)$")
_SKIPPED = (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)


@dataclass(frozen=True)
class Marker:
    kind: Kind
    label: str
    marker_line: int
    line: int  # the first code line after the comment: what the id is built from


@dataclass(frozen=True)
class Site:
    """A placed hook: what the catalogue says about it."""

    id: int
    kind: Kind
    relpath: str
    line: int
    function: str  # qualified name of the enclosing function ("<module>" at top level)
    label: str


def hook_name(ident: int) -> str:
    return f"_mallory_hook_{ident:016x}"


def find_markers(path: str, text: str) -> tuple[list[Marker], list[ScanWarning]]:
    """The markers of a source text (comments only: a marker inside a string is not one)."""
    markers: list[Marker] = []
    warnings: list[ScanWarning] = []
    pending: list[tuple[Kind, str, int]] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                match = _MARKER.match(tok.string)
                if match is None:
                    continue
                if tok.line[: tok.start[1]].strip():
                    warnings.append(ScanWarning(path, tok.start[0], "annotation after code on the same line is ignored: "
                                                "put it on its own line above the code it marks"))
                    continue
                kind = Kind.FUNC if match.group(1) == "FUNC" else Kind.BLOCK
                pending.append((kind, " ".join(match.group(2).split()), tok.start[0]))
            elif tok.type not in _SKIPPED and tok.type != tokenize.ENDMARKER:
                markers.extend(Marker(kind, label, at, tok.start[0]) for kind, label, at in pending)
                pending = []
    except (tokenize.TokenError, SyntaxError):
        return [], []  # the compiler will say what is wrong with the file
    warnings.extend(ScanWarning(path, at, f"INSTRUMENT_{kind.name}: no code line follows") for kind, _, at in pending)
    return markers, warnings


class _Statements(ast.NodeVisitor):
    """Where each statement starts: line -> (its list, its index, the enclosing function)."""

    def __init__(self) -> None:
        self.at: dict[int, tuple[list[ast.stmt], int, str]] = {}
        self._scope: list[str] = []

    def generic_visit(self, node: ast.AST) -> None:
        scoped = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        if scoped:
            self._scope.append(node.name)
        for _, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                function = ".".join(self._scope) or "<module>"
                for index, stmt in enumerate(value):
                    self.at.setdefault(_first_line(stmt), (value, index, function))
        super().generic_visit(node)
        if scoped:
            self._scope.pop()


def _first_line(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", None) or []
    return min([stmt.lineno, *(d.lineno for d in decorators)])


def _call(ident: int, where: ast.stmt) -> ast.stmt:
    call = ast.Expr(ast.Call(func=ast.Name(id=hook_name(ident), ctx=ast.Load()), args=[], keywords=[]))
    return ast.fix_missing_locations(ast.copy_location(call, where))


def place(tree: ast.Module, markers: list[Marker], path: str, relpath: str) -> tuple[list[Site], list[ScanWarning]]:
    """Insert the hook calls of `markers` into `tree` (in place); the sites placed and the
    markers that could not be (a FUNC not above a def, a BLOCK above no statement start)."""
    statements = _Statements()
    statements.visit(tree)
    sites: list[Site] = []
    warnings: list[ScanWarning] = []
    inserts: list[tuple[list[ast.stmt], int, ast.stmt]] = []
    for marker in markers:
        where = statements.at.get(marker.line)
        ident = event_id(relpath, marker.line, marker.kind)
        if marker.kind == Kind.FUNC:
            func = where[0][where[1]] if where else None
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                warnings.append(ScanWarning(path, marker.marker_line, f"INSTRUMENT_FUNC: line {marker.line} does not "
                                            "start a function definition"))
                continue
            docstring = ast.get_docstring(func, clean=False) is not None
            inserts.append((func.body, 1 if docstring else 0, _call(ident, func.body[0])))
            scope = where[2]
            name = func.name if scope == "<module>" else f"{scope}.{func.name}"
        else:
            if where is None:
                warnings.append(ScanWarning(path, marker.marker_line, f"INSTRUMENT_BLOCK: line {marker.line} does not "
                                            "start a statement (an `else:`/`except:` line or inside an expression)"))
                continue
            body, index, name = where
            inserts.append((body, index, _call(ident, body[index])))
        sites.append(Site(ident, marker.kind, relpath, marker.line, name, marker.label))
    for body, index, stmt in sorted(inserts, key=lambda i: i[1], reverse=True):
        body.insert(index, stmt)
    return sites, warnings


def rewrite(path: str, text: str, root: str) -> tuple[ast.Module, list[Site], list[ScanWarning]]:
    """The module's AST with its hooks inserted, its sites and its warnings. A file with
    no marker comes back as parsed. SyntaxError propagates, as from a plain import."""
    tree = ast.parse(text, filename=path)
    if "INSTRUMENT_" not in text:
        return tree, [], []
    markers, warnings = find_markers(path, text)
    sites, more = place(tree, markers, path, relative_path(path, root))
    return tree, sites, warnings + more
