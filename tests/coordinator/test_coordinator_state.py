"""The transaction coordinator's pure state: registration, decisions, roll-forward data,
replays, snapshots and consistent cuts."""

from __future__ import annotations

import itertools
import json
import random

from raftlog.client.transactions import consistent_cut
from raftlog.coordinator.state import KEEP_VERSIONS, CoordinatorState, Participant
from raftlog.rpc.messages import CutParticipant, CutTransaction


class Log:
    """Applies commands at increasing offsets, as tm_stm does with its log."""

    def __init__(self) -> None:
        self.state = CoordinatorState()
        self.offsets = itertools.count(10)

    def __call__(self, op: str, **fields: object) -> dict:
        return self.state.apply(json.loads(json.dumps({"op": op, **fields})), next(self.offsets))


def part(attempt: str, run: str = "r1", partition: int = 0, pid: int | None = None) -> dict:
    return Participant(
        attempt, run, "t", partition, pid if pid is not None else hash((attempt, run)) & 0xFFFF, 0
    ).to_json()


def named(p: dict, records: int = 10, first: int = 100) -> dict:
    return {**p, "records": records, "last_sequence": records - 1, "first_offset": first}


def test_commit_names_exactly_the_given_participants_and_aborts_every_other() -> None:
    log = Log()
    a1, a2, b1 = part("1", pid=1), part("2", pid=2), part("3", pid=3)
    for p in (a1, a2, b1):
        assert log("register", writer="q", version=0, participant=p)["status"] == "registered"
    # attempts 1 and 3 succeeded; attempt 2 failed (or lost a speculation race)
    reply = log("decide", writer="q", version=0, run="r1", commit=True, named=[a1, b1])
    assert reply["status"] == "committed"
    assert [p["producer_id"] for p in reply["decision"]["named"]] == [1, 3]
    assert [p["producer_id"] for p in reply["decision"]["aborts"]] == [2]
    pending = log("pending", writer="q")
    assert pending["last_committed"] == 0
    assert [x["version"] for x in pending["pending"]] == [0]


def test_registration_after_the_decision_is_refused_for_the_run_and_after_commit_for_all() -> None:
    log = Log()
    log("register", writer="q", version=5, participant=part("1", pid=1))
    log("decide", writer="q", version=5, run="r1", commit=False)
    late = log("register", writer="q", version=5, participant=part("9", pid=9))
    assert late["status"] == "refused" and "already decided by run 'r1'" in late["error"]
    # an abort ends that run's transactions, not the version: another run may commit it
    other = part("1", run="r2", pid=11)
    assert log("register", writer="q", version=5, participant=other)["status"] == "registered"
    ok = log("decide", writer="q", version=5, run="r2", commit=True, named=[other])
    assert ok["status"] == "committed"
    again = log("register", writer="q", version=5, participant=part("1", run="r3", pid=12))
    assert again == {"status": "committed", "last_committed": 5}
    older = log("register", writer="q", version=4, participant=part("1", run="r3", pid=13))
    assert older["status"] == "committed"


def test_a_recorded_commit_is_final_and_a_replay_returns_it() -> None:
    log = Log()
    p = part("1", pid=1)
    log("register", writer="q", version=0, participant=p)
    first = log("decide", writer="q", version=0, run="r1", commit=True, named=[named(p)])
    # Spark calls abort() after a commit() that raised: it gets the commit back
    abort = log("decide", writer="q", version=0, run="r1", commit=False)
    assert abort["status"] == "committed" and abort["decision"] == first["decision"]
    # a restarted query (new run) replays the batch: nothing new is decided
    replay = log("decide", writer="q", version=0, run="r2", commit=True, named=[])
    assert replay["status"] == "committed" and replay["decision"] == first["decision"]


def test_commit_after_abort_by_the_same_run_is_refused() -> None:
    log = Log()
    p = part("1", pid=1)
    log("register", writer="q", version=0, participant=p)
    log("decide", writer="q", version=0, run="r1", commit=False)
    again = log("decide", writer="q", version=0, run="r1", commit=True, named=[p])
    assert again["status"] == "aborted"


