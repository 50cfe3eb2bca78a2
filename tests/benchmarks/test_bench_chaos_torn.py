"""The chaos ``torn`` nemesis waits for its victim's replica of the round's topic.

A round's topic has leaders as soon as two replicas serve; a victim that the
previous round restarted creates its replica only when it catches up with the
controller. Killing it before that left no log to tear, and the whole chaos run
failed with "log_dir must be an existing log directory" (seen in a 6-minute run,
round 55, after a crash round had restarted the same node).
"""

from __future__ import annotations

import asyncio
import pathlib
import random
import signal

import _bench_repo_path  # noqa: F401  (puts the repo root on sys.path)
import pytest

from benchmarks.workloads import chaos_nemeses
from benchmarks.workloads.chaos_nemeses import RoundPlan
from raftlog.faults.crash import CutResult, has_segment
from raftlog.storage.segment import segment_name


class FakeCluster:
    def __init__(self, data_dir: pathlib.Path) -> None:
        self.data_dir = data_dir
        self.events: list[str] = []

    def kill(self, node: int, sig: int) -> None:
        assert sig == signal.SIGKILL
        self.events.append(f"kill {node}")

    def restart(self, node: int) -> None:
        self.events.append(f"restart {node}")


class FakeWorkload:
    topic = "chaos-1-torn"

    def release(self, per_producer: int) -> None:
        pass

    async def wait_acked(self, count: int) -> None:
        pass


def _victim_dir(data_dir: pathlib.Path, seed: int) -> pathlib.Path:
    """The log dir the nemesis picks with ``random.Random(seed)``."""
    rng = random.Random(seed)
    victim = rng.choice(chaos_nemeses.NODES)
    partition = rng.randrange(chaos_nemeses.PARTITIONS)
    return data_dir / f"node-{victim}" / "partitions" / FakeWorkload.topic / str(partition)


def test_torn_waits_for_the_victims_log_then_kills_and_tears_it(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = FakeCluster(tmp_path)
    log_dir = _victim_dir(tmp_path, 3)

    def tear(path: pathlib.Path, nbytes: int) -> CutResult:
        assert pathlib.Path(path) == log_dir and has_segment(log_dir)
        cluster.events.append("tear")
        return CutResult(last_offset=41, bytes_dropped=nbytes)

    monkeypatch.setattr(chaos_nemeses, "tear_tail", tear)

    async def scenario() -> str:
        async def create_later() -> None:
            await asyncio.sleep(0.3)
            log_dir.mkdir(parents=True)  # a replica's directory comes before its segment
            await asyncio.sleep(0.3)
            cluster.events.append("created")
            (log_dir / segment_name(0, 1)).write_bytes(b"")

        creating = asyncio.ensure_future(create_later())
        detail = await chaos_nemeses._torn(
            cluster, FakeWorkload(), random.Random(3), RoundPlan(batches=10, chase=1)
        )
        await creating
        return detail

    detail = asyncio.run(scenario())
    victim = int(log_dir.parents[2].name.removeprefix("node-"))
    assert cluster.events == ["created", f"kill {victim}", "tear", f"restart {victim}"]
    assert "(last whole batch 41)" in detail


def test_torn_names_a_victim_that_never_creates_its_replica(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chaos_nemeses, "_TORN_WAIT_STEPS", 3)
    cluster = FakeCluster(tmp_path)
    with pytest.raises(RuntimeError, match=r"has no log of chaos-1-torn/\d 0.3 s into the round"):
        asyncio.run(
            chaos_nemeses._torn(
                cluster, FakeWorkload(), random.Random(3), RoundPlan(batches=10, chase=1)
            )
        )
    assert cluster.events == []  # nothing killed
