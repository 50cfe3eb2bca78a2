"""What the real filesystem seam creates is its user's alone: directories 0700 (parents
made for them too), files 0600 (issue 44, item 5).

Every case runs under a umask of 0, so the modes seen are the ones asked for, not the
umask's doing (under the usual 022 a 0644 would still show as 0644).
"""

from __future__ import annotations

import os
import pathlib
import stat
from collections.abc import Iterator

import pytest
from storage_helpers import make_batches, segment_files

from raftlog.storage import identity
from raftlog.storage.api import CommitContext, VoteState
from raftlog.storage.fs import REAL_FS
from raftlog.storage.log import SegmentedLog


@pytest.fixture(autouse=True)
def _open_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: pathlib.Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_mkdirs_makes_every_missing_directory_0700(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "a" / "b" / "c"
    changed = REAL_FS.mkdirs(target)
    assert changed == [tmp_path, tmp_path / "a", tmp_path / "a" / "b"]
    assert {p.name: mode(p) for p in (target.parents[1], target.parent, target)} == {
        "a": 0o700,
        "b": 0o700,
        "c": 0o700,
    }
    assert REAL_FS.mkdirs(target) == []  # already there: nothing made, nothing changed


def test_mkdirs_leaves_an_existing_directory_as_it_is(tmp_path: pathlib.Path) -> None:
    (tmp_path / "shared").mkdir(0o755)
    REAL_FS.mkdirs(tmp_path / "shared" / "mine")
    assert mode(tmp_path / "shared") == 0o755  # not the seam's to change (the node's is)
    assert mode(tmp_path / "shared" / "mine") == 0o700


def test_mkdirs_names_a_file_in_the_way(tmp_path: pathlib.Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(FileExistsError):
        REAL_FS.mkdirs(tmp_path / "f")


def test_files_are_created_0600(tmp_path: pathlib.Path) -> None:
    REAL_FS.open(tmp_path / "created", create=True).close()
    REAL_FS.open(tmp_path / "exclusive", exclusive=True).close()
    REAL_FS.write_file(tmp_path / "written", b"data", fsync=True)
    assert {p.name: mode(p) for p in sorted(tmp_path.iterdir())} == {
        "created": 0o600,
        "exclusive": 0o600,
        "written": 0o600,
    }


def test_a_log_and_its_records_are_private(tmp_path: pathlib.Path) -> None:
    directory = tmp_path / "node" / "topic" / "0"
    identity.claim_directory(directory, identity.GROUP_MARKER, "7", "group")
    log = SegmentedLog.open(directory, segment_bytes=256, index_interval_bytes=64)
    try:
        log.append(make_batches(0, 1, [100] * 6))  # several segments
        log.flush()
        log.save_vote(VoteState(1, 1))
        log.save_commit_context(CommitContext(11, 1))
    finally:
        log.close()
    assert len(segment_files(directory)) > 1
    dirs = [tmp_path / "node", tmp_path / "node" / "topic", directory]
    assert {str(p.relative_to(tmp_path)): mode(p) for p in dirs} == {
        str(p.relative_to(tmp_path)): 0o700 for p in dirs
    }
    files = sorted(directory.iterdir())
    assert any(p.name == identity.GROUP_MARKER for p in files)
    assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}
