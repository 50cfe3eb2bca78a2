"""``python -m benchmarks --quick`` as CI runs it: every scenario, once, from the repo root.

The run happens once per test session, beside the other tests (conftest.py starts
it with the session and moves these tests to its end); the tests check that it
completes and writes its files -- every registered scenario present, ok or
skipped with a reason, results.md and a PNG per scenario that ran -- not that any
figure is reached, except where a figure is a correctness check (the chaos
checker's anomalies, the Spark sink's rows read back once). A scenario needing a
tool that is not installed (``peers`` without etcd) skips itself.
"""

from __future__ import annotations

import json
import math
import numbers
from pathlib import Path
from typing import Any

import _bench_repo_path  # noqa: F401  (puts the repo root on sys.path)
import pytest
from _quick_run import QUICK_RUN_TIMEOUT_S, STOP_GRACE_S, QuickRun

from benchmarks.registry import load_all

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NEMESES = {"crash", "drop", "kill", "partition", "sigstop", "torn"}
FATAL = ("lost", "duplicated", "inconsistent", "failed_visible", "order")

pytestmark = pytest.mark.timeout(QUICK_RUN_TIMEOUT_S + STOP_GRACE_S + 60)


@pytest.fixture(scope="module")
def quick_run(quick_run_in_background: QuickRun) -> dict[str, Any]:
    """The run started at the session's start (conftest.py), once it has finished."""
    return {"proc": quick_run_in_background.finished(), "out": quick_run_in_background.out}


def _scenarios(quick_run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    doc = json.loads((quick_run["out"] / "results.json").read_text())
    return {s["name"]: s for s in doc["scenarios"]}


def test_quick_run_exits_0_and_prints_the_table(quick_run: dict[str, Any]) -> None:
    proc = quick_run["proc"]
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-8000:]
    assert "raftlog benchmarks" in proc.stdout
    assert f"results written to {quick_run['out']}" in " ".join(proc.stdout.split())


def test_every_registered_scenario_is_ok_or_skipped_with_a_reason(
    quick_run: dict[str, Any],
) -> None:
    by_name = _scenarios(quick_run)
    assert list(by_name) == load_all().names()
    for name, entry in by_name.items():
        assert entry["status"] in ("ok", "skipped"), (name, entry["reason"], entry["notes"])
        assert entry["seconds"] >= 0
        if entry["status"] == "skipped":
            assert entry["reason"].strip(), name
            assert entry["rows"] == []
            continue
        assert entry["rows"], name
        for row in entry["rows"]:
            figures = [v for v in row.values() if not isinstance(v, str)]
            assert figures, (name, row)
            assert all(isinstance(v, numbers.Real) and math.isfinite(v) for v in figures), row


def test_results_json_header_names_the_machine_and_versions(quick_run: dict[str, Any]) -> None:
    doc = json.loads((quick_run["out"] / "results.json").read_text())
    assert doc["quick"] is True
    assert doc["machine"]["cores"] >= 1
    assert doc["machine"]["disk_filesystem"]
    assert set(doc["versions"]) >= {"python", "raftlog", "pyspark", "pyarrow", "aiohttp"}


def test_disk_always_measures_and_derives_the_r3_ceiling(quick_run: dict[str, Any]) -> None:
    disk = _scenarios(quick_run)["disk"]
    assert disk["status"] == "ok", disk
    cases = {row["case"]: row for row in disk["rows"]}
    assert set(cases) == {
        "sequential write, fsync every 1 MiB",
        "sequential write, fsync every 16 MiB",
        "4 KiB append + fsync",
    }
    for row in cases.values():
        assert row["MB/s"] > 0 and row["fsyncs/s"] > 0
    one_mib = cases["sequential write, fsync every 1 MiB"]
    assert one_mib["R=3 ceiling MB/s"] == pytest.approx(one_mib["MB/s"] / 3)


