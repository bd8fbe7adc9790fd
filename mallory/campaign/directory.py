"""The campaign directory: AFL's plain layout married to Jepsen's store (DESIGN.md).

    DIR/campaign.json        the CampaignConfig (config.py): written at creation, read on
                             resume, rewritten only to record a calibration
    DIR/fuzzer_stats         key: value, rewritten after every step (AFL++'s keys first,
                             so afl-whatsup reads it)
    DIR/plot_data            one line per step, comma-separated: time series for plots
                             (AFL++'s columns first, so afl-plot draws it)
    DIR/learner              the learner checkpoint (for --resume)
    DIR/corpus/NNNNNN.json   modelfuzz's kept schedules, one per entry, as the checkpoint
                             holds them (it is their truth: a kill between the two leaves
                             an entry the next schedule's end writes)
    DIR/schedules/NNNNNN.json every schedule: faults, times, states, rewards, findings
    DIR/bugs/<signature>/    a reproducer bundle per distinct bug: report.json, schedule.json,
                             campaign.json (config), sightings.jsonl, the schedule's run dir
    DIR/runs/NNNNNN/         Jepsen-style: history, results, node logs of a schedule

Every file that is rewritten is written to a temporary name and renamed, so a kill -9 at
any moment leaves either the old or the new version, never half of one; readers skip the
temporaries (dot names) a kill leaves behind. The files appended to (plot_data, a bundle's
sightings.jsonl) may end in a line torn by a kill: readers drop it, and the first append
after it cuts it off first (`cut_torn_tail`), so it never ends up inside the file.
campaign.json is written last at creation: a directory without it holds no campaign yet.
(No fsync: a killed process's writes survive in the page cache; only a power cut could lose
them, and fsync after every step made the loop's bookkeeping cost more than its decisions.)
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from mallory.campaign.afl import AFL_PLOT_COLUMNS
from mallory.campaign.config import CampaignConfig
from mallory.errors import MalloryError
from mallory.files import atomic_write, cut_torn_tail
from mallory.learner.corpus import Corpus

#: plot_data's columns: AFL++'s, in its order (afl-plot reads them by position; afl.py says
#: what each means here), then Mallory's own
PLOT_COLUMNS = (
    *AFL_PLOT_COLUMNS,
    "schedules_done",
    "steps_done",
    "late_steps",
    "action",
    "state",
    "new_state",
    "feedback_ms",
    "waypoint",
    "model_states",
)
#: the columns campaigns written before plot_data began with AFL++'s had under other names
#: (old name -> today's): a resumed old campaign writes them, the report reads them
RENAMED_PLOT_COLUMNS = {
    "relative_time_s": "relative_time",
    "distinct_states": "corpus_count",
    "bugs": "saved_crashes",
    "pairs_covered": "edges_found",
}
#: what fuzzer_stats values never hold: afl-whatsup sources its lines as shell assignments
#: (key="value"), so a newline or a character the shell expands within double quotes would
#: break it or run something
UNSAFE_IN_STATS = str.maketrans({"\n": " ", "\r": " ", '"': "'", "$": "_", "`": "'", "\\": "/"})


def read_json_object(path: Path, missing: str) -> dict[str, Any]:
    """A JSON object from a file, or MalloryError: `missing` if there is no file, else what
    is wrong with it."""
    try:
        value = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise MalloryError(missing) from None
    except orjson.JSONDecodeError as exc:
        raise MalloryError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise MalloryError(f"{path}: expected a JSON object")
    return value


def read_bundle_file(bundle: Path, name: str) -> dict[str, Any]:
    """A bug bundle's JSON object `name` (report.json, schedule.json, campaign.json)."""
    return read_json_object(Path(bundle) / name, f"{bundle} is not a bug bundle: it has no {name}")


def read_bundle_config(bundle: Path) -> CampaignConfig:
    """The configuration of the campaign that found a bug bundle's bug (its campaign.json)."""
    return CampaignConfig.from_json(read_bundle_file(bundle, "campaign.json"), Path(bundle) / "campaign.json")


