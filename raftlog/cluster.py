"""Launching, inspecting and stopping a local cluster of node processes.

A local cluster lives in one data directory::

    DIR/cluster.json     the nodes: id, address, pid, argv, log file (and the tokens)
    DIR/.lock            flock'ed while starting or stopping (race safety)
    DIR/node-N/          node N's data (``--data-dir`` of its server)
    DIR/node-N.log       node N's stdout and stderr

All of it is its user's alone: DIR (and any parent made for it) is created 0700,
every file 0600, cluster.json replaced atomically by a file created 0600; a DIR
open to others is tightened when the cluster starts (with a warning).

cluster.json is the cluster's identity and outlives its processes: the ports
picked at the first start are kept for good (``raftlog local stop`` keeps the
file), so every later start, and every restart of a node that died, listens on
the same addresses and a ``RAFTLOG_SERVERS`` exported once stays right.

Starting is idempotent and self-healing: :func:`start_cluster` spawns every
recorded node that is not running (never started, stopped, crashed, kill -9'd)
and returns once the cluster serves, which needs a majority of the nodes up
and agreeing on a controller leader (a Raft cluster serves with a majority).
A node that cannot start does not fail the start while a majority runs: it is
reported in ``LocalCluster.down`` with the last lines of its log. Only when no
majority can run does the start raise, naming every failed node the same way.

Nodes are ``python -m raftlog server ...`` subprocesses in their own session
(``start_new_session=True``), so they outlive the launcher. Stopping signals
exactly the PIDs recorded in cluster.json, and only after checking that each
PID still runs a raftlog server with the recorded node id (a PID may have been
reused). Every wait here is bounded.

A cluster may run on several addresses (``hosts``: one loopback address per
node stands in for separate hosts), with TLS (the nodes' ``--tls-*`` flags; the
CA is recorded so that health checks verify the nodes) and with separate
client and peer tokens (recorded, and handed to the nodes through their
environment, never on their command lines).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import pathlib
import random
import secrets
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

from raftlog.storage.fs import PRIVATE_FILE_MODE, REAL_FS

DEFAULT_NODES = 3
STATE_FILE = "cluster.json"
LOCK_FILE = ".lock"
# Processes per local node: the nodes of a local cluster share one machine's cores
# already (as `rpk container` runs each Redpanda with --smp 1).
LOCAL_SHARDS = 1


class ClusterError(RuntimeError):
    """A local cluster could not be started, found or stopped; the message says why."""


def default_data_dir() -> pathlib.Path:
    """``$RAFTLOG_HOME``, else ``~/.raftlog/local``."""
    home = os.environ.get("RAFTLOG_HOME")
    return pathlib.Path(home) if home else pathlib.Path.home() / ".raftlog" / "local"


@dataclasses.dataclass(slots=True)
class NodeProcess:
    node_id: int
    address: str
    pid: int
    argv: list[str]
    log_file: str


#: How many lines of a failed node's log a report shows.
LOG_TAIL_LINES = 12


@dataclasses.dataclass(frozen=True, slots=True)
class NodeFailure:
    """A node that is not serving after a start: why, and the end of its log."""

    node_id: int
    address: str
    reason: str  # e.g. "exited with status 1", "did not answer /health within 60s"
    log_file: str
    log_tail: tuple[str, ...]

    def describe(self) -> str:
        """Several lines: the node, the reason, then its last log lines indented."""
        head = f"node {self.node_id} ({self.address}) {self.reason}; last lines of {self.log_file}:"
        tail = self.log_tail or ("(the log is empty)",)
        return "\n".join([head, *(f"    {line}" for line in tail)])


@dataclasses.dataclass(slots=True)
class LocalCluster:
    """A local cluster as recorded in its cluster.json.

    ``started`` and ``down`` describe the :func:`start_cluster` call that returned
    this object (the nodes it spawned, and those not serving after it); they are
    not written to cluster.json.
    """

    data_dir: str
    nodes: list[NodeProcess]
    auth_token: str | None = None
    peer_token: str | None = None
    tls_ca_file: str | None = None  # the nodes serve HTTPS, verified by this CA
    admin_token: str | None = None
    started: list[int] = dataclasses.field(default_factory=list)
    down: list[NodeFailure] = dataclasses.field(default_factory=list)

    @property
    def servers(self) -> list[str]:
        return [n.address for n in self.nodes]

    def node(self, node_id: int) -> NodeProcess:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no node {node_id} in the cluster at {self.data_dir}")

    def flag(self, name: str) -> str | None:
        """The value of server flag ``name`` (``--flag value`` or ``--flag=value``) in
        the first node's recorded argv; None when it is not there (the server's
        default applies)."""
        argv = self.nodes[0].argv if self.nodes else []
        for i, arg in enumerate(argv):
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
        return None

    def kafka_address(self, node: NodeProcess) -> str | None:
        """``node``'s Kafka listener (its ``--kafka-listen``), None when it has none."""
        for i, arg in enumerate(node.argv):
            if arg == "--kafka-listen" and i + 1 < len(node.argv):
                return node.argv[i + 1]
        return None

    @property
    def kafka_bootstrap(self) -> list[str]:
        """The nodes' Kafka listeners: a Kafka client's ``bootstrap.servers``."""
        return [a for a in map(self.kafka_address, self.nodes) if a is not None]

    def to_json(self) -> str:
        raw: dict[str, Any] = {
            "data_dir": self.data_dir,
            "nodes": [dataclasses.asdict(n) for n in self.nodes],
            "auth_token": self.auth_token,
        }
        # written only when set: a plain cluster's file stays as it was
        for key in ("peer_token", "tls_ca_file", "admin_token"):
            if getattr(self, key) is not None:
                raw[key] = getattr(self, key)
        return json.dumps(raw, indent=2)

    @classmethod
    def from_json(cls, text: str) -> LocalCluster:
        raw = json.loads(text)
        return cls(
            data_dir=raw["data_dir"],
            nodes=[NodeProcess(**n) for n in raw["nodes"]],
            auth_token=raw.get("auth_token"),
            peer_token=raw.get("peer_token"),
            tls_ca_file=raw.get("tls_ca_file"),
            admin_token=raw.get("admin_token"),
        )

    def health(self, node: NodeProcess, timeout_s: float = 1.0) -> dict[str, Any] | None:
        """``node``'s /health as this cluster is reached (its CA, its client token)."""
        return health(node.address, timeout_s, ca_file=self.tls_ca_file, token=self.auth_token)


