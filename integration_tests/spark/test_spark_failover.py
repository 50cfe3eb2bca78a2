"""kill -9 of a partition leader while the sink streams into it: the query keeps going,
or fails and is restarted from its checkpoint; every value lands exactly once."""

from __future__ import annotations

from stream_checks import (
    assert_exactly_once,
    committed_batches,
    rate_stream,
    read_values,
    run_until,
    unique_topic,
)

from raftlog.client import BlockingRaftlogClient


def test_leader_killed_during_stream_lands_exactly_once(spark, private_cluster, tmp_path) -> None:
    servers = ",".join(private_cluster.servers)
    topic = unique_topic("failover")
    checkpoint = tmp_path / "ck"

    def start():
        return (
            rate_stream(spark)
            .writeStream.format("raftlog")
            .option("topic", topic)
            .option("servers", servers)
            .option("partitions", "2")
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="0 seconds")
            .start()
        )

    run_until(start(), checkpoint, batches=2)
    client = BlockingRaftlogClient(servers, request_timeout_s=30.0)
    try:
        leader = client.describe_topic(topic).partitions[0].leader
    finally:
        client.close()
    assert leader >= 0
    query = start()
    private_cluster.kill(leader)  # SIGKILL while the query writes
    assert not private_cluster.alive(leader)
    restarts = 0
    target = committed_batches(checkpoint) + 3
    while True:  # bounded: at most 3 restarts from the checkpoint
        try:
            run_until(query, checkpoint, batches=target, timeout_s=180)
            break
        except Exception:
            restarts += 1
            if restarts > 3:
                raise
            query = start()
    values = read_values(spark, servers, topic)
    assert_exactly_once(values, committed_batches(checkpoint))
