"""Consensus scenarios over the simulated network, disk and (virtual) clock.

Every test runs on a fresh virtual-time loop, so it is deterministic and the
waits below cost no wall-clock time (they are bounds, not assertions on speed).
"""

from __future__ import annotations

import asyncio
import itertools

import pytest
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_fixed

from raftlog.raft.configuration import Configuration
from raftlog.raft.consensus import Consensus
from raftlog.raft.dispatch import PeerDispatcher
from raftlog.raft.errors import (
    ConfigurationChangeError,
    NotLeaderError,
    RaftError,
    ReadBarrierTimeout,
    ReadNotReadyError,
    TermMismatchError,
)
from raftlog.raft.heartbeat_manager import HeartbeatManager
from raftlog.raft.messages import HeartbeatBatchRequest
from raftlog.raft.replicate_batcher import Consistency, ReplicateBatcher
from raftlog.sim.cluster import SimCluster, sim_options
from raftlog.sim.local_network import LocalNetwork
from raftlog.sim.loop import run_virtual
from raftlog.sim.node import SimNode
from raftlog.storage.batch import BatchKind, RecordBatch
from raftlog.storage.fs import DiskFull
from raftlog.storage.memory import MemoryLog


def data(payload: bytes, count: int = 1) -> RecordBatch:
    return RecordBatch.create(payload, count, timestamp_ms=0)


def log_of(c: Consensus) -> list[str]:
    """The committed log, readable: ``base..last@term KIND payload``."""
    return [
        f"{b.base_offset}..{b.last_offset}@{b.term} {b.kind.name} {b.payload.decode()}"
        for b in c.read(0, 1 << 20)
    ]


def test_three_nodes_elect_and_replicate_quorum_ack() -> None:
    async def scenario() -> None:
        cluster = SimCluster(3, seed=7)
        await cluster.start()
        leader = (await cluster.wait_for_leader()).consensus
        stages = leader.replicate([data(b"a", 2), data(b"b")])
        await stages.enqueued
        result = await stages.finished
        assert (result.base_offset, result.last_offset, result.term) == (1, 3, leader.term)
        assert leader.commit_index == 3 and leader.high_watermark == 4
        await asyncio.sleep(0.5)  # heartbeats carry the commit index to followers
        t = leader.term
        for node in cluster.nodes.values():
            assert log_of(node.consensus) == [
                f"0..0@{t} NOOP ",
                f"1..2@{t} DATA a",
                f"3..3@{t} DATA b",
            ]
            assert node.consensus.flushed_offset == 3
        # A follower reports who leads.
        follower = next(n for n in cluster.nodes.values() if n.consensus is not leader)
        assert follower.consensus.leader_id == leader.node_id
        with pytest.raises(NotLeaderError) as info:
            await follower.consensus.replicate([data(b"x")]).finished
        assert info.value.leader_id == leader.node_id
        await cluster.stop()

    run_virtual(scenario())


def test_partitioned_leader_steps_down_and_its_suffix_is_repaired() -> None:
    async def scenario() -> None:
        cluster = SimCluster(3, seed=3)
        await cluster.start()
        old = await cluster.wait_for_leader()
        await old.consensus.replicate([data(b"kept")]).finished
        cluster.network.partition({old.node_id}, cluster.ids)
        lost = old.consensus.replicate([data(b"lost")])
        new = await cluster.wait_for_leader(exclude=old.node_id)
        assert new.consensus.term > old.consensus.term or not old.consensus.is_leader
        with pytest.raises(NotLeaderError):
            await lost.finished  # never committed: the old leader gave up (check quorum)
        assert not old.consensus.is_leader
        await new.consensus.replicate([data(b"new")]).finished
        cluster.network.heal()
        await new.consensus.wait_for_commit(new.consensus.commit_index, 5)
        await asyncio.sleep(1.0)
        for node in cluster.nodes.values():
            payloads = [b.payload for b in node.consensus.read(0, 1 << 20) if not b.is_control]
            assert payloads == [b"kept", b"new"], node.node_id
        await cluster.stop()

    run_virtual(scenario())


def test_expected_term_mismatch_appends_nothing() -> None:
    async def scenario() -> None:
        cluster = SimCluster(3, seed=1)
        await cluster.start()
        leader = (await cluster.wait_for_leader()).consensus
        before = leader.dirty_offset
        with pytest.raises(TermMismatchError, match="expected term 99 but the current term is"):
            await leader.replicate([data(b"x")], expected_term=99).finished
        assert leader.dirty_offset == before
        ok = await leader.replicate([data(b"y")], expected_term=leader.term).finished
        assert ok.base_offset == before + 1
        await cluster.stop()

    run_virtual(scenario())


