"""The ``spark`` scenario's pieces that need no Spark session: figures from progress, the
counting sink (the Python ceiling) and the worker PYTHONPATH. The scenario itself runs
end to end in ``test_bench_quick_all.py``."""

from __future__ import annotations

import os
import pickle
from types import SimpleNamespace

import _bench_repo_path  # noqa: F401  (puts the repo root on sys.path)
import pyarrow as pa
import pytest

from benchmarks.registry import load_all
from benchmarks.scenarios import spark
from benchmarks.workloads import spark_count_sink, spark_replay_source


def _progress(batch_id: int, rows: int, millis: int) -> SimpleNamespace:
    return SimpleNamespace(
        batchId=batch_id, numInputRows=rows, durationMs={"triggerExecution": millis}
    )


def test_batch_figures_leave_out_the_first_write_batch_in_batch_id_order() -> None:
    progress = [_progress(2, 300, 1000), _progress(0, 100, 9000), _progress(1, 200, 1000)]
    assert spark.batch_figures(progress, skip_first=True) == (500, 2, pytest.approx(250.0))
    assert spark.batch_figures(progress, skip_first=False) == (600, 3, pytest.approx(600 / 11))


def test_batch_figures_keep_a_lone_batch_and_survive_no_progress() -> None:
    assert spark.batch_figures([_progress(0, 100, 500)], skip_first=True) == (
        100,
        1,
        pytest.approx(200.0),
    )
    assert spark.batch_figures([], skip_first=True) == (0, 0, 0.0)
    assert spark.batch_figures([_progress(0, 100, 0)], skip_first=False) == (100, 1, 0.0)


def test_pooled_figures_leave_out_each_querys_first_batch() -> None:
    first = [_progress(0, 100, 9000), _progress(1, 100, 1000), _progress(2, 100, 1000)]
    second = [_progress(0, 100, 7000), _progress(1, 100, 2000)]
    rows, batches, rate, batch_ms = spark.pooled_figures([first, second])
    assert (rows, batches) == (300, 3)
    assert rate == pytest.approx(300 / 4.0) and batch_ms == pytest.approx(4000 / 3)
    assert spark.pooled_figures([]) == (0, 0, 0.0, 0.0)
    assert spark.committed_rows(first) == 300


