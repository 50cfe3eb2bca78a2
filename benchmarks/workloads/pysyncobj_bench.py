"""PySyncObj's figure: replicated 100-byte appends submitted inside the node processes.

PySyncObj's own benchmark submits commands with callbacks from every node and
searches for the highest rate still completing >= 90%. Here every node keeps a
fixed number of commands outstanding instead (closed loop), over a short
ladder of window sizes, and the best rate is reported: the same saturation
point, found in seconds instead of the minutes a rate bisection takes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from benchmarks.peers.pysyncobj_cluster import PySyncObjCluster
from benchmarks.workloads.latency import latency_columns


@dataclasses.dataclass
class SyncObjFigure:
    in_flight: int
    records_per_s: float
    latency: dict[str, float]
    """p50 .. max in ms (:func:`latency_columns`)."""
    errors: int


def measure_pysyncobj(
    base_dir: Path,
    windows: tuple[int, ...],
    seconds: float,
    size: int = 100,
    on_step: Callable[[float], None] | None = None,
) -> list[SyncObjFigure]:
    """One figure per window (commands in flight per node) on a fresh 3-node cluster."""
    figures = []
    with PySyncObjCluster(base_dir) as cluster:
        for window in windows:
            answers = cluster.bench(seconds, size, window)
            success = sum(a["success"] for a in answers)
            elapsed = max(a["seconds"] for a in answers)
            latencies = [x for a in answers for x in a["latencies"]]
            figures.append(
                SyncObjFigure(
                    window,
                    success / elapsed if elapsed > 0 else 0.0,
                    latency_columns(latencies),
                    sum(a["errors"] for a in answers),
                )
            )
            if on_step is not None:
                on_step(1)
    return figures
