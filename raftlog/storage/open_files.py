"""A node's bound on the segment files its logs hold open, and the fd limit it lives in.

A node hosting thousands of partitions would otherwise hold a descriptor per
segment it ever touched: every replica's active segment, and (before sealed
segments closed theirs) one per term it went through. :class:`OpenFiles` keeps
the count of open segment descriptors at or under ``limit`` across every log of
the node, closing those of the least recently used logs first, and closes the
files of logs nobody has used for ``idle_s`` (an idle, quiescent partition holds
none). A descriptor is reopened on its next use (``Segment.fd``).

Which logs may be closed: only one whose every write is flushed and with no flush
under way (:meth:`SegmentedLog.release_files`): a flush's fsync runs in a thread
on the segment's descriptor, and an fsync through a descriptor opened after a
write-back error might not report it. So the bound is soft: while more logs than
``limit`` hold unflushed writes at once it is exceeded (counted in
``over_limit``), and comes back under as their flushes land.

:func:`raise_fd_limit` raises the process's ``RLIMIT_NOFILE`` soft limit to its
hard limit at start and refuses to start below ``MIN_FD_LIMIT``, naming ``ulimit -n``.
"""

from __future__ import annotations

import collections
import resource
import time
from collections.abc import Callable
from typing import Protocol

MIN_FD_LIMIT = 256
"""Below this many descriptors a node does not start: sockets, the log files of the
node itself and a small budget of segments need about that many."""
SEGMENT_SHARE = 2
"""The segment files' default budget is 1/SEGMENT_SHARE of the fd limit; the rest is
for connections (peers, clients, Kafka clients) and the node's own files."""
DEFAULT_IDLE_S = 60.0
"""A log unused for this long has its segment files closed (see :meth:`OpenFiles.close_idle`)."""


class ReleasableLog(Protocol):
    @property
    def files_open(self) -> int:
        """Segment descriptors the log holds open now."""
        ...

    def release_files(self) -> int:
        """Close every open segment file if no write awaits a flush and no flush runs;
        the number closed (0 when it may not)."""
        ...


class FdLimitTooLow(ValueError):
    """The process may not open enough files to run a node (a ValueError: the CLI
    reports it as it reports a bad flag, naming what to change)."""


def raise_fd_limit(minimum: int = MIN_FD_LIMIT) -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; return the soft limit now.

    Raises :class:`FdLimitTooLow` (naming ``ulimit -n`` and the numbers) when even the
    hard limit is below ``minimum``.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < minimum:
        raise FdLimitTooLow(
            f"the open-file limit (RLIMIT_NOFILE) is {soft} (hard {hard}), below the "
            f"{minimum} a node needs: raise it (ulimit -n {max(minimum, 65536)}, or "
            "LimitNOFILE= in a systemd unit) and start the node again"
        )
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return current_fd_limit()


def current_fd_limit() -> int:
    """The process's soft ``RLIMIT_NOFILE`` now (a large number when unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def default_budget(fd_limit: int) -> int:
    """The segment files' share of an fd limit."""
    return max(MIN_FD_LIMIT // SEGMENT_SHARE // 2, fd_limit // SEGMENT_SHARE)


def check_budget(asked: int, fd_limit: int) -> None:
    """Refuse a ``--max-open-segment-files`` that leaves under ``MIN_FD_LIMIT / 2``
    descriptors of ``fd_limit`` for everything else."""
    room = fd_limit - MIN_FD_LIMIT // 2
    if asked > room:
        raise FdLimitTooLow(
            f"--max-open-segment-files: {asked} leaves too few of the open-file limit "
            f"({fd_limit}) for connections and the node's own files; expected 0 (half "
            f"the limit) or 1..{room}, or raise the limit (ulimit -n)"
        )


class OpenFiles:
    """The open segment descriptors of one node's logs, least recently used first.

    Single-threaded (the event loop): logs call :meth:`opened`, :meth:`closed` and
    :meth:`touch`; a flush thread never does (its descriptor was opened on the loop).
    """

    def __init__(
        self,
        limit: int,
        idle_s: float = DEFAULT_IDLE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 1:
            raise ValueError(f"OpenFiles limit must be >= 1, got {limit}")
        self.limit = limit
        self.idle_s = idle_s
        self._clock = clock
        self.open = 0  # segment descriptors open now, over every log
        self.closed_total = 0  # closed by this budget (over the limit, or idle)
        self.over_limit = 0  # times an open found nothing it could close to stay under
        # log -> when it was last used; oldest first
        self._used: collections.OrderedDict[ReleasableLog, float] = collections.OrderedDict()

    def touch(self, log: ReleasableLog) -> None:
        """``log`` was used now (it moves to the end of the eviction order)."""
        self._used[log] = self._clock()
        self._used.move_to_end(log)

    def opened(self, log: ReleasableLog) -> None:
        """``log`` opened a descriptor: make room under the limit (never closing ``log``'s)."""
        self.open += 1
        self.touch(log)
        if self.open > self.limit:
            self._shrink(keep=log, target=self.limit)

    def closed(self, n: int = 1) -> None:
        self.open -= n

    def forget(self, log: ReleasableLog) -> None:
        """``log`` is closed for good (its descriptors were counted out by :meth:`closed`)."""
        self._used.pop(log, None)

    def _shrink(self, keep: ReleasableLog, target: int) -> None:
        # Down to 90% of the limit when over it, so that a node at its bound does not
        # close one log per open.
        goal = min(target, max(1, self.limit - self.limit // 10))
        for log in list(self._used):
            if self.open <= goal:
                return
            if log is keep:
                continue
            self.closed_total += log.release_files()
            if log.files_open == 0:
                del self._used[log]  # back on its next use
        if self.open > self.limit:
            self.over_limit += 1

    def close_idle(self) -> int:
        """Close the files of every log unused for ``idle_s``; the number closed."""
        cutoff = self._clock() - self.idle_s
        closed = 0
        for log, used in list(self._used.items()):
            if used > cutoff:
                break  # the rest were used later
            closed += log.release_files()
            if log.files_open == 0:
                del self._used[log]
        self.closed_total += closed
        return closed
