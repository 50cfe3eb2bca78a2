"""Fixtures for the Spark integration tests: one shared local SparkSession, and the
raftlog cluster of integration_tests/conftest.py as a ``servers`` option value.

The session runs ``local[2,4]``: two cores, and up to four attempts per task, so
that tests can make a task fail once and watch Spark retry it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Spark's Python workers must run this venv's interpreter (with pyarrow and pyspark_raftlog);
# set before the JVM starts, which is when the first session is built.
os.environ.setdefault("PYSPARK_PYTHON", str(Path(sys.executable)))
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", str(Path(sys.executable)))


SPARK_TEST_TIMEOUT_S = 900
"""pytest-timeout's bound for a Spark test, above every bound the tests set themselves:
interrupted inside a py4j call, the shared session's gateway connection is left out of
step (every later test then fails with answers meant for another call), so a test must
end by its own bounds (``run_until``, ``awaitTermination``) and stop its query."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("timeout") is None and "integration_tests/spark" in str(
            item.path
        ):
            item.add_marker(pytest.mark.timeout(SPARK_TEST_TIMEOUT_S))


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One SparkSession for every Spark test (starting one costs several seconds)."""
    from pyspark_raftlog.session import build_session

    session = build_session("raftlog-integration-tests", master="local[2,4]")
    try:
        yield session
    finally:
        session.stop()


def _engine_missing() -> str | None:
    """Why the raftlog engine cannot be used yet, or None when it can."""
    for module in ("raftlog.client", "raftlog.cluster"):
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError as exc:
            return f"{module} cannot be imported: {exc}"
        if not found:
            return f"{module} does not exist yet (the engine is still being built)"
    return None


@pytest.fixture(scope="session")
def servers(request: pytest.FixtureRequest) -> str:
    """The shared 3-node cluster's servers as the connector's ``servers`` option value."""
    missing = _engine_missing()
    if missing:
        pytest.fail(f"{missing}; install it with ./scripts/test.sh (pip install -e '.[test]')")
    cluster = request.getfixturevalue("raftlog_cluster")
    return ",".join(cluster.servers)


@pytest.fixture
def private_cluster(request: pytest.FixtureRequest):
    """A private 3-node cluster (``fresh_cluster``) for tests that kill nodes."""
    missing = _engine_missing()
    if missing:
        pytest.fail(f"{missing}; install it with ./scripts/test.sh (pip install -e '.[test]')")
    return request.getfixturevalue("fresh_cluster")


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A Spark standalone master on 127.0.0.1 and two workers, one on each of
    ``standalone_cluster.WORKER_HOSTS`` (pyspark's ``spark-class``), shared by the tests that
    need one (starting it takes half a minute), stopped by PID at the end of the
    session, even when a test fails. Each test runs its own application on it."""
    if importlib.util.find_spec("pyspark") is None:
        pytest.fail("pyspark is not installed; install it with pip install -e '.[test]'")
    from standalone_cluster import WORKER_HOSTS, start_standalone

    cluster = start_standalone(
        tmp_path_factory.mktemp("spark-standalone"),
        workers=2,
        worker_hosts=WORKER_HOSTS,
    )
    try:
        yield cluster
    finally:
        cluster.stop()
