"""Metadata lists the live brokers, as a Kafka broker does: a killed node drops out of
the broker list once the surviving nodes' heartbeats declare it dead, its replicas are
given as offline and out of the in-sync set, no partition names it as leader; restarted,
it is listed again. This module has a cluster of its own (the fixture is per module),
since it kills one of its nodes."""

from __future__ import annotations

from kafka_wire import Wire
from kio.schema.metadata.v6.request import MetadataRequest, MetadataRequestTopic
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_fixed,
)

from raftlog.client import BlockingRaftlogClient

TOPIC = "live-brokers"
VICTIM = 3


def _retrying() -> Retrying:
    return Retrying(
        stop=stop_after_delay(90) | stop_after_attempt(180),
        wait=wait_fixed(0.5),
        retry=retry_if_exception_type((AssertionError, OSError)),
        reraise=True,
    )


def _metadata(address: str):
    with Wire(address) as wire:
        return wire.call(MetadataRequest(topics=(MetadataRequestTopic(name=TOPIC),)))


def test_a_killed_node_leaves_the_broker_list_and_comes_back(kafka_cluster, bootstrap) -> None:
    with BlockingRaftlogClient(kafka_cluster.servers) as client:
        client.create_topic(TOPIC, partitions=3, replication_factor=3)
    survivor = bootstrap[0]  # node 1's listener

    def everyone_listed() -> None:
        meta = _metadata(survivor)
        assert sorted(b.node_id for b in meta.brokers) == [1, 2, 3]
        (topic,) = meta.topics
        assert all(p.leader_id in (1, 2, 3) for p in topic.partitions), topic
        assert all(list(p.offline_replicas) == [] for p in topic.partitions), topic

    _retrying()(everyone_listed)
    kafka_cluster.kill(VICTIM)
    assert not kafka_cluster.alive(VICTIM)

    def victim_dropped() -> None:
        meta = _metadata(survivor)
        assert sorted(b.node_id for b in meta.brokers) == [1, 2], meta.brokers
        (topic,) = meta.topics
        for p in topic.partitions:
            assert sorted(p.replica_nodes) == [1, 2, 3], p
            assert list(p.offline_replicas) == [VICTIM], p
            assert VICTIM not in p.isr_nodes, p
            # a partition it led is led again by a live node (or briefly by none)
            assert p.leader_id in (1, 2) or (p.leader_id == -1 and p.error_code == 5), p
        assert all(p.leader_id in (1, 2) for p in topic.partitions), topic

    _retrying()(victim_dropped)
    kafka_cluster.restart(VICTIM)
    _retrying()(everyone_listed)
