"""The annotation scanner: where targets land, labels, aliases, and warnings for misplaced ones."""

from __future__ import annotations

from mallory.instrument.annotations import include_closure, scan_text
from tests.unit.instrument.llvm_helpers import run


def targets_of(text: str):
    targets, warnings = scan_text("f.c", text)
    return [(t.kind, t.first, t.last, t.label) for t in targets], [(w.line, w.message) for w in warnings]


def test_func_over_a_multi_line_header_and_labels():
    text = (
        "// INSTRUMENT_FUNC snapshot taken\n"  # 1
        "// (a second comment line)\n"  # 2
        "static int\n"  # 3
        "take(int a,\n"  # 4
        "     int b)\n"  # 5
        "{\n"  # 6
        "    return a + b;\n"
        "}\n"
    )
    assert targets_of(text) == ([("FUNC", 3, 6, "snapshot taken")], [])


def test_block_alias_and_label_lines_extend_to_the_statement():
    text = (
        "int f(int s) {\n"  # 1
        "    switch (s) {\n"  # 2
        "    // INSTRUMENT_BB leader\n"  # 3
        "    case 2:\n"  # 4
        "        /* comment */\n"  # 5
        "        return 7;\n"  # 6
        "    }\n"  # 7
        "    /* INSTRUMENT_BLOCK in a block comment is not a marker */\n"  # 8
        "    // INSTRUMENT_BLOCK\n"  # 9
        "    return 0;\n"  # 10
        "}\n"
    )
    assert targets_of(text) == ([("BLOCK", 4, 6, "leader"), ("BLOCK", 10, 10, "")], [])


def test_misplaced_annotations_are_warned_with_their_line():
    text = (
        "#define TICK(x) \\\n"  # 1
        "    // INSTRUMENT_BLOCK\n"  # 2
        "    (x)++\n"  # 3
        "// INSTRUMENT_FUNC\n"  # 4
        "int declared_only(int a);\n"  # 5
        "// INSTRUMENT_BLOCK\n"  # 6
        "#ifdef DEBUG\n"  # 7
        "#endif\n"  # 8
        "void g(void) {\n"  # 9
        "    int x = 0; // INSTRUMENT_BLOCK\n"  # 10
        "    x++;\n"  # 11
        "    // INSTRUMENT_BLOCK\n"  # 12
        "}\n"  # 13
        "// INSTRUMENT_FUNC trailing\n"  # 14
    )
    targets, warnings = targets_of(text)
    assert targets == []
    lines = [line for line, _ in warnings]
    assert lines == [2, 4, 6, 10, 12, 14]
    messages = dict(warnings)
    assert "macro" in messages[2]
    assert "does not start a function definition" in messages[4]
    assert "preprocessor line (#ifdef)" in messages[6]
    assert "same line" in messages[10]
    assert "no statement follows" in messages[12]
    assert "no code line follows" in messages[14]


def test_include_closure_follows_quoted_and_dash_i_headers(tmp_path):
    (tmp_path / "inc").mkdir()
    (tmp_path / "a.c").write_text('#include "local.h"\n#include <lib.h>\n#include <stdio.h>\n')
    (tmp_path / "local.h").write_text('#include "inc/deep.h"\n')
    (tmp_path / "inc" / "deep.h").write_text("")
    (tmp_path / "inc" / "lib.h").write_text("")
    found = include_closure([str(tmp_path / "a.c")], include_dirs=[str(tmp_path / "inc")])
    names = sorted(p.rsplit("/", 1)[1] for p in found)
    assert names == ["a.c", "deep.h", "lib.h", "local.h"]


def test_wrapper_and_pass_report_unplaceable_annotations(tmp_path, build_env):
    (tmp_path / "w.c").write_text(
        "// INSTRUMENT_FUNC\n"  # 1
        "int declared(void);\n"  # 2
        "int main(void) {\n"  # 3
        "#if 0\n"  # 4
        "    // INSTRUMENT_BLOCK compiled-out\n"  # 5
        "    declared();\n"  # 6
        "#endif\n"  # 7
        "    return 0;\n"  # 8
        "}\n"
    )
    result = run(["mallory-cc", "-c", "w.c"], tmp_path, build_env)
    assert "w.c:1: warning: INSTRUMENT_FUNC: line 2 does not start a function definition" in result.stderr
    # The scanner cannot see that #if 0 removes line 6; the pass finds no code there and says so.
    assert "w.c:6: INSTRUMENT_BLOCK not placed" in result.stderr
