"""Membership changes and leadership transfer of one group, carried out for the core.

One configuration change is in flight at a time (the core's
``config_change_in_flight``); each is a configuration entry replicated at
``quorum_ack``, effective on every replica when appended. A learner is
promoted to voter when the core asks (it caught up: see ``RaftCore._maybe_promote``).
A transfer stops writes (a ``TransferLeadership`` step); the core catches the target up,
sends it timeout-now once it matches the leader's log and gives up after
``transfer_timeout_ticks``; this stage waits for the outcome.
"""

from __future__ import annotations

import asyncio

from raftlog.raft.configuration import Configuration
from raftlog.raft.errors import ConfigurationChangeError, RaftError
from raftlog.raft.local_messages import AbortTransfer, PromotionDone, TransferLeadership
from raftlog.raft.replicate_batcher import Consistency, ReplicateResult
from raftlog.raft.stage_context import GroupContext


class Membership:
    def __init__(self, consensus: GroupContext) -> None:
        self._c = consensus

    async def _replicate_config(self, config: Configuration) -> ReplicateResult:
        c = self._c
        stages = c.replicate([config.to_batch()], Consistency.QUORUM_ACK, c.core.term)
        return await stages.finished

    async def add_member(self, node: int, learner_first: bool = True) -> None:
        """Add ``node`` (as a learner first, promoted once caught up); waits for the commit."""
        c = self._c
        c.require_leader()
        config = c.configs.latest
        if node in config.members:
            raise ConfigurationChangeError(f"group {c.group}: node {node} is already a member")
        if c.core.config_change_in_flight:
            raise ConfigurationChangeError(
                f"group {c.group}: a configuration change is already in flight"
            )
        await self._replicate_config(
            config.with_learner(node) if learner_first else config.with_voter(node)
        )

    async def remove_member(self, node: int) -> None:
        """Remove ``node`` from the group; waits for the commit."""
        c = self._c
        c.require_leader()
        config = c.configs.latest
        if node not in config.members:
            raise ConfigurationChangeError(f"group {c.group}: node {node} is not a member")
        if c.core.config_change_in_flight:
            raise ConfigurationChangeError(
                f"group {c.group}: a configuration change is already in flight"
            )
        if node in config.voters and len(config.voters) == 1:
            raise ConfigurationChangeError(f"group {c.group}: cannot remove the last voter")
        await self._replicate_config(config.without(node))

    async def promote(self, node: int) -> None:
        """Make learner ``node`` a voter (the core asked: it caught up); a failure is
        left to the core to ask again."""
        c = self._c
        try:
            config = c.configs.latest
            if node in config.learners and not c.core.config_change_in_flight:
                await self._replicate_config(config.with_voter(node))
        except RaftError:
            pass
        finally:
            c.step(PromotionDone(node))

    async def transfer_leadership(self, target: int) -> None:
        """Hand leadership to ``target``: stop writes, catch it up, send timeout-now.

        Raises NotLeaderError when not leader, ConfigurationChangeError when
        ``target`` is not a voter, RaftError when the transfer times out (the
        old leader then accepts writes again).
        """
        c = self._c
        c.require_leader()
        if target == c.node_id:
            return
        if target not in c.configs.latest.voters:
            raise ConfigurationChangeError(f"group {c.group}: node {target} is not a voter")
        core = c.core
        c.step(TransferLeadership(target))
        term = core.term
        # The core catches the target up and sends it timeout-now (on ticks and replies);
        # this only waits for the outcome: the target leads, or the core gives up.
        for _ in range(c.options.transfer_timeout_ticks * 2 + 2):
            if not (c.running and core.is_leader and core.term == term):
                return  # someone (hopefully the target) took over
            if core.transfer_target != target:
                break
            await asyncio.sleep(c.options.tick_interval_s)
        if c.running and core.is_leader and core.term == term:
            c.step(AbortTransfer())
            raise RaftError(f"group {c.group}: leadership transfer to node {target} timed out")
