"""pyspark_raftlog: the Spark data source for raftlog (installed from the folder ``connector/``).

Spark registers ``DefaultSource`` from a module named ``pyspark_<name>``
automatically, so ``format("raftlog")`` needs no ``spark.dataSource.register``::

    (df.writeStream.format("raftlog").option("topic", "events")
       .option("checkpointLocation", ck).start())          # exactly-once
    spark.readStream.format("raftlog").option("topic", "events").load()

Modules: :mod:`.options` (validation), :mod:`.offsets` and :mod:`.admission`
(source offsets and per-trigger limits), :mod:`.arrow_payload` (Arrow IPC
payloads), :mod:`.txn_writer` (the exactly-once task protocol), :mod:`.sink`,
:mod:`.source`, :mod:`.session` (a SparkSession from ``spark_conf/``).
"""

from pyspark_raftlog.datasource import DefaultSource

__all__ = ["DefaultSource"]
