"""The instrumented Redis: suts/redis/build.sh builds Debian's redis with the project's
annotations through mallory-cc, cached under build/redis/; this finds (or makes) that build."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

from mallory import paths
from mallory.errors import MalloryError

log = logging.getLogger(__name__)

BUILD_SCRIPT = paths.SUTS / "redis" / "build.sh"
#: where build.sh caches its builds, one directory each, finished ones marked by `.done`
BUILDS = paths.BUILD / "redis"


def ensure_redis_built(asan: bool = False, timeout: float = 1800.0) -> Path:
    """The directory holding bin/redis-server and bin/redis-sentinel (+ their catalogues).
    Instant once built; the first call builds (about a minute on 2 cores)."""
    argv = ["bash", str(BUILD_SCRIPT), *(["--asan"] if asan else [])]
    log.info("finding the instrumented Redis build (%s; built the first time, in about a minute)", BUILD_SCRIPT.name)
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise MalloryError(f"building Redis with {BUILD_SCRIPT} took more than {timeout:.0f} s") from None
    if result.returncode != 0:
        raise MalloryError(f"building Redis with {BUILD_SCRIPT} failed:\n{result.stderr.strip()}")
    lines = result.stdout.strip().splitlines()
    out = Path(lines[-1]) if lines else None
    if out is None or not (out / "bin" / "redis-server").is_file():
        raise MalloryError(f"{BUILD_SCRIPT} did not name a build with bin/redis-server (stdout: {result.stdout!r})")
    return out


def finished_redis_builds() -> list[Path]:
    """Every build directory build.sh finished, found without building (none yet: []).
    Event ids name the source file by its path under the repository, which holds the build
    directory's name, so each build has its own ids and its own catalogue."""
    return sorted(done.parent for done in BUILDS.glob("*/.done"))
