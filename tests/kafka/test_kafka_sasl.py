"""SASL/PLAIN on the Kafka listener, in-process: on a node with tokens a connection
may send only ApiVersions and the SASL exchange before it authenticates; the password
is the client or the admin token and gives that role, which the node's roles then
check per API (DeleteTopics needs admin); a wrong password is answered
SASL_AUTHENTICATION_FAILED and the connection closes."""

from __future__ import annotations

import asyncio
import datetime
import io
import struct
from typing import Any

from kio.index import load_response_schema
from kio.schema.delete_topics.v3.request import DeleteTopicsRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.serial import entity_reader, entity_writer

from raftlog.kafka.apis import KafkaApis
from raftlog.kafka.listener import KafkaListener
from raftlog.metrics import NodeMetrics
from raftlog.rpc.messages import DeleteTopicRequest, DeleteTopicResponse
from raftlog.rpc.server import AuthPolicy

CLIENT, ADMIN, PEER = "client-secret", "admin-secret", "peer-secret"
TOPIC_AUTHORIZATION_FAILED, SASL_AUTHENTICATION_FAILED = 29, 58


class _Node:
    """What DeleteTopics reaches once the roles let it through: the node's handler."""

    shards = None

    def __init__(self) -> None:
        self.deleted: list[str] = []

    async def handle_client(self, msg: Any) -> Any:
        assert isinstance(msg, DeleteTopicRequest)
        self.deleted.append(msg.name)
        return DeleteTopicResponse(msg.name)


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.cid = reader, writer, 0

    async def call(self, body: Any) -> Any:
        self.send(body)
        (size,) = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), 10))
        answer = await asyncio.wait_for(self.reader.readexactly(size), 10)
        schema = load_response_schema(body.__api_key__, body.__version__)
        head, at = entity_reader(schema.__header_schema__)(answer, 0)
        assert head.correlation_id == self.cid
        return entity_reader(schema)(answer, at)[0]

    def send(self, body: Any) -> None:
        self.cid += 1
        header = body.__header_schema__
        out = io.BytesIO()
        entity_writer(header)(
            out,
            header(
                request_api_key=body.__api_key__,
                request_api_version=body.__version__,
                correlation_id=self.cid,
                client_id="t",
            ),
        )
        entity_writer(type(body))(out, body)
        self.writer.write(struct.pack(">i", out.tell()) + out.getvalue())

    async def closed(self) -> bool:
        return await asyncio.wait_for(self.reader.read(1), 10) == b""


async def _listener(node: _Node) -> tuple[KafkaListener, NodeMetrics]:
    metrics = NodeMetrics(1, lambda: [])
    policy = AuthPolicy(client_token=CLIENT, peer_token=PEER, admin_token=ADMIN)
    listener = KafkaListener(KafkaApis(node, {}, policy), 1 << 20, metrics)
    await listener.start("127.0.0.1", 0)
    return listener, metrics


async def _connect(listener: KafkaListener) -> _Conn:
    host, _, port = listener.address.rpartition(":")
    return _Conn(*await asyncio.open_connection(host, int(port)))


async def _login(conn: _Conn, password: str) -> Any:
    hs = await conn.call(SaslHandshakeRequest(mechanism="PLAIN"))
    assert int(hs.error_code) == 0 and hs.mechanisms == ("PLAIN",)
    return await conn.call(SaslAuthenticateRequest(auth_bytes=b"\0user\0" + password.encode()))


DELETE = DeleteTopicsRequest(topic_names=("t",), timeout=datetime.timedelta(seconds=5))


async def test_roles_come_from_the_sasl_password() -> None:
    node = _Node()
    listener, metrics = await _listener(node)
    try:
        anonymous = await _connect(listener)
        anonymous.send(DELETE)  # a request before authenticating closes the connection
        assert await anonymous.closed()
        assert node.deleted == []
        sample = metrics.registry.get_sample_value(
            "raftlog_kafka_connections_closed_total", {"reason": "unauthenticated"}
        )
        assert sample == 1

        client = await _connect(listener)
        assert int((await _login(client, CLIENT)).error_code) == 0
        refused = await client.call(DELETE)
        assert int(refused.responses[0].error_code) == TOPIC_AUTHORIZATION_FAILED
        assert node.deleted == []

        admin = await _connect(listener)
        assert int((await _login(admin, ADMIN)).error_code) == 0
        done = await admin.call(DELETE)
        assert int(done.responses[0].error_code) == 0 and node.deleted == ["t"]

        for wrong in (PEER, "guess"):  # the nodes' own secret never opens the Kafka door
            bad = await _connect(listener)
            answer = await _login(bad, wrong)
            assert int(answer.error_code) == SASL_AUTHENTICATION_FAILED
            assert "neither the client token nor the admin token" in answer.error_message
            assert await bad.closed()
    finally:
        await listener.stop()
