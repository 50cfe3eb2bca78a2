"""Consumer groups through raftlog's Kafka listener, with real clients on a 3-node
local cluster: kafka-python writes keyed records, two confluent-kafka consumers of one
group read exactly those (in order per partition, no duplicates), a restarted member
reads nothing committed again; aiokafka's group consumer round-trips; committed offsets
survive the coordinator's leader being killed; bad group input gets Kafka's codes."""

from __future__ import annotations

import asyncio
import collections
import datetime
import os
import time
import urllib.request

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata
from kafka_wire import Wire
from kio.schema.errors import ErrorCode as E
from kio.schema.find_coordinator.v2.request import FindCoordinatorRequest
from kio.schema.heartbeat.v3.request import HeartbeatRequest
from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.leave_group.v3.request import LeaveGroupRequest, MemberIdentity
from kio.schema.offset_commit.v7.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v5.request import OffsetFetchRequest, OffsetFetchRequestTopic
from kio.schema.sync_group.v3.request import SyncGroupRequest, SyncGroupRequestAssignment
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from benchmarks.workloads.cluster_handle import running_cluster
from raftlog.client import BlockingRaftlogClient
from raftlog.coordinator.group_stm import CONSUMER_OFFSETS_TOPIC, partition_for

#: Records kafka-python writes for the two-consumer test: the issue's 100,000 (about
#: 55 s on 2 cores: writing them is most of it); RAFTLOG_KAFKA_GROUP_RECORDS sets fewer
#: for a quick run.
RECORDS = int(os.environ.get("RAFTLOG_KAFKA_GROUP_RECORDS", "100000"))
READ_TIMEOUT_S = 240.0
#: A group id on the same __consumer_offsets partition (of 8) as "group-failover".
SURVIVOR = next(
    f"group-survivor-{i}"
    for i in range(1000)
    if partition_for(f"group-survivor-{i}", 8) == partition_for("group-failover", 8)
)


def _create(bootstrap: list[str], topic: str, partitions: int = 3) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 3)])
    finally:
        admin.close()


def _produce(bootstrap: list[str], topic: str, start: int, count: int) -> dict[tuple, bytes]:
    """kafka-python with its defaults (idempotent, acks=all): (partition, offset) ->
    value of every record written."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        futures = [
            (i, producer.send(topic, key=b"key-%d" % (i % 997), value=b"value-%d" % i))
            for i in range(start, start + count)
        ]
        producer.flush(timeout=300)
        out = {}
        for i, f in futures:
            md = f.get(timeout=60)
            out[(md.partition, md.offset)] = b"value-%d" % i
        return out
    finally:
        producer.close()


def _ck_consumer(bootstrap: list[str], group: str):
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": ",".join(bootstrap),
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 1000,
        }
    )


def _read(consumers: list, expect: int, reads: dict[int, list]) -> None:
    """Poll every consumer in turn until ``expect`` records came (bounded in time);
    ``reads[i]``: consumer i's (partition, offset, value) in the order it got them."""
    deadline = time.monotonic() + READ_TIMEOUT_S
    total = 0
    while total < expect and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            for m in c.consume(2000, 0.2):
                assert m.error() is None, m.error()
                reads[i].append((m.partition(), m.offset(), m.value()))
                total += 1
    assert total >= expect, f"read {total} of {expect} records in {READ_TIMEOUT_S}s"


def _in_order_per_partition(records: list[tuple]) -> None:
    last: dict[int, int] = {}
    for p, o, _ in records:
        assert o > last.get(p, -1), f"partition {p}: offset {o} after {last[p]}"
        last[p] = o


