"""Every node's ``/metrics`` gives, per partition (labels ``topic``, ``partition``), the
log start and end, high watermark, LSO, bytes on disk and replication lag, in
Prometheus' text format: scraped from a real 3-node cluster, parsed with
prometheus-client's parser, and checked against ``raftlog offsets``, the files on
disk and the records written.
"""

from __future__ import annotations

import json
import pathlib
import urllib.request

from ops_helpers import ops_cluster, run_cli, wait_until
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.workloads.cluster_handle import ClusterHandle
from raftlog.client import RaftlogClient, frame_records

# name -> the key `raftlog offsets --format json` reports it under
OFFSET_METRICS = {
    "raftlog_partition_log_start_offset": "log_start",
    "raftlog_partition_high_watermark": "high_watermark",
    "raftlog_partition_last_stable_offset": "last_stable_offset",
}


def _offsets(servers: list[str], topic: str) -> dict[int, dict[str, int]]:
    r = run_cli(servers, "offsets", topic, "--format", "json")
    assert r.returncode == 0, r.stderr
    return {p["partition"]: p for p in json.loads(r.stdout)["partitions"]}


def _scrape(address: str) -> dict[tuple[str, ...], float]:
    """(metric name, topic, partition[, follower]) -> value of the partition gauges."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    out: dict[tuple[str, ...], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if not s.name.startswith("raftlog_partition_"):
                continue
            key = (s.name, s.labels["topic"], s.labels["partition"])
            if "follower" in s.labels:
                key += (s.labels["follower"],)
            out[key] = s.value
    return out


def _segment_bytes(directory: pathlib.Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.log"))


async def _produce(client: RaftlogClient, topic: str, partition: int, n: int) -> None:
    for i in range(0, n, 50):
        records = [f"{topic}-{partition}-{j}".encode() * 40 for j in range(i, min(n, i + 50))]
        await client.produce(topic, partition, [(frame_records(records), len(records))])


async def test_metrics_give_offsets_bytes_and_lag_per_partition(
    ops_cluster: ClusterHandle,
) -> None:
    cluster = ops_cluster
    servers = cluster.servers
    async with RaftlogClient(servers, request_timeout_s=30.0) as client:
        await client.create_topic(
            "measured", 2, 3, configs={"segment.bytes": "16384", "retention.bytes": "32768"}
        )
        await _produce(client, "measured", 0, 600)  # ~1 MB: retention moves the start
        await _produce(client, "measured", 1, 30)

        def moved() -> dict[int, dict[str, int]] | None:
            offsets = _offsets(servers, "measured")
            return offsets if offsets[0]["log_start"] > 0 else None

        wait_until(moved, 30.0, "retention to move partition 0's log start")
        meta = await client.describe_topic("measured")
        leaders = {p.partition: p.leader for p in meta.partitions}

        def settled() -> tuple[dict[int, dict[str, int]], dict[int, dict]] | None:
            """Offsets and every node's scrape, when they agree and stand still."""
            before = _offsets(servers, "measured")
            scrapes = {n.node_id: _scrape(n.address) for n in cluster.nodes}
            after = _offsets(servers, "measured")
            if before != after:
                return None
            for part, leader in leaders.items():
                got = scrapes[leader]
                for name, key in OFFSET_METRICS.items():
                    if got.get((name, "measured", str(part))) != before[part][key]:
                        return None
                lag = got.get(("raftlog_partition_replication_lag", "measured", str(part)))
                if lag != 0:
                    return None
            # every replica deletes below the agreed log start on its own timer, once it
            # holds a snapshot there: settled when each one's scrape shows its disk
            for n in cluster.nodes:
                for part in (0, 1):
                    where = (
                        cluster.data_dir
                        / f"node-{n.node_id}"
                        / "partitions"
                        / "measured"
                        / str(part)
                    )
                    size = ("raftlog_partition_size_bytes", "measured", str(part))
                    if scrapes[n.node_id].get(size) != _segment_bytes(where):
                        return None
            return before, scrapes

        offsets, scrapes = wait_until(settled, 30.0, "metrics that match `raftlog offsets`")
        assert offsets[0]["log_start"] > 0 and offsets[1]["log_start"] == 0
        # offsets count control entries (configurations) too: at least the records written
        assert offsets[1]["high_watermark"] >= 30
        for part, leader in leaders.items():
            got = scrapes[leader]
            p = str(part)
            # nothing is open or in flight: the leader's log ends at its high watermark
            assert (
                got[("raftlog_partition_log_end_offset", "measured", p)]
                == (offsets[part]["high_watermark"])
            )
            # the leader's lag per follower: both caught up
            followers = [r for r in meta.partitions[part].replicas if r != leader]
            for f in followers:
                assert got[("raftlog_partition_follower_lag", "measured", p, str(f))] == 0
                # a follower exports no lag of others (its view of them is stale)
                assert ("raftlog_partition_replication_lag", "measured", p) in scrapes[f]
                assert scrapes[f][("raftlog_partition_replication_lag", "measured", p)] == 0
                assert not any(
                    k[0] == "raftlog_partition_follower_lag" and k[2] == p for k in scrapes[f]
                )
        # bytes on disk: each replica's own segment files, as the directory shows them
        for n in cluster.nodes:
            for part in (0, 1):
                on_disk = _segment_bytes(
                    cluster.data_dir / f"node-{n.node_id}" / "partitions" / "measured" / str(part)
                )
                reported = scrapes[n.node_id][
                    ("raftlog_partition_size_bytes", "measured", str(part))
                ]
                assert reported == on_disk > 0, (n.node_id, part)
        # retention kept partition 0 small on disk, and the metric shows it
        assert scrapes[leaders[0]][("raftlog_partition_size_bytes", "measured", "0")] < 200_000

        # A killed follower's lag grows by exactly the records written after it died.
        leader = leaders[1]
        follower = next(r for r in meta.partitions[1].replicas if r != leader)
        end_before = offsets[1]["high_watermark"]
        cluster.kill(follower)
        await _produce(client, "measured", 1, 70)
        leader_addr = cluster.address(leader)
        other = next(r for r in meta.partitions[1].replicas if r not in (leader, follower))

        def lagging() -> dict | None:
            got = _scrape(leader_addr)
            end = got[("raftlog_partition_log_end_offset", "measured", "1")]
            caught_up = got[("raftlog_partition_follower_lag", "measured", "1", str(other))]
            hwm = got[("raftlog_partition_high_watermark", "measured", "1")]
            # two of three replicas still commit: the high watermark reaches the end
            done = end >= end_before + 70 and caught_up == 0 and hwm == end
            return got if done else None

        got = wait_until(
            lagging, 10.0, "the 70 new records committed by the leader and one follower"
        )
        # the dead follower had matched everything up to end_before: it lags by the rest
        end_after = got[("raftlog_partition_log_end_offset", "measured", "1")]
        lag = got[("raftlog_partition_follower_lag", "measured", "1", str(follower))]
        assert lag == end_after - end_before >= 70
        assert got[("raftlog_partition_replication_lag", "measured", "1")] == lag


