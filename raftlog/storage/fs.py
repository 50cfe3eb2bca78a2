"""The filesystem seam: every storage IO goes through a :class:`FileSystem`.

Two implementations:

- :data:`REAL_FS` (:class:`RealFileSystem`): the operating system.
- :class:`ModelFileSystem`: an in-memory model of the page cache, as lazyfs
  (Jepsen, etcd) and ALICE model it. For every file it keeps what was
  *written* (what reads see) and what is *durable* (what survives a power
  cut); for every directory, its current entries and its durable entries.
  ``crash(seed)`` keeps the durable state plus, chosen by ``seed``, a prefix
  of each file's and each directory's unsynced operations; the last write
  kept may be torn (only some of its 512-byte sectors reach the disk).

The model's rules are the POSIX ones the log must be written against:

- ``fsync(file)`` makes that file's data and size durable, not its name;
- a new name (create, rename, mkdir) or a removed name (unlink, rename) is
  durable only once its *directory* is fsynced;
- ``syncfs`` (one call through a :class:`FsBarrier`) makes every file's data
  and size and every directory's names on the filesystem durable at once: one
  barrier for all of a node's groups (see :mod:`raftlog.raft.node_flush`);
- after a failed fsync the dirty pages are gone (marked clean, never
  written: PostgreSQL's "fsyncgate"); a later fsync reports success without
  bringing them back. So a failed fsync must never be retried: the caller
  stops, and a restart recovers from what is on disk.

``RAFTLOG_TEST_FS_MUTATION`` plants a durability bug in the model, for
proving that the crash tests can fail: ``skip-fsync`` makes file fsyncs do
nothing, ``skip-dir-fsync`` makes directory fsyncs do nothing, ``skip-syncfs``
makes syncfs do nothing.

Every failed fsync raises :class:`FsyncFailed` (not an ``OSError``, so that
no generic disk-error retry catches it) and calls the process-wide fatal
handler (see :func:`set_fatal_handler`); the node installs one that exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import logging
import os
import pathlib
import platform
import random
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

logger = logging.getLogger(__name__)

SECTOR = 512
# What the real filesystem creates: a node's data (its clients' records, its cluster's
# state) is for the node's own user only; others cannot even list a directory.
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
MUTATION_ENV = "RAFTLOG_TEST_FS_MUTATION"
MUTATIONS = ("skip-fsync", "skip-dir-fsync", "skip-syncfs")


class FsyncFailed(Exception):
    """An fsync failed: data written since the last good fsync may be lost for good.

    Never retry the fsync (the kernel may have dropped the dirty pages and would
    report success). Stop, and let a restart recover from what is on disk.
    """

    def __init__(self, path: str, cause: BaseException) -> None:
        super().__init__(
            f"fsync of {path} failed ({cause}): data written to it since the last successful "
            "fsync may be lost; fsync is never retried: the node must stop and recover "
            "from what is on disk"
        )
        self.path = path
        self.cause = cause


class StorageFailed(Exception):
    """The log refuses every operation after a failed fsync; reopen it (restart) to recover."""


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
"""A write failed for want of space (or quota): nothing is lost, unlike a failed fsync;
the write is undone and refused, and the same write succeeds once space is freed."""


class DiskFull(OSError):
    """A write (not an fsync) found no space: it was undone, nothing earlier is affected.

    Unlike :class:`FsyncFailed` this is not fatal: the log stays usable (reads, and
    writes again once space is freed). ``path`` names the file the write went to.
    """

    def __init__(self, path: str, cause: OSError) -> None:
        super().__init__(
            cause.errno,
            f"no space left for a write to {path} ({cause.strerror or cause}); "
            "the write was undone and refused: free space (retention, a topic delete) "
            "and it is accepted again",
        )
        self.path = path


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is a write that failed for want of space (ENOSPC, EDQUOT)."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


_fatal_handler: Callable[[str], None] | None = None


def set_fatal_handler(handler: Callable[[str], None] | None) -> None:
    """Install what runs (with the message) when any fsync fails; None: only raise.

    The node installs a handler that logs the message and exits the process, so
    that a failed fsync stops the node rather than being retried by a caller.
    """
    global _fatal_handler
    _fatal_handler = handler


def _fsync_failed(path: str, cause: BaseException) -> FsyncFailed:
    exc = FsyncFailed(path, cause)
    logger.critical("%s", exc)
    if _fatal_handler is not None:
        _fatal_handler(str(exc))
    return exc


class FileHandle(Protocol):
    """An open file. Writes go to the page cache; :meth:`fsync` makes them durable."""

    path: pathlib.Path

    def pread(self, n: int, position: int) -> bytes: ...

    def pwrite(self, data: bytes | memoryview, position: int) -> None:
        """Write all of ``data`` at ``position`` (no fsync)."""
        ...

    def pwritev(self, buffers: Sequence[bytes | memoryview], position: int) -> None:
        """Write all of ``buffers``, one after another, at ``position`` in one call (no
        fsync): what ``pwrite`` of their concatenation does, without making it."""
        ...

    def size(self) -> int: ...

    def truncate(self, size: int) -> None:
        """Set the file's size (no fsync)."""
        ...

    def fsync(self) -> None:
        """Make the file's data and size durable; raises :class:`FsyncFailed`."""
        ...

    def drop_cache(self, position: int, length: int) -> None:
        """Let the kernel forget its cached pages of ``[position, position + length)``.

        A hint (posix_fadvise DONTNEED): content and durability are unchanged, so
        call it on data already flushed; a later read of the range goes to the disk.
        """
        ...

    def close(self) -> None: ...


