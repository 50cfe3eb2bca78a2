"""`raftlog node purge-moved-aside`: the only way a moved-aside group directory goes."""

from __future__ import annotations

from raftlog.cli import main
from raftlog.storage.identity import MOVED_ASIDE


def test_purge_lists_with_dry_run_then_deletes_only_moved_aside_dirs(tmp_path, capsys) -> None:
    keep = tmp_path / "events" / "0"
    gone = tmp_path / "events" / f"1{MOVED_ASIDE}corrupt-group-7-1700000000"
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
