"""etcd 3.4 (Debian's `etcd-server`, a Go binary: no LLVM build) as a system under test.

One member per node, named after the node: a static initial cluster, peer and client URLs
on the node's address, data in `<data_dir>/etcd`, short heartbeat/election timeouts (so
elections happen within a fuzzing window) and a small snapshot count (so snapshots, log
compaction and snapshot transfer to a lagging member happen in a short campaign). etcd 3.4
logs with capnslog unless told otherwise: `--logger=zap` gives one JSON object per line,
which the log-derived events (`LOG_EVENTS`, mallory/observer/log_events.py) read by its
"msg" field.

Clients use the v3 JSON gateway (mallory/suts/etcd/client.py). The adapter can say
which member leads (`/v3/maintenance/status`), move leadership (`promote`: MoveLeader), and
remove a member and add it back (`/v3/cluster/member/*`: the re-added member starts from an
empty data dir with `--initial-cluster-state existing`).
"""

from __future__ import annotations

import http.client
import shutil
import time
from pathlib import Path
from typing import Callable, Sequence, TypeVar

from mallory.cluster.backend import ClusterBackend, NodeProcess
from mallory.errors import MalloryError
from mallory.harness.adapter import HasPrimaries, Membership, ProcessAdapter, Promotable
from mallory.harness.client import Client, key_options
from mallory.harness.workload import Workload
from mallory.log_lines import LogPattern
from mallory.suts.etcd.client import EtcdClient, EtcdError, EtcdHttp

CLIENT_PORT = 2379
PEER_PORT = 2380
PROMOTE_WAIT_S = 5.0
RECONFIGURE_WAIT_S = 20.0

T = TypeVar("T")

#: etcd 3.4's raft, leadership, snapshot and membership messages (zap "msg" texts, matched
#: anywhere in the line), named; then every other line from the raft package, named by its
#: normalised message. The first entry a line matches names it.
LOG_EVENTS: tuple[LogPattern, ...] = tuple(
    LogPattern(pattern, name)
    for pattern, name in [
        (r"became leader at term", "became-leader"),
        (r"became candidate at term", "became-candidate"),
        (r"became pre-candidate at term", "became-pre-candidate"),
        (r"became follower at term", "became-follower"),
        (r"is starting a new election at term", "election-started"),
        (r"raft\.node: \w+ elected leader", "elected-leader"),
        (r"raft\.node: \w+ lost leader", "lost-leader"),
        (r"raft\.node: \w+ changed leader", "changed-leader"),
        (r"received a Msg\w+ message with higher term", "saw-higher-term"),
        (r"rejected MsgVote", "rejected-vote"),
        (r"rejected MsgPreVote", "rejected-prevote"),
        (r"cast MsgVote", "cast-vote"),
        (r"ignored a Msg\w+ message with lower term", "ignored-lower-term"),
        (r"triggering snapshot", "snapshot-triggered"),
        (r"saved snapshot", "snapshot-saved"),
        (r"compacted Raft logs", "raft-log-compacted"),
        (r"sending database snapshot", "snapshot-sending"),
        (r"sent database snapshot", "snapshot-sent"),
        (r"receiving database snapshot|received and saved database snapshot", "snapshot-received"),
        (r"starts to restore snapshot", "snapshot-restoring"),
        (r"restored snapshot|applied snapshot", "snapshot-applied"),
        (r"recovered v3 backend from snapshot", "recovered-from-snapshot"),
        (r"restarting local member", "member-restarted"),
        (r"switched to configuration", "configuration-changed"),
        (r'"msg":"added member"', "member-added"),
        (r'"msg":"removed member"', "member-removed"),
        (r"the member has been permanently removed", "removed-from-cluster"),
        (r"peer became active", "peer-active"),
        (r"peer became inactive", "peer-inactive"),
        (r"lost TCP streaming connection", "peer-stream-lost"),
        (r"failed to send out heartbeat on time", "slow-heartbeat"),
        (r"apply request took too long", "slow-apply"),
        (r"timed out waiting for read index response", "read-index-timeout"),
        (r"leadership transfer", "leader-transfer"),
        (r'"level":"(?:panic|fatal|dpanic)"', "fatal"),
        (r'"caller":"raft/', ""),
    ]
)


