"""A ``/metrics`` scrape does not hold the node's event loop (NodeMetrics.render_async):
the groups are read RENDER_CHUNK_GROUPS per turn of the loop, the text is built in a
thread, and the text is exactly what the one-shot render gives.

At 10,000 partitions the text is about 12 MB; built on the loop, one scrape held a
node's loop for 1.7-1.9 s on an idle machine, heartbeats to its peers included."""

from __future__ import annotations

import asyncio
import threading

import prometheus_client
from prometheus_client.parser import text_string_to_metric_families

import raftlog.metrics as metrics_module
from raftlog.metrics import PARTITION_GAUGES, RENDER_CHUNK_GROUPS, NodeMetrics

GROUPS = 4 * RENDER_CHUNK_GROUPS + 7


class _Group:
    """A partition replica as the collector reads it; a leader of every third."""

    def __init__(self, i: int, turns: list[int] | None = None) -> None:
        self.group_id = i
        self.turns = turns  # the other work's turns so far, one element
        self.read_at_turn: list[int] = []
        self.topic = f"topic-{i // 100}"
        self.partition = i % 100
        self.reads = 0

    def gauges(self) -> dict[str, float]:
        self.reads += 1
        if self.turns is not None:
            self.read_at_turn.append(self.turns[0])
        values = {"is_leader": float(self.group_id % 3 == 0), "term": 2.0, "fsyncs": 5.0}
        values.update({k: float(self.group_id) for k in PARTITION_GAUGES})
        return values

    def follower_lags(self) -> dict[int, int]:
        return {2: self.group_id % 7, 3: 0} if self.group_id % 3 == 0 else {}


async def test_a_scrape_yields_to_the_loop_and_builds_the_text_in_a_thread(monkeypatch):
    counter = [0]
    groups = [_Group(i, counter) for i in range(GROUPS)]
    metrics = NodeMetrics(1, lambda: groups)
    metrics.rpc_requests.labels(route="/produce", status="200").inc(3)
    built_on: list[threading.Thread] = []
    real = prometheus_client.generate_latest

    def recording(registry: object) -> bytes:
        built_on.append(threading.current_thread())
        return real(registry)  # type: ignore[arg-type]

    monkeypatch.setattr(metrics_module, "generate_latest", recording)
    rendering = True

    async def other_work() -> None:
        while rendering:
            counter[0] += 1
            await asyncio.sleep(0)

    reads_before = [g.reads for g in groups]
    for g in groups:
        g.read_at_turn.clear()
    worker = asyncio.create_task(other_work())
    await asyncio.sleep(0)
    text = await metrics.render_async()
    rendering = False
    await worker

    # other work ran between the chunks of groups read, not only while the text was built
    turns_while_reading = {turn for g in groups for turn in g.read_at_turn}
    assert len(turns_while_reading) >= GROUPS // RENDER_CHUNK_GROUPS, turns_while_reading
    assert built_on and all(t is not threading.main_thread() for t in built_on), built_on
    assert [g.reads for g in groups] == [n + 1 for n in reads_before]  # each read once
    # the same samples as the one-shot render
    assert sorted(text.decode().splitlines()) == sorted(metrics.render().decode().splitlines())
    # always the one render thread: on the loop's shared pool a scrape's freed heap
    # mixed with what the pool's other jobs keep (raftlog.node.heap)
    first = built_on[0]
    built_on.clear()  # the one-shot render above ran on this thread
    await metrics.render_async()
    assert built_on == [first], built_on
    assert first.name.startswith("metrics-render"), first
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text.decode())
        for s in fam.samples
    }
    assert samples[
        (
            "raftlog_partition_high_watermark",
            (("node", "1"), ("partition", "3"), ("topic", "topic-15")),
        )
    ] == float(1503)
    assert samples[
        (
            "raftlog_partition_follower_lag",
            (("follower", "2"), ("node", "1"), ("partition", "3"), ("topic", "topic-15")),
        )
    ] == float(1503 % 7)
    assert (
        samples[("raftlog_rpc_requests_total", (("route", "/produce"), ("status", "200")))] == 3.0
    )
    is_leader = [
        s for fam in text_string_to_metric_families(text.decode())
        if fam.name == "raftlog_group_is_leader" for s in fam.samples
    ]  # fmt: skip
    assert len(is_leader) == GROUPS


async def test_a_group_closed_during_a_scrape_is_read_once_and_one_opened_waits():
    groups = [_Group(i) for i in range(2 * RENDER_CHUNK_GROUPS)]
    live = list(groups)
    metrics = NodeMetrics(1, lambda: live)

    async def churn() -> None:
        await asyncio.sleep(0)
        live.pop(-1)  # closed while the scrape reads the first chunk
        live.append(_Group(10**6))

    task = asyncio.create_task(churn())
    text = (await metrics.render_async()).decode()
    await task
    assert f'group="{2 * RENDER_CHUNK_GROUPS - 1}"' in text
    assert f'group="{10**6}"' not in text
    assert f'group="{10**6}"' in metrics.render().decode()
