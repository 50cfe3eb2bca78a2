"""``python -m benchmarks --quick`` runs beside the other tests, not after them.

The run takes about four minutes and about one of CI's two cores; most of the
tests before the Spark ones (unit tests, the simulator) use the other one. So when
``test_bench_quick_all.py`` is selected, its run starts with the session's first
test of this directory (the session's first test in a whole run), and its tests
move to the end of the session, where they read what the run wrote. The run is a
process group of its own: whatever happens to the session, it is stopped by its
PID at the end (SIGINT first, so that it stops the clusters it started).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _quick_run import QUICK_ALL_FILE, QuickRun, start, stop


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The quick run's tests go last: by then the run has finished beside the others."""
    quick = [item for item in items if item.path.name == QUICK_ALL_FILE]
    if quick:
        items[:] = [item for item in items if item.path.name != QUICK_ALL_FILE] + quick


@pytest.fixture(scope="session", autouse=True)
def quick_run_in_background(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[QuickRun | None]:
    """Start the quick run when its tests are selected (None when they are not)."""
    if not any(item.path.name == QUICK_ALL_FILE for item in request.session.items):
        yield None
        return
    run = start(tmp_path_factory.mktemp("bench-quick"))
    try:
        yield run
    finally:
        stop(run.proc)
