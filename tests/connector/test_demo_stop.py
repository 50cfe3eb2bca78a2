"""The demo stops its query between micro-batches when it can, and says which it did
(``stream_until``'s second value): a fake query with Spark's progress fields."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from pyspark_raftlog import demo


class _Query:
    def __init__(self, trigger_active: bool) -> None:
        now_ms = int(time.time() * 1000)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now_ms / 1000))
        self.recentProgress = [
            {"batchId": 0, "numInputRows": 5, "durationMs": {"triggerExecution": 10},
             "timestamp": f"{stamp}.000Z"},
        ]  # fmt: skip
        self.lastProgress = self.recentProgress[-1]
        self.status = {"isTriggerActive": trigger_active}
        self.isActive = True
        self.stops = 0

    def stop(self) -> None:
        self.stops += 1
        self.isActive = False


def _spark() -> Any:
    levels: list[tuple[str, Any]] = []
    configurator = SimpleNamespace(setLevel=lambda name, level: levels.append((name, level)))
    log4j = SimpleNamespace(core=SimpleNamespace(config=SimpleNamespace(Configurator=configurator)))
    log4j.Level = SimpleNamespace(ERROR="ERROR")
    jvm = SimpleNamespace(
        org=SimpleNamespace(apache=SimpleNamespace(logging=SimpleNamespace(log4j=log4j)))
    )
    return SimpleNamespace(sparkContext=SimpleNamespace(_jvm=jvm), levels=levels)


def test_an_idle_query_is_stopped_between_micro_batches(monkeypatch) -> None:
    spark, query = _spark(), _Query(trigger_active=False)
    progress, between = demo.stream_until(spark, query, 0.01, interval_ms=60_000)
    assert between and query.stops == 1 and [p["batchId"] for p in progress] == [0]
    assert spark.levels == [(demo.QUIET_ON_STOP, "ERROR")]


def test_a_query_never_idle_is_stopped_in_the_middle_and_says_so(monkeypatch) -> None:
    monkeypatch.setattr(demo, "MAX_STOP_WAIT_S", 0.2)
    spark, query = _spark(), _Query(trigger_active=True)
    progress, between = demo.stream_until(spark, query, 0.01, interval_ms=60_000)
    assert not between and query.stops == 1 and len(progress) == 1
    assert spark.levels == []  # Spark's logs of the aborted write are not hidden
