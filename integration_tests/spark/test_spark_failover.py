"""kill -9 of a partition leader while the sink streams into it: the query keeps going,
or fails and is restarted from its checkpoint; every value lands exactly once."""

from __future__ import annotations

from stream_checks import (
    assert_exactly_once,
    committed_batches,
    partition_leader,
    rate_stream,
    read_values,
    run_until,
    start_sink,
    unique_topic,
)


def test_leader_killed_during_stream_lands_exactly_once(spark, private_cluster, tmp_path) -> None:
    servers = ",".join(private_cluster.servers)
    topic = unique_topic("failover")
    checkpoint = tmp_path / "ck"

    def start():
        return start_sink(rate_stream(spark), topic, servers, checkpoint, partitions="2")

    run_until(start(), checkpoint, batches=2)
    leader = partition_leader(servers, topic)
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
