"""Peer groundwork: detecting etcd and PySyncObj, and the local 3-member etcd cluster."""

from __future__ import annotations

import base64
import json
import socket
import urllib.request
from pathlib import Path

import _bench_repo_path  # noqa: F401  (puts the repo root on sys.path)
import pytest

from benchmarks.peers import detect, etcd_cluster
from benchmarks.peers.etcd_cluster import EtcdCluster, EtcdError


@pytest.fixture
def needs_etcd() -> None:
    """Fail (never skip) with the install command when etcd is missing."""
    if detect.etcd_binary() is None:
        pytest.fail(detect.ETCD_INSTALL_HINT)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


def test_missing_peers_say_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(detect.shutil, "which", lambda name: None)
    assert detect.etcd_missing() == detect.ETCD_INSTALL_HINT
    assert "apt-get install etcd-server" in detect.ETCD_INSTALL_HINT
    monkeypatch.setattr(detect.importlib.util, "find_spec", lambda name: None)
    assert "pip install pysyncobj" in (detect.pysyncobj_missing() or "")


def test_start_without_etcd_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(etcd_cluster, "etcd_binary", lambda: None)
    with pytest.raises(EtcdError, match="apt-get install etcd-server"):
        EtcdCluster(tmp_path).start()


def test_bad_arguments_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="members"):
        EtcdCluster(tmp_path, members=0)
    with pytest.raises(ValueError, match="start_timeout_s"):
        EtcdCluster(tmp_path, start_timeout_s=0)


@pytest.mark.usefixtures("needs_etcd")
def test_three_members_replicate_and_stop_by_pid(tmp_path: Path) -> None:
    cluster = EtcdCluster(tmp_path)
    with cluster:
        assert len(cluster.pids) == 3
        assert all(url.startswith("http://127.0.0.1:") for url in cluster.client_urls)
        # Written through one member, read back (linearizably) through another.
        _post(f"{cluster.client_urls[0]}/v3/kv/put", {"key": _b64("k"), "value": _b64("v")})
        got = _post(f"{cluster.client_urls[2]}/v3/kv/range", {"key": _b64("k")})
        assert base64.b64decode(got["kvs"][0]["value"]) == b"v"
        members = _post(f"{cluster.client_urls[1]}/v3/cluster/member/list", {})
        assert len(members["members"]) == 3
    assert all(m.process is not None and m.process.poll() is not None for m in cluster.members)
    cluster.stop()  # idempotent


@pytest.mark.usefixtures("needs_etcd")
def test_a_member_that_cannot_start_stops_the_others(tmp_path: Path) -> None:
    cluster = EtcdCluster(tmp_path, start_timeout_s=20)
    # Hold the last member's client port so that member cannot bind it and exits.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as blocker:
        blocker.bind(("127.0.0.1", cluster.members[-1].client_port))
        blocker.listen()
        with pytest.raises(EtcdError, match="m2"):
            cluster.start()
    assert all(m.process is not None and m.process.poll() is not None for m in cluster.members)
