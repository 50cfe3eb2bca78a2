"""`raftlog local start` prints the Kafka bootstrap list (stderr; stdout stays the
servers line), `kcat -b ADDR -L` accepts it, and `raftlog local status` shows it."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from raftlog.cluster import stop_cluster


def _cli(home: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTLOG_")}
    env["RAFTLOG_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "raftlog", *args],
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.fixture
def started(tmp_path: pathlib.Path) -> Iterator[tuple[pathlib.Path, subprocess.CompletedProcess]]:
    """A 3-node cluster from `raftlog local start` (its home and the command's result),
    stopped by its recorded PIDs whatever the test does."""
    home = tmp_path / "home"
    try:
        result = _cli(home, "local", "start", "--nodes", "3")
        assert result.returncode == 0, result.stderr.decode()
        yield home, result
    finally:
        stop_cluster(home, timeout_s=10.0)


def _kcat_list(address: str) -> str:
    """`kcat -b ADDRESS -L`'s output; the test fails if kcat is missing or refuses."""
    kcat = shutil.which("kcat")
    assert kcat, "kcat is missing: apt-get install kcat (scripts/env.sh installs it)"
    listed = subprocess.run(
        [kcat, "-b", address, "-L"], capture_output=True, timeout=60, check=False
    )
    assert listed.returncode == 0, listed.stderr.decode()
    return listed.stdout.decode()


def test_local_start_prints_a_bootstrap_list_kcat_accepts(
    started: tuple[pathlib.Path, subprocess.CompletedProcess],
) -> None:
    home, result = started
    servers = result.stdout.decode().strip().split(",")
    assert len(servers) == 3  # stdout: the raftlog servers line, as before
    found = re.search(r"bootstrap\.servers=(\S+)", result.stderr.decode())
    assert found, result.stderr.decode()
    bootstrap = found.group(1).split(",")
    assert len(bootstrap) == 3 and not set(bootstrap) & set(servers)
    assert "3 brokers:" in _kcat_list(bootstrap[0])
    status = _cli(home, "local", "status").stdout.decode()
    assert f"kafka bootstrap: {','.join(bootstrap)}" in status
    for address in bootstrap:
        assert f"kafka {address}" in status


def test_local_add_node_gives_the_new_node_a_kafka_port(
    started: tuple[pathlib.Path, subprocess.CompletedProcess],
) -> None:
    """`raftlog local add-node` gives the node it adds a Kafka listener, as `local
    start` gives each of its nodes: `local status` shows it, and its Metadata lists
    the four brokers; the others list it from their next start (their recorded
    --kafka-peers name it)."""
    home, _ = started
    added = _cli(home, "local", "add-node")
    assert added.returncode == 0, added.stderr.decode()
    status = _cli(home, "local", "status").stdout.decode()
    found = re.search(r"kafka bootstrap: (\S+)", status)
    assert found, status
    bootstrap = found.group(1).split(",")
    assert len(bootstrap) == 4, status
    for address in bootstrap:
        assert f"kafka {address}" in status
    new = re.search(r"node 4 .* kafka (\S+)", status)
    assert new and new.group(1) == bootstrap[3], status
    listed = _kcat_list(bootstrap[3])
    assert "4 brokers:" in listed, listed
    assert f"broker 4 at {bootstrap[3]}" in listed
    recorded = (home / "cluster.json").read_text()
    peers = ",".join(f"{i + 1}={a}" for i, a in enumerate(bootstrap))
    assert recorded.count(peers) == 4, recorded  # every node's --kafka-peers
