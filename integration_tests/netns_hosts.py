"""Three hosts in three network namespaces, made and torn down by the test itself
(issue 44, item 7).

Each node gets a network namespace of its own, joined to a bridge in the root
namespace by a veth pair, with its own address on a private /24; the root side
of the bridge holds ``.1`` (where Spark and the CLI run) and node ``n`` holds
``.(n + 1)``. Every node listens on the same port, as on real hosts. Names, for
a run whose tag ``T`` is the creating process's PID (6 hex digits) and 2 random
hex digits::

    bridge  rlb<T>                 root namespace, 10.251.X.1/24
    veth    rlv<T><n> <-> rlp<T><n> the second end inside namespace rlns-<T>-<n>

Interface names stay within Linux's 15 characters. Because a name carries its
creator's PID, leftovers of a crashed run (its creator gone) are told apart from
a run still going on, and only those are removed (:func:`remove_leftovers`).
The subnet's third octet ``X`` is one that no route of the root namespace uses.

A node is cut off with its own namespace's packet filter (nftables): a table
that drops every packet in and out of its veth, which leaves its loopback alone;
healing deletes that table. Nodes run as ``ip netns exec NS python -m raftlog
server ...`` (``ip netns exec`` execs the command, so the PID held is the
server's own, which :func:`running_nodes` checks), with TLS from one ``trustme``
CA whose certificate names the three addresses, and the tokens in their
environment (:func:`make_tokens`), never on their command lines. Every process is
stopped by PID and every namespace, veth and bridge deleted when the context
managers exit, also when the test failed.

Needs root (CAP_NET_ADMIN), ``ip`` (iproute2) and ``nft`` (nftables);
:func:`missing_prerequisites` names what is missing and how to get it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import re
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator

from secure_cluster import make_certificates
from tenacity import Retrying, retry_if_result, stop_after_attempt, stop_after_delay, wait_fixed

from raftlog.cluster import (
    LocalCluster,
    NodeProcess,
    node_argv,
    pid_alive,
    stop_node,
    wait_ready,
)

NODES = 3
PORT = 9092
SUBNET_PREFIX = "10.251"
NFT_INSTALL = "apt-get install nftables (scripts/env.sh installs it)"
CUT_TABLE = "raftlog_cut"
_TOOL_TIMEOUT_S = 15.0
_NAME = re.compile(r"^rl(?:b|v|p|ns-)(?P<pid>[0-9a-f]{6})(?P<rand>[0-9a-f]{2})(?:-?\d)?$")

# The environment variable of every secret: nodes get all of them, clients all but the
# peer token. A new role's token is one more entry in make_tokens().
CLIENT_TOKEN_ENV = "RAFTLOG_CLIENT_TOKEN"
ADMIN_TOKEN_ENV = "RAFTLOG_ADMIN_TOKEN"
PEER_TOKEN_ENV = "RAFTLOG_PEER_TOKEN"


def make_tokens() -> dict[str, str]:
    """A fresh secret per role (client, admin, peer), keyed by the environment variable
    that carries it."""
    return {
        CLIENT_TOKEN_ENV: "client-" + secrets.token_urlsafe(18),
        ADMIN_TOKEN_ENV: "admin-" + secrets.token_urlsafe(18),
        PEER_TOKEN_ENV: "peer-" + secrets.token_urlsafe(18),
    }


def client_env(tokens: dict[str, str]) -> dict[str, str]:
    """The tokens a client (the CLI) is given: every one but the nodes' own."""
    return {k: v for k, v in tokens.items() if k != PEER_TOKEN_ENV}


def missing_prerequisites() -> str | None:
    """What this machine lacks to make namespaces and cut a node off, with the fix;
    None when nothing is missing."""
    if os.geteuid() != 0:
        return (
            "the network-namespace test must run as root (it creates namespaces, veth "
            "pairs and a bridge, which need CAP_NET_ADMIN): run ./scripts/test.sh as root"
        )
    if shutil.which("ip") is None:
        return "the `ip` command is missing: apt-get install iproute2"
    if shutil.which("nft") is None:
        return f"the `nft` command is missing: {NFT_INSTALL}"
    probe = f"rlns-probe-{os.getpid()}"
    made = subprocess.run(
        ["ip", "netns", "add", probe], capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S
    )
    if made.returncode != 0:
        return (
            f"cannot create a network namespace (`ip netns add` said: {made.stderr.strip()}); "
            "the test needs root with CAP_NET_ADMIN and CAP_SYS_ADMIN, outside a "
            "container that forbids namespaces"
        )
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=_TOOL_TIMEOUT_S)
    return None


def _run(cmd: list[str], stdin: str | None = None) -> str:
    """Run a tool and return its output; RuntimeError with the command and its stderr
    when it fails."""
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _ip(*args: str, netns: str | None = None) -> str:
    """``ip ARGS``, in namespace ``netns`` when given (``ip -n``)."""
    return _run(["ip", *args] if netns is None else ["ip", "-n", netns, *args])


