"""The source's conversion of one stored batch into an output Arrow batch (``_to_output``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from pyspark_raftlog.arrow_payload import encode_payload
from pyspark_raftlog.source import _to_output
from pyspark_raftlog.spark_schema import arrow_schema_of, read_schema

from raftlog.client import CorruptBatchError

USER = pa.schema([("id", pa.int64()), ("name", pa.string())])


@dataclass
class StoredBatch:
    base_offset: int
    record_count: int
    timestamp_ms: int
    payload: bytes


def stored(base: int, ids: list[int], timestamp_ms: int = 1_700_000_000_123) -> StoredBatch:
    data = pa.RecordBatch.from_arrays(
        [pa.array(ids, pa.int64()), pa.array([f"n{i}" for i in ids])], schema=USER
    )
    return StoredBatch(base, len(ids), timestamp_ms, encode_payload(data))


def out_schema() -> pa.Schema:
    return arrow_schema_of(read_schema("t", USER))


@pytest.mark.parametrize(
    ("start", "end", "first", "rows"),
    [(100, 200, 100, 5), (102, 200, 102, 3), (100, 103, 100, 3), (101, 104, 101, 3)],
)
def test_slice_and_metadata_columns(start: int, end: int, first: int, rows: int) -> None:
    batch = stored(100, [10, 11, 12, 13, 14])
    out = _to_output("t", 7, batch, start, end, USER, out_schema())
    assert out.schema.equals(out_schema())
    assert out.num_rows == rows
    cols = out.to_pydict()
    assert cols["id"] == list(range(10 + first - 100, 10 + first - 100 + rows))
    assert cols["__raftlog_partition"] == [7] * rows
    assert cols["__raftlog_offset"] == list(range(first, first + rows))
    stamp = datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
    assert cols["__raftlog_timestamp"] == [stamp] * rows
    assert out.column(out.num_columns - 3).null_count == 0


def test_a_typed_timestamp_column_is_the_rows_timestamp() -> None:
    schema = pa.schema([("id", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC"))])
    own = datetime(2024, 5, 1, 8, 0, 0, 250000, tzinfo=UTC)
    data = pa.RecordBatch.from_arrays(
        [pa.array([1, 2, 3], pa.int64()), pa.array([own, None, own], schema.field(1).type)],
        schema=schema,
    )
    batch = StoredBatch(50, 3, 1_700_000_000_123, encode_payload(data))
    out_s = arrow_schema_of(read_schema("t", schema))
    cols = _to_output("t", 0, batch, 51, 53, schema, out_s).to_pydict()
    appended = datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
    # a null timestamp falls back to the batch's append time
    assert cols["__raftlog_timestamp"] == [appended, own]
    assert cols["timestamp"] == [None, own]


def test_record_count_mismatch_is_an_error() -> None:
    batch = stored(0, [1, 2, 3])
    batch.record_count = 4
    # a corrupt batch: named, and the query fails (as Kafka's source on corrupt data)
    with pytest.raises(
        CorruptBatchError, match=r"offsets 0\.\.3 .* holds 3 rows, the batch claims 4"
    ):
        _to_output("t", 0, batch, 0, 10, USER, out_schema())


def test_conversion_does_not_import_pandas() -> None:
    # pa.array()/pa.scalar() import pandas on first use; a fresh Spark worker would pay
    # for that (0.2-0.8 s) in the first read of every query.
    code = textwrap.dedent(
        """
        import sys
        import pyarrow as pa
        from pyspark_raftlog.arrow_payload import encode_payload
        from pyspark_raftlog.source import _to_output
        from pyspark_raftlog.spark_schema import arrow_schema_of, read_schema

        assert "pandas" not in sys.modules, "imported before the conversion"
        user = pa.schema([("id", pa.int64())])
        data = pa.RecordBatch.from_arrays(
            [pa.Array.from_buffers(pa.int64(), 1, [None, pa.py_buffer(b"\\x05" + bytes(7))])],
            schema=user,
        )

        class B:
            base_offset, record_count, timestamp_ms = 3, 1, 5
            payload = encode_payload(data)

        out = _to_output("t", 0, B, 0, 10, user, arrow_schema_of(read_schema("t", user)))
        assert out.num_rows == 1
        print("pandas" in sys.modules)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
