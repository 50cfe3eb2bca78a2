"""The node's marker writer: the transaction coordinator's markers, node to node.

:class:`PeerMarkers` is the :class:`~raftlog.coordinator.txn_coordinator.MarkerWriter`
of a node. A marker goes to the participant partition's leader as a
:class:`~raftlog.rpc.peer.WriteTxnMarkerRequest` on the peer stream (the nodes'
own transport, authenticated with the peer token), or straight to the local
handler when this node is the leader it tries. The leader is the one this node's
replica of the partition knows, else the one a refusal named, else each replica
in turn. Retriable refusals (not the leader, an election, a timeout, a full disk)
and lost links are retried with tenacity within ``MARKER_RETRY_S``; a refusal
that settles the marker (fenced, no open transaction, an epoch never granted, the
topic gone) is raised as rm_stm's own error, which the coordinator interprets.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
)

from raftlog.errors import InvalidTxnStateError, error_for
from raftlog.raft.errors import TransportError
from raftlog.rpc.messages import ErrorCode, Participant
from raftlog.rpc.peer import WriteTxnMarkerReply, WriteTxnMarkerRequest

__all__ = ["MARKER_RETRY_S", "PeerMarkers"]

MARKER_RETRY_S = 30.0
"""How long one marker is retried through leader changes before the coordinator gives
up this round (its caller retries the EndTxn, and the resume timer the decision)."""

_SETTLED = (ErrorCode.FENCED, ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_PRODUCER_EPOCH)
"""Refusals that settle a marker: the partition will refuse it again, whoever leads."""
_GONE = (ErrorCode.UNKNOWN_TOPIC, ErrorCode.UNKNOWN_PARTITION)
"""The answering node does not know the partition: its topic was deleted, or that node
has not applied the topic's creation yet. Only the first settles the marker, so it is
settled only when this node's controller state proves the deletion (``gone``)."""


class _Retry(Exception):
    """This attempt reached no leader that would write the marker; try again."""


class MarkerRefusedError(RuntimeError):
    """The partition refused the marker for a reason that retrying will not change."""


class PeerMarkers:
    """Writes markers on participants' partitions through their leaders (module doc).

    ``replicas(topic, partition)`` lists the partition's replicas, the leader this node
    knows first (raises for an unknown partition); ``local`` handles a request on this
    node; ``send`` sends one to another node on the peer stream (TransportError when
    the link fails); ``gone(topic, topic_id)`` is whether this node's controller state
    proves the topic deleted (an unknown partition settles the marker only then: a
    replica that has not applied the topic's creation yet also calls it unknown, and
    taking that for a deletion would leave the transaction open, unmarked).
    """

    def __init__(
        self,
        node_id: int,
        replicas: Callable[[str, int], list[int]],
        local: Callable[[WriteTxnMarkerRequest], Awaitable[WriteTxnMarkerReply]],
        send: Callable[[int, WriteTxnMarkerRequest], Awaitable[WriteTxnMarkerReply]],
        gone: Callable[[str, int], bool],
        *,
        retry_s: float = MARKER_RETRY_S,
    ) -> None:
        self.node_id = node_id
        self._replicas = replicas
        self._local = local
        self._send = send
        self._gone = gone
        self._retry_s = retry_s

    async def write_marker(self, participant: Participant, commit: bool) -> int:
        p = participant
        req = WriteTxnMarkerRequest(
            p.topic,
            p.partition,
            p.producer_id,
            p.epoch,
            commit,
            record_count=p.records if commit else -1,
            last_sequence=p.last_sequence if commit else -1,
        )
        hint = -1
        tried = 0
        async for attempt in AsyncRetrying(
            stop=stop_after_delay(self._retry_s),
            wait=wait_exponential(multiplier=0.02, max=1.0),
            retry=retry_if_exception_type(_Retry),
            reraise=True,
        ):
            with attempt:
                try:
                    candidates = self._replicas(p.topic, p.partition)
                except LookupError as exc:
                    raise self._unknown_here(p, str(exc)) from exc
                target = hint if hint >= 0 else candidates[tried % len(candidates)]
                tried += 1
                hint = -1
                try:
                    if target == self.node_id:
                        reply = await self._local(req)
                    else:
                        reply = await self._send(target, req)
                except TransportError as exc:
                    raise _Retry(f"node {target}: {exc}") from exc
                if reply.error is ErrorCode.NONE:
                    return reply.offset
                if reply.error in _SETTLED:
                    raise error_for(reply.error, reply.message)
                if reply.error in _GONE:
                    raise self._unknown_here(p, f"node {target}: {reply.message}")
                if reply.error.retriable or reply.error is ErrorCode.KAFKA_STORAGE_ERROR:
                    hint = reply.leader_id
                    raise _Retry(reply.message)
                raise MarkerRefusedError(f"{reply.error.name}: {reply.message}")
        raise AssertionError("unreachable")  # tenacity reraises the last error

    def _unknown_here(self, p: Participant, why: str) -> Exception:
        """An unknown partition: settled (InvalidTxnStateError) when its topic is proven
        deleted, else retried (a view that lags the topic's creation)."""
        if self._gone(p.topic, p.topic_id):
            return InvalidTxnStateError(f"{p.topic}/{p.partition}: {why}")
        return _Retry(f"{why} (the topic of id {p.topic_id} is not known deleted)")
