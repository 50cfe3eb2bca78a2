"""Cluster health: what ``raftlog cluster health`` reports.

A report is built from what any client can see, so it works against every
cluster (local or not):

- the nodes, from the cluster metadata (or, when no node answers, the
  addresses the client was given); a node is *up* when its ``/health`` answers;
  its *last heartbeat* is how long ago the controller leader last heard from it
  (the controller group spans every node, so its leader hears from each one
  every heartbeat interval); unknown without an agreed controller leader;
- the controller leader, as the answering nodes see it: the cluster has one
  when every up node names the same leader and that leader is up;
- per partition (the metadata with each leader, as :meth:`RaftlogClient.describe_topic`
  gives it, for every topic in one call), *leaderless*
  when no leader is known or the leader is on a down node, and
  *under-replicated* when any of its replicas is on a down node;
- *lagging replicas*: replicas on up nodes that their partition's leader reports
  (its ``/health``, ``lagging_replicas``) as not caught up to its log end for
  longer than its ``--replica-lag-time-max-ms`` (30 s by default): Kafka's rule
  for dropping a follower out of the ISR (``replica.lag.time.max.ms``), over the
  progress the leader tracks (``raftlog.node.replica_lag``). As in Kafka, such a
  partition is under-replicated (out of ISR): the cluster is not healthy. It is
  listed under ``lagging_replicas``; ``under_replicated_partitions`` keeps its
  meaning (replicas on down nodes).
- *degraded nodes*: up nodes whose ``/health`` reports their data directory's free
  space below their ``--min-free-bytes`` (``raftlog.node.disk_space``): they refuse
  produce with ``KAFKA_STORAGE_ERROR`` and serve reads. Each is named with its free
  space; the cluster is not healthy while any is.

- *unopened replicas*: partition replicas a node failed to open (its ``/health``,
  ``open_failures``: the node, topic/partition and the error); the node retries
  them with backoff while its other groups serve.

The cluster is healthy when every node is up, a controller leader is agreed,
no partition is leaderless or under-replicated, no replica lags and every replica
opened; ``problems`` says, one line each, what is not.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import aiohttp

from raftlog.client import RaftlogClient, RaftlogError
from raftlog.client.results import topic_metadata

__all__ = [
    "HealthReport",
    "LaggingReplica",
    "NodeHealth",
    "PartitionHealth",
    "UnopenedReplica",
    "check_health",
]

#: How long one node's ``/health`` may take before the node counts as down.
NODE_TIMEOUT_S = 2.0


@dataclasses.dataclass(frozen=True, slots=True)
class NodeHealth:
    node_id: int  # -1 when only the address is known (no node answered the metadata)
    address: str
    up: bool
    controller_leader: int  # as this node sees it; -1 unknown or down
    error: str = ""  # why it counts as down
    # ms since the controller leader last heard from this node (0 for the leader
    # itself); -1 when unknown (no controller leader, or it does not track the node)
    last_heartbeat_ms: int = -1
    # the node's data directory's free bytes (-1 unknown), and whether it refuses
    # client writes for want of space (degraded mode), with its own words why
    free_bytes: int = -1
    degraded: bool = False
    degraded_reason: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionHealth:
    topic: str
    partition: int
    leader: int
    replicas: list[int]
    down_replicas: list[int]


@dataclasses.dataclass(frozen=True, slots=True)
class LaggingReplica:
    """A replica on an up node that its partition's leader reports lagging."""

    topic: str
    partition: int
    leader: int
    node: int
    behind_records: int  # the leader's last offset minus the replica's matched offset
    not_caught_up_ms: int  # since the replica last caught up to the leader's log end


@dataclasses.dataclass(frozen=True, slots=True)
class UnopenedReplica:
    """A partition replica that its node failed to open (and retries)."""

    node: int
    topic: str
    partition: int
    error: str
    attempts: int


