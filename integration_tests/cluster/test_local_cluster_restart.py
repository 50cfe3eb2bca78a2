"""The embedded local cluster survives dead nodes: real node processes on 127.0.0.1.

Each test has its own cluster in a tmp ``RAFTLOG_HOME``; the finalizer stops every
node recorded in its cluster.json by PID (nodes restarted by a CLI subprocess are
recorded there too). A node is made unstartable by holding its port.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from tenacity import (
    Retrying,
    retry_if_exception_type,
    retry_if_result,
    stop_after_delay,
    wait_fixed,
)

import raftlog.cluster
from raftlog.client import BlockingRaftlogClient, frame_records, unframe_records
from raftlog.cluster import (
    ClusterError,
    LocalCluster,
    health,
    load_cluster,
    pid_alive,
    start_cluster,
    stop_cluster,
    stop_node,
)


@pytest.fixture
def home(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[pathlib.Path]:
    """A RAFTLOG_HOME of this test's own; every node recorded there is stopped at the end."""
    root = tmp_path / "raftlog-home"
    monkeypatch.setenv("RAFTLOG_HOME", str(root))
    monkeypatch.delenv("RAFTLOG_SERVERS", raising=False)
    monkeypatch.delenv("RAFTLOG_AUTH_TOKEN", raising=False)
    try:
        yield root
    finally:
        stop_cluster(root, timeout_s=10.0)


