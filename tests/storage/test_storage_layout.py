"""A node's data directory: partitions under a directory of their own, the old layout
moved into it at start, moved-aside directories purged only in a node's data directory
(never through a symlink), a deleted topic's replicas deleted after the delay."""

from __future__ import annotations

import calendar
import pathlib
import time

import pytest

from raftlog.controller import colliding_topic, validate_topic_name
from raftlog.storage import identity
from raftlog.storage.fs import REAL_FS


def _node_dir(root: pathlib.Path) -> pathlib.Path:
    identity.claim_directory(root, identity.NODE_MARKER, "2", "node")
    return root


def _log(d: pathlib.Path, data: bytes = b"x" * 10) -> pathlib.Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / identity.GROUP_MARKER).write_text("5\n")
    (d / "00000000000000000000.log").write_bytes(data)
    return d


@pytest.mark.parametrize("name", ["node_id", "_controller", "partitions", "group_id", "0"])
def test_no_topic_name_collides_with_a_nodes_own_files(tmp_path, name):
    root = _node_dir(tmp_path)
    d = identity.partition_dir(root, validate_topic_name(name), 0)
    identity.claim_directory(d, identity.GROUP_MARKER, "5", "group")
    assert d == root / "partitions" / name / "0"
    assert identity.read_marker(root, identity.NODE_MARKER) == "2"
    assert (root / identity.NODE_MARKER).is_file()


@pytest.mark.parametrize(
    "name", [".", "..", "", "a/b", "../x", "a" * 250, "é", "a b", "__x", "x\x00"]
)
def test_names_that_could_escape_or_are_not_kafkas_are_refused_naming_the_form(name):
    with pytest.raises(ValueError, match=r"invalid topic name .*expected 1-249 characters"):
        validate_topic_name(name)


@pytest.mark.parametrize("name", ["a" * 249, "_x", ".x", "x.", "-x", "a.b_c-D9", "..."])
def test_kafkas_valid_names_are_accepted(name):
    assert validate_topic_name(name) == name


def test_names_differing_only_in_dot_vs_underscore_collide():
    assert colliding_topic("a.b", ["a_b", "c"]) == "a_b"
    assert colliding_topic("a_b", ["a.b"]) == "a.b"
    assert colliding_topic("a.b", ["a.b", "ab"]) is None


@pytest.mark.parametrize("name", ["..", ".", "a/b", ""])
def test_partition_dir_refuses_a_name_that_leaves_its_directory(tmp_path, name):
    with pytest.raises(ValueError, match="cannot name a directory"):
        identity.partition_dir(tmp_path, name, 0)


def test_the_old_layout_is_moved_under_partitions_and_its_logs_kept(tmp_path, monkeypatch):
    root = _node_dir(tmp_path)
    _log(root / "_controller" / "x")  # the controller's own: stays
    old = {
        "events": _log(root / "events" / "0", b"events-0"),
        "events1": _log(root / "events" / "1", b"events-1"),
        "partitions": _log(root / "partitions" / "0", b"topic named partitions"),
        "zeros": _log(root / "0" / "3", b"topic named 0"),
    }
    aside = root / "events" / f"2{identity.MOVED_ASIDE}dropped-group-4-20260101T000000"
    _log(aside, b"aside")
    (root / "stray").mkdir()  # not a topic directory (no partition in it): stays
    events: list[tuple[str, pathlib.Path]] = []
    fsync, rename = REAL_FS.fsync_dir, REAL_FS.rename
    monkeypatch.setattr(
        REAL_FS, "fsync_dir", lambda d: (events.append(("fsync", pathlib.Path(d))), fsync(d))
    )
    monkeypatch.setattr(
        REAL_FS, "rename", lambda a, b: (events.append(("rename", pathlib.Path(b))), rename(a, b))
    )
    moved = identity.migrate_layout(root)
    assert sorted(moved) == ["0", "events", "partitions"]
    p = root / "partitions"
    assert (p / "events" / "0" / "00000000000000000000.log").read_bytes() == b"events-0"
    assert (p / "events" / "1" / "00000000000000000000.log").read_bytes() == b"events-1"
    assert (p / "partitions" / "0" / "00000000000000000000.log").read_bytes() == (
        b"topic named partitions"
    )
    assert (p / "0" / "3" / "00000000000000000000.log").read_bytes() == b"topic named 0"
    assert identity.moved_aside(root) == [p / "events" / aside.name]
    assert sorted(x.name for x in root.iterdir()) == [
        "_controller",
        "node_id",
        "partitions",
        "stray",
    ]
    # after the last rename, both parents (old and new) are fsynced: durable at return
    last = max(i for i, (what, _) in enumerate(events) if what == "rename")
    assert {("fsync", root), ("fsync", p)} <= set(events[last + 1 :]), events
    del old
    # a second start finds the new layout: nothing moves
    assert identity.migrate_layout(root) == []
    assert (p / "partitions" / "0" / "00000000000000000000.log").read_bytes() == (
        b"topic named partitions"
    )


