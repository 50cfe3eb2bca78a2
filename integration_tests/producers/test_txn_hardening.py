"""The partition side of transactions on a real 3-node cluster (issue 14, item 6).

Each refusal is checked end to end (client -> server flag/handler -> rm_stm) with
its error text: transactional writes need acks=all; an abort bumps the epoch, so a
late commit is fenced; a commit needs an open transaction, but the exact retry of
an applied commit returns its offset; a commit whose record count does not match
is refused naming ``record_count``; a session's own transaction timeout (500 ms,
the server default being 60 s) aborts its transaction, and one above the server's
cap is refused.
"""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import Iterator

import pytest

from benchmarks.workloads.cluster_handle import ClusterHandle, running_cluster
from raftlog.client import (
    FencedError,
    InvalidRequestError,
    InvalidTxnStateError,
    RaftlogClient,
)

CAP_MS = 20_000
TOPIC = "txn-hardening"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    # the server default timeout stays 60 s; only the cap is lowered, to show the flag works
    extra = ["--max-transaction-timeout-ms", str(CAP_MS)]
    with running_cluster(tmp_path_factory.mktemp("txn-hardening"), extra_args=extra) as handle:
        yield handle


async def _produce_tx(
    client: RaftlogClient, pid: int, epoch: int, seq: int, values: list[bytes]
) -> None:
    await client.produce(
        TOPIC,
        0,
        [(v, 1) for v in values] if len(values) == 1 else [(b"".join(values), len(values))],
        producer_id=pid,
        producer_epoch=epoch,
        first_sequence=seq,
        transactional=True,
    )


async def test_refusals_and_exact_retries(cluster: ClusterHandle) -> None:
    async with RaftlogClient(cluster.servers, request_timeout_s=20) as client:
        await client.create_topic(TOPIC, partitions=1, replication_factor=3)

        # acks other than all: refused for transactional data and markers, naming acks
        s = await client.init_producer(TOPIC, 0, producer_id=1)
        with pytest.raises(
            InvalidRequestError, match=r"acks: transactional writes require acks=all \(-1\), got 1"
        ):
            await client.produce(TOPIC, 0, [(b"x", 1)], "1", 1, s.epoch, 0, transactional=True)
        with pytest.raises(
            InvalidRequestError, match=r"acks: transaction markers require acks=all \(-1\), got 1"
        ):
            await client.end_transaction(TOPIC, 0, 1, s.epoch, False, acks="1")
        await client.produce(TOPIC, 0, [(b"plain", 1)], acks="1")  # at-least-once: still fine

        # commit without a transaction: refused
        with pytest.raises(InvalidTxnStateError, match="has no open transaction"):
            await client.end_transaction(TOPIC, 0, 1, s.epoch, True, 1)

        # a commit whose record count does not match: refused, naming the field and both values
        await _produce_tx(client, 1, s.epoch, 0, [b"a0", b"a1"])
        with pytest.raises(
            InvalidTxnStateError,
            match=r"record_count: .* names 3 records, the open transaction holds 2",
        ):
            await client.end_transaction(TOPIC, 0, 1, s.epoch, True, 1, record_count=3)
        offset = await client.end_transaction(
            TOPIC, 0, 1, s.epoch, True, 1, record_count=2, last_sequence=1
        )
        # the exact retry of the applied commit returns the same offset, writes nothing
        _, hw, _ = await client.list_offsets(TOPIC, 0)
        again = await client.end_transaction(
            TOPIC, 0, 1, s.epoch, True, 1, record_count=2, last_sequence=1
        )
        assert again == offset
        assert (await client.list_offsets(TOPIC, 0))[1] == hw

        # a late commit after an abort: fenced (the abort bumped the epoch)
        await _produce_tx(client, 1, s.epoch, 2, [b"doomed"])
        abort = await client.end_transaction(TOPIC, 0, 1, s.epoch, False)
        with pytest.raises(FencedError, match=f"epoch {s.epoch} is older than the current"):
            await client.end_transaction(TOPIC, 0, 1, s.epoch, True, 2)
        with pytest.raises(FencedError):
            await _produce_tx(client, 1, s.epoch, 3, [b"zombie"])
        assert await client.end_transaction(TOPIC, 0, 1, s.epoch, False) == abort

        fetched = await client.fetch(TOPIC, 0, 0)
        payloads = [b.payload for b in fetched.batches]
        assert payloads == [b"plain", b"a0a1"]


async def test_a_session_transaction_timeout_is_honoured_and_capped(
    cluster: ClusterHandle,
) -> None:
    topic = "txn-timeout-session"
    async with RaftlogClient(cluster.servers, request_timeout_s=20) as client:
        await client.create_topic(topic, partitions=1, replication_factor=3)
        with pytest.raises(
            InvalidRequestError,
            match=rf"transaction_timeout_ms must be an int in \[1, {CAP_MS}\] milliseconds",
        ):
            await client.init_producer(topic, 0, 5, transaction_timeout_ms=CAP_MS + 1)
        slow = await client.init_producer(topic, 0, 6)  # the server default: 60 s
        fast = await client.init_producer(topic, 0, 7, transaction_timeout_ms=500)
        assert (slow.transaction_timeout_ms, fast.transaction_timeout_ms) == (60_000, 500)
        begun = time.monotonic()
        offsets = {}
        for pid, session in ((7, fast), (6, slow)):  # fast first: its offset holds the LSO
            r = await client.produce(
                topic,
                0,
                [(f"p{pid}".encode(), 1)],
                producer_id=pid,
                producer_epoch=session.epoch,
                first_sequence=0,
                transactional=True,
            )
            offsets[pid] = r.base_offset
        # the fast transaction holds the LSO until the leader aborts it; never commit it here
        aborted_after = None
        for _ in range(100):  # bounded: 10 s
            _, _, lso = await client.list_offsets(topic, 0)
            if lso > offsets[7]:
                aborted_after = time.monotonic() - begun
                break
            await asyncio.sleep(0.05)
        assert aborted_after is not None, "the 500 ms transaction was never aborted"
        assert 0.45 <= aborted_after < 3.0, f"aborted after {aborted_after:.2f}s"
        assert lso == offsets[6]  # the 60 s transaction still holds it
        with pytest.raises(FencedError):
            await client.end_transaction(topic, 0, 7, fast.epoch, True, record_count=1)
        # the slow session's transaction (60 s default) is still open: it commits
        await client.end_transaction(topic, 0, 6, slow.epoch, True, record_count=1)
        fetched = await client.fetch(topic, 0, 0)
        assert [b.payload for b in fetched.batches] == [b"p6"]


def test_the_cap_flag_is_validated_and_reaches_rm_stm(tmp_path: pathlib.Path) -> None:
    import argparse

    from raftlog.node.config import add_server_arguments, config_from_args
    from raftlog.node.process import Node

    parser = argparse.ArgumentParser()
    add_server_arguments(parser)
    base = ["--node-id", "1", "--listen", "127.0.0.1:1", "--data-dir", str(tmp_path)]
    with pytest.raises(
        ValueError,
        match=r"--max-transaction-timeout-ms: expected 1\.\.86400000 milliseconds, got 0",
    ):
        config_from_args(parser.parse_args([*base, "--max-transaction-timeout-ms", "0"]))
    config = config_from_args(parser.parse_args(base))
    assert config.max_transaction_timeout_ms == 900_000  # 15 minutes by default
    config = config_from_args(parser.parse_args([*base, "--max-transaction-timeout-ms", "5000"]))
    assert Node(config).host.rm_config.max_transaction_timeout_ms == 5000
