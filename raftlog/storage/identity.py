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
called by an explicit command, deletes such directories, except the replicas of a
deleted topic, which the node itself deletes once ``--file-delete-delay-ms`` has
passed (:func:`expired_deleted_groups`; Kafka's ``file.delete.delay.ms``).

Layout of a node's data directory: the node marker and the controller's log
(``_controller``) at the top, every partition replica under a directory of its
own, ``partitions/<topic>/<partition>``, so that no topic name (``node_id``,
``_controller``, ``partitions``) ever collides with a file of the node's own.
A data directory of the older layout (``<topic>/<partition>`` at the top) is
moved into it at start (:func:`migrate_layout`).
"""

from __future__ import annotations

import calendar
import contextlib
import logging
import os
import pathlib
import re
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
PARTITIONS_DIR = "partitions"
"""The directory, in a node's data directory, that holds every partition replica."""
CONTROLLER_DIR = "_controller"
DELETED_GROUP = "deleted-group-"
"""The move-aside reason of a deleted topic's replica: deleted after the delay."""
# a migration of the old layout's topic named "partitions" in progress ('~' is in
# no topic name, so this never collides)
_MIGRATING = "partitions~migrating"
_STAMP = "%Y%m%dT%H%M%S"
_ASIDE_NAME = re.compile(
    re.escape(MOVED_ASIDE) + r"(?P<reason>.+)-(?P<stamp>\d{8}T\d{6})(?:-\d+)?$"
)
_PARTITION_NAME = re.compile(r"\d+(?:" + re.escape(MOVED_ASIDE) + r".*)?")


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
    stamp = time.strftime(_STAMP, time.gmtime())
    target = directory.with_name(f"{directory.name}{MOVED_ASIDE}{reason}-{stamp}")
    n = 1
    while fs.exists(target):
        target = directory.with_name(f"{directory.name}{MOVED_ASIDE}{reason}-{stamp}-{n}")
        n += 1
    fs.rename(directory, target)
    fs.fsync_dir(directory.parent)
    logger.warning("%s: moved aside to %s (%s); nothing was deleted", directory, target, reason)
    return target


def partitions_root(data_dir: pathlib.Path) -> pathlib.Path:
    """Where a node keeps its partition replicas (see the module doc)."""
    return pathlib.Path(data_dir) / PARTITIONS_DIR


def partition_dir(data_dir: pathlib.Path, topic: str, partition: int) -> pathlib.Path:
    """A partition replica's log directory in a node's data directory.

    ``topic`` must be a validated topic name (``validate_topic_name``): one path
    component, never ``.`` or ``..``. Checked again here, since a wrong name would
    put a log outside its place.
    """
    if not topic or "/" in topic or "\\" in topic or topic in (".", "..") or "\0" in topic:
        raise ValueError(f"topic: {topic!r} cannot name a directory")
    return partitions_root(data_dir) / topic / str(partition)


def _holds_partition_logs(directory: pathlib.Path) -> bool:
    """Whether ``directory`` is an old-layout topic directory: it holds partition
    directories (``<n>`` or ``<n>.moved-aside-...``), each a directory."""
    try:
        children = list(os.scandir(directory))
    except OSError:
        return False
    return any(
        _PARTITION_NAME.fullmatch(c.name) and c.is_dir(follow_symlinks=False) for c in children
    ) and all(c.is_dir(follow_symlinks=False) for c in children)


def migrate_layout(data_dir: pathlib.Path, fs: FileSystem = REAL_FS) -> list[str]:
    """Move an old-layout data directory's topic directories under ``partitions/``.

    Call at start, before any group opens. Each topic directory is renamed (same
    filesystem: its logs are never copied) and both parents are fsynced, so a
    power cut leaves every topic either in its old place or in its new one; the
    next start finishes the move. The old layout's topic named ``partitions``
    (whose directory is the new root's name) goes through a temporary name that
    no topic has. Returns the topics moved.
    """
    root_dir = pathlib.Path(data_dir)
    root = partitions_root(root_dir)
    moved: list[str] = []
    migrating = root_dir / _MIGRATING
    old_named_partitions = (
        root.is_dir()
        and not root.is_symlink()
        and any(
            _PARTITION_NAME.fullmatch(c.name) and (c / GROUP_MARKER).is_file()
            for c in root.iterdir()
        )
    )
    if old_named_partitions and not migrating.exists():
        fs.rename(root, migrating)
        fs.fsync_dir(root_dir)
    for parent in fs.mkdirs(root):
        fs.fsync_dir(parent)
    if migrating.exists():
        fs.rename(migrating, root / PARTITIONS_DIR)
        fs.fsync_dir(root)
        fs.fsync_dir(root_dir)
        moved.append(PARTITIONS_DIR)
    reserved = {PARTITIONS_DIR, CONTROLLER_DIR, _MIGRATING}
    for entry in sorted(os.scandir(root_dir), key=lambda e: e.name):
        if entry.name in reserved or not entry.is_dir(follow_symlinks=False):
            continue
        if not _holds_partition_logs(pathlib.Path(entry.path)):
            continue
        target = root / entry.name
        if fs.exists(target):
            logger.error(
                "%s: old-layout topic directory left in place: %s exists already",
                entry.path,
                target,
            )
            continue
        fs.rename(pathlib.Path(entry.path), target)
        moved.append(entry.name)
    if moved:
        fs.fsync_dir(root)
        fs.fsync_dir(root_dir)
        logger.warning(
            "%s: moved the partitions of %d topic(s) from the old layout to %s/: %s",
            root_dir,
            len(moved),
            PARTITIONS_DIR,
            ", ".join(moved),
        )
    return moved


def moved_aside(data_dir: pathlib.Path) -> list[pathlib.Path]:
    """Every directory moved aside in a node's data directory (``partitions/topic/*``),
    symlinks never included (nor followed)."""
    root = partitions_root(data_dir)
    if root.is_symlink() or not root.is_dir():
        return []
    found = []
    for topic in sorted(root.iterdir()):
        if topic.is_symlink() or not topic.is_dir():
            continue
        for p in sorted(topic.iterdir()):
            if MOVED_ASIDE in p.name and not p.is_symlink() and p.is_dir():
                found.append(p)
    return found


class NotANodeDirectory(ValueError):
    """A directory given as a node's data directory holds no node marker."""


def require_node_dir(data_dir: pathlib.Path) -> None:
    """Raise :class:`NotANodeDirectory` unless ``data_dir`` is a node's data directory
    (a real directory, not a symlink, holding the ``node_id`` marker)."""
    d = pathlib.Path(data_dir)
    if d.is_symlink() or not d.is_dir() or not (d / NODE_MARKER).is_file():
        raise NotANodeDirectory(
            f"--data-dir {d}: not a node's data directory (expected a directory holding "
            f"the node marker file {NODE_MARKER!r}, as raftlog server --data-dir makes it); "
            "nothing was deleted"
        )


def purge_moved_aside(data_dir: pathlib.Path) -> list[pathlib.Path]:
    """Delete the moved-aside directories in a node's data directory (an explicit operator
    command). Refuses a directory that is not a node's (:func:`require_node_dir`);
    symlinks are never followed: one found is skipped, one inside a directory being
    deleted is removed as a link, its target untouched."""
    require_node_dir(data_dir)
    gone = moved_aside(data_dir)
    for p in gone:
        _remove_tree(p)
    return gone


def _remove_tree(p: pathlib.Path) -> None:
    # rmtree never follows a symlink inside the tree (it unlinks it); the top is no link
    if p.is_symlink():
        return
    # the node's own delayed delete and an operator's purge may race: gone is gone
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(p)


def deleted_at(p: pathlib.Path) -> float | None:
    """When a deleted topic's replica ``p`` was moved aside (epoch seconds, from its
    name); None for a directory moved aside for another reason."""
    m = _ASIDE_NAME.search(p.name)
    if m is None or not m.group("reason").startswith(DELETED_GROUP):
        return None
    return float(calendar.timegm(time.strptime(m.group("stamp"), _STAMP)))


def expired_deleted_groups(
    data_dir: pathlib.Path, delay_ms: int, now_s: float, topic: str | None = None
) -> list[pathlib.Path]:
    """The deleted topics' replicas moved aside at least ``delay_ms`` before ``now_s``
    (of ``topic`` only, when given)."""
    out = []
    for p in moved_aside(data_dir):
        at = deleted_at(p)
        if topic is not None and p.parent.name != topic:
            continue
        if at is not None and now_s - at >= delay_ms / 1000:
            out.append(p)
    return out


def delete_expired(
    data_dir: pathlib.Path, delay_ms: int, now_s: float, topic: str | None = None
) -> list[pathlib.Path]:
    """Delete the deleted topics' replicas whose delay has passed (of ``topic`` only,
    when given); return them. Other moved-aside directories (damaged logs, unknown
    data) are kept for the operator."""
    gone = expired_deleted_groups(data_dir, delay_ms, now_s, topic)
    for p in gone:
        _remove_tree(p)
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
