"""Thousands of partitions on a local cluster: create them, watch their leaders, time a failover.

One implementation for the ``idle`` and ``partitions`` scenarios and the failover at
scale test (``integration_tests/cluster/test_failover_at_scale.py``):

- :func:`create_partitions`: topics of at most ``TOPIC_PARTITIONS`` partitions (3
  replicas), created through the controller one after the other (each command places
  a batch), until ``total``;
- :func:`leaders`: each partition's leader as one node reports it (its own replicas'
  view: a new leader reports itself at once);
- :func:`reelection_times`: after a kill, per partition the dead node led, the seconds
  until its new leader took over, by that leader's own clock (it reports when it
  became leader), and until a poll first found it led (an upper bound);
- :func:`node_resources`: a node process's resident memory and open descriptors.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from typing import Any

from raftlog.rpc.messages import MetadataRequest, MetadataResponse

TOPIC_PARTITIONS = 100
"""Partitions per topic created: one controller command places that many."""
POLL_S = 2.0
"""How often each live node is asked for its leaders after a kill (from one ask's send
to the next's). A metadata answer of 3,000 partitions blocks a node's loop while it is
built; asked back to back (every 0.1 s, each answer taking longer than that), the
poll took 40-60% of each live node's loop during the failover it measured (py-spy,
2026-12-03), and the elections it timed waited behind it. The re-election times come
from the new leaders' own clocks (:class:`Reelection`), so the polls' pace only
bounds how soon the last one is known."""
LEADER_WAIT_S = 2.0
"""How long a node may hold a new topic's description until every partition is led."""


async def create_partitions(
    client: Any, prefix: str, have: int, total: int, batch_bound_s: float = 600.0
) -> int:
    """Create topics ``<prefix>-<i>`` of up to TOPIC_PARTITIONS partitions (3 replicas)
    from ``have`` partitions until ``total``; the count now.

    In batches: each topic's partitions are led before the next topic is created.
    Thousands of new groups electing at once on a loaded machine churned (every node's
    loop behind on their votes' fsyncs, elections timed out, each new term cost more
    fsyncs: 3,000 at once had 1,222 led after 15 min); a batch of 100 elects and goes
    quiet before the next."""
    while have < total:
        n = min(TOPIC_PARTITIONS, total - have)
        name = f"{prefix}-{have // TOPIC_PARTITIONS}"
        # exist_ok: a create the client retried after a timeout may have committed
        await client.create_topic(name, n, 3, exist_ok=True)
        await _wait_topic_led(client, name, batch_bound_s)
        have += n
    return have


async def _wait_topic_led(client: Any, name: str, bound_s: float) -> None:
    """Until every partition of ``name`` has a leader (a node too busy to answer in
    time is asked again); AssertionError after ``bound_s``.

    The node holds each answer until the last leader is known (``wait_for_leaders_s``,
    up to LEADER_WAIT_S): polled every 0.5 s instead, the wait added a quarter of a
    second per topic on average, 25 s of any 10,000 partitions' creation."""
    deadline = time.monotonic() + bound_s
    leaders_: list[int] = []
    while time.monotonic() < deadline:
        try:
            meta = await client.describe_topic(name, wait_for_leaders_s=LEADER_WAIT_S)
            leaders_ = [p.leader for p in meta.partitions]
        except Exception:
            leaders_ = []
            await asyncio.sleep(0.5)
        if leaders_ and all(v > 0 for v in leaders_):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"topic {name!r} not led after {bound_s} s: {leaders_}")


async def leaders(client: Any, prefix: str) -> dict[tuple[str, int], int]:
    """(topic, partition) -> leader node (-1: none) of every ``prefix-*`` topic, as the
    node the client asks reports it."""
    topics = (await client.metadata()).topics
    return {
        (t.name, p.partition): p.leader
        for t in topics
        if t.name.startswith(prefix + "-")
        for p in t.partitions
    }


async def wait_all_led(
    client: Any, prefix: str, total: int, bound_s: float
) -> dict[tuple[str, int], int]:
    """The leaders once all ``total`` partitions have one; AssertionError after ``bound_s``."""
    deadline = time.monotonic() + bound_s
    found: dict[tuple[str, int], int] = {}
    while time.monotonic() < deadline:
        try:
            found = await leaders(client, prefix)
        except Exception:  # a node too busy to answer in time: ask again
            found = {}
        if len(found) == total and all(v > 0 for v in found.values()):
            return found
        await asyncio.sleep(0.5)
    led = sum(1 for v in found.values() if v > 0)
    raise AssertionError(f"only {led} of {total} partitions led after {bound_s} s")


