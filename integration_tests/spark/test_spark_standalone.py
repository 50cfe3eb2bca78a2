"""The sink on a Spark standalone cluster (issue 6, "beyond one machine"): a master and
two workers on loopback, so that tasks run in executor JVMs apart from the driver and
reach the shared raftlog cluster through ``servers``. The driver runs in a subprocess
(one SparkContext per JVM: the shared local session lives in this one)."""

from __future__ import annotations

import json

from spark_drivers import run_driver
from stream_checks import assert_exactly_once, committed_batches, unique_topic


def test_sink_on_standalone_cluster_lands_exactly_once(spark_standalone, servers, tmp_path) -> None:
    topic = unique_topic("standalone")
    checkpoint = tmp_path / "ck"
    out = tmp_path / "result.json"
    done = run_driver(
        "standalone_sink.py",
        *(spark_standalone.url, servers, topic, str(checkpoint), str(out)),
        cwd=tmp_path,
        timeout_s=240,
    )
    assert done.returncode == 0, f"{done.stderr[-4000:]}\n{spark_standalone.logs()}"
    result = json.loads(out.read_text())
    assert len(result["executors"]) == 2, result["executors"]  # two executor JVMs did the work
    committed = committed_batches(checkpoint)
    assert committed == result["committed"] >= 4
    assert_exactly_once(result["values"], committed)
