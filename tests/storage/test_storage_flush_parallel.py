"""A flush in three steps: appends go on during its fsync and stay dirty until the next flush.

``prepare_flush`` records the dirty offset (on the event loop), ``sync_flush``
fsyncs in a thread, ``finish_flush`` marks the recorded offset flushed. These
tests hold the fsync in its thread (the page-cache model's fsync has made the
data durable, then waits on an event) while the main thread appends, then
check that the flushed offset claims only what was recorded, and that a power
cut of the model keeps exactly that.
"""

from __future__ import annotations

import copy
import pathlib
import threading

import pytest
from storage_helpers import make_batches

from raftlog.storage import contract_checks
from raftlog.storage.fs import ModelFileSystem, _ModelFile
from raftlog.storage.log import SegmentedLog
from raftlog.storage.memory import MemoryLog
from raftlog.storage.offset_index import read_index_file

LOG_DIR = pathlib.Path("/data/topic/0")


def open_log(fs: ModelFileSystem, segment_bytes: int = 10_000) -> SegmentedLog:
    return SegmentedLog.open(LOG_DIR, segment_bytes=segment_bytes, index_interval_bytes=1, fs=fs)


class HeldFsync:
    """Hold the next fsync of a segment file made outside the main thread: the model
    has made the data written so far durable, then the call blocks until released
    (a slow fsync). A roll's seal fsyncs on the main thread and is never held."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        original = _ModelFile.fsync

        def fsync(handle: _ModelFile) -> None:
            original(handle)
            if (
                handle.path.suffix == ".log"
                and threading.current_thread() is not threading.main_thread()
                and not self.started.is_set()
            ):
                self.started.set()
                assert self.release.wait(10), "the test never released the fsync"

        monkeypatch.setattr(_ModelFile, "fsync", fsync)


def sync_in_thread(log: SegmentedLog, plan) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            log.sync_flush(plan)
        except BaseException as exc:  # surfaced by the test
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def test_an_append_during_the_fsync_stays_dirty_and_is_lost_in_a_crash(monkeypatch):
    held = HeldFsync(monkeypatch)
    fs = ModelFileSystem()
    log = open_log(fs)
    recorded = make_batches(0, 1, [80, 80, 80])  # offsets 0..5
    during = make_batches(6, 1, [80, 80])  # offsets 6..9
    log.append(recorded)
    plan = log.prepare_flush()
    assert plan.offset == 5
    thread, errors = sync_in_thread(log, plan)
    assert held.started.wait(10)
    # The fsync is in flight in its thread: the append does not wait for it.
    assert log.append(during) == 9
    held.release.set()
    thread.join(10)
    assert not thread.is_alive() and not errors
    assert log.finish_flush(plan) == 5
    # Only the recorded offset: the batches appended during the fsync stay dirty.
    assert (log.flushed_offset, log.dirty_offset) == (5, 9)
    contract_checks.check_offsets(log.start_offset, log.flushed_offset, log.dirty_offset)
    # The index file covers only the data the fsync covered (an entry per batch here).
    (index_path,) = [LOG_DIR / n for n in fs.listdir(LOG_DIR) if n.endswith(".index")]
    assert [offset for offset, _ in read_index_file(index_path, fs) or []] == [2, 4]
    claimed = log.flushed_offset

    # Every power cut keeps at least what is claimed flushed, byte for byte ...
    for seed in range(20):
        cut = copy.deepcopy(fs)
        cut.crash(seed)
        with open_log(cut) as again:
            assert again.dirty_offset >= claimed
            assert again.read(0, 10**6, end=5) == recorded
    # ... and the worst one loses what was appended during the fsync.
    fs.crash(0, keep_unsynced=False)
    with open_log(fs) as again:
        assert again.dirty_offset == 5 >= claimed
        assert again.read(0, 10**6) == recorded


def test_a_roll_during_the_fsync_seals_the_segment_and_the_new_one_waits(monkeypatch):
    held = HeldFsync(monkeypatch)
    fs = ModelFileSystem()
    log = open_log(fs, segment_bytes=400)
    first = make_batches(0, 1, [100, 100])  # offsets 0..3
    log.append(first)
    plan = log.prepare_flush()
    thread, errors = sync_in_thread(log, plan)
    assert held.started.wait(10)
    # A new term rolls: the recorded segment is sealed (on this thread) while its
    # flush's fsync is held, and a segment is created that the flush does not cover.
    rolled = make_batches(4, 2, [100])  # offsets 4..5
    log.append(rolled)
    assert log.segment_count == 2 and log.flushed_offset == 3
    held.release.set()
    thread.join(10)
    assert not thread.is_alive() and not errors
    assert log.finish_flush(plan) == 3  # the seal's 3, never the dirty 5
    # The new segment's name is not durable yet: the next flush syncs the directory.
    following = log.prepare_flush()
    assert following.offset == 5 and following.files and following.dir_version is not None
    fs.crash(0, keep_unsynced=False)
    with open_log(fs) as again:
        assert again.dirty_offset == 3
        assert again.read(0, 10**6) == first


@pytest.mark.parametrize("kind", ["segmented", "memory"])
def test_a_truncation_after_prepare_voids_the_flush(kind):
    fs = ModelFileSystem()
    log = open_log(fs) if kind == "segmented" else MemoryLog()
    log.append(make_batches(0, 1, [50, 50, 50]))  # 0..5
    log.flush()
    log.append(make_batches(6, 1, [50, 50]))  # 6..9
    plan = log.prepare_flush()
    assert plan.offset == 9
    # (The flusher's truncation lock keeps this from happening during a flush; the
    # log is safe anyway.) Offsets 6..9 are cut and rewritten by another term.
    log.truncate(6)
    log.append(make_batches(6, 2, [70, 70]))
    log.sync_flush(plan)
    assert log.finish_flush(plan) == 5  # the rewritten 6..9 were never fsynced
    assert log.flush() == 9


@pytest.mark.parametrize("kind", ["segmented", "memory"])
def test_flushed_is_the_recorded_offset_on_both_logs(kind):
    log = open_log(ModelFileSystem()) if kind == "segmented" else MemoryLog()
    log.append(make_batches(0, 1, [40, 40]))
    plan = log.prepare_flush()
    log.append(make_batches(4, 1, [40]))
    log.sync_flush(plan)
    assert (log.finish_flush(plan), log.dirty_offset) == (3, 5)
    assert log.fsyncs == 1
    if kind == "memory":
        assert log.crash() == 3
    assert log.flush() == log.dirty_offset


def test_appends_and_rolls_racing_flush_threads_keep_every_claim():
    """Many rounds of a real race: the fsync step runs in a thread while this thread
    appends, rolling segments by size and by term (a seal's fsync and index write
    against the flush's). Every claim holds and survives the worst power cut."""
    fs = ModelFileSystem()
    log = open_log(fs, segment_bytes=700)
    written: list = []
    term = 1

    def append(sizes: list[int]) -> None:
        new = make_batches(log.dirty_offset + 1, term, sizes)
        log.append(new)
        written.extend(new)

    for round_ in range(120):
        append([60, 90])
        plan = log.prepare_flush()
        thread, errors = sync_in_thread(log, plan)
        for i in range(3):
            if (round_ + i) % 7 == 0:
                term += 1  # a new term rolls a segment while the fsync may run
            append([50 + 10 * i])
        thread.join(10)
        assert not thread.is_alive() and not errors
        flushed = log.finish_flush(plan)
        assert plan.offset <= flushed <= log.dirty_offset
        contract_checks.check_offsets(log.start_offset, flushed, log.dirty_offset)
        if round_ % 20 == 19:
            cut = copy.deepcopy(fs)
            cut.crash(round_, keep_unsynced=False)
            with open_log(cut, segment_bytes=700) as again:
                assert again.dirty_offset >= flushed
                assert again.read(0, 10**9, end=flushed) == [
                    b for b in written if b.last_offset <= flushed
                ]
    assert log.flush() == log.dirty_offset == written[-1].last_offset
    assert log.segment_count > 20
