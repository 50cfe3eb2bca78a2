"""Configuration encoding, history (truncation reverts) and restore from the commit context."""

from __future__ import annotations

import pytest

from raftlog.raft.configuration import Configuration, ConfigurationHistory
from raftlog.raft.consensus import Consensus
from raftlog.sim.cluster import sim_options
from raftlog.sim.local_network import LocalNetwork
from raftlog.sim.loop import run_virtual
from raftlog.storage.batch import BatchKind
from raftlog.storage.memory import MemoryLog


def test_configuration_round_trips_through_its_batch() -> None:
    cfg = Configuration.of([3, 1, 2], [5], {1: 10})
    batch = cfg.to_batch()
    assert batch.kind is BatchKind.RAFT_CONFIG
    assert Configuration.decode(batch.payload) == cfg
    assert (cfg.voters, cfg.learners, cfg.priority(1), cfg.priority(2)) == ((1, 2, 3), (5,), 10, 1)
    assert cfg.with_voter(5) == Configuration.of([1, 2, 3, 5], [], {1: 10})


def test_bad_configurations_are_named() -> None:
    with pytest.raises(ValueError, match=r"nodes \[2\] are voters and learners"):
        Configuration.of([1, 2], [2])
    with pytest.raises(ValueError, match="invalid raft configuration payload"):
        Configuration.decode(b'{"learners": []}')


def test_history_truncation_reverts_to_the_previous_configuration() -> None:
    history = ConfigurationHistory(Configuration.of([1, 2, 3]))
    history.add(5, Configuration.of([1, 2, 3], [4]))
    history.add(9, Configuration.of([1, 2, 3, 4]))
    assert history.at(7) == (5, Configuration.of([1, 2, 3], [4]))
    assert history.truncate(9)
    assert history.latest == Configuration.of([1, 2, 3], [4])
    assert not history.truncate(6)
    with pytest.raises(ValueError, match="not after offset 5"):
        history.add(5, Configuration.of([1]))


def test_configuration_survives_a_restart_through_the_commit_context() -> None:
    async def scenario() -> None:
        network = LocalNetwork()
        log = MemoryLog()
        c = Consensus(1, 1, Configuration.of([1]), log, network.transport(1), sim_options())
        await c.start()
        await c.wait_for_commit(0, timeout=5)  # elected; its noop committed
        await c.add_member(2)  # a learner nobody serves: a change that commits on node 1 alone
        await c.stop()
        ctx = log.load_commit_context()
        assert ctx is not None and ctx.committed_offset == 1
        again = Consensus(1, 1, Configuration.of([1]), log, network.transport(1), sim_options())
        assert again.configuration == Configuration.of([1], [2])

    run_virtual(scenario())
