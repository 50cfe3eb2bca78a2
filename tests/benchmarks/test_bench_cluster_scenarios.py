"""The raftlog cluster scenarios skip truthfully while raftlog's pieces are missing,
and their helpers parse what the nodes export."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import _bench_repo_path  # noqa: F401  (puts the repo root on sys.path)
import pytest

from benchmarks.context import RunContext
from benchmarks.registry import Skip
from benchmarks.results import ScenarioResult
from benchmarks.scenarios import failover, idempotent, small, throughput
from benchmarks.workloads import failover_round, raftlog_local


def _ctx(tmp_path: Path, **flags: object) -> RunContext:
    return RunContext(quick=True, out_dir=tmp_path, args=argparse.Namespace(**flags))


@pytest.mark.parametrize("module", [small, throughput, idempotent, failover])
def test_scenarios_skip_naming_the_missing_cluster_module(
    module: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name == "raftlog.cluster" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(Skip, match=r"raftlog\.cluster is not built yet"):
        module.run(_ctx(tmp_path))  # type: ignore[attr-defined]
    assert not list(tmp_path.glob(".*/cluster.json"))  # nothing was started


def test_fsync_total_sums_counter_samples_and_says_when_there_are_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    texts = {
        "a": '# TYPE raftlog_fsyncs_total counter\nraftlog_fsyncs_total{group="1"} 3.0\n'
        'raftlog_fsyncs_total{group="2"} 4.0\n',
        "b": 'raftlog_fsyncs_total{group="1"} 5.0\nraftlog_fsyncs_created{group="1"} 1.7e9\n',
        "c": "# HELP raftlog_fsyncs_total fsyncs\n# TYPE raftlog_fsyncs_total counter\n",
    }
    monkeypatch.setattr(raftlog_local, "scrape", lambda address, timeout_s=5.0: texts[address])
    assert raftlog_local.fsync_total(["a", "b"]) == 12.0
    assert raftlog_local.fsync_total(["c"]) is None  # declared but never incremented


def test_flushed_offset_picks_the_node_topic_and_partition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = (
        'raftlog_group_flushed_offset{group="1",node="2",partition="0",topic="t"} 41.0\n'
        'raftlog_group_flushed_offset{group="2",node="2",partition="1",topic="t"} 7.0\n'
    )
    monkeypatch.setattr(raftlog_local, "scrape", lambda address, timeout_s=5.0: text)
    assert failover_round.flushed_offset("x", 2, "t", 0) == 41.0
    assert failover_round.flushed_offset("x", 2, "t", 1) == 7.0
    assert failover_round.flushed_offset("x", 3, "t", 0) is None


def test_throughput_reads_the_ceiling_of_an_earlier_disk_run(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    assert throughput.disk_ceiling(ctx) is None
    disk = ScenarioResult(
        "disk",
        "",
        "ok",
        rows=[
            {"case": "a", "R=3 ceiling MB/s": 30.0},
            {"case": "b", "R=3 ceiling MB/s": 40.0},
            {"case": "c", "MB/s": 1.0},
        ],
    )
    ctx.earlier.append(disk)
    assert throughput.disk_ceiling(ctx) == 40.0
    disk.status = "failed"
    assert throughput.disk_ceiling(ctx) is None
