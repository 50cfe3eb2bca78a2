"""The simulator cannot be fooled: handler exceptions fail the seed; faults and checks work."""

from __future__ import annotations

import asyncio
import random

import pytest

from raftlog.raft import mutations
from raftlog.raft.core import SafetyViolation
from raftlog.raft.errors import RaftError, TransportError
from raftlog.sim import run_seed
from raftlog.sim.checks import InvariantChecker, InvariantViolation
from raftlog.sim.cluster import SimCluster
from raftlog.sim.loop import run_virtual
from raftlog.sim.network import Endpoint, NetworkOptions, SimNetwork
from raftlog.storage.batch import RecordBatch


def _network(**options: float) -> SimNetwork:
    return SimNetwork(random.Random(1), NetworkOptions(**options))


async def _serve(net: SimNetwork, node: int, handler) -> None:  # type: ignore[no-untyped-def]
    net.attach(node, Endpoint(handler, asyncio.get_running_loop().create_task))


def test_a_handler_exception_is_kept_as_the_runs_failure() -> None:
    async def run() -> SimNetwork:
        net = _network()

        async def bad(message: object) -> object:
            raise SafetyViolation("two leaders in term 3")

        await _serve(net, 2, bad)
        with pytest.raises(TransportError):
            await net.send(1, 2, "append")
        return net

    net = run_virtual(run())
    assert isinstance(net.failure, SafetyViolation)
    with pytest.raises(InvariantViolation, match="a request handler raised: SafetyViolation"):
        InvariantChecker().check([], net.failure)


def test_a_refusal_is_not_a_failure() -> None:
    async def run() -> SimNetwork:
        net = _network()

        async def stopped(message: object) -> object:
            raise RaftError("group 1 stopped")

        await _serve(net, 2, stopped)
        with pytest.raises(TransportError):
            await net.send(1, 2, "append")
        return net

    assert run_virtual(run()).failure is None


def test_one_way_cut_blocks_one_direction_only() -> None:
    async def run() -> tuple[object, bool]:
        net = _network(rpc_timeout_s=0.05)

        async def echo(message: object) -> object:
            return message

        await _serve(net, 1, echo)
        await _serve(net, 2, echo)
        net.cut_one_way(1, 2)
        reply = await net.send(2, 1, "ping")  # 2 -> 1 and the reply 1 -> 2? cut: lost
        return reply, False

    with pytest.raises(TransportError, match=r"reply .* 1->2 lost"):
        run_virtual(run())

    async def run2() -> list[object]:
        net = _network(rpc_timeout_s=0.05)
        got: list[object] = []

        async def sink(message: object) -> object:
            got.append(message)
            return "ok"

        await _serve(net, 1, sink)
        await _serve(net, 2, sink)
        net.cut_one_way(1, 2)
        with pytest.raises(TransportError, match=r"request .* 1->2 lost"):
            await net.send(1, 2, "a")
        with pytest.raises(TransportError):
            await net.send(2, 1, "b")  # delivered, its reply lost
        net.heal()
        assert await net.send(1, 2, "c") == "ok"
        return got

    assert run_virtual(run2()) == ["b", "c"]


def test_duplicates_and_late_replies_happen_and_are_counted() -> None:
    async def run() -> tuple[SimNetwork, list[object]]:
        net = _network(duplicate_rate=0.5, late_reply_rate=0.5, late_reply_max_s=0.05)
        got: list[object] = []

        async def sink(message: object) -> object:
            got.append(message)
            return message

        await _serve(net, 1, sink)
        await _serve(net, 2, sink)
        for i in range(40):
            assert await net.send(1, 2, i) == i
        return net, got

    net, got = run_virtual(run())
    assert net.duplicated > 5 and net.late_replies > 5
    assert len(got) == 40 + net.duplicated


