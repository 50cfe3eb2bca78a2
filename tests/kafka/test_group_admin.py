"""The consumer group admin APIs (ListGroups, DescribeGroups, DeleteGroups,
OffsetDelete) through :class:`raftlog.kafka.apis.KafkaApis`, on a node whose
``__consumer_offsets`` partitions run the real group_stm over an in-memory Raft log
(tests/producers/fake_consensus.py: commits can be held, leaderships lost).

Every answer is encoded with the version's kio schema and decoded back, as a client
reads it, for every version ApiVersions advertises."""

from __future__ import annotations

import asyncio
import io
import struct
import types
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode as E
from kio.serial import entity_reader

from raftlog.coordinator.group_stm import CONSUMER_OFFSETS_TOPIC, GroupStm, partition_for
from raftlog.coordinator.offsets_state import OffsetsState
from raftlog.kafka.apis import CALLER, KafkaApis
from raftlog.kafka.groups.handlers import CLIENT_HOST
from raftlog.kafka.groups.limits import GroupLimits
from raftlog.kafka.protocol import (
    API_VERSIONS,
    RequestHead,
    build,
    encode_response,
    response_schema,
)
from raftlog.metrics import NodeMetrics
from raftlog.rpc.messages import ErrorCode
from raftlog.rpc.roles import Role
from raftlog.rpc.server import AuthPolicy, RequestError
from tests.producers.fake_consensus import FakeConsensus

PARTITIONS = 8
GROUP = "admin-group"
#: a group coordinated by another partition, which this node does not lead
ELSEWHERE = next(
    f"elsewhere-{i}"
    for i in range(100)
    if partition_for(f"elsewhere-{i}", PARTITIONS) != partition_for(GROUP, PARTITIONS)
)
#: a group id of GROUP's partition that no one uses
NOBODY = next(
    f"nobody-{i}"
    for i in range(1000)
    if partition_for(f"nobody-{i}", PARTITIONS) == partition_for(GROUP, PARTITIONS)
)
LIST, DESCRIBE, DELETE, OFFSET_DELETE = 16, 15, 42, 47
JOIN, SYNC, LEAVE, COMMIT, FETCH = 11, 14, 13, 8, 9


class _Replica:
    """A ``__consumer_offsets`` replica as the coordinator uses it."""

    def __init__(self, consensus: FakeConsensus) -> None:
        self.consensus = consensus
        self.group_stm = GroupStm(consensus, replicate_timeout_s=5.0)

    def check_readable(self, peers: Any) -> None:
        if not self.consensus.is_leader:
            raise RequestError(ErrorCode.NOT_LEADER, "not the leader")


def _node(led: set[int]) -> types.SimpleNamespace:
    """A node leading the ``__consumer_offsets`` partitions in ``led``; topic ``t`` (2
    partitions) and ``u`` (1) exist."""
    consensus = {}
    for p in range(PARTITIONS):
        c = FakeConsensus()
        c.is_leader = p in led
        consensus[p] = c
    topics = {
        CONSUMER_OFFSETS_TOPIC: types.SimpleNamespace(
            partitions=[types.SimpleNamespace(group_id=100 + p) for p in range(PARTITIONS)],
            schema=None,
        ),
        "t": types.SimpleNamespace(partitions=[object(), object()], schema=None),
        "u": types.SimpleNamespace(partitions=[object()], schema=None),
    }
    return types.SimpleNamespace(
        node_id=1,
        shards=None,
        metrics=NodeMetrics(1, list),
        config=types.SimpleNamespace(
            peers={1: "127.0.0.1:1"},
            kafka_group_limits=GroupLimits(initial_rebalance_delay_ms=300),
        ),
        controller_stm=types.SimpleNamespace(topics=topics),
        partitions={100 + p: _Replica(c) for p, c in consensus.items()},
        consensus=consensus,
    )


