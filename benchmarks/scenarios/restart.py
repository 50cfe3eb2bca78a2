"""Scenario ``restart``: how long a node takes to open its log, small vs large.

Goal (reported, not enforced): opening a 1 GiB log takes at most 1.5x as long
as opening a 10 MiB one, because the open reads the log's records (commit
context, start record), the headers of each sealed segment's first batch and of
its batches from its last index entry on (no payload: raftlog.storage.recovery),
and the last segment's tail, instead of scanning the log: the open grows by a
few small reads per sealed segment (8 more at 1 GiB; 13.5 us each in a loop of
opens, 42 us when the first and last batch were read whole: 1.64x in the run of
2026-12-04, 1.41x and 1.42x after). Both logs are written first (appended and flushed
in 1 MiB steps, then closed), then opened and closed several times, the sizes
taking turns; the median open time is reported, twice:

- ``open s (median)``, the goal's figure: warm, as after a process restart. The
  log's pages are where its writes left them (a flushed log keeps only what the
  open reads in the page cache: see ``CACHE_KEEP_BYTES``).
- ``open s cold (median)``: before each open every file of the log is written
  back and dropped from the page cache (``POSIX_FADV_DONTNEED``), so the open
  reads its data from the disk, as after a reboot. The kernel's cache of names
  and inodes stays warm: dropping it needs root and touches the whole machine.

An open fsyncs the last segment (what a crashed process left in the page cache
is made durable), so both figures include a disk cache flush: at millisecond
scale they swing with the machine's other IO.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.context import RunContext
from benchmarks.goals import Goal, Pick, row
from benchmarks.registry import Row, Skip, require, scenario

MIB = 1 << 20
GIB = 1 << 30
BATCH_PAYLOAD = 64 * 1024
RECORDS_PER_BATCH = 64  # 1 KiB records: offsets grow as a real log's do
BATCHES_PER_APPEND = MIB // BATCH_PAYLOAD
GOAL_RATIO = 1.5

QUICK_SIZES, FULL_SIZES = (10 * MIB, 100 * MIB), (10 * MIB, GIB)
QUICK_OPENS, FULL_OPENS = 11, 31  # medians of ms-scale figures on a busy machine


def _size_label(size: int) -> str:
    return f"{size // GIB} GiB" if size % GIB == 0 else f"{size // MIB} MiB"


def write_log(log_cls: Any, path: Path, size: int, ctx: RunContext) -> int:
    """Write about ``size`` bytes of payload to a new log at ``path``; return its dirty offset."""
    from raftlog.storage.batch import RecordBatch

    payload = os.urandom(BATCH_PAYLOAD)
    log = log_cls.open(path)
    try:
        offset = log.dirty_offset + 1
        for _ in range(size // MIB):
            batches = []
            for _ in range(BATCHES_PER_APPEND):
                batch = RecordBatch.create(payload, RECORDS_PER_BATCH).stamped(offset, 1)
                batches.append(batch)
                offset += RECORDS_PER_BATCH
            log.append(batches)
            log.flush()
            ctx.advance(1)
        dirty = int(log.dirty_offset)
    finally:
        log.close()
    if dirty != offset - 1:
        raise RuntimeError(f"log at {path} ends at offset {dirty}, expected {offset - 1}")
    return dirty


def drop_page_cache(directory: Path) -> None:
    """Write back every file in ``directory`` and drop it from the page cache (fsync,
    then ``POSIX_FADV_DONTNEED``): the next read of it goes to the disk."""
    for entry in os.scandir(directory):
        if not entry.is_file():
            continue
        fd = os.open(entry.path, os.O_RDONLY)
        try:
            os.fsync(fd)  # DONTNEED leaves dirty pages (the active index's) in the cache
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def time_opens(
    log_cls: Any, path: Path, opens: int, expected: int, ctx: RunContext, *, cold: bool = False
) -> tuple[list[float], int | None]:
    """Open and close the log ``opens`` times: seconds of each open (the close and,
    with ``cold``, the page cache drop before it are not timed), and the log's
    ``segment_count`` when it has one.

    Each open must recover the full log (``dirty_offset == expected``), else the
    figure would be meaningless and a RuntimeError is raised.
    """
    times = []
    segments = None
    for _ in range(opens):
        if cold:
            drop_page_cache(path)
        start = time.perf_counter()
        log = log_cls.open(path)
        times.append(time.perf_counter() - start)
        try:
            if log.dirty_offset != expected:
                raise RuntimeError(
                    f"reopened log at {path} ends at {log.dirty_offset}, expected {expected}"
                )
            segments = getattr(log, "segment_count", None)
        finally:
            log.close()
        ctx.advance(1)
    return times, segments


GOALS = (
    Goal(
        "restart",
        "opening a 1 GiB log against a 10 MiB one",
        # --quick opens 100 MiB instead: the table then says "(100 MiB)"
        ours=tuple(Pick(size, row(log=size), "open s (median)") for size in ("1 GiB", "100 MiB")),
        peers=(Pick("10 MiB", row(log="10 MiB"), "open s (median)"),),
        target=1.5,
        higher_is_better=False,
        unit="s",
    ),
)


@scenario(
    "restart",
    "node open time of a 10 MiB vs a 1 GiB log (quick: 10 vs 100 MiB)",
    goals=GOALS,
)
def run(ctx: RunContext) -> list[Row]:
    """Rows: one per log size (median and max open seconds), then the ratio large/small."""
    return measure(ctx, require("raftlog.storage.log", "SegmentedLog"))


def measure(ctx: RunContext, log_cls: Any) -> list[Row]:
    """The scenario's body, for any class with ``open(path)`` returning a LogStorage."""
    sizes = QUICK_SIZES if ctx.quick else FULL_SIZES
    opens = QUICK_OPENS if ctx.quick else FULL_OPENS
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    stat = os.statvfs(ctx.out_dir)
    needed = int(sum(sizes) * 1.2)  # every log plus index and slack, all on disk at once
    if stat.f_bavail * stat.f_frsize < needed:
        raise Skip(f"needs {needed / GIB:.1f} GiB free in {ctx.out_dir}")
    ctx.set_total(sum(s // MIB for s in sizes) + 2 * opens * len(sizes))
    rows: list[Row] = []
    medians, cold_medians = [], []
    with contextlib.ExitStack() as stack:
        logs = []
        for size in sizes:
            path = stack.enter_context(ctx.scratch_dir("restart")) / "log"
            logs.append((path, write_log(log_cls, path, size, ctx)))
        # The sizes' opens take turns, so that each size's median sees the same moments
        # of the machine's other IO (one size after the other, a burst of it made the
        # ratio anything from 0.2 to 9 at load 12).
        warm: list[list[float]] = [[] for _ in sizes]
        cold: list[list[float]] = [[] for _ in sizes]
        segments: list[int | None] = [None for _ in sizes]
        for drop, times in ((False, warm), (True, cold)):
            for _ in range(opens):
                for i, (path, dirty) in enumerate(logs):
                    took, segments[i] = time_opens(log_cls, path, 1, dirty, ctx, cold=drop)
                    times[i] += took
    for size, times, cold_times, count in zip(sizes, warm, cold, segments, strict=True):
        medians.append(statistics.median(times))
        cold_medians.append(statistics.median(cold_times))
        row: Row = {
            "log": _size_label(size),
            "open s (median)": medians[-1],
            "open s (max)": max(times),
            "open s cold (median)": cold_medians[-1],
            "open s cold (max)": max(cold_times),
            "opens": opens,
        }
        if isinstance(count, int):
            row["segments"] = count
        rows.append(row)
    ratio = medians[-1] / max(medians[0], 1e-9)  # perf_counter never gives 0; guard anyway
    rows.append(
        {
            "log": f"{_size_label(sizes[-1])} / {_size_label(sizes[0])}",
            "ratio": ratio,
            "ratio cold": cold_medians[-1] / max(cold_medians[0], 1e-9),
            "goal ratio": GOAL_RATIO,
        }
    )
    ctx.note(
        f"goal: {_size_label(sizes[-1])} open <= {GOAL_RATIO}x the {_size_label(sizes[0])} one; "
        f"{'met' if ratio <= GOAL_RATIO else 'missed'} ({ratio:.2f}x); warm page cache "
        f"(cold, the log's files dropped from it before each open: {rows[-1]['ratio cold']:.2f}x)"
    )
    return rows
