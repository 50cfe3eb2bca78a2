"""The nemesis tests' workload: idempotent producers recorded for the checker.

One copy of the code, shared with ``python -m benchmarks chaos``: it lives in
:mod:`benchmarks.workloads.nemesis_workload` (see its doc). ``integration_tests/conftest.py``
puts the repository root on ``sys.path``, since ``benchmarks`` runs from there and is not
installed.
"""

from __future__ import annotations

from benchmarks.workloads.nemesis_workload import (
    REQUEST_TIMEOUT_S,
    MappedClient,
    ProducerStats,
    Workload,
    assert_clean,
    metric,
)

__all__ = [
    "REQUEST_TIMEOUT_S",
    "MappedClient",
    "ProducerStats",
    "Workload",
    "assert_clean",
    "metric",
]
