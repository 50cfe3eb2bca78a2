"""The error mapping of a partition's request handlers: raft, rm_stm and coordinator
errors to the wire's :class:`~raftlog.rpc.server.RequestError` codes (one place, so
every handler of :class:`~raftlog.node.partition_replica.PartitionReplica` answers a
failure alike)."""

from __future__ import annotations

from typing import Any

from raftlog.errors import RaftlogError
from raftlog.raft.errors import NotLeaderError, RaftError, TermMismatchError
from raftlog.rpc.messages import ErrorCode
from raftlog.rpc.server import RequestError
from raftlog.storage.fs import DiskFull

__all__ = ["REQUEST_TIMEOUT_S", "RequestErrors"]

REQUEST_TIMEOUT_S = 30.0
"""How long a write waits to be enqueued, then acknowledged, before TIMEOUT."""


class RequestErrors:
    """``async with RequestErrors(where, node_id):`` around a partition's handler maps the
    raft, rm_stm and coordinator errors it raises to a :class:`RequestError` with the
    wire code a client acts on (``where``: the partition, as "topic/partition", named
    in each message). A RequestError passes through; anything else not listed too (a
    handler's bug is the server's 500, not a code the client would retry)."""

    def __init__(self, where: str, node_id: int) -> None:
        self.where = where
        self.node_id = node_id

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, et: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None or isinstance(exc, RequestError):
            return False
        where = self.where
        if isinstance(exc, NotLeaderError):
            code = ErrorCode.NOT_LEADER if exc.leader_id >= 0 else ErrorCode.LEADER_NOT_AVAILABLE
            raise RequestError(code, f"{where}: {exc}", exc.leader_id) from exc
        if isinstance(exc, TermMismatchError):
            raise RequestError(ErrorCode.NOT_LEADER, f"{where}: {exc}") from exc
        if isinstance(exc, DiskFull):
            raise RequestError(
                ErrorCode.KAFKA_STORAGE_ERROR,
                f"KAFKA_STORAGE_ERROR: {where}: node {self.node_id}: {exc}",
            ) from exc
        if isinstance(exc, TimeoutError):
            why = f": {exc}" if str(exc) else ""
            raise RequestError(
                ErrorCode.TIMEOUT, f"{where}: not acknowledged within {REQUEST_TIMEOUT_S}s{why}"
            ) from exc
        if isinstance(exc, RaftlogError):  # rm_stm's and the coordinator's: the code is theirs
            raise RequestError(exc.code, f"{where}: {exc}", exc.leader_id) from exc
        if isinstance(exc, ValueError):
            raise RequestError(ErrorCode.INVALID_REQUEST, f"{where}: {exc}") from exc
        if isinstance(exc, RaftError):
            raise RequestError(ErrorCode.LEADER_NOT_AVAILABLE, f"{where}: {exc}") from exc
        return False
