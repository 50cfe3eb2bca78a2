"""Secrets at rest and on the wire (issue 44, item 5), with real node processes.

- ``raftlog local start`` in a fresh ``RAFTLOG_HOME``, run under a umask of 0 (so a
  mode seen is one the code asked for): every directory of the home is 0700 and
  every file 0600, cluster.json and the nodes' logs and segments among them.
- A ``raftlog server`` whose data directory exists with mode 0755 makes it 0700 at
  start and logs that it did; its partition directory is 0700, its segment 0600.
- A node on 127.0.0.2 (a network by the node's own rule, bindable here without any
  setup) with both tokens and no TLS refuses to start, naming the TLS flags and
  ``--allow-plaintext``; with ``--allow-plaintext`` it serves and logs a warning
  at every start.
- A ``--tls-key`` that others can read is named in a warning at start, with its
  mode and ``chmod 600``; a private one is not.

Every node is stopped by PID in a finalizer, even when the test fails.
"""

from __future__ import annotations

import os
import pathlib
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
from secure_cluster import make_certificates

from raftlog.client import BlockingRaftlogClient, frame_records
from raftlog.cluster import (
    LocalCluster,
    NodeProcess,
    free_ports,
    load_cluster,
    node_argv,
    pid_alive,
    spawn,
    stop_cluster,
    stop_node,
    wait_ready,
)
from raftlog.storage.identity import partition_dir

CLIENT_TOKEN = "client-token-44"
PEER_TOKEN = "peer-token-44"
PLAINTEXT_WARNING = "the client and peer tokens cross the network in plain text"
START_TIMEOUT_S = 90.0


