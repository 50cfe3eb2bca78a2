"""The client of the transaction coordinator (``tm_stm`` on ``__transactions``).

Each call is one typed message to the leader of the coordinator's partition
(:data:`raftlog.rpc.messages.COORDINATOR_CALLS`), creating the internal topic
when it does not exist yet (one partition, replicated on up to 3 nodes), and
retried through leader changes and timeouts as every partition call is: each
call is idempotent, so a retry after an unknown outcome is safe.
"""

from __future__ import annotations

from typing import Any, TypeVar

from raftlog.client.async_client import RaftlogClient
from raftlog.client.errors import InvalidRequestError, RaftlogError, UnknownTopicError
from raftlog.coordinator.tm_stm import TRANSACTIONS_TOPIC
from raftlog.rpc.messages import (
    AbortRunRequest,
    AbortRunResponse,
    ConsistentCutRequest,
    ConsistentCutResponse,
    CoordinatorEndTxnRequest,
    CoordinatorEndTxnResponse,
    DescribeWriterRequest,
    DescribeWriterResponse,
    Participant,
    RegisterParticipantRequest,
    RegisterParticipantResponse,
)

__all__ = ["CoordinatorClient", "CoordinatorError"]

R = TypeVar("R")
_PARTITION = 0  # the coordinator's partition: __transactions has one


class CoordinatorError(RaftlogError):
    """The coordinator refused a call; the message says which field and why."""


class CoordinatorClient:
    """Calls the transaction coordinator through a :class:`RaftlogClient` (not owned)."""

    def __init__(self, client: RaftlogClient) -> None:
        self._client = client

    async def register(
        self, writer: str, version: int, participant: Participant
    ) -> RegisterParticipantResponse:
        """Register ``participant`` for ``version`` of ``writer`` before it writes."""
        req = RegisterParticipantRequest(_PARTITION, writer, version, participant)
        return await self._call(req, RegisterParticipantResponse)

    async def end_txn(
        self, writer: str, version: int, run: str, commit: bool, participants: list[Participant]
    ) -> CoordinatorEndTxnResponse:
        """Decide ``version`` and have the coordinator write its markers; it answers once
        the decision is durable and every marker of it too."""
        req = CoordinatorEndTxnRequest(_PARTITION, writer, version, run, commit, participants)
        return await self._call(req, CoordinatorEndTxnResponse)

    async def abort_run(self, run: str, version: int) -> int:
        req = AbortRunRequest(_PARTITION, run, version)
        return (await self._call(req, AbortRunResponse)).aborted

    async def cut(self, topic: str, topic_id: int = -1) -> ConsistentCutResponse:
        """The committed transactions of ``topic``; UnknownTopicError when no coordinator
        exists yet (then no coordinated transaction does either)."""
        req = ConsistentCutRequest(_PARTITION, topic, topic_id)
        return await self._call(req, ConsistentCutResponse, create=False)

    async def describe_writer(self, writer: str) -> DescribeWriterResponse:
        req = DescribeWriterRequest(_PARTITION, writer)
        return await self._call(req, DescribeWriterResponse)

    async def _call(self, req: Any, resp_type: type[R], *, create: bool = True) -> R:
        """``req`` at the coordinator's leader; with ``create``, the coordinator's topic is
        created when missing. Raises :class:`CoordinatorError` for a refused call."""
        try:
            try:
                return await self._client.partition_call(
                    TRANSACTIONS_TOPIC, _PARTITION, req, resp_type
                )
            except UnknownTopicError:
                if not create:
                    raise
                await self._ensure_topic()
                return await self._client.partition_call(
                    TRANSACTIONS_TOPIC, _PARTITION, req, resp_type
                )
        except InvalidRequestError as exc:
            raise CoordinatorError(
                f"transaction coordinator refused {type(req).__name__}: {exc}"
            ) from exc

    async def _ensure_topic(self) -> None:
        # the default replication factor: 3, or fewer on a smaller cluster
        await self._client.create_topic(TRANSACTIONS_TOPIC, 1, None, exist_ok=True)
