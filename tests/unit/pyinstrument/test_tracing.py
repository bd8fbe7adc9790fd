"""Tracing by qualified name: parsing the list, resolving (mangled) names, wrapping without
changing behaviour, and the import hook that wraps a module right after it runs. Emitters
here are fakes that record hits (the ring is tested in test_ring_roundtrip.py)."""

from __future__ import annotations

import sys
import textwrap

import pytest

from mallory.errors import MalloryError
from mallory.instrument.event_ids import event_id
from mallory.pyinstrument.hooks import Instrumenter
from mallory.pyinstrument.tracing import TraceTarget, read_trace_file
from mallory.timeline.event import Kind

LIBRARY = textwrap.dedent('''\
    def helper(x):
        return x + 1

    class Engine:
        def __private(self):
            return "p"

        def run(self):
            return self.__private()

        @staticmethod
        def static(x):
            return x * 2

        @classmethod
        def make(cls):
            return cls()
''')


class FakeEmitters:
    """Stands in for RingWriter: each emitter appends its id to `hits`."""

    def __init__(self) -> None:
        self.hits: list[int] = []

    def emitter(self, ident: int, kind: Kind):
        assert kind == Kind.FUNC
        return lambda: self.hits.append(ident)


@pytest.fixture
def library(tmp_path, monkeypatch):
    """A package `tracedlib` on sys.path, forgotten again after the test."""
    pkg = tmp_path / "tracedlib"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "engine.py").write_text(LIBRARY)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "tracedlib"
    for name in [m for m in sys.modules if m == "tracedlib" or m.startswith("tracedlib.")]:
        del sys.modules[name]


def test_parse_and_read_trace_lists(tmp_path):
    assert TraceTarget.parse("a.b.C.m = my label") == TraceTarget("a.b.C.m", "my label")
    assert TraceTarget.parse("a.f") == TraceTarget("a.f", "a.f")
    assert TraceTarget("a.b.C.m", "").modules() == ["a.b.C", "a.b", "a"]
    for bad in ("nodots", "a..b", "a.1x"):
        with pytest.raises(MalloryError, match="cannot trace"):
            TraceTarget.parse(bad)
    listing = tmp_path / "trace.txt"
    listing.write_text("# comment\nx.y.Z.w   some label  # why\n\nx.f=other\n")
    assert read_trace_file(str(listing)) == [TraceTarget("x.y.Z.w", "some label"), TraceTarget("x.f", "other")]
    listing.write_text("ok.f\nnot-a-name\n")
    with pytest.raises(MalloryError, match=r"trace.txt:2: cannot trace"):
        read_trace_file(str(listing))


def test_import_hook_wraps_targets_when_their_module_is_imported(library, tmp_path):
    fake = FakeEmitters()
    targets = [TraceTarget.parse(t) for t in (
        "tracedlib.engine.helper=helper", "tracedlib.engine.Engine.__private=private",
        "tracedlib.engine.Engine.static", "tracedlib.engine.Engine.make")]
    instrumenter = Instrumenter(targets=targets, emitter=fake.emitter)
    instrumenter.install()
    try:
        import tracedlib.engine as engine  # type: ignore[import-not-found]
    finally:
        instrumenter.uninstall()
    assert instrumenter.pending == [] and instrumenter.failed == {}
    sites = {s.label: s for s in instrumenter.sites.values()}
    assert sites["helper"].relpath == "tracedlib/engine.py" and sites["helper"].line == 1
    assert sites["private"].function == "Engine.__private" and sites["private"].line == 5
    assert sites["helper"].id == event_id("tracedlib/engine.py", 1, Kind.FUNC)
    # behaviour is unchanged, and each call is one event
    assert engine.helper(1) == 2 and engine.Engine().run() == "p"
    assert engine.Engine.static(4) == 8 and engine.Engine().static(1) == 2
    assert isinstance(engine.Engine.make(), engine.Engine)
    assert fake.hits == [sites[k].id for k in ("helper", "private", "tracedlib.engine.Engine.static",
                                               "tracedlib.engine.Engine.static", "tracedlib.engine.Engine.make")]
    assert engine.helper.__name__ == "helper" and engine.helper.__wrapped__(1) == 2


def test_unknown_names_fail_the_catalogue_and_are_warned_about_at_run_time(library, capsys):
    instrumenter = Instrumenter(targets=[TraceTarget.parse("tracedlib.engine.Engine.nope")], emitter=FakeEmitters().emitter)
    instrumenter.install()
    try:
        with pytest.raises(MalloryError, match=r"tracedlib.engine.Engine.nope: .*no attribute 'nope'"):
            instrumenter.resolve_all()
    finally:
        instrumenter.uninstall()
    assert "cannot trace tracedlib.engine.Engine.nope" in capsys.readouterr().err
    missing = Instrumenter(targets=[TraceTarget.parse("no_such_module_xyz.f")])
    with pytest.raises(MalloryError, match="no_such_module_xyz.f: no such module"):
        missing.resolve_all()


def test_annotated_directory_must_exist(tmp_path):
    with pytest.raises(MalloryError, match="does not exist"):
        Instrumenter(annotated=[str(tmp_path / "missing")])
