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
from benchmarks.workloads import spark_count_sink


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
        ["spark", "--spark-seconds", "1.5", "--spark-rows-per-batch", "500"]
    )
    assert (args.spark_seconds, args.spark_rows_per_batch) == (1.5, 500)


@pytest.mark.parametrize(
    "argv", [["--spark-seconds", "0"], ["--spark-seconds", "nan"], ["--spark-rows-per-batch", "-5"]]
)
def test_spark_flags_must_be_positive(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    from benchmarks.cli import build_parser

    with pytest.raises(SystemExit) as exit_info:
        build_parser(load_all()).parse_args(["spark", *argv])
    assert exit_info.value.code == 2
    assert "expected a positive number" in capsys.readouterr().err
