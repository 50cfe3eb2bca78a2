"""raftlog.kafka.protocol: the request header by the body's flexibility, unsupported
APIs and versions named, bodies that do not end with the frame refused, and responses
of any version built from one set of values; and the --kafka-* flags."""

from __future__ import annotations

import argparse
import struct

import pytest
from kio.schema.metadata.v0.response import MetadataResponse as MetadataV0
from kio.schema.metadata.v6.response import MetadataResponse as MetadataV6

from raftlog.kafka.protocol import (
    RequestHead,
    UnsupportedRequest,
    build,
    encode_response,
    read_head,
    read_request,
)
from raftlog.node.config import add_server_arguments, config_from_args


def _header_v1(key: int, version: int, cid: int) -> bytes:
    return struct.pack(">hhih", key, version, cid, 3) + b"cli"


def test_unknown_api_key_and_version_are_named_with_the_correlation_id() -> None:
    with pytest.raises(UnsupportedRequest, match="unknown API key 9999") as err:
        read_head(_header_v1(9999, 0, 41))
    assert err.value.head.correlation_id == 41
    with pytest.raises(UnsupportedRequest, match="Produce version 2"):
        read_head(_header_v1(0, 2, 1))


def test_flexible_requests_read_header_v2_and_bodies_must_end_with_the_frame() -> None:
    # ApiVersions v3 is flexible: header v2 (a tagged-field byte after the client id)
    body = b"\x02t\x021\x00"  # compact strings "t", "1", no tagged fields
    frame = _header_v1(18, 3, 7) + b"\x00" + body
    head, at = read_head(frame)
    assert head == RequestHead(18, 3, 7, "cli")
    req = read_request(head, frame, at)
    assert req.client_software_name == "t"
    with pytest.raises(ValueError, match="1 bytes follow the request body"):
        read_request(head, frame + b"\x00", at)


def test_build_fits_one_set_of_values_to_each_version() -> None:
    values = {
        "throttle_time": 0,
        "brokers": [{"node_id": 1, "host": "h", "port": 9, "rack": None}],
        "cluster_id": "raftlog",
        "controller_id": 1,
        "topics": [{"error_code": 3, "name": "t", "is_internal": False, "partitions": []}],
    }
    v0, v6 = build(MetadataV0, values), build(MetadataV6, values)
    assert v0.brokers[0].host == "h" and v6.controller_id == 1
    assert int(v6.topics[0].error_code) == 3
    assert encode_response(RequestHead(3, 0, 5, None), v0)[:4] == b"\x00\x00\x00\x05"


def _server_args(*extra: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_server_arguments(p)
    return p.parse_args(
        ["--node-id", "1", "--listen", "127.0.0.1:9000", "--data-dir", "/d", *extra]
    )


def test_kafka_listen_beyond_loopback_needs_sasl_and_tls() -> None:
    with pytest.raises(ValueError, match=r"--kafka-listen: .*SASL/PLAIN.*--client-token"):
        config_from_args(_server_args("--kafka-listen", "10.0.0.1:9092"))
    tokens = ("--client-token", "c-secret", "--peer-token", "p-secret")
    with pytest.raises(ValueError, match=r"--kafka-listen: .*plain text: pass --tls-cert"):
        config_from_args(_server_args("--kafka-listen", "10.0.0.1:9092", *tokens))
    config = config_from_args(
        _server_args("--kafka-listen", "10.0.0.1:9092", *tokens, "--allow-plaintext")
    )
    assert config.kafka_listen == "10.0.0.1:9092"


def test_kafka_flags_are_checked_by_name() -> None:
    config = config_from_args(
        _server_args("--kafka-listen", "127.0.0.1:9092", "--kafka-peers", "2=127.0.0.1:9093")
    )
    assert config.kafka_peers == {1: "127.0.0.1:9092", 2: "127.0.0.1:9093"}
    with pytest.raises(ValueError, match="--kafka-max-request-bytes: expected 1024"):
        config_from_args(
            _server_args("--kafka-listen", "127.0.0.1:9092", "--kafka-max-request-bytes", "5")
        )
    with pytest.raises(ValueError, match="--kafka-peers: node 1 is listed as"):
        config_from_args(
            _server_args("--kafka-listen", "127.0.0.1:9092", "--kafka-peers", "1=127.0.0.1:1")
        )
    with pytest.raises(ValueError, match="need --kafka-listen"):
        config_from_args(_server_args("--kafka-peers", "2=127.0.0.1:9093"))


def test_every_raftlog_error_code_has_its_kafka_code() -> None:
    """A new ErrorCode left out of KAFKA_CODE would reach Kafka clients as
    UNKNOWN_SERVER_ERROR; INTERNAL alone is meant to."""
    from raftlog.kafka.apis import KAFKA_CODE
    from raftlog.rpc.messages import ErrorCode

    missing = {c.name for c in ErrorCode if c not in KAFKA_CODE} - {"OK", "NONE", "INTERNAL"}
    assert missing == set()
    assert KAFKA_CODE[ErrorCode.KAFKA_STORAGE_ERROR] == 56
    assert KAFKA_CODE[ErrorCode.INVALID_REPLICATION_FACTOR] == 38
