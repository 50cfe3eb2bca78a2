"""Internal topics (names starting with ``__``) refuse what the API would do to them
(raftlog.node.internal_topics), naming the topic and why."""

from __future__ import annotations

import pytest

from raftlog.node.internal_topics import refuse_internal, refuse_internal_create
from raftlog.rpc.messages import ErrorCode
from raftlog.rpc.server import RequestError


@pytest.mark.parametrize("topic", ["__transactions", "__consumer_offsets", "__"])
@pytest.mark.parametrize("action", ["deleted", "altered", "given partitions", "produced to"])
def test_every_double_underscore_name_is_internal(topic: str, action: str) -> None:
    with pytest.raises(RequestError) as info:
        refuse_internal(topic, action)
    assert info.value.code is ErrorCode.INVALID_REQUEST
    assert str(info.value).startswith(f"topic {topic!r} is internal")
    assert f"cannot be {action} through the client API" in str(info.value)


@pytest.mark.parametrize("topic", ["orders", "_single", "a__b"])
def test_other_names_are_not(topic: str) -> None:
    refuse_internal(topic, "deleted")
    refuse_internal_create(topic, 3, True)


def test_only_the_coordinators_topic_in_its_shape_is_created() -> None:
    refuse_internal_create("__transactions", 1, False)
    refuse_internal_create("__transactions", -1, False)
    for partitions, configs in ((5, False), (1, True)):
        with pytest.raises(RequestError, match="creates it with one partition"):
            refuse_internal_create("__transactions", partitions, configs)
    with pytest.raises(RequestError, match="cannot be created through the client API"):
        refuse_internal_create("__consumer_offsets", 1, False)
