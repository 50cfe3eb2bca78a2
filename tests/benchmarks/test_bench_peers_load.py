"""The closed-loop load generator, the etcd put load, and the PySyncObj node cluster."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.request
from pathlib import Path

import _bench_repo_path  # noqa: F401  (puts the repo root on sys.path)
import pytest

from benchmarks.peers import detect
from benchmarks.peers.etcd_cluster import EtcdCluster
from benchmarks.peers.etcd_grpc_load import etcd_grpc_put_load, host_port
from benchmarks.peers.etcd_load import etcd_put_load
from benchmarks.workloads.closed_loop import run_closed_loop
from benchmarks.workloads.latency import latency_columns, quantile


@pytest.fixture
def needs_etcd() -> None:
    """Fail (never skip) with the install command when etcd is missing."""
    if detect.etcd_missing() is not None:
        pytest.fail(detect.ETCD_INSTALL_HINT)


@pytest.fixture
def needs_pysyncobj() -> None:
    if detect.pysyncobj_missing() is not None:
        pytest.fail(detect.PYSYNCOBJ_INSTALL_HINT)


def test_latency_columns_give_every_percentile_and_the_max() -> None:
    values = [v / 1000 for v in range(1, 1001)]  # 1 ms .. 1000 ms
    cols = latency_columns(values)
    assert list(cols) == ["p50 ms", "p95 ms", "p99 ms", "p99.9 ms", "max ms"]
    # HdrHistogram keeps 3 significant digits
    for key, want in [("p50 ms", 500), ("p95 ms", 950), ("p99 ms", 990), ("p99.9 ms", 999)]:
        assert cols[key] == pytest.approx(want, rel=1e-3), key
    assert cols["max ms"] == pytest.approx(1000, rel=1e-3)
    assert latency_columns(values, unit="s")["p50 s"] == pytest.approx(0.5, rel=1e-3)
    assert latency_columns([]) == {}  # not measured: absent, never a zero
    assert quantile([], 50.0) == 0.0
    with pytest.raises(ValueError, match="q must be"):
        quantile(values, 101.0)
    with pytest.raises(ValueError, match="unit must be"):
        latency_columns(values, unit="us")


async def test_closed_loop_stops_at_the_request_count_and_counts_errors() -> None:
    seen: list[tuple[int, int]] = []

    async def request(worker: int, n: int) -> None:
        seen.append((worker, n))
        await asyncio.sleep(0)
        if n % 10 == 0:
            raise RuntimeError(f"request {n} refused")

    result = await run_closed_loop(request, clients=4, duration_s=60.0, max_requests=100)
    assert sorted(n for _, n in seen) == list(range(100))  # each request number once
    assert {w for w, _ in seen} == {0, 1, 2, 3}  # every worker took part
    assert result.errors == 10 and result.requests == 90
    assert result.first_error.startswith("RuntimeError: request")
    lat = result.latency()
    assert result.requests_per_s > 0 and lat["max ms"] >= lat["p99 ms"] >= lat["p50 ms"] >= 0


async def test_closed_loop_stops_at_the_deadline_with_no_more_than_clients_in_flight() -> None:
    in_flight = peak = 0

    async def request(_worker: int, _n: int) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.001)
        in_flight -= 1

    result = await run_closed_loop(request, clients=3, duration_s=0.2, max_requests=10**9)
    assert 0 < result.requests < 10**9  # ended by the deadline, not the count
    assert peak == 3


async def test_closed_loop_rejects_bad_bounds() -> None:
    async def request(_worker: int, _n: int) -> None:
        return None

    for kwargs in ({"clients": 0}, {"duration_s": 0.0}, {"max_requests": 0}):
        args = {"clients": 1, "duration_s": 1.0, "max_requests": 1, **kwargs}
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            await run_closed_loop(request, **args)  # type: ignore[arg-type]


@pytest.mark.usefixtures("needs_etcd")
async def test_closed_loop_against_etcd_measures_puts(tmp_path: Path) -> None:
    with EtcdCluster(tmp_path) as cluster:
        result = await etcd_put_load(
            cluster.client_urls, clients=4, duration_s=60.0, max_requests=40
        )
    assert result.errors == 0, result.first_error
    assert result.requests == 40
    assert len(result.latencies_s) == 40 and all(t > 0 for t in result.latencies_s)
    assert result.latency()["p99 ms"] >= result.latency()["p50 ms"] > 0


def _stored_bench_keys(client_url: str) -> int:
    """How many ``bench/`` keys etcd holds, asked through its JSON gateway (a range count)."""
    body = json.dumps(
        {
            "key": base64.b64encode(b"bench/").decode(),
            "range_end": base64.b64encode(b"bench0").decode(),  # "/" + 1: every bench/ key
            "count_only": True,
        }
    ).encode()
    request = urllib.request.Request(f"{client_url}/v3/kv/range", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=10) as resp:
        return int(json.loads(resp.read()).get("count", 0))


@pytest.mark.usefixtures("needs_etcd")
async def test_grpc_load_puts_through_etcds_grpc_api_and_every_key_is_stored(
    tmp_path: Path,
) -> None:
    if detect.aetcd_missing() is not None:
        pytest.fail(detect.AETCD_INSTALL_HINT)
    with EtcdCluster(tmp_path) as cluster:
        result = await etcd_grpc_put_load(
            cluster.client_urls, clients=6, duration_s=60.0, max_requests=50
        )
        stored = _stored_bench_keys(cluster.client_urls[0])
    assert result.errors == 0, result.first_error
    assert result.requests == 50
    assert stored == 50  # distinct keys, each put acknowledged and readable
    assert result.latency()["p99 ms"] >= result.latency()["p50 ms"] > 0


def test_grpc_load_names_a_bad_client_url() -> None:
    assert host_port("http://127.0.0.1:2379") == ("127.0.0.1", 2379)
    with pytest.raises(ValueError, match=r"expected http://HOST:PORT, got 'https://x'"):
        host_port("https://x")


@pytest.mark.usefixtures("needs_pysyncobj")
def test_pysyncobj_cluster_replicates_an_append_and_stops_by_pid(tmp_path: Path) -> None:
    from benchmarks.peers.pysyncobj_cluster import PySyncObjCluster

    cluster = PySyncObjCluster(tmp_path)
    with cluster:
        assert len(set(cluster.pids)) == 3
        assert all(a.startswith("127.0.0.1:") for a in cluster.addresses)
        assert cluster.call(0, {"cmd": "append", "value": "hello"}) == {"ok": True}
        # A follower applies the entry once it learns the new commit index (its next
        # append or heartbeat): poll, bounded, for the read-back on another node.
        deadline = time.monotonic() + 10.0
        got = cluster.call(2, {"cmd": "read"})
        while got["count"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
            got = cluster.call(2, {"cmd": "read"})
        assert got == {"count": 1, "last": "hello"}
        answers = cluster.bench(seconds=0.3, size=100, inflight=10)
        assert len(answers) == 3 and sum(a["success"] for a in answers) > 0
    assert all(node.process.poll() is not None for node in cluster.nodes)
    cluster.stop()  # idempotent