def test_two_confluent_consumers_of_one_group_read_every_record_once(bootstrap) -> None:
    topic, group = "groups-two", "group-two"
    _create(bootstrap, topic)
    written = _produce(bootstrap, topic, 0, RECORDS)
    assert len(written) == RECORDS
    assert {p for p, _ in written} == {0, 1, 2}

    c1, c2 = _ck_consumer(bootstrap, group), _ck_consumer(bootstrap, group)
    c3 = None
    try:
        c1.subscribe([topic])
        c2.subscribe([topic])
        reads: dict[int, list] = collections.defaultdict(list)
        _read([c1, c2], RECORDS, reads)
        time.sleep(1.0)  # nothing more comes
        _read([c1, c2], 0, reads)
        for i in (0, 1):
            _in_order_per_partition(reads[i])
        got = [(p, o) for i in (0, 1) for p, o, _ in reads[i]]
        assert len(got) == len(set(got)) == RECORDS, "a record was read twice"
        assert {(p, o): v for i in (0, 1) for p, o, v in reads[i]} == written
        # both members got partitions: one generation split them
        assert reads[0] and reads[1]
        first_owner = {p: i for i in (0, 1) for p, _, _ in reads[i]}
        assert len(first_owner) == 3

        # c1 leaves (its offsets committed on close); a new member of the same group
        # takes its partitions and reads only what was written after
        c1.close()
        c1 = None
        more = 3000
        later = _produce(bootstrap, topic, RECORDS, more)
        c3 = _ck_consumer(bootstrap, group)
        c3.subscribe([topic])
        after: dict[int, list] = collections.defaultdict(list)
        _read([c2, c3], more, after)
        time.sleep(2.0)
        _read([c2, c3], 0, after)
        again = [(p, o) for i in (0, 1) for p, o, _ in after[i]]
        assert not set(again) & set(written), "a committed record was read again"
        assert len(again) == len(set(again)) == more
        assert {(p, o): v for i in (0, 1) for p, o, v in after[i]} == later
    finally:
        for c in (c1, c2, c3):
            if c is not None:
                c.close()


def test_aiokafka_group_consumer_round_trips_10000_records(bootstrap) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as TopicPartitionAio

    topic, group, n = "groups-aiokafka", "group-aiokafka", 10_000
    _create(bootstrap, topic)

    async def run() -> tuple[dict, dict, dict]:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, enable_idempotence=True, acks="all"
        )
        await producer.start()
        written: dict[tuple, bytes] = {}
        try:
            futures = [
                (i, await producer.send(topic, key=b"k%d" % (i % 101), value=b"v%d" % i))
                for i in range(n)
            ]
            for i, f in futures:
                md = await f
                written[(md.partition, md.offset)] = b"v%d" % i
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        read: dict[tuple, bytes] = {}
        order: list[tuple] = []
        try:
            deadline = time.monotonic() + READ_TIMEOUT_S
            while len(order) < n and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500, max_records=2000)
                for records in batches.values():
                    for r in records:
                        order.append((r.partition, r.offset, r.value))
                        read[(r.partition, r.offset)] = r.value
            await consumer.commit()
            committed = {p: await consumer.committed(TopicPartitionAio(topic, p)) for p in range(3)}
        finally:
            await consumer.stop()
        _in_order_per_partition(order)
        assert len(order) == len(read), "a record was read twice"
        return written, read, committed

    written, read, committed = asyncio.run(run())
    assert len(written) == n and read == written
    # the next offset to read of each partition (a log's offsets count its control
    # batches too: not the record count)
    assert committed == {p: max(o for q, o in written if q == p) + 1 for p in range(3)}


def _wait_for(check, what: str, timeout_s: float = 90.0):
    return Retrying(
        stop=stop_after_delay(timeout_s),
        wait=wait_fixed(0.5),
        retry=retry_if_exception_type((AssertionError, KafkaError)),
        reraise=True,
    )(check)


