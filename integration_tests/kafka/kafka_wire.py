"""A raw Kafka connection for the listener's tests: requests encoded with kio (Kafka's
schemas), sent over a plain socket, so a test can also send what no client would."""

from __future__ import annotations

import datetime
import io
import socket
import struct
from typing import Any

from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.index import load_response_schema
from kio.schema.produce.v8.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.serial import entity_reader, entity_writer
from tenacity import Retrying, retry_if_result, stop_after_attempt, stop_after_delay, wait_fixed

from raftlog.client import BlockingRaftlogClient

TIMEOUT_S = 30.0


def encode_request(body: Any, correlation_id: int = 1, client_id: str = "raw") -> bytes:
    """``body`` (a kio request) with its header, size-prefixed."""
    header = body.__header_schema__
    out = io.BytesIO()
    entity_writer(header)(
        out,
        header(
            request_api_key=body.__api_key__,
            request_api_version=body.__version__,
            correlation_id=correlation_id,
            client_id=client_id,
        ),
    )
    entity_writer(type(body))(out, body)
    data = out.getvalue()
    return struct.pack(">i", len(data)) + data


def raw_header(api_key: int, version: int, correlation_id: int, client_id: bytes = b"raw") -> bytes:
    """A request header v1 (api key, version, correlation id, client id), no body."""
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def frame(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


class Wire:
    """One connection to ``address``; closed by the caller (a context manager)."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes | None:
        """The next response without its size prefix; None when the server closed."""
        prefix = self._exactly(4)
        if prefix is None:
            return None
        (size,) = struct.unpack(">i", prefix)
        return self._exactly(size)

    def closed_by_server(self) -> bool:
        """Whether the server closes the connection (EOF) within the timeout."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _exactly(self, n: int) -> bytes | None:
        chunks = []
        left = n
        while left:
            try:
                chunk = self.sock.recv(left)
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def call(self, body: Any, correlation_id: int = 1, response_version: int | None = None) -> Any:
        """Send kio request ``body``; its response decoded (by ``response_version``'s
        schema when given), after checking the correlation id."""
        self.send(encode_request(body, correlation_id))
        answer = self.read_frame()
        assert answer is not None, "the server closed the connection"
        version = body.__version__ if response_version is None else response_version
        return decode_response(answer, body.__api_key__, version, correlation_id)


def decode_response(answer: bytes, api_key: int, version: int, correlation_id: int) -> Any:
    schema = load_response_schema(api_key, version)
    header, size = entity_reader(schema.__header_schema__)(answer, 0)
    assert header.correlation_id == correlation_id
    body, _ = entity_reader(schema)(answer, size)
    return body


def produce_request(topic: str, records: bytes) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            TopicProduceData(
                name=topic, partition_data=(PartitionProduceData(index=0, records=records),)
            ),
        ),
    )


def record_batch(count: int = 3) -> bytearray:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 2**20)
    for i in range(count):
        builder.append(i, 1_700_000_000_000 + i, b"k", b"value-%d" % i, [])
    return builder.build()


def leader_address(kafka_cluster, bootstrap, topic: str) -> str:
    """The Kafka address of the node that leads ``topic``/0, once it has a leader."""
    with BlockingRaftlogClient(kafka_cluster.servers) as client:
        client.create_topic(topic, partitions=1, replication_factor=3, exist_ok=True)
        leader = Retrying(
            stop=stop_after_delay(60) | stop_after_attempt(300),
            wait=wait_fixed(0.2),
            retry=retry_if_result(lambda leader: leader not in (1, 2, 3)),
        )(lambda: client.describe_topic(topic).partitions[0].leader)
    return bootstrap[leader - 1]