def test_leader_ack_answers_after_the_leader_append_only() -> None:
    async def scenario() -> None:
        cluster = SimCluster(3, seed=2)
        await cluster.start()
        leader = await cluster.wait_for_leader()
        c = leader.consensus
        for other in cluster.ids:  # followers unreachable: nothing can commit
            if other != leader.node_id:
                cluster.network.cut(leader.node_id, other)
        commit = c.commit_index
        res = await c.replicate([data(b"l")], Consistency.LEADER_ACK).finished
        assert res.base_offset == commit + 1
        assert c.commit_index == commit  # answered without a quorum
        quorum = c.replicate([data(b"q")], Consistency.QUORUM_ACK)
        await asyncio.sleep(0.2)
        assert not quorum.finished.done()
        await cluster.stop()

    run_virtual(scenario())


def test_leadership_transfer_hands_over_and_stops_writes() -> None:
    async def scenario() -> None:
        cluster = SimCluster(3, seed=5)
        await cluster.start()
        old = await cluster.wait_for_leader()
        await old.consensus.replicate([data(b"before")]).finished
        target = next(i for i in cluster.ids if i != old.node_id)
        transfer = asyncio.create_task(old.consensus.transfer_leadership(target))
        await asyncio.sleep(0)
        with pytest.raises(NotLeaderError) as info:
            await old.consensus.replicate([data(b"during")]).finished
        assert info.value.leader_id == target
        await transfer
        new = await cluster.wait_for_leader()
        assert new.node_id == target
        assert not old.consensus.is_leader
        await new.consensus.replicate([data(b"after")]).finished
        payloads = [b.payload for b in new.consensus.read(0, 1 << 20) if not b.is_control]
        assert payloads == [b"before", b"after"]
        await cluster.stop()

    run_virtual(scenario())


class _Applied:
    """A state machine that applies nothing (reads wait for the applier to pass it)."""

    def apply(self, batch: RecordBatch) -> None:
        pass

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        pass


class _AppliedNode(SimNode):
    def _build(self) -> None:
        super()._build()
        self.consensus.add_state_machine(_Applied())


def test_reads_after_a_timed_out_transfer_take_a_quorum_round() -> None:
    """A leader that sent timeout-now has no lease for the rest of its term (the target
    may still be elected by it): a read that answers at once is refused, naming why;
    read_barrier takes a quorum round and passes while a quorum answers, and times out
    once the leader is cut off from every follower (its lease would still hold then).
    A read that asks for a quorum round gets one in any term."""

    async def scenario() -> None:
        cluster = SimCluster(3, seed=5)
        cluster.rebuild_nodes(_AppliedNode)
        await cluster.start()
        old = await cluster.wait_for_leader()
        c = old.consensus
        await c.replicate([data(b"before")]).finished
        # The term's read index: its commit index when its no-op committed (offset 0).
        assert await c.read_barrier(1.0, quorum_round=True) == 0
        target, other = (i for i in cluster.ids if i != old.node_id)
        cluster.network.cut(old.node_id, target)
        with pytest.raises(RaftError, match="transfer"):
            await c.transfer_leadership(target)
        assert c.is_leader and c.core.accepting_writes
        with pytest.raises(ReadNotReadyError, match="sent timeout-now in its term"):
            c.check_readable()
        await c.replicate([data(b"after")]).finished
        assert await c.read_barrier(1.0) == 0
        cluster.network.cut(old.node_id, other)
        with pytest.raises(ReadBarrierTimeout, match="sent timeout-now in its term"):
            await c.read_barrier(0.05)
        await cluster.stop()

    run_virtual(scenario())


def test_learner_catches_up_and_is_promoted() -> None:
    async def scenario() -> None:
        cluster = SimCluster(3, seed=11)
        await cluster.start()
        leader = (await cluster.wait_for_leader()).consensus
        for i in range(5):
            await leader.replicate([data(f"r{i}".encode())]).finished
        node4 = cluster.add_node(4, voters=[1, 2, 3])
        await node4.start()
        assert node4.consensus.role.value == "learner"
        with pytest.raises(ConfigurationChangeError, match="already a member"):
            await leader.add_member(2)
        await leader.add_member(4)
        for _ in range(100):
            if 4 in leader.configuration.voters:
                break
            await asyncio.sleep(0.05)
        assert leader.configuration == Configuration.of([1, 2, 3, 4])
        await leader.replicate([data(b"with4")]).finished
        await asyncio.sleep(0.5)
        assert node4.consensus.configuration.voters == (1, 2, 3, 4)
        assert node4.consensus.role.value == "follower"
        payloads = [b.payload for b in node4.consensus.read(0, 1 << 20) if not b.is_control]
        assert payloads == [b"r0", b"r1", b"r2", b"r3", b"r4", b"with4"]
        kinds = [b.kind for b in leader.read(0, 1 << 20) if b.kind is BatchKind.RAFT_CONFIG]
        assert len(kinds) == 2  # added as a learner, then promoted
        await cluster.stop()

    run_virtual(scenario())


