"""Whole-cluster power loss in the simulation: SegmentedLog on the page-cache model.

Every node's log is the real on-disk log over :class:`ModelFileSystem`; the
nemesis cuts the power of every node at once (only durable state survives,
with torn sectors) besides the usual faults. No quorum_ack entry may be lost.
"""

from __future__ import annotations

import pytest

from raftlog.sim.power import run_power_seed, run_power_seeds
from raftlog.storage.fs import MUTATION_ENV


# A bound against a hang, not a speed goal: about 100-200 s of 2 processes on a
# 2-core machine, longer when it shares the machine (the default bound is 300 s).
@pytest.mark.timeout(600)
def test_thousand_seeds_of_whole_cluster_power_loss_lose_nothing_committed() -> None:
    results = run_power_seeds(range(1000), processes=2)
    failed = [r for r in results if not r.ok]
    assert failed == [], failed[0].error
    assert sum(r.power_cuts for r in results) > 2000
    assert sum(r.acked for r in results) > 10_000


def test_a_power_seed_replays_exactly() -> None:
    assert run_power_seed(77) == run_power_seed(77)


@pytest.mark.parametrize("mutation", ["skip-fsync", "skip-dir-fsync"])
def test_power_loss_catches_a_disk_that_does_not_sync(mutation, monkeypatch) -> None:
    monkeypatch.setenv(MUTATION_ENV, mutation)
    failed = [r for r in run_power_seeds(range(40)) if not r.ok]
    assert len(failed) >= 10, f"only {len(failed)} of 40 seeds failed under {mutation}"
