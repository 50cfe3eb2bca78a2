"""The latest commit context (varlog-style: only the latest is kept).

Replaced atomically (see :mod:`durable_record`), so a crash leaves either the
previous or the new context. The snapshot (the rm_stm producer table) may be
large-ish; it is written in the same single file so that offset and snapshot
always belong together.
"""

from __future__ import annotations

import pathlib
import struct

from raftlog.storage.api import CommitContext, StorageCorruption
from raftlog.storage.durable_record import frame_record, load_record, save_record
from raftlog.storage.fs import REAL_FS, FileSystem

FILE_NAME = "commit_context"
_MAGIC = b"RLCC"
_HEAD = struct.Struct("<qq")


class CommitContextStore:
    """Keeps the latest :class:`CommitContext` in ``<directory>/commit_context``."""

    def __init__(self, directory: pathlib.Path, fs: FileSystem = REAL_FS) -> None:
        self._path = directory / FILE_NAME
        self._fs = fs

    def save(self, ctx: CommitContext) -> None:
        """Durably replace the stored context with ``ctx``."""
        save_record(self._path, _MAGIC, self._payload(ctx), self._fs)

    def framed(self, ctx: CommitContext) -> tuple[pathlib.Path, bytes]:
        """The record's path and the bytes :meth:`save` would put there, for a writer
        that saves many groups' records at once (:mod:`raftlog.storage.record_writer`)."""
        return self._path, frame_record(_MAGIC, self._payload(ctx))

    @staticmethod
    def _payload(ctx: CommitContext) -> bytes:
        if ctx.committed_offset < -1:
            raise ValueError(
                "committed_offset must be >= -1 (-1: nothing committed), "
                f"got {ctx.committed_offset}"
            )
        if ctx.term < 0:
            raise ValueError(f"term must be >= 0, got {ctx.term}")
        return _HEAD.pack(ctx.committed_offset, ctx.term) + bytes(ctx.snapshot)

    def load(self) -> CommitContext | None:
        """The latest saved context; None when none was ever saved."""
        payload = load_record(self._path, _MAGIC, self._fs)
        if payload is None:
            return None
        if len(payload) < _HEAD.size:
            raise StorageCorruption(
                f"{self._path}: commit context is {len(payload)} bytes, "
                f"shorter than its {_HEAD.size}-byte header",
                str(self._path),
                0,
            )
        committed, term = _HEAD.unpack_from(payload, 0)
        return CommitContext(committed_offset=committed, term=term, snapshot=payload[_HEAD.size :])
