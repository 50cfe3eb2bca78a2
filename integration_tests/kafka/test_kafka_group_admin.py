"""What operators do with a cluster's consumer groups, through raftlog's Kafka listener
on the 3-node local cluster: confluent-kafka's AdminClient (librdkafka) and
kafka-python's KafkaAdminClient list and describe a group while two consumers are in
it (Stable, both members with their client ids, hosts and decoded assignments), then
after both left (Empty); deleting it is refused while it has members
(NON_EMPTY_GROUP) and done once it is empty, after which no offset is committed."""

from __future__ import annotations

import time
import urllib.request

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import KafkaError as KafkaPythonError
from kio.schema.errors import ErrorCode as E
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

TOPIC, GROUP, RECORDS = "admin-groups", "admin-group-two", 60
#: bounds every wait of this module (the first rebalance holds 3 s; a loaded machine)
WAIT_S = 120.0


def _retrying(timeout_s: float = WAIT_S) -> Retrying:
    return Retrying(
        stop=stop_after_delay(timeout_s),
        wait=wait_fixed(0.5),
        retry=retry_if_exception_type((AssertionError, KafkaPythonError)),
        reraise=True,
    )


def _consumer(bootstrap: list[str], client_id: str):
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": ",".join(bootstrap),
            "group.id": GROUP,
            "client.id": client_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


@pytest.fixture
def written(bootstrap: list[str]) -> int:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(TOPIC, 3, 3)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for i in range(RECORDS):
            producer.send(TOPIC, key=b"k%d" % i, value=b"v%d" % i)
        producer.flush(60)
    finally:
        producer.close()
    return RECORDS


def _read_all(consumers: list, expect: int) -> dict[int, int]:
    """Poll every consumer until ``expect`` records came and each holds partitions;
    the next offset of each partition read."""
    positions: dict[int, int] = {}
    got = 0
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for c in consumers:
            for m in c.consume(100, 0.2):
                assert m.error() is None, m.error()
                positions[m.partition()] = max(positions.get(m.partition(), 0), m.offset() + 1)
                got += 1
        if got >= expect and all(c.assignment() for c in consumers):
            break
    assert got == expect, f"read {got} of {expect} records"
    assert all(c.assignment() for c in consumers), "a member got no partition"
    return positions


def test_admin_clients_list_describe_and_delete_a_group(bootstrap, written) -> None:
    from confluent_kafka import ConsumerGroupState, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": ",".join(bootstrap)})
    kp_admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    consumers = [_consumer(bootstrap, "member-a"), _consumer(bootstrap, "member-b")]
    try:
        for c in consumers:
            c.subscribe([TOPIC])
        positions = _read_all(consumers, written)
        for c in consumers:
            c.commit(asynchronous=False)
        assigned = {
            name: {tp.partition for tp in c.assignment()}
            for name, c in zip(("member-a", "member-b"), consumers, strict=True)
        }
        assert assigned["member-a"] | assigned["member-b"] == {0, 1, 2}
        assert not assigned["member-a"] & assigned["member-b"]

        # confluent-kafka: listed and described, Stable, both members and their partitions
        def stable() -> object:
            listed = admin.list_consumer_groups(request_timeout=30).result()
            assert not listed.errors, listed.errors
            mine = [g for g in listed.valid if g.group_id == GROUP]
            assert [g.state for g in mine] == [ConsumerGroupState.STABLE], mine
            assert not mine[0].is_simple_consumer_group
            described = admin.describe_consumer_groups([GROUP], request_timeout=30)[GROUP].result()
            assert described.state == ConsumerGroupState.STABLE, described.state
            return described

        described = _retrying()(stable)
        assert described.partition_assignor in ("range", "roundrobin")
        members = {m.client_id: m for m in described.members}
        assert set(members) == {"member-a", "member-b"}
        for name, m in members.items():
            assert m.host == "/127.0.0.1"
            assert m.member_id
            got = {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions}
            assert got == {(TOPIC, p) for p in assigned[name]}, name
        filtered = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result()
        assert GROUP not in {g.group_id for g in filtered.valid}

        # kafka-python: the same group, the same members and assignments
        listed = kp_admin.list_groups()
        assert {(g["group_id"], g["protocol_type"]) for g in listed} >= {(GROUP, "consumer")}
        desc = kp_admin.describe_groups([GROUP])[GROUP]
        assert desc["error"] is None and desc["group_state"] == "Stable"
        assert {m["client_id"] for m in desc["members"]} == {"member-a", "member-b"}
        kp_assigned = {  # the assignment decoded by kafka-python, as a dict
            m["client_id"]: {
                p
                for t in m["member_assignment"]["assigned_partitions"]
                if t["topic"] == TOPIC
                for p in t["partitions"]
            }
            for m in desc["members"]
        }
        assert kp_assigned == assigned

        # a group with members is not deleted: NON_EMPTY_GROUP, offsets kept
        with pytest.raises(KafkaException) as refused:
            admin.delete_consumer_groups([GROUP], request_timeout=30)[GROUP].result()
        assert refused.value.args[0].code() == E.non_empty_group.value
        committed = kp_admin.list_group_offsets({GROUP: None})[GROUP]
        assert {tp.partition: om.offset for tp, om in committed.items()} == positions
    finally:
        for c in consumers:
            c.close()  # leaves the group

    try:

        def empty() -> object:
            d = admin.describe_consumer_groups([GROUP], request_timeout=30)[GROUP].result()
            assert d.state == ConsumerGroupState.EMPTY and not d.members, (d.state, d.members)
            return d

        _retrying()(empty)
        listed = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result()
        assert GROUP in {g.group_id for g in listed.valid}

        assert admin.delete_consumer_groups([GROUP], request_timeout=30)[GROUP].result() is None
        assert kp_admin.list_group_offsets({GROUP: None})[GROUP] == {}
        offsets = admin.list_consumer_group_offsets(
            [_group_request(GROUP, [TopicPartition(TOPIC, p) for p in range(3)])]
        )[GROUP].result()
        assert [tp.offset for tp in offsets.topic_partitions] == [-1001] * 3  # OFFSET_INVALID
        assert GROUP not in {g["group_id"] for g in kp_admin.list_groups()}
        # deleting it again: it does not exist
        with pytest.raises(KafkaException) as missing:
            admin.delete_consumer_groups([GROUP], request_timeout=30)[GROUP].result()
        assert missing.value.args[0].code() == E.group_id_not_found.value
    finally:
        kp_admin.close()


