"""kill -9 of the partition leader, repeatedly, under 4 producers with 5 requests in flight.

One idempotent producer and three transactional ones write to one partition
(R=3) through the client's :class:`~raftlog.client.IdempotentProducer`. Each
transactional producer draws every transaction's fate from a seeded RNG:

- commit (with the transaction number as application version; a commit whose
  outcome is unknown is resolved by the next session's
  ``last_committed_version``);
- abort;
- die: the session is abandoned mid-transaction with requests in flight
  (``close(flush=False)``, as a dead process leaves it); the producer's next
  ``init_producer`` fences the zombie and aborts its transaction.

Meanwhile the partition's leader is killed with SIGKILL and restarted, five
times. After the last restart every transactional producer starts one last
session (aborting whatever it left open), the LSO must reach the high
watermark, and a read_committed read of the whole partition must hold every
acknowledged idempotent batch and every committed transaction's records
exactly once, in order per producer, and nothing of an aborted or dead one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import signal
import time

from raftlog.client import (
    IdempotentProducer,
    RaftlogClient,
    RaftlogError,
    unframe_records,
)

TOPIC = "txn-kill"
IN_FLIGHT = 5
KILLS = 5
REQUEST_TIMEOUT_S = 10.0
IDEMPOTENT_PID, TXN_PIDS = 501, (502, 503, 504)
# per transactional producer: weights of commit, abort, die
FATES = {502: (0.8, 0.1, 0.1), 503: (0.3, 0.6, 0.1), 504: (0.4, 0.2, 0.4)}


@dataclasses.dataclass
class _Txn:
    version: int
    values: list[str]
    fate: str
    outcome: str = "open"  # committed, aborted, died, unknown


@dataclasses.dataclass
class _Producer:
    pid: int
    sent: list[str] = dataclasses.field(default_factory=list)
    acked: list[str] = dataclasses.field(default_factory=list)
    txns: list[_Txn] = dataclasses.field(default_factory=list)
    sessions: int = 0
    close_hangs: int = 0
    last_committed: int = -1
    errors: list[str] = dataclasses.field(default_factory=list)


async def _leader(admin: RaftlogClient, alive, exclude: int = -1, timeout_s: float = 30.0) -> int:
    deadline = time.monotonic() + timeout_s
    last: object = None
    for _ in range(1000):
        if time.monotonic() > deadline:
            break
        with contextlib.suppress(RaftlogError):
            last = (await admin.describe_topic(TOPIC)).partitions[0].leader
            if last > 0 and last != exclude and alive(last):
                return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"{TOPIC}/0 has no live leader other than {exclude}; last seen {last}")


async def _session(client: RaftlogClient, p: _Producer, transactional: bool) -> IdempotentProducer:
    """A new session (init_producer), retried through leader changes (bounded)."""
    last: Exception | None = None
    for _ in range(100):
        try:
            prod = await client.idempotent_producer(
                TOPIC,
                0,
                producer_id=p.pid,
                max_in_flight=IN_FLIGHT,
                transactional=transactional,
                delivery_timeout_s=60.0,
            )
        except RaftlogError as exc:
            last = exc
            await asyncio.sleep(0.2)
            continue
        p.sessions += 1
        version = prod.last_committed_version
        pending = p.txns[-1] if p.txns and p.txns[-1].outcome == "unknown" else None
        allowed = {p.last_committed} | ({pending.version} if pending else set())
        assert version in allowed, (
            f"producer {p.pid}: init_producer says last committed version {version}, "
            f"expected one of {sorted(allowed)}"
        )
        if pending is not None:
            pending.outcome = "committed" if version == pending.version else "aborted"
        p.last_committed = version
        return prod
    raise AssertionError(f"init_producer({p.pid}) kept failing: {last!r}")


async def _close(prod: IdempotentProducer, p: _Producer, flush: bool) -> None:
    """``prod.close``, bounded: it can hang with requests in flight (see
    test_txn_producer_close.py); the timeout's cancellation then ends its tasks."""
    try:
        await asyncio.wait_for(prod.close(flush=flush), 10.0 if flush else 2.0)
    except TimeoutError:
        p.close_hangs += 1