def test_remove_member_shrinks_the_quorum() -> None:
    async def scenario() -> None:
        cluster = SimCluster(3, seed=13)
        await cluster.start()
        leader = await cluster.wait_for_leader()
        victim = next(i for i in cluster.ids if i != leader.node_id)
        await leader.consensus.remove_member(victim)
        assert victim not in leader.consensus.configuration.members
        cluster.nodes[victim].crash()
        # Two voters left: both needed, and enough.
        res = await leader.consensus.replicate([data(b"x")]).finished
        assert leader.consensus.commit_index >= res.last_offset
        await cluster.stop()

    run_virtual(scenario())


def test_crashed_follower_loses_unflushed_tail_and_is_recovered() -> None:
    async def scenario() -> None:
        cluster = SimCluster(3, seed=17)
        await cluster.start()
        leader = await cluster.wait_for_leader()
        follower = cluster.nodes[next(i for i in cluster.ids if i != leader.node_id)]
        for i in range(3):
            await leader.consensus.replicate([data(f"q{i}".encode())]).finished
        for i in range(3):  # leader_ack: followers need not flush these
            await leader.consensus.replicate(
                [data(f"l{i}".encode())], Consistency.LEADER_ACK
            ).finished
        follower.crash(keep_unflushed=0)
        await follower.restart()
        await leader.consensus.replicate([data(b"end")]).finished
        await asyncio.sleep(1.0)
        expected = [b"q0", b"q1", b"q2", b"l0", b"l1", b"l2", b"end"]
        payloads = [b.payload for b in follower.consensus.read(0, 1 << 20) if not b.is_control]
        assert payloads == expected
        await cluster.stop()

    run_virtual(scenario())


def test_follower_flushes_are_coalesced() -> None:
    async def scenario() -> None:
        options = sim_options()
        options.flush_delay_s = 0.05
        cluster = SimCluster(3, seed=19, options=options)
        await cluster.start()
        leader = (await cluster.wait_for_leader()).consensus
        stages = [leader.replicate([data(b"x")], Consistency.LEADER_ACK) for _ in range(40)]
        for s in stages:
            await s.finished
        await asyncio.sleep(0.5)
        for node in cluster.nodes.values():
            if node.consensus is leader:
                continue
            assert node.consensus.flushed_offset == leader.dirty_offset
            # 40 appends (batched by the batcher into fewer), far fewer fsyncs.
            assert node.consensus.flusher.flushes < 10
        await cluster.stop()

    run_virtual(scenario())


def test_batcher_memory_is_the_backpressure() -> None:
    async def scenario() -> None:
        gate = asyncio.Event()
        appended: list[list[bytes]] = []

        async def append(reqs) -> None:
            appended.append([b.payload for r in reqs for b in r.batches])
            await gate.wait()
            batcher.memory.release(sum(r.units for r in reqs))

        batcher = ReplicateBatcher(append, memory_bytes=220)
        runner = asyncio.create_task(batcher.run())
        first, enq1 = batcher.replicate([data(b"1" * 100)], Consistency.QUORUM_ACK, -1)
        assert enq1 is None and first.enqueued.done()  # memory free, no one waiting: at once
        second, enq2 = batcher.replicate([data(b"2" * 100)], Consistency.QUORUM_ACK, -1)
        assert enq2 is not None  # 152 + 152 bytes > 220: waits for memory
        # its 53 bytes fit in the 68 left, but it may not pass the request that waits
        third, enq3 = batcher.replicate([data(b"3")], Consistency.QUORUM_ACK, -1)
        assert enq3 is not None
        t2, t3 = asyncio.create_task(enq2), asyncio.create_task(enq3)
        await asyncio.sleep(0.1)
        assert not second.enqueued.done() and not third.enqueued.done()
        gate.set()
        await asyncio.sleep(0.1)
        assert second.enqueued.done() and third.enqueued.done()
        assert appended[0] == [b"1" * 100]  # appended alone, before the others were queued
        assert [p for a in appended for p in a] == [b"1" * 100, b"2" * 100, b"3"]
        # nothing waits any more: queued at once again
        fourth, enq4 = batcher.replicate([data(b"4")], Consistency.QUORUM_ACK, -1)
        assert enq4 is None and fourth.enqueued.done()
        runner.cancel()
        await asyncio.gather(runner, t2, t3, return_exceptions=True)

    run_virtual(scenario())


