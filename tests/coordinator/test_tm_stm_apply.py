"""tm_stm applies a command as a follower receives it: a DATA batch decoded from the
frame, whose payload is a view of that frame, not bytes (a failover once left the
coordinator's group with no leader: every replica's applier failed on json.loads).
Commands are typed records of the codec, checked before anything is written; a log
entry a node wrote as JSON before that is still applied."""

from __future__ import annotations

import json

import pytest

from raftlog.coordinator.commands import Complete, Decide, MarkerOffset, Register
from raftlog.coordinator.state import CommandError
from raftlog.coordinator.tm_stm import TmStm
from raftlog.rpc import codec
from raftlog.rpc.messages import FetchResponse, Participant
from raftlog.storage.batch import RecordBatch


class _Consensus:
    """A leader that records what it is asked to replicate (nothing is, in these tests
    of refusals: the command is refused before)."""

    is_leader = True
    term = 1

    def __init__(self) -> None:
        self.replicated: list[object] = []

    def add_state_machine(self, stm: TmStm) -> None:
        self.stm = stm

    def replicate(self, batches: list[RecordBatch], *args: object) -> object:
        self.replicated.append(batches)
        raise AssertionError("a refused command reached the log")


def _as_received(batch: RecordBatch) -> RecordBatch:
    frame = codec.encode(FetchResponse([batch], 1, 1, 0, 1))
    (received,) = codec.decode(frame, FetchResponse).batches
    assert isinstance(received.payload, memoryview)  # what a follower applies
    return received


def _entry(payload: bytes, offset: int) -> RecordBatch:
    return _as_received(RecordBatch.create(payload, timestamp_ms=1).stamped(offset, 1))


PARTICIPANT = Participant("1", "r1", "t", 0, 1, 0)


def test_a_typed_command_decoded_from_a_frame_is_applied() -> None:
    stm = TmStm(_Consensus())
    stm.apply(_entry(stm.encode(Register("q", 0, PARTICIPANT)), 0))
    assert stm.state.applied_offset == 0
    assert stm._results[0]["status"] == "registered"
    stm.apply(_entry(stm.encode(Decide("q", 0, "r1", True, [PARTICIPANT])), 1))
    assert stm._results[1]["status"] == "committed"
    stm.apply(_entry(stm.encode(Complete("q", 0, "r1", [MarkerOffset(1, 7)])), 2))
    assert stm._results[2] == {"status": "ok", "complete": True}
    assert stm.state.writers["q"].versions[0].decisions["r1"].markers == {"1": 7}


def test_an_old_json_entry_is_still_applied() -> None:
    """A data directory written before commands were typed holds JSON commands."""
    stm = TmStm(_Consensus())
    participant = PARTICIPANT.to_json()
    command = {"op": "register", "writer": "q", "version": 0, "participant": participant}
    stm.apply(_entry(json.dumps(command).encode(), 0))
    assert stm.state.applied_offset == 0
    assert stm._results[0]["status"] == "registered"
    assert stm.state.writers["q"].versions[0].participants[1] == PARTICIPANT


def test_an_unreadable_entry_is_answered_with_an_error_and_the_log_moves_on() -> None:
    stm = TmStm(_Consensus())
    for offset, payload in enumerate([b"{not json", b"\x2c\x01\xff", b"", b"\xff\xff"]):
        stm.apply(_entry(payload or b"\x00", offset))
        assert stm.state.applied_offset == offset
        assert stm._results[offset]["status"] == "error"


@pytest.mark.parametrize(
    ("command", "field"),
    [
        (Register("q", -1, PARTICIPANT), "version"),
        (Register("q", 0, Participant("1", "r1", "t", 0, 1, 1 << 15)), "epoch"),
        (Register("q", 0, Participant("1", "r1", "t", -2, 1, 0)), "partition"),
        (Register("w" * 257, 0, PARTICIPANT), "writer"),
        (Register("", 0, PARTICIPANT), "writer"),
        (Complete("q", 0, "r1", [MarkerOffset(1, -2)]), "offset"),
        (Decide("q", 0, "", True, []), "run"),
    ],
)
async def test_a_bad_command_is_refused_before_anything_is_written(
    command: object, field: str
) -> None:
    consensus = _Consensus()
    stm = TmStm(consensus)
    with pytest.raises(CommandError, match=field):
        await stm.execute(command)
    assert consensus.replicated == []
    with pytest.raises(CommandError, match="expected a tm_stm command"):
        await stm.execute({"op": "register"})
