"""The Raft groups one node hosts.

:class:`GroupHost` owns what the groups of a node share: the peer transport,
the node-level heartbeat manager, the node clock and the peer dispatcher; it
opens and closes each group (a :class:`~raftlog.storage.log.SegmentedLog` under
a :class:`~raftlog.raft.consensus.Consensus`) and, for a partition, its
:class:`~raftlog.node.partition_replica.PartitionReplica`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import pathlib
from collections.abc import Awaitable, Callable
from typing import Any

from raftlog.coordinator.group_stm import CONSUMER_OFFSETS_TOPIC, GroupStm
from raftlog.coordinator.tm_stm import TRANSACTIONS_TOPIC, TmStm
from raftlog.faults import failpoints
from raftlog.faults.crash import cut_to_flushed
from raftlog.node.config import (
    DEFAULT_TRANSACTION_STATE_LOG_SEGMENT_BYTES,
    FLUSH_SCOPE_GROUP,
    FLUSH_SCOPE_NODE,
)
from raftlog.node.leader_notices import LeaderNotices
from raftlog.node.partition_replica import PartitionReplica
from raftlog.node.retention import Retention
from raftlog.producers.rm_stm import RmStm, RmStmConfig
from raftlog.raft.configuration import Configuration
from raftlog.raft.consensus import Consensus, ConsensusOptions
from raftlog.raft.core import ELECTION_COUNTERS, Role
from raftlog.raft.dispatch import PeerDispatcher
from raftlog.raft.heartbeat_manager import HeartbeatManager
from raftlog.raft.node_clock import NodeClock
from raftlog.raft.node_flush import NodeFlush
from raftlog.raft.progress import ProgressState
from raftlog.rpc.transport import StreamTransport
from raftlog.storage.api import CommitContext, VoteState
from raftlog.storage.fs import REAL_FS
from raftlog.storage.log import SegmentedLog
from raftlog.storage.open_files import OpenFiles, current_fd_limit, default_budget
from raftlog.storage.record_writer import RecordWriter
from raftlog.storage.vote_log import VoteLog, newer

log = logging.getLogger(__name__)

TRANSFER_HEARD_TICKS = 10
"""A preferred replica not heard from in this many ticks is not handed the leadership."""
TRANSFER_LAG_RECORDS = 1000
"""Nor one more records behind than this (the core catches it up while writes wait)."""
FIRST_ELECTION_TICKS = 1
"""Ticks after which a new group's preferred replica campaigns (see CoreOptions)."""


def priorities(replicas: list[int]) -> dict[int, int]:
    """Voting priorities from a replica list: the first (preferred leader) highest."""
    n = len(replicas)
    return {node: n - i for i, node in enumerate(replicas)}


