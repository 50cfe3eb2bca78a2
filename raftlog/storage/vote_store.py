"""Raft's term/vote record, replaced atomically (see :mod:`durable_record`)."""

from __future__ import annotations

import pathlib
import struct

from raftlog.storage.api import StorageCorruption, VoteState
from raftlog.storage.durable_record import frame_record, load_record, save_record
from raftlog.storage.fs import REAL_FS, FileSystem

FILE_NAME = "vote"
_MAGIC = b"RLVT"
_VOTE = struct.Struct("<qq")


class VoteStore:
    """The persistent ``VoteState`` of one Raft group, in ``<directory>/vote``."""

    def __init__(self, directory: pathlib.Path, fs: FileSystem = REAL_FS) -> None:
        self._path = directory / FILE_NAME
        self._fs = fs

    def save(self, vote: VoteState) -> None:
        """Durably replace the record; returns only once it survives a crash."""
        if vote.term < 0:
            raise ValueError(f"vote.term must be >= 0, got {vote.term}")
        save_record(self._path, _MAGIC, _VOTE.pack(vote.term, vote.voted_for), self._fs)

    def framed(self, vote: VoteState) -> tuple[pathlib.Path, bytes]:
        """The record's path and the bytes :meth:`save` would put there, for a writer
        that saves many groups' votes at once (:mod:`raftlog.storage.record_writer`)."""
        if vote.term < 0:
            raise ValueError(f"vote.term must be >= 0, got {vote.term}")
        return self._path, frame_record(_MAGIC, _VOTE.pack(vote.term, vote.voted_for))

    def load(self) -> VoteState:
        """The last saved vote, or ``VoteState()`` (term 0, no vote) when none was saved."""
        payload = load_record(self._path, _MAGIC, self._fs)
        if payload is None:
            return VoteState()
        if len(payload) != _VOTE.size:
            raise StorageCorruption(
                f"{self._path}: vote record is {len(payload)} bytes, expected {_VOTE.size}",
                str(self._path),
                0,
            )
        term, voted_for = _VOTE.unpack(payload)
        return VoteState(term=term, voted_for=voted_for)