async def settled_leaders(
    client: Any, prefix: str, total: int, bound_s: float, gap_s: float = 3.0
) -> dict[tuple[str, int], int]:
    """The leaders once two polls ``gap_s`` apart find every partition led by the same
    nodes (the leader balancer moves some after a creation; on a loaded machine a
    partition is briefly leaderless now and then). After ``bound_s``, the last poll
    that found every partition led; AssertionError when none did."""
    deadline = time.monotonic() + bound_s
    last: dict[tuple[str, int], int] | None = None
    while time.monotonic() < deadline:
        try:
            now = await leaders(client, prefix)
        except Exception:  # a node too busy to answer in time: ask again
            now = {}
        if len(now) == total and all(v > 0 for v in now.values()):
            if now == last:
                return now
            last = now
        await asyncio.sleep(gap_s)
    if last is None:
        raise AssertionError(f"never found all {total} partitions led within {bound_s} s")
    return last


@dataclasses.dataclass
class Reelection:
    """What :func:`reelection_times` found, per partition the killed node led (those not
    led again within the bound are absent from both).

    ``elected``: seconds from the kill to the moment the new leader took over, by its
    own clock (``PartitionInfo.leader_since_ms``, reported by the leader itself; one
    machine, one clock): the re-election time, exact whatever the polls' pace.
    ``seen``: seconds from the kill to the arrival of the first poll's answer that
    found it led: an upper bound, late by up to one poll interval plus one metadata
    answer (on nodes busy with a thousand elections an answer of 3,000 partitions
    takes seconds). Not the poll's send time: a node can take over while it builds
    its answer, and the send time then understated the re-election (runs of
    2026-12-03 reported p99 = max = a poll's send time, 6.013 s)."""

    elected: dict[tuple[str, int], float]
    seen: dict[tuple[str, int], float]


Reports = dict[tuple[str, int], tuple[int, int]]


async def _leader_reports(client: Any, address: str, prefix: str) -> tuple[int, Reports]:
    """(the answering node, (topic, partition) -> (leader, leader_since_ms)) of every
    ``prefix-*`` topic, as the node at ``address`` reports it (asked directly: the
    client's ``metadata()`` asks the controller leader, whichever node was meant)."""
    meta = await client.send(address, MetadataRequest([], False), MetadataResponse)
    return meta.node_id, {
        (t.name, p.partition): (p.leader, p.leader_since_ms)
        for t in meta.topics
        if t.name.startswith(prefix + "-")
        for p in t.partitions
    }


async def reelection_times(
    client: Any,
    addresses: list[str],
    prefix: str,
    led_by_victim: set[tuple[str, int]],
    victim: int,
    killed: float,
    bound_s: float,
) -> Reelection:
    """Per partition in ``led_by_victim``: when it was led again after ``killed`` (the
    kill's ``time.time()``), by a node other than ``victim`` (see :class:`Reelection`).

    Each of ``addresses`` (the live nodes) is asked through ``client`` every POLL_S on
    its own, one ask after the other: a node slow to answer (its loop busy with the
    failover's elections) delays only what that node reports. A partition counts as
    elected once its new leader reported itself with its ``leader_since_ms``; found led
    by the other node first, it waits for that report (the polls go on until every
    partition has one, or the bound). (Asked together, every round waited for the
    slower answer, up to the 10 s timeout, and the figures came in steps of that round.)"""
    elected: dict[tuple[str, int], float] = {}
    seen: dict[tuple[str, int], float] = {}
    start = time.monotonic()

    async def poll(address: str) -> None:
        while len(elected) < len(led_by_victim) and time.monotonic() < start + bound_s:
            sent = time.monotonic()
            try:
                node, answer = await asyncio.wait_for(
                    _leader_reports(client, address, prefix), 10.0
                )
            except Exception:  # a node too busy to answer in time: ask again
                node, answer = -1, {}
            since_kill = time.time() - killed
            for key in led_by_victim:
                leader, since_ms = answer.get(key, (-1, -1))
                if leader <= 0 or leader == victim:
                    continue
                seen.setdefault(key, since_kill)
                if leader == node and since_ms > 0 and key not in elected:
                    elected[key] = min(max(0.0, since_ms / 1000 - killed), seen[key])
            await asyncio.sleep(max(0.0, POLL_S - (time.monotonic() - sent)))

    await asyncio.gather(*(poll(a) for a in addresses))
    return Reelection(elected, seen)


def node_resources(pid: int) -> tuple[float, int]:
    """(resident MiB, open descriptors) of process ``pid`` (a node), from /proc."""
    rss_kib = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss_kib = int(line.split()[1])
    return rss_kib / 1024, len(os.listdir(f"/proc/{pid}/fd"))
