"""The connector against a cluster on several hosts with TLS and auth (issue 17, item 7).

The cluster is :mod:`secure_cluster`'s: three nodes on 127.0.0.2-4, HTTPS with a
``trustme`` CA, a client token and a separate peer token. Spark reaches it with
the options ``servers``, ``authToken`` and ``tlsCaFile`` only: a batch write, a
streaming write, a batch read and a streaming read land every row once; without
the token the read fails naming it.

Spark confs ``spark.raftlog.*`` are not tested here because the connector cannot
read them: a Python data source's methods run in planner workers that Spark
starts without a session (see :mod:`pyspark_raftlog.connection`).
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from secure_cluster import CLIENT_TOKEN, SecureCluster, running_secure_cluster
from stream_checks import unique_topic

TIMEOUT_S = 180


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    with running_secure_cluster(tmp_path_factory.mktemp("spark-secure")) as cluster:
        yield cluster


def _options(secure: SecureCluster) -> dict[str, str]:
    return {
        "servers": ",".join(secure.servers),
        "authToken": CLIENT_TOKEN,
        "tlsCaFile": secure.ca_file,
    }


def test_write_and_read_through_tls_and_auth(spark, secure, tmp_path: pathlib.Path) -> None:
    topic = unique_topic("secure")
    opts = _options(secure)
    rows = [(i, f"name-{i}") for i in range(50)]
    df = spark.createDataFrame(rows, "id long, name string").repartition(2)
    df.write.format("raftlog").mode("append").options(**opts).option("topic", topic).option(
        "partitions", "3"
    ).save()

    # a streaming write of 50 more rows, from parquet files, AvailableNow
    more = [(i, f"name-{i}") for i in range(50, 100)]
    spark.createDataFrame(more, "id long, name string").write.parquet(str(tmp_path / "in"))
    query = (
        spark.readStream.schema("id long, name string")
        .parquet(str(tmp_path / "in"))
        .writeStream.format("raftlog")
        .options(**opts)
        .option("topic", topic)
        .option("checkpointLocation", str(tmp_path / "write-ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(TIMEOUT_S), "the streaming write did not finish"
    finally:
        query.stop()

    batch = spark.read.format("raftlog").options(**opts).option("topic", topic).load()
    got = sorted((r.id, r.name) for r in batch.select("id", "name").collect())
    assert got == rows + more

    stream = (
        spark.readStream.format("raftlog")
        .options(**opts)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .load()
        .select("id", "name")
        .writeStream.format("memory")
        .queryName("secure_read")
        .option("checkpointLocation", str(tmp_path / "read-ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert stream.awaitTermination(TIMEOUT_S), "the streaming read did not finish"
        read_back = sorted((r.id, r.name) for r in spark.table("secure_read").collect())
    finally:
        stream.stop()
        spark.catalog.dropTempView("secure_read")
    assert read_back == rows + more


def test_a_read_without_the_token_fails_naming_it(spark, secure) -> None:
    opts = _options(secure)
    del opts["authToken"]
    with pytest.raises(Exception) as info:
        spark.read.format("raftlog").options(**opts).option("topic", "anything").load().collect()
    assert "the client token" in str(info.value) and "--auth-token" in str(info.value)
