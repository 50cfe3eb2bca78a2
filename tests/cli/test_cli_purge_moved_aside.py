"""`raftlog node purge-moved-aside`: deletes the moved-aside group directories of a node's
data directory only (refusing any other directory), never through a symlink."""

from __future__ import annotations

from raftlog.cli import main
from raftlog.storage import identity
from raftlog.storage.identity import MOVED_ASIDE


def _node(root):
    identity.claim_directory(root, identity.NODE_MARKER, "1", "node")
    return root


def test_purge_lists_with_dry_run_then_deletes_only_moved_aside_dirs(tmp_path, capsys) -> None:
    _node(tmp_path)
    keep = identity.partition_dir(tmp_path, "events", 0)
    gone = keep.with_name(f"1{MOVED_ASIDE}corrupt-group-7-1700000000")
    for d in (keep, gone):
        d.mkdir(parents=True)
        (d / "00000000000000000000.log").write_bytes(b"x" * 10)
    assert main(["node", "purge-moved-aside", "--data-dir", str(tmp_path), "--dry-run"]) == 0
    assert f"would delete {gone}" in capsys.readouterr().out
    assert gone.exists()
    assert main(["node", "purge-moved-aside", "--data-dir", str(tmp_path)]) == 0
    assert f"deleted {gone}" in capsys.readouterr().out
    assert not gone.exists() and (keep / "00000000000000000000.log").read_bytes() == b"x" * 10
    assert main(["node", "purge-moved-aside", "--data-dir", str(tmp_path / "nope")]) == 2


def test_purge_refuses_a_directory_without_a_node_marker(tmp_path, capsys) -> None:
    """A mistyped --data-dir (the home directory, a topic's directory) loses nothing."""
    victim = tmp_path / "partitions" / "t" / f"0{MOVED_ASIDE}corrupt-group-7-1700000000"
    victim.mkdir(parents=True)
    (victim / "data").write_bytes(b"precious")
    for flag in ("--dry-run", None):
        argv = ["node", "purge-moved-aside", "--data-dir", str(tmp_path)]
        assert main(argv + ([flag] if flag else [])) == 2
        err = capsys.readouterr().err
        assert f"--data-dir {tmp_path}: not a node's data directory" in err
        assert "node marker file 'node_id'" in err
    assert (victim / "data").read_bytes() == b"precious"


def test_purge_skips_symlinks_and_keeps_what_they_point_at(tmp_path, capsys) -> None:
    root = _node(tmp_path / "node")
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "data").write_bytes(b"survives")
    topic = root / "partitions" / "t"
    topic.mkdir(parents=True)
    link = topic / f"0{MOVED_ASIDE}corrupt-group-7-20260101T000000"
    link.symlink_to(outside)
    real = topic / f"1{MOVED_ASIDE}corrupt-group-8-20260101T000000"
    real.mkdir()
    (real / "inner-link").symlink_to(outside / "sub")
    assert main(["node", "purge-moved-aside", "--data-dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"deleted {real}" in out and str(link) not in out
    assert not real.exists() and link.is_symlink()
    assert (outside / "sub" / "data").read_bytes() == b"survives"
