"""Prometheus metrics of one node, served at ``/metrics``.

Per-group gauges, the per-partition gauges (``raftlog_partition_*``: log start,
log end, high watermark, LSO, bytes on disk, replication lag; labels ``topic``
and ``partition``, plus ``node``) and the per-group counters
``raftlog_fsyncs_total``, ``raftlog_recovery_requests_total`` and
``raftlog_stm_apply_errors_total`` are read from
the live groups at scrape time (and the node's ``raftlog_syncfs_total`` from its
flusher) (a custom collector), so they cost nothing
between scrapes. Counters and histograms that must be observed as events happen
(append latency, RPCs) are ordinary prometheus-client metrics in a per-node
registry, so several nodes in one process (tests) never collide in the global
registry.

A scrape never holds the node's event loop for long (:meth:`NodeMetrics.render_async`,
what ``/metrics`` serves): the groups' values are read on the loop
``RENDER_CHUNK_GROUPS`` groups per turn, and the exposition text is built in a
thread. At 10,000 groups the text is about 12 MB; built on the loop, a scrape held
it for 1.7-1.9 s on an idle machine, heartbeats to the node's peers included.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

RENDER_CHUNK_GROUPS = 500
"""Groups whose values one turn of the event loop reads for a scrape
(:meth:`NodeMetrics.render_async`): at most about 15 ms of the loop each (reading a
group and building its samples took 0.025-0.032 ms together), so replication and
heartbeats go on between turns."""


class GroupView(Protocol):
    """What the collector reads of one hosted group."""

    group_id: int
    topic: str
    partition: int

    def gauges(self) -> dict[str, float]:
        """Keys: is_leader, term, commit_index, flushed_offset, dirty_offset,
        batcher_queue_bytes, and the counters fsyncs (durability barriers of the
        group's log since it was opened), recovery_requests (appends sent by
        recovery while leading) and stm_apply_errors (committed batches a state
        machine's apply raised on, each skipped); and, for a partition, the keys of
        ``PARTITION_GAUGES`` (a key that is absent is not exported)."""
        ...

    def follower_lags(self) -> dict[int, int]:
        """On the leader, per follower (learners included): the leader's last offset
        minus the follower's matched offset, in records. Empty on a follower.
        Optional: a view without it exports no lag."""
        ...


_GAUGES = {
    "is_leader": "1 when this node leads the group, else 0",
    "term": "the group's current raft term",
    "commit_index": "the group's commit index (last committed offset)",
    "flushed_offset": "last offset fsynced on this replica",
    "dirty_offset": "last offset written on this replica (maybe not fsynced)",
    "batcher_queue_bytes": "bytes waiting in the leader's replicate batcher",
}


#: Per-partition gauges: gauges() key -> (metric name, help). Offsets follow Kafka's
#: meanings: the log end offset and the high watermark are the next offset to be
#: written and the first offset not committed, as `raftlog offsets` reports them.
PARTITION_GAUGES = {
    "log_start_offset": (
        "raftlog_partition_log_start_offset",
        "the first offset a reader may fetch (moved by retention)",
    ),
    "log_end_offset": (
        "raftlog_partition_log_end_offset",
        "the offset after the last one written on this replica (maybe not committed)",
    ),
    "high_watermark": (
        "raftlog_partition_high_watermark",
        "the first offset not committed, as this replica knows it (the leader's is the "
        "partition's)",
    ),
    "last_stable_offset": (
        "raftlog_partition_last_stable_offset",
        "the first offset of the oldest open transaction, else the high watermark",
    ),
    "size_bytes": (
        "raftlog_partition_size_bytes",
        "bytes of the replica's segment files on disk (indexes not counted)",
    ),
    "replication_lag": (
        "raftlog_partition_replication_lag",
        "on the leader: the largest lag of a follower (leader's end minus its matched "
        "offset, in records); 0 on a follower",
    ),
}


@dataclasses.dataclass(frozen=True, slots=True)
class _GroupRow:
    """One group's values as a scrape read them (on the event loop)."""

    group_id: int
    topic: str
    partition: int
    values: dict[str, float]
    lags: dict[int, int]


def _read_row(g: GroupView) -> _GroupRow:
    lags = getattr(g, "follower_lags", None)
    return _GroupRow(
        g.group_id, g.topic, g.partition, g.gauges(), lags() if lags is not None else {}
    )


class _GroupCollector(Collector):
    """The per-group and per-partition families, kept out of the node's registry (a
    scrape reads them apart from the rest). ``collect`` reads the live groups;
    :meth:`read_rows` and :meth:`families` split that into the part that must run on
    the event loop (reading the groups) and the part that may run in a thread."""

    def __init__(self, node_id: int, groups: Callable[[], Iterable[GroupView]]) -> None:
        self._node_id = str(node_id)
        self._groups = groups

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        return iter(self.families([_read_row(g) for g in list(self._groups())]))

    async def read_rows(self, chunk: int = RENDER_CHUNK_GROUPS) -> list[_GroupRow]:
        """Every group's values, ``chunk`` groups per turn of the event loop. A group
        closed meanwhile is still read once (its last values); one opened meanwhile
        waits for the next scrape."""
        groups = list(self._groups())
        rows: list[_GroupRow] = []
        for i in range(0, len(groups), chunk):
            if i:
                await asyncio.sleep(0)
            rows.extend(_read_row(g) for g in groups[i : i + chunk])
        return rows

    def families(self, rows: list[_GroupRow]) -> list[GaugeMetricFamily | CounterMetricFamily]:
        """The families of ``rows``: touches nothing live, so it may run in a thread."""
        labels = ["node", "group", "topic", "partition"]
        families = {
            k: GaugeMetricFamily(f"raftlog_group_{k}", doc, labels=labels)
            for k, doc in _GAUGES.items()
        }
        # Exposed as raftlog_fsyncs_total. Read from each group's log at scrape time: the
        # log counts every fsync it issues (flushes, segment seals, truncations, vote and
        # commit context saves), so nothing is missed and the write path pays one int add.
        fsyncs = CounterMetricFamily(
            "raftlog_fsyncs", "fsyncs of group logs on this node", labels=labels
        )
        # A leader's appends sent by recovery (a follower out of the pipeline: a restart,
        # a lost append, a window that stayed full), each read back from its log.
        recovery = CounterMetricFamily(
            "raftlog_recovery_requests",
            "appends a leader sent to followers from recovery (read back from its log)",
            labels=labels,
        )
        # Each one is a bug or a bad value in the log, skipped by the state machine: never
        # expected, so any increase is worth an alert (see raft/state_machines.py).
        apply_errors = CounterMetricFamily(
            "raftlog_stm_apply_errors",
            "committed batches a state machine's apply raised on (each skipped by it)",
            labels=labels,
        )
        part_labels = ["node", "topic", "partition"]
        partition = {
            k: GaugeMetricFamily(name, doc, labels=part_labels)
            for k, (name, doc) in PARTITION_GAUGES.items()
        }
        follower_lag = GaugeMetricFamily(
            "raftlog_partition_follower_lag",
            "on the leader, per follower: the leader's end minus the follower's matched "
            "offset, in records",
            labels=[*part_labels, "follower"],
        )
        for row in rows:
            values = row.values
            lv = [self._node_id, str(row.group_id), row.topic, str(row.partition)]
            for k, fam in families.items():
                fam.add_metric(lv, float(values.get(k, 0.0)))
            fsyncs.add_metric(lv, float(values.get("fsyncs", 0.0)))
            recovery.add_metric(lv, float(values.get("recovery_requests", 0.0)))
            apply_errors.add_metric(lv, float(values.get("stm_apply_errors", 0.0)))
            plv = [self._node_id, row.topic, str(row.partition)]
            for k, fam in partition.items():
                if k in values:
                    fam.add_metric(plv, float(values[k]))
            for follower, lag in sorted(row.lags.items()):
                follower_lag.add_metric([*plv, str(follower)], float(lag))
        return [
            *families.values(),
            fsyncs,
            recovery,
            apply_errors,
            *partition.values(),
            follower_lag,
        ]


class _SyncfsCollector(Collector):
    def __init__(self, node_id: int, syncs: Callable[[], int | None]) -> None:
        self._node_id = str(node_id)
        self._syncs = syncs

    def collect(self) -> Iterator[CounterMetricFamily]:
        # Exposed as raftlog_syncfs_total: the durability barriers that serve every group
        # of the node at once (--flush-scope node); a group's own fsyncs stay in
        # raftlog_fsyncs_total, so the two added up are every barrier the node paid.
        syncs = self._syncs()
        if syncs is None:
            return
        family = CounterMetricFamily(
            "raftlog_syncfs",
            "syncfs calls of this node: each made every group's writes durable at once",
            labels=["node"],
        )
        family.add_metric([self._node_id], float(syncs))
        yield family


class _DiskCollector(Collector):
    def __init__(self, node_id: int, disk: Callable[[], dict[str, Any]]) -> None:
        self._node_id = str(node_id)
        self._disk = disk

    def collect(self) -> Iterator[GaugeMetricFamily]:
        # The node's degraded mode (raftlog.node.disk_space): free bytes in its data
        # directory's filesystem, the reserve, and whether client writes are refused.
        status = self._disk()
        for name, doc, value in (
            ("raftlog_disk_free_bytes", "free bytes in the data directory's filesystem",
             status["free_bytes"]),
            ("raftlog_disk_min_free_bytes", "the reserve (--min-free-bytes)",
             status["min_free_bytes"]),
            ("raftlog_disk_degraded", "1 while the node refuses client writes for want of "
             "disk space (KAFKA_STORAGE_ERROR), else 0", 1 if status["degraded"] else 0),
        ):  # fmt: skip
            family = GaugeMetricFamily(name, doc, labels=["node"])
            family.add_metric([self._node_id], float(value))
            yield family


class EdgeView(Protocol):
    """What the collector reads of the node's edge limits (raftlog.rpc.edge_limits)."""

    @property
    def refusals(self) -> Mapping[str, int]: ...
    @property
    def backpressure(self) -> Mapping[str, int]: ...

    def gauges(self) -> dict[str, float]: ...


class _EdgeCollector(Collector):
    def __init__(self, node_id: int, edge: EdgeView) -> None:
        self._node_id = str(node_id)
        self._edge = edge

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        # Exposed as raftlog_edge_refusals_total / raftlog_edge_backpressure_total: read
        # from the guard's counters at scrape time, by the limit's name (its flag's).
        refusals = CounterMetricFamily(
            "raftlog_edge_refusals",
            "connections and requests refused or closed at the edge, by limit",
            labels=["node", "limit"],
        )
        for limit, n in sorted(self._edge.refusals.items()):
            refusals.add_metric([self._node_id, limit], float(n))
        backpressure = CounterMetricFamily(
            "raftlog_edge_backpressure",
            "times the node stopped reading a connection for a limit, by limit",
            labels=["node", "limit"],
        )
        for limit, n in sorted(self._edge.backpressure.items()):
            backpressure.add_metric([self._node_id, limit], float(n))
        yield refusals
        yield backpressure
        for name, value in sorted(self._edge.gauges().items()):
            gauge = GaugeMetricFamily(
                f"raftlog_edge_{name}", f"the node's {name.replace('_', ' ')} now", labels=["node"]
            )
            gauge.add_metric([self._node_id], value)
            yield gauge


class _RaftClockCollector(Collector):
    """The node clock and its heartbeats (raftlog.raft.node_clock): how many groups
    tick, how many are quiescent, and what the heartbeats cost."""

    _GAUGES = {
        "active_groups": "groups the node clock ticks (not quiescent)",
        "quiescent_groups": "groups quiescent here: no ticks, no heartbeats of their own",
        "leaderless_groups": (
            "groups whose replica here knows no leader, or one on a node declared dead"
        ),
    }
    _COUNTERS = {
        "group_heartbeats": "per-group heartbeats this node sent as leader",
        "heartbeat_batches": "heartbeat requests sent, one per peer node a round",
        "nodes_declared_dead": "times node liveness declared a peer node dead",
        # raftlog.raft.core.ELECTION_COUNTERS, summed over the node's groups
        "prevotes_started": "prevote rounds started here (a campaign's first step)",
        "votes_started": "vote rounds (new terms) started here after a won prevote",
        "campaigns_deferred": "election timeouts at which a replica let a higher-priority "
        "one campaign first",
        "votes_refused_lease": "(pre)votes refused while a live leader was heard (its lease)",
        "votes_refused_log": "(pre)votes refused to a candidate whose log is behind",
        "leaderships_won": "elections won here",
    }

    def __init__(self, node_id: int, stats: Callable[[], dict[str, float]]) -> None:
        self._node_id = str(node_id)
        self._stats = stats

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        stats = self._stats()
        for name, doc in self._GAUGES.items():
            gauge = GaugeMetricFamily(f"raftlog_raft_{name}", doc, labels=["node"])
            gauge.add_metric([self._node_id], stats[name])
            yield gauge
        for name, doc in self._COUNTERS.items():
            counter = CounterMetricFamily(f"raftlog_raft_{name}", doc, labels=["node"])
            counter.add_metric([self._node_id], stats[name])
            yield counter


class _OpenFilesCollector(Collector):
    """The node's bound on open segment files (raftlog.storage.open_files)."""

    _GAUGES = {
        "open_segment_files": "segment file descriptors the node's logs hold open",
        "open_segment_files_limit": "the bound on them (--max-open-segment-files)",
    }
    _COUNTERS = {
        "segment_files_closed": "segment descriptors closed to stay under the bound or idle",
        "open_segment_files_over_limit": "opens past the bound that found no flushed log to close",
    }

    def __init__(self, node_id: int, stats: Callable[[], dict[str, float]]) -> None:
        self._node_id = str(node_id)
        self._stats = stats

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        stats = self._stats()
        for name, doc in self._GAUGES.items():
            gauge = GaugeMetricFamily(f"raftlog_storage_{name}", doc, labels=["node"])
            gauge.add_metric([self._node_id], stats[name])
            yield gauge
        for name, doc in self._COUNTERS.items():
            counter = CounterMetricFamily(f"raftlog_storage_{name}", doc, labels=["node"])
            counter.add_metric([self._node_id], stats[name])
            yield counter


class _GcCollector(Collector):
    """The node process's garbage collector (raftlog.node.gc_policy): collections and
    the seconds they stopped the process, by generation, and the frozen objects."""

    def __init__(self, node_id: int, stats: Callable[[], dict[str, Any]]) -> None:
        self._node_id = str(node_id)
        self._stats = stats

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        stats = self._stats()
        for name, doc in (
            ("collections", "garbage collections of the node's process, by generation"),
            ("seconds", "seconds the node's process spent in garbage collections, by generation"),
        ):
            counter = CounterMetricFamily(f"raftlog_gc_{name}", doc, labels=["node", "generation"])
            for generation, value in enumerate(stats[name]):
                counter.add_metric([self._node_id, str(generation)], float(value))
            yield counter
        gauge = GaugeMetricFamily(
            "raftlog_gc_frozen_objects",
            "objects in the collector's permanent generation (the open replicas', frozen)",
            labels=["node"],
        )
        gauge.add_metric([self._node_id], float(stats["frozen_objects"]))
        yield gauge


_T = TypeVar("_T")

# One thread builds every scrape's text (and merges the shards' texts). glibc gives each
# thread that allocates an arena of its own: on the event loop's shared pool, a scrape's
# freed heap was left among what the pool's other jobs keep, and a node at 10,000
# partitions grew by 25-30 MiB a scrape (docs/performance.md, "a scrape's heap").
_RENDER_THREAD = concurrent.futures.ThreadPoolExecutor(
    max_workers=1, thread_name_prefix="metrics-render"
)


async def in_render_thread(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` on the one thread that builds the node's ``/metrics`` text."""
    return await asyncio.get_running_loop().run_in_executor(_RENDER_THREAD, fn, *args)


class NodeMetrics:
    """Every metric of one node: the per-group families (read apart, see
    :meth:`render_async`) and the rest in a registry of its own."""

    def __init__(
        self,
        node_id: int,
        groups: Callable[[], Iterable[GroupView]],
        syncs: Callable[[], int | None] = lambda: None,
        disk: Callable[[], dict[str, Any]] | None = None,
        edge: EdgeView | None = None,
        raft_clock: Callable[[], dict[str, float]] | None = None,
        open_files: Callable[[], dict[str, float]] | None = None,
        gc: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        """``syncs``: the node's syncfs calls, None when it makes none (no sample);
        ``disk``: the node's :meth:`DiskSpace.status` (None: no disk metrics);
        ``edge``: the node's edge limits, whose refusals and usage are exported;
        ``raft_clock``: the node clock's figures (``GroupHost.clock_stats``);
        ``gc``: the process's collector figures (``gc_policy.stats``; None: not exported)."""
        self.registry = CollectorRegistry(auto_describe=True)
        if edge is not None:
            self.registry.register(_EdgeCollector(node_id, edge))
        self._group_collector = _GroupCollector(node_id, groups)
        self.registry.register(_SyncfsCollector(node_id, syncs))
        if disk is not None:
            self.registry.register(_DiskCollector(node_id, disk))
        self.storage_refusals = Counter(
            "raftlog_storage_refusals",
            "client writes refused with KAFKA_STORAGE_ERROR (the disk full), by route",
            ["route"],
            registry=self.registry,
        )
        if raft_clock is not None:
            self.registry.register(_RaftClockCollector(node_id, raft_clock))
        if open_files is not None:
            self.registry.register(_OpenFilesCollector(node_id, open_files))
        if gc is not None:
            self.registry.register(_GcCollector(node_id, gc))
        self.append_latency = Histogram(
            "raftlog_append_latency_seconds",
            "produce latency from request to acknowledgement, by acks",
            ["acks"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=self.registry,
        )
        self.rpc_requests = Counter(
            "raftlog_rpc_requests",
            "RPC requests served, by route and HTTP status",
            ["route", "status"],
            registry=self.registry,
        )
        self.corrupt_batches = Counter(
            "raftlog_produce_corrupt_batches",
            "produced batches refused as corrupt before entering the log (CORRUPT_MESSAGE)",
            ["topic"],
            registry=self.registry,
        )
        # the Kafka protocol listener (raftlog.kafka.listener)
        self.kafka_requests = Counter(
            "raftlog_kafka_requests",
            "Kafka protocol requests answered, by API",
            ["api"],
            registry=self.registry,
        )
        self.kafka_connections_closed = Counter(
            "raftlog_kafka_connections_closed",
            "Kafka connections the node closed on bad input or a limit, by reason",
            ["reason"],
            registry=self.registry,
        )
        self.kafka_connections = Gauge(
            "raftlog_kafka_connections",
            "open Kafka protocol connections (at most --kafka-max-connections)",
            registry=self.registry,
        )
        self.kafka_request_bytes = Gauge(
            "raftlog_kafka_request_bytes",
            "bytes of Kafka requests being read or answered, by their declared sizes (at "
            "most --queued-max-request-bytes, or one request; over it the listener stops "
            "reading new requests)",
            registry=self.registry,
        )
        self.kafka_produced_cache_bytes = Gauge(
            "raftlog_kafka_produced_cache_bytes",
            "bytes of produced Kafka batches kept to answer fetches as they came (at most "
            "64 MiB: raftlog.kafka.records.PRODUCED_CACHE_BYTES)",
            registry=self.registry,
        )
        # the consumer group coordinator (raftlog.kafka.groups)
        self.kafka_groups = Gauge(
            "raftlog_kafka_groups",
            "consumer groups with members this node coordinates (at most --kafka-max-groups)",
            registry=self.registry,
        )
        self.kafka_group_members = Gauge(
            "raftlog_kafka_group_members",
            "members of the consumer groups this node coordinates (at most "
            "--kafka-max-group-members per group)",
            registry=self.registry,
        )
        self.kafka_group_refusals = Counter(
            "raftlog_kafka_group_refusals",
            "group requests refused by a coordinator limit, by limit",
            ["limit"],
            registry=self.registry,
        )
        self.kafka_group_rebalances = Counter(
            "raftlog_kafka_group_rebalances",
            "consumer group rebalances completed (a new generation)",
            registry=self.registry,
        )
        self.kafka_offset_commits = Counter(
            "raftlog_kafka_offset_commits",
            "partition offsets committed to __consumer_offsets (acks=all)",
            registry=self.registry,
        )
        self.kafka_group_metadata_bytes = Gauge(
            "raftlog_kafka_group_metadata_bytes",
            "subscription and assignment bytes held for the members of the groups this "
            "node coordinates",
            registry=self.registry,
        )

    def render(self) -> bytes:
        """The exposition text of every metric, built here (see :meth:`render_async`)."""
        return _render_families([*self.registry.collect(), *self._group_collector.collect()])

    async def render_async(self) -> bytes:
        """The same text as :meth:`render`, without holding the event loop: the groups'
        values are read ``RENDER_CHUNK_GROUPS`` per turn, the node's other metrics in
        one turn (a few dozen samples), and the text is built in a thread from what
        was read (nothing live is touched there)."""
        rows = await self._group_collector.read_rows()
        others = list(self.registry.collect())
        return await in_render_thread(self._exposition, others, rows)

    def _exposition(self, others: list[Metric], rows: list[_GroupRow]) -> bytes:
        return _render_families([*others, *self._group_collector.families(rows)])


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def _render_families(families: list[Metric]) -> bytes:
    """The exposition text of ``families`` (already read: nothing live is touched)."""
    registry = CollectorRegistry()
    registry.register(_Families(families))
    return generate_latest(registry)


def merge_shard_metrics(texts: dict[int, bytes]) -> bytes:
    """One exposition of a node of several processes (:mod:`raftlog.node.shards`):
    every shard's samples (``texts``: shard -> its ``/metrics``), each labelled with
    its ``shard``, a family that several shards export rendered once."""
    merged: dict[str, Metric] = {}
    for shard, text in sorted(texts.items()):
        for family in text_string_to_metric_families(text.decode()):
            into = merged.get(family.name)
            if into is None:
                into = merged[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit
                )
            for s in family.samples:
                into.samples.append(s._replace(labels={**s.labels, "shard": str(shard)}))
    return _render_families(list(merged.values()))
