"""The firewall's rule table: what happens to a packet on a link (pure, no I/O).

A link is a directed pair of node names (src, dst). Each link has at most one `LinkRule`,
built up by the commands the API accepts:

    drop(links)                 every packet on those links is dropped (a partition is the
                                set of links between groups, both directions)
    delay(links, delay_ns)      packets are held for delay_ns, then accepted, in order
    duplicate(links, copies)    packets are accepted and `copies` extra copies injected
    heal(links) / heal(None)    those links (or all) go back to plain forwarding

Drop wins over delay and duplicate on the same link; delay and duplicate combine (the
copies leave when the original is released). The table is copy-on-write: the firewall
thread reads `table.rules` without a lock and a change swaps in a new dict.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from mallory.errors import MalloryError

Link = tuple[str, str]


@dataclass(frozen=True)
class LinkRule:
    drop: bool = False
    delay_ns: int = 0
    copies: int = 0

    def is_noop(self) -> bool:
        return not self.drop and self.delay_ns == 0 and self.copies == 0

    def to_json(self) -> dict[str, object]:
        return {"drop": self.drop, "delay_ms": self.delay_ns / 1e6, "copies": self.copies}


MAX_DELAY_NS = 60_000_000_000
MAX_COPIES = 16


class RuleTable:
    def __init__(self, nodes: Sequence[str]) -> None:
        self.nodes = list(nodes)
        self.rules: dict[Link, LinkRule] = {}

    # -- validation ----------------------------------------------------------------------

    def check_links(self, links: Iterable[Link]) -> list[Link]:
        out = []
        known = set(self.nodes)
        for link in links:
            src, dst = link
            if src not in known or dst not in known:
                raise MalloryError(f"link {src}->{dst}: unknown node; the cluster is {self.nodes}")
            if src == dst:
                raise MalloryError(f"link {src}->{dst}: a node has no link to itself")
            out.append((src, dst))
        if not out:
            raise MalloryError("no links given")
        return out

    def partition_links(self, groups: Sequence[Sequence[str]]) -> list[Link]:
        """Every link between two different groups, both directions (Jepsen's partition)."""
        seen: dict[str, int] = {}
        for i, group in enumerate(groups):
            for node in group:
                if node not in self.nodes:
                    raise MalloryError(f"partition: unknown node {node!r}; the cluster is {self.nodes}")
                if node in seen:
                    raise MalloryError(f"partition: node {node!r} is in two groups")
                seen[node] = i
        if len(groups) < 2:
            raise MalloryError("partition: needs at least two groups")
        return [(a, b) for a in seen for b in seen if seen[a] != seen[b]]

    # -- changes (each returns the links it changed) -----------------------------------------

    def _update(self, links: Iterable[Link], **changes: object) -> list[Link]:
        rules = dict(self.rules)
        touched = []
        for link in self.check_links(links):
            rules[link] = replace(rules.get(link, LinkRule()), **changes)
            touched.append(link)
        self.rules = rules
        return touched

    def drop(self, links: Iterable[Link]) -> list[Link]:
        return self._update(links, drop=True)

    def delay(self, links: Iterable[Link], delay_ns: int) -> list[Link]:
        if not 0 <= delay_ns <= MAX_DELAY_NS:
            raise MalloryError(f"delay must be within [0, {MAX_DELAY_NS // 10**6}] ms")
        return self._update(links, delay_ns=delay_ns)

    def duplicate(self, links: Iterable[Link], copies: int) -> list[Link]:
        if not 0 <= copies <= MAX_COPIES:
            raise MalloryError(f"copies must be within [0, {MAX_COPIES}]")
        return self._update(links, copies=copies)

    def heal(self, links: Iterable[Link] | None = None) -> list[Link]:
        if links is None:
            healed = list(self.rules)
            self.rules = {}
            return healed
        rules = dict(self.rules)
        healed = [link for link in self.check_links(links) if rules.pop(link, None) is not None]
        self.rules = rules
        return healed

    def lookup(self, link: Link) -> LinkRule | None:
        rule = self.rules.get(link)
        return None if rule is None or rule.is_noop() else rule

    def to_json(self) -> list[dict[str, object]]:
        return [{"src": s, "dst": d, **r.to_json()} for (s, d), r in sorted(self.rules.items()) if not r.is_noop()]
