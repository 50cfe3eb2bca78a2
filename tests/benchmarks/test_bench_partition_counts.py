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


def test_a_leadership_taken_while_a_poll_is_answered_counts_from_its_leaders_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The node takes over partition 0 while it builds its answer to a poll sent before:
    # the re-election is the leader's own time, never the poll's send time (which
    # understated it), and "seen" is when the answer arrived (an upper bound).
    import asyncio
    import time

    from benchmarks.workloads import partition_scale

    killed = time.time()
    took_over: list[float] = []

    async def reports(client: object, address: str, prefix: str) -> tuple[int, dict]:
        await asyncio.sleep(0.3)  # a busy node's answer, built after it took over
        took_over.append(time.time())
        return 2, {("t-0", 0): (2, int(took_over[0] * 1000))}

    monkeypatch.setattr(partition_scale, "_leader_reports", reports)
    found = asyncio.run(
        partition_scale.reelection_times(None, ["n2"], "t", {("t-0", 0)}, 1, killed, 10.0)
    )
    elected, seen = found.elected[("t-0", 0)], found.seen[("t-0", 0)]
    assert elected == pytest.approx(took_over[0] - killed, abs=0.002)
    assert elected >= 0.29  # not the send time (0 s after the kill)
    assert seen >= elected
