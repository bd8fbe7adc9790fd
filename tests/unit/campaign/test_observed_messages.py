"""An observed stack hands each node's observer the adapter's message format (a JSON file
beside the log-event files, `--messages`), and nothing when the adapter declares none.
Stand-ins play the cluster (its spawn returns the argv) and the adapter."""

from __future__ import annotations

from mallory.campaign.observed import ObservedStack
from mallory.observer.messages import (
    MessageFormat,
    PeerMessages,
    TypeField,
    load_watch_file,
)

DECLARED = PeerMessages(MessageFormat(delimiter=b"\n", type=TypeField(names={65: "append"})), (7001,))


class Cluster:
    def __init__(self, path) -> None:
        self.path = path

    def data_dir(self, node: str):
        return self.path

    def spawn(self, node: str, argv: list[str], name: str, env: dict[str, str] | None = None) -> list[str]:
        return argv


class Stack(ObservedStack):
    def _observer_command(self, node: str) -> list[str]:
        return ["mallory", "observe", "--node", node]


class Declaring:
    def __init__(self, declared: PeerMessages | None) -> None:
        self.declared = declared

    def peer_messages(self) -> PeerMessages | None:
        return self.declared


def test_each_observer_gets_the_adapters_message_format_and_none_without_one(tmp_path):
    stack = Stack()
    stack.cluster = Cluster(tmp_path)
    stack.adapter = Declaring(DECLARED)
    path = tmp_path / "messages-n2.json"
    assert stack._spawn_observer("n2") == ["mallory", "observe", "--node", "n2", "--messages", str(path)]
    assert load_watch_file(str(path)) == DECLARED  # what the observer will read
    stack.adapter = Declaring(None)
    assert "--messages" not in stack._spawn_observer("n3")
    stack.adapter = object()  # no FramesMessages at all
    assert "--messages" not in stack._spawn_observer("n3")
    assert not (tmp_path / "messages-n3.json").exists()
