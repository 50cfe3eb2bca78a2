"""A node's background upkeep, a part of :class:`raftlog.node.process.Node`: opening and
closing its partition replicas as the controller state changes, leadership balancing
towards preferred replicas, the leader balancer (on the controller leader: evening out
the partitions led per node by changing preferred replicas), the coordinator's
resume of incomplete decisions, retention, transaction timeouts and the followers' lag samples. Each
loop runs until the node stops it."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import pathlib
import time
from collections.abc import Coroutine
from typing import Any

from tenacity import RetryCallState, wait_exponential

from raftlog.controller import (
    BalanceLeaderCmd,
    ControllerStm,
    PartitionAssignment,
    TopicAssignment,
)
from raftlog.controller.leader_balancer import LeaderMove, electing, plan_leader_moves
from raftlog.controller.topic_config import TopicConfig
from raftlog.coordinator.txn_coordinator import TxnCoordinator
from raftlog.node import gc_policy
from raftlog.node.admin import AdminApi
from raftlog.node.config import (
    COORDINATOR_ELECTION_CHECK_S,
    COORDINATOR_RESUME_TIMEOUT_S,
    COORDINATOR_ROLL_FORWARD_S,
    LEADER_BALANCE_LIVE_MS,
    REPLICA_LAG_SAMPLE_S,
)
from raftlog.node.context import NodeContext
from raftlog.node.group_host import last_heard_ms
from raftlog.node.membership import Membership
from raftlog.node.metadata import MetadataApi
from raftlog.node.partition_replica import PartitionReplica
from raftlog.node.txn_markers import PeerMarkers
from raftlog.storage import identity
from raftlog.storage.api import StorageCorruption
from raftlog.storage.fs import REAL_FS

IDLE_FILES_CHECK_S = 10.0
BALANCE_FULL_SCAN_S = 10.0
"""How often the move to preferred replicas looks at every partition (each second at
the ones that can have changed leader: see ``_balance_loop``)."""
TRANSFER_BATCH = 32
"""Leadership transfers to preferred replicas a node runs at once."""
OPEN_BATCH = 16
"""Partition replicas a node opens at once when a topic is created (or at start)."""
FREEZE_EVERY = 256
"""Replicas opened between two freezes of the collector (``gc_policy.replicas_opened``)
within one reconcile."""

log = logging.getLogger("raftlog.node")

OPEN_RETRY_WAIT = wait_exponential(multiplier=0.5, min=0.5, max=30.0)
"""Backoff between attempts to open a group that failed to open (0.5 s doubling to 30 s)."""


@dataclasses.dataclass(slots=True)
class OpenFailure:
    """A partition replica of this node that failed to open: reported by ``/health``
    (``open_failures``) and retried with backoff while the others serve."""

    topic: str
    partition: int
    group_id: int
    error: str
    attempts: int
    retry_at: float  # time.monotonic() of the next attempt

    def to_json(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "group_id": self.group_id,
            "error": self.error,
            "attempts": self.attempts,
        }


def _make_durable_dirs(directories: list[pathlib.Path]) -> None:
    """Create ``directories`` (and parents) and fsync each new name's parent. One that
    cannot be made is skipped: the replicas under it fail to open on their own (each
    reported and retried), and the others open, so one bad directory stops nothing else."""
    for directory in directories:
        try:
            for parent in REAL_FS.mkdirs(directory):
                REAL_FS.fsync_dir(parent)
        except OSError as exc:
            log.warning("cannot make %s (its replicas will report it): %s", directory, exc)


def open_retry_delay(attempts: int) -> float:
    """The wait before attempt ``attempts + 1`` (tenacity's exponential backoff)."""
    # a wait strategy reads only attempt_number: no Retrying object is needed
    state = RetryCallState(None, None, (), {})  # type: ignore[arg-type]
    state.attempt_number = attempts
    return float(OPEN_RETRY_WAIT(state))


def claim_partition_dir(
    directory: pathlib.Path, group_id: int, controller_stm: ControllerStm
) -> None:
    """Make ``directory`` group ``group_id``'s (durable marker); never delete a log.

    A log of a group the controller no longer has (a deleted topic of the same
    name, dropped while this node was down), or an unmarked one, is moved aside
    under a name that says so; the log of a group that still exists is refused.
    """
    try:
        identity.claim_directory(directory, identity.GROUP_MARKER, str(group_id), "group")
    except identity.ForeignDataDirectory as exc:
        old = exc.found
        dropped = old == "unmarked" or (
            old.isdigit() and int(old) < group_id and controller_stm.find_group(int(old)) is None
        )
        if not dropped:
            raise
        identity.move_aside(directory, f"dropped-group-{old}")
        identity.claim_directory(directory, identity.GROUP_MARKER, str(group_id), "group")


class Upkeep:
    """The node's background loops, and the one owner of ``ctx.partitions``: it opens
    and closes the replicas. Uses ``metadata`` (partition statuses), ``membership``
    (the cluster's nodes), ``admin`` (controller commands of the leader balancer) and
    ``markers`` (the transaction coordinators' marker writer)."""

    def __init__(
        self,
        ctx: NodeContext,
        metadata: MetadataApi,
        membership: Membership,
        admin: AdminApi,
        markers: PeerMarkers,
    ) -> None:
        self._ctx = ctx
        self._metadata = metadata
        self._membership = membership
        self._admin = admin
        self._markers = markers
        #: set when the local groups must be reconciled with the controller state
        #: (a controller state listener, and the open-failure timers, set it)
        self.reconcile_needed = asyncio.Event()
        #: partition replicas that failed to open, retried with backoff (``/health``)
        self.open_failures: dict[int, OpenFailure] = {}
        # group -> when a leadership transfer to its preferred replica was last tried
        self._transfer_attempts: dict[int, float] = {}
        # groups whose preferred replica changed: the move to it looks at them next second
        self._preferred_changed: set[int] = set()
        # the leader balancer's last inputs that planned no move (see _balance_leaders)
        self._balanced_inputs: tuple[Any, ...] | None = None
        # the controller's next group id the last balancer round saw (topics created since)
        self._balance_seen_groups = -1
        #: the replicas of ``ctx.partitions`` with a transaction coordinator (those of
        #: ``__transactions``): the coordinator loop looks at these only, not at every
        #: partition five times a second
        self._coordinators: dict[int, PartitionReplica] = {}
        # the groups of ctx.partitions with a transaction open (ProducerTable.open_listener)
        self._open_transactions: set[int] = set()

    def loops(
        self, *, delete_files: bool, balance_leaders: bool
    ) -> list[Coroutine[Any, Any, None]]:
        """The loops to run until the node stops: ``delete_files`` on one process of a
        node, ``balance_leaders`` where the controller group is hosted."""
        loops = [
            self._reconcile_loop(),
            self._balance_loop(),
            self._replica_lag_loop(),
            self._transaction_timeout_loop(),
            self._coordinator_resume_loop(),
            self._retention_loop(),
            self._idle_files_loop(),
        ]
        if delete_files:
            loops.append(self._file_delete_loop())
        if balance_leaders:
            loops.append(self._leader_balancer_loop())
        return loops

    async def close_all(self) -> None:
        """Close every partition replica of this process, keeping their logs (at stop)."""
        for gid in list(self._ctx.partitions):
            await self._close_partition(gid, delete=False)

    # ------------------------------------------------------------ reconcile

    async def _reconcile_loop(self) -> None:
        while True:
            await self.reconcile_needed.wait()
            self.reconcile_needed.clear()
            try:
                await self.reconcile()
            except Exception:
                log.exception("reconciling local groups failed; retrying")
                await asyncio.sleep(0.5)
                self.reconcile_needed.set()

    async def reconcile(self) -> None:
        """Bring this process's partition replicas to the controller state once: open
        the ones placed here (a failure is recorded and retried), close the others,
        configure them all."""
        self._membership.learn_nodes()
        # of a node in several processes, this one hosts its shard's groups only
        desired = {
            gid: placed
            for gid, placed in self._ctx.controller_stm.assignments_for(self._ctx.node_id).items()
            if self._ctx.owns(gid)
        }
        closed = [g for g in self._ctx.partitions if g not in desired]
        for gid in closed:
            await self._close_partition(gid, delete=True)
        if closed:
            gc_policy.replicas_closed()  # their reference cycles freed, the rest frozen again
        for gid in [g for g in self.open_failures if g not in desired]:
            del self.open_failures[gid]
        now = time.monotonic()
        to_open = []
        for gid, (topic, part) in desired.items():
            if gid not in self._ctx.partitions:
                failed = self.open_failures.get(gid)
                if failed is None or failed.retry_at <= now:
                    to_open.append((topic, part, failed))
                else:  # woken early (another change, a timer's rounding): wake again then
                    loop = asyncio.get_running_loop()
                    loop.call_later(failed.retry_at - now, self.reconcile_needed.set)
        to_open.sort(key=lambda o: o[1].group_id)
        # A topic of thousands of partitions opens OPEN_BATCH replicas at a time: their
        # directory and marker fsyncs (in threads) overlap instead of queueing one by one.
        # Their topics' directories first, durably, one thread: a replica must not
        # find its parent made by another's thread that has not fsynced it yet.
        parents = sorted({self._partition_dir(t.name, p.partition).parent for t, p, _ in to_open})
        if parents:
            await asyncio.to_thread(_make_durable_dirs, parents)
        for i in range(0, len(to_open), OPEN_BATCH):
            batch = to_open[i : i + OPEN_BATCH]
            await asyncio.gather(*(self._try_open_partition(*o) for o in batch))
            if (i + OPEN_BATCH) % FREEZE_EVERY == 0:
                # Frozen as they open, not once at the end: one topic of 10,000
                # partitions opened in one reconcile left millions of objects unfrozen,
                # and each full collection then stopped the loop for 1.3-2.5 s (3 of
                # them on one node); beside a test run a node fell silent for 5 s and
                # was declared dead.
                gc_policy.replicas_opened()
        if to_open:
            gc_policy.replicas_opened()  # out of the full collections' walk (gc_policy)
        # Every controller change reconciles (a topic created among thousands): the
        # settings are resolved once per topic and applied only to the replicas whose
        # settings differ (just opened, or their topic's configs changed). Resolved per
        # partition, this loop took 0.27 s of the event loop per change at 10,000
        # partitions (more under load), late enough for the nodes' liveness heartbeats
        # that topic creation stalled near 5,000 partitions.
        configs: dict[str, TopicConfig] = {}
        for gid, (topic, part) in desired.items():
            rep = self._ctx.partitions.get(gid)
            if rep is not None:
                config = configs.get(topic.name)
                if config is None:
                    config = configs[topic.name] = self._ctx.controller_stm.topic_config(topic.name)
                if rep.config != config:
                    rep.configure(config)
                if rep.replicas != part.replicas:
                    # a new preferred replica: the balancer moves the leadership at once
                    rep.replicas = list(part.replicas)
                    self._transfer_attempts.pop(gid, None)
                    self._preferred_changed.add(gid)

    def _partition_dir(self, topic: str, partition: int) -> pathlib.Path:
        return identity.partition_dir(self._ctx.config.data_dir, topic, partition)

    async def _try_open_partition(
        self, topic: TopicAssignment, part: PartitionAssignment, failed: OpenFailure | None
    ) -> None:
        """Open one partition replica; a failure (any exception) is recorded, logged and
        retried with backoff (the reconcile loop is woken for it), never stopping the
        other groups from opening."""
        try:
            await self._open_partition(topic, part)
        except Exception as exc:
            attempts = 1 if failed is None else failed.attempts + 1
            delay = open_retry_delay(attempts)
            error = f"{type(exc).__name__}: {exc}"
            log.error(
                "%s/%d (group %d) failed to open (attempt %d): %s; retrying in %.1f s",
                topic.name,
                part.partition,
                part.group_id,
                attempts,
                error,
                delay,
            )
            self.open_failures[part.group_id] = OpenFailure(
                topic.name,
                part.partition,
                part.group_id,
                error,
                attempts,
                time.monotonic() + delay,
            )
            asyncio.get_running_loop().call_later(delay, self.reconcile_needed.set)
            return
        if self.open_failures.pop(part.group_id, None) is not None:
            log.info(
                "%s/%d (group %d) opened after failing", topic.name, part.partition, part.group_id
            )

    async def _open_partition(self, topic: TopicAssignment, part: PartitionAssignment) -> None:
        directory = self._partition_dir(topic.name, part.partition)
        await asyncio.to_thread(
            claim_partition_dir, directory, part.group_id, self._ctx.controller_stm
        )
        try:
            replica = await self._ctx.host.open_partition(
                topic.name, part.partition, part.group_id, directory, part.replicas
            )
        except StorageCorruption as exc:
            # Damage in data this replica had flushed: never truncated silently. The log
            # is set aside (kept, vote carried over) and the group fetched again.
            log.error("group %d: %s; setting the log aside to refetch it", part.group_id, exc)
            await asyncio.to_thread(identity.set_aside_damaged_log, directory, part.group_id)
            replica = await self._ctx.host.open_partition(
                topic.name, part.partition, part.group_id, directory, part.replicas
            )
        if replica.tm is not None:
            replica.txn = TxnCoordinator(replica.tm, self._markers)
            self._coordinators[part.group_id] = replica
        self._ctx.partitions[part.group_id] = replica
        gid = part.group_id
        table = replica.rm.table
        table.open_listener = lambda any_open: (
            self._open_transactions.add(gid) if any_open else self._open_transactions.discard(gid)
        )
        if table.has_open_transactions:
            self._open_transactions.add(gid)

    async def _close_partition(self, gid: int, *, delete: bool) -> None:
        replica = self._ctx.partitions.pop(gid, None)
        self._coordinators.pop(gid, None)
        self._open_transactions.discard(gid)
        if replica is None:
            return
        if replica.txn is not None:
            replica.txn.close()
        await self._ctx.host.close_group(gid)
        if delete:
            # Moved aside, not deleted at once. A deleted topic's replica goes after
            # --file-delete-delay-ms (_file_delete_loop); any other (a replica moved to
            # other nodes) stays until an explicit purge.
            deleted = self._ctx.controller_stm.find_group(gid) is None
            reason = f"{identity.DELETED_GROUP if deleted else 'dropped-group-'}{gid}"
            await asyncio.to_thread(identity.move_aside, replica.directory, reason)

    async def _file_delete_loop(self) -> None:
        """Delete, once ``--file-delete-delay-ms`` has passed since they were moved aside,
        the replicas of deleted topics (Kafka's ``file.delete.delay.ms``); checked every
        quarter of the delay (at most every 10 s). A failure is logged; the next round
        retries."""
        delay_ms = self._ctx.config.file_delete_delay_ms
        interval = min(10.0, max(0.05, delay_ms / 4000))
        while True:
            await asyncio.sleep(interval)
            try:
                gone = await asyncio.to_thread(
                    identity.delete_expired, self._ctx.config.data_dir, delay_ms, time.time()
                )
            except OSError as exc:
                log.warning("deleting deleted topics' replicas failed: %r", exc)
                continue
            for p in gone:
                log.info("deleted %s (its topic was deleted over %d ms ago)", p, delay_ms)

    async def _balance_loop(self) -> None:
        """Move each partition's leadership to its preferred replica when possible,
        ``TRANSFER_BATCH`` partitions at a time (a node back after a failover is
        preferred by a third of the partitions: one by one, that took minutes).

        Not to a preferred replica on a node that node liveness declared dead: after a
        failover the live nodes lead every partition the dead node preferred (a third
        of them), and every second each was asked again, through a status snapshot of
        its group, whether that replica keeps up (``GroupHost.transfer``: it is not
        heard, so no transfer is tried), for as long as the node stays dead: about
        1,000 snapshots a second on the live nodes of a 3,000-partition cluster while
        they elect. The node back is heard again, and the transfers go."""
        beats = self._ctx.host.heartbeats
        # Leadership changes only in a group the clock ticks: each second looks at those
        # and at the ones it found led away from their preferred replica; every
        # BALANCE_FULL_SCAN_S at every partition (a group that won and quiesced between
        # two looks, a replica list changed). Every partition every second was a tenth
        # of an idle node's CPU.
        candidates: set[int] = set()
        full_scan_at = 0.0
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            parts = self._ctx.partitions
            if now >= full_scan_at:
                full_scan_at = now + BALANCE_FULL_SCAN_S
                look = list(parts.items())
            else:
                gids = self._ctx.host.clock.active_group_ids() | candidates
                gids |= self._preferred_changed
                look = [(g, parts[g]) for g in gids if g in parts]
            self._preferred_changed.clear()
            due = []
            candidates = set()
            for gid, rep in look:
                preferred = rep.replicas[0]
                if preferred == self._ctx.node_id or not rep.consensus.is_leader:
                    continue
                candidates.add(gid)
                if not beats.is_alive(preferred):
                    continue
                if now - self._transfer_attempts.get(gid, 0.0) < 10.0:
                    continue  # a transfer was tried lately (and failed: it still leads)
                due.append((gid, rep, preferred))
            for i in range(0, len(due), TRANSFER_BATCH):
                batch = due[i : i + TRANSFER_BATCH]
                await asyncio.gather(*(self._transfer_to_preferred(*d, now) for d in batch))

    async def _transfer_to_preferred(
        self, gid: int, rep: PartitionReplica, preferred: int, now: float
    ) -> None:
        try:
            tried = await asyncio.wait_for(self._ctx.host.transfer(rep.consensus, preferred), 3.0)
        except Exception:  # timed out or refused
            tried = True
        if tried:  # else checked again next second, until the replica keeps up
            self._transfer_attempts[gid] = now

    async def _leader_balancer_loop(self) -> None:
        """On the controller leader, every ``--leader-balance-interval-ms`` (0: never),
        one round of the leader balancer (see ``_balance_leaders``); a failed round
        (the controller leadership moved, a timeout) is logged and the next retries.

        No round in the first ``LEADER_BALANCE_LIVE_MS`` of a controller leadership: a
        new leader counts every member as heard from the start of its term, so only
        after that long does "heard recently" tell the nodes that are down."""
        interval = self._ctx.config.leader_balance_interval_ms / 1000
        if interval <= 0:
            return
        leading: tuple[int, float] | None = None  # (term, since when) of this leadership
        while True:
            await asyncio.sleep(interval)
            if not self._ctx.controller.is_leader:
                leading = None
                continue
            term = self._ctx.controller.term
            if leading is None or leading[0] != term:
                leading = (term, time.monotonic())
            if time.monotonic() - leading[1] < LEADER_BALANCE_LIVE_MS / 1000:
                continue
            try:
                await self._balance_leaders()
            except Exception as exc:
                log.warning("leader balancer: round failed: %r", exc)

    def _live_nodes(self) -> set[int]:
        """The nodes the balancer may lead on: this one and the others the controller
        leader heard from in the last ``LEADER_BALANCE_LIVE_MS``, neither removed nor
        being drained."""
        heard = last_heard_ms(self._ctx.controller)
        live = {self._ctx.node_id} | {n for n, ms in heard.items() if ms <= LEADER_BALANCE_LIVE_MS}
        return live & set(self._membership.placeable_nodes())

    async def _balance_leaders(self) -> list[LeaderMove]:
        """One round: the leaders as the partitions' leaders report them, and each move
        the decision (``plan_leader_moves``) makes carried out as a
        :class:`BalanceLeaderCmd` (each node's ``_balance_loop`` then hands the
        leadership over). Returns the moves made.

        A partition whose preferred replica is live but does not lead yet counts as led
        by it and is left alone (its leadership is on its way there); so are partitions
        a user pinned with ``transfer-leadership`` in the last ``--leader-balance-pin-ms``
        (by the pin's timestamp against this node's clock) and partitions being moved.
        No move is made while a partition that can elect (a majority of its replicas
        up) has no leader up: a failover's elections come first.
        """
        stm = self._ctx.controller_stm
        if stm.next_group_id != self._balance_seen_groups:
            # Topics created since the last round: their partitions elect their
            # preferred replicas (nothing to move), and a round asks every partition's
            # leader (10,000 partitions: a tenth of the controller leader's loop while
            # topics of 100 were created one after the other). The first round after
            # the creations stop balances.
            self._balance_seen_groups = stm.next_group_id
            return []
        topics = list(stm.topics.values())
        parts = [p for t in topics for p in t.partitions]
        here = await self._metadata.statuses_here([p.group_id for p in parts])
        statuses = await self._metadata.leaders_statuses(parts, here)
        live = self._live_nodes()
        now_ms = int(time.time() * 1000)
        pin_ms = self._ctx.config.leader_balance_pin_ms
        leaders: dict[int, int] = {}
        replicas: dict[int, list[int]] = {}
        frozen: set[int] = set()
        where: dict[int, tuple[str, int]] = {}
        reported: dict[int, int] = {}  # the leaders as reported (-1: none known)
        for t in topics:
            info = self._metadata.topic_info(t, here, statuses)
            for part, meta in zip(t.partitions, info.partitions, strict=True):
                gid = part.group_id
                replicas[gid] = list(part.replicas)
                where[gid] = (t.name, part.partition)
                leaders[gid] = reported[gid] = meta.leader
                preferred = part.replicas[0]
                if preferred != meta.leader and preferred in live:
                    leaders[gid] = preferred
                    frozen.add(gid)
                pinned_at = stm.pinned.get(gid)
                if gid in stm.moves or (pinned_at is not None and now_ms - pinned_at < pin_ms):
                    frozen.add(gid)
        beats, here_id = self._ctx.host.heartbeats, self._ctx.node_id
        if electing(reported, replicas, lambda n: n == here_id or beats.is_alive(n)):
            # Partitions that can elect a leader and have none (a node just died): their
            # elections are under way, and every move now is one more election on the
            # same busy nodes (a failover of 1,000 partitions moved leaderships while
            # its last elections ran). The round after they are led balances.
            self._balanced_inputs = None
            return []
        # The plan is a function of its inputs: a round that finds the ones of a round
        # that planned nothing plans nothing either. An idle cluster's balancer then
        # plans once, not every interval (planning 3,000 partitions, with the garbage
        # collections its allocations set off, was most of the controller leader's
        # idle CPU).
        inputs = (leaders, replicas, live, frozen)
        if inputs == self._balanced_inputs:
            return []
        moves = plan_leader_moves(leaders, replicas, live, frozen)
        self._balanced_inputs = None if moves else inputs
        for m in moves:
            topic, partition = where[m.group_id]
            log.info(
                "leader balancer: %s/%d leads on node %d instead of %d",
                topic,
                partition,
                m.to_node,
                m.from_node,
            )
            await self._admin.replicate_controller(BalanceLeaderCmd(topic, partition, m.to_node))
        return moves

    async def _replica_lag_loop(self) -> None:
        """Every ``REPLICA_LAG_SAMPLE_S``, each partition samples its followers' progress
        (on its leader), so ``/health`` can name the followers that lag."""
        sampled: set[int] = set()  # groups whose tracker the last round fed
        while True:
            await asyncio.sleep(REPLICA_LAG_SAMPLE_S)
            now = time.monotonic()
            parts = self._ctx.partitions
            beats = self._ctx.host.heartbeats
            if all(beats.is_alive(n) for n in self._ctx.config.peers):
                # With every node alive no group is quiescent without a member, and a
                # quiescent group is sampled as nothing (reset): only the groups the
                # clock ticks, plus those fed last round (reset once as they quiesce),
                # can need a sample. A round over every idle partition twice a second
                # was a tenth of an idle node's CPU.
                gids = self._ctx.host.clock.active_group_ids() | sampled
                reps = [parts[g] for g in gids if g in parts]
            else:  # groups quiescent without the dead are sampled on (they may lag)
                reps = list(parts.values())
            sampled = {rep.group_id for rep in reps if rep.sample_lag(now)}

    async def _coordinator_resume_loop(self) -> None:
        """On the ``__transactions`` partition this node leads, finish the decisions the
        transaction coordinator finds incomplete: at once when the node is elected (a
        new term: a coordinator that died between a decision and its markers), then
        every ``COORDINATOR_ROLL_FORWARD_S`` (a marker that could not be written for a
        while). Markers go node to node (:mod:`raftlog.node.txn_markers`); finishing is
        idempotent and shared with the EndTxn calls in flight, so nothing races."""
        last: dict[int, tuple[int, float]] = {}  # group -> (term, when) of the last round
        while True:
            await asyncio.sleep(COORDINATOR_ELECTION_CHECK_S)
            now = time.monotonic()
            for gid in [g for g in last if g not in self._coordinators]:
                del last[gid]  # closed: a group opened again starts afresh
            for gid, rep in list(self._coordinators.items()):
                if rep.txn is None or not rep.consensus.is_leader:
                    last.pop(gid, None)
                    continue
                term = rep.consensus.term
                prev = last.get(gid)
                if (
                    prev is not None
                    and prev[0] == term
                    and now - prev[1] < COORDINATOR_ROLL_FORWARD_S
                ):
                    continue
                last[gid] = (term, now)
                try:
                    done = await asyncio.wait_for(rep.txn.resume(), COORDINATOR_RESUME_TIMEOUT_S)
                except Exception as exc:  # leadership moved, unreachable partitions: retry
                    log.warning("transaction coordinator: resuming decisions failed: %r", exc)
                    continue
                if done:
                    log.info("transaction coordinator: finished %d incomplete decisions", done)

    async def _idle_files_loop(self) -> None:
        """Every ``IDLE_FILES_CHECK_S``, close the segment files of the partitions unused
        for the bound's idle time (``OpenFiles.close_idle``): an idle partition holds no
        descriptor; its next read or write reopens one."""
        while True:
            await asyncio.sleep(IDLE_FILES_CHECK_S)
            closed = self._ctx.host.open_files.close_idle()
            if closed:
                log.debug("closed %d idle segment files", closed)

    async def _retention_loop(self) -> None:
        """Every interval, each partition applies retention (see raftlog.node.retention).

        Partitions run concurrently, each bounded in time; a failure (leadership
        lost, a timeout) is logged and retried on the next round.
        """
        interval = self._ctx.config.retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            now_ms = int(time.time() * 1000)
            # Only partitions with a sealed segment: a round over thousands of idle
            # partitions spent a task and a wait_for each (and the garbage collections
            # their allocations set off), a third of an idle node's CPU.
            reps = [
                r
                for r in self._ctx.partitions.values()
                if r.retention is not None and r.retention.due()
            ]

            async def run(rep: PartitionReplica, now_ms: int) -> None:
                assert rep.retention is not None
                try:
                    await asyncio.wait_for(rep.retention.run(now_ms), 30.0)
                except Exception as exc:  # leadership moved, a timeout: the next round retries
                    log.warning("%s/%d: retention: %r", rep.topic, rep.partition, exc)

            await asyncio.gather(*(run(r, now_ms) for r in reps))

    async def _transaction_timeout_loop(self) -> None:
        """On the partitions this node leads, abort transactions open past the timeout.

        Checked several times per timeout so an expired transaction is aborted
        within about a quarter of the timeout after it expires; the shortest
        timeout is the server's or that of any open transaction's session.
        """
        interval = min(1.0, self._ctx.config.transaction_timeout_ms / 4000)
        while True:
            await asyncio.sleep(interval)
            now_ms = int(time.time() * 1000)
            # Only partitions with a transaction open can have one to abort, and only
            # those are looked at: walking every partition each round took 5% of a
            # node's loop at 7,000 partitions.
            timeouts = [
                (rep, rep.rm.min_open_timeout_ms())
                for rep in map(self._ctx.partitions.get, list(self._open_transactions))
                if rep is not None and rep.rm.table.has_open_transactions
            ]
            pending = [rep for rep, t in timeouts if t is not None]
            shortest = min(
                (t for _, t in timeouts if t), default=self._ctx.config.transaction_timeout_ms
            )
            interval = max(
                0.01, min(1.0, min(self._ctx.config.transaction_timeout_ms, shortest) / 4000)
            )
            for rep in pending:
                if not rep.consensus.is_leader:
                    continue
                try:
                    aborted = await rep.rm.abort_expired(now_ms)
                except Exception as exc:  # leadership moved, stopping: next round retries
                    log.debug("%s/%d: expiring transactions: %s", rep.topic, rep.partition, exc)
                    continue
                if aborted:
                    log.info(
                        "%s/%d: aborted expired transactions of producers %s",
                        rep.topic,
                        rep.partition,
                        aborted,
                    )
