"""A small file replaced atomically and checked by CRC on load.

Used for the vote record, the commit context and the log's start-offset
record. A save writes ``<name>.tmp``, fsyncs it, renames it over ``<name>``
and fsyncs the directory, so after a crash the file holds either the old or
the new record, never a mix. The framing (magic, length, CRC32C) catches
damage from outside (a disk error, a hand edit) on load.

File layout (little-endian): ``magic[4] payload_len:u64 crc32c:u32 payload``.
"""

from __future__ import annotations

import pathlib
import struct

import crc32c

from raftlog.storage.api import StorageCorruption
from raftlog.storage.fs import REAL_FS, FileSystem

_FRAME = struct.Struct("<4sQI")
TMP_SUFFIX = ".tmp"


def frame_record(magic: bytes, payload: bytes) -> bytes:
    """The file's bytes for ``payload``: what :func:`save_record` writes (and
    :class:`~raftlog.storage.record_writer.RecordWriter` writes for many at once)."""
    if len(magic) != 4:
        raise ValueError(f"magic must be 4 bytes, got {magic!r}")
    return _FRAME.pack(magic, len(payload), crc32c.crc32c(payload)) + payload


def tmp_path(path: pathlib.Path) -> pathlib.Path:
    """Where a new record for ``path`` is written before it is renamed over it."""
    return path.with_name(path.name + TMP_SUFFIX)


def save_record(path: pathlib.Path, magic: bytes, payload: bytes, fs: FileSystem = REAL_FS) -> None:
    """Durably replace ``path`` with ``payload`` (write tmp, fsync, rename, fsync dir).

    Returns only once the new record survives a power cut; a crash before that
    leaves the old record (or none, if there was none) and maybe a ``.tmp`` file.
    """
    tmp = tmp_path(path)
    fs.write_file(tmp, frame_record(magic, payload), fsync=True)
    fs.rename(tmp, path)
    # Without this the rename (and, for a first save, the name itself) may be lost.
    fs.fsync_dir(path.parent)


def load_record(path: pathlib.Path, magic: bytes, fs: FileSystem = REAL_FS) -> bytes | None:
    """The payload saved at ``path``; None when no record was ever saved.

    Raises :class:`StorageCorruption` (naming the file) when the record is
    damaged: since saves are atomic, damage is never a torn write of ours.
    """
    data = fs.read_file(path)
    if data is None:
        return None
    if len(data) < _FRAME.size:
        raise StorageCorruption(
            f"{path}: record is {len(data)} bytes, shorter than its {_FRAME.size}-byte header",
            str(path),
            0,
        )
    found_magic, length, crc = _FRAME.unpack_from(data, 0)
    if found_magic != magic:
        raise StorageCorruption(
            f"{path}: bad magic {found_magic!r} at position 0, expected {magic!r}", str(path), 0
        )
    payload = data[_FRAME.size :]
    if len(payload) != length:
        raise StorageCorruption(
            f"{path}: payload is {len(payload)} bytes, header says {length}",
            str(path),
            _FRAME.size,
        )
    if crc32c.crc32c(payload) != crc:
        raise StorageCorruption(
            f"{path}: CRC mismatch in record payload at position {_FRAME.size}",
            str(path),
            _FRAME.size,
        )
    return payload