def test_chaos_runs_every_nemesis_once_and_the_checker_finds_no_anomaly(
    quick_run: dict[str, Any],
) -> None:
    """``chaos --quick``: every nemesis once against idempotent producers; every value
    written is read back exactly once."""
    proc = quick_run["proc"]
    chaos = _scenarios(quick_run)["chaos"]
    assert chaos["status"] == "ok", chaos
    rows = {row["nemesis"]: row for row in chaos["rows"]}
    assert set(rows) == NEMESES | {"all"}, rows
    for name, row in rows.items():
        for kind in FATAL:
            assert row[kind] == 0, (name, kind, row, proc.stdout[-5000:])
        assert row["incomplete rounds"] == 0, (name, row, proc.stdout[-5000:])
        assert row["operations"] > 0 and row["produce_ok"] > 0, row
        assert row["values_in_final_reads"] == row["values expected"], row
    assert rows["all"]["rounds"] == len(NEMESES)
    assert proc.stdout.count("checker: OK") == len(NEMESES), proc.stdout[-5000:]
    assert not (quick_run["out"] / "chaos-histories").exists()


def test_idle_times_cluster_health_and_topic_describe_as_a_user_runs_them(
    quick_run: dict[str, Any],
) -> None:
    idle = _scenarios(quick_run)["idle"]
    assert idle["status"] == "ok", idle
    rows = {row["partitions"]: row for row in idle["rows"]}
    assert list(rows) == ["0", "30"], rows
    assert not any("not healthy" in note for note in idle.get("notes", [])), idle
    for row in rows.values():
        # a fresh interpreter each: start-up alone is a good fraction of a second
        assert 0.1 < row["s for cluster health"] < 120, row
    assert "s for topic describe" not in rows["0"]  # no topic to describe yet
    assert 0.1 < rows["30"]["s for topic describe"] < 120, rows["30"]


def test_kafka_reads_back_every_record_with_and_without_the_clients_fetch_backoff(
    quick_run: dict[str, Any],
) -> None:
    kafka = _scenarios(quick_run)["kafka"]
    assert kafka["status"] == "ok", kafka  # confluent-kafka is a test extra: installed here
    rows = {row["path"]: row for row in kafka["rows"]}
    produced = rows["Kafka (confluent-kafka)"]
    assert produced["produce records/s"] > 0 and produced["errors"] == 0, produced
    # both consumers read every record produced (the scenario notes a short read)
    assert not any("read back" in note for note in kafka.get("notes", [])), kafka["notes"]
    assert produced["consume records/s"] > 0
    assert rows["Kafka (confluent-kafka), fetch.queue.backoff.ms 0"]["consume records/s"] > 0
    native = rows["native client"]
    assert rows["Kafka / native"]["consume records/s"] == pytest.approx(
        produced["consume records/s"] / native["consume records/s"]
    )