def test_held_requests_wait_for_release_and_are_lost_past_the_timeout() -> None:
    async def run() -> tuple[list[object], list[object], SimNetwork]:
        net = _network(rpc_timeout_s=0.1)
        got: list[object] = []

        async def sink(message: object) -> object:
            got.append(message)
            return message

        await _serve(net, 1, sink)
        await _serve(net, 2, sink)
        net.hold(lambda m: isinstance(m, int))
        held = [asyncio.create_task(net.send(1, 2, i)) for i in range(3)]
        assert await net.send(1, 2, "not held") == "not held"
        await asyncio.sleep(0.05)
        before = list(got)  # nothing held was delivered yet
        net.release()
        assert [await t for t in held] == [0, 1, 2]
        net.hold(lambda m: m == "late")
        with pytest.raises(TransportError, match="request str 1->2 held"):
            await net.send(1, 2, "late")
        net.release()
        return before, got, net

    before, got, net = run_virtual(run())
    assert before == ["not held"]
    # All three at the release (in the order their delays brought them to the hold); the
    # one held past the RPC timeout never arrived.
    assert got[0] == "not held" and sorted(got[1:]) == [0, 1, 2]
    assert net.lost_by_type["str"] == 1


def test_quorum_durability_is_checked_on_the_simulated_disk() -> None:
    """Plant the fault: drop the flushed entry from two of three disks after commit."""

    async def run() -> None:
        cluster = SimCluster(3, seed=3)
        await cluster.start()
        leader = await cluster.wait_for_leader()
        await leader.consensus.replicate([RecordBatch.create(b"v", timestamp_ms=0)]).finished
        checker = InvariantChecker()
        nodes = list(cluster.nodes.values())
        checker.check(nodes)
        end = checker.history_end
        for node in [n for n in nodes if n is not leader]:
            node.crash()
            node.log._flushed = end - 1  # the disk "forgot" the fsync
            node.log.tear_tail(0)
        with pytest.raises(InvariantViolation, match="quorum durability"):
            checker.check(nodes)

    run_virtual(run())


def test_a_failing_seed_reports_seed_replay_traceback_and_trace() -> None:
    with mutations.planted("commit_on_leader_flush"):
        result = run_seed(3)
    assert not result.ok
    assert result.error.startswith("seed 3 failed (replay: raftlog.sim.run_seed(3))")
    assert "InvariantViolation" in result.error and "Traceback" in result.error
    assert "trace (last faults and leader changes" in result.error and "leads term" in result.error


def test_a_paused_clock_stops_then_jumps_and_its_leader_steps_down() -> None:
    """A leader whose clock stops ticks no more (its ticks stay put) while the others
    elect a new leader; when its clock resumes, the missed ticks run at once and its
    check-quorum finds that no majority answered it within the election timeout."""

    async def run() -> tuple[int, int, int, bool, bool]:
        cluster = SimCluster(3, seed=5)
        await cluster.start()
        leader = await cluster.wait_for_leader()
        others = [i for i in cluster.ids if i != leader.node_id]
        tick_s = cluster.options.tick_interval_s
        pause = asyncio.create_task(leader.pause_clock(40 * tick_s))
        cluster.network.partition({leader.node_id}, cluster.ids)
        # a tick whose sleep began before the pause may still end: read after two
        await asyncio.sleep(2 * tick_s)
        frozen = leader.consensus.core.ticks
        await asyncio.sleep(30 * tick_s)
        still_frozen = leader.consensus.core.ticks
        led_while_paused = leader.consensus.is_leader
        new = await cluster.wait_for_leader(exclude=leader.node_id)
        await pause
        await asyncio.sleep(2 * tick_s)
        jumped = leader.consensus.core.ticks
        stepped_down = not leader.consensus.is_leader and new.node_id in others
        await cluster.stop()
        return frozen, still_frozen, jumped, led_while_paused, stepped_down

    frozen, still_frozen, jumped, led_while_paused, stepped_down = run_virtual(run())
    assert still_frozen == frozen  # no tick while paused
    assert led_while_paused  # a frozen clock never runs its check-quorum
    assert jumped >= frozen + 35  # the missed ticks ran at once
    assert stepped_down