def test_committed_offsets_survive_a_coordinator_leader_change(tmp_path) -> None:
    with running_cluster(tmp_path / "cluster") as handle:
        bootstrap = handle.cluster.kafka_bootstrap
        topic, group = "groups-failover", "group-failover"
        _create(bootstrap, topic)
        written = _produce(bootstrap, topic, 0, 300)
        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        try:
            got = 0
            deadline = time.monotonic() + 60
            while got < 300 and time.monotonic() < deadline:
                got += sum(len(v) for v in consumer.poll(1000).values())
            assert got == 300
            offsets = {
                TopicPartition(topic, p): OffsetAndMetadata(10 + p, f"md-{p}", -1) for p in range(3)
            }
            consumer.commit(offsets)
        finally:
            consumer.close(autocommit=False)

        # a member of another group on the same partition, joined and synced before the
        # kill, with a session long enough to outlive the election
        member, gen = _stable_member(bootstrap, SURVIVOR, session_ms=60_000)

        with BlockingRaftlogClient(handle.servers) as client:
            partitions = len(client.describe_topic(CONSUMER_OFFSETS_TOPIC).partitions)
            p = partition_for(group, partitions)
            leader = client.describe_topic(CONSUMER_OFFSETS_TOPIC).partitions[p].leader
        assert leader in (1, 2, 3)
        handle.kill(leader)
        alive = [a for i, a in enumerate(bootstrap, 1) if i != leader]

        def fetched() -> dict:
            admin = KafkaAdminClient(bootstrap_servers=alive, request_timeout_ms=10_000)
            try:
                answer = admin.list_group_offsets({group: None})[group]
            finally:
                admin.close()
            assert answer, "no offsets yet"
            return {tp.partition: (om.offset, om.metadata) for tp, om in answer.items()}

        assert _wait_for(fetched, "the new coordinator") == {
            p: (10 + p, f"md-{p}") for p in range(3)
        }
        with BlockingRaftlogClient([handle.address(i) for i in (1, 2, 3) if i != leader]) as c:
            new_leader = c.describe_topic(CONSUMER_OFFSETS_TOPIC).partitions[p].leader
        assert new_leader not in (leader, -1)

        # the new coordinator rebuilt the group from __consumer_offsets: same member,
        # same generation, its assignment, and it takes the member's commits (asked
        # again, as a client does, if the leadership moved on meanwhile: the leader
        # balancer may hand it to another live replica)
        def survivor() -> None:
            with Wire(_coordinator(alive, SURVIVOR)) as w:
                beat = w.call(
                    HeartbeatRequest(group_id=SURVIVOR, generation_id=gen, member_id=member)
                )
                assert beat.error_code == E.none, beat
                synced = w.call(
                    SyncGroupRequest(
                        group_id=SURVIVOR, generation_id=gen, member_id=member, assignments=()
                    )
                )
                assert (synced.error_code, synced.assignment) == (E.none, b"assigned")
                assert _commit(w, SURVIVOR, gen, member, "after", topic=topic) == E.none

        _wait_for(survivor, "the rebuilt group", timeout_s=40)

        # a new member, through the new coordinator, resumes from the committed offsets
        expected = {(p, o) for p, o in written if o >= 10 + p}

        def resume() -> list:
            consumer = KafkaConsumer(
                topic,
                bootstrap_servers=alive,
                group_id=group,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
            )
            try:
                seen = []
                deadline = time.monotonic() + 60
                while len(seen) < len(expected) and time.monotonic() < deadline:
                    for records in consumer.poll(1000).values():
                        seen += [(r.partition, r.offset) for r in records]
                return seen
            finally:
                consumer.close(autocommit=False)

        # kafka-python may first try the dead node (Metadata lists every configured
        # node) and raise from poll: a new consumer starts again from the commits
        seen = Retrying(
            stop=stop_after_delay(120),
            wait=wait_fixed(1),
            retry=retry_if_exception_type(KafkaError),
            reraise=True,
        )(resume)
        assert {p: min(o for q, o in seen if q == p) for p in range(3)} == {0: 10, 1: 11, 2: 12}
        assert len(seen) == len(set(seen)) and set(seen) == expected


def _stable_member(bootstrap: list[str], group: str, session_ms: int) -> tuple[str, int]:
    """A member of ``group`` that joined and synced (as its leader) over the raw wire:
    (member id, generation)."""
    with Wire(_coordinator(bootstrap, group)) as w:
        member = _join(w, group, "", session_ms=session_ms).member_id
        joined = _join(w, group, member, session_ms=session_ms)
        assert joined.error_code == E.none, joined
        synced = w.call(
            SyncGroupRequest(
                group_id=group,
                generation_id=joined.generation_id,
                member_id=member,
                assignments=(SyncGroupRequestAssignment(member_id=member, assignment=b"assigned"),),
            )
        )
        assert synced.error_code == E.none, synced
        return member, joined.generation_id


def _coordinator(bootstrap: list[str], group: str) -> str:
    def find() -> str:
        with Wire(bootstrap[0]) as w:
            r = w.call(FindCoordinatorRequest(key=group, key_type=0))
        assert r.error_code == E.none, r
        return f"{r.host}:{r.port}"

    return _wait_for(find, "a coordinator")


def _join(w: Wire, group: str, member: str, metadata: bytes = b"\0\0", session_ms=10_000):
    return w.call(
        JoinGroupRequest(
            group_id=group,
            session_timeout=datetime.timedelta(milliseconds=session_ms),
            rebalance_timeout=datetime.timedelta(milliseconds=30_000),
            member_id=member,
            protocol_type="consumer",
            protocols=(JoinGroupRequestProtocol(name="range", metadata=metadata),),
        )
    )


