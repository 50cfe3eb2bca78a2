"""The crash suite can fail: with a durability bug planted in the model it must.

``RAFTLOG_TEST_FS_MUTATION=skip-fsync`` makes the model ignore file fsyncs,
``skip-dir-fsync`` ignores directory fsyncs and ``skip-syncfs`` ignores syncfs. A
crash suite that still passed under any could not tell a durable log from one
that is not.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from raftlog.storage.fs import MUTATION_ENV, MUTATIONS

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parent.parent


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_crash_suite_fails_under_mutation(mutation):
    env = {**os.environ, MUTATION_ENV: mutation}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(HERE / "test_crash_sequences.py"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, f"the crash suite did not fail under {mutation}:\n{out[-3000:]}"
    assert "CrashCheckFailed" in out, out[-3000:]
    from test_crash_sequences import SCENARIOS

    failed = {
        line.split("[", 1)[1].split("]", 1)[0]
        for line in out.splitlines()
        if line.startswith("FAILED tests/crash/test_crash_sequences.py::")
    }
    # Every scenario that writes data or a record depends on the barrier the mutation
    # skips: the file and directory fsyncs, except for the scenario whose flushes go
    # through syncfs, which depends on nothing else.
    by_syncfs = {"flush_by_syncfs"}
    names = {s.__name__ for s in SCENARIOS}
    expected = by_syncfs if mutation == "skip-syncfs" else names - by_syncfs
    assert expected <= failed, f"not caught under {mutation}: {sorted(expected - failed)}"


def test_a_flush_that_forgets_the_directory_fsync_is_caught(monkeypatch):
    """Planted bug: a flush after a segment roll syncs the data but not the new name."""
    from crash_harness import CrashCheckFailed, crash_everywhere
    from test_crash_sequences import append_flush

    from raftlog.storage.log import SegmentedLog

    def flush_without_dir_fsync(self: SegmentedLog) -> int:
        if self._dirty > self._flushed and self._segments:
            self._segments[-1].sync()
        self._dir_synced = self._dir_version  # the bug: the new segment's name is never durable
        self._flushed = self._dirty
        return self._flushed

    monkeypatch.setattr(SegmentedLog, "flush", flush_without_dir_fsync)
    with pytest.raises(CrashCheckFailed, match=r"acknowledged batch at offset 0 .* is missing"):
        crash_everywhere(append_flush, seeds=2, recovery_crashes=False)
