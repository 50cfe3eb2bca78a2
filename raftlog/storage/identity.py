"""Identity markers: which node a data directory, and which group a log directory, belongs to.

A marker is a small text file (``node_id`` in a node's data directory,
``group_id`` in a partition's log directory) holding the owner's id. It is
written durably before anything else goes in the directory: temp file,
fsync, rename, directory fsync. So after any crash a directory holding log
data also holds its marker.

A directory whose marker names another owner is *refused*
(:class:`ForeignDataDirectory`, naming the directory and both ids): a
mistyped ``--data-dir`` must never cost a replica its log. Nothing here ever
deletes a directory. A group that must be dropped is moved aside, under a
name that says so (:func:`move_aside`), and only :func:`purge_moved_aside`,
called by an explicit command, deletes such directories.
"""

from __future__ import annotations

import logging
import pathlib
import shutil
import time

from raftlog.storage.api import StorageCorruption
from raftlog.storage.commit_context import CommitContextStore
from raftlog.storage.fs import REAL_FS, FileSystem
from raftlog.storage.vote_store import VoteStore

logger = logging.getLogger(__name__)

NODE_MARKER = "node_id"
GROUP_MARKER = "group_id"
MOVED_ASIDE = ".moved-aside-"
_TMP = ".tmp"


class ForeignDataDirectory(Exception):
    """The directory belongs to another node or group; it was left untouched."""

    def __init__(self, directory: pathlib.Path, what: str, found: str, expected: str) -> None:
        super().__init__(
            f"{directory}: data directory belongs to {what} {found}, not to {what} {expected} "
            f"(its {what} marker says {found!r}); refusing to use it. Nothing was deleted: "
            "check the path, or move the directory away if it is really unwanted"
        )
        self.directory = directory
        self.found = found
        self.expected = expected


def read_marker(directory: pathlib.Path, name: str, fs: FileSystem = REAL_FS) -> str | None:
    """The id in ``directory/name``; None when there is no marker."""
    data = fs.read_file(pathlib.Path(directory) / name)
    return None if data is None else data.decode("utf-8", "replace").strip()


def write_marker(directory: pathlib.Path, name: str, value: str, fs: FileSystem = REAL_FS) -> None:
    """Durably write the marker: temp file, fsync, rename, directory fsync."""
    directory = pathlib.Path(directory)
    tmp = directory / (name + _TMP)
    fs.write_file(tmp, f"{value}\n".encode(), fsync=True)
    fs.rename(tmp, directory / name)
    fs.fsync_dir(directory)


def claim_directory(
    directory: pathlib.Path,
    name: str,
    owner: str,
    what: str,
    fs: FileSystem = REAL_FS,
    *,
    adopt_unmarked: bool = False,
) -> bool:
    """Make sure ``directory`` belongs to ``owner``: create it and its marker, or check it.

    Returns True when the directory was claimed now (new, or unmarked and empty
    of anything but a marker's temp file), False when it already was ``owner``'s.
    Raises :class:`ForeignDataDirectory` when the marker names another owner, and
    when the directory holds data but no marker (``unmarked`` as the found id)
    unless ``adopt_unmarked`` (data directories written before markers existed):
    a foreign directory is never adopted and never deleted.
    """
    directory = pathlib.Path(directory)
    for parent in fs.mkdirs(directory):
        fs.fsync_dir(parent)  # the new directory's name survives a power cut
    found = read_marker(directory, name, fs)
    if found == owner:
        return False
    if found is not None:
        raise ForeignDataDirectory(directory, what, found, owner)
    others = [n for n in fs.listdir(directory) if n != name + _TMP]
    if others and not adopt_unmarked:
        raise ForeignDataDirectory(directory, what, "unmarked", owner)
    if others:
        logger.warning("%s: no %s marker; adopting it as %s %s", directory, name, what, owner)
    write_marker(directory, name, owner, fs)
    return True


def move_aside(directory: pathlib.Path, reason: str, fs: FileSystem = REAL_FS) -> pathlib.Path:
    """Rename ``directory`` to ``<name>.moved-aside-<reason>-<time>`` durably; return the new path.

    Used instead of deleting a group's data: the bytes stay until an explicit
    purge (:func:`purge_moved_aside`).
    """
    directory = pathlib.Path(directory)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    target = directory.with_name(f"{directory.name}{MOVED_ASIDE}{reason}-{stamp}")
    n = 1
    while fs.exists(target):
        target = directory.with_name(f"{directory.name}{MOVED_ASIDE}{reason}-{stamp}-{n}")
        n += 1
    fs.rename(directory, target)
    fs.fsync_dir(directory.parent)
    logger.warning("%s: moved aside to %s (%s); nothing was deleted", directory, target, reason)
    return target


def moved_aside(data_dir: pathlib.Path) -> list[pathlib.Path]:
    """Every directory under ``data_dir`` (two levels: topic/partition) that was moved aside."""
    root = pathlib.Path(data_dir)
    return sorted(p for p in root.glob("*/*") if MOVED_ASIDE in p.name and p.is_dir())


def purge_moved_aside(data_dir: pathlib.Path) -> list[pathlib.Path]:
    """Delete the moved-aside directories under ``data_dir`` (an explicit operator command)."""
    gone = moved_aside(data_dir)
    for p in gone:
        shutil.rmtree(p)
    return gone


def set_aside_damaged_log(
    directory: pathlib.Path, group_id: int, fs: FileSystem = REAL_FS
) -> pathlib.Path:
    """Move a group's damaged log aside and start an empty one that keeps the vote record.

    For a log whose open raised ``StorageCorruption``: the replica then fetches
    the group again from the leader (Raft recovery). The damaged directory is kept
    (``<name>.moved-aside-corrupt-group-<id>-<time>``), never deleted. The term and
    vote are carried over durably, so the replica never votes twice in a term;
    a damaged vote record is not guessed at: ``StorageCorruption`` propagates and
    nothing is moved.

    The commit context is carried over too: it names an offset this replica had
    flushed and acknowledged, which the empty log no longer reaches, so the
    replica starts "behind its promise" (it neither votes nor counts toward a
    quorum until refetched that far; see ``RaftCore.behind_promise``). A damaged
    commit context is not carried (nothing to promise from), so that a restart
    never needs a human. A crash while refetching may leave a torn tail below the
    carried offset, which the next open reports as corruption: the log is then set
    aside again, promise and vote carried again, and the refetch starts over.
    """
    directory = pathlib.Path(directory)
    vote = VoteStore(directory, fs).load()
    contexts = CommitContextStore(directory, fs)
    try:
        ctx = contexts.load()
    except StorageCorruption:
        ctx = None
    aside = move_aside(directory, f"corrupt-group-{group_id}", fs)
    claim_directory(directory, GROUP_MARKER, str(group_id), "group", fs)
    VoteStore(directory, fs).save(vote)
    if ctx is not None:
        CommitContextStore(directory, fs).save(ctx)
    return aside
