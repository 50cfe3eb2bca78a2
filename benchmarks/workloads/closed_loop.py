"""A closed-loop load generator: N concurrent async workers, each sending one request,
waiting for its answer, and sending the next.

The same generator drives raftlog (``small``) and etcd (``peers``), so their
requests/s and latencies are measured by the same code. Every run is bounded by
a duration and by a request count, whichever comes first. A failed request is
counted (with its first error kept for the report) and does not stop the run:
under faults (``failover``) failures are part of what is measured.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks.workloads.latency import cdf_points, latency_columns

ERROR_PAUSE_S = 0.001

RequestFn = Callable[[int, int], Awaitable[object]]
"""``request(worker, n)``: send one request (the ``n``-th of the run) from ``worker``."""


@dataclasses.dataclass
class LoadResult:
    """What one closed-loop run did. ``latencies_s`` holds one entry per successful request."""

    clients: int
    seconds: float
    latencies_s: list[float] = dataclasses.field(default_factory=list)
    errors: int = 0
    first_error: str = ""
    resends: int = 0
    """Requests the workload had to send again (e.g. idempotent sends that overtook)."""

    @property
    def requests(self) -> int:
        """Successful (acknowledged) requests."""
        return len(self.latencies_s)

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0

    def latency(self) -> dict[str, float]:
        """The row's latency columns: p50, p95, p99, p99.9 and max in ms."""
        return latency_columns(self.latencies_s)


def record_client_series(ctx: Any, system: str, loads: dict[int, LoadResult]) -> None:
    """Plot lines of ``system``'s closed-loop runs, keyed by client count: requests/s
    and p99 latency against clients, and one latency CDF per client count."""
    counts = sorted(n for n, load in loads.items() if load.requests)
    ctx.add_series(
        "throughput against clients",
        system,
        "clients",
        "requests/s",
        [(n, loads[n].requests_per_s) for n in counts],
        log_x=True,
    )
    ctx.add_series(
        "p99 latency against clients",
        system,
        "clients",
        "p99 ms",
        [(n, loads[n].latency()["p99 ms"]) for n in counts],
        log_x=True,
    )
    for n in counts:
        ctx.add_series(
            f"latency CDF: {system}",
            f"{n} clients",
            "latency ms",
            "fraction of requests",
            cdf_points(loads[n].latencies_s),
            log_x=True,
        )


async def run_closed_loop(
    request: RequestFn,
    clients: int,
    duration_s: float,
    max_requests: int,
) -> LoadResult:
    """Run ``clients`` workers calling ``request`` back to back.

    Stops when ``duration_s`` has passed or ``max_requests`` have been started,
    whichever comes first; a request in flight at the deadline is awaited (each
    request must bound its own time, e.g. with a client timeout) and counted.
    """
    if clients < 1:
        raise ValueError(f"clients must be >= 1, got {clients}")
    if duration_s <= 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    if max_requests < 1:
        raise ValueError(f"max_requests must be >= 1, got {max_requests}")
    result = LoadResult(clients, 0.0)
    started = 0
    clock = time.perf_counter
    start = clock()
    deadline = start + duration_s

    async def worker(index: int) -> None:
        nonlocal started
        while started < max_requests and clock() < deadline:
            n = started
            started += 1  # single-threaded event loop: no lock needed between the check and this
            t0 = clock()
            try:
                await request(index, n)
            except Exception as exc:  # a failed request is a measured outcome, not a crash
                result.errors += 1
                if not result.first_error:
                    result.first_error = f"{type(exc).__name__}: {exc}"
                await asyncio.sleep(ERROR_PAUSE_S)  # a fast-failing request must not spin
                continue
            result.latencies_s.append(clock() - t0)

    await asyncio.gather(*(worker(i) for i in range(clients)))
    result.seconds = clock() - start
    return result