class _Recorder:
    def __init__(self, network: LocalNetwork, node: int) -> None:
        self.inner = network.transport(node)
        self.sent: list[object] = []

    def send_now(self, target_node: int, message: object) -> None:
        return None

    async def send(self, target_node: int, message: object) -> object:
        self.sent.append(message)
        return await self.inner.send(target_node, message)


def test_heartbeats_are_batched_per_peer_node() -> None:
    async def scenario() -> None:
        network = LocalNetwork()
        config = Configuration.of([1, 2, 3], (), {1: 10})  # node 1 leads both groups
        recorders = {}
        groups = {}
        options = sim_options()
        options.idle_heartbeat_ticks = 1  # every follower every round, idle or not
        options.quiesce = False  # and no group quiesces meanwhile
        for node in (1, 2, 3):
            rec = recorders[node] = _Recorder(network, node)
            hb = HeartbeatManager(node, rec, interval_s=0.1)
            network.register(node, PeerDispatcher(node, hb).handle)
            for g in (10, 20):
                c = Consensus(g, node, config, MemoryLog(), rec, options, 0, hb)
                groups[(node, g)] = c
                await c.start()
            await hb.start()
        for _ in range(100):
            if groups[(1, 10)].is_leader and groups[(1, 20)].is_leader:
                break
            await asyncio.sleep(0.05)
        assert groups[(1, 10)].is_leader and groups[(1, 20)].is_leader
        recorders[1].sent.clear()
        await asyncio.sleep(0.35)
        batches = [m for m in recorders[1].sent if isinstance(m, HeartbeatBatchRequest)]
        assert batches, "no heartbeat sent"
        # One request per peer per round, each carrying both groups.
        assert {m.target_node for m in batches} == {2, 3}
        assert all(sorted(h.group for h in m.heartbeats) == [10, 20] for m in batches)
        for c in groups.values():
            await c.stop()

    run_virtual(scenario())


class _Counter:
    """A state machine that sums record counts of data batches."""

    def __init__(self) -> None:
        self.total = 0
        self.applied: list[int] = []

    def apply(self, batch: RecordBatch) -> None:
        self.applied.append(batch.base_offset)
        if batch.kind is BatchKind.DATA:
            self.total += batch.record_count

    def snapshot(self) -> bytes:
        return str(self.total).encode()

    def restore(self, data: bytes) -> None:
        self.total = int(data)


def test_state_machine_applies_in_order_and_restores_from_the_commit_context() -> None:
    async def scenario() -> None:
        network = LocalNetwork()
        log = MemoryLog()
        c = Consensus(1, 1, Configuration.of([1]), log, network.transport(1), sim_options())
        stm = _Counter()
        c.add_state_machine(stm)
        await c.start()
        for _ in range(100):
            if c.is_leader:
                break
            await asyncio.sleep(0.05)
        for n in (2, 3, 4):
            await c.replicate([data(b"x", n)]).finished
        await asyncio.sleep(0.1)
        assert (stm.total, stm.applied) == (9, [0, 1, 3, 6])
        await c.stop()
        assert log.load_commit_context().committed_offset == 9
        again = Consensus(1, 1, Configuration.of([1]), log, network.transport(1), sim_options())
        stm2 = _Counter()
        again.add_state_machine(stm2)
        await again.start()
        assert (stm2.total, again.commit_index) == (9, 9)
        assert stm2.applied == []  # restored, not replayed
        with pytest.raises(TimeoutError):
            await again.wait_for_commit(50, timeout=0.2)
        await again.stop()

    run_virtual(scenario())


def _used(log: MemoryLog) -> int:
    return sum(b.size_bytes for b in log.read(log.start_offset, 1 << 30))


