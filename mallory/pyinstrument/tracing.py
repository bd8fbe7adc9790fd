"""Tracing functions of code you do not own, by qualified name, without editing it.

    pysyncobj.syncobj.SyncObj.__onBecomeLeader=raft-become-leader
    module.path.Class.method[=label] | module.path.function[=label]

A private name (`__x`) is looked up under its mangled name (`_Class__x`), as the class's
own code calls it. The function is replaced, in its class or module, by a wrapper that
emits the FUNC event and calls the original; static and class methods stay what they were.
The id follows the pass's scheme with the function's own source location: its file
relative to the sys.path entry it was imported from (`pysyncobj/syncobj.py`) and the line
of its `def` (decorators included), so every node with the same library agrees.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from mallory.errors import MalloryError
from mallory.instrument.event_ids import event_id
from mallory.pyinstrument.annotated import Site
from mallory.timeline.event import Kind


@dataclass(frozen=True)
class TraceTarget:
    qualname: str  # as the user wrote it
    label: str

    @classmethod
    def parse(cls, text: str) -> TraceTarget:
        """`module.Class.method[=label]` (whitespace around `=` allowed)."""
        name, _, label = text.partition("=")
        name, label = name.strip(), " ".join(label.split())
        parts = name.split(".")
        if len(parts) < 2 or not all(p.isidentifier() for p in parts):
            raise MalloryError(f"cannot trace {text!r}: write module.function or module.Class.method")
        return cls(name, label or name)

    def modules(self) -> list[str]:
        """The dotted prefixes that may be the module, longest first."""
        parts = self.qualname.split(".")
        return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


def read_trace_file(path: str) -> list[TraceTarget]:
    """One target per line (`qualname [label]` or `qualname=label`); `#` starts a comment."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise MalloryError(f"cannot read trace list {path}: {exc.strerror}") from None
    targets = []
    for number, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        if "=" not in text and len(text.split(None, 1)) == 2:
            text = "=".join(text.split(None, 1))
        try:
            targets.append(TraceTarget.parse(text))
        except MalloryError as exc:
            raise MalloryError(f"{path}:{number}: {exc}") from None
    return targets


class Unresolved(LookupError):
    """The module holds no such attribute path (yet: a submodule may still be imported)."""


def resolve(module: ModuleType, attrs: list[str]) -> tuple[Any, str, Any]:
    """(owner, key in owner's __dict__, raw value) of module.attrs[0]...attrs[-1]."""
    owner: Any = module
    for i, attr in enumerate(attrs):
        namespace = vars(owner)
        key = attr
        if inspect.isclass(owner) and attr.startswith("__") and not attr.endswith("__"):
            key = f"_{owner.__name__.lstrip('_')}{attr}"
        if key not in namespace:
            raise Unresolved(f"{'.'.join(attrs[:i]) or module.__name__} has no attribute {attr!r}")
        if i == len(attrs) - 1:
            return owner, key, namespace[key]
        owner = namespace[key]
    raise Unresolved("empty attribute path")


def _function_of(raw: Any) -> Callable[..., Any]:
    func = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
    if not inspect.isfunction(func):
        raise MalloryError(f"not a Python function: {raw!r}")
    return func


def site_of(target: TraceTarget, raw: Any) -> Site:
    """Where the traced function is defined, and its id."""
    func = inspect.unwrap(_function_of(raw))
    code = func.__code__
    return Site(
        id=event_id(_import_relpath(code.co_filename), code.co_firstlineno, Kind.FUNC),
        kind=Kind.FUNC,
        relpath=_import_relpath(code.co_filename),
        line=code.co_firstlineno,
        function=func.__qualname__,
        label=target.label,
    )


def _import_relpath(filename: str) -> str:
    """The file's path relative to the deepest sys.path entry holding it, else absolute."""
    real = os.path.realpath(filename)
    best = ""
    for entry in sys.path:
        root = os.path.realpath(entry or os.getcwd()).rstrip("/") + "/"
        if real.startswith(root) and len(root) > len(best):
            best = root
    return real[len(best):] if best else real


def wrap(raw: Any, emit: Callable[[], None]) -> Any:
    """`raw` (function, staticmethod or classmethod) with `emit()` called on every entry."""
    func = _function_of(raw)

    @functools.wraps(func)
    def traced(*args: Any, **kwargs: Any) -> Any:
        emit()
        return func(*args, **kwargs)

    if isinstance(raw, staticmethod):
        return staticmethod(traced)
    if isinstance(raw, classmethod):
        return classmethod(traced)
    return traced


def install(target: TraceTarget, module: ModuleType, emitter: Callable[[Site], Callable[[], None]]) -> Site:
    """Wrap the target in `module` (already executed); raises Unresolved if it is not there."""
    attrs = target.qualname[len(module.__name__) + 1:].split(".")
    owner, key, raw = resolve(module, attrs)
    site = site_of(target, raw)
    setattr(owner, key, wrap(raw, emitter(site)))
    return site