class FileSystem(Protocol):
    """The operations storage uses. Paths are absolute or relative ``pathlib.Path``."""

    def open(
        self, path: pathlib.Path, *, create: bool = False, exclusive: bool = False
    ) -> FileHandle:
        """Open read-write; ``create`` makes a missing file, ``exclusive`` fails if it exists.

        A missing file without ``create`` raises ``FileNotFoundError``. A file made
        here is created :data:`PRIVATE_FILE_MODE` (0600).
        """
        ...

    def read_file(self, path: pathlib.Path) -> bytes | None:
        """The whole content of ``path``; None when it does not exist."""
        ...

    def write_file(self, path: pathlib.Path, data: bytes, *, fsync: bool) -> None:
        """Create or replace the content of ``path`` in place (not atomic); a new file
        is created :data:`PRIVATE_FILE_MODE` (0600), an existing one keeps its mode."""
        ...

    def rename(self, src: pathlib.Path, dst: pathlib.Path) -> None:
        """Atomically replace ``dst`` by ``src`` (durable after the directory's fsync)."""
        ...

    def unlink(self, path: pathlib.Path, *, missing_ok: bool = False) -> None: ...

    def listdir(self, path: pathlib.Path) -> list[str]: ...

    def exists(self, path: pathlib.Path) -> bool: ...

    def is_dir(self, path: pathlib.Path) -> bool: ...

    def mkdirs(self, path: pathlib.Path) -> list[pathlib.Path]:
        """Create ``path`` and missing parents; return the parents whose entries changed.

        Each directory made here is created :data:`PRIVATE_DIR_MODE` (0700); an
        existing one keeps its mode. The caller fsyncs each returned directory to make
        the new names durable.
        """
        ...

    def fsync_dir(self, path: pathlib.Path) -> None:
        """Make creations, renames and removals of names in ``path`` durable."""
        ...

    def open_barrier(self, path: pathlib.Path) -> FsBarrier | None:
        """A syncfs handle on the filesystem holding directory ``path``; None when this
        system cannot give one that reports every write-back error (see
        :func:`syncfs_reports_errors`): the caller then fsyncs file by file.

        Open it before writing what it must make durable: errors are reported from
        the moment it is opened.
        """
        ...


