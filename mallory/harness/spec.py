"""Declarative SUT specs: a TOML file describing a command-line system under test.

    name = "redis"

    [start]
    command = ["redis-server", "--bind", "{address}", "--port", "{port}", "--dir", "{data_dir}"]
    env = { LD_PRELOAD = "" }            # optional; values take placeholders too

    [ports]
    client = 6379                        # required: where clients connect
    peer = 16379                         # any other named port, as {port_peer}

    [logs]
    files = ["{data_dir}/raft.log"]      # optional: logs beyond the process's own output

    [stop]
    signal = "SIGTERM"                   # graceful stop; SIGKILL after `timeout` seconds
    timeout = 10.0

    [ready]
    probe = "tcp"                        # "tcp" (port open), "command" (exits 0) or "log"
    port = "client"                      # tcp: a name from [ports]
    command = ["redis-cli", "-p", "{port}", "ping"]   # command: run inside the node
    pattern = "Ready to accept"          # log: a regex searched in the node's logs
    timeout = 30.0

    [[log_events]]                       # optional, repeatable: log lines that become
    pattern = 'became leader at term \\d+' # LOG events (mallory/observer/log_events.py)
    name = "became-leader"               # optional: default the normalised message
    file = "{log_dir}/raft.log"          # optional: default the process's own output

    [leader]                             # optional: the line the process logs when its
    pattern = 'became leader at term (?P<term>\\d+)'  # node becomes leader, `term` its term
                                         # (the two-leaders-in-a-term oracle reads it)

    [[log_bugs]]                         # optional, repeatable: a line the SUT logs only
    name = "committed-entry-conflict"    # when a safety invariant of its own broke; a
    pattern = 'conflicting terms \\d+ and \\d+ for entry'  # match is a log-oracle finding
                                         # of that name, signed by the normalised line,
                                         # beside the built-in patterns (panic, fatal...;
                                         # mallory/oracles/logs.py); case-sensitive unless
                                         # the regex says (?i)

    [messages]                           # optional: how the peer streams split into
    ports = ["peer"]                     # messages and what each is called (framing:
    delimiter = "\n"                     # length, delimiter or framer; naming: type or
    type = { offset = 0, names = { "86" = "vote" } }  # classifier); see
                                         # mallory/observer/messages.py
    [rounds]                             # optional: how long one communication round of
    length = 0.3                         # the protocol lasts, in seconds (for Raft: the
                                         # election timeout); the round faults' period
                                         # (nemesis/faults/rounds.py); default 0.5

    [client]
    kind = "redis"                       # a client kind: "line" (GET/PUT/CAS text lines,
                                         # mallory/harness/line_client.py) or one a built-in
                                         # SUT brings ("redis"; mallory/suts/registry.py)
    port = "client"
    timeout = 2.0

Placeholders: {node} {index} {address} {port} {port_<name>} {peers} {nodes} {data_dir}
{log_dir}. {peers} is "address:port" of every other node (the `peer` port when there is
one, else `client`); {index} is the node's 1-based position. `{{` and `}}` are literal
braces. Every template is checked when the spec is loaded, so a typo fails at once, with
the file and the field in the message.

A program given as a relative path with a slash (`build/my-server`) is relative to the spec
file's directory, so a spec shipped next to its SUT works from any working directory; a
bare name (`redis-server`) is looked up on PATH as usual.
"""

from __future__ import annotations

import dataclasses
import re
import signal as signals
import string
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from mallory.errors import MalloryError
from mallory.log_lines import LogPattern
from mallory.observer.log_events import parse_log_events
from mallory.observer.messages import MessageFormat, parse_messages
from mallory.oracles.logs import parse_log_bugs

PROBES = ("tcp", "command", "log")
PLACEHOLDERS = ("node", "index", "address", "port", "peers", "nodes", "data_dir", "log_dir")

_SECTIONS = {
    "name": None,
    "start": {"command", "env"},
    "ports": None,
    "logs": {"files"},
    "stop": {"signal", "timeout"},
    "ready": {"probe", "port", "command", "pattern", "timeout", "interval"},
    "client": {"kind", "port", "timeout"},
    "log_events": None,  # an array of tables, checked by log_events.parse_log_events
    "leader": {"pattern"},
    "log_bugs": None,  # an array of tables, checked by oracles.logs.parse_log_bugs
    "messages": None,  # checked by messages.parse_messages
    "rounds": {"length"},
}


class SpecError(MalloryError):
    """A broken SUT spec; the message names the file and the field."""


@dataclass(frozen=True)
class ReadySpec:
    probe: str
    port: str = "client"
    command: tuple[str, ...] = ()
    pattern: str = ""
    timeout: float = 30.0
    interval: float = 0.1


@dataclass(frozen=True)
class ClientSpec:
    kind: str
    port: str = "client"
    timeout: float = 2.0


