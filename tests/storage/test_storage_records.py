"""The atomically replaced records: vote, commit context, start offset."""

from __future__ import annotations

import pytest

from raftlog.storage.api import CommitContext, StorageCorruption, VoteState
from raftlog.storage.commit_context import CommitContextStore
from raftlog.storage.vote_store import VoteStore


def test_vote_is_replaced_and_survives_a_new_store(tmp_path):
    VoteStore(tmp_path).save(VoteState(term=3, voted_for=1))
    VoteStore(tmp_path).save(VoteState(term=4, voted_for=-1))
    assert VoteStore(tmp_path).load() == VoteState(term=4, voted_for=-1)
    assert [p.name for p in tmp_path.iterdir()] == ["vote"]  # no tmp file left behind


def test_only_the_latest_commit_context_is_kept(tmp_path):
    store = CommitContextStore(tmp_path)
    store.save(CommitContext(committed_offset=10, term=2, snapshot=b"a" * 3_000_000))
    store.save(CommitContext(committed_offset=12, term=2, snapshot=b"producers"))
    assert CommitContextStore(tmp_path).load() == CommitContext(12, 2, b"producers")
    assert (tmp_path / "commit_context").stat().st_size < 100


def test_damaged_record_is_an_error_naming_the_file(tmp_path):
    store = CommitContextStore(tmp_path)
    store.save(CommitContext(committed_offset=5, term=1, snapshot=b"snapshot"))
    path = tmp_path / "commit_context"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(StorageCorruption, match="commit_context: CRC mismatch") as err:
        store.load()
    assert err.value.path == str(path)
    (tmp_path / "vote").write_bytes(b"RLV")
    with pytest.raises(StorageCorruption, match="vote: record is 3 bytes"):
        VoteStore(tmp_path).load()


def test_bad_values_are_rejected_with_the_field_named(tmp_path):
    with pytest.raises(ValueError, match=r"vote\.term must be >= 0, got -1"):
        VoteStore(tmp_path).save(VoteState(term=-1))
    with pytest.raises(ValueError, match="committed_offset must be >= -1"):
        CommitContextStore(tmp_path).save(CommitContext(committed_offset=-2, term=0))
    assert not (tmp_path / "vote").exists()
