"""What the console shows, gathered from a cluster as any client sees it.

One :class:`ConsoleSource` per page server. Each :meth:`ConsoleSource.view` asks:

- :func:`raftlog.health.check_health`: nodes up or down, their last heartbeat, free
  disk and degraded mode, lagging replicas, the problems;
- ``describe_topic`` of every topic: partitions, leaders, replicas, log start, high
  watermark and last stable offset (each leader's own view);
- every up node's ``/metrics`` (``raftlog_partition_size_bytes``): the bytes of each
  topic's replicas; rates are the change since this source's previous view;
- every up node's ``GET /transactions`` (:mod:`raftlog.node.transactions_view`): the
  transaction coordinators' records, read leniently (missing fields show as "-"),
  so that a change of the coordinator's state costs the console a column, never the
  page.

Nothing is written anywhere. A view takes a few requests per node and per topic,
each bounded by the client's timeouts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from raftlog.client import RaftlogClient, RaftlogError
from raftlog.coordinator.tm_stm import TRANSACTIONS_TOPIC
from raftlog.health import HealthReport, check_health

NODE_TIMEOUT_S = 2.0
"""How long a node's /metrics or /transactions may take before it is left out."""


@dataclasses.dataclass(slots=True)
class ConsoleSource:
    """Where the console reads the cluster: seed addresses, the client token and the CA
    (None: plain HTTP). Keeps the previous view's counters for the rates."""

    servers: list[str]
    auth_token: str | None = None
    tls_ca_file: str | None = None
    _client: RaftlogClient | None = None
    _previous: tuple[float, dict[str, tuple[int, int]]] | None = None
    _lock: asyncio.Lock | None = None

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def view(self) -> dict[str, Any]:
        """The page's data (see the module doc); one view at a time."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._client is None:
                self._client = RaftlogClient(
                    list(self.servers),
                    auth_token=self.auth_token,
                    tls_ca_file=self.tls_ca_file,
                    request_timeout_s=5.0,
                )
            return await self._gather(self._client)

    async def _gather(self, client: RaftlogClient) -> dict[str, Any]:
        report = await check_health(client, self.servers, self.auth_token)
        up = [n for n in report.nodes if n.up]
        headers = {"Authorization": f"Bearer {self.auth_token}"} if self.auth_token else {}
        connector = aiohttp.TCPConnector(ssl=client.tls_context or False)
        async with aiohttp.ClientSession(connector=connector, headers=headers) as session:

            async def get(address: str, path: str) -> str | None:
                try:
                    async with session.get(
                        client.url(address, path),
                        timeout=aiohttp.ClientTimeout(total=NODE_TIMEOUT_S),
                    ) as resp:
                        return await resp.text() if resp.status == 200 else None
                except (aiohttp.ClientError, OSError, TimeoutError):
                    return None

            metrics, transactions = await asyncio.gather(
                asyncio.gather(*(get(n.address, "/metrics") for n in up)),
                asyncio.gather(*(get(n.address, "/transactions") for n in up)),
            )
        topics, topic_error = await _topics(client)
        now = time.monotonic()
        sizes = _partition_sizes([m for m in metrics if m])
        rows = _topic_rows(topics, sizes, report)
        counters = {t["name"]: (t["records"], t["bytes"]) for t in rows}
        if self._previous is not None:
            then, before = self._previous
            elapsed = max(now - then, 1e-3)
            for t in rows:
                old = before.get(t["name"])
                if old is not None:
                    t["records_per_s"] = max(0.0, (t["records"] - old[0]) / elapsed)
                    t["bytes_per_s"] = max(0.0, (t["bytes"] - old[1]) / elapsed)
        self._previous = (now, counters)
        writers, open_txns = _writers([x for x in transactions if x])
        return {
            "time": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "healthy": report.healthy,
            "problems": list(report.problems) + ([topic_error] if topic_error else []),
            "controller_leader": report.controller_leader,
            "nodes": [dataclasses.asdict(n) for n in report.nodes],
            "topics": rows,
            "writers": writers,
            "open_transactions": open_txns,
        }


async def _topics(client: RaftlogClient) -> tuple[list[Any], str]:
    try:
        names = await client.list_topics()
        return [await client.describe_topic(n) for n in names], ""
    except RaftlogError as exc:
        return [], f"cannot read the topics: {exc}"


def _partition_sizes(texts: list[str]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> bytes of its replicas on every node that answered."""
    sizes: dict[tuple[str, int], int] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            if family.name != "raftlog_partition_size_bytes":
                continue
            for sample in family.samples:
                key = (sample.labels.get("topic", ""), int(sample.labels.get("partition", -1)))
                sizes[key] = sizes.get(key, 0) + int(sample.value)
    return sizes