@dataclass(frozen=True)
class SutSpec:
    name: str
    command: tuple[str, ...]
    ports: Mapping[str, int]
    env: Mapping[str, str] = field(default_factory=dict)
    log_files: tuple[str, ...] = ()
    stop_signal: int = int(signals.SIGTERM)
    stop_timeout: float = 10.0
    ready: ReadySpec = ReadySpec(probe="tcp")
    client: ClientSpec | None = None
    log_events: tuple[LogPattern, ...] = ()
    leader_line: str = ""
    #: the `[[log_bugs]]`: lines that mean a safety invariant of the SUT broke
    log_bugs: tuple[LogPattern, ...] = ()
    messages: MessageFormat | None = None
    #: the `[rounds] length` in seconds, None when the spec names none
    round_s: float | None = None
    source: str = "<spec>"


@dataclass(frozen=True)
class NodeContext:
    """What the placeholders of one node expand to."""

    node: str
    index: int
    address: str
    ports: Mapping[str, int]
    peers: str
    nodes: str
    data_dir: str
    log_dir: str

    def values(self) -> dict[str, Any]:
        values: dict[str, Any] = {
            "node": self.node,
            "index": self.index,
            "address": self.address,
            "port": self.ports["client"],
            "peers": self.peers,
            "nodes": self.nodes,
            "data_dir": self.data_dir,
            "log_dir": self.log_dir,
        }
        values.update({f"port_{name}": port for name, port in self.ports.items()})
        return values


def expand(template: str, ctx: NodeContext) -> str:
    return template.format_map(ctx.values())


def load_spec(path: str | Path) -> SutSpec:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{path}: cannot read SUT spec: {exc.strerror}") from None
    spec = parse_spec(text, source=str(path))
    program = spec.command[0]
    if "/" in program and not program.startswith("{") and not Path(program).is_absolute():
        spec = dataclasses.replace(spec, command=(str(path.resolve().parent / program), *spec.command[1:]))
    return spec


def parse_spec(text: str, source: str = "<spec>") -> SutSpec:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{source}: not valid TOML: {exc}") from None
    return _Validator(source).spec(raw)


