"""The gateway's rules that send the declared peer ports' connections through the message
layer (mallory/mediator/proxy.py) and their packets through its capture (legs.py).

Installed in the gateway's network namespace by the mediator when, and only when, it runs a
scenario (`mallory mediator --scenario`); a campaign without filters has none of it. Every
rule below is between two node addresses, so the mediator's own traffic (observer batches,
the API) is untouched:

    mangle MALLORY-DIVERT (jumped to first from PREROUTING), per ordered node pair a -> b:
        -s a -d b -p tcp ! --syn -m socket --transparent -j MARK M
        -s a -d b -p tcp -m mark --mark M -j RETURN           a packet for a proxy socket
                                                              (leg 1 after its SYN, leg 2's
                                                              replies) goes to it
        -s a -d b -p tcp --dport PORT -j TPROXY --on-port P --tproxy-mark M
                                                              a new connection to a declared
                                                              port goes to the proxy's listener
    A SYN is left to TPROXY, not the socket match: a node that reconnects from the port of a
    connection whose leg 1 the gateway closed first finds that socket in TIME_WAIT, which
    the socket match (--transparent matches TIME_WAIT sockets too) would take the SYN to,
    and the kernel would answer it with an ACK instead of a connection (the node resets and
    retries a second later); TPROXY hands such a SYN to the listener and ends the TIME_WAIT
    (nf_tproxy_handle_time_wait4). A SYN-ACK (leg 2's answer) is not `--syn`.
    policy routing: fwmark M looks up table TABLE, where everything is local, so marked
        packets are delivered to the gateway's sockets instead of forwarded
    filter MALLORY-LEGS (jumped to first from INPUT and OUTPUT), per node pair and declared
        port, either way: -j NFQUEUE --queue-num Q --queue-bypass (the capture; with no
        reader bound the packets pass)
    rp_filter 0 on every interface of the gateway: leg 2's replies arrive on the receiver's
        link with the sender's address, which strict reverse-path filtering would drop
        (the values before are put back on removal)

`remove` undoes it all and tolerates what is already gone; the mediator calls it on exit and
Ctrl-C. After a kill -9 nothing is left either: all of it lives in the gateway namespace,
which the run's journaled cleanup deletes (mallory/cluster/registry.py), and the proxy's
sockets and threads die with the mediator's process. Needs the kernel's TPROXY and socket
matches (xt_TPROXY, xt_socket, nf_tproxy_ipv4; Debian's kernels have them as modules).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from mallory.errors import MalloryError

DIVERT_CHAIN = "MALLORY-DIVERT"
LEGS_CHAIN = "MALLORY-LEGS"
MARK = "0x4d000000/0x4d000000"
TABLE = "77"
RULE_PRIORITY = "77"
SYSCTL_CONF = Path("/proc/sys/net/ipv4/conf")


def _pairs(node_addresses: Mapping[str, str]) -> list[tuple[str, str]]:
    addresses = sorted(node_addresses.values())
    return [(a, b) for a in addresses for b in addresses if a != b]


def divert_rules(node_addresses: Mapping[str, str], ports: Sequence[int], proxy_port: int) -> list[list[str]]:
    """The mangle chain's rules (iptables arguments after `-A MALLORY-DIVERT`)."""
    rules = []
    for a, b in _pairs(node_addresses):
        pair = ["-s", a, "-d", b, "-p", "tcp"]
        rules.append([*pair, "!", "--syn", "-m", "socket", "--transparent", "-j", "MARK", "--set-xmark", MARK])
        rules.append([*pair, "-m", "mark", "--mark", MARK, "-j", "RETURN"])
        for port in ports:
            rules.append([*pair, "--dport", str(port), "-j", "TPROXY", "--on-port", str(proxy_port),
                          "--tproxy-mark", MARK])
    return rules


def capture_rules(node_addresses: Mapping[str, str], ports: Sequence[int], queue_num: int) -> list[list[str]]:
    """The capture chain's rules (iptables arguments after `-A MALLORY-LEGS`)."""
    queue = ["-j", "NFQUEUE", "--queue-num", str(queue_num), "--queue-bypass"]
    return [["-s", a, "-d", b, "-p", "tcp", way, str(port), *queue]
            for a, b in _pairs(node_addresses) for port in ports for way in ("--dport", "--sport")]


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(argv, capture_output=True, text=True)
    except FileNotFoundError:
        raise MalloryError(f"{argv[0]} not found (apt-get install iptables iproute2)") from None
    if check and result.returncode != 0:
        raise MalloryError(f"message layer: `{' '.join(argv)}` failed: {result.stderr.strip() or result.returncode}")
    return result


class Diversion:
    """The rules above for one mediator: `install`, then `remove` (idempotent)."""

    def __init__(self, node_addresses: Mapping[str, str], ports: Sequence[int], proxy_port: int, queue_num: int) -> None:
        self.node_addresses = dict(node_addresses)
        self.ports = sorted(set(ports))
        self.proxy_port = proxy_port
        self.queue_num = queue_num
        self._rp_filter: dict[Path, str] = {}

    def install(self) -> None:
        """Everything, from a clean slate; on a failure what was made is removed again."""
        self.remove()
        try:
            for path in sorted(SYSCTL_CONF.glob("*/rp_filter")):
                self._rp_filter[path] = path.read_text().strip()
                path.write_text("0\n")
            _run(["ip", "rule", "add", "fwmark", MARK, "lookup", TABLE, "priority", RULE_PRIORITY])
            _run(["ip", "route", "add", "local", "0.0.0.0/0", "dev", "lo", "table", TABLE])
            _run(["iptables", "-w", "-t", "mangle", "-N", DIVERT_CHAIN])
            for rule in divert_rules(self.node_addresses, self.ports, self.proxy_port):
                _run(["iptables", "-w", "-t", "mangle", "-A", DIVERT_CHAIN, *rule])
            _run(["iptables", "-w", "-N", LEGS_CHAIN])
            for rule in capture_rules(self.node_addresses, self.ports, self.queue_num):
                _run(["iptables", "-w", "-A", LEGS_CHAIN, *rule])
            _run(["iptables", "-w", "-I", "INPUT", "1", "-j", LEGS_CHAIN])
            _run(["iptables", "-w", "-I", "OUTPUT", "1", "-j", LEGS_CHAIN])
            _run(["iptables", "-w", "-t", "mangle", "-I", "PREROUTING", "1", "-j", DIVERT_CHAIN])
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        """Every rule, route and setting `install` made (those already gone are skipped)."""
        while _run(["iptables", "-w", "-t", "mangle", "-D", "PREROUTING", "-j", DIVERT_CHAIN], check=False).returncode == 0:
            pass
        for hook in ("INPUT", "OUTPUT"):
            while _run(["iptables", "-w", "-D", hook, "-j", LEGS_CHAIN], check=False).returncode == 0:
                pass
        for table, chain in (("mangle", DIVERT_CHAIN), ("filter", LEGS_CHAIN)):
            _run(["iptables", "-w", "-t", table, "-F", chain], check=False)
            _run(["iptables", "-w", "-t", table, "-X", chain], check=False)
        while _run(["ip", "rule", "del", "fwmark", MARK, "lookup", TABLE], check=False).returncode == 0:
            pass
        _run(["ip", "route", "flush", "table", TABLE], check=False)
        for path, value in self._rp_filter.items():
            try:
                path.write_text(value + "\n")
            except OSError:
                pass  # the interface went away
        self._rp_filter.clear()
