"""What the async stages need from their group: a protocol, so they never import ``Consensus``.

``replicate_entries``, ``recovery``, the follower's append path
(``follower_append``), membership changes (``membership``), the applier
(``state_machines``) and the node's ``HeartbeatManager`` carry out what the core
decides; :class:`~raftlog.raft.consensus.Consensus` owns them and passes itself
as their :class:`GroupContext` (or :class:`HeartbeatGroup`). Typing the stages
against these protocols instead of ``Consensus`` keeps the import graph a tree:
``consensus`` imports the stages, the stages import only this module, the core,
storage and messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

from raftlog.raft.configuration import ConfigurationHistory
from raftlog.raft.core import Message, RaftCore, Ready
from raftlog.raft.errors import NotLeaderError
from raftlog.raft.flush import FlushCoalescer
from raftlog.raft.messages import Heartbeat, HeartbeatReply
from raftlog.raft.options import ConsensusOptions
from raftlog.raft.replicate_batcher import (
    Consistency,
    ReplicateBatcher,
    ReplicateResult,
    ReplicateStages,
)
from raftlog.raft.transport import Transport
from raftlog.storage.api import CommitContext, LogStorage
from raftlog.storage.batch import RecordBatch


class RecoveryStarter(Protocol):
    def ensure(self, node: int) -> None:
        """Start recovering ``node`` unless it already is."""
        ...


class GroupContext(Protocol):
    """One group as its replicate and recovery stages see it."""

    group: int
    node_id: int
    options: ConsensusOptions
    core: RaftCore
    configs: ConfigurationHistory
    log: LogStorage
    transport: Transport
    flusher: FlushCoalescer
    batcher: ReplicateBatcher
    running: bool
    truncations: int  # suffix truncations and snapshot installs so far
    # off-loop saves of the commit context (None: on the loop; see Applier)
    commit_context_saver: Callable[[CommitContext], Awaitable[None]] | None

    @property
    def recovery(self) -> RecoveryStarter: ...

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]: ...

    def step(self, message: Message) -> Ready:
        """Step ``message`` into the core and carry out its ready; that ready."""
        ...

    def not_leader_error(self) -> NotLeaderError: ...

    async def seal_ahead(self, term: int) -> None: ...

    def start_snapshot(self) -> tuple[int, bytes] | None: ...

    def read(
        self, start: int, max_bytes: int, end: int | None = None, *, verify: bool = True
    ) -> list[RecordBatch]: ...

    def replicate(
        self,
        batches: list[RecordBatch],
        consistency: Consistency = ...,
        expected_term: int | None = None,
    ) -> ReplicateStages: ...

    def require_leader(self) -> None: ...

    async def commit_changed(self) -> None: ...

    def register_commit_waiter(
        self, result: ReplicateResult, future: asyncio.Future[ReplicateResult]
    ) -> None: ...


class HeartbeatGroup(Protocol):
    """One group as the node's heartbeat manager sees it."""

    group: int
    running: bool

    @property
    def is_leader(self) -> bool: ...

    def heartbeats(self) -> list[tuple[int, Heartbeat]]: ...

    def on_heartbeat_reply(self, peer: int, hb: Heartbeat, reply: HeartbeatReply) -> None: ...

    def handle_heartbeat(self, source: int, hb: Heartbeat) -> HeartbeatReply: ...

    def peer_nodes(self) -> list[int]:
        """The other members of the group (the nodes whose liveness it depends on)."""
        ...

    def on_node_dead(self, node: int, refused: bool = False) -> None:
        """Node liveness declared ``node`` dead (a quiescent group may wake);
        ``refused``: its address refused connections (see ``NodeDead``)."""
        ...

    def on_node_alive(self, node: int) -> None:
        """Node liveness heard ``node`` again after declaring it dead (a quiescent
        leader that quiesced without it wakes)."""
        ...

    async def handle(self, message: object) -> object:
        """The reply to one peer request addressed to this group (the node's dispatcher)."""
        ...
