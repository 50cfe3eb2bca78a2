"""``ConsensusOptions``: the tunables of one group (timeouts, flush coalescing, windows).

Its own module so that the stages and the node can name it without importing
:mod:`raftlog.raft.consensus` (no import cycle between the group and its stages).
"""

from __future__ import annotations

import dataclasses

from raftlog.raft.core import CoreOptions

# The core's defaults: the fields both classes share are the core's, written once.
_CORE = CoreOptions()


@dataclasses.dataclass(slots=True)
class ConsensusOptions:
    """A group's tunables: the core's (same names and defaults as
    :class:`~raftlog.raft.core.CoreOptions`, see :meth:`core_options`) and the stages'."""

    election_timeout_ticks: int = _CORE.election_timeout_ticks
    tick_interval_s: float = 0.05
    # Follower flush coalescing: flush when this many bytes are pending ...
    # 1 MiB, not 256 KiB: with 256 KiB every append of a 256 KiB batch (the `throughput`
    # scenario's small batches) crossed it, so the follower a quorum_ack write does not
    # ask to flush flushed at once anyway, one flush per append. Measured (`benchmarks
    # throughput` cases, 6 partitions, 256 KiB batches of 100 B records, acks=all, 2
    # cores at load 21): node CPU 9.7 -> 8.5 s per GB, MB/s +13 % (see the commit).
    flush_bytes: int = 1024 * 1024
    # ... or after this delay (Redpanda: 100 ms). It bounds how long leader_ack writes
    # and the appends of the followers a quorum_ack write does not ask to flush at once
    # (RaftCore._quorum_flushers) stay unflushed; a write that waits on a flush cuts it
    # short. Measured (`benchmarks small`, 64 clients, 2 cores, one follower asked):
    # 5 ms -> 0.13 fsyncs per request, 50 ms -> 0.10 at the same requests/s.
    flush_delay_s: float = 0.05
    # Group commit: a flush that writers wait on waits this long for more of them to
    # join, when the last one served several (see FlushCoalescer); 0 turns it off.
    # Measured (`benchmarks small`, 64 clients, 2 cores): 0 -> 0.23 fsyncs per request,
    # 4 ms -> 0.12 at the same requests/s; 5 ms -> 0.11 at -5%; 10 ms -> 0.09 at -24%.
    flush_linger_s: float = 0.004
    # ... except for a flush with this many bytes pending or more: it has a full flush's
    # worth, and lingering only delayed large writes (see FlushCoalescer). Kept at 256 KiB
    # when flush_bytes went to 1 MiB: a 4 ms linger on each 256 KiB acks=all append cost
    # 6 partitions of them ~15 % of their MB/s.
    flush_linger_max_bytes: int = 256 * 1024
    # Run a flush's fsync step (log.sync_flush) in a thread (on-disk logs); False runs
    # it inline (simulator).
    flush_in_executor: bool = True
    # Simulated fsync duration (the simulator's slow disk); keep 0 in production.
    flush_latency_s: float = 0.0
    batcher_memory_bytes: int = 1024 * 1024
    # A follower's in-flight window (the core's flow control): pipelined appends
    # outstanding, by count and (soft) bytes; recovery's chunk size and window.
    max_in_flight_appends: int = _CORE.max_in_flight_appends
    max_in_flight_bytes: int = _CORE.max_in_flight_bytes
    recovery_chunk_bytes: int = _CORE.recovery_chunk_bytes
    recovery_max_inflight: int = _CORE.recovery_max_inflight
    idle_heartbeat_ticks: int = _CORE.idle_heartbeat_ticks
    check_quorum: bool = _CORE.check_quorum
    transfer_timeout_ticks: int = _CORE.transfer_timeout_ticks
    # Quiescence of idle groups (RaftCore.quiescent); False keeps every group ticking.
    quiesce: bool = _CORE.quiesce
    # A brand-new group's preferred voter campaigns after this many ticks (0: after a
    # randomized election timeout, as any follower); see CoreOptions.first_election_ticks.
    first_election_ticks: int = _CORE.first_election_ticks
    # Campaign at the next tick after a verdict on the leader's node (the controller).
    campaign_first: bool = _CORE.campaign_first
    # Tell followers every commit at the next heartbeat round (the controller).
    commit_at_once: bool = _CORE.commit_at_once
    # Save the commit context (and state machine snapshots) every this many ticks.
    commit_context_interval_ticks: int = 20

    def core_options(self) -> CoreOptions:
        """The core's share of these options (every field of CoreOptions, by name)."""
        return CoreOptions(
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(CoreOptions)}
        )

    def validate(self) -> None:
        """Raise ValueError naming the first bad option."""
        for name in (
            "election_timeout_ticks",
            "flush_bytes",
            "flush_linger_max_bytes",
            "batcher_memory_bytes",
            "max_in_flight_appends",
            "max_in_flight_bytes",
            "recovery_chunk_bytes",
            "recovery_max_inflight",
            "idle_heartbeat_ticks",
            "transfer_timeout_ticks",
            "commit_context_interval_ticks",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"ConsensusOptions.{name} must be >= 1, got {getattr(self, name)}")
        if self.idle_heartbeat_ticks >= self.election_timeout_ticks:
            raise ValueError(
                "ConsensusOptions.idle_heartbeat_ticks must be below election_timeout_ticks "
                f"({self.election_timeout_ticks}), got {self.idle_heartbeat_ticks}: idle "
                "followers would time out between heartbeats"
            )
        if self.flush_linger_s < 0:
            raise ValueError(
                f"ConsensusOptions.flush_linger_s must be >= 0, got {self.flush_linger_s}"
            )
        for name in ("tick_interval_s", "flush_delay_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"ConsensusOptions.{name} must be > 0, got {getattr(self, name)}")
