"""A transaction left open by a dead writer is aborted by the partition leader after
``--transaction-timeout-ms``: the last stable offset moves on, readers never see the
abandoned data, and the writer, should it come back, is fenced."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Iterator

import pytest

from benchmarks.workloads.cluster_handle import ClusterHandle, running_cluster
from raftlog.client import RaftlogClient
from raftlog.client.errors import RaftlogError

TIMEOUT_MS = 1500


@pytest.fixture
def short_timeout_cluster(tmp_path: pathlib.Path) -> Iterator[ClusterHandle]:
    extra = ["--transaction-timeout-ms", str(TIMEOUT_MS)]
    with running_cluster(tmp_path / "cluster", extra_args=extra) as handle:
        yield handle


async def test_open_transaction_is_aborted_after_the_timeout(short_timeout_cluster) -> None:
    async with RaftlogClient(short_timeout_cluster.servers, request_timeout_s=20) as client:
        await client.create_topic("txn-timeout", partitions=1, replication_factor=3)
        await client.produce("txn-timeout", 0, [(b"committed-before", 1)])

        session = await client.init_producer("txn-timeout", 0, producer_id=77)
        await client.produce(
            "txn-timeout",
            0,
            [(b"abandoned", 1)],
            producer_id=77,
            producer_epoch=session.epoch,
            first_sequence=0,
            transactional=True,
        )
        _, hw, lso = await client.list_offsets("txn-timeout", 0)
        assert lso < hw, "the open transaction must hold back the last stable offset"

        # The writer "dies" here. Wait (bounded) for the leader to abort it.
        for _ in range(100):
            _, hw, lso = await client.list_offsets("txn-timeout", 0)
            if lso == hw:
                break
            await asyncio.sleep(0.1)
        assert lso == hw, f"transaction not aborted: lso {lso}, high watermark {hw}"

        fetched = await client.fetch("txn-timeout", 0, 0)
        payloads = [b.payload for b in fetched.batches]
        assert payloads == [b"committed-before"]

        # The zombie writer comes back: its epoch was bumped by the abort, so it is fenced.
        with pytest.raises(RaftlogError, match="fenced"):
            await client.produce(
                "txn-timeout",
                0,
                [(b"zombie", 1)],
                producer_id=77,
                producer_epoch=session.epoch,
                first_sequence=1,
                transactional=True,
            )
        fetched = await client.fetch("txn-timeout", 0, 0)
        assert [b.payload for b in fetched.batches] == [b"committed-before"]


def test_bad_transaction_timeout_is_refused_naming_the_flag(tmp_path: pathlib.Path) -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "raftlog",
            "server",
            "--node-id",
            "1",
            "--listen",
            "127.0.0.1:1",
            "--data-dir",
            str(tmp_path),
            "--transaction-timeout-ms",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "--transaction-timeout-ms: expected 1..86400000 milliseconds, got 0" in out.stderr
