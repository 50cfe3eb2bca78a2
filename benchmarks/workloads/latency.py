"""Latency percentiles for every benchmark figure, from an HdrHistogram.

One way to turn measured durations into the columns of a result row: p50, p95,
p99, p99.9 and max, named with their unit (``"p99 ms"``). HdrHistogram keeps
three significant digits over the whole range (1 µs to one hour) in constant
memory, and its percentiles are the ones every latency benchmark reports
(etcd's benchmark tool, wrk2, YCSB), so our figures read the same as theirs.
"""

from __future__ import annotations

from collections.abc import Iterable

from hdrh.histogram import HdrHistogram

QUANTILES = (50.0, 95.0, 99.0, 99.9)
"""Percentiles every latency figure reports, besides the maximum."""

_LOWEST_US, _HIGHEST_US, _DIGITS = 1, 3_600_000_000, 3
_SCALE = {"ms": 1e3, "s": 1.0}


def histogram(values_s: Iterable[float], counts: Iterable[int] | None = None) -> HdrHistogram:
    """An HdrHistogram of ``values_s`` (seconds), recorded in microseconds; with
    ``counts``, ``values_s[i]`` was measured ``counts[i]`` times (millions of rows
    tallied by value cost one call per distinct value).

    Values below 1 µs count as 1 µs and above one hour as one hour: the histogram's
    range, which no benchmark request leaves.
    """
    h = HdrHistogram(_LOWEST_US, _HIGHEST_US, _DIGITS)
    values = list(values_s)
    weights = [1] * len(values) if counts is None else [int(c) for c in counts]
    if len(weights) != len(values):
        raise ValueError(f"counts: expected {len(values)} (one per value), got {len(weights)}")
    for v, n in zip(values, weights, strict=True):
        if n > 0:
            h.record_value(min(_HIGHEST_US, max(_LOWEST_US, round(v * 1e6))), n)
    return h


def quantile(values_s: Iterable[float], q: float) -> float:
    """The ``q`` percentile (0..100) of ``values_s`` in seconds; 0.0 when empty."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"q must be within 0..100, got {q}")
    h = histogram(values_s)
    if h.get_total_count() == 0:
        return 0.0
    return h.get_value_at_percentile(q) / 1e6


def cdf_points(values_s: Iterable[float], unit: str = "ms") -> list[tuple[float, float]]:
    """A latency CDF as (latency in ``unit``, fraction of requests at or below it).

    Percentiles spaced evenly on a log scale of the tail (0, 68, 90, 97, 99, 99.7,
    99.9, ... 99.999 and the points between), so the tail is as visible as the body.
    """
    if unit not in _SCALE:
        raise ValueError(f"unit must be one of {sorted(_SCALE)}, got {unit!r}")
    h = histogram(values_s)
    if h.get_total_count() == 0:
        return []
    scale = _SCALE[unit] / 1e6
    quantiles = sorted({100.0 * (1.0 - 10.0 ** (-k / 20.0)) for k in range(101)} | {100.0})
    return [(h.get_value_at_percentile(q) * scale, q / 100.0) for q in quantiles]


def latency_columns(
    values_s: Iterable[float], unit: str = "ms", counts: Iterable[int] | None = None
) -> dict[str, float]:
    """``{"p50 ms": .., "p95 ms": .., "p99 ms": .., "p99.9 ms": .., "max ms": ..}``.

    ``unit`` is ``"ms"`` or ``"s"``; ``counts`` as for :func:`histogram`. Empty input
    gives no columns: a figure that was not measured is absent from the row, never
    shown as zero.
    """
    if unit not in _SCALE:
        raise ValueError(f"unit must be one of {sorted(_SCALE)}, got {unit!r}")
    h = histogram(values_s, counts)
    if h.get_total_count() == 0:
        return {}
    scale = _SCALE[unit] / 1e6
    cols = {f"p{q:g} {unit}": h.get_value_at_percentile(q) * scale for q in QUANTILES}
    cols[f"max {unit}"] = h.get_max_value() * scale
    return cols
