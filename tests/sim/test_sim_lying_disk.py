"""A lying disk (issue 16): a follower loses entries it had flushed and acknowledged.

Directed scenario on the simulated cluster (real Consensus, virtual time): nodes
L and F commit entries while G is partitioned away; F's disk then loses them all
and L crashes. G's log is longer than F's empty one, so only F's promise (its
commit context) keeps it from electing G, which lacks the committed entries.
When L returns the group elects a leader that has them, and F catches up.
"""

from __future__ import annotations

import asyncio

from raftlog.sim.cluster import SimCluster
from raftlog.sim.loop import run_virtual
from raftlog.storage.batch import RecordBatch

RECORDS = 5


def test_a_follower_that_lost_acknowledged_data_elects_no_leader_missing_it() -> None:
    async def run() -> None:
        cluster = SimCluster(3, seed=7)
        await cluster.start()
        leader = await cluster.wait_for_leader()
        f, g = (cluster.nodes[i] for i in cluster.ids if i != leader.node_id)
        cluster.network.partition({g.node_id}, cluster.ids)
        offsets = []
        for i in range(RECORDS):
            res = await leader.consensus.replicate(
                [RecordBatch.create(b"r%d" % i, timestamp_ms=0)]
            ).finished
            offsets.append(res.base_offset)
        committed = leader.consensus.commit_index
        assert committed >= offsets[-1]
        # F saves its commit context (an offset it flushed) on its periodic tick.
        for _ in range(100):
            ctx = f.log.load_commit_context()
            if ctx is not None and ctx.committed_offset >= offsets[-1]:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("F never saved a commit context past the writes")
        assert g.log.dirty_offset < offsets[0]  # G lacks every committed record
        f.crash()
        f.log.lose_flushed(-1)  # the lying disk: even flushed entries are gone
        leader.crash()
        cluster.network.heal()
        await f.restart()
        assert f.consensus.core.behind_promise
        # G campaigns over and over; F must never vote for it.
        await cluster.settle(3.0)
        assert cluster.leader() is None, "a leader missing committed entries was elected"
        assert f.log.load_vote().voted_for != g.node_id
        # L returns: the only electable leader has every committed record; F catches up.
        await leader.restart()
        new = await cluster.wait_for_leader()
        assert new.node_id == leader.node_id
        await cluster.settle(2.0)
        for node in (new, f, g):
            got = [b.base_offset for b in node.consensus.read(0, 1 << 20)]
            assert set(offsets) <= set(got), (node.node_id, got)
        assert not f.consensus.core.behind_promise
        # The promise is gone durably too: the stored context moved past it.
        await cluster.settle(2.0)
        ctx = f.log.load_commit_context()
        assert ctx is not None and ctx.committed_offset > committed
        await cluster.stop()

    run_virtual(run())
