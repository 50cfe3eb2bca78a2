"""tm_stm applies a command as a follower receives it: a DATA batch decoded from the
frame, whose payload is a view of that frame, not bytes (a failover once left the
coordinator's group with no leader: every replica's applier failed on json.loads)."""

from __future__ import annotations

import json

from raftlog.client.transactions import Participant
from raftlog.coordinator.tm_stm import TmStm
from raftlog.rpc import codec
from raftlog.rpc.messages import FetchResponse
from raftlog.storage.batch import RecordBatch


class _Consensus:
    def add_state_machine(self, stm: TmStm) -> None:
        self.stm = stm


def _as_received(batch: RecordBatch) -> RecordBatch:
    frame = codec.encode(FetchResponse([batch], 1, 1, 0, 1))
    (received,) = codec.decode(frame, FetchResponse).batches
    assert isinstance(received.payload, memoryview)  # what a follower applies
    return received


def test_a_command_decoded_from_a_frame_is_applied() -> None:
    stm = TmStm(_Consensus())
    participant = Participant("1", "r1", "t", 0, 1, 0).to_json()
    command = {"op": "register", "writer": "q", "version": 0, "participant": participant}
    batch = RecordBatch.create(json.dumps(command).encode(), timestamp_ms=1).stamped(0, 1)
    stm.apply(_as_received(batch))
    assert stm.state.applied_offset == 0
    assert stm._results[0]["status"] == "registered"
    garbage = RecordBatch.create(b"{not json", timestamp_ms=1).stamped(1, 1)
    stm.apply(_as_received(garbage))  # answered with an error; the log moves on
    assert stm.state.applied_offset == 1 and stm._results[1]["status"] == "error"
