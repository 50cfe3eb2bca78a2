"""rm_stm on real Consensus replicas (simulated network and disk): a producer's
pipelined requests that reach the leader together are written in one append."""

from __future__ import annotations

import asyncio

import pytest

from raftlog.producers.rm_stm import RmStm, RmStmConfig
from raftlog.raft.replicate_batcher import Consistency
from raftlog.sim.loop import run_virtual
from raftlog.sim.producer_nodes import ProducerSimCluster
from raftlog.storage.batch import BatchKind, RecordBatch

Q = Consistency.QUORUM_ACK
IN_FLIGHT = 5
ROUNDS = 20
PRODUCERS = (7, 8)


def _data(pid: int, epoch: int, seq: int) -> RecordBatch:
    return RecordBatch.create(
        f"{pid}:{seq}".encode(), 1, producer_id=pid, producer_epoch=epoch, first_sequence=seq
    )


@pytest.mark.parametrize("seed", range(3))
def test_pipelined_requests_of_producers_share_one_append(seed: int) -> None:
    """Each round, two producers' 5 requests each and 5 plain ones, sent in one turn of
    the loop, go to the followers as one append: a request is queued in the
    replicate_batcher as it arrives, so no producer's lock is held across a task
    switch. When each request took a task to be queued, a producer's requests
    were queued one per loop turn and split over several appends."""

    async def scenario() -> None:
        cluster = ProducerSimCluster(3, seed, RmStmConfig())
        await cluster.start()
        try:
            leader = await cluster.wait_for_leader()
            rm: RmStm = leader.rm  # type: ignore[attr-defined]
            epochs = {pid: (await rm.init_producer(pid)).epoch for pid in PRODUCERS}
            await rm.sync()
            entries = leader.consensus._entries
            for round_ in range(ROUNDS):
                before = entries.appends
                requests = [
                    rm.replicate(_data(pid, epochs[pid], round_ * IN_FLIGHT + i), Q)
                    for i in range(IN_FLIGHT)
                    for pid in PRODUCERS
                ]
                requests += [
                    rm.replicate(RecordBatch.create(b"plain", 1), Q) for _ in range(IN_FLIGHT)
                ]
                results = await asyncio.wait_for(asyncio.gather(*requests), 5.0)
                assert entries.appends - before == 1, f"round {round_}"
                # log order is the order the requests were made in
                bases = [r.base_offset for r in results]
                assert bases == sorted(bases) and len(set(bases)) == len(bases)
            for pid in PRODUCERS:
                seqs = [
                    b.first_sequence
                    for b in leader.consensus.log.read(0, 1 << 30)
                    if b.kind is BatchKind.DATA and b.producer_id == pid
                ]
                assert seqs == list(range(ROUNDS * IN_FLIGHT))
        finally:
            await cluster.stop()

    run_virtual(scenario())
