"""Recovery pipelines its chunks: the core's window (pure) and the stage that carries it out.

The core hands out one chunk at a time until a success confirms the follower's
match point, then up to ``recovery_max_inflight`` chunks, each from where the
last ended; a mismatch or a lost chunk goes back to one at a time from the
corrected ``next_offset``, and replies to chunks sent before that count only
through the usual seq checks. ``testdata/recovery_pipelined.txt`` plays the same
story as a script; these tests assert it field by field, and that the async
stage really keeps several chunks on the network at once.
"""

from __future__ import annotations

import asyncio

import pytest

from raftlog.raft import mutations
from raftlog.raft.core import CoreOptions, Message, RaftCore, Ready
from raftlog.raft.local_messages import (
    Campaign,
    HeartbeatAnswered,
    HeartbeatFrom,
    HeartbeatRound,
    RecoveryAnswered,
    RecoveryChunkRead,
    RecoveryLost,
    RecoveryPoll,
)
from raftlog.raft.messages import (
    APPEND_SUCCESS,
    AppendEntriesReply,
    AppendEntriesRequest,
    HeartbeatReply,
)
from raftlog.raft.options import ConsensusOptions
from raftlog.raft.progress import ProgressState
from raftlog.sim.cluster import SimCluster, sim_options
from raftlog.sim.core_net import CoreNet, placed
from raftlog.sim.loop import run_virtual
from raftlog.storage.batch import RecordBatch

LEADER, FOLLOWER = 1, 3


def _net(entries: int, window: int = 3) -> CoreNet:
    """n1 leads term 1 with ``entries`` one-record batches; n3 has nothing and is probing
    from 0. Chunks of 60 bytes hold one batch each."""
    net = CoreNet(3, options=CoreOptions(recovery_chunk_bytes=60, recovery_max_inflight=window))
    net.cores[LEADER].step(Campaign(prevote=False))
    assert net.deliver()
    for i in range(entries):
        net.write(LEADER, placed(i, 1))
    leader = net.cores[LEADER]
    assert leader.is_leader
    leader.step(HeartbeatRound(only=FOLLOWER))
    ((_, hb),) = net.carry_out(LEADER).heartbeats
    reply = net.request(FOLLOWER, HeartbeatFrom(LEADER, hb))
    assert isinstance(reply, HeartbeatReply)
    leader.step(HeartbeatAnswered(FOLLOWER, hb, reply))
    net.process(LEADER)
    assert leader.progress[FOLLOWER].state is ProgressState.PROBE
    return net


def _hand_out(core: RaftCore, net: CoreNet) -> list[AppendEntriesRequest]:
    """What the stage sends before it waits: every chunk the core hands out now."""
    sent = []
    for _ in range(100):
        chunk = net.step(LEADER, RecoveryPoll(FOLLOWER, core.term)).recovery_read.get(FOLLOWER)
        if chunk is None:
            return sent
        batches = net.logs[LEADER].read(chunk.start, chunk.max_bytes)
        ((target, req),) = net.step(
            LEADER, RecoveryChunkRead(FOLLOWER, core.term, batches)
        ).recovery_send
        assert target == FOLLOWER and isinstance(req, AppendEntriesRequest)
        sent.append(req)
    raise AssertionError("the core never stopped handing out chunks")


def _lost(net: CoreNet, req: AppendEntriesRequest) -> bool:
    """A recovery chunk got no reply: whether the core asks to send again."""
    ready = net.step(LEADER, RecoveryLost(FOLLOWER, req.term, req.seq))
    return FOLLOWER in ready.recovery_retry


def _apply(net: CoreNet, req: AppendEntriesRequest) -> AppendEntriesReply:
    """The follower's side (recovery chunks ask for a flush)."""
    assert req.flush
    return net.deliver_append(FOLLOWER, req)


def _span(req: AppendEntriesRequest) -> tuple[int, int]:
    return req.batches[0].base_offset, req.batches[-1].last_offset