class FsBarrier(Protocol):
    """One filesystem's syncfs, on a descriptor held open for the handle's life."""

    def sync(self) -> None:
        """Make every write issued before the call on the filesystem durable (file
        data, sizes, directory entries), as if every file and directory were fsynced;
        raises :class:`FsyncFailed` when any write-back failed since the handle opened
        (the data may be lost: never retry, stop). Blocking: run it in a thread."""
        ...

    def close(self) -> None: ...


# ----------------------------------------------------------------------------- real


class _RealFile:
    def __init__(self, path: pathlib.Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    def pread(self, n: int, position: int) -> bytes:
        return os.pread(self._fd, n, position)

    def pwrite(self, data: bytes | memoryview, position: int) -> None:
        view = memoryview(data)
        while view:  # pwrite may write less than asked
            written = os.pwrite(self._fd, view, position)
            view = view[written:]
            position += written

    def pwritev(self, buffers: Sequence[bytes | memoryview], position: int) -> None:
        if len(buffers) > _IOV_MAX:
            self.pwrite(b"".join(buffers), position)
            return
        written = os.pwritev(self._fd, buffers, position)
        total = sum(len(b) for b in buffers)
        if written < total:  # rare (a signal, a full disk): the rest the plain way
            self.pwrite(memoryview(b"".join(buffers))[written:], position + written)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)

    def fsync(self) -> None:
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise _fsync_failed(str(self.path), exc) from exc

    def drop_cache(self, position: int, length: int) -> None:
        if _FADVISE is not None and length > 0:
            _FADVISE(self._fd, position, length, os.POSIX_FADV_DONTNEED)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


_IOV_MAX = 1024
"""Linux's limit on the buffers of one pwritev; more are joined into one."""
_FADVISE = getattr(os, "posix_fadvise", None)
"""None where the OS has no posix_fadvise (macOS): dropping the cache is then a no-op."""