async def _idempotent(client: RaftlogClient, p: _Producer, stop: asyncio.Event) -> None:
    prod = await _session(client, p, transactional=False)
    futures: list[tuple[str, asyncio.Future]] = []
    try:
        for i in range(100_000):
            if stop.is_set():
                break
            value = f"p{p.pid}-{i}"
            p.sent.append(value)
            futures.append((value, prod.send([value.encode()])))
            if prod.unacknowledged >= 4 * IN_FLIGHT:
                await asyncio.wait([futures[-IN_FLIGHT][1]], timeout=REQUEST_TIMEOUT_S)
            else:
                await asyncio.sleep(0.005)
        with contextlib.suppress(RaftlogError):
            await prod.flush()
    finally:
        await _close(prod, p, flush=True)
    for value, fut in futures:
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            p.acked.append(value)
        elif fut.done() and not fut.cancelled():
            p.errors.append(f"{value}: {fut.exception()!r}")


async def _transactional(
    client: RaftlogClient, p: _Producer, stop: asyncio.Event, rng: random.Random
) -> None:
    for _ in range(1000):
        if stop.is_set():
            return
        prod = await _session(client, p, transactional=True)
        try:
            for _ in range(1000):
                if stop.is_set():
                    return
                fate = rng.choices(["commit", "abort", "die"], FATES[p.pid])[0]
                txn = _Txn(len(p.txns), [], fate)
                p.txns.append(txn)
                for i in range(rng.randint(1, 12)):
                    value = f"p{p.pid}-t{txn.version}-{i}"
                    txn.values.append(value)
                    prod.send([value.encode()])
                    if i % IN_FLIGHT == IN_FLIGHT - 1:
                        await asyncio.sleep(0.01)
                if fate == "die":
                    # abandoned with requests in flight; the next session aborts it
                    await asyncio.sleep(rng.uniform(0.0, 0.05))
                    txn.outcome = "died"
                    break
                try:
                    await prod.flush()
                except RaftlogError as exc:
                    txn.outcome = "aborted"  # no marker was sent: the next session aborts it
                    p.errors.append(f"txn {txn.version} flush: {exc!r}")
                    break
                if fate == "abort":
                    txn.outcome = "aborted"
                    try:
                        await prod.abort()
                    except RaftlogError as exc:
                        p.errors.append(f"txn {txn.version} abort: {exc!r}")
                        break
                else:
                    txn.outcome = "unknown"
                    try:
                        await prod.commit(txn.version)
                    except RaftlogError as exc:
                        p.errors.append(f"txn {txn.version} commit: {exc!r}")
                        break  # the next session resolves it
                    txn.outcome = "committed"
                    p.last_committed = txn.version
        finally:
            await _close(prod, p, flush=False)


async def _read_all(client: RaftlogClient, timeout_s: float = 30.0) -> list[tuple[int, str]]:
    """The whole partition, read_committed, once the LSO has reached the high watermark."""
    deadline = time.monotonic() + timeout_s
    for _ in range(10_000):
        start, hwm, lso = await client.list_offsets(TOPIC, 0)
        if lso == hwm:
            break
        assert time.monotonic() < deadline, f"LSO {lso} stuck below the high watermark {hwm}"
        await asyncio.sleep(0.1)
    assert start == 0
    records: list[tuple[int, str]] = []
    offset = 0
    for _ in range(100_000):
        assert time.monotonic() < deadline, "the final read is too slow"
        r = await client.fetch(TOPIC, 0, offset, max_bytes=256 * 1024)
        for b in r.batches:
            values = unframe_records(b.payload, b.record_count)
            assert values is not None, f"batch at {b.base_offset} is not framed records"
            records += [(b.base_offset + i, v.decode()) for i, v in enumerate(values)]
        offset = r.next_offset
        if offset >= hwm:
            return records
    raise AssertionError("the final read did not reach the high watermark")