def test_spark_compares_every_sink_and_both_reads(quick_run: dict[str, Any]) -> None:
    spark = _scenarios(quick_run)["spark"]
    if spark["status"] == "skipped":  # no Java here: the reason says how to get it
        assert "Java" in spark["reason"] or "not built yet" in spark["reason"], spark
        return
    rows = {row["case"]: row for row in spark["rows"]}
    sinks = (
        "noop",
        "python ceiling",
        "parquet",
        "raftlog at-least-once",
        "raftlog exactly-once",
        "raftlog exactly-once lz4",
        "raftlog exactly-once zstd",
        "python ceiling key/value",
        "raftlog exactly-once key/value",
    )
    assert list(rows) == [f"write: rate-micro-batch -> {s}" for s in sinks] + [
        "read (AvailableNow): raftlog -> noop",
        "read (AvailableNow): python ceiling -> noop",
        "read (AvailableNow): parquet -> noop",
        "tail: raftlog exactly-once -> raftlog source -> noop",
    ]
    for row in rows.values():
        assert row["rows/s"] > 0 and row["micro-batches"] >= 1
    # the tail: a streaming read of the topic the sink writes read rows while it wrote,
    # then every committed row (the scenario notes it otherwise, and leaves this out)
    tail = rows["tail: raftlog exactly-once -> raftlog source -> noop"]
    assert tail["rows read in the window"] > 0 and tail["rows written in the window"] > 0
    assert tail["reader / writer"] == pytest.approx(tail["rows/s"] / tail["writer rows/s"])
    assert 0 <= tail["s to catch up"] < 120, tail
    # the local cluster's nodes, read from /proc by PID: some CPU beside every sink (their
    # timers). Not compared across sinks here: at --quick's 10,000-row micro-batches the
    # raftlog sink's writes cost the nodes about what their timers do over the window
    # (at-least-once 20.0 against noop's 20.25 CPU-s per 1M rows in one fresh-clone CI
    # run); the full run's figures compare them.
    for sink in sinks:
        assert rows[f"write: rate-micro-batch -> {sink}"]["node CPU-s per 1M rows"] > 0
    ceiling = rows["write: rate-micro-batch -> python ceiling"]["rows/s"]
    parquet = rows["write: rate-micro-batch -> parquet"]["rows/s"]
    for sink in ("raftlog at-least-once", "raftlog exactly-once"):
        write = rows[f"write: rate-micro-batch -> {sink}"]
        assert write["raftlog / python ceiling"] == pytest.approx(write["rows/s"] / ceiling)
        assert write["raftlog / parquet"] == pytest.approx(write["rows/s"] / parquet)
    at_least_once = rows["write: rate-micro-batch -> raftlog at-least-once"]
    exactly_once = rows["write: rate-micro-batch -> raftlog exactly-once"]
    assert exactly_once["exactly-once / at-least-once"] == pytest.approx(
        exactly_once["rows/s"] / at_least_once["rows/s"]
    )
    # the scenario fails unless every committed row was read back once
    assert exactly_once["rows read back once"] > 0
    # a Kafka user's (key, value) rows: raw records, against the ceiling fed the same
    key_value = rows["write: rate-micro-batch -> raftlog exactly-once key/value"]
    assert key_value["rows read back once"] > 0 and key_value["stored bytes per row"] > 0
    assert key_value["raftlog / python ceiling"] == pytest.approx(
        key_value["rows/s"] / rows["write: rate-micro-batch -> python ceiling key/value"]["rows/s"]
    )
    plain_bytes = exactly_once["stored bytes per row"]
    assert at_least_once["stored bytes per row"] > 0 and plain_bytes > 0
    for codec in ("lz4", "zstd"):
        compressed = rows[f"write: rate-micro-batch -> raftlog exactly-once {codec}"]
        assert compressed["rows read back once"] > 0
        assert 0 < compressed["stored bytes per row"] < plain_bytes
    read = rows["read (AvailableNow): raftlog -> noop"]
    assert read["rows"] > 0 and rows["read (AvailableNow): parquet -> noop"]["rows"] > 0
    assert read["raftlog / parquet"] == pytest.approx(
        read["rows/s"] / rows["read (AvailableNow): parquet -> noop"]["rows/s"]
    )
    # the Python read ceiling replays exactly the rows the raftlog read returned
    replay = rows["read (AvailableNow): python ceiling -> noop"]
    assert replay["rows"] == read["rows"]
    assert read["raftlog / python ceiling"] == pytest.approx(read["rows/s"] / replay["rows/s"])


def test_markdown_and_a_png_per_scenario_that_ran(quick_run: dict[str, Any]) -> None:
    out: Path = quick_run["out"]
    by_name = _scenarios(quick_run)
    markdown = (out / "results.md").read_text()
    assert "## Machine" in markdown
    assert "| sequential write, fsync every 1 MiB |" in markdown
    doc = json.loads((out / "results.json").read_text())
    declared = load_all().goals()
    for name, entry in by_name.items():
        assert f"## {name}" in markdown, name
        if entry["status"] != "ok":
            continue
        # A scenario's picture: its own plot (series, or bars of its measures), or a
        # figure per goal it measured; a plot of counts only is not drawn.
        plot = doc["scenarios"][list(by_name).index(name)]["plot"]
        goal_pngs = [out / f"goal-{g.key}.png" for s, g in declared if s == name]
        drawn = [p for p in goal_pngs if p.exists()]
        if plot is not None:
            assert plot == f"{name}.png"
            drawn.append(out / plot)
        assert drawn or name == "chaos", name
        for png in drawn:
            assert png.read_bytes()[:8] == PNG_MAGIC, png
    assert (out / "summary.png").read_bytes()[:8] == PNG_MAGIC
    assert "| what | peer | ours | ratio | met |" in (out / "goals.md").read_text()
    assert "## Goals" in markdown
    # Scratch dirs (clusters, parquet output, checkpoints) are removed afterwards.
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []
