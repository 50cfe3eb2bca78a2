"""``ConsensusOptions``: the tunables of one group (timeouts, flush coalescing, windows).

Its own module so that the stages and the node can name it without importing
:mod:`raftlog.raft.consensus` (no import cycle between the group and its stages).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(slots=True)
class ConsensusOptions:
    election_timeout_ticks: int = 10
    tick_interval_s: float = 0.05
    # Follower flush coalescing: flush when this many bytes are pending ...
    flush_bytes: int = 256 * 1024
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
    # Run a flush's fsync step (log.sync_flush) in a thread (on-disk logs); False runs
    # it inline (simulator).
    flush_in_executor: bool = True
    # Simulated fsync duration (the simulator's slow disk); keep 0 in production.
    flush_latency_s: float = 0.0
    batcher_memory_bytes: int = 1024 * 1024
    # A follower's in-flight window (the core's flow control): at most this many
    # pipelined appends outstanding ...
    max_in_flight_appends: int = 4
    # ... and no new one once this many bytes are outstanding (soft: one larger append
    # goes when the window is empty). It holds a few of the connector's 4 MiB chunks: at
    # 2 MiB each of them filled it, and every follower got one append per round trip
    # (4 MiB batches, 4 in flight, 1 partition: 180-220 MB/s; 32 MiB: 245-295 MB/s).
    max_in_flight_bytes: int = 32 * 1024 * 1024
    recovery_chunk_bytes: int = 512 * 1024
    # Recovery's window: once a follower's match point is known, at most this many chunks
    # in flight to it at once (1: one round trip per chunk, as before pipelining).
    recovery_max_inflight: int = 4
    check_quorum: bool = True
    transfer_timeout_ticks: int = 20
    # Save the commit context (and state machine snapshots) every this many ticks.
    commit_context_interval_ticks: int = 20

    def validate(self) -> None:
        """Raise ValueError naming the first bad option."""
        for name in (
            "election_timeout_ticks",
            "flush_bytes",
            "batcher_memory_bytes",
            "max_in_flight_appends",
            "max_in_flight_bytes",
            "recovery_chunk_bytes",
            "recovery_max_inflight",
            "transfer_timeout_ticks",
            "commit_context_interval_ticks",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"ConsensusOptions.{name} must be >= 1, got {getattr(self, name)}")
        if self.flush_linger_s < 0:
            raise ValueError(
                f"ConsensusOptions.flush_linger_s must be >= 0, got {self.flush_linger_s}"
            )
        for name in ("tick_interval_s", "flush_delay_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"ConsensusOptions.{name} must be > 0, got {getattr(self, name)}")
