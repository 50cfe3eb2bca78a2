"""The partition-count flags of the ``idle`` and ``partitions`` scenarios: the defaults
step to 3,000, 10,000 is accepted, and a bad value names its flag and the form expected.
(The scenarios themselves run in the quick run.)"""

from __future__ import annotations

import argparse
import os

import _bench_repo_path  # noqa: F401  (puts the repo root on sys.path)
import pytest

from benchmarks.scenarios import idle, partitions
from benchmarks.workloads.partition_scale import node_resources


def test_idle_steps_to_3000_by_default_and_takes_10000() -> None:
    assert idle.FULL_STEPS[-1] == 3000
    assert idle._steps("0,3000,10000") == (0, 3000, 10000)
    assert idle._steps("0,30") == (0, 30)  # any counts, not only whole topics
    for bad, why in (("0,x", "counts like"), ("300,0", "increasing"), ("0,10001", "0..10000")):
        with pytest.raises(argparse.ArgumentTypeError, match=rf"--partitions: expected .*{why}"):
            idle._steps(bad)


def test_partitions_scenario_counts() -> None:
    assert partitions.FULL_COUNTS == (300, 1000, 3000)
    assert partitions._counts("300,10000") == (300, 10000)
    for bad in ("three", "0", "10001"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"--partition-counts: expected"):
            partitions._counts(bad)


def test_node_resources_reads_memory_and_descriptors_of_a_process() -> None:
    mib, fds = node_resources(os.getpid())
    assert 5 < mib < 100_000
    r, w = os.pipe()
    try:
        assert node_resources(os.getpid())[1] == fds + 2
    finally:
        os.close(r)
        os.close(w)
