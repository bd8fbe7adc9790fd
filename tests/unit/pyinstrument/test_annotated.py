"""`# INSTRUMENT_*` comments in Python sources: where the hooks go, what they are called, and
what cannot be placed (pure: AST in, AST out)."""

from __future__ import annotations

import ast
import textwrap

from mallory.instrument.event_ids import event_id
from mallory.pyinstrument.annotated import find_markers, hook_name, rewrite
from mallory.timeline.event import Kind

SOURCE = textwrap.dedent('''\
    import functools

    # INSTRUMENT_FUNC entered
    def plain(x):
        """Docstring stays first."""
        if x:
            # INSTRUMENT_BLOCK positive
            return 1
        return 0

    class Node:
        # INSTRUMENT_FUNC
        @functools.lru_cache
        @staticmethod
        def cached(x):
            return x

        # INSTRUMENT_FUNC private
        def __secret(self):
            return "s"

        def call(self):
            return self.__secret()

    TEXT = """
    # INSTRUMENT_FUNC not-a-comment
    """
    # INSTRUMENT_BLOCK module-level
    VALUE = plain(1)
''')


def _calls(tree: ast.AST) -> list[tuple[str, int]]:
    """(hook name, line) of every inserted hook call, in source order."""
    found = [(n.value.func.id, n.lineno) for n in ast.walk(tree)
             if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)
             and n.value.func.id.startswith("_mallory_hook_")]
    return sorted(found, key=lambda c: c[1])


def test_sites_are_named_and_identified_like_the_pass_does(tmp_path):
    path = tmp_path / "app" / "mod.py"
    path.parent.mkdir()
    path.write_text(SOURCE)
    tree, sites, warnings = rewrite(str(path), SOURCE, str(tmp_path))
    assert warnings == []
    got = {(s.kind, s.line, s.function, s.label) for s in sites}
    assert got == {
        (Kind.FUNC, 4, "plain", "entered"),
        (Kind.BLOCK, 8, "plain", "positive"),
        (Kind.FUNC, 13, "Node.cached", ""),  # the first decorator's line, as the first code line
        (Kind.FUNC, 19, "Node.__secret", "private"),
        (Kind.BLOCK, 29, "<module>", "module-level"),
    }
    for site in sites:
        assert site.relpath == "app/mod.py"
        assert site.id == event_id("app/mod.py", site.line, site.kind)
    assert {name for name, _ in _calls(tree)} == {hook_name(s.id) for s in sites}


def test_rewritten_module_runs_hooks_in_order_and_keeps_its_behaviour(tmp_path):
    path = tmp_path / "mod.py"
    tree, sites, _ = rewrite(str(path), SOURCE, str(tmp_path))
    by_line = {s.line: s for s in sites}
    hits: list[str] = []
    namespace: dict = {}
    for site in sites:  # the launcher puts emitters in builtins; a namespace does as well here
        namespace[hook_name(site.id)] = (lambda label=site.label or site.function: hits.append(label))
    exec(compile(tree, str(path), "exec"), namespace)
    assert hits == ["module-level", "entered", "positive"]
    assert namespace["VALUE"] == 1 and namespace["plain"].__doc__ == "Docstring stays first."
    hits.clear()
    assert namespace["Node"]().call() == "s" and namespace["Node"].cached(3) == 3
    assert hits == ["private", "Node.cached"]
    assert namespace["plain"](0) == 0 and hits[-1] == "entered"
    assert by_line[8].kind == Kind.BLOCK


def test_line_numbers_of_the_program_do_not_move(tmp_path):
    source = "# INSTRUMENT_FUNC f\ndef f():\n    x = 1\n    raise ValueError(x)\n"
    path = tmp_path / "m.py"
    tree, sites, _ = rewrite(str(path), source, str(tmp_path))
    namespace = {hook_name(sites[0].id): lambda: None}
    exec(compile(tree, str(path), "exec"), namespace)
    try:
        namespace["f"]()
    except ValueError as exc:
        assert exc.__traceback__.tb_next.tb_lineno == 4
    else:
        raise AssertionError("f did not raise")


def test_markers_that_cannot_be_placed_are_warned_about_with_their_line(tmp_path):
    source = textwrap.dedent('''\
        # INSTRUMENT_FUNC not-a-function
        x = 1
        if x:
            pass
        # INSTRUMENT_BLOCK else-line
        else:
            pass
        y = 2  # INSTRUMENT_BLOCK trailing
        # INSTRUMENT_BLOCK nothing-after
    ''')
    path = str(tmp_path / "w.py")
    _, sites, warnings = rewrite(path, source, str(tmp_path))
    assert sites == []
    by_line = {w.line: w.message for w in warnings}
    assert set(by_line) == {1, 5, 8, 9}
    assert "does not start a function definition" in by_line[1]
    assert "does not start a statement" in by_line[5]
    assert "same line" in by_line[8]
    assert "no code line follows" in by_line[9]
    assert all(w.path == path for w in warnings)


def test_a_marker_inside_a_string_is_not_a_marker():
    markers, warnings = find_markers("s.py", 'TEXT = """\n# INSTRUMENT_FUNC no\n"""\ndef f():\n    pass\n')
    assert markers == [] and warnings == []


def test_a_file_without_markers_is_returned_as_parsed(tmp_path):
    tree, sites, warnings = rewrite(str(tmp_path / "p.py"), "a = 1\n", str(tmp_path))
    assert sites == [] and warnings == [] and ast.dump(tree) == ast.dump(ast.parse("a = 1\n"))