def _cli(home: pathlib.Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    env = {
        k: v for k, v in os.environ.items() if k not in ("RAFTLOG_SERVERS", "RAFTLOG_AUTH_TOKEN")
    }
    env["RAFTLOG_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "raftlog", *args],
        capture_output=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def _kill9(home: pathlib.Path, node_id: int) -> None:
    """SIGKILL the node by the PID recorded in cluster.json and wait until it is gone."""
    cluster = load_cluster(home)
    assert cluster is not None
    node = cluster.node(node_id)
    assert pid_alive(node.pid)
    stop_node(node, signal.SIGKILL, timeout_s=10.0)
    assert not pid_alive(node.pid)


@contextlib.contextmanager
def _occupied(address: str) -> Iterator[None]:
    """Hold ``address`` with a listening socket, so a node cannot bind it."""
    host, port = address.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # SO_REUSEADDR: bind despite the dead node's TIME_WAIT connections; two listeners
    # still cannot share the port on Linux, so the node's own bind fails.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        # The freed port is in the ephemeral range: a peer's outgoing connection may
        # hold it as its local port for a moment, so retry the bind (bounded).
        Retrying(
            stop=stop_after_delay(10),
            wait=wait_fixed(0.2),
            retry=retry_if_exception_type(OSError),
            reraise=True,
        )(sock.bind, (host, int(port)))
        sock.listen()
        yield
    finally:
        sock.close()


def _round_trip(servers: list[str], topic: str, values: list[bytes]) -> None:
    """Produce ``values`` (acks=all) to partition 0 of ``topic`` and read them back."""
    with BlockingRaftlogClient(servers, request_timeout_s=30.0) as client:
        client.create_topic(topic, partitions=1, replication_factor=3, exist_ok=True)
        start, _hwm, _lso = client.list_offsets(topic, 0)
        client.produce(topic, 0, [(frame_records(values), len(values))], acks="all")
        got: list[bytes] = []
        offset = start
        for _ in range(50):  # bounded: each fetch returns at least one batch when any
            if len(got) >= len(values):
                break
            r = client.fetch(topic, 0, offset)
            for batch in r.batches:
                got.extend(unframe_records(batch.payload, batch.record_count) or [])
            offset = r.next_offset
        assert got[-len(values) :] == values


def _health_rc(home: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    return _cli(home, "cluster", "health", *args, timeout=60)


def _wait_healthy(home: pathlib.Path) -> subprocess.CompletedProcess:
    """Health right after a (re)start may see elections in progress: retry, bounded;
    returns the last answer."""
    return Retrying(
        stop=stop_after_delay(30),
        wait=wait_fixed(0.5),
        retry=retry_if_result(lambda r: r.returncode != 0),
        retry_error_callback=lambda state: state.outcome.result(),
    )(_health_rc, home)


def test_kill9_node_comes_back_on_its_port_and_health_follows(home: pathlib.Path) -> None:
    first = _cli(home, "local", "start")
    assert first.returncode == 0, first.stderr.decode()
    servers = first.stdout.decode().strip().split(",")
    assert len(servers) == 3
    recorded = json.loads((home / "cluster.json").read_text())
    assert [n["address"] for n in recorded["nodes"]] == servers
    _round_trip(servers, "before", [b"a", b"b"])

    _kill9(home, 2)
    down = _health_rc(home, "--format", "json")
    assert down.returncode != 0
    report = json.loads(down.stdout)
    assert not report["healthy"]
    assert [n["node_id"] for n in report["nodes"] if not n["up"]] == [2]
    assert any(p["down_replicas"] == [2] for p in report["under_replicated_partitions"])

    again = _cli(home, "local", "start")
    assert again.returncode == 0, again.stderr.decode()
    assert again.stdout.decode().strip().split(",") == servers  # same ports
    assert b"warning" not in again.stderr
    cluster = load_cluster(home)
    assert cluster is not None
    node2 = cluster.node(2)
    assert node2.pid != recorded["nodes"][1]["pid"] and pid_alive(node2.pid)
    answer = health(node2.address)
    assert answer is not None and answer["node_id"] == 2
    _round_trip(servers, "after", [b"c", b"d", b"e"])
    healthy = _wait_healthy(home)
    assert healthy.returncode == 0, healthy.stdout.decode()
    assert "healthy: yes" in healthy.stdout.decode()


def test_a_recorded_python_that_is_gone_does_not_stop_a_restart(home: pathlib.Path) -> None:
    """cluster.json records each node's argv, and with it the Python of the venv that
    first started it; a user who re-creates the venv or moves the checkout must still
    get the cluster back, under the Python that runs the command now."""
    first = _cli(home, "local", "start")
    assert first.returncode == 0, first.stderr.decode()
    servers = first.stdout.decode().strip().split(",")
    _round_trip(servers, "kept", [b"a", b"b"])
    stop_cluster(home, timeout_s=10.0)
    recorded = json.loads((home / "cluster.json").read_text())
    gone = str(home / "deleted-venv" / "bin" / "python")
    for node in recorded["nodes"]:
        assert node["argv"][0] == sys.executable
        node["argv"][0] = gone
    (home / "cluster.json").write_text(json.dumps(recorded))

    again = _cli(home, "local", "start")
    assert again.returncode == 0, again.stderr.decode()
    assert again.stdout.decode().strip().split(",") == servers
    cluster = load_cluster(home)
    assert cluster is not None
    assert [n.argv[0] for n in cluster.nodes] == [sys.executable] * 3
    assert all(pid_alive(n.pid) for n in cluster.nodes)
    _round_trip(servers, "kept", [b"c"])


def test_unstartable_node_is_named_with_its_log_and_the_majority_serves(
    home: pathlib.Path,
) -> None:
    cluster = start_cluster(home, 3)
    servers = cluster.servers
    _kill9(home, 3)
    with _occupied(cluster.node(3).address):
        result = _cli(home, "local", "start")
        assert result.returncode == 0, result.stderr.decode()
        err = result.stderr.decode()
        assert f"node 3 ({cluster.node(3).address}) exited with status" in err
        assert "node-3.log" in err
        assert "address already in use" in err.lower()  # a line of the node's own log
        assert "serving with 2 of 3 nodes" in err
        assert result.stdout.decode().strip().split(",") == servers
        _round_trip(servers, "two-of-three", [b"x", b"y"])
        assert _health_rc(home).returncode != 0


def test_a_hung_node_is_reported_after_a_grace_once_a_majority_serves(
    home: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    grace = 2.0  # the real grace is STRAGGLER_GRACE_S; shortened to keep the test short
    monkeypatch.setattr(raftlog.cluster, "STRAGGLER_GRACE_S", grace)
    cluster = start_cluster(home, 3)
    hung = cluster.node(3)
    os.kill(hung.pid, signal.SIGSTOP)
    try:
        began = time.monotonic()
        again = start_cluster(home)
        took = time.monotonic() - began
    finally:
        os.kill(hung.pid, signal.SIGCONT)
    assert again.started == []  # a stopped process is not a dead one: nothing spawned
    assert [f.node_id for f in again.down] == [3]
    assert "did not answer /health" in again.down[0].reason
    assert grace <= took < grace + 10, took


def _corrupt_data_dir(home: pathlib.Path, node_id: int) -> None:
    """Replace the node's data dir by a plain file: the node exits at start-up."""
    data = home / f"node-{node_id}"
    shutil.rmtree(data)
    data.write_text("not a directory\n")


def test_without_a_majority_start_fails_naming_every_failed_node(home: pathlib.Path) -> None:
    cluster = start_cluster(home, 3)
    _kill9(home, 2)
    _kill9(home, 3)
    _corrupt_data_dir(home, 2)
    _corrupt_data_dir(home, 3)
    with pytest.raises(ClusterError) as info:
        start_cluster(home, timeout_s=30.0)
    message = str(info.value)
    assert "cannot serve" in message and "a majority, 2, is needed" in message
    for node_id in (2, 3):
        assert f"node {node_id} ({cluster.node(node_id).address}) exited" in message
        assert f"node-{node_id}.log" in message
    assert message.count("FileExistsError") >= 2  # the last line of each node's log
    assert pid_alive(cluster.node(1).pid)  # the node that ran before is left running


def test_connector_implicit_start_restarts_a_dead_node_and_says_so(
    home: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    from pyspark_raftlog.connection import resolve_servers

    caplog.set_level(logging.INFO, logger="pyspark_raftlog")
    servers = resolve_servers(None)
    started = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(started) == 1
    assert "started the embedded local raftlog cluster" in started[0]
    assert str(home) in started[0]
    caplog.clear()

    _kill9(home, 1)
    assert resolve_servers(None) == servers
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "restarted node(s) 1 " in warnings[0], warnings
    caplog.clear()

    _kill9(home, 2)
    cluster = load_cluster(home)
    assert cluster is not None
    with _occupied(cluster.node(2).address):
        assert resolve_servers(None) == servers
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "serves with 2 of 3 nodes" in text
    assert f"node 2 ({cluster.node(2).address}) exited" in text
    assert "address already in use" in text.lower()
    _round_trip(list(servers), "implicit", [b"1", b"2"])


def test_concurrent_implicit_starts_spawn_each_dead_node_once(home: pathlib.Path) -> None:
    """Two processes (two Spark drivers) start at once: the flock lets one spawn node 3."""
    start_cluster(home, 3)
    _kill9(home, 3)
    code = (
        "from raftlog.cluster import start_cluster; "
        "c = start_cluster(); print(','.join(map(str, c.started)) or '-')"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAFTLOG_SERVERS"}
    env["RAFTLOG_HOME"] = str(home)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        for _ in range(2)
    ]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err.decode()
        outs.append(out.decode().strip())
    assert sorted(outs) == ["-", "3"]
    cluster: LocalCluster | None = load_cluster(home)
    assert cluster is not None and all(pid_alive(n.pid) for n in cluster.nodes)
