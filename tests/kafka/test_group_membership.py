"""The consumer group state machine (raftlog.kafka.groups.membership) and the state of
``__consumer_offsets`` (raftlog.coordinator.offsets_state), without IO or a clock:
Kafka's classic group protocol transition by transition."""

from __future__ import annotations

import json

from kio.schema.errors import ErrorCode as E

from raftlog.coordinator.group_stm import partition_for
from raftlog.coordinator.offsets_state import OffsetsState
from raftlog.kafka.groups.membership import Group, GroupState

SESSION, REBALANCE, DELAY = 10_000, 30_000, 3_000


def _join(g: Group, member: str, now: int, *, new: str = "", v4: bool = False, meta=b"m"):
    return g.join(
        member,
        new_member_id=new or f"new-{now}",
        client_id="c",
        client_host="",
        session_timeout_ms=SESSION,
        rebalance_timeout_ms=REBALANCE,
        protocol_type="consumer",
        protocols=[("range", meta + (member or new).encode())],
        require_known_member_id=v4,
        now_ms=now,
    )


def _stable_pair() -> tuple[Group, str, str]:
    """A group of members a (leader) and b at generation 1, assignments stored."""
    g = Group("g", initial_delay_ms=DELAY)
    assert _join(g, "", 0, new="a")[0] is None
    assert _join(g, "", 10, new="b")[0] is None
    fx = g.tick(DELAY + 10)
    assert {j.member_id for j in fx.joins} == {"a", "b"}
    assert g.sync("b", 1, {}, DELAY + 20)[0] is None
    answer, fx = g.sync("a", 1, {"a": b"A", "b": b"B"}, DELAY + 30)
    assert answer is None and fx.store == 1
    done = g.stored(1, E.none, DELAY + 40)
    assert {(s.member_id, s.assignment) for s in done.syncs} == {("a", b"A"), ("b", b"B")}
    assert g.state is GroupState.STABLE
    return g, "a", "b"


def test_members_starting_together_land_in_one_generation_after_the_initial_delay() -> None:
    g = Group("g", initial_delay_ms=DELAY)
    a, fx = _join(g, "", 0, new="a")
    assert a is None and not fx.joins and g.state is GroupState.PREPARING_REBALANCE
    b, fx = _join(g, "", 1000, new="b")
    assert b is None and not fx.joins  # every member joined, but the first rebalance holds
    assert not g.tick(2999).joins
    fx = g.tick(1000 + DELAY)
    assert fx.rebalances == 1 and g.generation == 1
    answers = {j.member_id: j for j in fx.joins}
    assert answers["a"].leader == "a" and answers["b"].leader == "a"
    assert [m[0] for m in answers["a"].members] == ["a", "b"]  # the leader gets every member
    assert answers["a"].members[1][2] == b"mb"  # with its metadata
    assert answers["b"].members == ()  # a follower gets none
    assert g.state is GroupState.COMPLETING_REBALANCE and answers["a"].protocol_name == "range"


def test_join_v4_first_hands_out_a_member_id() -> None:
    g = Group("g", initial_delay_ms=0)
    answer, _ = _join(g, "", 0, new="m-1", v4=True)
    assert answer is not None and answer.error is E.member_id_required
    assert answer.member_id == "m-1" and "m-1" in g.pending
    answer, fx = _join(g, "m-1", 5, v4=True)
    assert answer is None and [j.member_id for j in fx.joins] == ["m-1"]
    assert fx.joins[0].error is E.none and g.generation == 1


def test_heartbeats_name_unknown_members_wrong_generations_and_rebalances() -> None:
    g, a, b = _stable_pair()
    assert g.heartbeat(a, 1, 5000) is E.none
    assert g.heartbeat("nobody", 1, 5000) is E.unknown_member_id
    assert g.heartbeat(a, 7, 5000) is E.illegal_generation
    assert _join(g, "", 5000, new="c")[0] is None  # a new member: rebalance
    assert g.heartbeat(a, 1, 5001) is E.rebalance_in_progress
    assert g.sync(b, 1, {}, 5002)[0].error is E.rebalance_in_progress


