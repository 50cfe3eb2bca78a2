"""A node's degraded mode (raftlog.node.disk_space): entered below --min-free-bytes or
after a write found no space, left by itself once space is back; statvfs is sampled at
most once per interval; the flag is checked; cluster health names a degraded node."""

from __future__ import annotations

import argparse
import pathlib

import pytest
from prometheus_client.parser import text_string_to_metric_families

from raftlog.health import NodeHealth, _disk, format_bytes
from raftlog.metrics import NodeMetrics
from raftlog.node.config import add_server_arguments, config_from_args
from raftlog.node.disk_space import DEFAULT_MIN_FREE_BYTES, DiskSpace, free_bytes_of

MIB = 1024 * 1024


class FakeDisk:
    """statvfs answers and a clock the test moves."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.now = 100.0
        self.calls = 0

    def statvfs(self, _path: pathlib.Path) -> int:
        self.calls += 1
        return self.free

    def clock(self) -> float:
        return self.now


def _space(disk: FakeDisk, min_free: int = 64 * MIB) -> DiskSpace:
    return DiskSpace(
        2,
        pathlib.Path("/x"),
        min_free,
        check_interval_s=0.25,
        statvfs=disk.statvfs,
        clock=disk.clock,
    )


def test_degraded_below_the_reserve_with_a_reason_naming_node_dir_free_and_flag() -> None:
    disk = FakeDisk(free=12 * MIB)
    space = _space(disk)
    assert space.degraded
    assert space.reason() == (
        "KAFKA_STORAGE_ERROR: node 2's data dir /x has 12 MiB free, below --min-free-bytes "
        "64 MiB; writes are refused until retention, a topic delete or the operator frees "
        "space (reads go on)"
    )
    assert space.status() == {
        "free_bytes": 12 * MIB,
        "min_free_bytes": 64 * MIB,
        "degraded": True,
        "reason": space.reason(),
    }
    assert space.entered == 1


def test_leaves_degraded_mode_by_itself_once_space_is_back_sampling_once_per_interval() -> None:
    disk = FakeDisk(free=12 * MIB)
    space = _space(disk)
    assert space.degraded
    disk.free = 100 * MIB  # retention freed space
    for _ in range(100):  # within one interval: the cached sample, no statvfs
        assert space.degraded
    assert disk.calls == 1
    disk.now += 0.3
    assert not space.degraded
    assert space.free_bytes == 100 * MIB
    assert space.status()["reason"] == ""
    assert disk.calls == 2


def test_a_write_that_found_no_space_degrades_the_node_for_an_interval() -> None:
    disk = FakeDisk(free=500 * MIB)
    space = _space(disk, min_free=0)
    assert not space.degraded
    space.note_disk_full()
    assert space.degraded
    assert "a write found no space left on the device" in space.reason()
    disk.now += 0.3
    assert not space.degraded


def test_free_bytes_of_a_real_directory(tmp_path: pathlib.Path) -> None:
    assert free_bytes_of(tmp_path) > 0


def _parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_server_arguments(p)
    base = ["--node-id", "1", "--data-dir", "d", "--listen", "127.0.0.1:9001"]
    return p.parse_args([*base, *argv])


def test_min_free_bytes_flag_default_and_bad_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAFTLOG_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAFTLOG_PEER_TOKEN", raising=False)
    assert config_from_args(_parse()).min_free_bytes == DEFAULT_MIN_FREE_BYTES == 64 * MIB
    assert config_from_args(_parse("--min-free-bytes", "0")).min_free_bytes == 0
    with pytest.raises(ValueError, match=r"--min-free-bytes: expected 0\.\.\d+ bytes, got -1"):
        config_from_args(_parse("--min-free-bytes=-1"))


def test_health_reads_a_nodes_disk_state_and_the_metrics_export_it() -> None:
    disk = FakeDisk(free=3 * MIB + MIB // 2)
    space = _space(disk)
    free, degraded, reason = _disk({"disk": space.status()})
    assert (free, degraded) == (3 * MIB + MIB // 2, True)
    assert "node 2's data dir /x has 3.5 MiB free" in reason
    assert _disk({}) == (-1, False, "")  # a node of an older version
    assert format_bytes(free) == "3.5 MiB"
    assert NodeHealth(2, "a:1", True, 1, "", 0, free, degraded, reason).degraded
    text = NodeMetrics(2, list, disk=space.status).render().decode()
    samples = {
        s.name: (s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples["raftlog_disk_degraded"] == ({"node": "2"}, 1.0)
    assert samples["raftlog_disk_free_bytes"] == ({"node": "2"}, float(free))
    assert samples["raftlog_disk_min_free_bytes"] == ({"node": "2"}, float(64 * MIB))


def test_a_data_dir_not_made_yet_is_unknown_space_not_a_full_disk() -> None:
    """At start the node may ask before its data dir exists: statvfs fails, and free
    space is unknown (writes go on), asked again at once rather than an interval later."""
    disk = FakeDisk(free=10 * 1024 * MIB)
    missing = [True]

    def statvfs(path: pathlib.Path) -> int:
        if missing[0]:
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return disk.statvfs(path)

    space = DiskSpace(
        2, pathlib.Path("/x"), 64 * MIB, check_interval_s=30.0, statvfs=statvfs, clock=disk.clock
    )
    assert not space.degraded
    assert space.entered == 0
    missing[0] = False
    assert space.free_bytes == 10 * 1024 * MIB  # no 30 s wait for the first real sample
    assert not space.degraded
