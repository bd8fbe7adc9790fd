"""The import hook: compiles annotated modules with their hooks and wraps traced functions
as soon as their module has run, and runs the program itself the same way.

One `sys.meta_path` finder does both. It asks the finders after it for the module's spec
(so nothing about where modules come from changes), then swaps the loader: modules under
an annotated root are compiled from the rewritten AST (never from a cached .pyc of the
plain source, and no .pyc of the rewrite is written), and modules that may hold a traced
name get their targets wrapped right after they execute.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import runpy
import sys
import threading
from collections.abc import Callable, Iterable
from types import CodeType, ModuleType
from typing import Any, TextIO

from mallory.errors import MalloryError
from mallory.pyinstrument.annotated import Site, hook_name, rewrite
from mallory.pyinstrument.runtime import Emit
from mallory.pyinstrument.tracing import TraceTarget, Unresolved, install


def _no_event() -> None:
    """The emitter of a site when no ring is written (catalogue-only runs)."""


class Instrumenter:
    """Places the hooks of one configuration and remembers every site placed.

    emitter: makes a site's emitter (`RingWriter.emitter`); None places the hooks with
    emitters that do nothing (to compute the catalogue).
    """

    def __init__(self, annotated: Iterable[str] = (), targets: Iterable[TraceTarget] = (),
                 emitter: Callable[[int, Any], Emit] | None = None, warn: TextIO | None = None) -> None:
        self.roots = [os.path.realpath(d) for d in annotated]
        for root in self.roots:
            if not os.path.isdir(root):
                raise MalloryError(f"annotated directory {root} does not exist")
        self.pending = list(targets)
        self.sites: dict[int, Site] = {}
        #: targets that can never be traced (qualname -> why)
        self.failed: dict[str, str] = {}
        self._emitter = emitter
        self._warn = warn if warn is not None else sys.stderr
        self._lock = threading.Lock()
        self._finder: _Finder | None = None

    # -- sites ---------------------------------------------------------------------------

    def emitter_for(self, site: Site) -> Emit:
        self.sites[site.id] = site
        return self._emitter(site.id, site.kind) if self._emitter else _no_event

    def annotated_root(self, path: str | None) -> str | None:
        if not path:
            return None
        real = os.path.realpath(path)
        return next((r for r in self.roots if real.startswith(r.rstrip("/") + "/")), None)

    def compile(self, path: str, source: bytes) -> CodeType:
        """An annotated source compiled with its hooks (their emitters go into builtins)."""
        root = self.annotated_root(path)
        assert root is not None
        tree, sites, warnings = rewrite(path, importlib.util.decode_source(source), root)
        for warning in warnings:
            print(f"mallory.pyinstrument: {warning}", file=self._warn)
        for site in sites:
            setattr(builtins, hook_name(site.id), self.emitter_for(site))
        return compile(tree, path, "exec", dont_inherit=True)

    # -- traced names --------------------------------------------------------------------

    def wants(self, module: str) -> bool:
        return any(module in t.modules() for t in self.pending)

    def module_loaded(self, module: ModuleType) -> None:
        """Wrap every pending target that lives in `module` (it has just executed)."""
        with self._lock:
            for target in [t for t in self.pending if module.__name__ in t.modules()]:
                try:
                    install(target, module, self.emitter_for)
                except Unresolved as exc:
                    if not hasattr(module, "__path__"):  # not a package: no submodule can hold it later
                        self.pending.remove(target)
                        self.failed[target.qualname] = str(exc)
                        print(f"mallory.pyinstrument: cannot trace {target.qualname}: {exc}", file=self._warn)
                    continue
                self.pending.remove(target)

    # -- installing ----------------------------------------------------------------------

    def install(self) -> None:
        """Put the finder first on sys.meta_path; trace targets whose modules are loaded already."""
        if self._finder is None:
            self._finder = _Finder(self)
            sys.meta_path.insert(0, self._finder)
        for name in sorted({m for t in self.pending for m in t.modules()}, key=len):
            if name in sys.modules:
                self.module_loaded(sys.modules[name])

    def uninstall(self) -> None:
        if self._finder is not None and self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        self._finder = None

    def resolve_all(self) -> None:
        """Import the module of every pending target now, so each is traced (or fails here:
        MalloryError naming the target). Used to compute the catalogue."""
        for target in list(self.pending):
            for name in target.modules():
                try:
                    importlib.import_module(name)
                    break
                except ModuleNotFoundError as exc:
                    if exc.name != name:
                        raise MalloryError(f"cannot trace {target.qualname}: importing {name} failed: {exc}") from None
            self.install()
        problems = [f"{name}: {why}" for name, why in self.failed.items()]
        problems += [f"{t.qualname}: no such module or attribute" for t in self.pending]
        if problems:
            raise MalloryError("cannot trace " + "; ".join(problems))

    def scan_annotated(self) -> None:
        """Place the sites of every .py under the annotated roots (compiling, not running them)."""
        for root in self.roots:
            for folder, dirs, files in os.walk(root):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
                for name in sorted(files):
                    if name.endswith(".py"):
                        path = os.path.join(folder, name)
                        with open(path, "rb") as f:
                            source = f.read()
                        try:
                            self.compile(path, source)
                        except SyntaxError as exc:
                            raise MalloryError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None


class _AnnotatedLoader(importlib.machinery.SourceFileLoader):
    """A source loader that always compiles the rewritten source."""

    def __init__(self, fullname: str, path: str, instrumenter: Instrumenter) -> None:
        super().__init__(fullname, path)
        self._instrumenter = instrumenter

    def get_code(self, fullname: str) -> CodeType:
        return self._instrumenter.compile(self.path, self.get_data(self.path))


class _TracingLoader(importlib.abc.Loader):
    """Delegates to the real loader, then wraps the module's traced functions."""

    def __init__(self, loader: Any, instrumenter: Instrumenter) -> None:
        self._loader = loader
        self._instrumenter = instrumenter

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._instrumenter.module_loaded(module)

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, get_resource_reader...
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, instrumenter: Instrumenter) -> None:
        self._instrumenter = instrumenter

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        instrumenter = self._instrumenter
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None:
            return spec
        if isinstance(spec.loader, importlib.machinery.SourceFileLoader) and instrumenter.annotated_root(spec.origin):
            spec.loader = _AnnotatedLoader(fullname, spec.origin, instrumenter)
        if instrumenter.wants(fullname):
            spec.loader = _TracingLoader(spec.loader, instrumenter)
        return spec


def run_program(program: str, argv: list[str], *, module: bool = False, instrumenter: Instrumenter | None = None) -> None:
    """Run a script (or, with module=True, a module) as __main__, the way `python` would,
    with its annotations compiled in when it lies under an annotated root."""
    if module:
        sys.argv = [program, *argv]
        sys.path[0] = os.getcwd()
        runpy.run_module(program, run_name="__main__", alter_sys=True)
        return
    path = os.path.abspath(program)
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        raise MalloryError(f"cannot run {program}: {exc.strerror}") from None
    sys.argv = [program, *argv]
    sys.path[0] = os.path.dirname(path)
    main = ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    if instrumenter is not None and instrumenter.annotated_root(path):
        code = instrumenter.compile(path, source)
    else:
        code = compile(source, path, "exec", dont_inherit=True)
    exec(code, main.__dict__)
