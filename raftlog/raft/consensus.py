"""``Consensus``: one Raft group on this node: the public API the node and rm_stm build on.

Construction and lifecycle::

    c = Consensus(group, node_id, Configuration.of([1, 2, 3]), log, transport,
                  ConsensusOptions(), seed=node_id, heartbeats=node_heartbeat_manager)
    c.add_state_machine(stm)        # optional, before start()
    await c.start()
    ...
    await c.stop()

Writing (leader only)::

    stages = c.replicate(batches, Consistency.QUORUM_ACK, expected_term=None)
    await stages.enqueued           # its place in the log is fixed (backpressure here)
    result = await stages.finished  # ReplicateResult(base_offset, last_offset, term)

``finished`` raises :class:`NotLeaderError` (``.leader_id``: the known leader,
-1 unknown) when this node does not accept writes, :class:`LeadershipLostError`
(a NotLeaderError) when the entry was appended but leadership was lost before
it committed (outcome uncertain), and :class:`TermMismatchError` when
``expected_term`` is not the current term (nothing appended).

Driving the core: every message reaches the pure core through ``step(message)``
(``RaftCore.step``: a peer's request or reply, or a local message of
:mod:`raftlog.raft.local_messages`), which carries out the core's ``Ready`` at
once and returns it; a request's reply is in that ready (replies leave the core
only there). ``status()``: the core's immutable snapshot (progress included).

Incoming peer requests: ``await c.handle(message)`` for append entries, vote
(and prevote), timeout-now and snapshot chunks; heartbeat batches go to the node-level
:class:`HeartbeatManager` (``handle_heartbeats``), which routes to groups.
:class:`~raftlog.raft.dispatch.PeerDispatcher` does that routing for a node.

Reading: ``read(start, max_bytes, end=None)`` returns committed batches only;
``await wait_for_commit(offset, timeout)``. A linearizable read of a state machine
(or of the log up to the high watermark) first passes ``await read_barrier(timeout_s)``,
or ``check_readable()`` in a handler that answers at once (see
:mod:`raftlog.raft.read_index`): the one read barrier of every group. State: ``is_leader``,
``leader_id`` (-1 unknown), ``term``, ``commit_index``, ``high_watermark``
(= commit_index + 1), ``flushed_offset``, ``dirty_offset``, ``configuration``.

State machines: ``add_state_machine(stm)``; ``stm.apply(batch)`` (plain or
async) is called for every committed batch in log order, exactly once per
process lifetime from the restored snapshot on; ``stm.snapshot() -> bytes``
is saved with the commit context and given back to ``stm.restore(bytes)`` on
start.

Membership: ``await add_member(node, learner_first=True)``,
``await remove_member(node)`` (one change in flight; a learner is promoted to
voter automatically once it reaches the leader's flushed offset),
``await transfer_leadership(target)``, ``step_down()``.

Supervision: a group's task that fails with anything but a Raft error or a
timeout (a bug, or a value that slipped past decoding) is logged with the
group's ``name``, recorded in ``fatal_error`` (the simulator fails the seed on
it) and counted in ``task_failures``; the replica steps down, callers waiting
on that task get an error, and the group's long-running tasks (flusher,
batcher, applier) are restarted after a tick; a tick that raises (the node
clock calls ``clock_tick``) is reported the same way. A node never keeps the
leadership of a group it cannot serve.

Ticks: the node's :class:`~raftlog.raft.node_clock.NodeClock` (``clock=``; None:
one of the group's own) ticks this group while its core is not quiescent
(:attr:`RaftCore.quiescent`); ``process_ready`` adds it to or drops it from the
clock after every ``Ready``.

Timing: the stages use the running event loop's clock (``asyncio.sleep``), so
the simulator drives time by running them on a virtual-time loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from raftlog.faults.failpoints import (
    RAFT_BEFORE_VOTE_SAVE,
    FailpointError,
    failpoint,
)
from raftlog.raft import group_snapshot, mutations
from raftlog.raft.commit_waiters import CommitWaiters
from raftlog.raft.configuration import Configuration
from raftlog.raft.core import Message, RaftCore, Ready, Role, Status, reply_in
from raftlog.raft.errors import (
    NotLeaderError,
    RaftError,
    ReadBarrierTimeout,
    ReadNotReadyError,
    TransportError,
)
from raftlog.raft.flush import FlushCoalescer
from raftlog.raft.follower_append import FollowerAppend
from raftlog.raft.follower_install import FollowerInstall
from raftlog.raft.heartbeat_manager import HeartbeatManager, unavailable_reply
from raftlog.raft.local_messages import (
    ConfigurationChanged,
    HeartbeatAnswered,
    HeartbeatFrom,
    HeartbeatRound,
    LocalFlushed,
    NodeAlive,
    NodeDead,
    ReadRequest,
    StepDown,
    Tick,
)
from raftlog.raft.membership import Membership
from raftlog.raft.messages import (
    AppendEntriesRequest,
    Heartbeat,
    HeartbeatReply,
    InstallSnapshotRequest,
    TimeoutNowReply,
    TimeoutNowRequest,
    VoteReply,
    VoteRequest,
)
from raftlog.raft.node_clock import NodeClock
from raftlog.raft.options import ConsensusOptions
from raftlog.raft.read_index import unready_reason
from raftlog.raft.recovery import Recovery
from raftlog.raft.replicate_batcher import (
    Consistency,
    ReplicateBatcher,
    ReplicateResult,
    ReplicateStages,
)
from raftlog.raft.replicate_entries import ReplicateEntries
from raftlog.raft.state_machines import Applier, StateMachine
from raftlog.raft.transport import Transport
from raftlog.storage.api import CommitContext, LogStorage, VoteState
from raftlog.storage.batch import BatchKind, RecordBatch

__all__ = [
    "Configuration",
    "Consensus",
    "ConsensusOptions",
    "Consistency",
    "ReplicateResult",
    "ReplicateStages",
    "StateMachine",
]

log_ = logging.getLogger(__name__)

_EXPECTED_ONE_SHOT_ERRORS = (RaftError, TimeoutError)
"""How a one-shot task (a send, an asked-for flush) may end without a fault of the
group's own: leadership lost, a timeout. Anything else is a failed task."""


