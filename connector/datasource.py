"""``DefaultSource``: the entry point Spark finds as ``format("raftlog")``.

Spark registers ``DefaultSource`` of every importable ``pyspark_<name>`` module
on its own, so no ``spark.dataSource.register`` call is needed. The methods
here run on the driver (in a Python worker process): they validate the
options, resolve the cluster, create or load the topic, and hand Spark a
picklable reader or writer that carries everything the tasks need.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType
from pyspark_raftlog import worker_loop
from pyspark_raftlog.connection import resolve_cluster
from pyspark_raftlog.errors import OptionError
from pyspark_raftlog.options import parse_sink_options, parse_source_options

__all__ = ["DefaultSource"]


class DefaultSource(DataSource):
    """The raftlog data source: streaming and batch, read and write."""

    @classmethod
    def name(cls) -> str:
        return "raftlog"

    def schema(self) -> StructType:
        """The topics' stored Arrow schema as Spark columns, plus the metadata columns.

        Every topic read must have the same schema: all raw records (Kafka's
        schema), or all the same typed columns. A pattern that matches no topic
        yet reads as raw records.
        """
        from pyspark_raftlog.errors import SchemaMismatchError
        from pyspark_raftlog.source import ReaderBase
        from pyspark_raftlog.spark_schema import read_schema
        from pyspark_raftlog.topics import topic_schema

        # Whether this is spark.read or readStream is not known yet: reader() and
        # streamReader() run the direction-specific checks.
        opts = parse_source_options(self.options, streaming=None)
        servers = resolve_cluster(opts)
        planner = ReaderBase(opts, servers, StructType())
        try:
            client = planner.driver_client()
            found = {t: topic_schema(client, t) for t in planner.read_topics()}
        finally:
            planner.stop()
        if not found:
            return read_schema(opts.topic, None)
        first_topic, first = next(iter(found.items()))
        for topic, schema in found.items():
            same = (schema is None and first is None) or (
                schema is not None and first is not None and schema.equals(first)
            )
            if not same:

                def show(s: object) -> str:
                    return "raw records" if s is None else str(s).replace("\n", ", ")

                raise SchemaMismatchError(
                    f"topics {first_topic!r} and {topic!r} have different schemas "
                    f"({show(first)} vs {show(schema)}); one query reads topics of one schema"
                )
        return read_schema(first_topic, first)

    def reader(self, schema: StructType) -> DataSourceReader:
        from pyspark_raftlog.source import RaftlogBatchReader

        opts = parse_source_options(self.options, streaming=False)
        return RaftlogBatchReader(opts, resolve_cluster(opts), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from pyspark_raftlog.source import RaftlogStreamReader

        opts = parse_source_options(self.options, streaming=True)
        return RaftlogStreamReader(opts, resolve_cluster(opts), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from pyspark_raftlog.sink import RaftlogArrowWriter

        if overwrite:
            raise OptionError(
                "save mode 'overwrite' is not supported: a raftlog topic is an append-only log; "
                "use mode('append')"
            )
        opts = parse_sink_options(self.options, streaming=False)
        return RaftlogArrowWriter(*self._prepare_topic(opts, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from pyspark_raftlog.sink import RaftlogStreamWriter

        if overwrite:
            raise OptionError(
                "output mode 'complete' is not supported: a raftlog topic is an append-only "
                "log; use outputMode('append') or 'update'"
            )
        opts = parse_sink_options(self.options, streaming=True)
        return RaftlogStreamWriter(*self._prepare_topic(opts, schema))

    @staticmethod
    def _prepare_topic(opts, schema: StructType) -> tuple:
        """(opts, servers, topic Arrow schema, partition count, layout, topic id) for a
        writer.

        With option ``topic`` the topic is created (or checked) here, on the
        driver; rows that name their topic in a ``topic`` column have theirs
        created by the tasks on first use.
        """
        import dataclasses

        import pyarrow as pa
        from pyspark_raftlog.options import check_write_columns
        from pyspark_raftlog.spark_schema import arrow_schema_of, check_kafka_columns, raw_types
        from pyspark_raftlog.topics import ensure_topic

        layout = check_write_columns(opts, schema.fieldNames())
        full = arrow_schema_of(schema)
        if layout.raw and not raw_types(full):
            # e.g. a long `value`: typed Arrow data that happens to use Kafka's names
            layout = dataclasses.replace(layout, raw=False)
        check_kafka_columns(full, raw=layout.raw)
        data = pa.schema([full.field(c) for c in layout.data_columns])
        servers = resolve_cluster(opts)
        if opts.topic is None:
            from pyspark_raftlog.raw_records import records_marker_schema

            return opts, servers, records_marker_schema() if layout.raw else data, 0, layout
        # Spark asks for a streaming writer twice per micro-batch, in long-lived workers:
        # their shared client keeps its connections and learned leaders between the calls.
        client = worker_loop.shared_blocking_client(servers, opts.request_timeout_s)
        plan = ensure_topic(client, opts, data, raw=layout.raw)
        return opts, servers, plan.schema, plan.partitions, layout, plan.topic_id