def _topic_rows(
    topics: list[Any], sizes: dict[tuple[str, int], int], report: HealthReport
) -> list[dict[str, Any]]:
    lagging: dict[tuple[str, int], list[str]] = {}
    for r in report.lagging:
        lagging.setdefault((r.topic, r.partition), []).append(
            f"node {r.node}: {r.behind_records} behind for {r.not_caught_up_ms} ms"
        )
    up = {n.node_id for n in report.nodes if n.up}
    rows = []
    for t in topics:
        parts = []
        for p in t.partitions:
            parts.append(
                {
                    "partition": p.partition,
                    "leader": p.leader,
                    "replicas": list(p.replicas),
                    "down": [r for r in p.replicas if r not in up],
                    "start_offset": p.start_offset,
                    "high_watermark": p.high_watermark,
                    "last_stable_offset": p.last_stable_offset,
                    "bytes": sizes.get((t.name, p.partition), 0),
                    "lagging": lagging.get((t.name, p.partition), []),
                }
            )
        rows.append(
            {
                "name": t.name,
                "internal": t.name == TRANSACTIONS_TOPIC,
                "partitions": parts,
                "records": sum(max(0, p["high_watermark"]) for p in parts),
                "bytes": sum(p["bytes"] for p in parts),
                "records_per_s": None,
                "bytes_per_s": None,
            }
        )
    return rows


def _writers(answers: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(Spark writers with their newest micro-batches, open transactions) from the
    nodes' /transactions answers; each coordinator partition from its most advanced
    answer (a node that just lost the leadership may still answer)."""
    import json

    best: dict[int, dict[str, Any]] = {}
    for text in answers:
        try:
            doc = json.loads(text)
        except ValueError:
            continue
        for coord in doc.get("coordinators", []):
            p = coord.get("partition", -1)
            if p not in best or coord.get("applied_offset", -1) > best[p].get("applied_offset", -1):
                best[p] = coord
    writers: list[dict[str, Any]] = []
    open_txns: list[dict[str, Any]] = []
    for coord in best.values():
        times = coord.get("decision_times_ms", {})
        for writer_id, writer in coord.get("writers", {}).items():
            batches = []
            for number, version in writer.get("versions", {}).items():
                batch = _batch(int(number), version, times)
                batches.append(batch)
                if batch["state"] in ("open", "committing", "aborting"):
                    open_txns.append({"writer": writer_id, **batch})
            batches.sort(key=lambda b: b["version"], reverse=True)
            writers.append(
                {
                    "writer": writer_id,
                    "last_committed": writer.get("last_committed", -1),
                    "batches": batches,
                }
            )
    writers.sort(
        key=lambda w: max((b["time_ms"] or 0 for b in w["batches"]), default=0), reverse=True
    )
    return writers, open_txns


def _batch(number: int, version: dict[str, Any], times: dict[str, int]) -> dict[str, Any]:
    """One micro-batch (a version) as the coordinator recorded it."""
    decisions = list(version.get("decisions", {}).values())
    committed_by = version.get("committed_by")
    decision = version.get("decisions", {}).get(committed_by) if committed_by else None
    if decision is None and decisions:
        decision = decisions[-1]
    named = decision.get("named", []) if decision else []
    participants = version.get("participants", [])
    if decision is None:
        state = "open"
    elif decision.get("commit"):
        state = "committed" if decision.get("complete") else "committing"
    else:
        state = "aborted" if decision.get("complete") else "aborting"
    records = [p.get("records", -1) for p in named]
    shown = named or participants
    return {
        "version": number,
        "state": state,
        "rows": sum(r for r in records if r > 0) if named else None,
        "partitions": len({(p.get("topic"), p.get("partition")) for p in shown}),
        "topics": sorted({str(p.get("topic")) for p in shown}),
        "participants": len(participants),
        "time_ms": times.get(str(decision.get("offset"))) if decision else None,
    }
