"""Where the files Mallory ships beside its Python packages live: the one place that knows.

Mallory runs from its source tree (`make setup` installs it editable), and some of what it
needs is not Python: the SUTs' sources and specs (`suts/`), the LLVM pass and its runtime
(`llvm-pass/`), the fault shim's C source (`nemesis/preload/`), the compose templates
(`deploy/compose/`), and the cache of what it builds (`build/`). They sit beside the
`mallory` package. `$MALLORY_HOME` names another tree holding them, e.g. when the package
was installed elsewhere. Nothing else in the code base works these paths out.
"""

from __future__ import annotations

import os
from pathlib import Path

#: the directory holding the Python packages running now (mallory, nemesis): what another
#: process puts on its path to import this same code
PACKAGES = Path(__file__).resolve().parent.parent
#: the source tree: $MALLORY_HOME, or the directory holding this package
HOME = Path(os.environ.get("MALLORY_HOME") or PACKAGES)
#: sources, specs and annotations of the shipped systems under test (suts/<name>/)
SUTS = HOME / "suts"
#: the LLVM pass plugin, the C ring runtime and their Makefile
LLVM_PASS = HOME / "llvm-pass"
#: the clock/disk fault shim's source and Makefile
PRELOAD = HOME / "nemesis" / "preload"
#: the docker-compose deployment's templates and base-image script
COMPOSE = HOME / "deploy" / "compose"
#: what Mallory builds and caches (instrumented Redis, the docker base image)
BUILD = HOME / "build"