def _commit(
    w: Wire, group: str, generation: int, member: str, metadata: str = "", topic="groups-raw"
):
    r = w.call(
        OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member,
            topics=(
                OffsetCommitRequestTopic(
                    name=topic,
                    partitions=(
                        OffsetCommitRequestPartition(
                            partition_index=0,
                            committed_offset=5,
                            committed_leader_epoch=-1,
                            committed_metadata=metadata,
                        ),
                    ),
                ),
            ),
        )
    )
    return r.topics[0].partitions[0].error_code


def _refusals(server: str) -> dict[str, float]:
    """raftlog_kafka_group_refusals_total by limit, from a node's /metrics."""
    with urllib.request.urlopen(f"http://{server}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("raftlog_kafka_group_refusals_total{"):
            labels, _, value = line.partition("} ")
            out[labels.split('limit="')[1].rstrip('"')] = float(value)
    return out


def test_bad_group_input_gets_kafkas_error_codes(kafka_cluster, bootstrap) -> None:
    group = "group-raw"
    _create(bootstrap, "groups-raw", 1)
    address = _coordinator(bootstrap, group)
    server = kafka_cluster.servers[bootstrap.index(address)]
    before = _refusals(server)
    with Wire(address) as w:
        first = _join(w, group, "")
        assert first.error_code == E.member_id_required and first.member_id
        member = first.member_id
        joined = _join(w, group, member)  # after the first rebalance's hold
        assert joined.error_code == E.none and joined.leader == member
        gen = joined.generation_id
        synced = w.call(
            SyncGroupRequest(
                group_id=group,
                generation_id=gen,
                member_id=member,
                assignments=(SyncGroupRequestAssignment(member_id=member, assignment=b"A"),),
            )
        )
        assert synced.error_code == E.none and synced.assignment == b"A"

        def beat(generation: int, who: str):
            return w.call(
                HeartbeatRequest(group_id=group, generation_id=generation, member_id=who)
            ).error_code

        assert beat(gen, member) == E.none
        assert beat(gen, "nobody") == E.unknown_member_id
        assert beat(gen + 7, member) == E.illegal_generation
        assert _commit(w, group, gen, "nobody") == E.unknown_member_id
        assert _commit(w, group, gen + 7, member) == E.illegal_generation
        assert _commit(w, group, gen, member, "x" * 5000) == E.offset_metadata_too_large
        assert _commit(w, group, gen, member, "ok") == E.none
        too_big = _join(w, "group-raw-big", "", metadata=b"\0" * (100 * 1024))
        assert too_big.error_code == E.invalid_request
        assert _join(w, "group-raw-short", "", session_ms=1000).error_code == (
            E.invalid_session_timeout
        )
        assert _join(w, "", "").error_code == E.invalid_group_id
        fetched = w.call(
            OffsetFetchRequest(
                group_id=group,
                topics=(OffsetFetchRequestTopic(name="groups-raw", partition_indexes=(0, 1)),),
            )
        )
        parts = {p.partition_index: p for p in fetched.topics[0].partitions}
        assert (parts[0].committed_offset, parts[0].metadata) == (5, "ok")
        assert parts[1].committed_offset == -1
        # the connection and the group still serve: heartbeat, then leave
        assert beat(gen, member) == E.none
        left = w.call(
            LeaveGroupRequest(
                group_id=group,
                members=(MemberIdentity(member_id=member), MemberIdentity(member_id="nobody")),
            )
        )
        assert [m.error_code for m in left.members] == [E.none, E.unknown_member_id]
        assert beat(gen, member) == E.unknown_member_id
    after = _refusals(server)
    for limit in ("member_metadata_bytes", "offset_metadata_bytes"):
        assert after.get(limit, 0) == before.get(limit, 0) + 1, limit


@pytest.mark.parametrize("api", ["JoinGroup", "OffsetCommit"])
def test_a_node_that_is_not_the_coordinator_says_so(bootstrap, api) -> None:
    group = f"group-elsewhere-{api}"
    address = _coordinator(bootstrap, group)
    other = next(a for a in bootstrap if a != address)
    with Wire(other) as w:
        if api == "JoinGroup":
            assert _join(w, group, "").error_code == E.not_coordinator
        else:
            assert _commit(w, group, -1, "") == E.not_coordinator


def test_a_node_of_two_processes_names_why_it_cannot_coordinate_some_groups(tmp_path) -> None:
    """With --shards 2 the process serving Kafka hosts about half of the
    __consumer_offsets partitions: groups there work, the others get
    COORDINATOR_NOT_AVAILABLE naming --shards (docs/kafka.md, "Not supported yet")."""
    with running_cluster(tmp_path / "cluster", extra_args=["--shards", "2"]) as handle:
        bootstrap = handle.cluster.kafka_bootstrap
        answers: dict[str, object] = {}

        def find_all() -> None:
            with Wire(bootstrap[0]) as w:
                for i in range(40):
                    group = f"sharded-{i}"
                    answers[group] = w.call(FindCoordinatorRequest(key=group, key_type=0))
            codes = {r.error_code for r in answers.values()}
            assert codes == {E.none, E.coordinator_not_available}, codes
            refused = [r for r in answers.values() if r.error_code != E.none]
            assert all("another process" in (r.error_message or "") for r in refused), refused

        _wait_for(find_all, "__consumer_offsets with leaders", timeout_s=120)
        for r in answers.values():
            if r.error_code == E.coordinator_not_available:
                assert "--shards 2" in r.error_message and "--shards 1" in r.error_message
        group = next(g for g, r in answers.items() if r.error_code == E.none)
        member, gen = _stable_member(bootstrap, group, session_ms=10_000)
        assert member and gen >= 1


def test_a_group_on_a_cluster_with_tokens_authenticates_with_sasl(tmp_path) -> None:
    """On a node with tokens the group's first FindCoordinator creates
    __consumer_offsets with the client token the consumer authenticated with, and the
    group reads and commits through SASL/PLAIN connections."""
    import secrets

    from raftlog.cluster import start_cluster, stop_cluster

    token, admin_token = "client-" + secrets.token_hex(8), "admin-" + secrets.token_hex(8)
    for role in ("AUTH", "CLIENT", "ADMIN", "PEER"):
        os.environ.pop(f"RAFTLOG_{role}_TOKEN", None)
    root = tmp_path / "cluster"
    cluster = start_cluster(root, 3, auth_token=token, admin_token=admin_token)
    sasl = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "anyone",
        "sasl_plain_password": token,
    }
    try:
        bootstrap = cluster.kafka_bootstrap
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, **sasl)
        try:
            admin.create_topics([NewTopic("groups-sasl", 1, 3)])
        finally:
            admin.close()
        producer = KafkaProducer(bootstrap_servers=bootstrap, **sasl)
        try:
            for i in range(50):
                producer.send("groups-sasl", value=b"v%d" % i)
            producer.flush(60)
        finally:
            producer.close()
        consumer = KafkaConsumer(
            "groups-sasl",
            bootstrap_servers=bootstrap,
            group_id="group-sasl",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            **sasl,
        )
        try:
            values = []
            deadline = time.monotonic() + 90
            while len(values) < 50 and time.monotonic() < deadline:
                for records in consumer.poll(1000).values():
                    values += [r.value for r in records]
            assert values == [b"v%d" % i for i in range(50)]
            consumer.commit()
            position = consumer.position(TopicPartition("groups-sasl", 0))
            assert consumer.committed(TopicPartition("groups-sasl", 0)) == position
        finally:
            consumer.close()
        # the group is empty now: the client token lists and describes it but may not
        # delete it (the admin role's, as DeleteTopics); the admin token may
        as_client = KafkaAdminClient(bootstrap_servers=bootstrap, **sasl)
        try:
            described = as_client.describe_groups(["group-sasl"])["group-sasl"]
            assert described["group_state"] == "Empty", described
            assert as_client.delete_groups(["group-sasl"]) == {
                "group-sasl": "GroupAuthorizationFailedError"
            }
        finally:
            as_client.close()
        as_admin = KafkaAdminClient(
            bootstrap_servers=bootstrap, **{**sasl, "sasl_plain_password": admin_token}
        )
        try:
            assert as_admin.delete_groups(["group-sasl"]) == {"group-sasl": "OK"}
            assert as_admin.list_group_offsets({"group-sasl": None})["group-sasl"] == {}
        finally:
            as_admin.close()
    finally:
        stop_cluster(root, timeout_s=10.0)
