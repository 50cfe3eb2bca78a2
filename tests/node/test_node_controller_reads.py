"""A new controller leader answers topic reads only from state that includes what its
predecessor acknowledged: once an entry of its own term is committed and its
controller state has applied the commit index (bounded wait); followers answer at once."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from raftlog.node import metadata
from raftlog.node.metadata import MetadataApi
from raftlog.rpc.messages import ListTopicsRequest


class FakeController:
    """The controller group as the read barrier sees it."""

    def __init__(self, leader: bool) -> None:
        self.is_leader = leader
        self.core = SimpleNamespace(committed_in_term=False)
        self.commit_index = 5
        self._changed = asyncio.Event()

    async def commit_changed(self) -> None:
        await self._changed.wait()
        self._changed.clear()

    def commit_own_entry(self) -> None:
        self.core.committed_in_term = True
        self._changed.set()


class FakeControllerStm:
    def __init__(self) -> None:
        self.topics: dict[str, object] = {}
        self.last_applied = 3
        self._applied = asyncio.Event()

    async def wait_applied(self, offset: int, timeout: float) -> bool:
        try:
            async with asyncio.timeout(timeout):
                while self.last_applied < offset:
                    await self._applied.wait()
                    self._applied.clear()
        except TimeoutError:
            return False
        return True

    def apply_create(self, name: str, offset: int) -> None:
        self.topics[name] = object()
        self.last_applied = offset
        self._applied.set()


class Node(MetadataApi):
    def __init__(self, leader: bool) -> None:
        self.controller = FakeController(leader)
        self.controller_stm = FakeControllerStm()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0.01)


async def test_a_new_leader_answers_once_it_committed_in_its_term_and_applied() -> None:
    node = Node(leader=True)
    answer = asyncio.ensure_future(node.list_topics(ListTopicsRequest()))
    await settle()
    assert not answer.done()  # nothing of its own term committed yet
    node.controller.commit_own_entry()
    await settle()
    assert not answer.done()  # committed, but its state has not applied offset 5
    node.controller_stm.apply_create("orders", 5)
    async with asyncio.timeout(5):
        assert (await answer).names == ["orders"]


async def test_a_follower_answers_from_its_copy_at_once() -> None:
    node = Node(leader=False)
    async with asyncio.timeout(1):
        assert (await node.list_topics(ListTopicsRequest())).names == []


async def test_the_wait_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata, "CONTROLLER_READ_WAIT_S", 0.2)
    node = Node(leader=True)
    loop = asyncio.get_running_loop()
    start = loop.time()
    async with asyncio.timeout(5):
        assert (await node.list_topics(ListTopicsRequest())).names == []
    assert 0.15 <= loop.time() - start < 2.0
