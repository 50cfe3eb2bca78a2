"""The nemesis tests' workload: idempotent producers recorded for the checker.

One copy of the code, shared with ``python -m benchmarks chaos``: it lives in
:mod:`benchmarks.workloads.nemesis_workload` (see its doc). The repository root is
put on ``sys.path`` here, since ``benchmarks`` runs from there and is not installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

_REPO_ROOT = str(Path(__file__).resolve().parents[2])
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

from benchmarks.workloads.nemesis_workload import (  # noqa: E402
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
