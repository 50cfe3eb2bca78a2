"""The local cluster's bookkeeping, without starting processes."""

from __future__ import annotations

import json
import os
import pathlib
import random
import socket
import stat

import pytest

from raftlog import cluster as cluster_module
from raftlog.cli import main
from raftlog.cluster import (
    ClusterError,
    LocalCluster,
    NodeFailure,
    NodeProcess,
    ephemeral_range,
    free_ports,
    load_cluster,
    log_tail,
    majority,
    pid_alive,
    start_cluster,
)


def _recorded(root: pathlib.Path, nodes: int) -> LocalCluster:
    """A cluster.json of ``nodes`` nodes that do not run (pid -1: never started)."""
    cluster = LocalCluster(
        str(root),
        [
            NodeProcess(i, f"127.0.0.1:{40000 + i}", -1, ["python"], str(root / f"node-{i}.log"))
            for i in range(1, nodes + 1)
        ],
    )
    root.mkdir(parents=True, exist_ok=True)
    (root / "cluster.json").write_text(cluster.to_json())
    return cluster


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    """A node's port in the ephemeral range can become an outgoing connection's source
    port while the node is down (its restart fails to bind) or a peer's self-connect."""
    low, _high = ephemeral_range()
    for _ in range(20):
        ports = free_ports(8)
        assert len(set(ports)) == 8
        assert all(1024 <= p < low for p in ports), (ports, low)
        with socket.socket() as a, socket.socket() as b:
            a.bind(("127.0.0.1", ports[0]))
            b.bind(("127.0.0.1", ports[-1]))


def test_free_ports_skips_a_port_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        sample = random.sample
        monkeypatch.setattr(
            cluster_module.random,
            "sample",
            lambda population, k: [busy, *sample(population, k)],
        )
        ports = free_ports(3)
    assert busy not in ports and len(set(ports)) == 3


def test_free_ports_says_when_none_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        monkeypatch.setattr(cluster_module.random, "sample", lambda population, k: [busy] * k)
        with pytest.raises(ClusterError, match="found only 0 of 2 free ports"):
            free_ports(2)


def test_majority() -> None:
    assert [majority(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]


def test_a_never_started_pid_is_not_alive() -> None:
    # -1 and 0 would address process groups in os.kill: they must never count as alive
    assert not pid_alive(-1) and not pid_alive(0)


def test_log_tail_keeps_the_last_non_empty_lines(tmp_path: pathlib.Path) -> None:
    log = tmp_path / "node.log"
    log.write_text("".join(f"line {i}\n\n" for i in range(100)))
    assert log_tail(log, 3) == ("line 97", "line 98", "line 99")
    assert log_tail(tmp_path / "missing.log")[0].startswith("(cannot read the log")


def test_failure_description_names_node_reason_and_log_lines() -> None:
    failure = NodeFailure(2, "127.0.0.1:5", "exited with status 1", "/d/node-2.log", ("a", "b"))
    text = failure.describe()
    assert text.splitlines() == [
        "node 2 (127.0.0.1:5) exited with status 1; last lines of /d/node-2.log:",
        "    a",
        "    b",
    ]


def test_cluster_json_keeps_only_the_recorded_fields(tmp_path: pathlib.Path) -> None:
    cluster = _recorded(tmp_path, 3)
    cluster.started = [1]
    cluster.down = [NodeFailure(2, "a:1", "x", "l", ())]
    raw = json.loads(cluster.to_json())
    assert set(raw) == {"data_dir", "nodes", "auth_token"}
    again = LocalCluster.from_json(cluster.to_json())
    assert again.servers == cluster.servers and again.started == [] and again.down == []


def test_nodes_of_a_recorded_cluster_cannot_be_changed(tmp_path: pathlib.Path) -> None:
    _recorded(tmp_path, 3)
    with pytest.raises(ClusterError, match=r"--nodes: the local cluster in .* has 3 nodes, not 5"):
        start_cluster(tmp_path, 5)
    assert load_cluster(tmp_path).servers == [f"127.0.0.1:{40000 + i}" for i in (1, 2, 3)]


def test_cli_local_start_names_the_nodes_option(tmp_path: pathlib.Path, capsys) -> None:
    _recorded(tmp_path, 3)
    assert main(["local", "start", "--data-dir", str(tmp_path), "--nodes", "1"]) == 1
    assert "--nodes: the local cluster" in capsys.readouterr().err


def test_cluster_health_without_any_cluster_says_how_to_start(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("RAFTLOG_HOME", str(tmp_path / "none"))
    monkeypatch.delenv("RAFTLOG_SERVERS", raising=False)
    assert main(["cluster", "health"]) == 1
    assert "raftlog local start" in capsys.readouterr().err


def test_cluster_health_of_a_cluster_that_is_all_down(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Nothing listens: every node reported down at once, exit status nonzero."""
    from raftlog.cluster import free_ports

    ports = free_ports(2)
    monkeypatch.setenv("RAFTLOG_SERVERS", ",".join(f"127.0.0.1:{p}" for p in ports))
    assert main(["cluster", "health", "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["healthy"] is False
    assert sorted(n["address"] for n in report["nodes"]) == sorted(f"127.0.0.1:{p}" for p in ports)
    assert not any(n["up"] for n in report["nodes"])
    assert "connection refused" in report["problems"][0]


def test_cluster_json_is_replaced_by_a_file_made_0600(tmp_path: pathlib.Path) -> None:
    """Even over an older world-readable cluster.json and a leftover temp file of it."""
    cluster = _recorded(tmp_path, 1)
    cluster.auth_token, cluster.peer_token = "client-secret", "peer-secret"
    (tmp_path / "cluster.json").chmod(0o644)
    (tmp_path / "cluster.json.tmp").write_text("left by a crash")
    (tmp_path / "cluster.json.tmp").chmod(0o666)
    old = os.umask(0)  # a mode seen is one asked for, not the umask's
    try:
        cluster_module._write_state(tmp_path, cluster)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "cluster.json").stat().st_mode) == 0o600
    assert not (tmp_path / "cluster.json.tmp").exists()
    assert load_cluster(tmp_path).peer_token == "peer-secret"


def test_starting_tightens_a_home_open_to_others(tmp_path: pathlib.Path) -> None:
    home = tmp_path / "home"
    _recorded(home, 3)
    home.chmod(0o755)
    with pytest.raises(ClusterError, match="has 3 nodes, not 5"):
        start_cluster(home, 5)  # fails after taking the lock: nothing is spawned
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