__all__ = ["ops_cluster"]  # the fixture, imported for pytest


async def test_nodes_freeze_their_open_replicas_and_export_their_collections(
    ops_cluster: ClusterHandle,
) -> None:
    """``raftlog server`` installs raftlog.node.gc_policy: once a topic's replicas are
    open, each node's /metrics shows the objects frozen (the permanent generation) and
    its collections counted by generation."""
    async with RaftlogClient(ops_cluster.servers, request_timeout_s=30.0) as client:
        await client.create_topic("frozen", 8, 3)
        await client.describe_topic("frozen", wait_for_leaders_s=2.0)
    for address in ops_cluster.servers:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as resp:
            families = {f.name: f for f in text_string_to_metric_families(resp.read().decode())}
        frozen = families["raftlog_gc_frozen_objects"].samples
        assert len(frozen) == 1 and frozen[0].value > 10_000, frozen
        collections = {
            s.labels["generation"]: s.value
            for s in families["raftlog_gc_collections"].samples
            if s.name == "raftlog_gc_collections_total"
        }
        assert sorted(collections) == ["0", "1", "2"], collections
        assert collections["0"] > 0, collections
        seconds = [
            s.value for s in families["raftlog_gc_seconds"].samples if s.name.endswith("_total")
        ]
        assert len(seconds) == 3 and all(v >= 0 for v in seconds), seconds