def wait_for(value: Callable[[], T], timeout: float, interval: float = 0.1) -> T:
    """`value()` once it is truthy, or its last (falsy) result after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (result := value()) and time.monotonic() < deadline:
        time.sleep(interval)
    return result


class EtcdAdapter(ProcessAdapter, HasPrimaries, Promotable, Membership):
    name = "etcd"
    process_name = "etcd"
    stop_timeout = 5.0  # etcd without quorum can hang on SIGTERM
    ready_timeout = 30.0
    ready_interval = 0.1
    log_events = LOG_EVENTS
    #: raft's own line (its JSON "msg"): "<member id> became leader at term <t>"
    leader_line = r"became leader at term (?P<term>\d+)"

    def __init__(
        self,
        backend: ClusterBackend,
        port: int = CLIENT_PORT,
        peer_port: int = PEER_PORT,
        etcd: str = "etcd",
        heartbeat_ms: int = 50,
        election_ms: int = 500,
        snapshot_count: int = 500,
        client_timeout: float = 2.0,
    ) -> None:
        super().__init__(backend)
        self.port = port
        self.peer_port = peer_port
        self.etcd = shutil.which(etcd) or etcd
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        self.snapshot_count = snapshot_count
        self.client_timeout = client_timeout
        #: nodes re-added to a running cluster: the --initial-cluster they join with
        self._joining: dict[str, str] = {}
        #: nodes removed from the membership and not added back yet
        self._removed: set[str] = set()

    # -- processes -----------------------------------------------------------------------

    def peer_url(self, node: str) -> str:
        return f"http://{self.backend.node_address(node)}:{self.peer_port}"

    def client_url(self, node: str) -> str:
        return f"http://{self.backend.node_address(node)}:{self.port}"

    def member_dir(self, node: str) -> Path:
        return self.backend.data_dir(node) / "etcd"

    def command(self, node: str) -> Sequence[str]:
        joining = self._joining.get(node)
        initial = joining or ",".join(f"{n}={self.peer_url(n)}" for n in self.backend.nodes)
        return [
            self.etcd,
            "--name", node,
            "--data-dir", str(self.member_dir(node)),
            "--logger", "zap",
            "--log-outputs", "stderr",
            "--listen-peer-urls", self.peer_url(node),
            "--initial-advertise-peer-urls", self.peer_url(node),
            "--listen-client-urls", self.client_url(node),
            "--advertise-client-urls", self.client_url(node),
            "--initial-cluster", initial,
            "--initial-cluster-state", "existing" if joining else "new",
            "--initial-cluster-token", "mallory",
            "--heartbeat-interval", str(self.heartbeat_ms),
            "--election-timeout", str(self.election_ms),
            "--snapshot-count", str(self.snapshot_count),
            "--enable-v2=false",
        ]  # fmt: skip

    def start(self, node: str) -> NodeProcess:
        """Start the member; one removed from the cluster is added back first (MalloryError
        when that cannot be done now)."""
        if node in self._removed and not self.is_running(node):
            self.add_member(node)
            if node in self._removed:
                raise MalloryError(f"etcd: {node} was removed and no running member can add it back now")
            return self._procs[node]
        return super().start(node)

    def teardown(self, node: str) -> None:
        super().teardown(node)
        self._joining.pop(node, None)
        self._removed.discard(node)

    def _http(self, node: str, timeout: float = 1.0) -> EtcdHttp:
        return EtcdHttp(self.backend.client_address(node), self.port, timeout)

    def _call(self, node: str, path: str, body: dict, timeout: float = 1.0) -> dict | None:
        """One gateway call to `node`; None when it does not answer or answers an error."""
        conn = self._http(node, timeout)
        try:
            return conn.call(path, body)
        except (OSError, EtcdError, http.client.HTTPException):
            return None
        finally:
            conn.close()

    def probe(self, node: str) -> bool:
        """Ready = the member serves a linearizable read (it has a leader and a quorum)."""
        return self._call(node, "/v3/kv/range", {"key": "cmVhZHk="}) is not None

    # -- roles ---------------------------------------------------------------------------

    def _status(self, node: str) -> dict | None:
        return self._call(node, "/v3/maintenance/status", {})

    def _members(self) -> dict[str, str]:
        try:
            return self.member_ids()
        except MalloryError:
            return {}

    def member_ids(self) -> dict[str, str]:
        """Member name -> id (decimal string), from the first running member that answers."""
        for node in self.backend.nodes:
            if not self.is_running(node):
                continue
            reply = self._call(node, "/v3/cluster/member/list", {})
            if reply is not None:
                return {m.get("name", ""): m["ID"] for m in reply.get("members", []) if "ID" in m}
        raise MalloryError("etcd: no running member answers /v3/cluster/member/list")

    def primaries(self) -> list[str]:
        """Running members that answer and say they are the leader (two means split brain)."""
        found = []
        for node in self.backend.nodes:
            if not self.is_running(node):
                continue
            status = self._status(node)
            if status and status.get("leader") and status["leader"] == status.get("header", {}).get("member_id"):
                found.append(node)
        return found

    def promote(self, node: str) -> None:
        """Move leadership to `node` (etcd's MoveLeader, asked of the current leader).

        Best effort: with no leader to ask (an election, a partition or a pause under way,
        waited out for up to `PROMOTE_WAIT_S`) or a leader that refuses, nothing changes.
        The membership fault checks `primaries()` afterwards, so that is reported as a
        fault that did not take, not raised into the campaign (a heal must not fail)."""
        leaders = wait_for(lambda: self.primaries(), PROMOTE_WAIT_S)
        if not leaders or node in leaders:
            return
        target = self._members().get(node)
        if target is not None:
            self._call(leaders[0], "/v3/maintenance/transfer-leadership", {"targetID": target}, timeout=5.0)

    # -- membership ----------------------------------------------------------------------

    def _reconfigure(self, node: str, path: str, body: dict, timeout: float = RECONFIGURE_WAIT_S) -> dict:
        """A membership call asked of the other running members in turn until one accepts.
        etcd refuses a change that would leave too few members connected for at least 5 s
        ("unhealthy cluster", e.g. right after a partition heals): retried until `timeout`."""
        last = "no other member is running"
        deadline = time.monotonic() + timeout
        while True:
            others = [n for n in self.backend.nodes if n != node and self.is_running(n)]
            if not others:
                raise MalloryError(f"etcd: {path} for {node}: no other member is running")
            for other in others:
                conn = self._http(other, 5.0)
                try:
                    return conn.call(path, body)
                except EtcdError as exc:
                    last = f"{other}: {exc.message}"
                except (OSError, http.client.HTTPException) as exc:
                    last = f"{other}: {exc}"
                finally:
                    conn.close()
            if time.monotonic() >= deadline:
                raise MalloryError(f"etcd: {path} for {node} refused: {last}")
            time.sleep(0.5)

    def remove_member(self, node: str) -> None:
        """Remove `node` from the cluster (asked of another member); its process is killed
        and its data dropped, so it comes back only as a new member: through `add_member`,
        or `start` (which adds it back first), e.g. in the nemesis's reset."""
        member = self.member_ids().get(node)
        if member is None:
            raise MalloryError(f"etcd: {node} is not a member")
        self._reconfigure(node, "/v3/cluster/member/remove", {"ID": member})
        self._removed.add(node)
        self.kill(node)
        shutil.rmtree(self.member_dir(node), ignore_errors=True)

    def add_member(self, node: str) -> None:
        """Add `node` back as a new member and start it from an empty data dir. A member
        already added under its peer URL (an earlier attempt whose start failed) is reused.

        When no other member can take the change now (none running, e.g. after kill:all,
        or no quorum for `RECONFIGURE_WAIT_S`), the node stays removed and down, and the
        next `start` (the nemesis's reset restarts dead nodes) adds it back: healing the
        membership fault must not end the campaign."""
        url = self.peer_url(node)
        try:
            listed = self._reconfigure(node, "/v3/cluster/member/list", {})
            if not any(url in m.get("peerURLs", []) for m in listed.get("members", [])):
                listed = self._reconfigure(node, "/v3/cluster/member/add", {"peerURLs": [url]})
        except MalloryError:
            if node in self._removed:
                return
            raise
        peers = [
            f"{m['name']}={m['peerURLs'][0]}" for m in listed.get("members", [])
            if m.get("name") and m.get("peerURLs") and url not in m["peerURLs"]
        ]  # fmt: skip
        self._joining[node] = ",".join([*peers, f"{node}={url}"])
        self._removed.discard(node)
        self.kill(node)
        shutil.rmtree(self.member_dir(node), ignore_errors=True)
        self.start(node)
        # until it has published its name (so member_ids() knows it); not an error if it
        # cannot yet (a partition): the reset's wait_ready is what insists
        wait_for(lambda: self.probe(node) or not self.is_running(node), self.ready_timeout)

    # -- clients -------------------------------------------------------------------------

    def client(self, node: str, workload: Workload) -> Client:
        return EtcdClient(
            self.backend.client_address(node),
            self.port,
            workload.name,
            **key_options(workload),
            timeout=self.client_timeout,
        )