def mode(path: pathlib.Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RAFTLOG_")}


# A node started here: (node, its cluster record for wait_ready/health).
StartNode = Callable[..., tuple[NodeProcess, LocalCluster]]


@pytest.fixture
def start_node(tmp_path: pathlib.Path) -> Iterator[StartNode]:
    """Start one ``raftlog server`` (node 1) and wait until it serves; every node
    started is stopped by PID at the end."""
    started: list[NodeProcess] = []

    def start(
        data_root: pathlib.Path,
        host: str = "127.0.0.1",
        extra: list[str] | None = None,
        tokens: bool = False,
        ca_file: str | None = None,
        address: str | None = None,
    ) -> tuple[NodeProcess, LocalCluster]:
        address = address or f"{host}:{free_ports(1, [host])[0]}"
        node = NodeProcess(
            1,
            address,
            -1,
            node_argv(1, address, data_root, {1: address}, extra),
            str(tmp_path / "node-1.log"),
        )
        token, peer = (CLIENT_TOKEN, PEER_TOKEN) if tokens else (None, None)
        proc = spawn(node, token, peer)
        started.append(node)
        cluster = LocalCluster(str(data_root), [node], token, peer, ca_file)
        wait_ready(cluster, START_TIMEOUT_S, procs={1: proc})
        return node, cluster

    yield start
    for node in started:
        stop_node(node, timeout_s=10.0)
        if pid_alive(node.pid):
            stop_node(node, signal.SIGKILL, timeout_s=5.0)


def _produce_one(cluster: LocalCluster, topic: str) -> None:
    with BlockingRaftlogClient(
        cluster.servers,
        auth_token=cluster.auth_token,
        tls_ca_file=cluster.tls_ca_file,
        request_timeout_s=30.0,
    ) as client:
        client.create_topic(topic, partitions=1, replication_factor=1)
        client.produce(topic, 0, [(frame_records([b"secret record"]), 1)])


@pytest.fixture
def home(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A RAFTLOG_HOME of this test's own; every node recorded there is stopped at the end."""
    root = tmp_path / "home" / "local"  # its parent is made by the start too
    try:
        yield root
    finally:
        stop_cluster(root, timeout_s=10.0)
        cluster = load_cluster(root) if root.exists() else None
        for node in cluster.nodes if cluster else []:
            if pid_alive(node.pid):
                stop_node(node, signal.SIGKILL, timeout_s=5.0)


def test_local_start_keeps_every_file_of_the_home_private(home: pathlib.Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "raftlog", "local", "start", "--nodes", "1"],
        capture_output=True,
        text=True,
        env={**_clean_env(), "RAFTLOG_HOME": str(home)},
        umask=0,  # the nodes it spawns inherit it: any mode not asked for shows as 0666/0777
        timeout=START_TIMEOUT_S + 30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    cluster = load_cluster(home)
    assert cluster is not None
    _produce_one(cluster, "private")
    assert mode(home.parent) == 0o700 and mode(home) == 0o700
    assert mode(home / "cluster.json") == 0o600
    tree = sorted(home.rglob("*"))
    segments = [p for p in tree if p.suffix == ".log" and p.parent.name == "0"]
    assert segments, [str(p) for p in tree]  # the topic's partition has its segment
    expected = {p: 0o700 if p.is_dir() else 0o600 for p in tree}
    assert {p: mode(p) for p in tree} == expected
    names = {p.name for p in tree}
    assert {"cluster.json", ".lock", "node-1.log", "node-1"} <= names


def test_a_node_tightens_its_open_data_dir_and_keeps_its_files_private(
    tmp_path: pathlib.Path, start_node: StartNode
) -> None:
    data = tmp_path / "node-1"  # node_argv's --data-dir under this root
    data.mkdir(0o755)
    os.chmod(data, 0o755)  # an older version's, or one made by hand
    node, cluster = start_node(tmp_path)
    assert mode(data) == 0o700
    log = pathlib.Path(node.log_file).read_text()
    assert f"data directory {data} was mode 0755" in log and "made it 0700" in log
    _produce_one(cluster, "kept")
    partition = partition_dir(data, "kept", 0)
    segments = sorted(partition.glob("*.log"))
    assert segments, sorted(p.name for p in partition.iterdir())
    assert (mode(partition.parent.parent), mode(partition.parent), mode(partition)) == (
        0o700,
        0o700,
        0o700,
    )
    assert {p.name: mode(p) for p in segments} == {p.name: 0o600 for p in segments}


def _server(*flags: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "raftlog", "server", "--node-id", "1", *flags],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_a_node_off_loopback_without_tls_refuses_to_start(tmp_path: pathlib.Path) -> None:
    (port,) = free_ports(1, ["127.0.0.2"])
    data = tmp_path / "refused"
    env = {**_clean_env(), "RAFTLOG_AUTH_TOKEN": CLIENT_TOKEN, "RAFTLOG_PEER_TOKEN": PEER_TOKEN}
    for listen in (f"127.0.0.2:{port}", f"0.0.0.0:{port}"):
        flags = ["--listen", listen, "--data-dir", str(data)]
        if listen.startswith("0.0.0.0"):
            flags += ["--advertise", f"127.0.0.2:{port}"]
        result = _server(*flags, env=env)
        assert result.returncode == 1, result.stderr
        assert "without TLS sends the tokens across the network in plain text" in result.stderr
        assert "--tls-cert/--tls-key/--tls-ca" in result.stderr, result.stderr
        assert "--allow-plaintext" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr, result.stderr
    assert not data.exists()  # refused before anything was made


def test_allow_plaintext_serves_and_warns_at_every_start(
    tmp_path: pathlib.Path, start_node: StartNode
) -> None:
    node, cluster = start_node(tmp_path, "127.0.0.2", ["--allow-plaintext"], tokens=True)
    _produce_one(cluster, "plain")  # it serves, with the tokens
    stop_node(node, timeout_s=10.0)
    start_node(tmp_path, "127.0.0.2", ["--allow-plaintext"], tokens=True, address=node.address)
    lines = pathlib.Path(node.log_file).read_text().splitlines()
    warnings = [line for line in lines if PLAINTEXT_WARNING in line]
    assert len(warnings) == 2, lines[-20:]  # one per start
    assert all(" WARNING " in line and node.address in line for line in warnings), warnings


def test_a_key_file_readable_by_others_is_warned_about_at_start(
    tmp_path: pathlib.Path, start_node: StartNode
) -> None:
    cert, key, ca = make_certificates(tmp_path / "tls", ["127.0.0.1"])
    tls = ["--tls-cert", cert, "--tls-key", key, "--tls-ca", ca]
    os.chmod(key, 0o644)
    node, _ = start_node(tmp_path / "open", extra=tls, ca_file=ca)
    log = pathlib.Path(node.log_file).read_text()
    expected = f"--tls-key: {key} is readable by group and others (mode 0644)"
    assert expected in log and f"run `chmod 600 {key}`" in log, log[-2000:]
    assert " WARNING " in next(line for line in log.splitlines() if expected in line)
    stop_node(node, timeout_s=10.0)
    os.chmod(key, 0o600)
    pathlib.Path(node.log_file).unlink()
    private, _ = start_node(tmp_path / "private", extra=tls, ca_file=ca)
    assert "--tls-key:" not in pathlib.Path(private.log_file).read_text()
