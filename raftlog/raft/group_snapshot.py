"""The snapshot saved with a group's commit context, and the configurations it restores.

A commit context (``raftlog.storage``) carries one opaque snapshot. A group
fills it with length-prefixed blobs: first the configuration effective at the
committed offset (JSON: its offset and the encoded configuration), then one blob
per state machine in registration order. :func:`load_configurations` rebuilds a
group's configuration history from that blob and the log above it.
"""

from __future__ import annotations

import json
import struct
from typing import Protocol

from raftlog.raft.configuration import Configuration, ConfigurationHistory
from raftlog.storage.api import CommitContext, LogStorage

SCAN_CHUNK = 1 << 20
"""Bytes read per call when a group scans its log (configurations, the applier)."""

_LEN = struct.Struct("<I")

SavedConfig = tuple[int, Configuration]
"""The configuration a snapshot carries: (the offset it was added at, the configuration)."""


def join(blobs: list[bytes]) -> bytes:
    """One snapshot from ``blobs`` (each length-prefixed)."""
    return b"".join(_LEN.pack(len(b)) + b for b in blobs)


def split(data: bytes) -> list[bytes]:
    """The blobs of a snapshot made by :func:`join` (a truncated last blob is cut short)."""
    out = []
    pos = 0
    while pos + _LEN.size <= len(data):
        (n,) = _LEN.unpack_from(data, pos)
        pos += _LEN.size
        out.append(data[pos : pos + n])
        pos += n
    return out


def config_blob(offset: int, config: Configuration) -> bytes:
    """The first blob: the configuration effective at the committed offset (added at ``offset``)."""
    return json.dumps({"offset": offset, "config": config.encode().decode()}).encode()


def saved_config(snapshot: bytes) -> SavedConfig | None:
    """The configuration saved in a snapshot; None when absent or invalid."""
    blobs = split(snapshot)
    if not blobs:
        return None
    try:
        doc = json.loads(blobs[0])
        return int(doc["offset"]), Configuration.decode(doc["config"].encode())
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def load_configurations(
    initial: Configuration, ctx: CommitContext | None, log: LogStorage
) -> ConfigurationHistory:
    """The configuration history: from the commit context, then the log above it.

    Only the uncommitted tail is scanned when a commit context exists (it
    carries the configuration effective at its offset), so opening a long
    log does not read it all.
    """
    configs = ConfigurationHistory(initial)
    offset = log.start_offset
    saved = saved_config(ctx.snapshot) if ctx is not None else None
    if ctx is not None and saved is not None:
        cfg_offset, cfg = saved
        if cfg_offset < 0:
            configs = ConfigurationHistory(cfg)
        else:
            configs.add(cfg_offset, cfg)
        offset = max(offset, ctx.committed_offset + 1)
    for _ in range(1_000_000):
        if offset > log.dirty_offset:
            break
        batches = log.read(offset, SCAN_CHUNK)
        if not batches:
            break
        configs.observe(batches)
        offset = batches[-1].last_offset + 1
    return configs


class SnapshotStore(Protocol):
    """Where a group keeps the snapshot as of its log start, for followers behind it.

    Kept by the node for groups whose log start moves (retention); a group
    without one never installs snapshots on others (its log always starts at 0).
    """

    def at(self, offset: int) -> bytes | None:
        """The group's snapshot as of ``offset`` (the log start minus one), if kept."""
        ...

    def installed(self, offset: int, data: bytes) -> None:
        """A snapshot as of ``offset`` was installed here: keep it as the one at the start."""
        ...