def _nft(netns: str, *args: str, stdin: str | None = None) -> str:
    """``nft ARGS`` inside namespace ``netns``: its own packet filter."""
    return _run(["ip", "netns", "exec", netns, "nft", *args], stdin)


def _names() -> tuple[list[str], list[str]]:
    """(namespace names, link names) in the root namespace."""
    spaces = [line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()]
    links = [link["ifname"] for link in json.loads(_ip("-j", "link", "show") or "[]")]
    return spaces, links


def remove_leftovers() -> list[str]:
    """Delete the namespaces, veths and bridges this module made in runs whose creating
    process no longer runs (a crashed or killed test), with the raftlog servers still
    running inside those namespaces; return what was removed. Names of live creators,
    and names this module does not make, are left alone."""
    removed = []
    spaces, links = _names()
    for name in [*spaces, *links]:
        m = _NAME.match(name)
        if m is None or pid_alive(int(m.group("pid"), 16)):
            continue
        if name in spaces:
            for pid in _ip("netns", "pids", name).split():
                # a node of the crashed run: its namespace says it is the test's own
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            with contextlib.suppress(RuntimeError):
                _ip("netns", "del", name)
        else:
            with contextlib.suppress(RuntimeError):  # gone with its peer's namespace
                _ip("link", "del", name)
        removed.append(name)
    return removed


def _free_octet() -> int:
    """A third octet X such that no route of the root namespace covers 10.251.X.0/24."""
    used = " ".join(
        r.get("dst", "") for r in json.loads(_ip("-j", "-4", "route", "show", "table", "all"))
    )
    for octet in secrets.SystemRandom().sample(range(1, 255), 254):
        if f"{SUBNET_PREFIX}.{octet}." not in used:
            return octet
    raise RuntimeError(f"every {SUBNET_PREFIX}.X.0/24 is routed already")


@dataclasses.dataclass(frozen=True)
class Hosts:
    """The namespaces of one run: ``namespaces[i]`` holds ``addresses[i]`` on ``inner[i]``."""

    tag: str
    bridge: str
    gateway: str  # the root namespace's address on the bridge
    namespaces: list[str]
    addresses: list[str]
    outer: list[str]  # veth ends in the root namespace, on the bridge
    inner: list[str]  # veth ends inside the namespaces

    def cut(self, index: int) -> None:
        """Drop every packet in and out of node ``index``'s veth, with nftables inside its
        namespace (established connections included: no rule accepts them first)."""
        veth = self.inner[index]
        ruleset = (
            f"table inet {CUT_TABLE} {{\n"
            f"  chain input {{ type filter hook input priority -300; policy accept; "
            f'iifname "{veth}" drop; }}\n'
            f"  chain output {{ type filter hook output priority -300; policy accept; "
            f'oifname "{veth}" drop; }}\n'
            f"}}\n"
        )
        _nft(self.namespaces[index], "-f", "-", stdin=ruleset)

    def heal(self, index: int) -> None:
        """Remove :meth:`cut`'s table from node ``index``'s namespace."""
        _nft(self.namespaces[index], "delete", "table", "inet", CUT_TABLE)

    def is_cut(self, index: int) -> bool:
        """Whether node ``index``'s namespace holds :meth:`cut`'s table."""
        tables = _nft(self.namespaces[index], "list", "tables")
        return f"inet {CUT_TABLE}" in tables


@contextlib.contextmanager
def namespaces(count: int = NODES) -> Iterator[Hosts]:
    """Make ``count`` namespaces on one bridge; delete all of it on exit (also on error),
    then check that nothing of it is left."""
    remove_leftovers()
    tag = f"{os.getpid():06x}{secrets.randbelow(256):02x}"
    octet = _free_octet()
    net = f"{SUBNET_PREFIX}.{octet}"
    hosts = Hosts(
        tag=tag,
        bridge=f"rlb{tag}",
        gateway=f"{net}.1",
        namespaces=[f"rlns-{tag}-{i}" for i in range(count)],
        addresses=[f"{net}.{i + 2}" for i in range(count)],
        outer=[f"rlv{tag}{i}" for i in range(count)],
        inner=[f"rlp{tag}{i}" for i in range(count)],
    )
    try:
        _ip("link", "add", hosts.bridge, "type", "bridge")
        _ip("addr", "add", f"{hosts.gateway}/24", "dev", hosts.bridge)
        _ip("link", "set", hosts.bridge, "up")
        for ns, addr, outer, inner in zip(
            hosts.namespaces, hosts.addresses, hosts.outer, hosts.inner, strict=True
        ):
            _ip("netns", "add", ns)
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            _ip("link", "set", inner, "netns", ns)
            _ip("link", "set", outer, "master", hosts.bridge)
            _ip("link", "set", outer, "up")
            _ip("link", "set", "lo", "up", netns=ns)
            _ip("addr", "add", f"{addr}/24", "dev", inner, netns=ns)
            _ip("link", "set", inner, "up", netns=ns)
        yield hosts
    finally:
        for ns in hosts.namespaces:  # deleting a namespace deletes the veth end inside
            with contextlib.suppress(RuntimeError):
                _ip("netns", "del", ns)
        for link in [*hosts.outer, hosts.bridge]:
            with contextlib.suppress(RuntimeError):
                _ip("link", "del", link)
        spaces, links = _names()
        errors = [n for n in [*spaces, *links] if tag in n]
        if errors:
            raise RuntimeError(f"the test's namespaces or links were not removed: {errors}")