EPHEMERAL_RANGE_FILE = pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_SERVER_PORT = 10000
"""Ports are picked from here up to the start of the kernel's ephemeral range."""
_PORT_TRIES = 200


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range of source ports for outgoing connections (Linux's default when
    it cannot be read)."""
    try:
        low, high = (int(x) for x in EPHEMERAL_RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def free_ports(count: int, hosts: list[str] | None = None) -> list[int]:
    """``count`` distinct TCP ports free right now (held open together while picking):
    port i on ``hosts[i]`` when given (IPv4 addresses), else all on 127.0.0.1.

    They lie below the kernel's ephemeral range, never in it. A server port in that
    range can be handed out as the source port of an outgoing connection while its
    node is down: its restart then fails to bind (EADDRINUSE), and a peer that
    reconnects to the port can be given that very port as its source, a TCP
    self-connect that echoes the peer's own messages back to it (seen as "two
    leaders in term 1 (2, 2)"). Raises ClusterError when no port is found."""
    low = LOWEST_SERVER_PORT
    high = ephemeral_range()[0] - 1
    if high - low < 10 * count:  # a machine whose ephemeral range starts low
        low = 1024
    candidates = random.sample(range(low, high + 1), min(_PORT_TRIES + count, high - low + 1))
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for port in candidates:
            if len(ports) == count:
                break
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            try:
                s.bind((hosts[len(ports)] if hosts else "127.0.0.1", port))
            except OSError:
                continue  # in use (a listener, a connection, or a TIME_WAIT left by one)
            ports.append(port)
        if len(ports) < count:
            raise ClusterError(f"found only {len(ports)} of {count} free ports in {low}-{high}")
        return ports


def _open_private(path: pathlib.Path, flags: int) -> int:
    """``os.open`` of ``path``, a file created :data:`PRIVATE_FILE_MODE` when missing."""
    return os.open(path, flags | os.O_CREAT, PRIVATE_FILE_MODE)


