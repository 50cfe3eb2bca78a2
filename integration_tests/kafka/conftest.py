"""A 3-node local cluster whose nodes run the Kafka listener (``raftlog local start``
gives every local node one), shared by this directory's tests; stopped by PID."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from benchmarks.workloads.cluster_handle import ClusterHandle, running_cluster

try:
    import kafka  # noqa: F401
except ImportError as exc:  # a test that needs something missing fails with the command
    raise ImportError(
        "the Kafka compatibility tests need kafka-python: pip install -e '.[test]' "
        "(or source scripts/env.sh)"
    ) from exc


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    with running_cluster(tmp_path_factory.mktemp("kafka-cluster")) as handle:
        assert len(handle.cluster.kafka_bootstrap) == 3, "every local node has a Kafka port"
        yield handle


@pytest.fixture
def bootstrap(kafka_cluster: ClusterHandle) -> list[str]:
    return kafka_cluster.cluster.kafka_bootstrap


def data_dir(handle: ClusterHandle) -> pathlib.Path:
    return handle.data_dir
