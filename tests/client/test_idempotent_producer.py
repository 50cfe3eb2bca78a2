"""The client's IdempotentProducer against a fake node whose produce path is a real RmStm
(over the in-memory consensus of the producer tests), with scripted faults."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from raftlog.client import (
    FencedError,
    InvalidRequestError,
    InvalidTxnStateError,
    RaftlogClient,
    unframe_records,
)
from raftlog.errors import RaftlogError
from raftlog.producers.rm_stm import RmStm, RmStmConfig
from raftlog.raft.replicate_batcher import Consistency
from raftlog.rpc import codec
from raftlog.rpc.messages import (
    EndTxnRequest,
    EndTxnResponse,
    ErrorCode,
    ErrorResponse,
    InitProducerRequest,
    InitProducerResponse,
    ProduceRequest,
    ProduceResponse,
)
from raftlog.storage.batch import BatchKind, RecordBatch
from tests.client.fake_node import FakeNodeServer, Route
from tests.producers.fake_consensus import FakeConsensus

# fault(request, produce request number) -> None (serve), "not_leader" (refuse, write
# nothing) or "lose_answer" (write, then never answer: the client's attempt times out)
Fault = Callable[[ProduceRequest, int], str | None]


class RmStmNode(FakeNodeServer):
    """One node leading t/0, serving produce, init_producer and end_txn through RmStm."""

    def __init__(self, reorder_wait_s: float = 0.5) -> None:
        super().__init__()
        self.consensus = FakeConsensus()
        self.stm = RmStm(self.consensus, RmStmConfig(reorder_wait_s=reorder_wait_s))
        self.fault: Fault = lambda req, n: None
        self.produce_count = 0
        self.end_txns: list[EndTxnRequest] = []

    def routes(self) -> dict[str, Route]:
        return {route: self._handle for route in ("produce", "init_producer", "end_txn")}

    def values(self, pid: int) -> list[tuple[int, str]]:
        """(offset, value) of every data record of ``pid`` in the log, in log order."""
        out = []
        for b in self.consensus.log:
            if b.kind is BatchKind.DATA and b.producer_id == pid:
                vals = unframe_records(b.payload, b.record_count)
                assert vals is not None
                out += [(b.base_offset + i, v.decode()) for i, v in enumerate(vals)]
        return out

    async def _handle(self, request: web.Request) -> web.Response:
        req = codec.decode(await request.read())
        try:
            resp = await self._serve(req)
        except RaftlogError as exc:
            resp = ErrorResponse(exc.code, str(exc))  # the code is the error's, as the node's
        return web.Response(body=codec.encode(resp))

    async def _serve(self, req: object) -> object:
        # as raftlog.node.partition_replica.PartitionReplica serves them
        if isinstance(req, InitProducerRequest):
            r = await self.stm.init_producer(req.producer_id, req.transaction_timeout_ms)
            return InitProducerResponse(
                r.producer_id, r.epoch, r.last_committed_version, r.transaction_timeout_ms
            )
        if isinstance(req, EndTxnRequest):
            self.end_txns.append(req)
            if req.acks != -1:
                return ErrorResponse(ErrorCode.INVALID_REQUEST, f"acks: got {req.acks}")
            r = await self.stm.end_transaction(
                req.producer_id,
                req.producer_epoch,
                req.commit,
                req.version,
                record_count=req.record_count,
                last_sequence=req.last_sequence,
            )
            return EndTxnResponse(r.offset, r.producer_epoch)
        assert isinstance(req, ProduceRequest)
        if req.transactional and req.acks != -1:
            return ErrorResponse(ErrorCode.INVALID_REQUEST, f"acks: got {req.acks}")
        self.produce_count += 1
        fault = self.fault(req, self.produce_count)
        if fault == "not_leader":
            return ErrorResponse(ErrorCode.NOT_LEADER, "t/0: not the leader", 1, self.address)
        (b,) = req.batches
        batch = RecordBatch.create(
            b.payload,
            b.record_count,
            transactional=req.transactional,
            producer_id=req.producer_id,
            producer_epoch=req.producer_epoch,
            first_sequence=req.first_sequence,
        )
        r = await self.stm.replicate(batch, Consistency.QUORUM_ACK)
        if fault == "lose_answer":
            await self.release.wait()
        return ProduceResponse(r.base_offset, r.last_offset)


@pytest.fixture
async def node() -> AsyncIterator[RmStmNode]:
    n = RmStmNode()
    await n.start()
    try:
        yield n
    finally:
        await n.stop()


async def test_in_order_exactly_once_through_refusals_and_lost_answers(node: RmStmNode) -> None:
    def fault(req: ProduceRequest, n: int) -> str | None:
        if n % 7 == 3:
            return "not_leader"
        if n % 11 == 5:
            return "lose_answer"
        return None

    node.fault = fault
    async with RaftlogClient([node.address], request_timeout_s=5.0, attempt_timeout_s=0.3) as c:
        p = await c.idempotent_producer("t", 0, producer_id=9)
        futures = [p.send([f"v{i}".encode()]) for i in range(100)]
        await p.flush()
        results = [f.result() for f in futures]
        assert p.retries > 0 and p.sends > 100  # the faults were met and retried
        await p.close()
    log = node.values(9)
    assert [v for _, v in log] == [f"v{i}" for i in range(100)]  # each once, in order
    assert [r.base_offset for r in results] == [off for off, _ in log]
    assert all(r.base_offset == r.last_offset for r in results)


async def test_a_fenced_producer_fails_its_sends_with_the_server_message(node: RmStmNode) -> None:
    async with RaftlogClient([node.address], request_timeout_s=5.0) as c:
        p = await c.idempotent_producer("t", 0, producer_id=3)
        first = await p.send([b"a"])
        await node.stm.init_producer(3)  # a newer session of the same producer id
        late = p.send([b"b"])
        with pytest.raises(FencedError, match="producer 3 is fenced"):
            await late
        with pytest.raises(FencedError):
            p.send([b"c"])
        with pytest.raises(FencedError):
            await p.flush()
        await p.close()
    assert [v for _, v in node.values(3)] == ["a"]
    assert first.base_offset == node.values(3)[0][0]


async def test_transactional_commit_records_the_version_and_abort_hides_nothing_else(
    node: RmStmNode,
) -> None:
    async with RaftlogClient([node.address], request_timeout_s=5.0) as c:
        p = await c.idempotent_producer("t", 0, producer_id=5, transactional=True)
        assert p.last_committed_version == -1
        for i in range(3):
            p.send([f"c{i}".encode()])
        commit_offset = await p.commit(version=41)
        p.send([b"x"])
        abort_offset = await p.abort()
        await p.close()
        again = await c.idempotent_producer("t", 0, producer_id=5, transactional=True)
        assert again.last_committed_version == 41
        await again.close()
    assert commit_offset < abort_offset
    assert node.stm.table.get(5).last_committed_version == 41
    assert [v for _, v in node.values(5)] == ["c0", "c1", "c2", "x"]
    assert node.stm.table.aborted  # the aborted batch is indexed, so fetch filters it


async def test_bad_arguments_are_named(node: RmStmNode) -> None:
    async with RaftlogClient([node.address], request_timeout_s=5.0) as c:
        with pytest.raises(InvalidRequestError, match="max_in_flight must be in"):
            await c.idempotent_producer("t", 0, max_in_flight=6)
        p = await c.idempotent_producer("t", 0)
        with pytest.raises(InvalidRequestError, match="values: expected at least one"):
            p.send([])
        with pytest.raises(InvalidRequestError, match="commit/abort need"):
            await p.commit()
        await p.close()


# -- transactions, hardened (issue 14, item 6) -------------------------------------------------


async def test_transactional_producer_needs_acks_all(node: RmStmNode) -> None:
    async with RaftlogClient([node.address], request_timeout_s=5.0) as c:
        with pytest.raises(
            InvalidRequestError, match=r"acks: transactional writes require acks=all"
        ):
            await c.idempotent_producer("t", 0, transactional=True, acks="1")
        s = await c.init_producer("t", 0, 3)
        with pytest.raises(InvalidRequestError, match="acks"):
            await c.produce("t", 0, [(b"x", 1)], "1", 3, s.epoch, 0, transactional=True)
        with pytest.raises(InvalidRequestError, match="acks"):
            await c.end_transaction("t", 0, 3, s.epoch, False, acks="1")
    assert [r.acks for r in node.end_txns] == [1]  # refused by the node, not written
    assert not any(b.kind is BatchKind.TX_ABORT for b in node.consensus.log)


async def test_abort_bumps_the_epoch_the_producer_goes_on_and_a_late_commit_is_fenced(
    node: RmStmNode,
) -> None:
    async with RaftlogClient([node.address], request_timeout_s=5.0) as c:
        p = await c.idempotent_producer("t", 0, producer_id=8, transactional=True)
        old_epoch = p.epoch
        await p.send([b"a0", b"a1"])
        await p.abort()
        assert p.epoch == old_epoch + 1  # adopted from the EndTxnResponse
        # the aborted transaction's late commit (a zombie's) is fenced
        with pytest.raises(FencedError, match=f"epoch {old_epoch} is older"):
            await c.end_transaction("t", 0, 8, old_epoch, True, 1)
        # the retry of the abort itself is answered with the same offset
        abort = node.end_txns[0]
        again = await c.end_transaction("t", 0, 8, old_epoch, False)
        assert node.consensus.log[-1].kind is BatchKind.TX_ABORT
        assert again == node.consensus.log[-1].base_offset
        # the producer's next transaction starts at sequence 0 of the new epoch and commits
        await p.send([b"b0"])
        offset = await p.commit(version=2)
        await p.close()
    assert abort.producer_epoch == old_epoch
    assert [v for _, v in node.values(8)] == ["a0", "a1", "b0"]
    assert node.stm.table.get(8).last_committed_version == 2
    assert node.consensus.log[-1].base_offset == offset


async def test_commit_names_what_was_sent_and_a_commit_without_a_transaction_is_refused(
    node: RmStmNode,
) -> None:
    async with RaftlogClient([node.address], request_timeout_s=5.0) as c:
        p = await c.idempotent_producer("t", 0, producer_id=9, transactional=True)
        with pytest.raises(InvalidTxnStateError, match="has no open transaction"):
            await p.commit(version=1)
        p.send([b"x0", b"x1"])
        p.send([b"x2"])
        offset = await p.commit(version=1)
        sent = node.end_txns[-1]
        assert (sent.record_count, sent.last_sequence) == (3, 2)
        # the exact retry of that commit returns the same offset; anything else is refused
        assert await c.end_transaction("t", 0, 9, p.epoch, True, 1, record_count=3) == offset
        with pytest.raises(InvalidTxnStateError, match="has no open transaction"):
            await p.commit(version=2)
        # a commit whose count does not match the open transaction is refused, naming it
        await p.send([b"y0"])
        with pytest.raises(
            InvalidTxnStateError,
            match=r"record_count: .* names 2 records, the open transaction holds 1",
        ):
            await c.end_transaction("t", 0, 9, p.epoch, True, 2, record_count=2)
        await p.commit(version=2)
        await p.close()
    assert node.stm.table.get(9).last_committed_version == 2


async def test_init_producer_sends_the_transaction_timeout(node: RmStmNode) -> None:
    async with RaftlogClient([node.address], request_timeout_s=5.0) as c:
        s = await c.init_producer("t", 0, 11, transaction_timeout_ms=500)
        assert s.transaction_timeout_ms == 500
        assert node.stm.table.get(11).transaction_timeout_ms == 500
        d = await c.init_producer("t", 0, 12)
        assert d.transaction_timeout_ms == node.stm.config.transaction_timeout_ms
        with pytest.raises(InvalidRequestError, match="transaction_timeout_ms must be an int"):
            await c.init_producer("t", 0, 13, transaction_timeout_ms="1s")  # type: ignore[arg-type]


@pytest.mark.parametrize("delivery_timeout_s", [0.3, 0.8])
async def test_an_unanswered_batch_fails_at_its_delivery_timeout(
    node: RmStmNode, delivery_timeout_s: float
) -> None:
    """The sender wakes for the oldest batch's delivery timeout on its own (the attempt
    itself would wait 30 s for the lost answer), fails every send with an error that
    names the timeout, and refuses later sends; batches acknowledged before stay so."""
    import asyncio
    import time

    from raftlog.client import RequestTimeoutError

    node.fault = lambda req, n: "lose_answer" if n > 1 else None
    async with RaftlogClient([node.address], request_timeout_s=30.0) as c:
        p = await c.idempotent_producer(
            "t", 0, producer_id=21, delivery_timeout_s=delivery_timeout_s
        )
        first = await p.send([b"kept"])
        started = time.monotonic()
        lost = [p.send([f"l{i}".encode()]) for i in range(3)]
        for fut in lost:
            with pytest.raises(RequestTimeoutError, match="delivery timeout"):
                await asyncio.wait_for(fut, 10.0)
        waited = time.monotonic() - started
        assert delivery_timeout_s <= waited < delivery_timeout_s + 1.0, waited
        with pytest.raises(RequestTimeoutError, match="start a new producer"):
            p.send([b"after"])
        node.release.set()
        await p.close(flush=False)
    assert first.base_offset == node.values(21)[0][0]