@dataclasses.dataclass(slots=True)
class HealthReport:
    nodes: list[NodeHealth]
    controller_leader: int  # -1 when the up nodes agree on none
    leaderless: list[PartitionHealth]
    under_replicated: list[PartitionHealth]
    problems: list[str]
    lagging: list[LaggingReplica] = dataclasses.field(default_factory=list)
    unopened: list[UnopenedReplica] = dataclasses.field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy,
            "controller_leader": self.controller_leader,
            "nodes": [dataclasses.asdict(n) for n in self.nodes],
            "leaderless_partitions": [dataclasses.asdict(p) for p in self.leaderless],
            "under_replicated_partitions": [dataclasses.asdict(p) for p in self.under_replicated],
            "problems": list(self.problems),
            "lagging_replicas": [dataclasses.asdict(r) for r in self.lagging],
            "unopened_replicas": [dataclasses.asdict(r) for r in self.unopened],
        }

    def render(self) -> str:
        """The report as text, one fact per line (what the CLI prints)."""
        lines = [f"healthy: {'yes' if self.healthy else 'no'}"]
        leader = self.controller_leader
        lines.append(f"controller leader: {leader if leader >= 0 else 'none'}")
        for n in self.nodes:
            ident = f"node {n.node_id}" if n.node_id >= 0 else "server"
            state = "up" if n.up else f"down ({n.error})" if n.error else "down"
            beat = (
                f"last heartbeat {n.last_heartbeat_ms} ms ago"
                if n.last_heartbeat_ms >= 0
                else "last heartbeat unknown"
            )
            disk = ""
            if n.free_bytes >= 0:
                disk = f"  disk free {format_bytes(n.free_bytes)}"
                disk += "  DEGRADED (refuses writes: disk full)" if n.degraded else ""
            lines.append(f"{ident}  {n.address}  {state}  {beat}{disk}")
        for title, parts in (
            ("leaderless partitions", self.leaderless),
            ("under-replicated partitions", self.under_replicated),
        ):
            lines.append(f"{title}: {len(parts)}")
            for p in parts:
                down = ",".join(map(str, p.down_replicas)) or "-"
                lines.append(
                    f"  {p.topic}/{p.partition}  leader {p.leader}  replicas "
                    f"{','.join(map(str, p.replicas))}  down {down}"
                )
        if self.lagging:  # only then: a report without any reads as it always did
            lines.append(f"lagging replicas: {len(self.lagging)}")
        for r in self.lagging:
            lines.append(
                f"  {r.topic}/{r.partition}  node {r.node}  leader {r.leader}  "
                f"{r.behind_records} records behind  not caught up for {r.not_caught_up_ms} ms"
            )
        if self.unopened:  # only then, as lagging replicas
            lines.append(f"unopened replicas: {len(self.unopened)}")
        for u in self.unopened:
            lines.append(
                f"  {u.topic}/{u.partition}  node {u.node}  failed to open "
                f"({u.attempts} attempts): {u.error}"
            )
        lines += [f"problem: {p}" for p in self.problems]
        return "\n".join(lines)


async def _node_health(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str]
) -> tuple[dict[str, Any] | None, str]:
    try:
        async with session.get(
            url,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=NODE_TIMEOUT_S),
        ) as resp:
            if resp.status != 200:
                return None, f"/health answered HTTP {resp.status}"
            return await resp.json(content_type=None), ""
    except TimeoutError:
        return None, f"/health did not answer within {NODE_TIMEOUT_S:g}s"
    except aiohttp.ClientConnectorError as exc:
        return None, f"cannot connect: {exc.os_error.strerror or exc.os_error}"
    except (aiohttp.ClientError, ValueError) as exc:
        return None, str(exc) or type(exc).__name__


def _last_heard(state: dict[str, Any] | None, controller: int) -> dict[int, int]:
    """node -> ms since the controller leader heard from it, from the leader's /health."""
    if state is None:
        return {}
    heard = {controller: 0}
    raw = state.get("last_heard_ms")
    if isinstance(raw, dict):
        for node, ms in raw.items():
            if str(node).isdigit() and isinstance(ms, int):
                heard[int(node)] = ms
    return heard


