"""The code-event catalogue: id -> where the event is in the source and what it is called.

The build writes it next to each instrumented binary as `<binary>.mallory.json`:

    {"version": 1,
     "events": {"<id, decimal>": {"file": "src/raft.c", "line": 120, "function": "become_leader",
                                  "kind": "FUNC", "label": "leader-elected"}, ...}}

Ids are decimal strings because they are unsigned 64-bit. Entries are sorted by id and carry
no absolute paths or times, so two clean builds of the same tree write identical files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

import orjson

from mallory.errors import MalloryError
from mallory.files import atomic_write
from mallory.instrument.elf_section import read_section

SECTION = "mallory_catalog"
SUFFIX = ".mallory.json"
VERSION = 1


@dataclass(frozen=True)
class CodeEvent:
    id: int
    file: str
    line: int
    function: str
    kind: str  # "FUNC" or "BLOCK"
    label: str = ""

    @property
    def name(self) -> str:
        """What reports call it: the annotation's label, else function@file:line."""
        return self.label or f"{self.function}@{self.file}:{self.line}"

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"


def catalogue_path(binary: str | os.PathLike[str]) -> str:
    return os.fspath(binary) + SUFFIX


class Catalogue:
    def __init__(self, events: Iterable[CodeEvent] = ()) -> None:
        self._by_id: dict[int, CodeEvent] = {}
        for event in events:
            self._by_id.setdefault(event.id, event)

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[CodeEvent]:
        return iter(sorted(self._by_id.values(), key=lambda e: e.id))

    def __contains__(self, ident: int) -> bool:
        return ident in self._by_id

    def get(self, ident: int) -> CodeEvent | None:
        return self._by_id.get(ident)

    def name(self, ident: int) -> str:
        event = self._by_id.get(ident)
        return event.name if event else f"unknown:{ident:#018x}"

    def merge(self, other: Catalogue) -> Catalogue:
        return Catalogue([*self, *other])

    # -- files --------------------------------------------------------------------------

    def to_json(self) -> bytes:
        events = {str(e.id): {k: v for k, v in asdict(e).items() if k != "id"} for e in self}
        return orjson.dumps({"version": VERSION, "events": events}, option=orjson.OPT_INDENT_2) + b"\n"

    def write(self, path: str | os.PathLike[str]) -> None:
        atomic_write(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Catalogue:
        try:
            with open(path, "rb") as f:
                doc = orjson.loads(f.read())
        except FileNotFoundError:
            raise MalloryError(f"no catalogue at {path}") from None
        except orjson.JSONDecodeError as exc:
            raise MalloryError(f"{path}: catalogue is not JSON ({exc})") from None
        if type(doc) is not dict or doc.get("version") != VERSION or type(doc.get("events")) is not dict:
            raise MalloryError(f"{path}: not a Mallory catalogue v{VERSION}")
        try:
            return cls(_entry(int(key), value) for key, value in doc["events"].items())
        except (ValueError, TypeError, KeyError) as exc:
            raise MalloryError(f"{path}: malformed catalogue entry: {exc}") from None

    @classmethod
    def from_section(cls, raw: bytes) -> Catalogue:
        """Parse the concatenated JSON lines of a binary's `mallory_catalog` section."""
        entries = []
        for line in raw.replace(b"\0", b"").splitlines():  # padding (e.g. ASan redzones) is NUL
            if line.strip():
                obj = orjson.loads(line)
                entries.append(_entry(int(obj.pop("id")), obj))
        return cls(entries)

    @classmethod
    def from_binary(cls, binary: str | os.PathLike[str]) -> Catalogue:
        raw = read_section(os.fspath(binary), SECTION)
        return cls.from_section(raw) if raw else cls()


def _entry(ident: int, fields: dict) -> CodeEvent:
    if not 0 <= ident < 2**64:
        raise ValueError(f"id {ident} is not unsigned 64-bit")
    return CodeEvent(
        id=ident,
        file=str(fields["file"]),
        line=int(fields["line"]),
        function=str(fields["function"]),
        kind=str(fields["kind"]),
        label=str(fields.get("label", "")),
    )


def write_for_binary(binary: str | os.PathLike[str]) -> str | None:
    """Extract a freshly linked binary's catalogue into `<binary>.mallory.json`; None if it has none."""
    catalogue = Catalogue.from_binary(binary)
    if not len(catalogue):
        return None
    path = catalogue_path(binary)
    catalogue.write(path)
    return path
