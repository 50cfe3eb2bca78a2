"""The raft failpoint sites: a vote that cannot be saved never leaves the node."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

from raftlog.faults import failpoints
from raftlog.faults.failpoints import RAFT_BEFORE_VOTE_SAVE, RAFT_FOLLOWER_BEFORE_REPLY
from raftlog.raft.messages import VoteRequest
from raftlog.sim.cluster import SimCluster
from raftlog.sim.loop import run_virtual
from raftlog.storage.api import VoteState
from raftlog.storage.batch import RecordBatch


@pytest.fixture(autouse=True)
def _restore_failpoints() -> Iterator[None]:
    yield
    failpoints.configure(os.environ.get(failpoints.ENV_VAR, ""))


def test_vote_save_error_persists_no_vote_and_sends_no_vote_request() -> None:
    async def scenario() -> None:
        failpoints.configure(f"{RAFT_BEFORE_VOTE_SAVE}=error")
        cluster = SimCluster(3, seed=5)
        await cluster.start()
        await asyncio.sleep(3.0)  # many election timeouts
        assert failpoints.hits(RAFT_BEFORE_VOTE_SAVE) > 0
        for node in cluster.nodes.values():
            # Nothing persisted, and since no vote request left unpersisted, nobody
            # granted one (granting saves a vote too) and nobody leads.
            assert node.log.load_vote() == VoteState(), node.node_id
            assert not node.consensus.is_leader
        # The disk heals: the pending vote is saved before anything else goes out.
        failpoints.configure("")
        leader = (await cluster.wait_for_leader()).consensus
        assert leader.log.load_vote() == VoteState(leader.term, leader.node_id)
        await leader.replicate([RecordBatch.create(b"x", 1, timestamp_ms=0)]).finished
        await cluster.stop()

    run_virtual(scenario())


def test_vote_grant_is_not_returned_when_its_save_fails() -> None:
    async def scenario() -> None:
        cluster = SimCluster(3, seed=1)
        await cluster.start()
        leader = (await cluster.wait_for_leader()).consensus
        follower = next(n for n in cluster.nodes.values() if n.consensus is not leader)
        saved = follower.log.load_vote()
        failpoints.configure(f"{RAFT_BEFORE_VOTE_SAVE}=error")
        req = VoteRequest(
            group=follower.consensus.group,
            source_node=99,
            target_node=follower.node_id,
            term=follower.consensus.term + 5,
            prevote=False,
            last_log_offset=follower.log.dirty_offset + 100,
            last_log_term=follower.consensus.term + 5,
            leadership_transfer=True,  # past the leader lease
        )
        with pytest.raises(failpoints.FailpointError):
            await follower.consensus.handle(req)
        assert follower.log.load_vote() == saved
        failpoints.configure("")
        await cluster.stop()

    run_virtual(scenario())


def test_follower_before_reply_fires_on_successful_appends_only() -> None:
    async def scenario() -> None:
        failpoints.configure(f"{RAFT_FOLLOWER_BEFORE_REPLY}=sleep:0")
        cluster = SimCluster(3, seed=2)
        await cluster.start()
        leader = (await cluster.wait_for_leader()).consensus
        before = failpoints.hits(RAFT_FOLLOWER_BEFORE_REPLY)
        assert before >= 2  # the noop reached both followers
        await leader.replicate([RecordBatch.create(b"y", 1, timestamp_ms=0)]).finished
        assert failpoints.hits(RAFT_FOLLOWER_BEFORE_REPLY) > before
        await cluster.stop()

    run_virtual(scenario())