class _Validator:
    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, fieldname: str, problem: str) -> SpecError:
        return SpecError(f"{self.source}: {fieldname}: {problem}")

    def spec(self, raw: dict[str, Any]) -> SutSpec:
        for key, value in raw.items():
            if key not in _SECTIONS:
                raise self.error(key, f"unknown field (known: {', '.join(_SECTIONS)})")
            allowed = _SECTIONS[key]
            if allowed is not None:
                if not isinstance(value, dict):
                    raise self.error(key, "must be a table ([" + key + "])")
                for sub in value:
                    if sub not in allowed:
                        raise self.error(f"{key}.{sub}", f"unknown field (known: {', '.join(sorted(allowed))})")

        name = raw.get("name")
        if not isinstance(name, str) or not name.strip():
            raise self.error("name", "required: a non-empty string")

        ports = self.ports(raw.get("ports"))
        start = raw.get("start")
        if start is None:
            raise self.error("start", "required table with a `command`")
        command = self.command(start.get("command"), "start.command", ports)
        env = start.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise self.error("start.env", "must be a table of string values")
        for key, value in env.items():
            self.template(value, f"start.env.{key}", ports)

        logs = raw.get("logs", {})
        files = logs.get("files", [])
        if not isinstance(files, list) or not all(isinstance(f, str) and f for f in files):
            raise self.error("logs.files", "must be a list of non-empty path strings")
        for i, f in enumerate(files):
            self.template(f, f"logs.files[{i}]", ports)

        stop = raw.get("stop", {})
        stop_signal = self.signal(stop.get("signal", "SIGTERM"), "stop.signal")
        stop_timeout = self.positive(stop.get("timeout", 10.0), "stop.timeout")

        return SutSpec(
            name=name,
            command=command,
            ports=ports,
            env=dict(env),
            log_files=tuple(files),
            stop_signal=stop_signal,
            stop_timeout=stop_timeout,
            ready=self.ready(raw.get("ready", {}), ports),
            client=self.client(raw.get("client"), ports),
            log_events=self.log_events(raw.get("log_events", []), ports),
            leader_line=self.leader_line(raw.get("leader", {})),
            log_bugs=self.log_bugs(raw.get("log_bugs", [])),
            messages=self.messages(raw["messages"], ports) if "messages" in raw else None,
            round_s=self.round_length(raw.get("rounds", {})),
            source=self.source,
        )

    def ports(self, raw: Any) -> dict[str, int]:
        if raw is None:
            raise self.error("ports", "required table with at least `client = <port>`")
        if not isinstance(raw, dict):
            raise self.error("ports", "must be a table of name = port")
        if "client" not in raw:
            raise self.error("ports.client", "required: the port clients connect to")
        for name, port in raw.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise self.error(f"ports.{name}", "port names are identifiers (letters, digits, _)")
            if type(port) is not int or not 1 <= port <= 65535:
                raise self.error(f"ports.{name}", f"must be an integer port 1..65535, not {port!r}")
        return dict(raw)

    def command(self, raw: Any, fieldname: str, ports: Mapping[str, int]) -> tuple[str, ...]:
        if raw is None:
            raise self.error(fieldname, "required: a list of strings (argv)")
        if not isinstance(raw, list) or not raw or not all(isinstance(a, str) for a in raw):
            raise self.error(fieldname, "must be a non-empty list of strings (argv)")
        if not raw[0].strip():
            raise self.error(f"{fieldname}[0]", "the program name is empty")
        for i, arg in enumerate(raw):
            self.template(arg, f"{fieldname}[{i}]", ports)
        return tuple(raw)

    def template(self, text: str, fieldname: str, ports: Mapping[str, int]) -> None:
        known = set(PLACEHOLDERS) | {f"port_{p}" for p in ports}
        try:
            parsed = list(string.Formatter().parse(text))
        except ValueError as exc:
            raise self.error(fieldname, f"bad placeholder syntax in {text!r}: {exc} (write {{{{ for a brace)") from None
        for _, name, spec, conversion in parsed:
            if name is None:
                continue
            if name not in known:
                raise self.error(
                    fieldname, f"unknown placeholder {{{name}}} in {text!r} (known: {', '.join(sorted(known))})"
                )
            if spec or conversion:
                raise self.error(fieldname, f"placeholder {{{name}}} takes no format spec or conversion")

    def log_events(self, raw: Any, ports: Mapping[str, int]) -> tuple[LogPattern, ...]:
        try:
            return parse_log_events(raw, self.source, lambda text, fieldname: self.template(text, fieldname, ports))
        except SpecError:
            raise
        except MalloryError as exc:
            raise SpecError(str(exc)) from None

    def log_bugs(self, raw: Any) -> tuple[LogPattern, ...]:
        try:
            return parse_log_bugs(raw, self.source)
        except MalloryError as exc:
            raise SpecError(str(exc)) from None

    def messages(self, raw: Any, ports: Mapping[str, int]) -> MessageFormat:
        try:
            return parse_messages(raw, self.source, ports)
        except MalloryError as exc:
            raise SpecError(str(exc)) from None

    def leader_line(self, raw: dict[str, Any]) -> str:
        pattern = raw.get("pattern", "")
        if not isinstance(pattern, str):
            raise self.error("leader.pattern", f"must be a regex, not {pattern!r}")
        if not pattern:
            return ""
        try:
            groups = re.compile(pattern).groupindex
        except re.error as exc:
            raise self.error("leader.pattern", f"not a valid regex: {exc}") from None
        if "term" not in groups:
            raise self.error("leader.pattern", "needs a group (?P<term>...) that matches the term")
        return pattern

    def round_length(self, raw: dict[str, Any]) -> float | None:
        if "length" not in raw:
            return None
        length = raw["length"]
        if type(length) not in (int, float) or not 0 < length <= 3600:
            raise self.error("rounds.length", f"must be a number of seconds in (0, 3600], not {length!r}")
        return float(length)

    def signal(self, raw: Any, fieldname: str) -> int:
        if type(raw) is int and raw in {int(s) for s in signals.Signals}:
            return raw
        if isinstance(raw, str):
            name = raw.upper() if raw.upper().startswith("SIG") else "SIG" + raw.upper()
            if name in signals.Signals.__members__:
                return int(signals.Signals[name])
        raise self.error(fieldname, f"not a signal name or number: {raw!r}")

    def positive(self, raw: Any, fieldname: str) -> float:
        if type(raw) not in (int, float) or raw <= 0:
            raise self.error(fieldname, f"must be a positive number of seconds, not {raw!r}")
        return float(raw)

    def ready(self, raw: dict[str, Any], ports: Mapping[str, int]) -> ReadySpec:
        probe = raw.get("probe", "tcp")
        if probe not in PROBES:
            raise self.error("ready.probe", f"must be one of {', '.join(PROBES)}, not {probe!r}")
        timeout = self.positive(raw.get("timeout", 30.0), "ready.timeout")
        interval = self.positive(raw.get("interval", 0.1), "ready.interval")
        port = raw.get("port", "client")
        if port not in ports:
            raise self.error("ready.port", f"names no port in [ports]: {port!r}")
        command: tuple[str, ...] = ()
        pattern = ""
        if probe == "command":
            command = self.command(raw.get("command"), "ready.command", ports)
        elif probe == "log":
            pattern = raw.get("pattern")
            if not isinstance(pattern, str) or not pattern:
                raise self.error("ready.pattern", "required for probe = \"log\": a regex")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise self.error("ready.pattern", f"not a valid regex: {exc}") from None
        return ReadySpec(probe, port, command, pattern, timeout, interval)

    def client(self, raw: Any, ports: Mapping[str, int]) -> ClientSpec | None:
        if raw is None:
            return None
        kind = raw.get("kind")
        if not isinstance(kind, str) or not kind:
            raise self.error("client.kind", f"required: the name of a client, such as \"line\" or \"redis\", not {kind!r}")
        port = raw.get("port", "client")
        if port not in ports:
            raise self.error("client.port", f"names no port in [ports]: {port!r}")
        return ClientSpec(kind, port, self.positive(raw.get("timeout", 2.0), "client.timeout"))
