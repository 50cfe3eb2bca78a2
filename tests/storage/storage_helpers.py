"""Helpers shared by the storage tests: building batch runs and cutting files."""

from __future__ import annotations

import os
import pathlib

from raftlog.storage.batch import RecordBatch


def make_batches(
    base_offset: int, term: int, sizes: list[int], record_count: int = 2
) -> list[RecordBatch]:
    """Contiguous batches from ``base_offset``; payload i is ``sizes[i]`` recognisable bytes."""
    out = []
    offset = base_offset
    for i, size in enumerate(sizes):
        payload = bytes((offset + i + j) % 251 for j in range(size))
        out.append(
            RecordBatch.create(payload, record_count, timestamp_ms=1_000 + offset).stamped(
                offset, term
            )
        )
        offset += record_count
    return out


def segment_files(directory: pathlib.Path) -> list[pathlib.Path]:
    return sorted(directory.glob("*.log"))


def cut_file(path: pathlib.Path, size: int) -> None:
    os.truncate(path, size)


def flip_byte(path: pathlib.Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        old = f.read(1)
        f.seek(position)
        f.write(bytes([old[0] ^ 0xFF]))