@pytest.fixture
async def node_apis():
    node = _node({partition_for(GROUP, PARTITIONS)})
    policy = AuthPolicy(client_token="client-secret", admin_token="admin-secret")
    apis = KafkaApis(node, {1: "127.0.0.1:9092"}, policy)
    CALLER.set(Role.ADMIN)
    CLIENT_HOST.set("/127.0.0.1")
    yield node, apis
    await apis.groups.stop()


async def _call(apis: KafkaApis, key: int, version: int, client_id: str = "tester", **values):
    """The decoded answer of API ``key`` at ``version`` to a request of ``values``
    (fields the version lacks dropped), encoded and decoded as on the wire."""
    request = build(load_request_schema(key, version), values)
    head = RequestHead(key, version, 7, client_id)
    answer = await apis.handle(head, request)
    data = encode_response(head, build(response_schema(head), answer))
    schema = response_schema(head)
    _, at = entity_reader(schema.__header_schema__)(data, 0)
    body, size = entity_reader(schema)(data, at)
    assert at + size == len(data)
    return body


async def _describe(apis: KafkaApis, version: int, group: str, operations: bool = False):
    (g,) = (
        await _call(
            apis, DESCRIBE, version, groups=[group], include_authorized_operations=operations
        )
    ).groups
    return g


