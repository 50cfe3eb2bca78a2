"""The page-cache model follows the POSIX durability rules the log is written against."""

from __future__ import annotations

import copy
import pathlib

import pytest

from raftlog.storage.fs import (
    MUTATION_ENV,
    FsyncFailed,
    ModelFileSystem,
    SimulatedCrash,
    set_fatal_handler,
)

D = pathlib.Path("/d")


def model(**kw) -> ModelFileSystem:
    fs = ModelFileSystem(mutation="", **kw)
    for parent in fs.mkdirs(D):
        fs.fsync_dir(parent)
    return fs


def test_a_new_name_is_durable_only_after_its_directory_is_fsynced():
    fs = model()
    f = fs.open(D / "a", create=True)
    f.pwrite(b"hello", 0)
    f.fsync()  # data durable, name not
    for seed in range(20):
        assert _after_crash(fs, seed).read_file(D / "a") in (None, b"hello")
    lost = [s for s in range(20) if _after_crash(fs, s).read_file(D / "a") is None]
    assert lost, "some crash must lose the unsynced name"
    fs.fsync_dir(D)
    for seed in range(20):
        assert _after_crash(fs, seed).read_file(D / "a") == b"hello"


def _after_crash(fs: ModelFileSystem, seed: int) -> ModelFileSystem:
    probe = copy.deepcopy(fs)
    probe.crash(seed)
    return probe


def test_crash_keeps_durable_data_plus_a_prefix_of_unsynced_writes_with_torn_sectors():
    fs = model()
    f = fs.open(D / "log", create=True)
    fs.fsync_dir(D)
    f.pwrite(b"A" * 1024, 0)
    f.fsync()
    f.pwrite(b"B" * 1024, 1024)  # two sectors
    f.pwrite(b"C" * 512, 2048)
    seen = set()
    for seed in range(200):
        data = _after_crash(fs, seed).read_file(D / "log")
        assert data[:1024] == b"A" * 1024  # durable: always there
        rest = data[1024:]
        if len(rest) > 1024:  # C only after all of B's write was kept
            assert rest[:1024] == b"B" * 1024
        seen.add(rest)
    assert b"" in seen and b"B" * 1024 + b"C" * 512 in seen
    torn = [r for r in seen if r and r not in (b"B" * 1024, b"B" * 1024 + b"C" * 512)]
    assert torn, "some crash must tear a write at sector granularity"
    assert any(b"\0" * 512 in r for r in torn)  # a hole where a sector never landed


def test_rename_and_unlink_need_the_directory_fsync():
    fs = model()
    fs.write_file(D / "x.tmp", b"new", fsync=True)
    fs.write_file(D / "old", b"gone", fsync=True)
    fs.fsync_dir(D)
    fs.rename(D / "x.tmp", D / "x")
    fs.unlink(D / "old")
    outcomes = {(tuple(c.listdir(D))) for c in (_after_crash(fs, s) for s in range(40))}
    assert ("old", "x.tmp") in outcomes  # nothing of it survived
    assert ("x",) in outcomes  # all of it
    fs.fsync_dir(D)
    assert _after_crash(fs, 0).listdir(D) == ["x"]


def test_failed_fsync_drops_the_dirty_pages_and_a_retry_does_not_bring_them_back():
    """fsyncgate: after EIO the pages are clean but were never written."""
    fs = model()
    f = fs.open(D / "log", create=True)
    fs.fsync_dir(D)
    fs.fail_fsync_at = fs.fsync_calls + 1  # the next fsync fails
    f.pwrite(b"data", 0)
    messages = []
    set_fatal_handler(messages.append)
    try:
        with pytest.raises(FsyncFailed, match=r"fsync of /d/log failed .*never retried"):
            f.fsync()
    finally:
        set_fatal_handler(None)
    assert messages and "/d/log" in messages[0]
    f.fsync()  # "succeeds"
    assert f.pread(4, 0) == b"data"  # reads still see the page
    assert _after_crash(fs, 0).read_file(D / "log") == b""  # the name was synced, the data lost


def test_crash_after_the_nth_io_call_and_old_handles_die():
    fs = model(crash_after=None)
    f = fs.open(D / "log", create=True)
    fs.crash_after = fs.io_calls + 2
    f.pwrite(b"1", 0)
    with pytest.raises(SimulatedCrash, match=r"after IO call .*pwrite /d/log"):
        f.pwrite(b"2", 1)
    fs.crash(0)
    with pytest.raises(OSError, match="before a crash"):
        f.pread(1, 0)


def test_mutations_come_from_the_environment(monkeypatch):
    monkeypatch.setenv(MUTATION_ENV, "skip-fsync")
    assert ModelFileSystem().mutation == "skip-fsync"
    monkeypatch.setenv(MUTATION_ENV, "bogus")
    with pytest.raises(ValueError, match="RAFTLOG_TEST_FS_MUTATION must be one of"):
        ModelFileSystem()