async def test_txn_leader_killed_five_times_under_transactions(fresh_cluster) -> None:
    cluster = fresh_cluster
    async with RaftlogClient(cluster.servers, request_timeout_s=REQUEST_TIMEOUT_S) as admin:
        await admin.create_topic(TOPIC, partitions=1, replication_factor=3)
        await _leader(admin, cluster.alive)
        producers = {pid: _Producer(pid) for pid in (IDEMPOTENT_PID, *TXN_PIDS)}
        stop = asyncio.Event()
        clients = [
            RaftlogClient(cluster.servers, request_timeout_s=REQUEST_TIMEOUT_S) for _ in producers
        ]
        tasks = [asyncio.create_task(_idempotent(clients[0], producers[IDEMPOTENT_PID], stop))]
        tasks += [
            asyncio.create_task(
                _transactional(clients[i + 1], producers[pid], stop, random.Random(pid))
            )
            for i, pid in enumerate(TXN_PIDS)
        ]
        victims = []
        try:
            await asyncio.sleep(1.0)
            for _ in range(KILLS):
                leader = await _leader(admin, cluster.alive)
                await asyncio.to_thread(cluster.kill, leader, signal.SIGKILL)
                victims.append(leader)
                await _leader(admin, cluster.alive, exclude=leader)
                await asyncio.sleep(0.5)  # writes go to the new leader while one node is down
                await asyncio.to_thread(cluster.restart, leader)
                await asyncio.sleep(0.5)
            stop.set()
            done, pending = await asyncio.wait(tasks, timeout=30.0)
            if pending:
                for t in asyncio.all_tasks():
                    if not t.done() and t is not asyncio.current_task():
                        t.print_stack(limit=6)
            assert not pending, "producers did not finish within 30 s after the last kill"
            for t in done:
                t.result()
            # one last session per transactional producer: it aborts a transaction left
            # open (a dead session) and resolves a commit whose outcome was unknown
            for i, pid in enumerate(TXN_PIDS):
                prod = await _session(clients[i + 1], producers[pid], transactional=True)
                await _close(prod, producers[pid], flush=True)
            records = await _read_all(admin)
        finally:
            stop.set()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for c in clients:
                await c.close()

    print(f"killed leaders in order: {victims}")
    by_pid: dict[int, list[str]] = {}
    for _, value in records:
        by_pid.setdefault(int(value.split("-")[0][1:]), []).append(value)
    assert set(by_pid) <= set(producers), f"records of unknown producers: {set(by_pid)}"

    idem = producers[IDEMPOTENT_PID]
    got = by_pid.get(IDEMPOTENT_PID, [])
    print(
        f"idempotent producer: {len(idem.acked)} of {len(idem.sent)} acknowledged, "
        f"{len(got)} read, {idem.sessions} session, close() hung {idem.close_hangs} times; "
        f"errors: {idem.errors[:3]}"
    )
    assert len(idem.acked) > 50
    assert len(got) == len(set(got)), f"duplicated: {sorted({v for v in got if got.count(v) > 1})}"
    assert got == [v for v in idem.sent if v in set(got)], "idempotent records out of order"
    missing = [v for v in idem.acked if v not in set(got)]
    assert not missing, f"acknowledged but not read: {missing[:10]}"

    committed_total = 0
    for pid in TXN_PIDS:
        p = producers[pid]
        outcomes = [t.outcome for t in p.txns]
        print(
            f"producer {pid}: {p.sessions} sessions, "
            + ", ".join(f"{outcomes.count(o)} {o}" for o in ("committed", "aborted", "died"))
            + f"; close() hung {p.close_hangs} times; errors: {p.errors[:3]}"
        )
        assert not [t.version for t in p.txns if t.outcome in ("open", "unknown")]
        want = [v for t in p.txns if t.outcome == "committed" for v in t.values]
        got = by_pid.get(pid, [])
        hidden = {v for t in p.txns if t.outcome != "committed" for v in t.values}
        leaked = [v for v in got if v in hidden]
        assert not leaked, f"producer {pid}: aborted or dead transactions' records read: {leaked}"
        assert got == want, (
            f"producer {pid}: committed records differ: missing "
            f"{[v for v in want if v not in got][:10]}, unexpected "
            f"{[v for v in got if v not in want][:10]}, duplicated "
            f"{sorted({v for v in got if got.count(v) > 1})[:10]}"
        )
        committed_total += outcomes.count("committed")
    all_txns = [t for pid in TXN_PIDS for t in producers[pid].txns]
    assert committed_total > 0
    assert any(t.outcome == "aborted" for t in all_txns)
    assert any(t.outcome == "died" for t in all_txns)
