"""A new controller leader answers topic reads only from state that includes what its
predecessor acknowledged: once it passed the controller group's read barrier (an entry
of its own term committed, its controller state applied the term's read index), waiting
up to CONTROLLER_READ_WAIT_S and then refusing with LEADER_NOT_AVAILABLE (it never
answers from state that may lack something acknowledged); followers answer at once."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from raftlog.controller import ControllerStm, CreateTopicCmd, DeleteTopicCmd, command_batch
from raftlog.node import metadata
from raftlog.node.metadata import MetadataApi
from raftlog.raft.errors import ReadBarrierTimeout, ReadNotReadyError
from raftlog.raft.read_index import ReadIndex, unready_reason
from raftlog.rpc.messages import ErrorCode, ListTopicsRequest
from raftlog.rpc.server import RequestError


class FakeController:
    """The controller group as the read barrier sees it: the core's decision is set by
    the test; the rest is Consensus's contract (unready_reason, a bounded wait)."""

    def __init__(self, leader: bool, stm: FakeControllerStm) -> None:
        self.is_leader = leader
        self.decision = ReadIndex(-1, True, "has not committed an entry of its term yet")
        self.stm = stm
        self.changed = asyncio.Event()

    def commit_own_entry(self, read_index: int) -> None:
        self.decision = ReadIndex(read_index, True)
        self.changed.set()

    async def read_barrier(self, timeout_s: float) -> int:
        try:
            async with asyncio.timeout(timeout_s):
                while why := unready_reason(self.decision, self.stm.last_applied):
                    self.changed.clear()
                    await self.changed.wait()
        except TimeoutError:
            raise ReadBarrierTimeout(f"controller group: it {why}") from None
        return self.decision.index


class FakeControllerStm:
    def __init__(self) -> None:
        self.topics: dict[str, object] = {}
        self.last_applied = 3

    def apply_create(self, name: str, offset: int, controller: FakeController) -> None:
        self.topics[name] = object()
        self.last_applied = offset
        controller.changed.set()


class Node:
    """A node as its metadata part sees it: a context holding the fake controller."""

    def __init__(self, leader: bool) -> None:
        self.controller_stm = FakeControllerStm()
        self.controller = FakeController(leader, self.controller_stm)
        ctx = SimpleNamespace(controller_stm=self.controller_stm, controller=self.controller)
        # list_topics names no node: the part's membership is never asked
        self.metadata = MetadataApi(ctx, membership=None)  # type: ignore[arg-type]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0.01)


async def test_a_new_leader_answers_once_it_passed_the_read_barrier() -> None:
    node = Node(leader=True)
    answer = asyncio.ensure_future(node.metadata.list_topics(ListTopicsRequest()))
    await settle()
    assert not answer.done()  # nothing of its own term committed yet
    node.controller.commit_own_entry(5)
    await settle()
    assert not answer.done()  # committed, but its state has not applied offset 5
    node.controller_stm.apply_create("orders", 5, node.controller)
    async with asyncio.timeout(5):
        assert (await answer).names == ["orders"]


async def test_a_follower_answers_from_its_copy_at_once() -> None:
    node = Node(leader=False)
    async with asyncio.timeout(1):
        assert (await node.metadata.list_topics(ListTopicsRequest())).names == []


async def test_the_wait_is_bounded_and_then_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata, "CONTROLLER_READ_WAIT_S", 0.2)
    node = Node(leader=True)
    loop = asyncio.get_running_loop()
    start = loop.time()
    async with asyncio.timeout(5):
        with pytest.raises(RequestError) as info:
            await node.metadata.list_topics(ListTopicsRequest())
    assert 0.15 <= loop.time() - start < 2.0
    assert info.value.code is ErrorCode.LEADER_NOT_AVAILABLE
    assert "has not committed an entry of its term yet" in str(info.value)
    assert issubclass(ReadBarrierTimeout, ReadNotReadyError)


def test_a_topic_is_gone_only_once_the_state_applied_its_creation_and_deletion() -> None:
    """What settles a transaction marker on an unknown partition (PeerMarkers): a state
    that has not applied the topic's creation yet proves nothing; one that applied it
    and no longer holds that id proves the topic deleted (or deleted and created again)."""
    stm = ControllerStm()
    api = MetadataApi(SimpleNamespace(controller_stm=stm), None)  # type: ignore[arg-type]

    def apply(cmd: object) -> None:
        stm.apply(command_batch(cmd).stamped(stm.last_applied + 1, 1))  # type: ignore[arg-type]

    apply(CreateTopicCmd("other", 1, 3, [1, 2, 3]))
    # a lagging replica: topic t (whose id will be 2) not created here yet
    assert not api.topic_gone("t", 2)
    assert api.topic_gone("t", -1)  # no id to go by: the name alone
    apply(CreateTopicCmd("t", 2, 3, [1, 2, 3]))
    tid = stm.topics["t"].partitions[0].group_id
    assert tid == 2 and not api.topic_gone("t", tid) and not api.topic_gone("t", -1)
    apply(DeleteTopicCmd("t"))
    assert api.topic_gone("t", tid)
    apply(CreateTopicCmd("t", 1, 3, [1, 2, 3]))  # the name again, a new id
    again = stm.topics["t"].partitions[0].group_id
    assert again > tid and api.topic_gone("t", tid) and not api.topic_gone("t", again)