def test_abort_lists_only_its_own_runs_participants_and_never_twice() -> None:
    log = Log()
    mine, theirs = part("1", run="r1", pid=1), part("1", run="r0", pid=2)
    log("register", writer="q", version=3, participant=theirs)
    log("register", writer="q", version=3, participant=mine)
    a = log("decide", writer="q", version=3, run="r1", commit=False)
    assert [p["producer_id"] for p in a["decision"]["aborts"]] == [1]
    new = part("1", run="r2", pid=3)
    log("register", writer="q", version=3, participant=new)
    c = log("decide", writer="q", version=3, run="r2", commit=True, named=[new])
    assert [p["producer_id"] for p in c["decision"]["aborts"]] == [2]  # r0's, not r1's again


def test_complete_records_markers_and_pending_empties() -> None:
    log = Log()
    a, b = part("1", pid=1), part("2", pid=2)
    for p in (a, b):
        log("register", writer="q", version=0, participant=p)
    log("decide", writer="q", version=0, run="r1", commit=True, named=[named(a)])
    half = log("complete", writer="q", version=0, run="r1", markers={"1": 120})
    assert half == {"status": "ok", "complete": False}
    assert len(log("pending", writer="q")["pending"]) == 1
    done = log("complete", writer="q", version=0, run="r1", markers={"2": -1})
    assert done == {"status": "ok", "complete": True}
    assert log("pending", writer="q")["pending"] == []
    assert log("all_pending")["pending"] == []


def test_bad_commands_name_the_field_and_change_nothing() -> None:
    log = Log()
    before = log.state.snapshot()
    cases = [
        ({"op": "nope"}, "op: expected one of"),
        ({"op": "register", "writer": "", "version": 0}, "writer: expected a string"),
        ({"op": "register", "writer": "q", "version": -1}, "version: expected an integer"),
        ({"op": "register", "writer": "q", "version": 2**63}, "version: expected an integer"),
        (
            {"op": "register", "writer": "q", "version": 0, "participant": {"attempt": "1"}},
            "run: expected a string",
        ),
        (
            {"op": "decide", "writer": "q", "version": 0, "run": "r", "commit": "yes"},
            "commit: expected true or false",
        ),
        (
            {
                "op": "decide",
                "writer": "q",
                "version": 0,
                "run": "r",
                "commit": True,
                "named": [part("x", pid=5)],
            },
            "was never registered",
        ),
    ]
    for command, text in cases:
        reply = log.state.apply(command, next(log.offsets))
        assert reply["status"] == "error" and text in reply["error"], (command, reply)
    assert log.state.apply([1, 2], next(log.offsets))["error"] == "command: expected a JSON object"
    assert json.loads(log.state.snapshot())["writers"] == json.loads(before)["writers"] == {}


def test_old_complete_versions_are_pruned_but_the_last_committed_is_kept() -> None:
    log = Log()
    for v in range(KEEP_VERSIONS + 20):
        p = part("1", run=f"r{v}", pid=1000 + v)
        log("register", writer="q", version=v, participant=p)
        log("decide", writer="q", version=v, run=f"r{v}", commit=True, named=[named(p)])
        log("complete", writer="q", version=v, run=f"r{v}", markers={str(1000 + v): 5})
    kept = log.state.writers["q"].versions
    assert min(kept) >= 20 - 1 and len(kept) <= KEEP_VERSIONS + 1
    assert log.state.writers["q"].last_committed == KEEP_VERSIONS + 19
    stale = log("register", writer="q", version=0, participant=part("1", run="z", pid=7))
    assert stale["status"] == "committed"


def test_snapshot_restores_an_equal_state_and_replays_idempotently() -> None:
    rng = random.Random(7)
    log = Log()
    for v in range(30):
        parts = [part(str(i), run=f"r{v % 3}", pid=v * 10 + i) for i in range(rng.randint(1, 4))]
        for p in parts:
            log("register", writer=f"w{v % 2}", version=v, participant=p)
        ok = parts[: rng.randint(0, len(parts))]
        log("decide", writer=f"w{v % 2}", version=v, run=f"r{v % 3}", commit=bool(ok), named=ok)
    snap = log.state.snapshot()
    other = CoordinatorState()
    other.restore(snap)
    assert other.snapshot() == snap
    # a command at or below the applied offset is not applied twice
    assert other.apply({"op": "delete_writer", "writer": "w0"}, 5)["status"] == "error"
    assert other.snapshot() == snap


