"""`mallory-cc` / `mallory-c++`: drop-in CC/CXX that build with Mallory's instrumentation.

    ./configure CC=mallory-cc CXX=mallory-c++ && make
    make CC=mallory-cc
    cmake -DCMAKE_C_COMPILER=mallory-cc ..

Every argument is passed through to clang (of the LLVM chosen by toolchain.py). Added:
  compiling C/C++ sources: -g (unless the user chose a -g level), the pass plugin
      (-fpass-plugin=...), and the scanned annotation targets (via MALLORY_TARGETS);
  linking: the runtime archive, then the catalogue `<output>.mallory.json` is extracted
      from the linked binary.
Invocations that neither compile a source nor link (-E, -M, -fsyntax-only, --version,
-print-*, no inputs) run unchanged, so configure's probes see plain clang.

Environment (or the wrapper-only switches --asan, --auto):
  MALLORY_ASAN=1          build and link with AddressSanitizer (for the ASan oracle)
  MALLORY_AUTO=1          also instrument error paths, enum switch cases, and functions
                          whose names match the regex MALLORY_AUTO_FUNCS
  MALLORY_BUILD_ROOT      the root ids' paths are relative to (default: see build_root)
  MALLORY_LLVM_CONFIG     which LLVM (default llvm-config-14)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

from mallory.errors import ExitCode, MalloryError
from mallory.instrument import annotations, catalogue, toolchain

_TAKES_VALUE = {
    "-o", "-I", "-D", "-U", "-x", "-include", "-imacros", "-isystem", "-iquote", "-idirafter", "-iprefix",
    "-isysroot", "-L", "-MF", "-MT", "-MQ", "-Xlinker", "-Xclang", "-Xassembler", "-Xpreprocessor", "-arch",
    "-target", "--param", "-u", "-T", "-z", "-e", "-aux-info", "--sysroot", "-mllvm", "-ivfsoverlay",
}
_SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".c++", ".C", ".cp", ".CPP", ".i", ".ii")
_NO_CODEGEN = {"-E", "-M", "-MM", "-fsyntax-only"}


@dataclass
class Invocation:
    sources: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    output: str | None = None
    include_dirs: list[str] = field(default_factory=list)
    quote_dirs: list[str] = field(default_factory=list)
    compile_only: bool = False  # -c or -S
    no_codegen: bool = False
    debug_choice: str | None = None  # the last -g* the user gave

    @property
    def compiles(self) -> bool:
        return bool(self.sources) and not self.no_codegen

    @property
    def links(self) -> bool:
        return bool(self.inputs) and not self.compile_only and not self.no_codegen


def parse(args: list[str]) -> Invocation:
    inv = Invocation()
    language: str | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        value = args[i + 1] if arg in _TAKES_VALUE and i + 1 < len(args) else None
        if value is not None:
            i += 1
        if arg == "-o":
            inv.output = value
        elif arg == "-x":
            language = None if value == "none" else value
        elif arg == "-I" or arg == "-isystem":
            inv.include_dirs.append(value or "")
        elif arg.startswith("-I") and len(arg) > 2:
            inv.include_dirs.append(arg[2:])
        elif arg == "-iquote":
            inv.quote_dirs.append(value or "")
        elif arg.startswith("-o") and len(arg) > 2:
            inv.output = arg[2:]
        elif arg.startswith("-x") and len(arg) > 2:
            language = None if arg[2:] == "none" else arg[2:]
        elif arg in ("-c", "-S"):
            inv.compile_only = True
        elif arg in _NO_CODEGEN:
            inv.no_codegen = True
        elif arg.startswith("-g") and not arg.startswith(("-gz", "-gsplit", "-gcolumn", "-gno-", "-gpubnames")):
            inv.debug_choice = arg
        elif value is None and (arg == "-" or not arg.startswith("-")):
            inv.inputs.append(arg)
            is_source = language in ("c", "c++", "cpp-output", "c++-cpp-output") if language else arg.endswith(_SOURCE_SUFFIXES)
            if is_source and arg != "-":
                inv.sources.append(arg)
        i += 1
    return inv


_PROJECT_MARKERS = ("configure", "configure.ac", "CMakeLists.txt", "Makefile", "GNUmakefile", "meson.build")


def build_root() -> str:
    """The directory ids' paths are relative to: $MALLORY_BUILD_ROOT; else the nearest
    ancestor of the cwd holding .git; else the highest directory reached from the cwd by
    climbing through parents that look like a project (configure, CMakeLists.txt, Makefile,
    ...), so recursive makes (src/) and CMake build directories (build/) share one root."""
    env = os.environ.get("MALLORY_BUILD_ROOT")
    if env:
        return os.path.realpath(env)
    here = os.path.realpath(os.getcwd())
    probe = here
    while True:
        if os.path.exists(os.path.join(probe, ".git")):
            return probe
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    root = here
    while True:
        parent = os.path.dirname(root)
        if parent == root or not any(os.path.exists(os.path.join(parent, m)) for m in _PROJECT_MARKERS):
            return root
        root = parent


def command(lang: str, args: list[str], tc: toolchain.Toolchain, targets_file: str | None) -> tuple[list[str], dict[str, str]]:
    """The real compiler command line and environment for one wrapped invocation."""
    inv = parse(args)
    compiler = str(tc.cxx if lang == "c++" else tc.cc)
    env = dict(os.environ)
    asan = os.environ.get("MALLORY_ASAN") == "1"
    front: list[str] = []
    back: list[str] = []
    if inv.compiles:
        if inv.debug_choice is None:
            front.append("-g")
        elif inv.debug_choice in ("-g0", "-gno-line-tables"):
            back.append("-gline-tables-only")  # the pass needs line numbers
        front.append(f"-fpass-plugin={tc.plugin}")
        env["MALLORY_BUILD_ROOT"] = build_root()
        if targets_file:
            env["MALLORY_TARGETS"] = targets_file
    if asan and (inv.compiles or inv.links):
        front += ["-fsanitize=address", "-fno-omit-frame-pointer"]
    if inv.links:
        back.append(str(tc.runtime))
    return [compiler, *front, *args, *back], env


def _scan(inv: Invocation, root: str, targets_path: str) -> None:
    files = annotations.include_closure(inv.sources, inv.include_dirs, inv.quote_dirs)
    found: list[annotations.Target] = []
    for path in files:
        targets, warnings = annotations.scan_file(path)
        found += targets
        for w in warnings:
            print(f"mallory: {w}", file=sys.stderr)
    annotations.write_targets(targets_path, found, root)


#: Wrapper-only switches (clang has none of these), the same as setting the variable to 1.
_SWITCHES = {"--auto": "MALLORY_AUTO", "--asan": "MALLORY_ASAN"}


def run(lang: str, args: list[str]) -> int:
    for switch, variable in _SWITCHES.items():
        if switch in args:
            os.environ[variable] = "1"
    args = [a for a in args if a not in _SWITCHES]
    tc = toolchain.ensure_built()
    inv = parse(args)
    if not inv.compiles and not inv.links:
        return subprocess.call([str(tc.cxx if lang == "c++" else tc.cc), *args])
    targets_path = None
    try:
        if inv.compiles:
            fd, targets_path = tempfile.mkstemp(prefix="mallory-targets-", suffix=".tsv")
            os.close(fd)
            _scan(inv, build_root(), targets_path)
        argv, env = command(lang, args, tc, targets_path)
        rc = subprocess.call(argv, env=env)
    finally:
        if targets_path:
            os.unlink(targets_path)
    if rc == 0 and inv.links:
        output = inv.output or "a.out"
        if output != "-" and os.path.isfile(output):
            catalogue.write_for_binary(output)
    return rc


def _main(lang: str) -> None:
    try:
        sys.exit(run(lang, sys.argv[1:]))
    except MalloryError as exc:
        print(f"mallory-{lang}: error: {exc}", file=sys.stderr)
        sys.exit(ExitCode.BAD_INPUT)


def main_cc() -> None:
    _main("cc")


def main_cxx() -> None:
    _main("c++")