@dataclasses.dataclass
class NetnsCluster:
    """Nodes ``1..n``, node ``i + 1`` in ``hosts.namespaces[i]``."""

    hosts: Hosts
    cluster: LocalCluster  # the nodes (PIDs, addresses, logs), its CA and client token
    tokens: dict[str, str]

    @property
    def servers(self) -> str:
        return ",".join(self.cluster.servers)

    @property
    def ca_file(self) -> str:
        assert self.cluster.tls_ca_file is not None
        return self.cluster.tls_ca_file

    def index(self, node_id: int) -> int:
        """The position of node ``node_id`` in ``hosts``' lists."""
        return [n.node_id for n in self.cluster.nodes].index(node_id)


def _exec_done(pid: int) -> bool:
    """Whether ``pid`` already runs the server (``ip netns exec`` has exec'd it)."""
    try:
        argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"server" in argv and argv[0] != b"ip"


def _check_exec(node: NodeProcess, proc: subprocess.Popen[bytes], ns: str) -> None:
    """Check that ``node.pid`` is the server itself (``ip netns exec`` exec'd it, so that
    stopping the PID stops the server) and runs inside ``ns``; a node that exited is
    left for :func:`wait_ready` to report with its log."""
    waiting = Retrying(
        stop=stop_after_delay(10.0) | stop_after_attempt(200),
        wait=wait_fixed(0.05),
        retry=retry_if_result(bool),
        retry_error_callback=lambda _state: True,
    )
    if waiting(lambda: proc.poll() is None and not _exec_done(node.pid)):
        raise RuntimeError(f"node {node.node_id} (pid {node.pid}) did not exec the server in 10 s")
    if proc.poll() is not None:
        return
    where = _ip("netns", "identify", str(node.pid)).strip()
    if where != ns:
        raise RuntimeError(f"node {node.node_id} (pid {node.pid}) runs in {where!r}, not {ns}")


@contextlib.contextmanager
def running_nodes(
    hosts: Hosts, root: pathlib.Path, tokens: dict[str, str], timeout_s: float = 90.0
) -> Iterator[NetnsCluster]:
    """Start one node per namespace, TLS on, tokens in their environment; return once
    every node serves and they agree on a controller leader. Each node is stopped by its
    PID on exit, also when the test failed (SIGKILL after 10 s)."""
    tls = make_certificates(root / "tls", hosts.addresses)
    peers = {i + 1: f"{addr}:{PORT}" for i, addr in enumerate(hosts.addresses)}
    cluster = LocalCluster(
        str(root),
        [],
        auth_token=tokens[CLIENT_TOKEN_ENV],
        peer_token=tokens[PEER_TOKEN_ENV],
        tls_ca_file=tls[2],
    )
    env = {**os.environ, **tokens}
    procs: dict[int, subprocess.Popen[bytes]] = {}
    try:
        for (node_id, address), ns in zip(peers.items(), hosts.namespaces, strict=True):
            argv = node_argv(
                node_id,
                address,
                root,
                peers,
                ["--tls-cert", tls[0], "--tls-key", tls[1], "--tls-ca", tls[2]],
            )
            node = NodeProcess(node_id, address, -1, argv, str(root / f"node-{node_id}.log"))
            with open(node.log_file, "ab") as log:
                proc = subprocess.Popen(
                    ["ip", "netns", "exec", ns, *argv],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env=env,
                )
            node.pid = proc.pid
            procs[node_id] = proc
            cluster.nodes.append(node)
        for node, ns in zip(cluster.nodes, hosts.namespaces, strict=True):
            _check_exec(node, procs[node.node_id], ns)
        wait_ready(cluster, timeout_s, procs=procs)
        yield NetnsCluster(hosts, cluster, tokens)
    finally:
        for node in cluster.nodes:
            stop_node(node, signal.SIGTERM, timeout_s=10.0)
        for proc in procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5.0)


def cli(*args: str, env: dict[str, str], timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    """``raftlog ARGS`` in the root namespace, with ``env`` added to this environment."""
    return subprocess.run(
        [sys.executable, "-m", "raftlog", *args],
        env={**os.environ, **env},
        capture_output=True,
        timeout=timeout_s,
    )
