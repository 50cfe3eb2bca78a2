"""A bounded workload of idempotent producers, recorded for the Jepsen-style checker.

Shared by the nemesis integration tests (``integration_tests/nemesis/workload.py``
re-exports it) and ``python -m benchmarks chaos``.

Each producer owns one partition of the topic: it calls ``init_producer``,
then writes ``batches`` one-record batches with (producer id, epoch,
sequence), at most 5 in flight, driven by :class:`raftlog.producers.Sequencer`
(a retriable or unknown outcome rewinds and resends in order; rm_stm
deduplicates). After a failure the window drops to one request until a send
succeeds again (as Kafka's producer does while retrying), since concurrent
resends on separate connections may arrive out of order. Every send is one
operation in a :class:`History` whose value is unique for the run
(``p<id>-s<seq>``). A light reader per partition polls committed data while
the faults run (what it sees must never be lost).
After the faults heal, :meth:`Workload.finish` waits for every producer to be
acknowledged, :meth:`Workload.final_read` reads every partition from offset 0
to its high watermark, and :meth:`Workload.check` runs the checker.

Every loop here is bounded by a deadline and an iteration count.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pathlib
import re
import time
import urllib.request
from collections.abc import Callable

from raftlog.checker import History, Report, check
from raftlog.client import (
    DuplicateSequenceError,
    FencedError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    RaftlogClient,
    RaftlogError,
    frame_records,
    unframe_records,
)
from raftlog.producers.sequencer import MAX_IN_FLIGHT, Sequencer, SequencerError
from raftlog.rpc.messages import MetadataResponse, NodeInfo

#: Client-side bound of one request (and of the client's own retries of it): short,
#: so the workload's sequencer, not the client, retries through a fault.
REQUEST_TIMEOUT_S = 3.0
_MAX_ATTEMPTS = 2000  # sends per producer, whatever happens


class MappedClient(RaftlogClient):
    """A client that reaches nodes at other addresses (e.g. through a proxy per node).

    ``address_map`` maps a node's advertised address to where to connect.
    """

    def __init__(self, servers: list[str], address_map: dict[str, str], **kw: object) -> None:
        super().__init__([address_map.get(s, s) for s in servers], **kw)  # type: ignore[arg-type]
        self._address_map = address_map

    def _absorb(self, meta: MetadataResponse) -> None:
        nodes = [
            NodeInfo(n.node_id, self._address_map.get(n.address, n.address)) for n in meta.nodes
        ]
        super()._absorb(dataclasses.replace(meta, nodes=nodes))


@dataclasses.dataclass
class ProducerStats:
    name: str
    partition: int
    batches: int
    acked: int = 0
    sends: int = 0
    retries: int = 0
    fatal: str | None = None


class Workload:
    """Idempotent producers on ``partitions`` partitions of ``topic`` (see the module doc)."""

    def __init__(
        self,
        servers: list[str],
        history_path: pathlib.Path,
        *,
        topic: str = "nemesis",
        partitions: int = 2,
        producers_per_partition: int = 2,
        batches: int = 60,
        pace_s: float = 0.01,
        address_map: dict[str, str] | None = None,
    ) -> None:
        self.servers = list(servers)
        self.topic = topic
        self.partitions = partitions
        self.producers_per_partition = producers_per_partition
        self.batches = batches
        self.pace_s = pace_s
        self.address_map = address_map or {}
        self.history_path = history_path
        self.history = History(history_path)
        self.stats: list[ProducerStats] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stop_readers = asyncio.Event()
        self._released = 0  # batches each producer may write so far
        self._release = asyncio.Event()
        self._admin = self.client(request_timeout_s=5.0)

    def client(self, request_timeout_s: float = REQUEST_TIMEOUT_S) -> RaftlogClient:
        if self.address_map:
            return MappedClient(self.servers, self.address_map, request_timeout_s=request_timeout_s)
        return RaftlogClient(self.servers, request_timeout_s=request_timeout_s)

    # -- setup and leaders -----------------------------------------------------------------

    async def setup(self) -> None:
        """Create the topic (3 replicas) and wait until every partition has a leader."""
        await self._admin.create_topic(self.topic, partitions=self.partitions, replication_factor=3)
        for p in range(self.partitions):
            await self.leader(p)

    async def leader(
        self,
        partition: int,
        *,
        exclude: int | None = None,
        alive: Callable[[int], bool] | None = None,
        timeout_s: float = 30.0,
        topic: str | None = None,
    ) -> int:
        """The partition's leader as a live node reports it, waiting (bounded) for one.

        ``topic``: another topic's partition (default: the workload's own)."""
        topic = self.topic if topic is None else topic
        deadline = time.monotonic() + timeout_s
        last: object = None
        for _ in range(1000):
            if time.monotonic() > deadline:
                break
            try:
                meta = await self._admin.describe_topic(topic)
                last = meta.partitions[partition].leader
                leader = meta.partitions[partition].leader
                if leader > 0 and leader != exclude and (alive is None or alive(leader)):
                    return leader
            except RaftlogError as exc:
                last = exc
            await asyncio.sleep(0.1)
        raise AssertionError(
            f"{topic}/{partition} has no leader (other than {exclude}) after "
            f"{timeout_s}s; last seen: {last!r}"
        )

    # -- running -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start every producer and reader task."""
        deadline = time.monotonic() + 240.0  # hard bound; finish() waits less
        pid = 1000
        for p in range(self.partitions):
            for _ in range(self.producers_per_partition):
                pid += 1
                st = ProducerStats(f"p{pid}", p, self.batches)
                self.stats.append(st)
                self._tasks.append(
                    asyncio.create_task(self._produce(pid, st, deadline), name=f"producer-{pid}")
                )
            self._tasks.append(asyncio.create_task(self._read(p, deadline), name=f"reader-{p}"))

    def release(self, per_producer: int | None = None) -> None:
        """Let each producer write up to ``per_producer`` batches in all (None: every one),
        so a test decides which writes overlap which fault."""
        limit = self.batches if per_producer is None else min(per_producer, self.batches)
        self._released = max(self._released, limit)
        event, self._release = self._release, asyncio.Event()
        event.set()

    @property
    def acked(self) -> int:
        return sum(s.acked for s in self.stats)

    @property
    def total_batches(self) -> int:
        return sum(s.batches for s in self.stats)

    async def wait_acked(self, count: int, timeout_s: float = 60.0) -> None:
        """Wait (bounded) until at least ``count`` batches were acknowledged in all."""
        count = min(count, self.total_batches)
        deadline = time.monotonic() + timeout_s
        while self.acked < count:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"only {self.acked} of {count} batches acknowledged within {timeout_s}s"
                )
            self._raise_task_errors()
            await asyncio.sleep(0.05)

    def _raise_task_errors(self) -> None:
        for t in self._tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]

    async def finish(self, timeout_s: float = 90.0) -> None:
        """Wait (bounded) until every producer is done; then stop the readers."""
        self.release(None)
        producers = [t for t in self._tasks if t.get_name().startswith("producer")]
        try:
            await asyncio.wait(producers, timeout=timeout_s)
        finally:
            self._stop_readers.set()
        await self.close_tasks()
        for s in self.stats:
            print(
                f"producer {s.name} partition {s.partition}: acked {s.acked}/{s.batches}, "
                f"sends {s.sends}, retries {s.retries}"
            )
        fatal = [f"{s.name}: {s.fatal}" for s in self.stats if s.fatal]
        unfinished = [
            f"{s.name} ({s.acked}/{s.batches})" for s in self.stats if s.acked < s.batches
        ]
        assert not fatal, f"producers failed: {fatal}"
        assert not unfinished, (
            f"producers not fully acknowledged within {timeout_s}s after healing: {unfinished}"
        )

    async def close_tasks(self) -> None:
        self._stop_readers.set()
        for t in self._tasks:
            if not t.done():
                t.cancel()
        results = await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        errors = [r for r in results if isinstance(r, Exception)]
        if errors:
            raise errors[0]

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.close_tasks()
        await self._admin.close()
        self.history.close()

    async def __aenter__(self) -> Workload:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- one producer ----------------------------------------------------------------------

    async def _init(self, client: RaftlogClient, partition: int, pid: int, deadline: float) -> int:
        last: Exception | None = None
        for _ in range(200):
            if time.monotonic() > deadline:
                break
            try:
                return (await client.init_producer(self.topic, partition, pid)).epoch
            except RaftlogError as exc:
                last = exc
                await asyncio.sleep(0.1)
        raise AssertionError(f"init_producer({pid}) on partition {partition} failed: {last!r}")

    async def _produce(self, pid: int, st: ProducerStats, deadline: float) -> None:
        name, p = st.name, st.partition
        async with self.client() as client:
            epoch = await self._init(client, p, pid, deadline)
            seq = Sequencer(pid, epoch)
            values: dict[int, str] = {}
            running: set[asyncio.Task[None]] = set()
            wake = asyncio.Event()

            async def send(first: int, attempt: int) -> None:
                value = values[first]
                op = self.history.invoke_produce(
                    name, self.topic, p, [value], producer=name, epoch=epoch, first_sequence=first
                )
                try:
                    r = await client.produce(
                        self.topic,
                        p,
                        [(frame_records([value.encode()]), 1)],
                        acks="all",
                        producer_id=pid,
                        producer_epoch=epoch,
                        first_sequence=first,
                    )
                except DuplicateSequenceError as exc:
                    # written before, offset unknown: the final read must hold it once
                    self.history.unknown(op, f"duplicate sequence: {exc}")
                    seq.on_success(first, attempt, None)
                except OutOfOrderSequenceError as exc:
                    self.history.fail(op, f"out of order: {exc}")
                    st.retries += 1
                    seq.max_in_flight = 1
                    try:
                        seq.on_out_of_order(first, attempt)
                    except SequencerError as fatal:
                        st.fatal = str(fatal)
                except (FencedError, InvalidProducerEpochError) as exc:
                    self.history.fail(op, f"fenced: {exc}")
                    st.fatal = f"fenced with one session per producer: {exc}"
                except RaftlogError as exc:
                    self.history.unknown(op, f"{type(exc).__name__}: {exc}")
                    st.retries += 1
                    seq.max_in_flight = 1
                    seq.on_retriable(first, attempt)
                    await asyncio.sleep(0.05)
                else:
                    self.history.ok_produce(op, r.base_offset)
                    seq.on_success(first, attempt, r.base_offset)
                    seq.max_in_flight = MAX_IN_FLIGHT
                finally:
                    wake.set()

            try:
                while st.fatal is None and st.sends < _MAX_ATTEMPTS:
                    if time.monotonic() > deadline:
                        break
                    while len(values) < self._released:
                        first = seq.add(1)
                        values[first] = f"{name}-s{first}"
                    if seq.idle and len(values) >= st.batches:
                        break
                    s = seq.next_to_send()
                    if s is not None:
                        st.sends += 1
                        t = asyncio.create_task(send(s.first_sequence, s.attempt))
                        running.add(t)
                        t.add_done_callback(running.discard)
                        if self.pace_s:
                            await asyncio.sleep(self.pace_s)
                        continue
                    wake.clear()
                    waits = [asyncio.ensure_future(e.wait()) for e in (wake, self._release)]
                    await asyncio.wait(waits, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
                    for f in waits:
                        f.cancel()
                    st.acked = len(values) - seq.unacknowledged
                st.acked = len(values) - seq.unacknowledged
            finally:
                for t in list(running):
                    t.cancel()
                await asyncio.gather(*running, return_exceptions=True)

    # -- reads -------------------------------------------------------------------------------

    async def _read(self, partition: int, deadline: float) -> None:
        offset = 0
        async with self.client() as client:
            for _ in range(5000):
                if self._stop_readers.is_set() or time.monotonic() > deadline:
                    return
                op = self.history.invoke_read(f"reader-{partition}", self.topic, partition, offset)
                try:
                    r = await client.fetch(self.topic, partition, offset, max_bytes=64 * 1024)
                except RaftlogError as exc:
                    self.history.fail(op, f"{type(exc).__name__}: {exc}")
                else:
                    self.history.ok_read(op, _records(r.batches), r.high_watermark)
                    offset = max(offset, r.next_offset)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop_readers.wait(), 0.2)

    async def final_read(self, timeout_s: float = 60.0) -> dict[int, int]:
        """Read every partition from offset 0 to its high watermark into the history;
        returns each partition's high watermark."""
        hwms: dict[int, int] = {}
        async with self.client(request_timeout_s=30.0) as client:
            for p in range(self.partitions):
                deadline = time.monotonic() + timeout_s
                records: list[tuple[int, str]] = []
                offset, hwm = 0, None
                for _ in range(100_000):
                    assert time.monotonic() < deadline, f"final read of partition {p} too slow"
                    r = await client.fetch(self.topic, p, offset, max_bytes=256 * 1024)
                    if hwm is None:
                        hwm = r.high_watermark
                    records += _records(r.batches)
                    offset = r.next_offset
                    if offset >= hwm:
                        break
                self.history.record_final_read(self.topic, p, records)
                hwms[p] = hwm or 0
        return hwms

    async def group_id(self, partition: int) -> int:
        meta = await self._admin.metadata()
        topic = next(t for t in meta.topics if t.name == self.topic)
        return topic.partitions[partition].group_id

    def check(self) -> Report:
        report = check(self.history)
        errors: dict[str, int] = {}
        for op in self.history.operations:
            if op.error:
                key = op.error.split(":")[0] + ":" + re.sub(r"\d+", "N", op.error)[-90:]
                errors[key] = errors.get(key, 0) + 1
        for key, n in sorted(errors.items(), key=lambda kv: -kv[1])[:8]:
            print(f"  {n:5d} x {key}")
        self.history.save(self.history_path.with_suffix(".saved.jsonl"))
        return report


def _records(batches: list) -> list[tuple[int, str]]:
    out = []
    for b in batches:
        vals = unframe_records(b.payload, b.record_count)
        assert vals is not None, f"batch at {b.base_offset} is not framed records"
        out += [(b.base_offset + i, v.decode()) for i, v in enumerate(vals)]
    return out


def assert_clean(report: Report, label: str, expected_values: int) -> None:
    """Print the report; assert zero lost, duplicated, inconsistent (and the rest), and
    that the final reads hold exactly the ``expected_values`` values written."""
    counts = report.counts()
    print(f"\n[{label}] " + report.render())
    print(f"[{label}] counts: {counts}")
    assert report.lost == 0, report.render(10)
    assert report.duplicated == 0, report.render(10)
    assert report.inconsistent == 0, report.render(10)
    assert report.ok, report.render(10)
    assert report.produce_ok > 0
    assert report.values_in_final_reads == expected_values, report.render(10)


def metric(address: str, name: str, group: int) -> float | None:
    """One group gauge from a node's /metrics (None when absent); raises OSError when
    the node does not answer within 2 s."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=2) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{") and f'group="{group}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None
