"""A group's options reach its core: the shared fields are written once, in CoreOptions."""

from __future__ import annotations

import dataclasses

import pytest

from raftlog.raft.core import CoreOptions
from raftlog.raft.options import ConsensusOptions


def test_defaults_of_the_shared_fields_are_the_cores() -> None:
    assert ConsensusOptions().core_options() == CoreOptions()


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(CoreOptions)])
def test_every_core_field_set_on_the_group_reaches_the_core(field: str) -> None:
    default = getattr(CoreOptions(), field)
    changed = (not default) if isinstance(default, bool) else default + 3
    core = ConsensusOptions(**{field: changed}).core_options()
    assert getattr(core, field) == changed
    assert core == dataclasses.replace(CoreOptions(), **{field: changed})


def test_a_bad_window_names_the_option() -> None:
    with pytest.raises(ValueError, match=r"ConsensusOptions\.max_in_flight_bytes must be >= 1"):
        ConsensusOptions(max_in_flight_bytes=0).validate()


def test_a_bad_flush_linger_bound_names_the_option() -> None:
    with pytest.raises(
        ValueError, match=r"ConsensusOptions\.flush_linger_max_bytes must be >= 1, got 0"
    ):
        ConsensusOptions(flush_linger_max_bytes=0).validate()


def test_idle_heartbeats_as_rare_as_the_election_timeout_are_refused_by_name() -> None:
    ConsensusOptions(idle_heartbeat_ticks=9, election_timeout_ticks=10).validate()
    with pytest.raises(
        ValueError,
        match=r"ConsensusOptions\.idle_heartbeat_ticks must be below election_timeout_ticks "
        r"\(10\), got 10",
    ):
        ConsensusOptions(idle_heartbeat_ticks=10, election_timeout_ticks=10).validate()
