"""Launching, inspecting and stopping a local cluster of node processes.

A local cluster lives in one data directory::

    DIR/cluster.json     the nodes: id, address, pid, argv, log file
    DIR/.lock            flock'ed while starting or stopping (race safety)
    DIR/node-N/          node N's data (``--data-dir`` of its server)
    DIR/node-N.log       node N's stdout and stderr

Nodes are ``python -m raftlog server ...`` subprocesses in their own session
(``start_new_session=True``), so they outlive the launcher. Stopping signals
exactly the PIDs recorded in cluster.json, and only after checking that each
PID still runs a raftlog server with the recorded node id (a PID may have been
reused). Every wait here is bounded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

DEFAULT_NODES = 3
STATE_FILE = "cluster.json"
LOCK_FILE = ".lock"


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


@dataclasses.dataclass(slots=True)
class LocalCluster:
    data_dir: str
    nodes: list[NodeProcess]
    auth_token: str | None = None

    @property
    def servers(self) -> list[str]:
        return [n.address for n in self.nodes]

    def node(self, node_id: int) -> NodeProcess:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no node {node_id} in the cluster at {self.data_dir}")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> LocalCluster:
        raw = json.loads(text)
        return cls(
            data_dir=raw["data_dir"],
            nodes=[NodeProcess(**n) for n in raw["nodes"]],
            auth_token=raw.get("auth_token"),
        )


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (held open together while picking)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@contextlib.contextmanager
def _locked(data_dir: pathlib.Path) -> Iterator[None]:
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / LOCK_FILE, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def pid_alive(pid: int) -> bool:
    """True when ``pid`` runs and is not a zombie."""
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
    args = [c.decode(errors="replace") for c in cmd]
    return "server" in args and "--node-id" in args and str(node.node_id) in args


def health(address: str, timeout_s: float = 1.0) -> dict[str, Any] | None:
    """The node's ``/health`` JSON, or None when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://{address}/health", timeout=timeout_s) as resp:
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
    peer_arg = ",".join(f"{i}={a}" for i, a in sorted(peers.items()))
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
        *(extra_args or []),
    ]


def spawn(node: NodeProcess, auth_token: str | None = None) -> subprocess.Popen[bytes]:
    """Start ``node.argv`` detached, appending output to its log file; sets ``node.pid``."""
    env = dict(os.environ)
    if auth_token:
        env["RAFTLOG_AUTH_TOKEN"] = auth_token
    with open(node.log_file, "ab") as log:
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


def wait_ready(cluster: LocalCluster, timeout_s: float = 30.0) -> int:
    """Wait until every node answers and they agree on a controller leader; return its id.

    Raises ClusterError naming the log files when the bound passes or a node dies.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dead = [n for n in cluster.nodes if not pid_alive(n.pid)]
        if dead:
            raise ClusterError(
                "node(s) exited during start: "
                + ", ".join(f"{n.node_id} (see {n.log_file})" for n in dead)
            )
        states = [health(n.address) for n in cluster.nodes]
        leaders = {s.get("controller_leader", -1) for s in states if s is not None}
        if all(s is not None for s in states) and len(leaders) == 1 and -1 not in leaders:
            return leaders.pop()
        time.sleep(0.1)
    raise ClusterError(
        f"the cluster did not elect a controller leader within {timeout_s:.0f}s; see "
        + ", ".join(n.log_file for n in cluster.nodes)
    )


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
    nodes: int = DEFAULT_NODES,
    *,
    extra_args: list[str] | None = None,
    auth_token: str | None = None,
    timeout_s: float = 60.0,
    peer_routes: Callable[[dict[int, str]], dict[int, dict[int, str]]] | None = None,
) -> LocalCluster:
    """Start a local cluster unless one runs in ``data_dir``; return it once ready.

    Race-safe: concurrent callers serialize on the data dir's lock, and all but
    the first find the running cluster. Raises ClusterError when it cannot start.

    ``peer_routes``, when given, is called with every node's address and returns,
    per node id, where that node sends raft traffic for each peer (e.g. a proxy
    per link); it becomes the node's ``--peer-routes``.
    """
    if not isinstance(nodes, int) or not 1 <= nodes <= 64:
        raise ClusterError(f"--nodes: expected an integer from 1 to 64, got {nodes!r}")
    root = pathlib.Path(data_dir or default_data_dir()).resolve()
    with _locked(root):
        existing = load_cluster(root)
        if existing is not None and running(existing):
            wait_ready(existing, timeout_s)
            return existing
        ports = free_ports(nodes)
        peers = {i: f"127.0.0.1:{p}" for i, p in zip(range(1, nodes + 1), ports, strict=True)}
        routes = peer_routes(dict(peers)) if peer_routes is not None else {}
        cluster = LocalCluster(str(root), [], auth_token)
        for node_id, address in peers.items():
            args = list(extra_args or [])
            if routes.get(node_id):
                args += [
                    "--peer-routes",
                    ",".join(f"{i}={a}" for i, a in sorted(routes[node_id].items())),
                ]
            node = NodeProcess(
                node_id,
                address,
                -1,
                node_argv(node_id, address, root, peers, args),
                str(root / f"node-{node_id}.log"),
            )
            spawn(node, auth_token)
            cluster.nodes.append(node)
        _write_state(root, cluster)
        try:
            wait_ready(cluster, timeout_s)
        except ClusterError:
            _stop_nodes(cluster.nodes, 5.0)
            raise
        return cluster


def ensure_local_cluster(data_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """The servers of the local cluster in ``data_dir``, starting it if needed (race-safe)."""
    return start_cluster(data_dir).servers


def restart_node(cluster: LocalCluster, node_id: int) -> NodeProcess:
    """Start a stopped node again with its recorded argv; updates cluster.json."""
    root = pathlib.Path(cluster.data_dir)
    with _locked(root):
        node = cluster.node(node_id)
        if _is_our_node(node):
            raise ClusterError(f"node {node_id} is still running (pid {node.pid})")
        spawn(node, cluster.auth_token)
        _write_state(root, cluster)
        return node


def stop_cluster(
    data_dir: str | os.PathLike[str] | None = None, timeout_s: float = 10.0
) -> LocalCluster | None:
    """SIGTERM every recorded node, SIGKILL those alive after ``timeout_s``; None when
    no cluster is recorded. Removes cluster.json."""
    root = pathlib.Path(data_dir or default_data_dir())
    with _locked(root):
        cluster = load_cluster(root)
        if cluster is None:
            return None
        _stop_nodes(cluster.nodes, timeout_s)
        (root / STATE_FILE).unlink(missing_ok=True)
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
    tmp = root / (STATE_FILE + ".tmp")
    tmp.write_text(cluster.to_json())
    os.replace(tmp, root / STATE_FILE)


def cluster_status(cluster: LocalCluster) -> list[dict[str, Any]]:
    """One dict per node: node_id, address, pid, alive, and its /health when it answers."""
    out = []
    for n in cluster.nodes:
        alive = _is_our_node(n)
        out.append(
            {
                "node_id": n.node_id,
                "address": n.address,
                "pid": n.pid,
                "alive": alive,
                "health": health(n.address) if alive else None,
            }
        )
    return out
