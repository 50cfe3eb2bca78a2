"""Identity markers are durable; a foreign data directory is refused and never deleted."""

from __future__ import annotations

import asyncio
import copy
import pathlib
import types

import pytest

from raftlog.controller import ControllerStm
from raftlog.node.process import Node
from raftlog.node.upkeep import claim_partition_dir
from raftlog.storage import identity
from raftlog.storage.fs import ModelFileSystem

D = pathlib.Path("/data/node-1/events/0")


def _crashed(fs: ModelFileSystem, seed: int) -> ModelFileSystem:
    probe = copy.deepcopy(fs)
    probe.crash(seed)
    return probe


def test_a_claimed_directory_and_its_marker_survive_any_crash():
    fs = ModelFileSystem(mutation="")
    assert identity.claim_directory(D, identity.GROUP_MARKER, "7", "group", fs) is True
    for seed in range(50):
        assert identity.read_marker(D, identity.GROUP_MARKER, _crashed(fs, seed)) == "7"


def test_the_old_marker_write_is_caught_losing_the_marker():
    """Planted fault: the marker written in place without fsyncs, as before."""
    fs = ModelFileSystem(mutation="")
    fs.mkdirs(D)
    fs.write_file(D / identity.GROUP_MARKER, b"7", fsync=False)
    lost = [s for s in range(50) if identity.read_marker(D, "group_id", _crashed(fs, s)) != "7"]
    assert lost


def test_another_groups_directory_is_refused_naming_both_ids_and_left_untouched(tmp_path):
    d = tmp_path / "events" / "0"
    identity.claim_directory(d, identity.GROUP_MARKER, "3", "group")
    (d / "00000000000000000000-00000000000000000001.log").write_bytes(b"precious")
    with pytest.raises(identity.ForeignDataDirectory) as err:
        identity.claim_directory(d, identity.GROUP_MARKER, "9", "group")
    assert str(d) in str(err.value)
    assert "belongs to group 3, not to group 9" in str(err.value)
    assert "Nothing was deleted" in str(err.value)
    assert (d / "00000000000000000000-00000000000000000001.log").read_bytes() == b"precious"
    assert identity.read_marker(d, identity.GROUP_MARKER) == "3"


def test_unmarked_data_is_refused_unless_adopted(tmp_path):
    (tmp_path / "_controller").mkdir()
    unmarked = "belongs to node unmarked, not to node 2"
    with pytest.raises(identity.ForeignDataDirectory, match=unmarked):
        identity.claim_directory(tmp_path, identity.NODE_MARKER, "2", "node")
    assert identity.claim_directory(
        tmp_path, identity.NODE_MARKER, "2", "node", adopt_unmarked=True
    )
    assert identity.claim_directory(tmp_path, identity.NODE_MARKER, "2", "node") is False
    with pytest.raises(identity.ForeignDataDirectory, match=r"belongs to node 2, not to node 1"):
        identity.claim_directory(tmp_path, identity.NODE_MARKER, "1", "node")


def test_a_node_refuses_another_nodes_data_dir(tmp_path):
    identity.claim_directory(tmp_path, identity.NODE_MARKER, "2", "node")
    node = types.SimpleNamespace(config=types.SimpleNamespace(data_dir=tmp_path), node_id=1)

    async def start():
        await Node.start(node)  # fails before touching anything else

    with pytest.raises(identity.ForeignDataDirectory, match=f"{tmp_path}: .*node 2, not to node 1"):
        asyncio.run(start())
    assert identity.read_marker(tmp_path, identity.NODE_MARKER) == "2"


def _controller_with_groups(*live: int) -> ControllerStm:
    stm = ControllerStm()
    stm.find_group = lambda gid: ("topic", "part") if gid in live else None  # type: ignore[method-assign]
    return stm


def test_a_dropped_groups_log_is_moved_aside_and_a_live_groups_is_refused(tmp_path):
    identity.claim_directory(tmp_path, identity.NODE_MARKER, "1", "node")
    d = identity.partition_dir(tmp_path, "events", 0)
    identity.claim_directory(d, identity.GROUP_MARKER, "3", "group")
    (d / "data.log").write_bytes(b"old group")
    with pytest.raises(identity.ForeignDataDirectory, match="group 3, not to group 5"):
        claim_partition_dir(d, 5, _controller_with_groups(3))
    claim_partition_dir(d, 5, _controller_with_groups())  # group 3 no longer exists
    assert identity.read_marker(d, identity.GROUP_MARKER) == "5"
    assert sorted(p.name for p in d.iterdir()) == ["group_id"]
    (aside,) = identity.moved_aside(tmp_path)
    assert ".moved-aside-dropped-group-3-" in aside.name
    assert (aside / "data.log").read_bytes() == b"old group"
    assert identity.purge_moved_aside(tmp_path) == [aside]
    assert not aside.exists() and d.exists()


def test_a_damaged_log_is_set_aside_with_its_vote_carried_over(tmp_path):
    from raftlog.storage.api import VoteState
    from raftlog.storage.vote_store import VoteStore

    d = tmp_path / "events" / "0"
    identity.claim_directory(d, identity.GROUP_MARKER, "4", "group")
    VoteStore(d).save(VoteState(9, 2))
    (d / "00000000000000000000-00000000000000000001.log").write_bytes(b"damaged")
    aside = identity.set_aside_damaged_log(d, 4)
    assert ".moved-aside-corrupt-group-4-" in aside.name
    assert (aside / "00000000000000000000-00000000000000000001.log").read_bytes() == b"damaged"
    assert sorted(p.name for p in d.iterdir()) == ["group_id", "vote"]
    assert VoteStore(d).load() == VoteState(9, 2)  # never votes twice in term 9


def test_a_set_aside_log_carries_its_commit_context_so_the_replica_starts_behind(tmp_path):
    from raftlog.raft.configuration import Configuration
    from raftlog.raft.consensus import Consensus
    from raftlog.storage.api import CommitContext
    from raftlog.storage.commit_context import CommitContextStore
    from raftlog.storage.log import SegmentedLog

    d = tmp_path / "events" / "0"
    identity.claim_directory(d, identity.GROUP_MARKER, "4", "group")
    CommitContextStore(d).save(CommitContext(41, 3, b"snap"))
    (d / "00000000000000000000-00000000000000000001.log").write_bytes(b"damaged")
    identity.set_aside_damaged_log(d, 4)
    assert sorted(p.name for p in d.iterdir()) == ["commit_context", "group_id", "vote"]
    # The refetched replica had acknowledged offsets up to 41: it starts behind them.
    log = SegmentedLog.open(d)
    try:
        c = Consensus(4, 2, Configuration.of([1, 2, 3], ()), log, transport=None)  # type: ignore[arg-type]
        assert c.core.promised_offset == 41 and c.core.behind_promise
    finally:
        log.close()


def test_a_damaged_commit_context_is_not_carried_and_blocks_nothing(tmp_path):
    d = tmp_path / "events" / "0"
    identity.claim_directory(d, identity.GROUP_MARKER, "4", "group")
    (d / "commit_context").write_bytes(b"garbage")
    identity.set_aside_damaged_log(d, 4)
    assert sorted(p.name for p in d.iterdir()) == ["group_id", "vote"]
