"""A group whose task fails steps down, logs with its name, and restarts its tasks."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from raftlog.raft.errors import RaftError
from raftlog.sim.cluster import SimCluster
from raftlog.sim.loop import run_virtual
from raftlog.storage.batch import RecordBatch


async def _poisoned_write_then_recover() -> tuple[int, int, int, object, bool]:
    cluster = SimCluster(3, seed=7)
    await cluster.start()
    leader = await cluster.wait_for_leader()
    c = leader.consensus
    term = c.term
    # A value that slipped past decoding makes the leader's append raise (on disk, a
    # record count of 2^31 fails to encode its int32 header field): plant that here.
    real_append = c.append_local

    def poisoned_append(batches: list[RecordBatch]) -> None:
        if any(b.payload == b"bad" for b in batches):
            raise OverflowError("record_count 2147483648 does not fit the int32 header field")
        real_append(batches)

    c.append_local = poisoned_append  # type: ignore[method-assign]
    stages = c.replicate([RecordBatch.create(b"bad", timestamp_ms=0)])
    with pytest.raises(RaftError, match="replicate failed"):
        await asyncio.wait_for(stages.finished, 5)
    stepped_down = not c.is_leader or c.term > term
    # The group keeps taking writes (on whichever node leads now), the failed node included.
    for _ in range(50):
        new_leader = await cluster.wait_for_leader()
        try:
            result = await asyncio.wait_for(
                new_leader.consensus.replicate(
                    [RecordBatch.create(b"ok", timestamp_ms=0)]
                ).finished,
                5,
            )
            break
        except (RaftError, TimeoutError):
            continue
    else:
        raise AssertionError("no write succeeded after the failure")
    # The failed replica's restarted batcher serves writes again once it leads.
    for _ in range(20):
        if c.is_leader:
            break
        current = await cluster.wait_for_leader()
        if current is not leader:
            with contextlib.suppress(RaftError, TimeoutError):
                await current.consensus.transfer_leadership(leader.node_id)
        await asyncio.sleep(0.1)
    again = None
    if c.is_leader:
        again = await asyncio.wait_for(
            c.replicate([RecordBatch.create(b"again", timestamp_ms=0)]).finished, 5
        )
    await cluster.stop()
    return c.task_failures, result.last_offset, term, again, stepped_down


def test_a_failed_task_steps_down_and_restarts(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="raftlog.raft.consensus"):
        failures, offset, _term, again, stepped_down = run_virtual(_poisoned_write_then_recover())
    assert failures == 1
    assert stepped_down
    assert offset >= 0
    assert again is not None, "the failed replica could not serve writes after its restart"
    assert any(
        "group 1 on node" in r.getMessage() and "task batcher failed" in r.getMessage()
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records]