def _group_request(group: str, partitions: list):
    from confluent_kafka import ConsumerGroupTopicPartitions

    return ConsumerGroupTopicPartitions(group, partitions)


def _rebalances(servers: list[str]) -> float:
    """raftlog_kafka_group_rebalances_total summed over the nodes' /metrics."""
    total = 0.0
    for server in servers:
        with urllib.request.urlopen(f"http://{server}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("raftlog_kafka_group_rebalances_total "):
                    total += float(line.split()[1])
    return total


def test_a_restarted_static_member_gets_its_partitions_back_without_a_rebalance(
    kafka_cluster, bootstrap
) -> None:
    """KIP-345: confluent-kafka consumers with ``group.instance.id``; one stops (a
    static member sends no LeaveGroup) and starts again within its session timeout: it
    gets the same partitions under a new member id at once, the other member keeps
    its own, and the group does not rebalance."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

    topic, group, session_ms = "admin-static", "admin-group-static", 30_000
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 4, 3)])
    finally:
        admin.close()

    def consumer(instance: str):
        c = Consumer(
            {
                "bootstrap.servers": ",".join(bootstrap),
                "group.id": group,
                "group.instance.id": instance,
                "client.id": instance,
                "session.timeout.ms": session_ms,
            }
        )
        c.subscribe([topic])
        return c

    def until_assigned(consumers: list, limit_s: float) -> float:
        start = time.monotonic()
        while time.monotonic() - start < limit_s and not all(c.assignment() for c in consumers):
            for c in consumers:
                m = c.poll(0.1)
                # the new topic may reach a node's metadata after the consumer asks
                error = None if m is None else m.error()
                assert error is None or error.code() == E.unknown_topic_or_partition.value, error
        assert all(c.assignment() for c in consumers), f"no assignment in {limit_s}s"
        return time.monotonic() - start

    cluster_admin = AdminClient({"bootstrap.servers": ",".join(bootstrap)})

    def members() -> dict[str, str]:
        d = cluster_admin.describe_consumer_groups([group], request_timeout=30)[group].result()
        return {m.group_instance_id: m.member_id for m in d.members}

    a, b = consumer("static-a"), consumer("static-b")
    restarted = None
    try:
        until_assigned([a, b], WAIT_S)
        mine = {name: {tp.partition for tp in c.assignment()} for name, c in (("a", a), ("b", b))}
        assert mine["a"] | mine["b"] == {0, 1, 2, 3} and mine["a"] and mine["b"]
        before_ids = members()
        assert set(before_ids) == {"static-a", "static-b"}
        rebalances = _rebalances(kafka_cluster.servers)

        a.close()  # static: no LeaveGroup, the member stays until its session ends
        a = None
        assert members() == before_ids
        restarted = consumer("static-a")
        took = until_assigned([restarted, b], session_ms / 1000)
        # well inside the session timeout: not a new member waiting for the old to expire
        assert took < session_ms / 1000 / 2, f"took {took:.1f}s"
        assert {tp.partition for tp in restarted.assignment()} == mine["a"]
        for _ in range(20):  # b goes on polling: nothing is revoked from it
            b.poll(0.1)
        assert {tp.partition for tp in b.assignment()} == mine["b"]
        after_ids = members()
        assert after_ids["static-b"] == before_ids["static-b"]
        assert after_ids["static-a"] != before_ids["static-a"]  # the old id is fenced
        assert _rebalances(kafka_cluster.servers) == rebalances
    finally:
        for c in (a, b, restarted):
            if c is not None:
                c.close()