class Consensus:
    """One Raft group on this node (see the module docstring for the API contract)."""

    def __init__(
        self,
        group: int,
        node_id: int,
        configuration: Configuration,
        log: LogStorage,
        transport: Transport,
        options: ConsensusOptions | None = None,
        seed: int = 0,
        heartbeats: HeartbeatManager | None = None,
        name: str | None = None,
        flush_barrier: Callable[[], Awaitable[None]] | None = None,
        clock: NodeClock | None = None,
        vote_saver: Callable[[VoteState], Awaitable[None]] | None = None,
        commit_context_saver: Callable[[CommitContext], Awaitable[None]] | None = None,
        vote: VoteState | None = None,
    ) -> None:
        """``clock``: the node's clock, which ticks this group while it is not quiescent
        (None: a clock of the group's own, started and stopped with it).
        ``vote_saver``: makes a vote record durable off the event loop (the node's
        :class:`~raftlog.storage.record_writer.RecordWriter`, one shared sync for many
        groups' votes); None: ``log.save_vote`` on the loop. Either way no message that
        carries a term or a vote leaves before that vote is durable (see process_ready).
        ``vote``: the group's durable vote where ``vote_saver`` keeps it (the node's
        :class:`~raftlog.storage.vote_log.VoteLog`); None: ``log.load_vote()``.
        ``commit_context_saver``: makes a commit context durable off the event loop (the
        same writer), except the last one at stop; None: ``log.save_commit_context`` on
        the loop."""
        self.group = group
        self.commit_context_saver = commit_context_saver
        self._vote_saver = vote_saver
        # The save of the newest vote in flight (vote_saver only): the sends of every
        # ready since it was decided, and the replies to peers, wait for it.
        self._vote_gate: asyncio.Task[None] | None = None
        self._held: list[Ready] = []
        # The node's syncfs (NodeFlush.sync) that replaces this log's own fsync; None:
        # the log fsyncs its files (see raftlog.raft.flush).
        self._flush_barrier = flush_barrier
        # How logs name this group (the node passes its topic/partition when it knows it).
        self.name = name or f"group {group}"
        self.node_id = node_id
        self.log = log
        self.transport = transport
        self.options = options or ConsensusOptions()
        self.options.validate()
        self._heartbeats = heartbeats
        ctx = log.load_commit_context()
        # The commit context only ever records an offset this replica had flushed; a log
        # whose flushed end is below it lost acknowledged data (a lying disk, a log set
        # aside and refetched). Until the log reaches it again the replica is "behind its
        # promise": it neither votes nor counts toward a quorum (RaftCore.behind_promise).
        promised = -1
        if ctx is not None and ctx.committed_offset > log.flushed_offset:
            log_.warning(
                "group %s node %s: commit context at %s is past the flushed log end %s "
                "(acknowledged data lost locally); not voting nor counting toward a "
                "quorum until resynced from the leader",
                group, node_id, ctx.committed_offset, log.flushed_offset,
            )  # fmt: skip
            promised = ctx.committed_offset
            ctx = None
        self._restored_ctx = ctx
        self.configs = group_snapshot.load_configurations(configuration, ctx, log)
        commit = log.start_offset - 1
        if ctx is not None:
            commit = max(commit, min(ctx.committed_offset, log.dirty_offset))
        self.core = RaftCore(
            group,
            node_id,
            self.configs,
            log,
            vote if vote is not None else log.load_vote(),
            commit,
            self.options.core_options(),
            random.Random(seed),
            promised_offset=promised,
        )
        self.running = False
        # An unexpected exception in one of this group's tasks (a bug; the simulator fails on it).
        self.fatal_error: BaseException | None = None
        self.task_failures = 0
        # Called (no arguments) whenever the commit index advanced: the simulator checks
        # quorum durability at that very moment, not only at its next step.
        self.commit_listeners: list[Callable[[], None]] = []
        # Called (no arguments) the moment this replica becomes leader, before anything
        # else runs: the simulator checks election safety over every leader, not only
        # the ones alive at its next step.
        self.leader_listeners: list[Callable[[], None]] = []
        # Called with the leader's id whenever the leader this replica knows changes (-1:
        # none known), while the ready that changed it is carried out (before its
        # sends: a listener only takes note): a node's waiters for a new partition's
        # leader (a held metadata answer) wake on it instead of polling.
        self.known_leader_listeners: list[Callable[[int], None]] = []
        self._known_leader = -1
        #: When this replica learned its current leader (itself included), in wall-clock
        #: ms; -1 while none is known. Reported with the partition's status: the
        #: failover benchmark times a re-election by the new leader's own clock.
        self.leader_since_ms = -1
        self._own_clock = clock is None
        self.clock = clock if clock is not None else NodeClock(self.options.tick_interval_s)
        self._ticking = False  # on the clock's active list (not quiescent)
        # How many times this replica truncated its log (the only way its flushed offset
        # goes back): the simulator's check that leaders never regress their view of it.
        self.truncations = 0
        # The long-running services by task (restarted when one fails).
        self._services: dict[asyncio.Task[Any], str] = {}
        # A dict, not a set: iteration (cancellation) order must not depend on ids (replay).
        self._tasks: dict[asyncio.Task[Any], None] = {}
        # While behind its promise the stored context (at the promise) is the only durable
        # record of it: no context below it is saved, so a crash while catching up keeps
        # the promise. The first context saved past it clears it durably.
        self._applier = Applier(self, commit, ctx.committed_offset if ctx else promised)
        self._waiters = CommitWaiters(group)
        # A vote the core decided on that could not be saved yet: retried before anything
        # else is sent, so no message ever leaves carrying an unpersisted term or vote.
        self._unsaved_vote: VoteState | None = None
        self._commit_changed: asyncio.Event | None = None
        # Set (and dropped) when a reader of read_barrier may proceed: a commit, an
        # apply, a change of role. None while no reader waits (an apply costs nothing).
        self._read_wake: asyncio.Event | None = None
        self.flusher: FlushCoalescer
        self.batcher: ReplicateBatcher
        self.recovery = Recovery(self)
        self._entries = ReplicateEntries(self)
        self._follower = FollowerAppend(self)
        self._installer = FollowerInstall(self)
        # Set by the node for groups whose log start moves: the snapshot sent to a
        # follower behind the log start (recovery), and where one installed here goes.
        self.snapshot_store: group_snapshot.SnapshotStore | None = None
        self._membership = Membership(self)
        self._applier.applied_listeners.append(lambda _offset: self._wake_readers())

    # ------------------------------------------------------------- lifecycle

    def add_state_machine(self, stm: StateMachine) -> None:
        """Register a state machine; call before ``start()``."""
        if self.running:
            raise RaftError("add_state_machine must be called before start()")
        self._applier.add(stm)

    def add_applied_listener(self, listener: Callable[[int], None]) -> None:
        """Call ``listener(offset)`` after every committed batch is applied to the state
        machines (``offset``: its last), before the next one is."""
        self._applier.applied_listeners.append(listener)

    async def start(self) -> None:
        if self.running:
            return
        self._commit_changed = asyncio.Event()
        self._follower.start()
        self.flusher = FlushCoalescer(
            self.log,
            self.options.flush_bytes,
            self.options.flush_delay_s,
            self.options.flush_in_executor,
            self._on_flushed,
            self.options.flush_latency_s,
            self.options.flush_linger_s,
            self._flush_barrier,
            self._on_flush_failed,
            self.options.flush_linger_max_bytes,
        )
        self.batcher = ReplicateBatcher(self._entries, self.options.batcher_memory_bytes)
        self._applier.restore(self._restored_ctx)
        self.running = True
        for service in ("flusher", "batcher"):
            self._start_service(service)
        if self._applier.stms:
            self._start_service("applier")
        if self._heartbeats is not None:
            self._heartbeats.register(self)
        self._set_ticking(True)
        if self._own_clock:
            self.clock.start()

    async def stop(self) -> None:
        """Stop every task; pending callers fail with NotLeaderError; saves the commit context."""
        if not self.running:
            return
        self._shutdown()
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self.save_commit_context(now=True)

    def kill(self) -> None:
        """Stop at once without saving anything (a simulated crash)."""
        if not self.running:
            return
        self._shutdown()
        for t in list(self._tasks):
            t.cancel()
        self._tasks.clear()

    def _shutdown(self) -> None:
        self.running = False
        self._set_ticking(False)
        if self._own_clock:
            self.clock.kill()
        if self._heartbeats is not None and self._heartbeats.group(self.group) is self:
            self._heartbeats.unregister(self.group)
        err = NotLeaderError(self.group, -1, f"group {self.group} on node {self.node_id} stopped")
        self.batcher.close(err)
        self.flusher.fail_waiters(err)
        self._waiters.fail_all(err)
        self.recovery.cancel_all()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` as a task owned by this group (cancelled on stop)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks[task] = None
        task.add_done_callback(self._task_done)
        return task

    def _service_coro(self, service: str) -> Coroutine[Any, Any, Any]:
        if service == "flusher":
            return self.flusher.run()
        if service == "batcher":
            return self.batcher.run()
        if service == "applier":
            return self._applier.run()
        raise ValueError(f"unknown service {service!r}")

    def _start_service(self, service: str, delay_s: float = 0.0) -> None:
        async def run() -> None:
            if delay_s > 0:
                await asyncio.sleep(delay_s)  # no hot loop when a restart fails at once
            await self._service_coro(service)

        self._services[self.spawn(run())] = service

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)
        service = self._services.pop(task, None)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        if isinstance(exc, _EXPECTED_ONE_SHOT_ERRORS) and service is None:
            return  # an expected outcome of a one-shot task (leadership lost, a timeout)
        self._on_task_failed(service or str(getattr(task.get_coro(), "__qualname__", "task")), exc)
        if service is not None and self.running:
            self._start_service(service, delay_s=self.options.tick_interval_s)

    def _on_flush_failed(self, exc: BaseException) -> None:
        """A flush the core asked for (``Ready.flush_now``) failed: as a failed task."""
        if not isinstance(exc, _EXPECTED_ONE_SHOT_ERRORS):
            self._on_task_failed("flush", exc)

    def _on_task_failed(self, what: str, exc: BaseException) -> None:
        """Log, record, and step down: a replica that cannot serve must not lead."""
        self.task_failures += 1
        self.fatal_error = exc
        log_.error(
            "%s on node %s: task %s failed; stepping down and restarting the group's tasks",
            self.name, self.node_id, what, exc_info=exc,
        )  # fmt: skip
        if not self.running:
            return
        try:
            self.step(StepDown())
        except Exception as again:  # the vote save failed: retried on the next tick
            log_.error("%s on node %s: stepping down: %r", self.name, self.node_id, again)

    @property
    def clock_rate(self) -> float:
        """How fast this node's clock runs (ticks every tick_interval_s / clock_rate): the
        simulator's clock drift; 0 stops the clock (a pause: the missed ticks run at once
        when it is set back). Always 1.0 in production. The node clock's: shared by the
        node's groups."""
        return self.clock.rate

    @clock_rate.setter
    def clock_rate(self, rate: float) -> None:
        self.clock.rate = rate

    @property
    def quiescent(self) -> bool:
        """Not ticked nor heartbeated now (see :attr:`RaftCore.quiescent`)."""
        return self.core.quiescent

    @property
    def quiescent_without_dead(self) -> bool:
        """See :attr:`RaftCore.quiescent_without_dead`."""
        return self.core.quiescent_without_dead

    def _set_ticking(self, on: bool) -> None:
        if on != self._ticking:
            self._ticking = on
            self.clock.set_active(self, on)
            if not on and self.running:
                # Quiescing: the periodic save (every commit_context_interval_ticks)
                # stops with the ticks, so the context is saved once now, with the
                # whole log committed (a replica behind its promise clears it durably).
                self.save_commit_context()

    def clock_tick(self) -> None:
        """One tick of the node clock (only while this group is active)."""
        self._tick()

    def on_tick_failed(self, exc: Exception) -> None:
        """A tick raised (a bug): as a failed task (the clock goes on)."""
        self._on_task_failed("ticker", exc)

    def node_heard_ago_s(self, node: int) -> float | None:
        """Seconds since ``node`` was last heard from by this node's heartbeat manager
        (node liveness), None without one or for a node it does not watch."""
        if self._heartbeats is None:
            return None
        return self._heartbeats.heard_ago_s(node)

    def peer_nodes(self) -> list[int]:
        return [n for n in self.configs.latest.members if n != self.node_id]

    def on_node_dead(self, node: int, refused: bool = False) -> None:
        """Node liveness declared ``node`` dead: the core decides whether to wake."""
        if self.running:
            self.step(NodeDead(node, refused))

    def on_node_alive(self, node: int) -> None:
        """Node liveness heard ``node`` again after declaring it dead."""
        if self.running:
            self.step(NodeAlive(node))

    def _tick(self) -> None:
        if self._vote_gate is None or self.core.is_leader:
            self.core.step(Tick())
        # else: a vote of this replica is still being saved, and its election timer waits
        # for it: no new term while the last one's requests have not left (under a slow
        # disk, thousands of groups would otherwise time out and start term after term,
        # each costing another save). Fewer ticks only delay an election.
        try:
            self.process_ready()
        except (OSError, FailpointError) as exc:
            # The vote could not be saved (a disk error): nothing was sent; the save
            # is retried on the next tick, before anything else goes out.
            log_.error(
                "group %s node %s: saving the vote failed: %s", self.group, self.node_id, exc
            )
        if self.core.ticks % self.options.commit_context_interval_ticks == 0:
            self.save_commit_context()

    # ------------------------------------------------------------ properties

    @property
    def is_leader(self) -> bool:
        return self.core.is_leader

    @property
    def role(self) -> Role:
        return self.core.role

    @property
    def leader_id(self) -> int:
        return self.core.leader_id

    @property
    def live_leader_id(self) -> int:
        """:attr:`RaftCore.live_leader_id`: the leader, -1 when its node is declared dead."""
        return self.core.live_leader_id

    @property
    def term(self) -> int:
        return self.core.term

    @property
    def commit_index(self) -> int:
        return self.core.commit_index

    @property
    def high_watermark(self) -> int:
        return self.core.commit_index + 1

    @property
    def flushed_offset(self) -> int:
        return self.log.flushed_offset

    @property
    def dirty_offset(self) -> int:
        return self.log.dirty_offset

    @property
    def configuration(self) -> Configuration:
        return self.configs.latest

    def status(self) -> Status:
        """The core's immutable snapshot: term, role, commit index, and on a leader each
        other member's progress (:meth:`RaftCore.status`)."""
        return self.core.status()

    def not_leader_error(self) -> NotLeaderError:
        core = self.core
        known = core.transfer_target if core.transfer_target != -1 else core.leader_id
        if known == self.node_id:
            known = -1
        return NotLeaderError(self.group, known)

    # ------------------------------------------------------------ replicate

    def replicate(
        self,
        batches: list[RecordBatch],
        consistency: Consistency = Consistency.QUORUM_ACK,
        expected_term: int | None = None,
    ) -> ReplicateStages:
        """Queue ``batches`` for the log; see the module docstring for the two stages."""
        if not batches:
            raise ValueError("replicate() needs at least one batch")
        if not self.running:
            raise RaftError(f"group {self.group} on node {self.node_id} is not running")
        if not self.core.accepting_writes:
            return ReplicateStages.failed(self.not_leader_error())
        stages, enqueue = self.batcher.replicate(
            batches, consistency, -1 if expected_term is None else expected_term
        )
        if enqueue is not None:
            self.spawn(enqueue)
        return stages

    def append_local(self, batches: list[RecordBatch]) -> None:
        """Append placed batches to the log (no flush) and track configurations."""
        self.log.append(batches)
        self._applier.appended(batches)
        if self.configs.observe(batches):
            self.core.step(ConfigurationChanged())
            self._watch_members()
        self._follower.appended()

    def install_local(
        self, offset: int, term: int, data: bytes, config: group_snapshot.SavedConfig
    ) -> None:
        """Replace the whole log by the snapshot ``data`` as of ``offset`` (in ``term``):
        the commit context is saved first (a crash after it leaves this replica behind
        its promise until it is installed again), then the log restarts empty after
        ``offset``, and the configurations and state machines are restored from it.
        ``config`` is the configuration ``data`` carries, as
        :func:`group_snapshot.saved_config` parsed it (the caller refuses a snapshot
        without one)."""
        self.truncations += 1
        ctx = CommitContext(offset, term, data)
        self.log.save_commit_context(ctx)
        self.log.restart_at(offset + 1, term)
        self.configs.restart(*config)
        self.core.step(ConfigurationChanged())
        self._watch_members()
        self._applier.install(ctx)
        if self.snapshot_store is not None:
            self.snapshot_store.installed(offset, data)
        self._follower.appended()

    def start_snapshot(self) -> tuple[int, bytes] | None:
        """(offset, data): the snapshot as of the log start minus one, for a follower
        behind the log start; None when this group keeps none."""
        offset = self.log.start_offset - 1
        if offset < 0 or self.snapshot_store is None:
            return None
        data = self.snapshot_store.at(offset)
        return None if data is None else (offset, data)

    def state_snapshot(self) -> tuple[int, bytes]:
        """(offset, data): the group's state as of the last applied offset (without state
        machines: the commit index, as far as flushed), in the commit context's format."""
        return self._applier.snapshot()

    def _watch_members(self) -> None:
        if self._heartbeats is not None and self.running:
            self._heartbeats.watch(self.peer_nodes())

    def truncate_local(self, offset: int) -> None:
        """Drop the log from ``offset`` on (a follower's conflicting suffix); only under
        the flusher's truncation lock (no suffix is cut under an fsync)."""
        if not self.flusher.truncation_lock.locked():
            raise RaftError(
                f"{self.name} on node {self.node_id}: a truncation at {offset} without the "
                f"truncation lock (dirty offset {self.log.dirty_offset})"
            )
        self.truncations += 1
        self.log.truncate(offset)
        if self.configs.truncate(offset):
            self.core.step(ConfigurationChanged())

    def register_commit_waiter(
        self, result: ReplicateResult, future: asyncio.Future[ReplicateResult]
    ) -> None:
        self._waiters.register(result, future)

    def _on_flushed(self, flushed: int) -> None:
        if self.running:
            self.step(LocalFlushed())

    # -------------------------------------------------------------- ready

    def step(self, message: Message) -> Ready:
        """Give ``message`` to the core and carry out its ready (:meth:`process_ready`);
        that ready (its ``replies`` are the caller's to return to the peers)."""
        self.core.step(message)
        return self.process_ready()

    def process_ready(self) -> Ready:
        """Carry out what the core asked for, in the order :class:`Ready` states: the
        local log (the leader's placed batches, a follower's truncations and appends),
        the vote persisted before anything is sent, then the flush in parallel with the
        sends; the ready (replies and install chunks are its caller's: the stage that
        stepped the message they answer).

        With a ``vote_saver`` the vote is saved off the loop: this ready's messages
        (and those of every later ready) are held until the save returned, and peers'
        requests are answered only after it (:meth:`handle`; a heartbeat answers "group
        unavailable" meanwhile). The rest (flush, leadership, commit) goes on at once:
        it sends nothing that depends on the vote being saved."""
        ready = self.core.take_ready()
        if self.running:
            self._set_ticking(not self.core.quiescent)
        if ready.append:
            # Local, not a message: it goes even when the vote's save below fails.
            try:
                self.append_local(ready.append)
            finally:
                # Done with them even when the append failed: the core's log end is
                # then the log's again, as it was before the tail was the core's.
                self.core.advance(ready)
        for plan in ready.persist:
            if plan.truncate_at != -1:
                self.truncate_local(plan.truncate_at)
            if plan.batches:
                self.append_local(plan.batches)
        vote = ready.vote if ready.vote is not None else self._unsaved_vote
        if vote is not None:
            # Until this save succeeds, what this ready asked to send is dropped (the
            # exception propagates): a vote or a term that is not durable never leaves.
            self._unsaved_vote = vote
            failpoint(RAFT_BEFORE_VOTE_SAVE)
            if self._vote_saver is None:
                self.log.save_vote(vote)
            else:
                # In flight, not unsaved: a failure sets it again (see _vote_saved).
                self._save_vote_async(vote)
            self._unsaved_vote = None
        if self.core.leader_id != self._known_leader:
            self._known_leader = self.core.leader_id
            self.leader_since_ms = int(time.time() * 1000) if self._known_leader >= 0 else -1
            for known in self.known_leader_listeners:
                known(self._known_leader)
        if not ready:
            return ready
        if self._vote_gate is not None and not mutations.active("send_before_vote_saved"):
            self._held.append(ready)
        else:
            self._send(ready)
        # After the sends: the appends are on the wire already (send_now) or their tasks
        # run before the flusher's, so they leave before the flush thread starts (and
        # contends for the GIL with them).
        if ready.flush_now:
            self.flusher.request_flush()
        elif ready.flush_bytes:
            self.flusher.note_append(ready.flush_bytes)
        if ready.stepped_down:
            self._on_stepped_down()
        if ready.became_leader:
            self._on_became_leader()
        if ready.commit_advanced:
            self._on_commit()
        if self.core.is_leader:
            for node in ready.recover:
                self.recovery.ensure(node)
            for node in ready.promote:
                self.spawn(self._membership.promote(node))
        return ready

    def _send(self, ready: Ready) -> None:
        for node, req in ready.appends:
            self._entries.send(node, req)
        if ready.heartbeats_now and self._heartbeats is not None:
            self._heartbeats.send_now(self, ready.heartbeats_now)
        for target, message in ready.messages:
            self.spawn(self._send_message(target, message))

    def _save_vote_async(self, vote: VoteState) -> None:
        """Start the save of ``vote`` (the newest): it becomes the gate the held sends
        and the replies wait for. Saves of one group run one after another, in order."""
        assert self._vote_saver is not None
        saver, previous = self._vote_saver, self._vote_gate

        async def save() -> None:
            if previous is not None:
                # in order: an older record never lands over a newer one
                await asyncio.gather(previous, return_exceptions=True)
            await saver(vote)

        gate = self.spawn(save())
        self._vote_gate = gate
        gate.add_done_callback(lambda t: self._vote_saved(t, vote))

    def _vote_saved(self, gate: asyncio.Task[None], vote: VoteState) -> None:
        if gate is not self._vote_gate:
            return  # a newer save is in flight: the held sends wait for that one
        self._vote_gate = None
        held, self._held = self._held, []
        if gate.cancelled() or not self.running:
            return
        if gate.exception() is not None:
            # As a failed synchronous save: what waited for it is dropped, and the vote
            # is saved again before the next ready's sends (FsyncFailed stops the node).
            log_.warning("%s: saving vote %s failed: %r", self.name, vote, gate.exception())
            if self._unsaved_vote is None:
                self._unsaved_vote = vote
            return
        for ready in held:
            self._send(ready)

    async def _vote_durable(self) -> None:
        """Return once the vote state as of now is durable (raises if its save failed)."""
        gate = self._vote_gate
        if gate is None or mutations.active("send_before_vote_saved"):
            return
        try:
            await asyncio.shield(gate)
        except asyncio.CancelledError:
            if gate.cancelled():  # the group stopped: no reply
                raise RaftError(f"{self.name} on node {self.node_id} stopped") from None
            raise

    async def _send_message(self, target: int, message: object) -> None:
        try:
            reply = await self.transport.send(target, message)
        except TransportError:
            return
        if not self.running:
            return
        if isinstance(reply, (VoteReply, TimeoutNowReply)):
            self.step(reply)

    def _on_became_leader(self) -> None:
        self._wake_readers()
        for listener in self.leader_listeners:
            listener()
        self.recovery.cancel_all()
        # The term's first entry: every linearizable read of the term waits for it to
        # commit (the read index, see read_index.py), so it is flushed at once and asks
        # the followers to flush (quorum_ack), not left to the coalesced flush.
        noop = RecordBatch.create(b"", kind=BatchKind.NOOP, timestamp_ms=0)
        if self._seal_ahead_fn(self.core.term) is None:
            self.replicate([noop], Consistency.QUORUM_ACK, expected_term=self.core.term)
        else:  # the no-op of the new term rolls the segment: seal it off the loop first
            self.spawn(self._noop_after_seal(noop, self.core.term))

    async def _noop_after_seal(self, noop: RecordBatch, term: int) -> None:
        await self.seal_ahead(term)
        if self.running and self.core.is_leader and self.core.term == term:
            self.replicate([noop], Consistency.QUORUM_ACK, expected_term=term)

    def _seal_ahead_fn(self, term: int) -> Callable[[], None] | None:
        if not self.options.flush_in_executor:  # the simulator: no threads
            return None
        return self.log.seal_ahead(term)

    async def seal_ahead(self, term: int) -> None:
        """Before an append of ``term``: when it would roll the active segment, make that
        segment durable in a thread now, so that the roll does not fsync on the event
        loop (see ``LogStorage.seal_ahead``); under the truncation lock, as a flush's
        fsync (no segment is cut or deleted under it)."""
        if self._seal_ahead_fn(term) is None:
            return
        async with self.flusher.truncation_lock:
            seal = self._seal_ahead_fn(term)  # again: the log may have changed meanwhile
            if seal is not None:
                await asyncio.to_thread(seal)

    def _on_stepped_down(self) -> None:
        self._wake_readers()
        self.recovery.cancel_all()
        self.batcher.fail_queued(self.not_leader_error())
        self._waiters.leadership_lost(self.core.leader_id)

    def _on_commit(self) -> None:
        self._wake_readers()
        for listener in self.commit_listeners:
            listener()
        self._waiters.on_commit(self.core.commit_index, self.core.term_at, self.core.leader_id)
        if self._commit_changed is not None:
            self._commit_changed.set()
            self._commit_changed = asyncio.Event()

    # ------------------------------------------------------- incoming requests

    async def handle(self, message: object) -> object:
        """The reply to one peer request addressed to this group."""
        if not self.running:
            raise RaftError(f"group {self.group} on node {self.node_id} is not running")
        # Every reply waits until the vote state it was decided under is durable.
        reply: object
        if isinstance(message, AppendEntriesRequest):
            reply = await self._follower.handle(message)
        elif isinstance(message, InstallSnapshotRequest):
            reply = await self._installer.handle(message)
        elif isinstance(message, (VoteRequest, TimeoutNowRequest)):
            reply = reply_in(self.step(message))
        else:
            raise TypeError(f"group {self.group}: unexpected message {type(message).__name__}")
        await self._vote_durable()
        return reply

    def handle_heartbeat(self, source: int, hb: Heartbeat) -> HeartbeatReply:
        """The reply to one heartbeat of a batch (synchronous: the batch is answered at
        once); while this group's vote is being saved it answers "group unavailable",
        which the leader ignores, rather than wait (or leave with an unsaved term)."""
        reply = reply_in(self.step(HeartbeatFrom(source, hb)))
        if not isinstance(reply, HeartbeatReply):
            raise TypeError(f"{self.name}: a heartbeat answered with {reply!r}")
        if self._vote_gate is not None and not mutations.active("send_before_vote_saved"):
            return unavailable_reply(hb)
        return reply

    def heartbeats(self) -> list[tuple[int, Heartbeat]]:
        """Leader: this round's heartbeats, by follower (for the node's HeartbeatManager;
        the core leaves out idle followers on most rounds, see ``HeartbeatRound``)."""
        return self.step(HeartbeatRound()).heartbeats

    def on_heartbeat_reply(self, peer: int, hb: Heartbeat, reply: HeartbeatReply) -> None:
        self.step(HeartbeatAnswered(peer, hb, reply))

    # ----------------------------------------------------------------- reads

    def read(
        self, start: int, max_bytes: int, end: int | None = None, *, verify: bool = True
    ) -> list[RecordBatch]:
        """Committed batches from the one holding ``start`` (see LogStorage.read; only a
        client's fetch passes ``verify=False``)."""
        last = self.core.commit_index if end is None else min(end, self.core.commit_index)
        if start > last:
            return []
        batches = self.log.read(start, max_bytes, last, verify=verify)
        return [b for b in batches if b.last_offset <= last]

    async def commit_changed(self) -> None:
        """Wait until the commit index next advances (the applier's wake-up)."""
        if self._commit_changed is None:
            raise RaftError(f"group {self.group} on node {self.node_id} is not running")
        await self._commit_changed.wait()

    async def wait_for_commit(self, offset: int, timeout: float) -> int:
        """Wait until ``commit_index >= offset``; the commit index, or TimeoutError."""
        async with asyncio.timeout(timeout):
            while self.core.commit_index < offset:
                if not self.running or self._commit_changed is None:
                    raise RaftError(f"group {self.group} on node {self.node_id} is not running")
                await self._commit_changed.wait()
        return self.core.commit_index

    def check_readable(self) -> int:
        """The read index, when a linearizable read may be answered now from this
        replica's state machines (every one applied at least that far).

        The core decides (:meth:`RaftCore.read_index`, see :mod:`raftlog.raft.read_index`):
        this node leads, is not transferring, committed an entry of its term (the term's
        read index is its commit index then) and its lease holds (it heard from a quorum
        lately, and sent no timeout-now in its term); then the state machines must have
        applied the read index. Raises :class:`NotLeaderError` (naming the known leader)
        when this node does not lead, and :class:`ReadNotReadyError` (retriable; its
        message says what is missing) otherwise. For a handler that must answer at once;
        :meth:`read_barrier` waits, and takes the quorum round that a term without a
        lease needs (a read that answers at once cannot: the round must follow it)."""
        return self._readable(-1, False)

    def _readable(self, read_round: int, quorum_round: bool) -> int:
        if not self.running:
            raise RaftError(f"group {self.group} on node {self.node_id} is not running")
        decision = self.core.read_index(read_round, quorum_round)
        if not decision.leader:
            raise self.not_leader_error()
        why = unready_reason(decision, self.last_applied)
        if not why:
            return decision.index
        raise ReadNotReadyError(
            f"group {self.group}: node {self.node_id}, leader of term {self.core.term}, "
            f"cannot serve a linearizable read yet: it {why}"
        )

    async def read_barrier(self, timeout_s: float, *, quorum_round: bool = False) -> int:
        """Wait until a linearizable read may be answered (:meth:`check_readable`, with
        the quorum round a term without a lease needs); return the read index. Returns
        at once, without suspending, when it passes already. ``quorum_round``: prove the
        leadership with a quorum round even while the lease holds (an answer that must
        hold even if the nodes' ticks drift; it costs a heartbeat round trip). Raises
        NotLeaderError at once when this node does not lead (or stops leading
        meanwhile), and :class:`ReadBarrierTimeout` (a ReadNotReadyError and a
        TimeoutError, with the same message) when the read is still not possible after
        ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        read_round, term = -1, self.core.term
        while True:
            try:
                return self._readable(read_round, quorum_round)
            except ReadNotReadyError as exc:
                left = deadline - loop.time()
                if left <= 0:
                    raise ReadBarrierTimeout(f"{exc} (waited {timeout_s:g}s)") from None
            if (read_round == -1 or term != self.core.term) and self.core.read_index(
                read_round, quorum_round
            ).confirm:
                # Asked now, after the read began: the next heartbeat round reaches every
                # follower (a quiescent group wakes), and a quorum's answers confirm it.
                read_round, term = self.step(ReadRequest()).read_round, self.core.term
            if self._read_wake is None:
                self._read_wake = asyncio.Event()
            # A tick at most: the lease and a transfer change on replies and ticks.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._read_wake.wait(), min(left, self.options.tick_interval_s)
                )

    def _wake_readers(self) -> None:
        if self._read_wake is not None:
            self._read_wake.set()
            self._read_wake = None

    # -------------------------------------------------------- state machines

    @property
    def last_applied(self) -> int:
        """The last offset applied to the state machines (the commit index without any)."""
        return self._applier.last_applied

    @property
    def stm_apply_errors(self) -> int:
        """Committed batches a state machine's apply() raised on (and skipped) so far."""
        return self._applier.apply_errors

    def save_commit_context(self, now: bool = False) -> None:
        """Save the latest commit context (only offsets this replica has flushed): with
        ``commit_context_saver`` off the loop, unless ``now`` (durable on return)."""
        self._applier.save_commit_context(now)

    # ------------------------------------------------------------ membership

    def step_down(self) -> None:
        self.step(StepDown())

    def require_leader(self) -> None:
        """Raise NotLeaderError unless this replica accepts writes now."""
        if not (self.running and self.core.accepting_writes):
            raise self.not_leader_error()

    async def add_member(self, node: int, learner_first: bool = True) -> None:
        """Add ``node`` (as a learner first, promoted once caught up); waits for the commit."""
        await self._membership.add_member(node, learner_first)

    async def remove_member(self, node: int) -> None:
        """Remove ``node`` from the group; waits for the commit."""
        await self._membership.remove_member(node)

    async def transfer_leadership(self, target: int) -> None:
        """Hand leadership to ``target``: stop writes, catch it up, send timeout-now.

        Raises NotLeaderError when not leader, ConfigurationChangeError when
        ``target`` is not a voter, RaftError when the transfer times out (the
        old leader then accepts writes again).
        """
        await self._membership.transfer_leadership(target)
