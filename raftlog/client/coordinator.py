"""The client of the transaction coordinator (``tm_stm`` on ``__transactions``).

Commands are JSON objects (see :mod:`raftlog.coordinator.state` for each
one's fields and result). :meth:`CoordinatorClient.call` sends one to the
leader of the coordinator's partition, creating the internal topic when it
does not exist yet (one partition, replicated on up to 3 nodes), and retries through leader
changes and timeouts as every partition call does: each command is
idempotent, so a retry after an unknown outcome is safe.
"""

from __future__ import annotations

import json
from typing import Any

from raftlog.client.async_client import RaftlogClient
from raftlog.client.errors import RaftlogError, UnknownTopicError
from raftlog.coordinator.tm_stm import TRANSACTIONS_TOPIC
from raftlog.rpc.messages import CoordinatorRequest, CoordinatorResponse

__all__ = ["CoordinatorClient", "CoordinatorError"]


class CoordinatorError(RaftlogError):
    """The coordinator refused a command; the message says which field and why."""


class CoordinatorClient:
    """Send coordinator commands through a :class:`RaftlogClient` (not owned)."""

    def __init__(self, client: RaftlogClient) -> None:
        self._client = client

    async def call(self, op: str, *, create: bool = True, **fields: Any) -> dict[str, Any]:
        """Run command ``op`` with ``fields``; return its result (``status`` != "error").

        With ``create`` False a missing coordinator topic raises
        UnknownTopicError instead of being created (readers use this: no writer
        has used a coordinator there yet). Raises :class:`CoordinatorError` when
        the coordinator answers with an error, and the client's errors when the
        cluster cannot be reached.
        """
        command = json.dumps({"op": op, **fields}, separators=(",", ":"))
        req = CoordinatorRequest(0, command)
        try:
            resp = await self._client._partition_call(
                TRANSACTIONS_TOPIC, 0, req, CoordinatorResponse
            )
        except UnknownTopicError:
            if not create:
                raise
            await self._ensure_topic()
            resp = await self._client._partition_call(
                TRANSACTIONS_TOPIC, 0, req, CoordinatorResponse
            )
        result = json.loads(resp.result)
        if result.get("status") == "error":
            raise CoordinatorError(f"transaction coordinator refused {op!r}: {result['error']}")
        return result

    async def _ensure_topic(self) -> None:
        # the default replication factor: 3, or fewer on a smaller cluster
        await self._client.create_topic(TRANSACTIONS_TOPIC, 1, None, exist_ok=True)
