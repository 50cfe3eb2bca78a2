"""A node's free disk space and its degraded mode (Kafka's KAFKA_STORAGE_ERROR,
Redpanda's degraded mode).

A node is *degraded* while its data directory's filesystem has less free space than
its reserve (``--min-free-bytes``), or for one check interval after a write found no
space at all (ENOSPC: a quota, or a reserve of 0). While degraded, the writes that
clients ask it to lead (produce, producer sessions, transaction markers, coordinator
commands) are refused at once with ``KAFKA_STORAGE_ERROR`` naming the node, the
directory, its free space and the reserve; nothing is written. Everything else goes
on: reads, ``cluster health``, and Raft itself (votes, terms, no-ops, a follower's
appends, the controller, retention's log-start moves), which the reserve has room
for. The node leaves degraded mode by itself as soon as a check finds free space back
at or above the reserve (retention, a topic delete, the operator): no restart.

Free space is ``statvfs``'s ``f_bavail * f_frsize`` (what an unprivileged writer may
use), sampled at most every ``check_interval_s``, so the produce path pays a clock
read, not a system call.
"""

from __future__ import annotations

import logging
import os
import pathlib
import time
from collections.abc import Callable

log = logging.getLogger("raftlog.node")

DEFAULT_MIN_FREE_BYTES = 64 * 1024 * 1024
"""The default reserve: room for every group's votes, commit contexts, start records
and index files after client writes stop (each a few KiB)."""
DISK_CHECK_INTERVAL_S = 0.25
MIB = 1024 * 1024


def free_bytes_of(path: pathlib.Path) -> int:
    """Bytes an unprivileged writer may still use on the filesystem holding ``path``."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def format_bytes(n: int) -> str:
    """``n`` in MiB with one decimal when under 10 MiB (``"3.5 MiB"``, ``"64 MiB"``)."""
    mib = n / MIB
    return f"{mib:.1f} MiB" if mib < 10 else f"{mib:.0f} MiB"


class DiskSpace:
    """The free space of one node's data directory, and whether the node is degraded.

    Invariant: ``degraded`` is true exactly while the last sample was below
    ``min_free_bytes``, or a write found no space less than ``check_interval_s`` ago.
    """

    def __init__(
        self,
        node_id: int,
        data_dir: pathlib.Path,
        min_free_bytes: int,
        *,
        check_interval_s: float = DISK_CHECK_INTERVAL_S,
        statvfs: Callable[[pathlib.Path], int] = free_bytes_of,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node_id = node_id
        self.data_dir = data_dir
        self.min_free_bytes = min_free_bytes
        self._interval = check_interval_s
        self._statvfs = statvfs
        self._clock = clock
        self._free = -1  # -1: not sampled yet
        self._sampled_at = float("-inf")
        self._full_until = float("-inf")  # a write found no space: degraded until then
        self._degraded = False
        # Times the node entered degraded mode (raftlog_disk_degraded_entered_total).
        self.entered = 0

    def _sample(self) -> None:
        now = self._clock()
        if now - self._sampled_at < self._interval:
            return
        self._sampled_at = now
        try:
            self._free = self._statvfs(self.data_dir)
        except OSError as exc:  # the directory is gone or unreadable: report, keep last
            log.warning("node %d: statvfs of %s failed: %s", self.node_id, self.data_dir, exc)
            if self._free < 0:
                # Never sampled (the data dir is not made yet at start): free space is
                # unknown, not zero, so refuse nothing and sample again next time.
                self._sampled_at = float("-inf")
                return
        degraded = self._free < self.min_free_bytes or now < self._full_until
        if degraded != self._degraded:
            self._degraded = degraded
            if degraded:
                self.entered += 1
                log.error("node %d: degraded: %s", self.node_id, self.reason())
            else:
                log.warning(
                    "node %d: left degraded mode: %s free in %s (--min-free-bytes %s)",
                    self.node_id,
                    format_bytes(self._free),
                    self.data_dir,
                    format_bytes(self.min_free_bytes),
                )

    @property
    def free_bytes(self) -> int:
        """Free bytes as last sampled (sampling again when the interval has passed)."""
        self._sample()
        return self._free

    @property
    def degraded(self) -> bool:
        self._sample()
        return self._degraded

    def note_disk_full(self) -> None:
        """A write found no space (ENOSPC): degraded now, and for one interval at least."""
        self._full_until = self._clock() + self._interval
        self._sampled_at = float("-inf")
        self._sample()

    def reason(self) -> str:
        """Why writes are refused: the node, its directory, free space and the reserve."""
        if self._free < self.min_free_bytes:
            why = f"below --min-free-bytes {format_bytes(self.min_free_bytes)}"
        else:
            why = "a write found no space left on the device"
        return (
            f"KAFKA_STORAGE_ERROR: node {self.node_id}'s data dir {self.data_dir} has "
            f"{format_bytes(max(self._free, 0))} free, {why}; writes are refused until "
            "retention, a topic delete or the operator frees space (reads go on)"
        )

    def status(self) -> dict[str, object]:
        """What ``/health`` reports: free bytes, the reserve, degraded and why."""
        degraded = self.degraded
        return {
            "free_bytes": self._free,
            "min_free_bytes": self.min_free_bytes,
            "degraded": degraded,
            "reason": self.reason() if degraded else "",
        }