def test_check_once_accepts_every_committed_row_once() -> None:
    n = 3_000
    assert spark.check_once(n, 0, n - 1, n * (n - 1) // 2, n, 1_000) is None
    # the micro-batch stopped in flight may have committed without being reported
    assert spark.check_once(n, 0, n - 1, n * (n - 1) // 2, n - 1_000, 1_000) is None
    assert spark.check_once(0, None, None, None, 0, 1_000) is None


@pytest.mark.parametrize(
    ("count", "low", "high", "total", "reported", "why"),
    [
        (2_000, 0, 1_999, 1_999_000, 3_000, "read back 2000 rows"),  # a batch lost
        (4_000, 0, 3_999, 7_998_000, 2_000, "read back 4000 rows"),  # a batch twice
        (3_000, 0, 3_999, 3_998_000, 3_000, "not 0..2999 each once"),  # a gap
        (3_000, 0, 2_999, 4_498_000, 3_000, "not 0..2999 each once"),  # duplicates
    ],
)
def test_check_once_names_lost_and_duplicated_rows(
    count: int, low: int, high: int, total: int, reported: int, why: str
) -> None:
    problem = spark.check_once(count, low, high, total, reported, 1_000)
    assert problem is not None and why in problem


def test_raftlog_sinks_differ_only_in_delivery_guarantee_and_topic() -> None:
    servers = ["127.0.0.1:1", "127.0.0.1:2"]
    alo = spark.raftlog_options(servers, spark.topic_of(spark.AT_LEAST_ONCE, 1), "at-least-once")
    eo = spark.raftlog_options(servers, spark.topic_of(spark.EXACTLY_ONCE, 1), "exactly-once")
    assert alo.pop("deliveryGuarantee") == "at-least-once"
    assert eo.pop("deliveryGuarantee") == "exactly-once"
    assert alo.pop("topic") != eo.pop("topic")
    assert alo == eo and eo["acks"] == "all" and eo["replicationFactor"] == "3"
    assert spark.topic_of(spark.EXACTLY_ONCE, 1) != spark.topic_of(spark.EXACTLY_ONCE, 2)
    assert spark.FULL_ROWS_PER_BATCH == 1_000_000
    # the raftlog sinks run next to each other in every round
    assert spark.SINKS[3:] == (
        spark.AT_LEAST_ONCE,
        spark.EXACTLY_ONCE,
        spark.EXACTLY_ONCE_LZ4,
        spark.EXACTLY_ONCE_ZSTD,
        spark.CEILING_KV,
        spark.EXACTLY_ONCE_KV,
    )
    # a Kafka user's DataFrame: Kafka's columns only, so raftlog writes raw records
    assert [c.rsplit(" AS ", 1)[1] for c in spark.KEY_VALUE_COLUMNS] == ["key", "value"]
    assert {spark.CEILING_KV, spark.EXACTLY_ONCE_KV} == spark.KEY_VALUE
    # every sink's checkpoint is one directory of its own (a "/" in a name would nest)
    slugs = [spark.slug(name) for name in spark.SINKS]
    assert len(set(slugs)) == len(slugs) and all(s.replace("-", "").isalnum() for s in slugs)


def test_compressed_sinks_are_exactly_once_with_a_codec_and_topics_of_their_own() -> None:
    servers = ["127.0.0.1:1"]
    topics = {spark.topic_of(name, 1) for name in spark.GUARANTEES}
    assert len(topics) == 5
    for name, codec in (("raftlog exactly-once lz4", "lz4"), ("raftlog exactly-once zstd", "zstd")):
        opts = spark.raftlog_options(
            servers, spark.topic_of(name, 1), spark.GUARANTEES[name], spark.COMPRESSION.get(name)
        )
        assert opts["compression"] == codec and opts["deliveryGuarantee"] == "exactly-once"
    plain = spark.raftlog_options(servers, "t", "exactly-once")
    assert "compression" not in plain  # uncompressed: the topic's default (none)


def test_stored_bytes_sums_every_replica_of_the_topics(monkeypatch) -> None:
    def metrics(node: int, topic: str, size: int, start: int, end: int) -> str:
        labels = f'node="{node}",partition="0",topic="{topic}"'
        return (
            f"raftlog_partition_size_bytes{{{labels}}} {size}\n"
            f"raftlog_partition_log_start_offset{{{labels}}} {start}\n"
            f"raftlog_partition_log_end_offset{{{labels}}} {end}\n"
        )

    pages = {
        "a:1": metrics(1, "t1", 6000, 0, 100) + metrics(1, "other", 10**9, 0, 1),
        "b:2": metrics(2, "t1", 6000, 0, 100) + metrics(2, "t2", 1000, 50, 100),
        "c:3": "",  # a node that does not answer
    }
    monkeypatch.setattr(spark.raftlog_local, "scrape", lambda address: pages[address])
    assert spark.stored_bytes(list(pages), ["t1", "t2"]) == (13000, 250)
    assert spark.stored_bytes(list(pages), ["missing"]) == (0, 0)


def test_counting_writer_counts_every_row_of_every_batch() -> None:
    writer = spark_count_sink.CountingDataSource(options={}).streamWriter(None, False)
    assert isinstance(writer, spark_count_sink.CountingStreamWriter)
    batches = [pa.record_batch({"v": list(range(n))}) for n in (3, 0, 10_000)]
    message = writer.write(iter(batches))
    assert (message.rows, message.batches) == (10_003, 3)
    assert writer.commit([message], 0) is None and writer.abort([message], 1) is None
    # Spark ships the writer and its messages between processes by pickle.
    assert pickle.loads(pickle.dumps(message)) == message
    assert isinstance(pickle.loads(pickle.dumps(writer)), spark_count_sink.CountingStreamWriter)
    assert spark_count_sink.CountingDataSource.name() == spark_count_sink.NAME


def test_replay_source_hands_each_task_its_rows_in_batches_of_the_schema() -> None:
    from pyspark.sql.types import (
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    schema = StructType(
        [
            StructField("value", LongType()),
            StructField("payload", StringType()),
            StructField("__raftlog_topic", StringType(), nullable=False),
            StructField("__raftlog_partition", IntegerType(), nullable=False),
            StructField("__raftlog_timestamp", TimestampType(), nullable=False),
        ]
    )
    options = {"rows": "10003", "batchrows": "4000", "partitions": "2", "topic": "t-1"}
    source = spark_replay_source.ReplayDataSource(options=options)
    reader = source.streamReader(schema)
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    parts = reader.partitions(start, end)
    assert [(p.start, p.end) for p in parts] == [(0, 5002), (5002, 10003)]
    # Spark ships the partitions to its Python workers by pickle.
    parts = [pickle.loads(pickle.dumps(p)) for p in parts]
    batches = [list(reader.read(p)) for p in parts]
    assert [[b.num_rows for b in task] for task in batches] == [[4000, 1002], [4000, 1001]]
    first = batches[0][0]
    assert first.schema.names == schema.fieldNames()
    assert first.column("value").to_pylist()[:3] == [0, 1, 2]
    assert {len(v) for v in first.column("payload").to_pylist()} == {100}
    assert len(set(first.column("payload").to_pylist())) == 4000
    assert set(first.column("__raftlog_topic").to_pylist()) == {"t-1"}
    with pytest.raises(ValueError, match="schema"):
        source.schema()
    with pytest.raises(ValueError, match="batchRows"):
        spark_replay_source.ReplayDataSource(options={**options, "batchrows": "0"}).streamReader(
            schema
        )


def test_stored_batch_rows_is_the_median_data_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeClient:
        def __init__(self, servers: list[str]) -> None:
            self.closed = False

        def list_offsets(self, topic: str, partition: int) -> tuple[int, int, int]:
            return (2, 100, 100)

        def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> object:
            assert offset == 2
            counts = [1, 35_000, 34_000, 36_000, 1, 500]
            return SimpleNamespace(batches=[SimpleNamespace(record_count=c) for c in counts])

        def close(self) -> None:
            self.closed = True

    monkeypatch.setattr(spark.raftlog_local, "blocking_client_class", lambda: FakeClient)
    assert spark.stored_batch_rows(["a:1"], "t") == 35_000

    class EmptyClient(FakeClient):
        def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> object:
            return SimpleNamespace(batches=[SimpleNamespace(record_count=1)])

    monkeypatch.setattr(spark.raftlog_local, "blocking_client_class", lambda: EmptyClient)
    with pytest.raises(RuntimeError, match="no data batch"):
        spark.stored_batch_rows(["a:1"], "t")


def test_worker_pythonpath_puts_the_repo_root_first_once() -> None:
    root = str(spark_count_sink.REPO_ROOT)
    assert (spark_count_sink.REPO_ROOT / "benchmarks" / "__init__.py").is_file()
    assert spark_count_sink.worker_pythonpath({}) == root
    joined = spark_count_sink.worker_pythonpath({"PYTHONPATH": "/a" + os.pathsep + "/b"})
    assert joined.split(os.pathsep) == [root, "/a", "/b"]
    assert spark_count_sink.worker_pythonpath({"PYTHONPATH": joined}) == joined


def test_spark_is_registered_with_its_flags() -> None:
    registry = load_all()
    assert "spark" in registry.names()
    from benchmarks.cli import build_parser

    args = build_parser(registry).parse_args(
        ["spark", "--spark-seconds", "1.5", "--spark-rows-per-batch", "500", "--spark-rounds", "3"]
    )
    assert (args.spark_seconds, args.spark_rows_per_batch, args.spark_rounds) == (1.5, 500, 3)


@pytest.mark.parametrize(
    "argv",
    [
        ["--spark-seconds", "0"],
        ["--spark-seconds", "nan"],
        ["--spark-rows-per-batch", "-5"],
        ["--spark-rounds", "0"],
    ],
)
def test_spark_flags_must_be_positive(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    from benchmarks.cli import build_parser

    with pytest.raises(SystemExit) as exit_info:
        build_parser(load_all()).parse_args(["spark", *argv])
    assert exit_info.value.code == 2
    assert "expected a positive number" in capsys.readouterr().err


def test_spark_cases_selects_what_runs(capsys: pytest.CaptureFixture) -> None:
    from benchmarks.cli import build_parser
    from benchmarks.scenarios import spark

    parser = build_parser(load_all())
    assert parser.parse_args(["spark"]).spark_cases == "all"
    assert parser.parse_args(["spark", "--spark-cases", "read"]).spark_cases == "read"
    # the reads read the round-1 parquet output and exactly-once topic: those sinks run
    assert set(spark.READ_SINKS) == {"parquet", spark.EXACTLY_ONCE}
    assert set(spark.READ_SINKS) <= set(spark.SINKS)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["spark", "--spark-cases", "reads"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--spark-cases" in err and "'all', 'write', 'read'" in err


def test_the_tails_batches_count_each_micro_batch_once_across_polls() -> None:
    # Spark's recentProgress keeps the last 100 batches: a batch seen by two polls counts
    # once, a batch that has left the list still counts, and empty batches (an idle
    # streaming query reports them) are not busy
    query = SimpleNamespace(recentProgress=[_progress(0, 100, 10), _progress(1, 0, 5)])
    batches = spark._Batches(query)
    batches.poll()
    query.recentProgress = [_progress(1, 0, 5), _progress(2, 300, 20)]
    batches.poll()
    query.recentProgress = [_progress(3, 50, 7)]
    batches.poll()
    assert batches.rows() == 450
    assert sorted(int(p.batchId) for p in batches.busy()) == [0, 2, 3]