def _config_json(config: CampaignConfig) -> bytes:
    return orjson.dumps(config.to_json(), option=orjson.OPT_INDENT_2)


class CampaignDir:
    """Reads and writes one campaign's directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._plot_columns: list[str] | None = None  # plot_data's, read at the first append

    # -- creation and resume -------------------------------------------------------------

    def create(self, config: CampaignConfig) -> None:
        """A new campaign: refuse a directory that already holds one (use --resume), or
        one that cannot be made (MalloryError)."""
        if (self.root / "campaign.json").exists():
            raise MalloryError(f"{self.root} already holds a campaign; use --resume to continue it")
        try:
            for sub in ("schedules", "bugs", "runs"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
            # campaign.json last: a directory that has it has everything a campaign needs
            atomic_write(self.root / "plot_data", ("# " + ", ".join(PLOT_COLUMNS) + "\n").encode())
            self.write_config(config)
        except OSError as exc:
            raise MalloryError(f"cannot create the campaign directory {self.root}: {exc.strerror}") from None

    def config(self) -> CampaignConfig:
        """The campaign's configuration, or MalloryError: there is no campaign here, or its
        campaign.json is malformed (naming the field)."""
        path = self.root / "campaign.json"
        return CampaignConfig.from_json(read_json_object(path, f"{self.root} holds no campaign (no campaign.json)"), path)

    def write_config(self, config: CampaignConfig) -> None:
        """Write campaign.json: at creation, and to record decisions taken after it (a
        calibrated threshold)."""
        atomic_write(self.root / "campaign.json", _config_json(config))

    def schedules_done(self) -> int:
        """Schedules completely recorded: a schedule file is written only when it ends."""
        return len(list((self.root / "schedules").glob("[0-9]*.json")))

    # -- learner -----------------------------------------------------------------------

    def save_learner(self, checkpoint: bytes) -> None:
        atomic_write(self.root / "learner", checkpoint)

    def load_learner(self) -> bytes | None:
        path = self.root / "learner"
        return path.read_bytes() if path.exists() else None

    def sync_corpus(self, corpus: Corpus) -> None:
        """Write the corpus entries that have no file yet (entries never change once
        kept)."""
        folder = self.root / "corpus"
        folder.mkdir(exist_ok=True)
        for i in range(len(corpus.entries)):
            path = folder / f"{i:06d}.json"
            if not path.exists():
                atomic_write(path, orjson.dumps(corpus.entry_json(i), option=orjson.OPT_INDENT_2))

    # -- records -------------------------------------------------------------------------

    def write_schedule(self, index: int, record: Mapping[str, Any]) -> Path:
        path = self.root / "schedules" / f"{index:06d}.json"
        atomic_write(path, orjson.dumps(dict(record), option=orjson.OPT_INDENT_2))
        return path

    def read_schedules(self) -> list[dict[str, Any]]:
        return [orjson.loads(p.read_bytes()) for p in sorted((self.root / "schedules").glob("[0-9]*.json"))]

    def run_dir(self, index: int) -> Path:
        path = self.root / "runs" / f"{index:06d}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def fresh_run_dir(self, index: int) -> Path:
        """An empty run directory for schedule `index`. What an interrupted incarnation left
        there (a resumed campaign redoes the schedule in flight) is kept beside it as
        `NNNNNN.interrupted[.k]`, never mixed into the new run's history."""
        path = self.root / "runs" / f"{index:06d}"
        if path.exists() and any(path.iterdir()):
            aside = path.with_name(path.name + ".interrupted")
            k = 1
            while aside.exists():
                aside = path.with_name(f"{path.name}.interrupted.{k}")
                k += 1
            os.replace(path, aside)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def plot_columns(self) -> list[str]:
        """The columns of this campaign's plot_data, as its header names them: a campaign
        resumed by a newer Mallory keeps writing the columns it started with (PLOT_COLUMNS
        when there is no header)."""
        try:
            with open(self.root / "plot_data") as f:
                header = f.readline()
        except FileNotFoundError:
            return list(PLOT_COLUMNS)
        return [c.strip() for c in header[1:].split(",")] if header.startswith("#") else list(PLOT_COLUMNS)

    def append_plot(self, row: Mapping[str, Any]) -> None:
        """One line of plot_data: `row`'s values (by PLOT_COLUMNS' names) in the file's
        columns, a renamed column's under its old name ("" for a missing one)."""
        if self._plot_columns is None:  # the first append of this incarnation
            cut_torn_tail(self.root / "plot_data")
            self._plot_columns = self.plot_columns()
        line = ", ".join(str(row.get(RENAMED_PLOT_COLUMNS.get(c, c), "")) for c in self._plot_columns)
        with open(self.root / "plot_data", "a") as f:
            f.write(line + "\n")
            f.flush()

    def write_stats(self, stats: Mapping[str, Any]) -> None:
        """Rewrite fuzzer_stats: a line "key<padding>: value" per item, as AFL++ writes it;
        `stats`' keys are shell names, and values lose what UNSAFE_IN_STATS names."""
        text = "".join(f"{key:<18}: {str(value).translate(UNSAFE_IN_STATS)}\n" for key, value in stats.items())
        atomic_write(self.root / "fuzzer_stats", text.encode())

    def read_stats(self) -> dict[str, str]:
        path = self.root / "fuzzer_stats"
        if not path.exists():
            return {}
        out = {}
        for line in path.read_text().splitlines():
            key, _, value = line.partition(":")
            out[key.strip()] = value.strip()
        return out

    # -- bugs ------------------------------------------------------------------------------

    @staticmethod
    def bundle_name(signature: str) -> str:
        """The name of a bug's bundle directory: its signature, made safe for a path."""
        return "".join(c if c.isalnum() or c in "-_." else "_" for c in signature)[:120]

    def known_bugs(self) -> set[str]:
        return {p.name for p in (self.root / "bugs").iterdir() if p.is_dir() and not p.name.startswith(".")}

    def record_bug(
        self,
        signature: str,
        report: Mapping[str, Any],
        schedule: Mapping[str, Any],
        files: Iterable[Path] = (),
        config: CampaignConfig | None = None,
        sighting: Mapping[str, Any] | None = None,
    ) -> Path:
        """Write (or update the sightings of) a bug's bundle.

        The first sighting writes the whole bundle into a temporary directory and renames it,
        so a bundle is either complete or absent. Later sightings only append to
        `sightings.jsonl`: one bug found a hundred times is one bundle. Each sighting's line
        holds its schedule, its time and what the checks saw then (`sighting`: occurrences,
        nodes, a history's anomaly types).
        """
        safe = self.bundle_name(signature)
        bundle = self.root / "bugs" / safe
        line = {"schedule": schedule.get("index"), "time": time.time(), **(sighting or {})}
        if bundle.exists():
            cut_torn_tail(bundle / "sightings.jsonl")
            with open(bundle / "sightings.jsonl", "ab") as f:
                f.write(orjson.dumps(line) + b"\n")
            return bundle
        tmp = self.root / "bugs" / f".{safe}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        (tmp / "report.json").write_bytes(orjson.dumps(dict(report), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
        (tmp / "schedule.json").write_bytes(orjson.dumps(dict(schedule), option=orjson.OPT_INDENT_2))
        (tmp / "sightings.jsonl").write_bytes(orjson.dumps(line) + b"\n")
        if config is not None:  # what `mallory replay` needs to rebuild the cluster
            (tmp / "campaign.json").write_bytes(_config_json(config))
        for f in files:
            f = Path(f)
            if f.is_dir():
                shutil.copytree(f, tmp / f.name, dirs_exist_ok=True)
            elif f.exists():
                shutil.copy2(f, tmp / f.name)
        os.replace(tmp, bundle)
        return bundle