def test_a_migration_cut_after_its_first_rename_is_finished_at_the_next_start(tmp_path):
    root = _node_dir(tmp_path)
    _log(root / "partitions" / "0", b"p0")
    (root / "partitions").rename(root / "partitions~migrating")  # the crash came here
    assert identity.migrate_layout(root) == ["partitions"]
    assert (root / "partitions" / "partitions" / "0" / "00000000000000000000.log").read_bytes() == (
        b"p0"
    )


def test_purge_refuses_a_directory_that_is_not_a_nodes(tmp_path):
    victim = _log(tmp_path / "partitions" / "t" / f"0{identity.MOVED_ASIDE}x-20260101T000000")
    with pytest.raises(
        identity.NotANodeDirectory, match=r"--data-dir .*node marker file 'node_id'"
    ):
        identity.purge_moved_aside(tmp_path)
    assert (victim / "00000000000000000000.log").exists()


def test_purge_skips_symlinks_and_never_follows_them(tmp_path):
    root = _node_dir(tmp_path / "node")
    outside = _log(tmp_path / "outside" / "precious", b"keep me")
    topic = root / "partitions" / "t"
    gone = _log(topic / f"0{identity.MOVED_ASIDE}corrupt-group-5-20260101T000000")
    # a symlink named like a moved-aside directory, one inside a moved-aside directory,
    # and a symlinked topic directory: none is followed
    (topic / f"1{identity.MOVED_ASIDE}x-20260101T000000").symlink_to(outside)
    (gone / "link").symlink_to(outside)
    (root / "partitions" / "linked").symlink_to(tmp_path / "outside")
    (tmp_path / "outside" / f"2{identity.MOVED_ASIDE}y-20260101T000000").mkdir()
    assert identity.purge_moved_aside(root) == [gone]
    assert not gone.exists()
    assert (outside / "00000000000000000000.log").read_bytes() == b"keep me"
    assert (tmp_path / "outside" / f"2{identity.MOVED_ASIDE}y-20260101T000000").is_dir()
    assert (topic / f"1{identity.MOVED_ASIDE}x-20260101T000000").is_symlink()


def test_only_deleted_topics_replicas_go_after_the_delay(tmp_path):
    root = _node_dir(tmp_path)
    topic = root / "partitions" / "t"
    deleted = identity.move_aside(_log(topic / "0"), f"{identity.DELETED_GROUP}5")
    corrupt = identity.move_aside(_log(topic / "1"), "corrupt-group-6")
    dropped = identity.move_aside(_log(topic / "2"), "dropped-group-7")
    at = identity.deleted_at(deleted)
    assert at is not None and abs(at - time.time()) < 5
    assert identity.deleted_at(corrupt) is None and identity.deleted_at(dropped) is None
    assert identity.delete_expired(root, 60_000, at + 59) == []
    assert deleted.is_dir()
    assert identity.delete_expired(root, 60_000, at + 60) == [deleted]
    assert not deleted.exists() and corrupt.is_dir() and dropped.is_dir()
    stamp = calendar.timegm(time.strptime("20260101T000000", "%Y%m%dT%H%M%S"))
    assert identity.deleted_at(topic / "3.moved-aside-deleted-group-9-20260101T000000-2") == stamp
