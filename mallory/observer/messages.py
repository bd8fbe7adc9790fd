"""How an SUT's peer streams split into messages and what each message's type is called.

Declared in a TOML SUT spec's `[messages]` section (or by a Python adapter, as a
`MessageFormat`), read by the node's observer (`mallory observe --messages FILE`, a JSON
file `write_watch_file` makes), which frames every TCP flow to or from one of the `ports`
(mallory/observer/framing.py) and gives each packet the type names of the messages it
starts as its events' data (mallory/timeline/event.py, `message_data`).

    [messages]
    ports = ["peer"]            # names from [ports] (default ["peer"]): flows to or from them
    # framing, one of:
    length = { offset = 0, size = 4, order = "big", counts = "body", header = 4 }
    #   a length field: `size` 1, 2, 4 or 8 bytes at `offset`, `order` "big" or "little";
    #   `counts` "body": the message is `header` fixed bytes then `length` bytes of body;
    #   "message": the field is the whole message's length (`header` unused); `max`
    #   (default 16 MiB) bounds a credible length: a longer one means the flow lost sync
    delimiter = "\\n"           # each message ends with these bytes (a text protocol)
    framer = "pkg.mod:NAME"     # a Python framer that cuts and names (`Cutter` in framing.py)
    # naming (not with `framer`, which names its messages), one of:
    type = { offset = 0, size = 1, order = "big", names = { "86" = "vote-request" },
             default = "other" }
    #   a type field; `names` maps its numbers (decimal or 0x hex, as strings) to names,
    #   `default` (default "other") names the numbers not listed
    classifier = "pkg.mod:func" # func(first bytes of a message) -> its type name
    peek = 64                   # how many first bytes a classifier gets (default 64)

A name is 1 to 32 letters, digits, `_ . : -`, not only lowercase hex digits (it would read as
payload hex) and not "cont" (`is_message_name`). Offsets of the type field count from the
message's first byte, and neither field's offset passes MAX_PEEK (4096): a flow keeps no more
of a message's first bytes. A message shorter than its type field's end is named `default`.

`framer` and `classifier` are `module:attribute` references, imported when the spec is
loaded (so a typo fails there) and again by the observer.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from mallory.errors import MalloryError
from mallory.files import atomic_write
from mallory.timeline.event import is_message_name

FIELDS = ("ports", "length", "delimiter", "framer", "type", "classifier", "peek")
LENGTH_FIELDS = ("offset", "size", "order", "counts", "header", "max")
TYPE_FIELDS = ("offset", "size", "order", "names", "default")
SIZES = (1, 2, 4, 8)
ORDERS = ("big", "little")
COUNTS = ("body", "message")
DEFAULT_MAX_LENGTH = 16 << 20
DEFAULT_PEEK = 64
MAX_PEEK = 4096
_REFERENCE = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


@dataclass(frozen=True)
class LengthField:
    """A message's length, read from `size` bytes at `offset` in `order`: the message is
    `header` + value bytes long when `counts` is "body", value bytes when "message".
    A value that makes the message longer than `max_length`, or shorter than the field's
    end, is not credible: the flow has lost sync."""

    offset: int = 0
    size: int = 4
    order: str = "big"
    counts: str = "body"
    header: int = 0
    max_length: int = DEFAULT_MAX_LENGTH


@dataclass(frozen=True)
class TypeField:
    """A message's type, read from `size` bytes at `offset` in `order` and named by `names`
    (`default` for a number not listed, or a message too short to hold the field)."""

    offset: int = 0
    size: int = 1
    order: str = "big"
    names: Mapping[int, str] = field(default_factory=dict)
    default: str = "other"


@dataclass(frozen=True)
class MessageFormat:
    """The messages on the TCP flows to or from `ports` (port names of the SUT).

    Framing is exactly one of `length`, `delimiter` (non-empty bytes) or `framer` (a
    `module:attribute` reference to a `Cutter`, mallory/observer/framing.py); naming is
    `type` or `classifier` (a `module:function` reference: the message's first `peek`
    bytes, fewer if it is shorter, to its type name), neither with `framer`.
    `parse_messages` builds one from a spec's table and says what is wrong in one line.
    """

    ports: tuple[str, ...] = ("peer",)
    length: LengthField | None = None
    delimiter: bytes = b""
    framer: str = ""
    type: TypeField | None = None
    classifier: str = ""
    peek: int = DEFAULT_PEEK

    def to_json(self) -> dict[str, Any]:
        """The table `parse_messages` reads back (what the observer's file holds)."""
        out: dict[str, Any] = {"ports": list(self.ports), "peek": self.peek}
        if self.length is not None:
            f = self.length
            out["length"] = {"offset": f.offset, "size": f.size, "order": f.order, "counts": f.counts,
                             "header": f.header, "max": f.max_length}
        if self.delimiter:
            out["delimiter"] = self.delimiter.decode("latin-1")
        if self.framer:
            out["framer"] = self.framer
        if self.type is not None:
            t = self.type
            out["type"] = {"offset": t.offset, "size": t.size, "order": t.order,
                           "names": {str(k): v for k, v in t.names.items()}, "default": t.default}
        if self.classifier:
            out["classifier"] = self.classifier
        return out


def resolve_reference(reference: str) -> Any:
    """The object `module:attribute` names (attribute may be dotted); MalloryError saying
    why when it cannot be imported or found."""
    module_name, _, attribute = reference.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # whatever the module raises on import is the user's to see
        raise MalloryError(f"cannot import {module_name} for {reference!r}: {exc}") from None
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise MalloryError(f"{reference!r}: {module_name} has no {attribute}")
        obj = getattr(obj, part)
    return obj


def parse_messages(raw: object, source: str, ports: Mapping[str, int] | None = None) -> MessageFormat:
    """Validate a `[messages]` table; errors name `source` and the field. `ports`: the
    spec's named ports, which `ports` must name (None: not checked). References are
    imported, so a framer or classifier that cannot be loaded fails here."""
    v = _Check(source)
    if not isinstance(raw, dict):
        raise v.error("messages", "must be a table ([messages])")
    for key in raw:
        if key not in FIELDS:
            raise v.error(f"messages.{key}", f"unknown field (known: {', '.join(FIELDS)})")
    names = raw.get("ports", ["peer"])
    if not isinstance(names, list) or not names or not all(isinstance(p, str) for p in names):
        raise v.error("messages.ports", "must be a non-empty list of port names")
    for name in names:
        if ports is not None and name not in ports:
            raise v.error("messages.ports", f"names no port in [ports]: {name!r}")
    framings = [k for k in ("length", "delimiter", "framer") if k in raw]
    if len(framings) != 1:
        raise v.error("messages", f"needs exactly one of length, delimiter, framer (has {', '.join(framings) or 'none'})")
    namings = [k for k in ("type", "classifier") if k in raw]
    if "framer" in raw and namings:
        raise v.error(f"messages.{namings[0]}", "not with `framer`, which names its messages")
    if "framer" not in raw and len(namings) != 1:
        raise v.error("messages", f"needs exactly one of type, classifier (has {', '.join(namings) or 'none'})")
    peek = raw.get("peek", DEFAULT_PEEK)
    if type(peek) is not int or not 1 <= peek <= MAX_PEEK:
        raise v.error("messages.peek", f"must be an integer 1..{MAX_PEEK}, not {peek!r}")
    delimiter = raw.get("delimiter", "")
    if "delimiter" in raw:
        if not isinstance(delimiter, str) or not delimiter or any(ord(c) > 255 for c in delimiter):
            raise v.error("messages.delimiter", f"must be a non-empty string of bytes (\\x00..\\xff), not {delimiter!r}")
    fmt = MessageFormat(
        ports=tuple(names),
        length=v.length(raw["length"]) if "length" in raw else None,
        delimiter=delimiter.encode("latin-1"),
        framer=v.reference(raw.get("framer", ""), "messages.framer", lambda o: callable(getattr(o, "cut", None))),
        type=v.type_field(raw["type"]) if "type" in raw else None,
        classifier=v.reference(raw.get("classifier", ""), "messages.classifier", callable),
        peek=peek,
    )
    return fmt


class _Check:
    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, fieldname: str, problem: str) -> MalloryError:
        return MalloryError(f"{self.source}: {fieldname}: {problem}")

    def table(self, raw: object, fieldname: str, known: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise self.error(fieldname, f"must be a table ({{ {', '.join(known)} }})")
        for key in raw:
            if key not in known:
                raise self.error(f"{fieldname}.{key}", f"unknown field (known: {', '.join(known)})")
        return raw

    def integer(self, raw: dict[str, Any], key: str, fieldname: str, default: int, low: int = 0, high: int = 1 << 30) -> int:
        value = raw.get(key, default)
        if type(value) is not int or not low <= value <= high:
            raise self.error(f"{fieldname}.{key}", f"must be an integer {low}..{high}, not {value!r}")
        return value

    def choice(self, raw: dict[str, Any], key: str, fieldname: str, default: object, choices: tuple) -> Any:
        value = raw.get(key, default)
        if value not in choices:
            raise self.error(f"{fieldname}.{key}", f"must be one of {', '.join(map(str, choices))}, not {value!r}")
        return value

    def length(self, raw: object) -> LengthField:
        where = "messages.length"
        raw = self.table(raw, where, LENGTH_FIELDS)
        f = LengthField(
            offset=self.integer(raw, "offset", where, 0, high=MAX_PEEK),
            size=self.choice(raw, "size", where, 4, SIZES),
            order=self.choice(raw, "order", where, "big", ORDERS),
            counts=self.choice(raw, "counts", where, "body", COUNTS),
            header=self.integer(raw, "header", where, 0),
            max_length=self.integer(raw, "max", where, DEFAULT_MAX_LENGTH, 1, 1 << 40),
        )
        if f.counts == "body" and f.header < f.offset + f.size:
            raise self.error(f"{where}.header", f"the body follows the header, which must hold the length field "
                             f"(offset + size = {f.offset + f.size}), not {f.header}")
        return f

    def type_field(self, raw: object) -> TypeField:
        where = "messages.type"
        raw = self.table(raw, where, TYPE_FIELDS)
        size = self.choice(raw, "size", where, 1, SIZES)
        names_raw = raw.get("names", {})
        if not isinstance(names_raw, dict):
            raise self.error(f"{where}.names", 'must be a table of "number" = "name"')
        names: dict[int, str] = {}
        for key, name in names_raw.items():
            try:
                number = int(key, 0)
            except ValueError:
                raise self.error(f"{where}.names", f"{key!r} is not a number (decimal or 0x hex)") from None
            if not 0 <= number < 1 << (8 * size):
                raise self.error(f"{where}.names", f"{key!r} does not fit in {size} byte(s)")
            names[number] = self.name(name, f"{where}.names.{key}")
        return TypeField(
            offset=self.integer(raw, "offset", where, 0, high=MAX_PEEK),
            size=size,
            order=self.choice(raw, "order", where, "big", ORDERS),
            names=names,
            default=self.name(raw.get("default", "other"), f"{where}.default"),
        )

    def name(self, raw: object, fieldname: str) -> str:
        if not isinstance(raw, str) or not is_message_name(raw):
            raise self.error(fieldname, f"{raw!r} is not a message name (1-32 of A-Z a-z 0-9 _ . : -, "
                             "not only lowercase hex digits, not 'cont')")
        return raw

    def reference(self, raw: object, fieldname: str, usable: Callable[[Any], bool]) -> str:
        if raw == "":
            return ""
        if not isinstance(raw, str) or not _REFERENCE.fullmatch(raw):
            raise self.error(fieldname, f"must be a 'module:attribute' reference, not {raw!r}")
        try:
            obj = resolve_reference(raw)
        except MalloryError as exc:
            raise self.error(fieldname, str(exc)) from None
        if not usable(obj):
            raise self.error(fieldname, f"{raw!r} is not a {'framer (no cut method)' if 'framer' in fieldname else 'function'}")
        return raw


# -- the observer's file ------------------------------------------------------------------


@dataclass(frozen=True)
class PeerMessages:
    """A format and the port numbers its `ports` name on one cluster (what an observer needs)."""

    format: MessageFormat
    ports: tuple[int, ...]


def peer_messages(fmt: MessageFormat, ports: Mapping[str, int], source: str) -> PeerMessages:
    """`fmt` with its port names looked up in `ports`; MalloryError for a name not there."""
    missing = [p for p in fmt.ports if p not in ports]
    if missing:
        raise MalloryError(f"{source}: messages.ports: names no port: {', '.join(missing)}")
    return PeerMessages(fmt, tuple(sorted({ports[p] for p in fmt.ports})))


def write_watch_file(path: str, declared: PeerMessages) -> None:
    """The JSON file `mallory observe --messages` reads (`load_watch_file`)."""
    atomic_write(path, orjson.dumps({"port_numbers": list(declared.ports), "messages": declared.format.to_json()},
                                    option=orjson.OPT_INDENT_2))


def load_watch_file(path: str) -> PeerMessages:
    """What `write_watch_file` wrote; MalloryError naming the file otherwise."""
    try:
        with open(path, "rb") as f:
            doc = orjson.loads(f.read())
    except OSError as exc:
        raise MalloryError(f"{path}: cannot read message format: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise MalloryError(f"{path}: message format is not JSON ({exc})") from None
    numbers = doc.get("port_numbers") if type(doc) is dict else None
    if not isinstance(numbers, list) or not numbers or not all(type(p) is int and 1 <= p <= 65535 for p in numbers):
        raise MalloryError(f'{path}: needs "port_numbers": a non-empty list of ports and "messages": a [messages] table')
    return PeerMessages(parse_messages(doc.get("messages"), path), tuple(numbers))