class RealFileSystem:
    """The operating system's filesystem."""

    def open(
        self, path: pathlib.Path, *, create: bool = False, exclusive: bool = False
    ) -> _RealFile:
        flags = os.O_RDWR
        if create:
            flags |= os.O_CREAT
        if exclusive:
            flags |= os.O_CREAT | os.O_EXCL
        fd = os.open(path, flags, PRIVATE_FILE_MODE)
        return _RealFile(path if isinstance(path, pathlib.Path) else pathlib.Path(path), fd)

    def read_file(self, path: pathlib.Path) -> bytes | None:
        try:
            return pathlib.Path(path).read_bytes()
        except FileNotFoundError:
            return None

    def write_file(self, path: pathlib.Path, data: bytes, *, fsync: bool) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
        f = _RealFile(pathlib.Path(path), fd)
        try:
            f.pwrite(data, 0)
            if fsync:
                f.fsync()
        finally:
            f.close()

    def rename(self, src: pathlib.Path, dst: pathlib.Path) -> None:
        os.replace(src, dst)

    def unlink(self, path: pathlib.Path, *, missing_ok: bool = False) -> None:
        pathlib.Path(path).unlink(missing_ok=missing_ok)

    def listdir(self, path: pathlib.Path) -> list[str]:
        return os.listdir(path)

    def exists(self, path: pathlib.Path) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: pathlib.Path) -> bool:
        return os.path.isdir(path)

    def mkdirs(self, path: pathlib.Path) -> list[pathlib.Path]:
        path = pathlib.Path(path)
        missing = []
        p = path
        while not p.exists():
            missing.append(p)
            if p.parent == p:
                break
            p = p.parent
        for m in reversed(missing):
            # each created with the mode, parents too (``mkdir(parents=True)`` would
            # give the parents the umask's default), never chmod'ed after the fact
            with contextlib.suppress(FileExistsError):  # made meanwhile by another process
                m.mkdir(PRIVATE_DIR_MODE)
        # what it always raised for a file in the way (FileExistsError), a no-op otherwise
        path.mkdir(PRIVATE_DIR_MODE, exist_ok=True)
        return [m.parent for m in reversed(missing)]

    def fsync_dir(self, path: pathlib.Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        except OSError as exc:
            raise _fsync_failed(str(path), exc) from exc
        finally:
            os.close(fd)

    def open_barrier(self, path: pathlib.Path) -> _RealBarrier | None:
        if not syncfs_reports_errors():
            return None
        return _RealBarrier(pathlib.Path(path))


SYNCFS_MIN_KERNEL = (5, 8)
"""Since Linux 5.8 syncfs returns the write-back errors of any file of the filesystem
(the superblock's errseq, sampled per descriptor); before, it always returned 0, and
a lost write would pass as durable."""


def _libc_syncfs() -> Callable[[int], int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_SYNCFS = _libc_syncfs() if platform.system() == "Linux" else None


def syncfs_reports_errors() -> bool:
    """Whether this system's syncfs exists and reports write-back errors (Linux >= 5.8)."""
    if _SYNCFS is None:
        return False
    release = platform.release().split("-", 1)[0].split(".")
    try:
        version = (int(release[0]), int(release[1]))
    except (IndexError, ValueError):
        return False
    return version >= SYNCFS_MIN_KERNEL


class _RealBarrier:
    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        # Held open: syncfs reports the errors since *this* descriptor was opened.
        self._fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)

    def sync(self) -> None:
        assert _SYNCFS is not None
        if _SYNCFS(self._fd) != 0:
            err = ctypes.get_errno()
            raise _fsync_failed(
                f"the filesystem of {self.path} (syncfs)", OSError(err, os.strerror(err))
            )

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


REAL_FS: FileSystem = RealFileSystem()


# ----------------------------------------------------------------------------- model


class SimulatedCrash(BaseException):
    """Raised by the model right after its ``crash_after``-th IO call: the power went.

    A ``BaseException`` so that no ``except Exception`` in the code under test
    swallows it. The caller then calls :meth:`ModelFileSystem.crash`.
    """


# An unsynced operation of the model, a tuple whose first item names its kind (the
# shapes are listed where each list of them is kept); Any: the shapes differ by kind.
_PendingOp = tuple[Any, ...]


@dataclasses.dataclass(eq=False)
class _Inode:
    data: bytearray = dataclasses.field(default_factory=bytearray)
    durable: bytes = b""
    # Unsynced operations since the last fsync, in order: ("w", position, bytes)
    # or ("t", size). A crash keeps a prefix of them.
    pending: list[_PendingOp] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(eq=False)
class _Dir:
    entries: dict[str, _Inode | _Dir] = dataclasses.field(default_factory=dict)
    durable: dict[str, _Inode | _Dir] = dataclasses.field(default_factory=dict)
    # Unsynced name operations: ("link", name, node), ("unlink", name), ("rename", src, dst).
    pending: list[_PendingOp] = dataclasses.field(default_factory=list)


def _apply(content: bytearray, op: _PendingOp) -> None:
    if op[0] == "w*":  # a torn write: only some of its sectors
        for pos, data in op[1]:
            _apply(content, ("w", pos, data))
    elif op[0] == "w":
        _, pos, data = op
        if len(content) < pos:
            content.extend(bytes(pos - len(content)))
        content[pos : pos + len(data)] = data
    else:
        del content[op[1] :]
        if len(content) < op[1]:
            content.extend(bytes(op[1] - len(content)))


def _make_durable(inode: _Inode) -> None:
    """What an fsync does to a file: every pending write and truncation reaches the disk."""
    if not inode.pending:  # nothing to write: a syncfs visits every file, most are clean
        return
    content = bytearray(inode.durable)
    for op in inode.pending:
        _apply(content, op)
    inode.durable = bytes(content)
    inode.pending.clear()


def _apply_dir(entries: dict[str, _Inode | _Dir], op: _PendingOp) -> None:
    if op[0] == "link":
        entries[op[1]] = op[2]
    elif op[0] == "unlink":
        entries.pop(op[1], None)
    else:
        node = entries.pop(op[1], None)
        if node is not None:
            entries[op[2]] = node


class _ModelFile:
    def __init__(self, fs: ModelFileSystem, path: pathlib.Path, inode: _Inode) -> None:
        self.path = path
        self._fs = fs
        self._inode = inode
        self._generation = fs.generation
        self._closed = False

    def _check(self) -> None:
        if self._closed or self._generation != self._fs.generation:
            raise OSError(errno.EBADF, f"{self.path}: file handle is closed or from before a crash")

    def pread(self, n: int, position: int) -> bytes:
        with self._fs.lock:
            self._check()
            return bytes(self._inode.data[position : position + n])

    def pwrite(self, data: bytes | memoryview, position: int) -> None:
        with self._fs.lock:
            self._check()
            data = bytes(data)
            # A full disk, as Linux fills one: the bytes that fit are written (a short
            # write), then the call fails with ENOSPC.
            room = self._fs.room_for(self._inode, position, len(data))
            op = ("w", position, data[:room])
            if room > 0:
                _apply(self._inode.data, op)
                self._inode.pending.append(op)
            self._fs.io("pwrite", self.path)
            if room < len(data):
                raise OSError(errno.ENOSPC, "No space left on device (model)", str(self.path))

    def pwritev(self, buffers: Sequence[bytes | memoryview], position: int) -> None:
        # one write of the concatenation: one IO call, as the crash scenarios count them
        self.pwrite(b"".join(buffers), position)

    def size(self) -> int:
        with self._fs.lock:
            self._check()
            return len(self._inode.data)

    def truncate(self, size: int) -> None:
        with self._fs.lock:
            self._check()
            op = ("t", size)
            _apply(self._inode.data, op)
            self._inode.pending.append(op)
            self._fs.io("truncate", self.path)

    def fsync(self) -> None:
        with self._fs.lock:
            self._check()
            self._fs.fsync_inode(self._inode, self.path)

    def drop_cache(self, position: int, length: int) -> None:
        # DONTNEED writes dirty pages back before it drops them, never discards them:
        # the model keeps every pending write as it is (a crash still loses them).
        with self._fs.lock:
            self._check()

    def close(self) -> None:
        self._closed = True


class ModelFileSystem:
    """An in-memory page cache over an in-memory disk; see the module docstring.

    ``crash_after``: raise :class:`SimulatedCrash` right after that many IO calls
    (mutations: pwrite, truncate, fsync, create, rename, unlink, mkdir, directory
    fsync; reads are not counted, as crashing after a read equals crashing after
    the mutation before it). ``fail_fsync_at``: the n-th fsync (1-based, file or
    directory) fails with EIO and drops that file's dirty pages.
    ``mutation`` overrides ``$RAFTLOG_TEST_FS_MUTATION``. ``capacity_bytes``: the
    disk holds at most that many bytes of file data (None: unbounded); a write that
    grows the files past it writes what fits and fails with ENOSPC, as Linux does.
    """

    def __init__(
        self,
        *,
        crash_after: int | None = None,
        fail_fsync_at: int | None = None,
        mutation: str | None = None,
        capacity_bytes: int | None = None,
    ) -> None:
        self.capacity_bytes = capacity_bytes
        self.lock = threading.RLock()
        self.root = _Dir()
        self.generation = 0
        self.io_calls = 0
        self.fsync_calls = 0
        self.crash_after = crash_after
        self.fail_fsync_at = fail_fsync_at
        self.trace: list[str] = []  # "op path" of every counted IO call, for failure messages
        chosen = os.environ.get(MUTATION_ENV, "") if mutation is None else mutation
        if chosen and chosen not in MUTATIONS:
            raise ValueError(
                f"{MUTATION_ENV} must be one of {', '.join(MUTATIONS)} or empty, got {chosen!r}"
            )
        self.mutation = chosen

    def __deepcopy__(self, memo: dict[int, Any]) -> ModelFileSystem:
        """A copy of the whole state (files, directories, counters); handles stay with ``self``."""
        import copy

        with self.lock:
            clone = ModelFileSystem.__new__(ModelFileSystem)
            for key, value in self.__dict__.items():
                if key != "lock":
                    setattr(clone, key, copy.deepcopy(value, memo))
            clone.lock = threading.RLock()
            clone.generation = self.generation + 1  # handles of the original do not carry over
            return clone

    # -- bookkeeping ---------------------------------------------------------------------

    def used_bytes(self) -> int:
        """Bytes of file data on the disk (every reachable file's current size)."""
        with self.lock:
            seen: dict[int, int] = {}
            for d in self._dirs():
                for child in d.entries.values():
                    if isinstance(child, _Inode):
                        seen[id(child)] = len(child.data)
            return sum(seen.values())

    def room_for(self, inode: _Inode, position: int, length: int) -> int:
        """How many of ``length`` bytes written at ``position`` of ``inode`` fit."""
        if self.capacity_bytes is None:
            return length
        growth = max(0, position + length - len(inode.data))
        free = self.capacity_bytes - self.used_bytes()
        if growth <= free:
            return length
        return max(0, len(inode.data) + max(free, 0) - position)

    def io(self, op: str, path: pathlib.Path) -> None:
        self.io_calls += 1
        self.trace.append(f"{op} {path}")
        if self.crash_after is not None and self.io_calls >= self.crash_after:
            self.crash_after = None
            raise SimulatedCrash(f"power cut after IO call {self.io_calls}: {op} {path}")

    def _fsync_fails(self) -> bool:
        self.fsync_calls += 1
        return self.fail_fsync_at is not None and self.fsync_calls == self.fail_fsync_at

    def fsync_inode(self, inode: _Inode, path: pathlib.Path) -> None:
        if self._fsync_fails():
            inode.pending.clear()  # the dirty pages are marked clean but never written
            raise _fsync_failed(str(path), OSError(errno.EIO, "Input/output error (injected)"))
        if self.mutation != "skip-fsync":
            _make_durable(inode)
        self.io("fsync", path)

    def _split(self, path: pathlib.Path | str) -> list[str]:
        # os.path, not pathlib: the simulation looks paths up on every IO call, and
        # pathlib's parsing was a sixth of a power-loss seed's time
        return [p for p in os.path.abspath(path).split("/") if p]

    def _walk(self, parts: list[str]) -> _Inode | _Dir | None:
        node: _Inode | _Dir | None = self.root
        for part in parts:
            if not isinstance(node, _Dir):
                return None
            node = node.entries.get(part)
        return node

    def _lookup(self, path: pathlib.Path | str) -> _Inode | _Dir | None:
        return self._walk(self._split(path))

    def _parent(self, path: pathlib.Path) -> tuple[_Dir, str]:
        parts = self._split(path)
        parent = self._walk(parts[:-1])
        if not isinstance(parent, _Dir):
            raise FileNotFoundError(errno.ENOENT, "No such directory", str(path.parent))
        return parent, parts[-1]

    # -- FileSystem ----------------------------------------------------------------------

    def open(
        self, path: pathlib.Path, *, create: bool = False, exclusive: bool = False
    ) -> _ModelFile:
        path = pathlib.Path(path)
        with self.lock:
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if isinstance(node, _Dir):
                raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
            if node is not None and exclusive:
                raise FileExistsError(errno.EEXIST, "File exists", str(path))
            if node is None:
                if not (create or exclusive):
                    raise FileNotFoundError(errno.ENOENT, "No such file", str(path))
                node = _Inode()
                parent.entries[name] = node
                parent.pending.append(("link", name, node))
                self.io("create", path)
            return _ModelFile(self, path, node)

    def read_file(self, path: pathlib.Path) -> bytes | None:
        with self.lock:
            node = self._lookup(path)
            if node is None:
                return None
            if isinstance(node, _Dir):
                raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
            return bytes(node.data)

    def write_file(self, path: pathlib.Path, data: bytes, *, fsync: bool) -> None:
        with self.lock:
            f = self.open(path, create=True)
            f.truncate(0)
            f.pwrite(data, 0)
            if fsync:
                f.fsync()

    def rename(self, src: pathlib.Path, dst: pathlib.Path) -> None:
        src, dst = pathlib.Path(src), pathlib.Path(dst)
        with self.lock:
            sdir, sname = self._parent(src)
            ddir, dname = self._parent(dst)
            if sdir is not ddir:
                raise OSError(errno.EXDEV, "the model renames within one directory only")
            if sname not in sdir.entries:
                raise FileNotFoundError(errno.ENOENT, "No such file", str(src))
            sdir.entries[dname] = sdir.entries.pop(sname)
            sdir.pending.append(("rename", sname, dname))
            self.io("rename", dst)

    def unlink(self, path: pathlib.Path, *, missing_ok: bool = False) -> None:
        path = pathlib.Path(path)
        with self.lock:
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                if missing_ok:
                    return
                raise FileNotFoundError(errno.ENOENT, "No such file", str(path))
            if isinstance(node, _Dir):
                raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
            del parent.entries[name]
            parent.pending.append(("unlink", name))
            self.io("unlink", path)

    def listdir(self, path: pathlib.Path) -> list[str]:
        with self.lock:
            node = self._lookup(path)
            if not isinstance(node, _Dir):
                raise FileNotFoundError(errno.ENOENT, "No such directory", str(path))
            return sorted(node.entries)

    def exists(self, path: pathlib.Path) -> bool:
        with self.lock:
            return self._lookup(path) is not None

    def is_dir(self, path: pathlib.Path) -> bool:
        with self.lock:
            return isinstance(self._lookup(path), _Dir)

    def mkdirs(self, path: pathlib.Path) -> list[pathlib.Path]:
        with self.lock:
            changed = []
            node = self.root
            current = pathlib.Path("/")
            for part in self._split(path):
                child = node.entries.get(part)
                if child is None:
                    child = _Dir()
                    node.entries[part] = child
                    node.pending.append(("link", part, child))
                    changed.append(current)
                    self.io("mkdir", current / part)
                elif not isinstance(child, _Dir):
                    raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(current / part))
                node, current = child, current / part
            return changed

    def fsync_dir(self, path: pathlib.Path) -> None:
        path = pathlib.Path(path)
        with self.lock:
            node = self._lookup(path)
            if not isinstance(node, _Dir):
                raise FileNotFoundError(errno.ENOENT, "No such directory", str(path))
            if self._fsync_fails():
                node.pending.clear()
                raise _fsync_failed(str(path), OSError(errno.EIO, "Input/output error (injected)"))
            if self.mutation != "skip-dir-fsync":
                node.durable = dict(node.entries)
                node.pending.clear()
            self.io("fsync_dir", path)

    def open_barrier(self, path: pathlib.Path) -> _ModelBarrier:
        return _ModelBarrier(self, pathlib.Path(path))

    def syncfs(self, path: pathlib.Path) -> None:
        """Every reachable file's writes and every directory's names become durable."""
        with self.lock:
            if self._fsync_fails():
                # as fsyncgate, for every file: the dirty pages are dropped, never written
                for d in self._dirs():
                    d.pending.clear()
                    for child in d.entries.values():
                        if isinstance(child, _Inode):
                            child.pending.clear()
                raise _fsync_failed(
                    f"the filesystem of {path} (syncfs)",
                    OSError(errno.EIO, "Input/output error (injected)"),
                )
            if self.mutation != "skip-syncfs":
                for d in self._dirs():
                    d.durable = dict(d.entries)
                    d.pending.clear()
                    for child in d.entries.values():
                        if isinstance(child, _Inode):
                            _make_durable(child)
            self.io("syncfs", path)

    def _dirs(self) -> list[_Dir]:
        """Every directory reachable from the root (a name reaches what it names now)."""
        out, stack = [], [self.root]
        while stack:
            d = stack.pop()
            out.append(d)
            stack.extend(c for c in d.entries.values() if isinstance(c, _Dir))
        return out

    # -- power loss ----------------------------------------------------------------------

    def crash(self, seed: int, *, keep_unsynced: bool = True) -> None:
        """Cut the power: keep what is durable plus a seeded prefix of what is not.

        For each directory a prefix of its unsynced name operations survives; for
        each reachable file a prefix of its unsynced writes and truncations, the
        last of which may be torn (a random subset of its sectors). Without
        ``keep_unsynced``, nothing unsynced survives (the worst case). Every handle
        opened before the crash becomes invalid.
        """
        rng = random.Random(seed)
        with self.lock:
            files: dict[int, bytes] = {}

            def settle_dir(d: _Dir) -> None:
                entries = dict(d.durable)
                for op in d.pending[: rng.randint(0, len(d.pending)) if keep_unsynced else 0]:
                    _apply_dir(entries, op)
                d.entries, d.durable, d.pending = entries, dict(entries), []
                for child in sorted(entries.items(), key=lambda kv: kv[0]):
                    node = child[1]
                    if isinstance(node, _Dir):
                        settle_dir(node)
                    elif id(node) not in files:
                        files[id(node)] = settle_file(node)

            def settle_file(f: _Inode) -> bytes:
                content = bytearray(f.durable)
                kept = rng.randint(0, len(f.pending)) if keep_unsynced else 0
                for i, op in enumerate(f.pending[:kept]):
                    if i == kept - 1 and op[0] == "w" and rng.random() < 0.5:
                        op = _torn(op, rng)
                    _apply(content, op)
                f.data, f.durable, f.pending = content, bytes(content), []
                return f.durable

            settle_dir(self.root)
            self.generation += 1

    def durable_view(self, path: pathlib.Path) -> dict[str, bytes]:
        """Names and contents under directory ``path`` as they are now (for tests)."""
        with self.lock:
            node = self._lookup(path)
            if not isinstance(node, _Dir):
                return {}
            return {
                name: bytes(child.data)
                for name, child in sorted(node.entries.items())
                if isinstance(child, _Inode)
            }


class _ModelBarrier:
    def __init__(self, fs: ModelFileSystem, path: pathlib.Path) -> None:
        self._fs = fs
        self.path = path
        self._generation = fs.generation

    def sync(self) -> None:
        if self._generation != self._fs.generation:
            raise OSError(errno.EBADF, "barrier opened before a crash", str(self.path))
        self._fs.syncfs(self.path)

    def close(self) -> None:
        pass


def _torn(op: _PendingOp, rng: random.Random) -> _PendingOp:
    """A write of which only some of its sectors reached the disk (the rest keep old bytes)."""
    _, pos, data = op
    first = pos // SECTOR
    last = (pos + len(data) - 1) // SECTOR if data else first
    sectors = list(range(first, last + 1))
    kept = [s for s in sectors if rng.random() < 0.5]
    pieces = []
    for s in kept:
        lo = max(pos, s * SECTOR)
        hi = min(pos + len(data), (s + 1) * SECTOR)
        pieces.append((lo, data[lo - pos : hi - pos]))
    return ("w*", pieces)