def test_a_full_disk_refuses_the_write_whole_and_the_group_goes_on() -> None:
    """Issue 44: a leader whose append finds its disk full fails the write with DiskFull
    (the node answers KAFKA_STORAGE_ERROR; a retriable error hung the client until its
    timeout), steps down without a hole or a fork in any log, and a follower whose disk
    is full neither corrupts its log nor stops the others from committing; both write
    again once space is freed."""

    async def scenario() -> None:
        cluster = SimCluster(3, seed=11)
        await cluster.start()
        leader = (await cluster.wait_for_leader()).consensus
        await leader.replicate([data(b"kept")]).finished
        full = leader.log
        assert isinstance(full, MemoryLog)
        end = full.dirty_offset
        full.capacity_bytes = _used(full) + 10
        with pytest.raises(DiskFull):
            await leader.replicate([data(b"x" * 1000)]).finished
        assert full.dirty_offset == end  # nothing of it in the log
        full.capacity_bytes = None
        # It stepped down: the next leader (maybe itself again) is elected in a new term.
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(NotLeaderError),
            stop=stop_after_attempt(20),
            wait=wait_fixed(0.2),
            reraise=True,
        ):
            with attempt:
                again = (await cluster.wait_for_leader()).consensus
                await again.replicate([data(b"after")]).finished
        # A follower's disk fills: the other two commit without it.
        follower = next(n for n in cluster.nodes.values() if n.consensus is not again)
        flog = follower.consensus.log
        assert isinstance(flog, MemoryLog)
        flog.capacity_bytes = _used(flog) + 10
        await again.replicate([data(b"y" * 1000)]).finished
        assert flog.dirty_offset < again.log.dirty_offset
        flog.capacity_bytes = None
        await asyncio.sleep(2.0)  # recovery catches it up
        logs = {n.node_id: log_of(n.consensus) for n in cluster.nodes.values()}
        assert len({tuple(v) for v in logs.values()}) == 1, logs
        payloads = [line.split(" ", 2)[2] for line in logs[follower.node_id] if "DATA" in line]
        assert payloads == ["kept", "after", "y" * 1000]
        await cluster.stop()

    run_virtual(scenario())


def test_every_replica_tells_its_listeners_the_leader_it_learns_once_per_change() -> None:
    """``known_leader_listeners`` hear each change of the leader a replica knows (a held
    metadata answer wakes on them): every replica the first leader, then, after that
    leader is cut off, the survivors the new one."""

    async def scenario() -> None:
        cluster = SimCluster(3, seed=5)
        heard: dict[int, list[int]] = {i: [] for i in cluster.ids}
        await cluster.start()
        for i, node in cluster.nodes.items():
            assert node.consensus.leader_id == -1  # none yet: every change is heard
            node.consensus.known_leader_listeners.append(heard[i].append)
        first = (await cluster.wait_for_leader()).node_id
        await asyncio.sleep(1.0)  # heartbeats tell the followers
        for i in cluster.ids:
            known = [leader for leader in heard[i] if leader >= 0]
            assert known == [first], (i, heard[i])
            # a change each time: the same leader is never told twice in a row
            assert all(a != b for a, b in itertools.pairwise(heard[i])), heard[i]
        cluster.network.partition({first}, cluster.ids)
        second = (await cluster.wait_for_leader(exclude=first)).node_id
        await asyncio.sleep(1.0)
        for i in cluster.ids:
            if i != first:
                assert [x for x in heard[i] if x >= 0][-1] == second, (i, heard[i])
                assert heard[i][-1] == second, (i, heard[i])
        await cluster.stop()

    run_virtual(scenario())


@pytest.mark.parametrize("commit_at_once", [True, False], ids=["commit_at_once", "rounds"])
def test_a_commit_at_once_leader_tells_its_followers_before_the_next_round(
    commit_at_once: bool,
) -> None:
    """The controller group's followers learn each new commit index within a network
    round trip of the leader's commit, not at the next heartbeat round (the other
    nodes create a new topic's groups when they apply its creation). Without the
    option (the rounds variant) some of the 20 commits are not known there in time."""

    async def scenario() -> list[int]:
        options = sim_options()
        options.commit_at_once = commit_at_once
        cluster = SimCluster(3, seed=11, options=options, heartbeat_interval_s=0.5)
        await cluster.start()
        leader = (await cluster.wait_for_leader()).consensus
        late = []
        for i in range(20):
            result = await leader.replicate([data(b"x%d" % i)]).finished
            await asyncio.sleep(0.05)  # a tenth of a heartbeat round
            followers = [n.consensus for n in cluster.nodes.values() if n.consensus is not leader]
            if any(f.commit_index < result.last_offset for f in followers):
                late.append(i)
        await cluster.stop()
        return late

    late = run_virtual(scenario())
    if commit_at_once:
        assert late == []
    else:
        assert late, "every commit reached the followers within 50 ms without the option"