async def check_health(
    client: RaftlogClient, seeds: list[str], auth_token: str | None = None
) -> HealthReport:
    """Build the report (see the module doc) through ``client``; ``seeds`` are the
    addresses it was given, reported as down servers when no node answers.

    The partitions come from one metadata call with their leaders (the answering node
    asks each other node once): at 10,000 partitions, a describe per topic (100 calls,
    each asking the leaders) made the report take 1-1.5 s of a 2 s goal."""
    problems: list[str] = []
    try:
        meta = await client.metadata(with_offsets=True)
        described = [topic_metadata(t) for t in meta.topics]
    except RaftlogError as offsets_error:
        try:
            meta = await client.metadata()
        except RaftlogError as exc:
            nodes = [NodeHealth(-1, a, False, -1, "does not answer") for a in seeds]
            return HealthReport(nodes, -1, [], [], [f"no node answers: {exc}"])
        problems.append(f"cannot read the topics' partitions: {offsets_error}")
        described = []
    headers = {"Authorization": f"Bearer {auth_token}"} if auth_token else {}
    # the client's TLS (its CA) verifies the nodes' /health too
    tls = client.tls_context
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls or False)) as session:
        answers = await asyncio.gather(
            *(_node_health(session, client.url(n.address, "/health"), headers) for n in meta.nodes)
        )
    states = {info.node_id: state for info, (state, _) in zip(meta.nodes, answers, strict=True)}
    views = {int(s.get("controller_leader", -1)) for s in states.values() if s is not None}
    controller = views.pop() if len(views) == 1 else -1
    if states.get(controller) is None:
        controller = -1
    heard = _last_heard(states.get(controller), controller)
    nodes = []
    for info, (state, error) in zip(meta.nodes, answers, strict=True):
        leader = int(state.get("controller_leader", -1)) if state else -1
        beat = heard.get(info.node_id, -1)
        disk = _disk(state)
        nodes.append(
            NodeHealth(info.node_id, info.address, state is not None, leader, error, beat, *disk)
        )
        if disk[1]:
            problems.append(
                f"node {info.node_id} ({info.address}) is degraded: {format_bytes(disk[0])} "
                f"free, refuses writes: {disk[2]}"
            )
        if state is None:
            last = f"; last heartbeat {beat} ms ago" if beat >= 0 else ""
            problems.append(f"node {info.node_id} ({info.address}) is down: {error}{last}")
    up = {n.node_id for n in nodes if n.up}
    if controller < 0:
        problems.append(
            "no controller leader is agreed by the up nodes "
            f"(their views: {sorted(n.controller_leader for n in nodes if n.up)})"
        )
    leaderless: list[PartitionHealth] = []
    under: list[PartitionHealth] = []
    for topic in described:
        for p in topic.partitions:
            down = [r for r in p.replicas if r not in up]
            ph = PartitionHealth(topic.name, p.partition, p.leader, list(p.replicas), down)
            if p.leader < 0 or p.leader not in up:
                leaderless.append(ph)
            if down:
                under.append(ph)
    if leaderless:
        problems.append(f"{len(leaderless)} partition(s) have no leader")
    if under:
        problems.append(f"{len(under)} partition(s) are under-replicated")
    leaders = {(t.name, p.partition): p.leader for t in described for p in t.partitions}
    lagging = _lagging(states, leaders, up)
    if lagging:
        behind = sorted({(r.topic, r.partition) for r in lagging})
        problems.append(
            f"{len(behind)} partition(s) are under-replicated by lagging replicas "
            f"(up, but not caught up to the leader in time): "
            + ", ".join(f"{t}/{p}" for t, p in behind)
        )
    unopened = _unopened(states)
    for u in unopened:
        problems.append(
            f"node {u.node} failed to open its replica of {u.topic}/{u.partition} "
            f"({u.attempts} attempts, retrying): {u.error}"
        )
    return HealthReport(nodes, controller, leaderless, under, problems, lagging, unopened)


def _unopened(states: dict[int, dict[str, Any] | None]) -> list[UnopenedReplica]:
    """The replicas each up node reports it failed to open (its /health), sorted."""
    out = []
    for node, state in states.items():
        raw = state.get("open_failures") if state else None
        for r in raw if isinstance(raw, list) else []:
            try:
                out.append(
                    UnopenedReplica(
                        node,
                        str(r["topic"]),
                        int(r["partition"]),
                        str(r["error"]),
                        int(r["attempts"]),
                    )
                )
            except (KeyError, TypeError, ValueError):
                continue  # a node of another version: nothing to report from it
    return sorted(out, key=lambda u: (u.topic, u.partition, u.node))


def format_bytes(n: int) -> str:
    """``n`` bytes in MiB, as the nodes word their free space (health may not import
    the node's code: the report is built from what any client sees)."""
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    mib = n / (1024 * 1024)
    if mib >= 10 * 1024:  # a disk's free space, a big topic: GiB reads at a glance
        gib = mib / 1024
        return f"{gib:.1f} GiB" if gib < 100 else f"{gib:.0f} GiB"
    return f"{mib:.1f} MiB" if mib < 10 else f"{mib:.0f} MiB"


def _disk(state: dict[str, Any] | None) -> tuple[int, bool, str]:
    """(free bytes, degraded, why) from a node's /health; (-1, False, "") when it has none."""
    raw = state.get("disk") if state else None
    if not isinstance(raw, dict):
        return -1, False, ""  # down, or a node of an older version
    try:
        return int(raw["free_bytes"]), bool(raw["degraded"]), str(raw.get("reason", ""))
    except (KeyError, TypeError, ValueError):
        return -1, False, ""


def _lagging(
    states: dict[int, dict[str, Any] | None],
    leaders: dict[tuple[str, int], int],
    up: set[int],
) -> list[LaggingReplica]:
    """The lagging replicas the partitions' current leaders report (from their /health),
    on up nodes only (a down replica is reported as such), sorted."""
    out = []
    for node, state in states.items():
        raw = state.get("lagging_replicas") if state else None
        for r in raw if isinstance(raw, list) else []:
            try:
                where = (str(r["topic"]), int(r["partition"]))
                lag = LaggingReplica(
                    where[0],
                    where[1],
                    node,
                    int(r["node"]),
                    int(r["behind_records"]),
                    int(r["not_caught_up_ms"]),
                )
            except (KeyError, TypeError, ValueError):
                continue  # a node of another version: nothing to report from it
            if leaders.get(where) == node and lag.node in up:
                out.append(lag)
    return sorted(out, key=lambda r: (r.topic, r.partition, r.node))