def _subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0 (what a consumer's JoinGroup carries)."""
    out = io.BytesIO()
    out.write(struct.pack(">hi", 0, len(topics)))
    for t in topics:
        out.write(struct.pack(">h", len(t)) + t.encode())
    out.write(struct.pack(">i", -1))
    return out.getvalue()


async def _join(apis: KafkaApis, client_id: str, member: str = "", topics=("t",)):
    return await _call(
        apis,
        JOIN,
        3,
        client_id,
        group_id=GROUP,
        session_timeout=10_000,
        rebalance_timeout=10_000,
        member_id=member,
        protocol_type="consumer",
        protocols=[{"name": "range", "metadata": _subscription(*topics)}],
    )


async def _stable_pair(apis: KafkaApis) -> tuple[str, str, int]:
    """Two members joined together (the first rebalance's hold) and synced: (leader,
    follower, generation)."""
    a, b = await asyncio.gather(_join(apis, "client-a"), _join(apis, "client-b"))
    assert a.error_code == b.error_code == E.none
    leader = a.leader
    follower = b.member_id if leader == a.member_id else a.member_id
    gen = a.generation_id
    assignments = [
        {"member_id": leader, "assignment": b"assigned-to-leader"},
        {"member_id": follower, "assignment": b"assigned-to-follower"},
    ]
    synced = await asyncio.gather(
        _call(apis, SYNC, 3, group_id=GROUP, generation_id=gen, member_id=follower, assignments=[]),
        _call(
            apis,
            SYNC,
            3,
            group_id=GROUP,
            generation_id=gen,
            member_id=leader,
            assignments=assignments,
        ),
    )
    assert [s.error_code for s in synced] == [E.none, E.none]
    return leader, follower, gen


async def _commit(apis: KafkaApis, rows: dict[tuple[str, int], int], gen=-1, member=""):
    by_topic: dict[str, list] = {}
    for (topic, partition), offset in rows.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "committed_offset": offset, "committed_metadata": ""}
        )
    answer = await _call(
        apis,
        COMMIT,
        7,
        group_id=GROUP,
        generation_id_or_member_epoch=gen,
        member_id=member,
        topics=[{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    )
    return {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}


async def _committed(apis: KafkaApis, group: str = GROUP) -> dict[tuple[str, int], int]:
    answer = await _call(apis, FETCH, 5, group_id=group, topics=None)
    assert answer.error_code == E.none
    return {
        (t.name, p.partition_index): p.committed_offset for t in answer.topics for p in t.partitions
    }


async def test_list_and_describe_show_the_members_their_hosts_and_assignments(node_apis) -> None:
    _node, apis = node_apis
    leader, follower, _gen = await _stable_pair(apis)
    low, high = API_VERSIONS[LIST][1:]
    for version in range(low, high + 1):
        listed = await _call(apis, LIST, version)
        assert listed.error_code == E.none
        assert [(g.group_id, g.protocol_type) for g in listed.groups] == [(GROUP, "consumer")]
        if version >= 4:
            assert listed.groups[0].group_state == "Stable"
    # v4's states and v5's types, in either case; every group is a classic one
    assert [g.group_id for g in (await _call(apis, LIST, 4, states_filter=["stable"])).groups]
    assert not (await _call(apis, LIST, 4, states_filter=["Empty"])).groups
    assert (await _call(apis, LIST, 5, types_filter=["Classic"])).groups[0].group_type == "classic"
    assert not (await _call(apis, LIST, 5, types_filter=["consumer"])).groups

    low, high = API_VERSIONS[DESCRIBE][1:]
    for version in range(low, high + 1):
        answer = await _call(
            apis, DESCRIBE, version, groups=[GROUP], include_authorized_operations=True
        )
        (g,) = answer.groups
        assert (g.error_code, g.group_state, g.protocol_type, g.protocol_data) == (
            E.none,
            "Stable",
            "consumer",
            "range",
        )
        members = {m.member_id: m for m in g.members}
        assert set(members) == {leader, follower}
        assert {m.client_id for m in g.members} == {"client-a", "client-b"}
        assert {m.client_host for m in g.members} == {"/127.0.0.1"}
        assert members[leader].member_assignment == b"assigned-to-leader"
        assert members[follower].member_assignment == b"assigned-to-follower"
        assert members[leader].member_metadata == _subscription("t")
        if version >= 3:  # the admin role: read, delete, describe
            assert g.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)

    # a group that does not exist: "Dead" (v0-5), GROUP_ID_NOT_FOUND (v6)
    dead = await _describe(apis, 5, NOBODY)
    assert (dead.error_code, dead.group_state, dead.members) == (E.none, "Dead", ())
    dead = await _describe(apis, 6, NOBODY)
    assert dead.error_code == E.group_id_not_found and NOBODY in dead.error_message
    # another partition's group: this node is not its coordinator
    other = await _describe(apis, 5, ELSEWHERE)
    assert other.error_code == E.not_coordinator

    # a rebalance: members without their metadata and assignments, no protocol yet
    await _call(apis, LEAVE, 3, group_id=GROUP, members=[{"member_id": follower}])
    g = await _describe(apis, 5, GROUP)
    assert g.group_state == "PreparingRebalance" and g.protocol_data == ""
    assert [(m.member_id, m.member_metadata, m.member_assignment) for m in g.members] == [
        (leader, b"", b"")
    ]


async def test_a_group_is_deleted_only_when_empty_and_then_nothing_is_committed(
    node_apis,
) -> None:
    node, apis = node_apis
    leader, follower, gen = await _stable_pair(apis)
    assert await _commit(apis, {("t", 0): 5, ("t", 1): 7}, gen, leader) == {
        ("t", 0): E.none,
        ("t", 1): E.none,
    }
    answer = await _call(apis, DELETE, 2, groups_names=[GROUP])
    assert [(r.group_id, r.error_code) for r in answer.results] == [(GROUP, E.non_empty_group)]
    assert await _committed(apis) == {("t", 0): 5, ("t", 1): 7}

    left = await _call(
        apis, LEAVE, 3, group_id=GROUP, members=[{"member_id": leader}, {"member_id": follower}]
    )
    assert [m.error_code for m in left.members] == [E.none, E.none]
    g = await _describe(apis, 5, GROUP)
    assert (g.group_state, g.members) == ("Empty", ())
    listed = await _call(apis, LIST, 4)
    assert [(x.group_id, x.group_state) for x in listed.groups] == [(GROUP, "Empty")]

    # the client role may list and describe, not delete
    CALLER.set(Role.CLIENT)
    refused = await _call(apis, DELETE, 1, groups_names=[GROUP])
    assert refused.results[0].error_code == E.group_authorization_failed
    g = await _describe(apis, 3, GROUP, operations=True)
    assert g.authorized_operations == (1 << 3) | (1 << 8)
    assert await _committed(apis) == {("t", 0): 5, ("t", 1): 7}
    CALLER.set(Role.ADMIN)

    for version in range(API_VERSIONS[DELETE][1], API_VERSIONS[DELETE][2] + 1):
        answer = await _call(apis, DELETE, version, groups_names=[GROUP, ELSEWHERE])
        codes = {r.group_id: r.error_code for r in answer.results}
        expected = E.none if version == 0 else E.group_id_not_found
        assert codes == {GROUP: expected, ELSEWHERE: E.not_coordinator}
    assert await _committed(apis) == {}
    g = await _describe(apis, 5, GROUP)
    assert g.group_state == "Dead"
    assert (await _call(apis, LIST, 4)).groups == ()
    # every replica applied the deletion: a new leader loads no group
    stm = node.partitions[100 + partition_for(GROUP, PARTITIONS)].group_stm
    assert GROUP not in stm.state.groups
    restored = OffsetsState()
    restored.restore(stm.state.snapshot())
    assert GROUP not in restored.groups
    # the id can be used again: a new group, from nothing
    again, _ = await asyncio.gather(_join(apis, "client-c"), asyncio.sleep(0))
    assert again.error_code == E.none and again.generation_id == 1


async def test_a_join_or_commit_during_a_deletion_is_refused_not_lost(node_apis) -> None:
    node, apis = node_apis
    assert await _commit(apis, {("t", 0): 3}) == {("t", 0): E.none}
    consensus = node.consensus[partition_for(GROUP, PARTITIONS)]
    consensus.auto_commit = False  # the deletion's write waits for its quorum
    deleting = asyncio.ensure_future(_call(apis, DELETE, 2, groups_names=[GROUP]))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not deleting.done()
    joined = await _join(apis, "late")
    assert joined.error_code == E.not_coordinator  # the client finds the group again
    assert await _commit(apis, {("t", 1): 9}) == {("t", 1): E.not_coordinator}
    (g,) = (await _call(apis, DELETE, 2, groups_names=[GROUP])).results
    assert g.error_code == E.group_id_not_found  # being deleted
    consensus.commit()
    assert (await deleting).results[0].error_code == E.none
    consensus.auto_commit = True
    assert await _committed(apis) == {}
    assert await _commit(apis, {("t", 1): 9}) == {("t", 1): E.none}
    assert await _committed(apis) == {("t", 1): 9}


async def test_a_deletion_whose_leadership_is_lost_deletes_nothing(node_apis) -> None:
    node, apis = node_apis
    assert await _commit(apis, {("t", 0): 3}) == {("t", 0): E.none}
    consensus = node.consensus[partition_for(GROUP, PARTITIONS)]
    consensus.auto_commit = False
    deleting = asyncio.ensure_future(_call(apis, DELETE, 2, groups_names=[GROUP]))
    for _ in range(20):
        await asyncio.sleep(0)
    consensus.new_term(keep_uncommitted=False)  # another node won: the write is gone
    consensus.auto_commit = True
    (r,) = (await deleting).results
    assert r.error_code in (E.not_coordinator, E.coordinator_not_available)
    assert await _committed(apis) == {("t", 0): 3}
    (r,) = (await _call(apis, DELETE, 2, groups_names=[GROUP])).results
    assert r.error_code == E.none and await _committed(apis) == {}


async def test_offset_delete_follows_kafkas_rules(node_apis) -> None:
    _node, apis = node_apis

    async def offset_delete(group: str, rows: dict[str, list[int]]):
        answer = await _call(
            apis,
            OFFSET_DELETE,
            0,
            group_id=group,
            topics=[
                {"name": t, "partitions": [{"partition_index": p} for p in ps]}
                for t, ps in rows.items()
            ],
        )
        codes = {
            (t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions
        }
        return answer.error_code, codes

    assert await offset_delete(GROUP, {"t": [0]}) == (E.group_id_not_found, {})
    assert await _commit(apis, {("t", 0): 3, ("t", 1): 4, ("u", 0): 5}) == dict.fromkeys(
        [("t", 0), ("t", 1), ("u", 0)], E.none
    )
    # an empty group: deleted; no offset or an unknown partition
    assert await offset_delete(GROUP, {"t": [0], "nope": [0], "u": [3]}) == (
        E.none,
        {
            ("t", 0): E.none,
            ("nope", 0): E.unknown_topic_or_partition,
            ("u", 3): E.unknown_topic_or_partition,
        },
    )
    assert await _committed(apis) == {("t", 1): 4, ("u", 0): 5}

    # members subscribed to t: its offsets stay, u's go
    _leader, _follower, _gen = await _stable_pair(apis)
    assert await offset_delete(GROUP, {"t": [1], "u": [0]}) == (
        E.none,
        {("t", 1): E.group_subscribed_to_topic, ("u", 0): E.none},
    )
    assert await _committed(apis) == {("t", 1): 4}

    CALLER.set(Role.CLIENT)
    assert await offset_delete(GROUP, {"t": [1]}) == (E.group_authorization_failed, {})
    CALLER.set(Role.ADMIN)
    assert await offset_delete(ELSEWHERE, {"t": [1]}) == (E.not_coordinator, {})
    assert await _committed(apis) == {("t", 1): 4}


def test_the_deletion_commands_are_checked_and_survive_a_snapshot() -> None:
    state = OffsetsState()
    rows = [["t", 0, 5, -1, ""], ["t", 1, 6, -1, "md"]]
    assert state.apply({"op": "commit", "group": "g", "offsets": rows}, 0)["status"] == "ok"
    assert state.apply({"op": "commit", "group": "h", "offsets": rows}, 1)["status"] == "ok"
    bad = state.apply({"op": "delete_offsets", "group": "g", "offsets": [["t", -1]]}, 2)
    assert (
        bad["status"] == "error"
        and "offsets: expected a list of [topic, partition" in (bad["error"])
    )
    assert state.apply({"op": "delete_offsets", "group": "g", "offsets": [["t", 0]]}, 3) == {
        "status": "ok"
    }
    assert state.apply({"op": "delete_group", "group": "h"}, 4) == {"status": "ok"}
    unknown = state.apply({"op": "drop", "group": "g"}, 5)
    assert "op: expected one of" in unknown["error"]
    restored = OffsetsState()
    restored.restore(state.snapshot())
    assert set(restored.groups) == {"g"}
    assert [k for k in restored.groups["g"].offsets] == [("t", 1)]


async def test_an_empty_group_with_a_member_id_handed_out_is_deleted_as_kafka_does(
    node_apis,
) -> None:
    """Kafka deletes a group by its state: an id handed out with MEMBER_ID_REQUIRED
    (v4+) and not joined with yet goes with it."""
    _node, apis = node_apis
    assert await _commit(apis, {("t", 0): 3}) == {("t", 0): E.none}
    first = await _call(
        apis,
        JOIN,
        5,
        "early",
        group_id=GROUP,
        session_timeout=10_000,
        rebalance_timeout=10_000,
        member_id="",
        protocol_type="consumer",
        protocols=[{"name": "range", "metadata": _subscription("t")}],
    )
    assert first.error_code == E.member_id_required and first.member_id
    assert (await _describe(apis, 5, GROUP)).group_state == "Empty"
    (r,) = (await _call(apis, DELETE, 2, groups_names=[GROUP])).results
    assert r.error_code == E.none and await _committed(apis) == {}
    late = await _join(apis, "early", member=first.member_id)
    assert late.error_code == E.unknown_member_id
