"""Internal topics: names starting with ``__`` (``__transactions``, and later ones such
as ``__consumer_offsets``) belong to the node. Through the client API nobody, client
or admin, deletes them, alters their configs, adds partitions to them, produces to
them, or creates one (but the coordinator's own ``__transactions``, in its fixed
shape, see :func:`refuse_internal_create`)."""

from __future__ import annotations

from raftlog.controller.commands import INTERNAL_PREFIX
from raftlog.coordinator.group_stm import CONSUMER_OFFSETS_PARTITIONS, CONSUMER_OFFSETS_TOPIC
from raftlog.coordinator.tm_stm import TRANSACTIONS_TOPIC
from raftlog.rpc.messages import ErrorCode
from raftlog.rpc.server import RequestError


def is_internal(topic: str) -> bool:
    return topic.startswith(INTERNAL_PREFIX)


def refuse_internal(topic: str, action: str) -> None:
    """RequestError (INVALID_REQUEST) naming ``topic`` and why, when it is internal
    and ``action`` ("deleted", "altered", ...) would be done to it through the API."""
    if is_internal(topic):
        raise RequestError(
            ErrorCode.INVALID_REQUEST,
            f"topic {topic!r} is internal (names starting with {INTERNAL_PREFIX!r} belong to "
            f"the node, which alone writes them): it cannot be {action} through the client API",
        )


def refuse_internal_create(topic: str, partitions: int, has_configs: bool) -> None:
    """Refuse creating an internal topic through the API, naming it. The one exception
    is the transaction coordinator's ``__transactions``, which the coordinator client
    creates on first use: in its fixed shape only (one partition, no config overrides
    nor schema: ``has_configs`` False), so nobody can make it otherwise; and the group
    coordinator's ``__consumer_offsets``, in its fixed shape too
    (``CONSUMER_OFFSETS_PARTITIONS`` partitions, no overrides)."""
    if not is_internal(topic):
        return
    if topic == TRANSACTIONS_TOPIC and partitions in (1, -1) and not has_configs:
        return
    # the group coordinator's, created on a group's first FindCoordinator (raftlog.kafka.groups)
    if (
        topic == CONSUMER_OFFSETS_TOPIC
        and partitions == CONSUMER_OFFSETS_PARTITIONS
        and not has_configs
    ):
        return
    if topic == TRANSACTIONS_TOPIC:
        raise RequestError(
            ErrorCode.INVALID_REQUEST,
            f"topic {topic!r} is internal: the transaction coordinator creates it with one "
            "partition and no config overrides or schema, and nothing else",
        )
    refuse_internal(topic, "created")
