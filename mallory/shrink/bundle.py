"""Writing the shrunk schedule as a bundle of its own, with its provenance.

The new bundle is the bug bundle of a replay of the minimal schedule in which the bug came
back (report, schedule record with each step's draw and window, campaign config,
sightings, that replay's run), plus `provenance.json`: where it was shrunk from, the
original and the minimal steps, and the replay settings. `mallory replay` reads it like any
bundle.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import orjson

from mallory.campaign.loop import ScriptedStep
from mallory.errors import MalloryError


def steps_json(steps: list[ScriptedStep]) -> list[dict[str, Any]]:
    return [{"action": s.action, "draw": s.draw, "window_s": s.window_s} for s in steps]


def write_shrunk_bundle(out: Path, replay_dir: Path, signature: str, provenance: dict[str, Any]) -> Path:
    """Copy the replay's bundle of `signature` to `out` (replacing what was there) and add
    the provenance; written beside and renamed, so `out` is whole or absent."""
    source = Path(replay_dir) / "bugs" / signature
    if not source.is_dir():
        raise MalloryError(f"{replay_dir} holds no bundle of {signature}: cannot write the shrunk bundle")
    out = Path(out)
    tmp, old = out.with_name(f".{out.name}.tmp"), out.with_name(f".{out.name}.old")
    for leftover in (tmp, old):  # of a writer killed before it finished
        shutil.rmtree(leftover, ignore_errors=True)
    shutil.copytree(source, tmp)
    (tmp / "provenance.json").write_bytes(orjson.dumps({"signature": signature, **provenance}, option=orjson.OPT_INDENT_2))
    if out.exists():  # moved aside whole, not removed in place: a kill mid-rmtree would leave half a bundle
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
    return out


def bundle_signature(bundle: Path) -> str:
    """The bug a bundle is about: a campaign's bundle is named by its signature; a shrunk
    one, which may be written anywhere, says it in its provenance."""
    provenance = Path(bundle) / "provenance.json"
    if provenance.exists():
        try:
            return str(orjson.loads(provenance.read_bytes())["signature"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise MalloryError(f"{provenance}: no signature in it") from None
    return Path(bundle).name