@contextlib.contextmanager
def _locked(data_dir: pathlib.Path) -> Iterator[None]:
    REAL_FS.mkdirs(data_dir)  # 0700, parents too
    with os.fdopen(_open_private(data_dir / LOCK_FILE, os.O_RDWR), "r+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def pid_alive(pid: int) -> bool:
    """True when ``pid`` runs and is not a zombie."""
    if pid <= 0:  # never started (-1); and os.kill(0 or -1, ...) would mean a process group
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _is_our_node(node: NodeProcess) -> bool:
    """The PID still runs this node's server (guards against PID reuse)."""
    if not pid_alive(node.pid):
        return False
    try:
        cmd = pathlib.Path(f"/proc/{node.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # no /proc: trust the PID
    if cmd == [b""]:
        # A process tearing down after SIGKILL has released its memory, and with it its
        # cmdline, before it becomes a zombie: it is still the node we signalled.
        return True
    args = [c.decode(errors="replace") for c in cmd]
    return "server" in args and "--node-id" in args and str(node.node_id) in args


def health(
    address: str,
    timeout_s: float = 1.0,
    *,
    ca_file: str | None = None,
    token: str | None = None,
) -> dict[str, Any] | None:
    """The node's ``/health`` JSON, or None when it does not answer.

    ``ca_file``: ask over HTTPS, verified by that CA; ``token`` is sent as a bearer
    token (a node off loopback answers /health to a token only).
    """
    from raftlog.rpc.tls import client_context, scheme

    ctx = client_context(ca_file, "tls_ca_file") if ca_file else None
    req = urllib.request.Request(f"{scheme(ctx)}://{address}/health")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s, context=ctx) as resp:
            return json.loads(resp.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None


def node_argv(
    node_id: int,
    address: str,
    data_dir: pathlib.Path,
    peers: dict[int, str],
    extra_args: list[str] | None = None,
) -> list[str]:
    """The command of a local node; ``--shards LOCAL_SHARDS`` unless ``extra_args`` say."""
    peer_arg = ",".join(f"{i}={a}" for i, a in sorted(peers.items()))
    extra = list(extra_args or [])
    if not any(a == "--shards" or a.startswith("--shards=") for a in extra):
        extra += ["--shards", str(LOCAL_SHARDS)]
    return [
        sys.executable,
        "-m",
        "raftlog",
        "server",
        "--node-id",
        str(node_id),
        "--listen",
        address,
        "--data-dir",
        str(data_dir / f"node-{node_id}"),
        "--peers",
        peer_arg,
        *extra,
    ]


def spawn(
    node: NodeProcess,
    auth_token: str | None = None,
    peer_token: str | None = None,
    admin_token: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``node.argv`` detached, appending output to its log file; sets ``node.pid``.

    The node runs under this process's interpreter, whatever Python its recorded
    argv names (``node.argv[0]`` is updated): the interpreter belongs to the
    installation, not to the cluster, and a recorded one can be gone (a re-created
    venv, a moved or deleted checkout) or run older code than the caller's.

    The tokens go in the node's environment (RAFTLOG_AUTH_TOKEN, RAFTLOG_PEER_TOKEN,
    RAFTLOG_ADMIN_TOKEN), not its argv, which any local user can read in ``ps``."""
    node.argv = [sys.executable, *node.argv[1:]]
    env = dict(os.environ)
    if auth_token:
        env["RAFTLOG_AUTH_TOKEN"] = auth_token
    if peer_token:
        env["RAFTLOG_PEER_TOKEN"] = peer_token
    if admin_token:
        env["RAFTLOG_ADMIN_TOKEN"] = admin_token
    with os.fdopen(
        _open_private(pathlib.Path(node.log_file), os.O_WRONLY | os.O_APPEND), "ab"
    ) as log:
        proc = subprocess.Popen(
            node.argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    node.pid = proc.pid
    return proc


def log_tail(log_file: str | os.PathLike[str], lines: int = LOG_TAIL_LINES) -> tuple[str, ...]:
    """The last ``lines`` non-empty lines of a log file (reads at most its last 64 KiB)."""
    try:
        with open(log_file, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 65536))
            text = fh.read().decode(errors="replace")
    except OSError as exc:
        return (f"(cannot read the log: {exc})",)
    kept = [line.rstrip() for line in text.splitlines() if line.strip()]
    return tuple(kept[-lines:])


#: Once a majority serves, how long a start still waits for a node that neither answers
#: nor exits (hung or stopped) before reporting it as down.
STRAGGLER_GRACE_S = 10.0


def majority(count: int) -> int:
    """The least number of voters that form a quorum of ``count``."""
    return count // 2 + 1


def wait_ready(
    cluster: LocalCluster,
    timeout_s: float = 30.0,
    *,
    procs: dict[int, subprocess.Popen[bytes]] | None = None,
) -> tuple[int, list[NodeFailure]]:
    """Wait until the cluster serves; return (controller leader id, failed nodes).

    The cluster serves when every node answers ``/health`` and they agree on a
    controller leader; or, once each node has either answered or exited, when a
    majority answers and agrees on a leader among them (the exited nodes are the
    failures returned). A node that neither answers nor exits (hung, stopped)
    is waited for STRAGGLER_GRACE_S once a majority serves, or until
    ``timeout_s``, whichever comes first; then it counts as failed too.

    ``procs`` are the nodes this caller spawned, so that an exit status can be
    reported. Raises ClusterError, naming every failed node with the end of its
    log, when no majority serves: as soon as more than a minority has exited, or
    at the deadline.
    """
    procs = procs or {}
    need = majority(len(cluster.nodes))
    deadline = time.monotonic() + timeout_s
    serving_since: float | None = None  # when a majority first served
    while True:
        exited: dict[int, str] = {}
        for n in cluster.nodes:
            proc = procs.get(n.node_id)
            code = proc.poll() if proc is not None else None
            if code is not None:
                exited[n.node_id] = f"exited with status {code}"
            elif proc is None and not pid_alive(n.pid):
                exited[n.node_id] = "is not running"
        states = {n.node_id: cluster.health(n) for n in cluster.nodes if n.node_id not in exited}
        answering = {i: s for i, s in states.items() if s is not None}
        leaders = {s.get("controller_leader", -1) for s in answering.values()}
        agreed = len(leaders) == 1 and next(iter(leaders)) in answering
        now = time.monotonic()
        timed_out = now >= deadline
        if agreed and len(answering) == len(cluster.nodes):
            return leaders.pop(), []
        serving = agreed and len(answering) >= need
        serving_since = (serving_since or now) if serving else None
        settled = len(answering) + len(exited) == len(cluster.nodes)
        waited = serving_since is not None and now - serving_since >= STRAGGLER_GRACE_S
        if serving and (settled or timed_out or waited):
            elapsed = min(timeout_s, now - deadline + timeout_s)
            return leaders.pop(), _failures(cluster, exited, answering, elapsed)
        if len(cluster.nodes) - len(exited) < need or timed_out:
            failures = _failures(cluster, exited, answering, timeout_s)
            why = (
                f"only {len(cluster.nodes) - len(exited)} of {len(cluster.nodes)} nodes run"
                if len(cluster.nodes) - len(exited) < need
                else f"no majority agreed on a controller leader within {timeout_s:.0f}s"
            )
            raise ClusterError(
                f"the local cluster in {cluster.data_dir} cannot serve: {why} "
                f"(a majority, {need}, is needed)" + "".join("\n" + f.describe() for f in failures)
            )
        time.sleep(0.1)


def _failures(
    cluster: LocalCluster,
    exited: dict[int, str],
    answering: dict[int, dict[str, Any]],
    timeout_s: float,
) -> list[NodeFailure]:
    out = []
    for n in cluster.nodes:
        if n.node_id in answering:
            continue
        reason = exited.get(n.node_id) or f"did not answer /health within {timeout_s:.0f}s"
        out.append(NodeFailure(n.node_id, n.address, reason, n.log_file, log_tail(n.log_file)))
    return out


def load_cluster(data_dir: str | os.PathLike[str] | None = None) -> LocalCluster | None:
    """The cluster recorded in ``data_dir`` (default :func:`default_data_dir`), or None."""
    path = pathlib.Path(data_dir or default_data_dir()) / STATE_FILE
    try:
        return LocalCluster.from_json(path.read_text())
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise ClusterError(f"{path} is not a valid cluster file: {exc}") from exc


def running(cluster: LocalCluster) -> bool:
    return any(_is_our_node(n) for n in cluster.nodes)


def start_cluster(
    data_dir: str | os.PathLike[str] | None = None,
    nodes: int | None = None,
    *,
    extra_args: list[str] | None = None,
    auth_token: str | None = None,
    timeout_s: float = 60.0,
    peer_routes: Callable[[dict[int, str]], dict[int, dict[int, str]]] | None = None,
    hosts: list[str] | None = None,
    peer_token: str | None = None,
    tls: tuple[str, str, str] | None = None,
    allow_plaintext: bool = False,
    admin_token: str | None = None,
) -> LocalCluster:
    """Start the local cluster in ``data_dir`` and return it once it serves.

    A new cluster gets ``nodes`` nodes (default 3) on free ports of 127.0.0.1,
    recorded in cluster.json. A recorded cluster keeps its nodes, ports, flags
    and token: each node that is not running is spawned again with its recorded
    argv, and ``extra_args``, ``auth_token``, ``peer_routes``, ``tls`` and
    ``allow_plaintext`` are ignored.
    ``nodes`` given for a recorded cluster must match its size.

    Race-safe: callers (processes) serialize on the data dir's flock, so nodes
    are spawned by one caller only and the others find them running. The
    result's ``started`` lists the nodes this call spawned and ``down`` the
    nodes not serving (see :func:`wait_ready`): the call succeeds while a
    majority serves, and raises ClusterError naming the failed nodes with the
    end of their logs otherwise (stopping the nodes it spawned).

    ``peer_routes``, when given, is called with every node's address and returns,
    per node id, where that node sends raft traffic for each peer (e.g. a proxy
    per link); it becomes the node's ``--peer-routes``.

    A new cluster may also be given ``hosts`` (node i listens on ``hosts[i]``, an
    IPv4 address; one per node), ``tls`` as (cert file, key file, CA file), PEM,
    passed to every node as ``--tls-cert/--tls-key/--tls-ca`` (the certificate
    must name every host), a ``peer_token`` and an ``admin_token``. With
    ``auth_token`` and no ``peer_token`` a random peer token is made: the nodes need
    their own secret; likewise a random admin token (recorded in cluster.json, where
    the CLI finds it for the local cluster's admin commands): a node with a client
    token and no admin token refuses every admin call. The tokens reach the nodes in
    their environment, never their argv. Nodes on ``hosts`` other than loopback (see
    :func:`raftlog.node.config.is_loopback`: 127.0.0.2 counts as a network) refuse to
    start without ``tls`` unless ``allow_plaintext`` (their ``--allow-plaintext``: the
    tokens then cross the network in plain text, and every node logs a warning at
    each start).
    """
    if nodes is not None and (not isinstance(nodes, int) or not 1 <= nodes <= 64):
        raise ClusterError(f"--nodes: expected an integer from 1 to 64, got {nodes!r}")
    from raftlog.node.file_modes import tighten_data_dir

    root = pathlib.Path(data_dir or default_data_dir()).resolve()
    with _locked(root):
        tighten_data_dir(root)  # cluster.json holds the tokens
        cluster = load_cluster(root)
        if cluster is None:
            if hosts is not None and len(hosts) != (nodes or DEFAULT_NODES):
                raise ClusterError(
                    f"hosts: expected one address per node ({nodes or DEFAULT_NODES}), "
                    f"got {len(hosts)}: {hosts}"
                )
            if tls is not None:
                extra_args = [
                    *(extra_args or []),
                    *("--tls-cert", tls[0], "--tls-key", tls[1], "--tls-ca", tls[2]),
                ]
            if allow_plaintext:
                extra_args = [*(extra_args or []), "--allow-plaintext"]
            cluster = _new_cluster(
                root, nodes or DEFAULT_NODES, extra_args, auth_token, peer_routes, hosts
            )
            cluster.peer_token = peer_token
            cluster.admin_token = admin_token
            cluster.tls_ca_file = tls[2] if tls is not None else None
        elif nodes is not None and nodes != len(cluster.nodes):
            raise ClusterError(
                f"--nodes: the local cluster in {root} has {len(cluster.nodes)} nodes, "
                f"not {nodes}; leave --nodes out, or stop it and use another --data-dir"
            )
        if cluster.auth_token and not cluster.peer_token and not running(cluster):
            # Nodes with a client token refuse to start without a peer token: make one
            # (also for a cluster recorded before nodes had their own secret).
            cluster.peer_token = secrets.token_urlsafe(24)
        if cluster.auth_token and not cluster.admin_token and not running(cluster):
            cluster.admin_token = secrets.token_urlsafe(24)
        procs: dict[int, subprocess.Popen[bytes]] = {}
        for node in cluster.nodes:
            if not _is_our_node(node):
                procs[node.node_id] = spawn(
                    node, cluster.auth_token, cluster.peer_token, cluster.admin_token
                )
        cluster.started = sorted(procs)
        if procs:
            _write_state(root, cluster)
        try:
            _leader, cluster.down = wait_ready(cluster, timeout_s, procs=procs)
        except ClusterError:
            _stop_nodes([cluster.node(i) for i in procs], 5.0)
            raise
        return cluster


def _new_cluster(
    root: pathlib.Path,
    nodes: int,
    extra_args: list[str] | None,
    auth_token: str | None,
    peer_routes: Callable[[dict[int, str]], dict[int, dict[int, str]]] | None,
    hosts: list[str] | None = None,
) -> LocalCluster:
    """A cluster of ``nodes`` nodes on fresh ports (of ``hosts``, one per node, else
    127.0.0.1), not yet started or recorded."""
    # A Kafka listener per node on loopback (with a client token, Kafka clients
    # authenticate with SASL/PLAIN, the token as the password)
    kafka = hosts is None and "--kafka-listen" not in (extra_args or [])
    ports = free_ports(nodes * 2 if kafka else nodes, hosts)
    hosts = hosts or ["127.0.0.1"] * nodes
    peers = {i: f"{h}:{p}" for i, h, p in zip(range(1, nodes + 1), hosts, ports, strict=False)}
    kafka_ports = ports[nodes:]
    kafka_peers = {i + 1: f"127.0.0.1:{p}" for i, p in enumerate(kafka_ports)}
    routes = peer_routes(dict(peers)) if peer_routes is not None else {}
    cluster = LocalCluster(str(root), [], auth_token)
    for node_id, address in peers.items():
        args = list(extra_args or [])
        if kafka_peers:
            args += [
                "--kafka-listen",
                kafka_peers[node_id],
                "--kafka-peers",
                ",".join(f"{i}={a}" for i, a in sorted(kafka_peers.items())),
            ]
        if routes.get(node_id):
            args += [
                "--peer-routes",
                ",".join(f"{i}={a}" for i, a in sorted(routes[node_id].items())),
            ]
        cluster.nodes.append(
            NodeProcess(
                node_id,
                address,
                -1,
                node_argv(node_id, address, root, peers, args),
                str(root / f"node-{node_id}.log"),
            )
        )
    return cluster


def ensure_local_cluster(data_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """The servers of the local cluster in ``data_dir``, starting it if needed (race-safe)."""
    return start_cluster(data_dir).servers


#: Flags of a recorded node's argv that are its own, not the cluster's: a node added
#: later gets every other flag of the first node, and its own values of these.
_NODE_FLAGS = (
    "--node-id",
    "--listen",
    "--data-dir",
    "--peers",
    "--peer-routes",
    "--advertise",
    "--kafka-listen",
    "--kafka-peers",
)


def _cluster_flags(argv: list[str]) -> list[str]:
    """The server flags of a node's argv that every node of its cluster shares."""
    flags = argv[argv.index("server") + 1 :] if "server" in argv else []
    out: list[str] = []
    skip = False
    for i, arg in enumerate(flags):
        if skip:
            skip = False
        elif arg in _NODE_FLAGS:
            skip = True  # its value is the next item
        elif arg.split("=", 1)[0] in _NODE_FLAGS and "=" in arg:
            continue
        else:
            out.append(flags[i])
    return out


def _set_flag(argv: list[str], flag: str, value: str) -> None:
    """Set ``flag``'s value in ``argv`` (``--flag VALUE``) when it is there."""
    if flag in argv and argv.index(flag) + 1 < len(argv):
        argv[argv.index(flag) + 1] = value


def add_node(
    data_dir: str | os.PathLike[str] | None = None,
    timeout_s: float = 60.0,
    admin_token: str | None = None,
) -> NodeProcess:
    """Add a node process to the running local cluster in ``data_dir`` and return it
    once it has joined.

    The node gets the next free id, a free port on the first node's host and the
    cluster's server flags, and, when the cluster's nodes have Kafka listeners, one of
    its own (``--kafka-listen``) with every node's in its ``--kafka-peers``; the
    running nodes list it in Kafka's Metadata from their next start (their recorded
    ``--kafka-peers`` gain it: a node's broker list is its command line). It is
    recorded in cluster.json (``local start`` and ``local stop`` treat it as any
    other), then registered through the controller
    (``RaftlogClient.register_node``: every node learns its address, and it joins the
    controller group). Returns when its ``/health`` names the controller leader the
    other nodes name. Raises ClusterError when no cluster runs there, or when the
    node exits or does not join within ``timeout_s`` (its log's end in the message;
    the node stays recorded, so ``local stop`` stops it). The registration is an
    admin call: with ``admin_token``, else the cluster's recorded one.
    """
    from raftlog.client import BlockingRaftlogClient, RaftlogError

    root = pathlib.Path(data_dir or default_data_dir()).resolve()
    with _locked(root):
        cluster = load_cluster(root)
        if cluster is None or not running(cluster):
            raise ClusterError(
                f"no local cluster runs in {root}; start one with `raftlog local start`"
            )
        node_id = max(n.node_id for n in cluster.nodes) + 1
        host = cluster.nodes[0].address.rpartition(":")[0]
        kafka = {n.node_id: cluster.kafka_address(n) for n in cluster.nodes}
        # a Kafka listener too when the cluster's nodes have one (as `local start` gives)
        kafka_host = (kafka[cluster.nodes[0].node_id] or "").rpartition(":")[0]
        ports = free_ports(2, [host, kafka_host]) if kafka_host else free_ports(1, [host])
        address = f"{host}:{ports[0]}"
        peers = {n.node_id: n.address for n in cluster.nodes}
        others = [n.address for n in cluster.nodes]
        peers[node_id] = address
        flags = _cluster_flags(cluster.nodes[0].argv)
        if kafka_host:
            kafka[node_id] = kafka_listen = f"{kafka_host}:{ports[1]}"
            listed = ",".join(f"{i}={a}" for i, a in sorted(kafka.items()) if a is not None)
            flags += ["--kafka-listen", kafka_listen, "--kafka-peers", listed]
            for n in cluster.nodes:  # their next start lists the new broker too
                _set_flag(n.argv, "--kafka-peers", listed)
        node = NodeProcess(
            node_id,
            address,
            -1,
            node_argv(node_id, address, root, peers, flags),
            str(root / f"node-{node_id}.log"),
        )
        cluster.nodes.append(node)
        proc = spawn(node, cluster.auth_token, cluster.peer_token, cluster.admin_token)
        _write_state(root, cluster)
    deadline = time.monotonic() + timeout_s

    def failed(why: str) -> ClusterError:
        failure = NodeFailure(node_id, address, why, node.log_file, log_tail(node.log_file))
        return ClusterError(
            f"adding a node to the local cluster in {root} failed:\n" + failure.describe()
        )

    try:
        with BlockingRaftlogClient(
            others,
            auth_token=cluster.auth_token,
            admin_token=admin_token or cluster.admin_token,
            tls_ca_file=cluster.tls_ca_file,
            request_timeout_s=max(1.0, deadline - time.monotonic()),
        ) as client:
            client.call(lambda c: c.register_node(node_id, address))
    except RaftlogError as exc:
        raise failed(f"was not registered with the controller: {exc}") from None
    while True:
        code = proc.poll()
        if code is not None:
            raise failed(f"exited with status {code}")
        state = cluster.health(node)
        leader = state.get("controller_leader", -1) if state else -1
        if leader >= 0 and leader != node_id:
            # the nodes that answer (one may be down) name the same controller leader
            answers = [cluster.health(n) for n in cluster.nodes if n.node_id != node_id]
            views = {a.get("controller_leader", -1) for a in answers if a is not None}
            if views == {leader}:
                return node
        if time.monotonic() >= deadline:
            raise failed(f"did not join the controller within {timeout_s:.0f}s")
        time.sleep(0.1)


def forget_node(
    data_dir: str | os.PathLike[str], node_id: int, timeout_s: float = 10.0
) -> NodeProcess:
    """Stop node ``node_id`` of the local cluster in ``data_dir`` by its PID and drop it
    from cluster.json (its data directory stays): for a node decommissioned from the
    cluster, which ``local start`` must not start again. ClusterError when the cluster
    or the node is not recorded there."""
    root = pathlib.Path(data_dir).resolve()
    with _locked(root):
        cluster = load_cluster(root)
        if cluster is None:
            raise ClusterError(f"no local cluster in {root}")
        try:
            node = cluster.node(node_id)
        except KeyError as exc:
            raise ClusterError(str(exc.args[0])) from None
        if _is_our_node(node):
            _stop_nodes([node], timeout_s)
        cluster.nodes = [n for n in cluster.nodes if n.node_id != node_id]
        _write_state(root, cluster)
        return node


def restart_node(cluster: LocalCluster, node_id: int) -> NodeProcess:
    """Start a stopped node again with its recorded argv; updates cluster.json."""
    root = pathlib.Path(cluster.data_dir)
    with _locked(root):
        node = cluster.node(node_id)
        if _is_our_node(node):
            raise ClusterError(f"node {node_id} is still running (pid {node.pid})")
        spawn(node, cluster.auth_token, cluster.peer_token, cluster.admin_token)
        _write_state(root, cluster)
        return node


def stop_cluster(
    data_dir: str | os.PathLike[str] | None = None, timeout_s: float = 10.0
) -> LocalCluster | None:
    """SIGTERM every recorded node that runs, SIGKILL those alive after ``timeout_s``;
    None when no cluster is recorded.

    cluster.json is kept, so the next start uses the same ports.
    """
    root = pathlib.Path(data_dir or default_data_dir())
    with _locked(root):
        cluster = load_cluster(root)
        if cluster is None:
            return None
        _stop_nodes(cluster.nodes, timeout_s)
        return cluster


def stop_node(node: NodeProcess, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> None:
    """Signal one node by PID and wait (bounded) for it to exit; SIGKILL on timeout."""
    _stop_nodes([node], timeout_s, sig)


def _stop_nodes(nodes: list[NodeProcess], timeout_s: float, sig: int = signal.SIGTERM) -> None:
    ours = [n for n in nodes if _is_our_node(n)]
    for n in ours:
        with contextlib.suppress(ProcessLookupError):
            os.kill(n.pid, sig)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(pid_alive(n.pid) for n in ours):
        _reap(ours)
        time.sleep(0.05)
    for n in ours:
        if pid_alive(n.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(n.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(pid_alive(n.pid) for n in ours):
        _reap(ours)
        time.sleep(0.05)


def _reap(nodes: list[NodeProcess]) -> None:
    # Nodes spawned by this very process linger as zombies until waited for;
    # wait for those PIDs only, never for other children of the caller.
    for n in nodes:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(n.pid, os.WNOHANG)


def _write_state(root: pathlib.Path, cluster: LocalCluster) -> None:
    """Replace cluster.json atomically by a file created 0600 (it holds the tokens)."""
    tmp = root / (STATE_FILE + ".tmp")
    # a leftover temp file (a crash, an older version) would keep its mode: never reuse it
    REAL_FS.unlink(tmp, missing_ok=True)
    REAL_FS.write_file(tmp, cluster.to_json().encode(), fsync=True)
    REAL_FS.rename(tmp, root / STATE_FILE)


def cluster_status(cluster: LocalCluster) -> list[dict[str, Any]]:
    """One dict per node: node_id, address, pid, alive, and its /health when it answers."""
    out = []
    for n in cluster.nodes:
        alive = _is_our_node(n)
        out.append(
            {
                "node_id": n.node_id,
                "address": n.address,
                "kafka": cluster.kafka_address(n),
                "pid": n.pid,
                "alive": alive,
                "health": cluster.health(n) if alive else None,
            }
        )
    return out


def node_data_dir(node: NodeProcess) -> pathlib.Path:
    """``node``'s data directory: its recorded ``--data-dir``."""
    argv = node.argv
    for i, arg in enumerate(argv):
        if arg == "--data-dir" and i + 1 < len(argv):
            return pathlib.Path(argv[i + 1])
        if arg.startswith("--data-dir="):
            return pathlib.Path(arg.split("=", 1)[1])
    raise ClusterError(f"node {node.node_id} has no --data-dir in its recorded command")


@dataclasses.dataclass(frozen=True, slots=True)
class TopicDisk:
    """What one topic of a local cluster takes on disk, on every node together."""

    topic: str
    partitions: int  # partitions with a replica on some node
    replicas: int  # replicas on all nodes
    bytes: int  # the replicas' files (segments, indexes, state)
    deleted_bytes: int  # replicas of the deleted topic, moved aside until removed


def _tree_bytes(path: pathlib.Path) -> int:
    """Bytes of the regular files under ``path`` (symlinks never followed); files that
    go while it walks (a segment removed by retention) count as gone."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                if stat.S_ISREG(st.st_mode):
                    total += st.st_size
    return total


def topic_disk_usage(cluster: LocalCluster) -> list[TopicDisk]:
    """Per topic, the disk its replicas take in the local cluster's node directories
    (read from the files, so it works with the nodes down); sorted by topic name. A
    deleted topic's replicas stay, moved aside, until a running node removes them
    ``--file-delete-delay-ms`` after the delete: they are counted in ``deleted_bytes``."""
    from raftlog.storage import identity

    live: dict[str, dict[str, Any]] = {}
    for node in cluster.nodes:
        root = identity.partitions_root(node_data_dir(node))
        if root.is_symlink() or not root.is_dir():
            continue
        for topic_dir in sorted(root.iterdir()):
            if topic_dir.is_symlink() or not topic_dir.is_dir():
                continue
            entry = live.setdefault(
                topic_dir.name, {"partitions": set(), "replicas": 0, "bytes": 0, "deleted": 0}
            )
            for part in topic_dir.iterdir():
                if part.is_symlink() or not part.is_dir():
                    continue
                size = _tree_bytes(part)
                if part.name.isdigit():
                    entry["partitions"].add(int(part.name))
                    entry["replicas"] += 1
                    entry["bytes"] += size
                elif identity.deleted_at(part) is not None:
                    entry["deleted"] += size
    return [
        TopicDisk(t, len(e["partitions"]), e["replicas"], e["bytes"], e["deleted"])
        for t, e in sorted(live.items())
        if e["replicas"] or e["deleted"]
    ]


def remove_deleted_topic_files(cluster: LocalCluster, topic: str) -> int:
    """Remove deleted ``topic``'s moved-aside replicas from every node of the local
    cluster at once (not after ``--file-delete-delay-ms``); the bytes freed. Only for a
    cluster whose nodes are all stopped (a running node removes them itself, after the
    delay that lets its readers finish): ClusterError otherwise."""
    from raftlog.storage import identity

    if any(_is_our_node(n) for n in cluster.nodes):
        raise ClusterError(
            f"the local cluster in {cluster.data_dir} is running: its nodes remove a deleted "
            "topic's files themselves"
        )
    freed = 0
    for node in cluster.nodes:
        data_dir = node_data_dir(node)
        for p in identity.expired_deleted_groups(data_dir, 0, time.time() + 1, topic):
            freed += _tree_bytes(p)
        identity.delete_expired(data_dir, 0, time.time() + 1, topic)
    return freed
