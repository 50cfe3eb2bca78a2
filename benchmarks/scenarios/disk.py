"""Scenario ``disk``: the physical limits of the out dir's disk.

Sequential write MB/s with an fsync every 1 MiB and every 16 MiB, and 4 KiB
append+fsync per second; the ceiling for R replicas sharing this one disk is
the disk's MB/s divided by R. raftlog's throughput is reported as a fraction
of that ceiling. Measured with ``os.fsync`` (what a log's flush costs), on
incompressible data, in a scratch directory on the out dir's filesystem.

After each fsync the file's pages leave the page cache (posix_fadvise DONTNEED),
as a raftlog segment's flushed pages do (``raftlog.storage.segment.
CACHE_KEEP_BYTES``): otherwise every write takes a page the kernel never handed
out before, and on a VM that first touch, not the disk, sets the figure (this
machine measured 1,223 MB/s one day and 325 the next that way).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.context import RunContext
from benchmarks.registry import Row, scenario

MIB = 1 << 20
REPLICAS = 3
"""R of the ceiling: a 3-node cluster on one machine writes every byte three times."""

# (bytes to write, fsync interval); quick sizes keep the scenario to a second or two.
QUICK_SEQUENTIAL = ((8 * MIB, 1 * MIB), (32 * MIB, 16 * MIB))
FULL_SEQUENTIAL = ((256 * MIB, 1 * MIB), (1024 * MIB, 16 * MIB))
QUICK_SMALL_FSYNCS, FULL_SMALL_FSYNCS = 100, 2000
QUICK_DEADLINE_S, FULL_DEADLINE_S = 5.0, 30.0
"""Each measurement stops at its deadline (on a slow disk) and reports what it did."""


def sequential_write(
    path: Path,
    total: int,
    fsync_every: int,
    deadline_s: float,
    on_fsync: Callable[[float], None],
) -> tuple[int, float, int]:
    """Append ``total`` bytes in 1 MiB writes, fsync every ``fsync_every`` bytes.

    Stops early (after an fsync) once ``deadline_s`` has passed. Returns (bytes
    written and fsynced, seconds, fsyncs). ``fsync_every`` must be a multiple of 1 MiB.
    """
    if fsync_every % MIB or fsync_every <= 0 or total < fsync_every:
        raise ValueError(
            f"fsync_every must be a positive multiple of 1 MiB <= total, got {fsync_every}"
        )
    chunk = os.urandom(MIB)  # incompressible, so a compressing filesystem cannot cheat
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    written = fsyncs = 0
    try:
        start = time.perf_counter()
        while written < total:
            for _ in range(fsync_every // MIB):
                os.write(fd, chunk)
            os.fsync(fd)
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # 0 length: to the end
            written += fsync_every
            fsyncs += 1
            on_fsync(1)
            if time.perf_counter() - start > deadline_s:
                break
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return written, elapsed, fsyncs


def small_fsyncs(
    path: Path, count: int, deadline_s: float, on_fsync: Callable[[float], None]
) -> tuple[int, float]:
    """Append 4 KiB and fsync, ``count`` times or until ``deadline_s``; (fsyncs, seconds)."""
    block = os.urandom(4096)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    done = 0
    try:
        start = time.perf_counter()
        while done < count:
            os.write(fd, block)
            os.fsync(fd)
            done += 1
            on_fsync(1)
            if time.perf_counter() - start > deadline_s:
                break
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return done, elapsed


@scenario("disk", "sequential write MB/s with fsync every 1 and 16 MiB; 4 KiB fsyncs/s")
def run(ctx: RunContext) -> list[Row]:
    """Rows: one per sequential test (MB/s, fsyncs/s, R=3 ceiling MB/s), one for 4 KiB fsyncs."""
    sequential = QUICK_SEQUENTIAL if ctx.quick else FULL_SEQUENTIAL
    small = QUICK_SMALL_FSYNCS if ctx.quick else FULL_SMALL_FSYNCS
    deadline = QUICK_DEADLINE_S if ctx.quick else FULL_DEADLINE_S
    ctx.set_total(sum(total // every for total, every in sequential) + small)
    rows: list[Row] = []
    with ctx.scratch_dir("disk") as scratch:
        for total, every in sequential:
            written, seconds, fsyncs = sequential_write(
                scratch / "sequential", total, every, deadline, ctx.advance
            )
            mb_s = written / 1e6 / seconds
            rows.append(
                {
                    "case": f"sequential write, fsync every {every // MIB} MiB",
                    "MB/s": mb_s,
                    "fsyncs/s": fsyncs / seconds,
                    f"R={REPLICAS} ceiling MB/s": mb_s / REPLICAS,
                    "MiB written": written / MIB,
                }
            )
        done, seconds = small_fsyncs(scratch / "small", small, deadline, ctx.advance)
        rows.append(
            {
                "case": "4 KiB append + fsync",
                "MB/s": done * 4096 / 1e6 / seconds,
                "fsyncs/s": done / seconds,
            }
        )
    ctx.note(
        f"ceiling for R={REPLICAS} replicas on one disk = disk MB/s / {REPLICAS}; "
        "measured with os.fsync on incompressible data"
    )
    return rows
