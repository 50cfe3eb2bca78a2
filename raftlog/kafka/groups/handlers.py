"""The consumer group APIs in Kafka's terms: FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, and the admin's ListGroups,
DescribeGroups, DeleteGroups and OffsetDelete.

Each handler takes the decoded kio request and returns the response's values as a
dict (:func:`raftlog.kafka.protocol.build` fits them to the version), as the other
handlers of :class:`raftlog.kafka.apis.KafkaApis` do; the work is the coordinator's
(:class:`~raftlog.kafka.groups.coordinator.GroupCoordinator`). The role each API
needs is its route's in :data:`GROUP_ROUTES`: the client role (what ``fetch`` needs,
:mod:`raftlog.rpc.roles`) for all but DeleteGroups and OffsetDelete, which need the
admin role (as DeleteTopics). A caller without it gets GROUP_AUTHORIZATION_FAILED
(per group, per partition or for the whole request, where Kafka puts it).

FindCoordinator's ``key_type`` 1 (a transactional id) is the place Kafka
transactions plug in: its coordinator is the leader of ``__transactions``.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from raftlog.coordinator.group_stm import CONSUMER_OFFSETS_PARTITIONS, CONSUMER_OFFSETS_TOPIC
from raftlog.kafka.groups.coordinator import GroupCoordinator, GroupError
from raftlog.kafka.groups.membership import GroupSummary
from raftlog.kafka.protocol import RequestHead
from raftlog.rpc.messages import CreateTopicRequest, MetadataRequest

log = logging.getLogger("raftlog.kafka.groups")

#: API key -> name of the handler method (the table apis.py merges into its own)
GROUP_APIS: dict[int, str] = {
    8: "offset_commit",
    9: "offset_fetch",
    10: "find_coordinator",
    11: "join_group",
    12: "heartbeat",
    13: "leave_group",
    14: "sync_group",
    15: "describe_groups",
    16: "list_groups",
    42: "delete_groups",
    47: "offset_delete",
}

#: The route whose role the group APIs need: a group's members read, so what fetch
#: needs (raftlog.rpc.roles.ROUTE_ROLES: the client role).
GROUP_ROUTE = "fetch"
#: The route whose role deleting a group or its offsets needs: a name without an entry
#: in raftlog.rpc.roles.ROUTE_ROLES, which role_of gives the admin role (fail closed),
#: as DeleteTopics's ``delete_topic`` has; it names the APIs in the refusal.
GROUP_ADMIN_ROUTE = "kafka_delete_groups"
#: API key -> the route whose role it needs
GROUP_ROUTES: dict[int, str] = {
    key: GROUP_ADMIN_ROUTE if key in (42, 47) else GROUP_ROUTE for key in GROUP_APIS
}

#: The address a request's connection came from, as Kafka shows a member's
#: ``client_host`` ("/" and the IP); the listener sets it per connection.
CLIENT_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("kafka_client_host", default="")

#: DescribeGroups' ``authorized_operations`` bits (Kafka's AclOperation codes) of the
#: operations on a group: READ and DESCRIBE (the client role), DELETE (the admin's).
_READ, _DELETE, _DESCRIBE = 3, 6, 8
#: ``authorized_operations`` when not asked for (Kafka's INT32 minimum)
_OPERATIONS_NOT_ASKED = -(2**31)
#: ListGroups' group type (v5, KIP-848): every group here is a classic one
_CLASSIC = "classic"

_GROUP_KEY, _TXN_KEY = 0, 1


class GroupApis:
    """The group APIs of one node. ``call``: the Kafka door's node call
    (``KafkaApis._call``, which applies the caller's role); ``brokers``: node id ->
    Kafka HOST:PORT; ``create``: creates a topic at the controller's leader as the
    caller (``KafkaApis._create_as_caller``); ``refusal``: why the current request's
    caller may not call a route (None: it may; ``KafkaApis._refused``, which reads the
    request's role from its context); the limits are the node's
    (``config.kafka_group_limits``)."""

    def __init__(
        self,
        node: Any,
        brokers: dict[int, str],
        call: Callable[[str, Any], Awaitable[Any]],
        create: Callable[[CreateTopicRequest], Awaitable[None]],
        refusal: Callable[[str], str | None],
    ) -> None:
        self.node = node
        self.brokers = brokers
        self._call = call
        self._create = create
        self._refusal = refusal
        self._creating: asyncio.Task[None] | None = None
        limits = getattr(getattr(node, "config", None), "kafka_group_limits", None)
        self.coordinator = GroupCoordinator(node, limits)

    async def stop(self) -> None:
        if self._creating is not None:
            self._creating.cancel()
            await asyncio.gather(self._creating, return_exceptions=True)
        await self.coordinator.stop()

    async def handle(self, head: RequestHead, req: Any) -> dict[str, Any]:
        """The answer to group API ``head.api_key``, refused (in Kafka's way for the
        API) when the caller lacks the role of its route (:data:`GROUP_ROUTES`)."""
        handler = getattr(self, GROUP_APIS[head.api_key])
        refused = self._refusal(GROUP_ROUTES[head.api_key])
        if refused is not None:
            log.warning("kafka %s refused: %s", GROUP_APIS[head.api_key], refused)
        return await handler(head, req, refused)

    # -- FindCoordinator -----------------------------------------------------------

    async def find_coordinator(
        self, head: RequestHead, req: Any, refused: str | None
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "throttle_time": 0,
            "error_code": KafkaError.none,
            "error_message": None,
            "node_id": -1,
            "host": "",
            "port": -1,
        }
        key_type = int(getattr(req, "key_type", _GROUP_KEY))
        try:
            if refused is not None:
                raise GroupError(KafkaError.group_authorization_failed, refused)
            if key_type != _GROUP_KEY:
                # not a retriable error: librdkafka's init_transactions retried
                # INVALID_REQUEST until its timeout and said only "Timed out"
                raise GroupError(
                    KafkaError.transactional_id_authorization_failed
                    if key_type == _TXN_KEY
                    else KafkaError.invalid_request,
                    f"key_type: only 0 (a consumer group) is served, got {key_type}; Kafka "
                    "transactions (key_type 1, a transactional.id) are not supported by "
                    "raftlog's Kafka listener (docs/kafka.md)",
                )
            coordinator = self.coordinator
            coordinator.start()
            coordinator.validate_group_id(req.key)
            if CONSUMER_OFFSETS_TOPIC not in self.node.controller_stm.topics:
                self._create_offsets_topic()
            partition = coordinator.partition_of(req.key)
            coordinator.refuse_other_shard(partition)
            meta = await self._call("metadata", MetadataRequest([CONSUMER_OFFSETS_TOPIC], True))
            leader = -1
            for t in meta.topics:
                for p in t.partitions:
                    if p.partition == partition:
                        leader = p.leader
            address = self.brokers.get(leader)
            if address is None:
                raise GroupError(
                    KafkaError.coordinator_not_available,
                    f"{CONSUMER_OFFSETS_TOPIC}/{partition} has no leader serving Kafka yet",
                )
            host, _, port = address.rpartition(":")
            out.update(node_id=leader, host=host, port=int(port))
        except GroupError as exc:
            out["error_code"], out["error_message"] = exc.code, str(exc)
        except Exception as exc:  # the metadata call: retriable, the client asks again
            out["error_code"] = KafkaError.coordinator_not_available
            out["error_message"] = f"{type(exc).__name__}: {exc}"
        return out

    def _create_offsets_topic(self) -> None:
        """Kafka creates ``__consumer_offsets`` on the first FindCoordinator: here too,
        in the background (one creation at a time; the client asks again meanwhile and
        gets COORDINATOR_NOT_AVAILABLE), in its fixed shape, as the caller."""
        if self._creating is not None and not self._creating.done():
            return
        request = CreateTopicRequest(CONSUMER_OFFSETS_TOPIC, CONSUMER_OFFSETS_PARTITIONS, -1)

        async def create() -> None:
            try:
                await self._create(request)
                log.info("created %s", CONSUMER_OFFSETS_TOPIC)
            except Exception as exc:
                log.warning("could not create %s: %s", CONSUMER_OFFSETS_TOPIC, exc)

        self._creating = asyncio.get_running_loop().create_task(create())

    # -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ---------------------------

    async def join_group(self, head: RequestHead, req: Any, refused: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "throttle_time": 0,
            "generation_id": -1,
            "protocol_name": "",
            "leader": "",
            "member_id": req.member_id,
            "members": [],
        }
        try:
            if refused is not None:
                raise GroupError(KafkaError.group_authorization_failed, refused)
            session_ms = int(req.session_timeout.total_seconds() * 1000)
            rebalance = getattr(req, "rebalance_timeout", None)
            rebalance_ms = (
                session_ms
                if head.api_version == 0 or rebalance is None
                else (int(rebalance.total_seconds() * 1000))
            )
            answer = await self.coordinator.join(
                req.group_id,
                req.member_id,
                client_id=head.client_id or "",
                client_host=CLIENT_HOST.get(),
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=rebalance_ms,
                protocol_type=req.protocol_type,
                protocols=[(p.name, bytes(p.metadata)) for p in req.protocols],
                require_known_member_id=head.api_version >= 4,
                group_instance_id=getattr(req, "group_instance_id", None),
            )
        except GroupError as exc:
            out["error_code"] = exc.code
            return out
        out.update(
            error_code=answer.error,
            generation_id=answer.generation,
            protocol_name=answer.protocol_name or "",
            leader=answer.leader,
            member_id=answer.member_id,
            members=[
                {"member_id": mid, "group_instance_id": instance, "metadata": md}
                for mid, instance, md in answer.members
            ],
        )
        return out

    async def sync_group(self, head: RequestHead, req: Any, refused: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {"throttle_time": 0, "assignment": b""}
        try:
            if refused is not None:
                raise GroupError(KafkaError.group_authorization_failed, refused)
            assignments = {a.member_id: bytes(a.assignment) for a in req.assignments}
            answer = await self.coordinator.sync(
                req.group_id,
                req.member_id,
                int(req.generation_id),
                assignments,
                getattr(req, "group_instance_id", None),
            )
        except GroupError as exc:
            out["error_code"] = exc.code
            return out
        out.update(error_code=answer.error, assignment=answer.assignment)
        return out

    async def heartbeat(self, head: RequestHead, req: Any, refused: str | None) -> dict[str, Any]:
        try:
            if refused is not None:
                raise GroupError(KafkaError.group_authorization_failed, refused)
            code = self.coordinator.heartbeat(
                req.group_id,
                req.member_id,
                int(req.generation_id),
                getattr(req, "group_instance_id", None),
            )
        except GroupError as exc:
            code = exc.code
        return {"throttle_time": 0, "error_code": code}

    async def leave_group(self, head: RequestHead, req: Any, refused: str | None) -> dict[str, Any]:
        if head.api_version >= 3:
            who = [(m.member_id, m.group_instance_id) for m in req.members]
        else:
            who = [(req.member_id, None)]
        try:
            if refused is not None:
                raise GroupError(KafkaError.group_authorization_failed, refused)
            codes = self.coordinator.leave(req.group_id, who)
        except GroupError as exc:
            return {"throttle_time": 0, "error_code": exc.code, "members": []}
        members = [
            {"member_id": mid, "group_instance_id": instance, "error_code": code}
            for (mid, instance), code in zip(who, codes, strict=True)
        ]
        top = codes[0] if head.api_version < 3 and codes else KafkaError.none
        return {"throttle_time": 0, "error_code": top, "members": members}

    # -- OffsetCommit / OffsetFetch ------------------------------------------------

    async def offset_commit(
        self, head: RequestHead, req: Any, refused: str | None
    ) -> dict[str, Any]:
        rows = [
            (
                t.name,
                int(p.partition_index),
                int(p.committed_offset),
                int(getattr(p, "committed_leader_epoch", -1)),
                p.committed_metadata,
            )
            for t in req.topics
            for p in t.partitions
        ]
        try:
            if refused is not None:
                raise GroupError(KafkaError.group_authorization_failed, refused)
            codes = await self.coordinator.commit(
                req.group_id,
                req.member_id,
                int(req.generation_id_or_member_epoch),
                rows,
                getattr(req, "group_instance_id", None),
            )
        except GroupError as exc:
            codes = [exc.code] * len(rows)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition, *_), code in zip(rows, codes, strict=True):
            by_topic.setdefault(topic, []).append(
                {"partition_index": partition, "error_code": code}
            )
        return {
            "throttle_time": 0,
            "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()],
        }

    async def offset_fetch(
        self, head: RequestHead, req: Any, refused: str | None
    ) -> dict[str, Any]:
        wanted = (
            None
            if req.topics is None
            else [(t.name, int(i)) for t in req.topics for i in t.partition_indexes]
        )
        top = KafkaError.none
        rows: list[tuple[str, int, int, int, str, KafkaError]] = []
        try:
            if refused is not None:
                raise GroupError(KafkaError.group_authorization_failed, refused)
            rows = [
                (*row, KafkaError.none)
                for row in self.coordinator.fetch_offsets(req.group_id, wanted)
            ]
        except GroupError as exc:
            top = exc.code
            rows = [(t, p, -1, -1, "", exc.code) for t, p in wanted or []]
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for topic, partition, offset, epoch, metadata, code in rows:
            by_topic.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "committed_offset": offset,
                    "committed_leader_epoch": epoch,
                    "metadata": metadata,
                    "error_code": code,
                }
            )
        return {
            "throttle_time": 0,
            "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()],
            "error_code": top,
        }

    # -- ListGroups / DescribeGroups -----------------------------------------------

    async def list_groups(self, head: RequestHead, req: Any, refused: str | None) -> dict[str, Any]:
        """The groups this node coordinates (Kafka's ListGroups is per broker: admin
        clients ask every broker), filtered by v4's states and v5's types (either
        case, as Kafka compares them); every group is of type "classic"."""
        out: dict[str, Any] = {"throttle_time": 0, "error_code": KafkaError.none, "groups": []}
        try:
            if refused is not None:
                raise GroupError(KafkaError.group_authorization_failed, refused)
            self.coordinator.start()
            groups = self.coordinator.list_groups()
        except GroupError as exc:
            out["error_code"] = exc.code
            return out
        states = {s.lower() for s in getattr(req, "states_filter", ())}
        types = {t.lower() for t in getattr(req, "types_filter", ())}
        out["groups"] = [
            {
                "group_id": g.group_id,
                "protocol_type": g.protocol_type,
                "group_state": g.state,
                "group_type": _CLASSIC,
            }
            for g in groups
            if (not states or g.state.lower() in states) and (not types or _CLASSIC in types)
        ]
        return out

    async def describe_groups(
        self, head: RequestHead, req: Any, refused: str | None
    ) -> dict[str, Any]:
        """Each group as its coordinator holds it (Kafka's ``GroupMetadata.summary``:
        members with client id, host, and, while STABLE, their subscription and
        assignment bytes); NOT_COORDINATOR from any other node. A group that does not
        exist is "Dead" (v0-5) or GROUP_ID_NOT_FOUND (v6, KIP-1043)."""
        operations = _OPERATIONS_NOT_ASKED
        if getattr(req, "include_authorized_operations", False) and refused is None:
            operations = (1 << _READ) | (1 << _DESCRIBE)
            if self._refusal(GROUP_ADMIN_ROUTE) is None:
                operations |= 1 << _DELETE

        def one(group_id: str) -> dict[str, Any]:
            out: dict[str, Any] = {
                "error_code": KafkaError.none,
                "error_message": None,
                "group_id": group_id,
                "group_state": "",
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
                "authorized_operations": _OPERATIONS_NOT_ASKED,
            }
            try:
                if refused is not None:
                    raise GroupError(KafkaError.group_authorization_failed, refused)
                summary = self.coordinator.describe(group_id)
            except GroupError as exc:
                out.update(error_code=exc.code, error_message=str(exc))
                return out
            out["authorized_operations"] = operations
            if summary is None:
                out["group_state"] = "Dead"
                if head.api_version >= 6:
                    out["error_code"] = KafkaError.group_id_not_found
                    out["error_message"] = f"group {group_id!r} does not exist"
                return out
            out.update(_described(summary))
            return out

        self.coordinator.start()
        return {"throttle_time": 0, "groups": [one(g) for g in req.groups]}

    # -- DeleteGroups / OffsetDelete -----------------------------------------------

    async def delete_groups(
        self, head: RequestHead, req: Any, refused: str | None
    ) -> dict[str, Any]:
        """Each group deleted if it is empty (NON_EMPTY_GROUP if not, GROUP_ID_NOT_FOUND
        if it does not exist, NOT_COORDINATOR from another node): its metadata and
        committed offsets go from ``__consumer_offsets``."""

        async def one(group_id: str) -> dict[str, Any]:
            try:
                if refused is not None:
                    raise GroupError(KafkaError.group_authorization_failed, refused)
                code = await self.coordinator.delete_group(group_id)
            except GroupError as exc:
                code = exc.code
            return {"group_id": group_id, "error_code": code}

        self.coordinator.start()
        results = await asyncio.gather(*(one(g) for g in req.groups_names))
        return {"throttle_time": 0, "results": list(results)}

    async def offset_delete(
        self, head: RequestHead, req: Any, refused: str | None
    ) -> dict[str, Any]:
        """The group's committed offsets of the given partitions deleted; a group error
        (authorization, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, NOT_COORDINATOR) answers
        the whole request with no partitions, as Kafka; partition errors per
        partition (GROUP_SUBSCRIBED_TO_TOPIC, UNKNOWN_TOPIC_OR_PARTITION)."""
        wanted = [(t.name, int(p.partition_index)) for t in req.topics for p in t.partitions]
        out: dict[str, Any] = {"throttle_time": 0, "error_code": KafkaError.none, "topics": []}
        try:
            if refused is not None:
                raise GroupError(KafkaError.group_authorization_failed, refused)
            self.coordinator.start()
            codes = await self.coordinator.delete_offsets(req.group_id, wanted)
        except GroupError as exc:
            out["error_code"] = exc.code
            return out
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), code in zip(wanted, codes, strict=True):
            by_topic.setdefault(topic, []).append(
                {"partition_index": partition, "error_code": code}
            )
        out["topics"] = [{"name": n, "partitions": ps} for n, ps in by_topic.items()]
        return out


def _described(summary: GroupSummary) -> dict[str, Any]:
    """DescribeGroups' values of an existing group."""
    return {
        "group_state": summary.state,
        "protocol_type": summary.protocol_type,
        "protocol_data": summary.protocol,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": m.metadata,
                "member_assignment": m.assignment,
            }
            for m in summary.members
        ],
    }