def cut_txn(complete: bool, *parts: tuple[int, int, int]) -> CutTransaction:
    return CutTransaction(
        "q", 0, complete, [CutParticipant(p, first, marker) for p, first, marker in parts]
    )


def test_consistent_cut_takes_out_a_batch_seen_on_some_partitions_only() -> None:
    # batch A: data at p0 [10..19] marker 20, p1 [5..9] marker 30
    a = cut_txn(True, (0, 10, 20), (1, 5, 30))
    assert consistent_cut({0: 25, 1: 31}, [a]) == {0: 25, 1: 31}  # all in
    assert consistent_cut({0: 10, 1: 5}, [a]) == {0: 10, 1: 5}  # all out
    # p0's end is past the data but not the marker: another writer's open transaction
    # holds the LSO there, and the rows below it are read (found by the simulation)
    assert consistent_cut({0: 15, 1: 5}, [a]) == {0: 10, 1: 5}
    assert consistent_cut({0: 25, 1: 20}, [a]) == {0: 10, 1: 5}  # fractured: taken out
    # not complete: a marker may be written that the coordinator does not know yet
    b = cut_txn(False, (0, 10, -1), (1, 5, -1))
    assert consistent_cut({0: 25, 1: 20}, [b]) == {0: 10, 1: 5}


def test_consistent_cut_cascades_until_nothing_changes() -> None:
    # taking A out of p1 (cut to 5) takes C's marker on p1 (at 8) out, so C leaves p2 too
    a = cut_txn(False, (0, 10, -1), (1, 5, -1))
    c = cut_txn(True, (1, 6, 8), (2, 40, 50))
    assert consistent_cut({0: 25, 1: 20, 2: 60}, [c, a]) == {0: 10, 1: 5, 2: 40}


def test_abort_run_aborts_only_that_runs_undecided_registrations() -> None:
    log = Log()
    mine, other = part("1", run="r1", pid=1), part("2", run="r0", pid=2)
    log("register", writer="q", version=4, participant=mine)
    log("register", writer="q", version=4, participant=other)
    log("register", writer="z", version=5, participant=part("3", run="r1", pid=3))
    reply = log("abort_run", run="r1", version=4)
    assert [(a["writer"], a["version"]) for a in reply["aborted"]] == [("q", 4)]
    assert [p["producer_id"] for p in reply["aborted"][0]["decision"]["aborts"]] == [1]
    assert log("abort_run", run="r1", version=4)["aborted"] == []  # decided: nothing more
    assert log("register", writer="q", version=4, participant=mine)["status"] == "refused"


def test_cut_leaves_out_the_transactions_of_an_earlier_topic_of_the_same_name() -> None:
    log = Log()
    old = {**part("1", pid=1), "topic_id": 1}  # written before the topic was deleted
    new = {**part("2", pid=2), "topic_id": 4}  # written to the topic created again
    for version, p in enumerate((old, new)):
        assert log("register", writer="q", version=version, participant=p)["status"] == (
            "registered"
        )
        log("decide", writer="q", version=version, run="r1", commit=True, named=[named(p)])

    def versions(**cut: object) -> list[int]:
        return [t["version"] for t in log("cut", topic="t", **cut)["transactions"]]

    assert versions(topic_id=4) == [1]
    assert versions(topic_id=1) == [0]
    assert versions() == [0, 1]  # a reader that does not know the id: every one
    # a participant from before ids were recorded (-1) counts for every incarnation
    legacy = part("3", pid=3)
    log("register", writer="q", version=2, participant=legacy)
    log("decide", writer="q", version=2, run="r1", commit=True, named=[named(legacy)])
    assert versions(topic_id=4) == [1, 2]
    assert log("cut", topic="t", topic_id="4")["error"].startswith("topic_id: expected")