class GroupHost:
    """Opens and closes the groups of one node; routes peer requests to them."""

    def __init__(
        self,
        node_id: int,
        transport: StreamTransport,
        heartbeat_interval_s: float,
        rm_config: RmStmConfig | None = None,
        *,
        data_dir: pathlib.Path,
        shard: int = 0,
        flush_scope: str = FLUSH_SCOPE_GROUP,
        transactions_segment_bytes: int = DEFAULT_TRANSACTION_STATE_LOG_SEGMENT_BYTES,
        quiesce: bool = True,
        max_open_segment_files: int | None = None,
    ) -> None:
        """``data_dir``: the node's data directory (its groups' votes are kept there, in
        shard ``shard``'s :class:`~raftlog.storage.vote_log.VoteLog`). ``flush_scope``:
        ``node`` makes one syncfs of ``data_dir``'s filesystem serve every group whose
        log is on it (:mod:`raftlog.raft.node_flush`), where the system's
        syncfs reports write-back errors; ``group``: each log fsyncs its files.
        ``transactions_segment_bytes``: ``__transactions``' largest segment (see
        :meth:`PartitionReplica.configure`). ``max_open_segment_files``: the bound on
        the groups' open segment descriptors (:mod:`raftlog.storage.open_files`; None:
        the default share of the process's open-file limit)."""
        self.node_id = node_id
        self.open_files = OpenFiles(max_open_segment_files or default_budget(current_fd_limit()))
        self.data_dir = data_dir
        self.flush_scope = flush_scope
        # The node's syncfs, and the device it serves (st_dev of data_dir); None: none.
        self.node_flush: NodeFlush | None = None
        self._flush_device: int | None = None
        self.shard = shard
        # Every group's vote, one append and one fsync per batch (opened by start()).
        self.votes: VoteLog | None = None
        # The groups' commit contexts, saved in batches off the loop.
        self.record_writer = RecordWriter()
        self.rm_config = rm_config or RmStmConfig()
        self.transactions_segment_bytes = transactions_segment_bytes
        self.transport = transport
        # A new topic's partitions elect their preferred replica two ticks after creation
        # (100 ms), not after a randomized election timeout (0.5-1 s): see
        # CoreOptions.first_election_ticks.
        self.options = ConsensusOptions(quiesce=quiesce, first_election_ticks=FIRST_ELECTION_TICKS)
        # A peer silent for two election timeouts is declared dead: the quiescent groups
        # it leads wake, and campaign one election timeout later (as without quiescence).
        dead_after_s = max(
            2 * self.options.election_timeout_ticks * self.options.tick_interval_s,
            4 * heartbeat_interval_s,
        )
        self.heartbeats = HeartbeatManager(node_id, transport, heartbeat_interval_s, dead_after_s)
        # One clock ticks every active group of the node and paces the heartbeat rounds.
        self.clock = NodeClock(self.options.tick_interval_s, self.heartbeats)
        self.dispatcher = PeerDispatcher(node_id, self.heartbeats)
        self.groups: dict[int, Consensus] = {}
        #: every hosted group's replica reports the leader it learns here (a held
        #: metadata answer waits on these notices)
        self.leader_notices = LeaderNotices()
        self._crash_hooks: dict[int, Any] = {}

    async def start(self) -> None:
        self.votes = await asyncio.to_thread(VoteLog.open, self.data_dir, self.shard)
        await self.heartbeats.start()
        self.clock.start()
        if self.flush_scope == FLUSH_SCOPE_NODE:
            # Opened before any group writes: syncfs reports errors from its opening on.
            barrier = REAL_FS.open_barrier(self.data_dir)
            if barrier is None:
                log.warning(
                    "node %s: --flush-scope node needs a syncfs that reports write-back "
                    "errors (Linux >= 5.8); this system has none: each group fsyncs its "
                    "own files", self.node_id,
                )  # fmt: skip
            else:
                self._flush_device = os.stat(self.data_dir).st_dev
                self.node_flush = NodeFlush(barrier)
                self.node_flush.start()

    async def stop(self) -> None:
        for gid in list(self.groups):
            await self.close_group(gid)
        await self.clock.stop()
        await self.heartbeats.stop()
        if self.node_flush is not None:
            await self.node_flush.stop()
        self.record_writer.close()
        if self.votes is not None:
            self.votes.close()
            self.votes = None

    def open_files_stats(self) -> dict[str, float]:
        """The bound on open segment files and its figures (the raftlog_storage_* metrics)."""
        files = self.open_files
        return {
            "open_segment_files": float(files.open),
            "open_segment_files_limit": float(files.limit),
            "segment_files_closed": float(files.closed_total),
            "open_segment_files_over_limit": float(files.over_limit),
        }

    def clock_stats(self) -> dict[str, float]:
        """The node clock's and heartbeats' figures (the raftlog_raft_* metrics)."""
        # one pass over the groups: a scrape of a node hosting thousands walks them once
        hosted = quiescent = leaderless = 0
        elections = dict.fromkeys(ELECTION_COUNTERS, 0)
        for c in self.groups.values():
            for name, n in c.core.elections.items():
                elections[name] += n
            quiescent += c.quiescent
            if c.running:
                hosted += 1
                leaderless += c.role is not Role.LEARNER and c.live_leader_id == -1
        return {
            "active_groups": float(self.clock.active_groups),
            "quiescent_groups": float(quiescent),
            "leaderless_groups": float(leaderless),
            "hosted_groups": float(hosted),
            **{name: float(n) for name, n in elections.items()},
            "group_heartbeats": float(self.heartbeats.group_heartbeats_sent),
            "heartbeat_batches": float(self.heartbeats.batches_sent),
            "nodes_declared_dead": float(self.heartbeats.nodes_declared_dead),
        }

    def _flush_barrier(self, directory: pathlib.Path) -> Callable[[], Awaitable[None]] | None:
        """The node's syncfs for a log in ``directory``: only on the filesystem it
        syncs (a directory mounted elsewhere fsyncs its own files)."""
        if self.node_flush is None or os.stat(directory).st_dev != self._flush_device:
            return None
        return self.node_flush.sync

    def _vote_saver(self, group: int) -> Callable[[VoteState], Awaitable[None]]:
        """How ``group``'s votes are saved: in the node's vote log, batched with the
        other groups' (one write and one fsync for all), off the loop."""
        votes = self.votes
        assert votes is not None

        async def save(vote: VoteState) -> None:
            await votes.save(group, vote)

        return save

    def _commit_context_saver(
        self, log: SegmentedLog
    ) -> Callable[[CommitContext], Awaitable[None]]:
        """How ``log``'s commit contexts are saved: batched with the other groups'
        records, off the loop (see Applier.save_commit_context)."""
        writer = self.record_writer

        async def save(ctx: CommitContext) -> None:
            await writer.save(*log.commit_context_record(ctx))
            log.commit_context_saved(ctx)

        return save

    async def _new_consensus(
        self, group: int, directory: pathlib.Path, replicas: list[int], controller: bool = False
    ) -> Consensus:
        votes = self.votes
        assert votes is not None, "GroupHost.start() opens the vote log"
        log = await asyncio.to_thread(SegmentedLog.open, directory)
        log.attach_files(self.open_files)
        self._register_crash_hook(group, log)
        c = Consensus(
            group,
            self.node_id,
            Configuration.of(replicas, priorities=priorities(replicas)),
            log,
            self.transport,
            dataclasses.replace(self.options, campaign_first=controller, commit_at_once=controller),
            seed=self.node_id * 1_000_003 + group,
            heartbeats=self.heartbeats,
            clock=self.clock,
            flush_barrier=self._flush_barrier(directory),
            vote_saver=self._vote_saver(group),
            # the vote files of groups created before the vote log are read too
            vote=newer(log.load_vote(), votes.vote(group)),
            commit_context_saver=self._commit_context_saver(log),
        )
        c.known_leader_listeners.append(functools.partial(self.leader_notices.leader_known, group))
        return c

    async def open_group(
        self,
        group: int,
        directory: pathlib.Path,
        replicas: list[int],
        state_machines: list[Any],
        controller: bool = False,
    ) -> Consensus:
        """Open (creating or recovering) ``group``'s log in ``directory`` and start it.
        ``controller``: the controller group, which campaigns first after a verdict and
        tells its followers every commit at once (see
        :attr:`~raftlog.raft.core.CoreOptions.campaign_first` and ``commit_at_once``)."""
        c = await self._new_consensus(group, directory, replicas, controller)
        for stm in state_machines:
            c.add_state_machine(stm)
        await c.start()
        self.groups[group] = c
        return c

    async def open_partition(
        self, topic: str, partition: int, group: int, directory: pathlib.Path, replicas: list[int]
    ) -> PartitionReplica:
        """Open a partition's group with rm_stm as its state machine, and start it."""
        c = await self._new_consensus(group, directory, replicas)
        rm = RmStm(c, self.rm_config)  # registers itself with c.add_state_machine, before start()
        # the transaction coordinator runs on the internal topic's partitions, after rm_stm
        tm = TmStm(c) if topic == TRANSACTIONS_TOPIC else None
        # the consumer groups' state on __consumer_offsets (raftlog.kafka.groups)
        group_stm = GroupStm(c) if topic == CONSUMER_OFFSETS_TOPIC else None
        log = c.log
        assert isinstance(log, SegmentedLog)
        # the log start's state machine comes last, after those of older snapshots
        retention = Retention(c, rm, log, f"{topic}/{partition}")
        await c.start()
        self.groups[group] = c
        return PartitionReplica(
            topic,
            partition,
            group,
            directory,
            list(replicas),
            c,
            rm,
            tm,
            retention,
            transactions_segment_bytes=self.transactions_segment_bytes,
            group_stm=group_stm,
        )

    def _register_crash_hook(self, group: int, log: SegmentedLog) -> None:
        """With failpoints enabled, a ``crash`` failpoint cuts this log to its flushed
        offset before the process dies: everything after the last fsync is lost."""
        if not failpoints.enabled():
            return
        remove = self._crash_hooks.pop(group, None)
        if remove is not None:
            remove()
        self._crash_hooks[group] = failpoints.add_crash_hook(lambda: _cut_log(log))

    async def close_group(self, group: int) -> None:
        remove = self._crash_hooks.pop(group, None)
        if remove is not None:
            remove()
        c = self.groups.pop(group, None)
        if c is None:
            return
        await c.stop()
        async with c.flusher.truncation_lock:  # never close the files under an fsync
            c.log.close()

    async def transfer(self, c: Consensus, target: int) -> bool:
        """Move leadership to ``target`` when it keeps up: streamed to (replicate), heard
        from within the last ``TRANSFER_HEARD_TICKS`` and at most
        ``TRANSFER_LAG_RECORDS`` behind, so the pause in writes while the core catches it
        up is short (never stalls writes for a follower that is behind or unreachable).
        False when it did not try."""
        status = c.status()
        p = status.peers.get(target)
        if (
            p is None
            or p.state is not ProgressState.REPLICATE
            or status.ticks - p.last_heard_tick > TRANSFER_HEARD_TICKS
            or c.log.dirty_offset - p.match_offset > TRANSFER_LAG_RECORDS
        ):
            return False
        await c.transfer_leadership(target)
        return True


def last_heard_ms(c: Consensus) -> dict[int, int]:
    """On a leader: per other member, milliseconds since its last reply or heartbeat
    reply (by the leader's ticks; counted from the start of the leadership for a
    member not heard since), or since its node was last heard from at all, whichever
    is longer: a quiescent group's ticks stop, so by ticks alone a dead node's age
    would freeze at the moment the group quiesced (health would call it fresh, and
    the leader balancer live). Empty on a follower, which tracks no one."""
    if not c.is_leader:
        return {}
    status = c.status()
    tick_ms = c.options.tick_interval_s * 1000
    heard: dict[int, int] = {}
    for node, p in sorted(status.peers.items()):
        ms = int((status.ticks - p.last_heard_tick) * tick_ms)
        ago = c.node_heard_ago_s(node)
        heard[node] = ms if ago is None else max(ms, int(ago * 1000))
    return heard


def _cut_log(log: SegmentedLog) -> None:
    # flushed_offset covers sealed segments too (a roll fsyncs and advances it).
    cut_to_flushed(log.directory, log.flushed_offset)