def test_an_expired_session_removes_the_member_and_the_rest_rebalance() -> None:
    g, a, b = _stable_pair()
    now = DELAY + 40
    assert g.heartbeat(a, 1, now + SESSION - 1) is E.none  # a lives; b says nothing
    fx = g.tick(now + SESSION + 1)
    assert b not in g.members and g.state is GroupState.PREPARING_REBALANCE
    assert not fx.joins
    answer, fx = _join(g, a, now + SESSION + 2)
    assert answer is None and [j.member_id for j in fx.joins] == [a]
    assert g.generation == 2 and fx.joins[0].leader == a


def test_a_member_that_does_not_rejoin_in_time_is_dropped_at_the_rebalance_deadline() -> None:
    g, a, b = _stable_pair()
    t = 10_000
    assert _join(g, "", t, new="c")[0] is None
    assert _join(g, a, t + 1)[0] is None
    assert g.heartbeat(b, 1, t + 2) is E.rebalance_in_progress  # alive, but never rejoins
    for step in range(1, REBALANCE // 1000):
        g.heartbeat(b, 1, t + step * 1000)
        assert not g.tick(t + step * 1000).joins
    fx = g.tick(t + REBALANCE + 1)
    assert {j.member_id for j in fx.joins} == {a, "c"} and b not in g.members
    assert g.generation == 2


def test_leaving_rebalances_and_the_last_leave_empties_the_group() -> None:
    g, a, b = _stable_pair()
    error, fx = g.leave(b, 5000)
    assert error is E.none and g.state is GroupState.PREPARING_REBALANCE
    assert g.leave("nobody", 5000)[0] is E.unknown_member_id
    error, fx = g.leave(a, 5001)
    assert error is E.none and g.state is GroupState.EMPTY
    assert fx.store == 2 and g.generation == 2 and g.record()["members"] == []


def test_offset_commits_follow_kafkas_rules() -> None:
    g = Group("g", initial_delay_ms=0)
    assert g.commit_error("", -1, 0) is None  # no membership: an empty group commits
    g, a, _ = _stable_pair()
    assert g.commit_error(a, 1, 5000) is None
    assert g.commit_error("", -1, 5000) is E.unknown_member_id
    assert g.commit_error("nobody", 1, 5000) is E.unknown_member_id
    assert g.commit_error(a, 0, 5000) is E.illegal_generation
    _join(g, "", 5000, new="c")
    assert g.commit_error(a, 1, 5001) is None  # preparing: the old generation still commits
    g2 = Group("g2", initial_delay_ms=0)
    _join(g2, "", 0, new="x")
    assert g2.commit_error("x", 1, 1) is E.rebalance_in_progress  # assignments not out yet


def test_an_inconsistent_protocol_and_a_full_group_are_refused() -> None:
    g, _a, _ = _stable_pair()
    answer, _ = g.join(
        "",
        new_member_id="z",
        client_id="c",
        client_host="",
        session_timeout_ms=SESSION,
        rebalance_timeout_ms=REBALANCE,
        protocol_type="consumer",
        protocols=[("roundrobin-only", b"")],
        require_known_member_id=False,
        now_ms=1,
    )
    assert answer is not None and answer.error is E.inconsistent_group_protocol
    small = Group("s", initial_delay_ms=0, max_members=1)
    _join(small, "", 0, new="one")
    answer, _ = _join(small, "", 1, new="two")
    assert answer is not None and answer.error is E.group_max_size_reached
    assert list(small.members) == ["one"]


def test_a_record_reloads_the_same_generation_and_assignments() -> None:
    g, a, b = _stable_pair()
    record = json.loads(json.dumps(g.record()))  # as group_stm keeps it
    loaded = Group.from_record("g", record, 100_000)
    assert loaded.state is GroupState.STABLE and loaded.generation == 1
    assert loaded.leader == a and loaded.heartbeat(b, 1, 100_001) is E.none
    assert loaded.sync(b, 1, {}, 100_002)[0].assignment == b"B"
    assert loaded.commit_error(a, 1, 100_003) is None


def test_unloading_answers_every_parked_request_not_coordinator() -> None:
    g, a, _b = _stable_pair()
    _join(g, "", 10_000, new="c")
    fx = g.unload()
    assert [(j.member_id, j.error) for j in fx.joins] == [("c", E.not_coordinator)]
    assert g.state is GroupState.DEAD and g.heartbeat(a, 1, 10_001) is E.not_coordinator


def test_a_failed_store_answers_the_syncs_with_its_error_and_rebalances() -> None:
    g = Group("g", initial_delay_ms=0)
    _join(g, "", 0, new="a")
    assert g.sync("a", 1, {"a": b"A"}, 1)[1].store == 1
    fx = g.stored(1, E.not_coordinator, 2)
    assert [(s.member_id, s.error) for s in fx.syncs] == [("a", E.not_coordinator)]
    assert g.state is GroupState.PREPARING_REBALANCE and g.members["a"].assignment == b""


def test_a_stale_store_after_a_rebalance_answers_nothing() -> None:
    g = Group("g", initial_delay_ms=0)
    _join(g, "", 0, new="a")
    g.sync("a", 1, {"a": b"A"}, 1)
    _join(g, "", 2, new="b")  # a new member: generation 1's store is moot
    assert g.stored(1, E.none, 3).syncs == []
    assert g.state is GroupState.PREPARING_REBALANCE


def test_offsets_state_applies_commits_and_metadata_and_survives_a_snapshot() -> None:
    s = OffsetsState()
    ok = s.apply({"op": "commit", "group": "g", "offsets": [["t", 0, 42, -1, "md"]]}, 0)
    assert ok == {"status": "ok"}
    s.apply({"op": "commit", "group": "g", "offsets": [["t", 0, 50, 3, ""]]}, 1)
    s.apply({"op": "group", "group": "g", "generation": 4, "members": []}, 2)
    bad = s.apply({"op": "commit", "group": "g", "offsets": [["t", -1, 1, -1, ""]]}, 3)
    assert bad["status"] == "error" and "offsets[0]" in bad["error"]
    assert s.apply({"op": "nope", "group": "g"}, 4)["error"].startswith("op:")
    restored = OffsetsState()
    restored.restore(s.snapshot())
    assert restored.applied_offset == 4
    c = restored.groups["g"].offsets[("t", 0)]
    assert (c.offset, c.leader_epoch, c.metadata) == (50, 3, "")
    assert restored.groups["g"].metadata == {"generation": 4, "members": []}


def test_the_partition_of_a_group_is_kafkas() -> None:
    # Java: "hello".hashCode() == 99162322; Kafka: Utils.abs(hash) % partitions
    assert partition_for("hello", 50) == 99162322 % 50
    # a negative hashCode: "polygenelubricants".hashCode() == Integer.MIN_VALUE -> 0
    assert partition_for("polygenelubricants", 7) == 0
    assert all(0 <= partition_for(f"group-{i}", 8) < 8 for i in range(100))


def test_random_interleavings_keep_the_groups_invariants() -> None:
    """Seeded runs of members joining, syncing, heartbeating, leaving, stores landing
    late or failing, and time passing, in random order; after every step: the
    generation never goes down, a Stable or CompletingRebalance group's leader is a
    member and its protocol every member's, an Empty group has no member, every answer
    goes to a parked request (once), a successful sync's assignment is the one the
    leader of that generation gave. At the end, with time far ahead, the group is
    Empty and every parked request was answered. The static runs join with group
    instance ids (restarts without a member id among them): one member per instance
    id, and a Stable group's only parked joins are static rejoins awaiting their
    store."""
    for seed in range(200):
        _random_run(seed, static=False)
        _random_run(seed, static=True)


def _random_run(seed: int, static: bool) -> None:
    import random

    rng = random.Random(seed)
    g = Group("g", initial_delay_ms=rng.choice([0, 500]), max_members=4)
    now, generation = 0, 0
    parked_joins: set[str] = set()
    parked_syncs: set[str] = set()
    given: dict[tuple[int, str], bytes] = {}
    stores: list[int] = []
    known: list[str] = []

    def settle(fx) -> None:
        for j in fx.joins:
            assert j.member_id in parked_joins, (seed, j)
            parked_joins.discard(j.member_id)
        for sy in fx.syncs:
            assert sy.member_id in parked_syncs, (seed, sy)
            parked_syncs.discard(sy.member_id)
            if sy.error is E.none:
                assert given[(g.generation, sy.member_id)] == sy.assignment, seed
        if fx.store is not None:
            stores.append(fx.store)

    for _ in range(60):
        now += rng.choice([0, 10, 400] if static else [0, 10, 400, 2000, 6000])
        # static runs sync and store more: restarts of a Stable group's members
        ops = ["join", "sync", "sync", "sync", "beat", "tick", "store", "store", "leave"]
        op = rng.choice(
            ops if static else ["join", "join", "sync", "beat", "leave", "tick", "store"]
        )
        mid = rng.choice([*known, ""]) if known else ""
        if op == "join":
            new = f"m{len(known)}"
            instance = rng.choice(["ia", "ib", "ic"]) if static else None
            if static and rng.random() < 0.5:
                mid = ""  # a restart: only the instance id
            answer, fx = g.join(
                mid,
                new_member_id=new,
                client_id="c",
                client_host="",
                session_timeout_ms=5000,
                rebalance_timeout_ms=8000,
                protocol_type="consumer",
                protocols=[("range", b"r"), ("rr", b"x")],
                require_known_member_id=rng.random() < 0.5,
                now_ms=now,
                group_instance_id=instance,
            )
            who = mid or (answer.member_id if answer is not None else new)
            if who not in known and who:
                known.append(who)
            if answer is None:
                parked_joins.add(who)
            settle(fx)
        elif op == "sync" and mid:
            assignments = {m: f"{g.generation}-{m}".encode() for m in g.members}
            if mid == g.leader and g.storing is None:
                for m in g.members:
                    given[(g.generation, m)] = assignments[m]
            answer, fx = g.sync(mid, g.generation, assignments, now)
            if answer is None:
                parked_syncs.add(mid)
            settle(fx)
        elif op == "beat" and mid:
            g.heartbeat(mid, g.generation, now)
        elif op == "leave" and mid:
            _, fx = g.leave(mid, now)  # its parked requests: UNKNOWN_MEMBER_ID
            settle(fx)
        elif op == "store" and stores:
            error = rng.choice([E.none, E.none, E.not_coordinator])
            settle(g.stored(stores.pop(0), error, now))
        else:
            settle(g.tick(now))
        assert g.generation >= generation, seed
        generation = g.generation
        if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            assert g.leader in g.members, seed
            assert all(g.protocol in dict(m.protocols) for m in g.members.values())
        if g.state is GroupState.EMPTY:
            assert not g.members, seed
        if g.state is GroupState.STABLE:
            assert parked_joins <= set(g.static_stores), seed
        instances = [m.group_instance_id for m in g.members.values() if m.group_instance_id]
        assert len(instances) == len(set(instances)), seed
    while stores:
        settle(g.stored(stores.pop(0), E.none, now))
    settle(g.tick(now + 60_000))
    settle(g.tick(now + 120_000))
    assert g.state is GroupState.EMPTY and not g.members, seed
    assert not parked_joins and not parked_syncs, seed


def test_group_limit_flags_set_the_limits_and_are_checked_by_name() -> None:
    import argparse

    import pytest

    from raftlog.kafka.groups.limits import GroupLimits
    from raftlog.node.config import add_server_arguments, config_from_args

    def config(*extra: str):
        p = argparse.ArgumentParser()
        add_server_arguments(p)
        base = ["--node-id", "1", "--listen", "127.0.0.1:9000", "--data-dir", "/d"]
        return config_from_args(p.parse_args([*base, *extra]))

    assert config().kafka_group_limits == GroupLimits()
    limits = config(
        "--kafka-max-groups",
        "7",
        "--kafka-max-group-members",
        "3",
        "--kafka-max-group-metadata-bytes",
        "2048",
        "--kafka-max-offset-metadata-bytes",
        "0",
    ).kafka_group_limits
    assert (limits.max_groups, limits.max_members) == (7, 3)
    assert limits.max_member_metadata_bytes == limits.max_assignment_bytes == 2048
    assert limits.max_offset_metadata_bytes == 0
    with pytest.raises(ValueError, match="--kafka-max-group-members: expected 1"):
        config("--kafka-max-group-members", "0")
    with pytest.raises(ValueError, match="--kafka-max-group-metadata-bytes: expected 1024"):
        config("--kafka-max-group-metadata-bytes", "10")


# -- static membership (KIP-345) ---------------------------------------------------


def _static_join(g: Group, member: str, instance: str, now: int, *, new: str, meta=b"m"):
    return g.join(
        member,
        new_member_id=new,
        client_id="c",
        client_host="/10.0.0.1",
        session_timeout_ms=SESSION,
        rebalance_timeout_ms=REBALANCE,
        protocol_type="consumer",
        protocols=[("range", meta)],
        require_known_member_id=True,  # v4+: a static member needs no MEMBER_ID_REQUIRED
        now_ms=now,
        group_instance_id=instance,
    )


def _static_pair() -> Group:
    """Static members a (instance ia, the leader) and b (ib), generation 1, stable."""
    g = Group("g", initial_delay_ms=DELAY)
    assert _static_join(g, "", "ia", 0, new="a") == (None, _empty_effects())
    assert _static_join(g, "", "ib", 10, new="b")[0] is None
    fx = g.tick(DELAY + 10)
    assert {(j.member_id, j.error) for j in fx.joins} == {("a", E.none), ("b", E.none)}
    assert g.sync("b", 1, {}, DELAY + 20, "ib")[0] is None
    assert g.sync("a", 1, {"a": b"A", "b": b"B"}, DELAY + 30, "ia")[1].store == 1
    g.stored(1, E.none, DELAY + 40)
    assert g.state is GroupState.STABLE
    return g


def _empty_effects():
    from raftlog.kafka.groups.membership import Effects

    return Effects()


def test_a_restarted_static_member_takes_its_assignment_back_without_a_rebalance() -> None:
    g = _static_pair()
    now = DELAY + 1000
    # b's process restarts: no LeaveGroup (static), a new join without its member id
    answer, fx = _static_join(g, "", "ib", now, new="b2")
    assert answer is None and fx.store == 1 and not fx.joins and not fx.rebalances
    assert g.state is GroupState.STABLE and set(g.members) == {"a", "b2"}
    # answered once the record naming b2 is stored: the same generation, no rebalance
    fx = g.stored(1, E.none, now + 5)
    (joined,) = fx.joins
    assert (joined.member_id, joined.error, joined.generation, joined.leader) == (
        "b2",
        E.none,
        1,
        "a",
    )
    assert g.sync("b2", 1, {}, now + 10, "ib") == (
        g._sync_answer(g.members["b2"]),
        _empty_effects(),
    )
    assert g.sync("b2", 1, {}, now + 10, "ib")[0].assignment == b"B"
    assert g.generation == 1 and g.heartbeat("a", 1, now + 20, "ia") is E.none
    # the old id is fenced, a wrong or unknown instance id named
    assert g.heartbeat("b", 1, now + 20, "ib") is E.fenced_instance_id
    assert g.heartbeat("b2", 1, now + 20, "ia") is E.fenced_instance_id
    assert g.heartbeat("b2", 1, now + 20, "nobody") is E.unknown_member_id
    assert g.commit_error("b", 1, now + 20, "ib") is E.fenced_instance_id
    assert g.commit_error("b2", 1, now + 20, "ib") is None
    # the leader restarts too: it is still the leader, and gets the members again
    _static_join(g, "", "ia", now + 30, new="a2")
    (joined,) = g.stored(1, E.none, now + 35).joins
    assert joined.member_id == joined.leader == "a2"
    assert [m[:2] for m in joined.members] == [("b2", "ib"), ("a2", "ia")]
    # the stored record names the new ids: a new coordinator loads them
    loaded = Group.from_record("g", g.record(), now + 40, initial_delay_ms=DELAY)
    assert {m.member_id: m.group_instance_id for m in loaded.members.values()} == {
        "a2": "ia",
        "b2": "ib",
    }


def test_a_static_rejoin_with_another_subscription_or_during_a_rebalance_rebalances() -> None:
    g = _static_pair()
    answer, fx = _static_join(g, "", "ib", 5000, new="b2", meta=b"other topics")
    assert answer is None and fx.store is None
    assert g.state is GroupState.PREPARING_REBALANCE
    assert g.heartbeat("a", 1, 5010, "ia") is E.rebalance_in_progress
    answer, fx = _static_join(g, "a", "ia", 5020, new="x")  # the last to rejoin
    assert answer is None
    assert {j.member_id for j in fx.joins} == {"a", "b2"} and g.generation == 2

    # a rejoin whose store is under way when a rebalance starts: the rebalance answers
    g = _static_pair()
    _static_join(g, "", "ib", 5000, new="b2")
    error, fx = g.leave("", 5010, "ia")  # the leader leaves by its instance id
    # b2, parked, is the only member left, so it has rejoined: generation 2 at once
    assert error is E.none and g.state is GroupState.COMPLETING_REBALANCE
    (joined,) = fx.joins
    assert (joined.member_id, joined.generation, joined.leader) == ("b2", 2, "b2")
    assert not g.stored(1, E.none, 5020).joins  # the store's answer already went


def test_a_second_process_with_the_same_instance_id_fences_the_first() -> None:
    g = _static_pair()
    _static_join(g, "", "ib", 5000, new="b2")  # parked until stored
    answer, fx = _static_join(g, "", "ib", 5001, new="b3")
    assert answer is None
    assert [(j.member_id, j.error) for j in fx.joins] == [("b2", E.fenced_instance_id)]
    fx = g.stored(1, E.none, 5002)  # b2's store: b2 is gone, nothing to answer
    assert not fx.joins
    (joined,) = g.stored(1, E.none, 5003).joins
    assert joined.member_id == "b3" and joined.error is E.none
    assert g.leave("b2", 5004, "ib") == (E.fenced_instance_id, _empty_effects())
    assert g.leave("", 5004, "nobody") == (E.unknown_member_id, _empty_effects())


def test_a_failed_store_of_a_static_rejoin_answers_its_error() -> None:
    g = _static_pair()
    _static_join(g, "", "ib", 5000, new="b2")
    (joined,) = g.stored(1, E.not_coordinator, 5001).joins
    assert (joined.member_id, joined.error) == ("b2", E.not_coordinator)
    # it joins again (a new id), and this time the store succeeds
    _static_join(g, "", "ib", 5002, new="b3")
    (joined,) = g.stored(1, E.none, 5003).joins
    assert (joined.member_id, joined.error) == ("b3", E.none) and set(g.members) == {"a", "b3"}


def test_a_static_store_that_lands_after_a_rebalance_does_not_answer_a_later_rejoin() -> None:
    """Stores land in order: a rejoin's store overtaken by a rebalance (which answered
    the rejoin) must not be taken for the store of a rejoin after it."""
    g = _static_pair()
    _static_join(g, "", "ib", 5000, new="b2")  # store 1 (generation 1) under way
    # a's subscription changes: a rebalance, which b2's parked join is already in
    answer, fx = _static_join(g, "a", "ia", 5001, new="x", meta=b"changed")
    assert answer is None  # both rejoined: generation 2 answers a's and b2's joins
    assert {j.member_id for j in fx.joins} == {"a", "b2"} and g.generation == 2
    assert not g.stored(1, E.none, 5003).joins  # store 1 lands late: nothing due
    g.sync("b2", 2, {}, 5004, "ib")
    g.sync("a", 2, {"a": b"A2", "b2": b"B2"}, 5005, "ia")
    assert len(g.stored(2, E.none, 5006).syncs) == 2 and g.state is GroupState.STABLE
    _static_join(g, "", "ib", 6000, new="b3")  # store 3
    (joined,) = g.stored(2, E.none, 6001).joins
    assert (joined.member_id, joined.generation) == ("b3", 2)
