"""Where the log starts after prefix truncation, and the term just before it.

``prefix_truncate`` saves this record *before* deleting segments, so after a
crash mid-way open knows which leftover segments to finish deleting, and
``term_at(start_offset - 1)`` still answers once the segment holding that
offset is gone.
"""

from __future__ import annotations

import dataclasses
import pathlib
import struct

from raftlog.storage.api import StorageCorruption
from raftlog.storage.durable_record import load_record, save_record
from raftlog.storage.fs import REAL_FS, FileSystem

FILE_NAME = "start_offset"
_MAGIC = b"RLSO"
_START = struct.Struct("<qq")


@dataclasses.dataclass(frozen=True, slots=True)
class StartRecord:
    """``start_offset``: first offset kept; ``prev_term``: term of ``start_offset - 1``."""

    start_offset: int
    prev_term: int


class StartRecordStore:
    """Keeps the :class:`StartRecord` in ``<directory>/start_offset``."""

    def __init__(self, directory: pathlib.Path, fs: FileSystem = REAL_FS) -> None:
        self._path = directory / FILE_NAME
        self._fs = fs

    def save(self, record: StartRecord) -> None:
        save_record(
            self._path, _MAGIC, _START.pack(record.start_offset, record.prev_term), self._fs
        )

    def load(self) -> StartRecord | None:
        """The saved record, or None for a log that was never prefix-truncated."""
        payload = load_record(self._path, _MAGIC, self._fs)
        if payload is None:
            return None
        if len(payload) != _START.size:
            raise StorageCorruption(
                f"{self._path}: start record is {len(payload)} bytes, expected {_START.size}",
                str(self._path),
                0,
            )
        start, prev_term = _START.unpack(payload)
        return StartRecord(start_offset=start, prev_term=prev_term)