def test_chunks_pipeline_after_the_first_success_and_restart_one_at_a_time() -> None:
    net = _net(8)
    core = net.cores[LEADER]
    p = core.progress[FOLLOWER]

    first = _hand_out(core, net)
    assert [_span(r) for r in first] == [(0, 0)]  # match point unknown: one chunk
    core.step(RecoveryAnswered(FOLLOWER, first[0], _apply(net, first[0])))
    assert (p.match_offset, p.next_offset, p.recovery_confirmed) == (0, 1, True)

    window = _hand_out(core, net)  # all sent before any reply
    assert [_span(r) for r in window] == [(1, 1), (2, 2), (3, 3)]
    assert [r.prev_log_offset for r in window] == [0, 1, 2]
    assert len(p.recovery_window) == 3

    # 1..1 lands, its reply held back; 3..3 overtakes 2..2 and is refused.
    held = _apply(net, window[0])
    refused = _apply(net, window[2])
    assert refused.result != APPEND_SUCCESS and refused.seq > held.seq
    core.step(RecoveryAnswered(FOLLOWER, window[2], refused))
    assert (p.state, p.next_offset, p.recovery_confirmed) == (ProgressState.PROBE, 2, False)
    assert len(p.recovery_window) == 0

    again = _hand_out(core, net)
    assert [_span(r) for r in again] == [(2, 2)]  # one at a time, from the corrected offset

    # The held reply is stale: it moves neither match, next, commit, nor the window.
    before = (p.match_offset, p.next_offset, core.commit_index, p.recovery_window.sent())
    core.step(RecoveryAnswered(FOLLOWER, window[0], held))
    assert (p.match_offset, p.next_offset, core.commit_index, p.recovery_window.sent()) == before
    assert core.commit_index == 0 and _hand_out(core, net) == []

    # 2..2 from before the restart lands now: its reply is the follower's newest state.
    late = _apply(net, window[1])
    core.step(RecoveryAnswered(FOLLOWER, window[1], late))
    assert (p.match_offset, p.next_offset, core.commit_index) == (2, 3, 2)
    assert p.recovery_confirmed and len(p.recovery_window) == 0  # it acknowledged 2..2 too
    assert [_span(r) for r in _hand_out(core, net)] == [(3, 3), (4, 4), (5, 5)]


def test_a_lost_chunk_restarts_the_probe_and_older_losses_count_for_nothing() -> None:
    net = _net(8)
    core = net.cores[LEADER]
    p = core.progress[FOLLOWER]
    (first,) = _hand_out(core, net)
    core.step(RecoveryAnswered(FOLLOWER, first, _apply(net, first)))
    window = _hand_out(core, net)
    assert len(window) == 3

    assert _lost(net, window[1])  # send again
    assert (p.next_offset, p.recovery_confirmed, len(p.recovery_window)) == (1, False, 0)
    assert p.recovery_failures == 1
    # The other chunks of that window are no longer in it: their loss is not counted.
    assert _lost(net, window[2])
    assert p.recovery_failures == 1
    assert [_span(r) for r in _hand_out(core, net)] == [(1, 1)]


def test_back_to_replicate_only_when_no_chunk_is_in_flight() -> None:
    net = _net(3)
    core = net.cores[LEADER]
    p = core.progress[FOLLOWER]
    (first,) = _hand_out(core, net)
    core.step(RecoveryAnswered(FOLLOWER, first, _apply(net, first)))
    window = _hand_out(core, net)
    assert [_span(r) for r in window] == [(1, 1), (2, 2)]  # the log's end is in flight
    core.step(RecoveryAnswered(FOLLOWER, window[0], _apply(net, window[0])))
    # Nothing left to hand out, but 2..2 is unanswered: still recovery's.
    assert _hand_out(core, net) == [] and p.state is ProgressState.PROBE
    assert p.recovery_window.sent() == [(window[1].seq, 2)]
    core.step(RecoveryAnswered(FOLLOWER, window[1], _apply(net, window[1])))
    assert _hand_out(core, net) == []
    assert (p.state, p.last_sent_offset, p.match_offset) == (ProgressState.REPLICATE, 2, 2)


