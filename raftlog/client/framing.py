"""Framing of several records in one batch payload (used by the CLI).

The engine never looks inside payloads. Payloads written by the Spark
connector are Arrow IPC streams; payloads written by ``raftlog produce`` (and
by :func:`frame_records`) hold ``record_count`` records, each::

    length  uint32 little-endian
    value   ``length`` bytes

A payload that does not parse this way is treated as one opaque value.
"""

from __future__ import annotations

import struct

_LEN = struct.Struct("<I")


def frame_records(values: list[bytes]) -> bytes:
    """One payload holding ``values``; pass ``len(values)`` as its record count."""
    return b"".join(_LEN.pack(len(v)) + bytes(v) for v in values)


def unframe_records(payload: bytes, record_count: int) -> list[bytes] | None:
    """The values framed in ``payload``, or None when it is not exactly
    ``record_count`` length-prefixed records (e.g. an Arrow IPC payload)."""
    out: list[bytes] = []
    pos = 0
    view = memoryview(payload)
    while pos < len(view):
        if pos + 4 > len(view):
            return None
        (n,) = _LEN.unpack_from(view, pos)
        pos += 4
        if pos + n > len(view):
            return None
        out.append(bytes(view[pos : pos + n]))
        pos += n
    return out if len(out) == record_count else None