def test_a_stale_reply_to_the_last_chunk_resends_it() -> None:
    """A reply dropped as stale frees the chunk's place but acknowledges nothing: with
    the window empty the cursor is ignored, so the unacknowledged chunk goes again."""
    net = _net(2)
    core = net.cores[LEADER]
    p = core.progress[FOLLOWER]
    (first,) = _hand_out(core, net)
    core.step(RecoveryAnswered(FOLLOWER, first, _apply(net, first)))
    (last,) = _hand_out(core, net)
    reply = _apply(net, last)
    p.last_reply_seq = reply.seq  # a newer reply (a heartbeat's) was applied first
    core.step(RecoveryAnswered(FOLLOWER, last, reply))
    assert (p.next_offset, len(p.recovery_window)) == (1, 0)
    assert [_span(r) for r in _hand_out(core, net)] == [(1, 1)]


def test_the_planted_fault_pipelines_before_the_match_point_is_known() -> None:
    net = _net(8)
    core = net.cores[LEADER]
    with mutations.planted("recovery_pipelines_unmatched"):
        assert len(_hand_out(core, net)) == 3


def _catch_up(window: int) -> tuple[int, int, float, int]:
    """A follower cut off while 40 batches are written, then healed: the most recovery
    chunks in the core's window at once, the most seen unanswered on the network (a
    chunk acknowledged by a later reply leaves the window before its own reply comes
    back), the virtual seconds from the first chunk answered until the follower is
    back in REPLICATE, and the chunks sent."""

    async def scenario() -> tuple[int, int, float, int]:
        options: ConsensusOptions = sim_options()
        options.recovery_chunk_bytes = 1  # one batch per chunk
        options.recovery_max_inflight = window
        cluster = SimCluster(3, seed=23, options=options)
        await cluster.start()
        leader = await cluster.wait_for_leader()
        lagging = cluster.nodes[next(i for i in cluster.ids if i != leader.node_id)]
        cluster.network.partition({lagging.node_id}, cluster.ids)
        for i in range(40):
            await leader.consensus.replicate([RecordBatch.create(b"r%d" % i)]).finished
        core = leader.consensus.core
        chunks: set[int] = set()
        widest = 0
        answered: list[float] = []
        real_step = leader.consensus.step

        def stepped(message: Message) -> Ready:
            # Watches the door recovery goes through: the chunks the core hands out (in
            # the ready) and the replies stepped back in.
            nonlocal widest
            if isinstance(message, RecoveryAnswered):
                answered.append(asyncio.get_running_loop().time())
            ready = real_step(message)
            if isinstance(message, RecoveryChunkRead) and message.peer == lagging.node_id:
                chunks.update(req.seq for _t, req in ready.recovery_send)
                peer = core.status().peers[message.peer]
                widest = max(widest, peer.recovery_in_flight)
            return ready

        leader.consensus.step = stepped  # type: ignore[method-assign]
        transport = leader.consensus.transport
        send = transport.send
        out, most = 0, 0

        async def counted(target: int, message: object) -> object:
            nonlocal out, most
            ours = isinstance(message, AppendEntriesRequest) and message.seq in chunks
            if ours:
                out += 1
                most = max(most, out)
            try:
                return await send(target, message)
            finally:
                if ours:
                    out -= 1

        transport.send = counted  # type: ignore[method-assign]
        loop = asyncio.get_running_loop()
        start = loop.time()
        cluster.network.heal()
        end = leader.consensus.log.dirty_offset
        for _ in range(100_000):
            peer = core.status().peers[lagging.node_id]
            if peer.match_offset >= end and peer.state is ProgressState.REPLICATE:
                break
            await asyncio.sleep(0.001)
            assert loop.time() - start < 10, "the follower was not caught up"
        else:
            raise AssertionError("the follower was not caught up")
        took = loop.time() - answered[0]
        assert lagging.consensus.log.flushed_offset >= end
        await cluster.stop()
        return widest, most, took, len(chunks)

    return run_virtual(scenario())


@pytest.mark.parametrize("window", [1, 4])
def test_the_stage_keeps_the_window_on_the_network(window: int) -> None:
    widest, most, _, sent = _catch_up(window)
    assert widest == window
    assert most >= window if window > 1 else most == 1
    assert sent >= 40


def test_pipelining_catches_up_faster_than_one_chunk_per_round_trip() -> None:
    one = _catch_up(1)[2]
    four = _catch_up(4)[2]
    assert four < 0.6 * one, (one, four)  # measured 0.139 s against 0.062 s
