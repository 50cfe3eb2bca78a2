"""raftlog.rpc.edge_limits and the limits a FrameReceiver keeps (issue 44, item 2).

A frame's buffer grows with what arrived, never with what its header claims; a
node over its memory budget for requests, a stream over its requests in flight, a
stream whose answers are not read: reading stops and resumes. The connection caps
are checked on aiohttp's server hooks with stand-in transports; the flags parse
with their defaults and refuse values out of range, naming the flag.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import struct
from typing import Any

import pytest
from test_frame_receiver import FakeTransport, Inner, feed, frame

from raftlog.node.config import add_server_arguments, config_from_args
from raftlog.rpc.edge_limits import FLAGS, EdgeGuard, EdgeLimits, MemoryBudget
from raftlog.rpc.frame_receiver import (
    FIRST_FRAME_BYTES,
    FRAME_GROWTH,
    PAUSED_BUDGET,
    PAUSED_WRITES,
    SIZED_BY_HEADER_MAX,
    FrameReceiver,
)

CLAIMED = 34_603_016  # what the hostile heads claimed


class PausableTransport(FakeTransport):
    """A transport that records reading paused and resumed (asyncio's are idempotent)."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = True
        self.pauses = 0

    def pause_reading(self) -> None:
        assert self.reading, "paused twice"
        self.reading = False
        self.pauses += 1

    def resume_reading(self) -> None:
        assert not self.reading, "resumed while reading"
        self.reading = True


def make(
    max_frame: int = 0, budget: MemoryBudget | None = None
) -> tuple[FrameReceiver, PausableTransport, list[Any]]:
    got: list[Any] = []
    transport = PausableTransport()
    r = FrameReceiver(
        transport,  # type: ignore[arg-type]
        Inner(),  # type: ignore[arg-type]
        got.append,
        max_frame,
        budget=budget,  # type: ignore[arg-type]
    )
    return r, transport, got


def head(size: int, mask: bytes | None = None) -> bytes:
    first = bytes((0x82, (0x80 if mask else 0) | 127)) + struct.pack("!Q", size)
    return first + (mask or b"")


def test_a_head_claiming_33_mib_gets_a_buffer_sized_by_what_arrived() -> None:
    """Ten heads claiming 33 MiB with 16 bytes each: each buffer is 1 MiB at most, and
    it grows only as bytes fill it, FRAME_GROWTH times over, never past 4x of them."""

    async def body() -> None:
        for mask in (None, os.urandom(4)):
            r, _, got = make()
            buf = r.get_buffer(-1)
            wire = head(CLAIMED, mask) + os.urandom(16)
            buf[: len(wire)] = wire
            r.buffer_updated(len(wire))
            own = r.get_buffer(-1)
            assert len(own.obj) == FIRST_FRAME_BYTES  # not CLAIMED
            arrived = 16
            while arrived < 3 * FIRST_FRAME_BYTES * FRAME_GROWTH:
                buf = r.get_buffer(-1)
                n = len(buf)
                buf[:] = b"\x00" * n
                r.buffer_updated(n)
                arrived += n
                capacity = len(r.get_buffer(-1).obj)
                assert capacity <= max(FIRST_FRAME_BYTES, FRAME_GROWTH * arrived)
                assert capacity <= CLAIMED
            assert not got

    asyncio.run(body())


def test_frames_of_several_mib_arrive_whole_however_the_reads_cut_them() -> None:
    """Frames past the first buffer (grown once or twice), masked or not, in random reads."""

    async def body() -> None:
        rng = random.Random(44)
        for size in (FIRST_FRAME_BYTES - 1, FIRST_FRAME_BYTES + 1, 4 << 20, (5 << 20) + 3):
            for mask in (None, os.urandom(4)):
                payload = os.urandom(size)
                r, transport, got = make()
                feed(r, frame(payload, mask=mask), rng)
                (g,) = got
                assert bytes(g) == payload and g.readonly
                assert len(g.obj) == size  # exactly its size: the last growth stops there
                assert not transport.closed

    asyncio.run(body())


def test_the_side_that_called_allocates_an_answer_once_at_its_announced_size() -> None:
    """``sized_by_header`` (a client reading a node's answers): one array of the frame's
    size, filled straight from the socket, never grown by copies; a size past
    SIZED_BY_HEADER_MAX starts at FIRST_FRAME_BYTES and grows as on a node's side."""

    async def body() -> None:
        rng = random.Random(48)
        for size in ((16 << 20) + 7, FIRST_FRAME_BYTES + 1):
            for mask in (None, os.urandom(4)):
                payload = os.urandom(size)
                got: list[Any] = []
                r = FrameReceiver(
                    PausableTransport(),  # type: ignore[arg-type]
                    Inner(),  # type: ignore[arg-type]
                    got.append,
                    0,
                    sized_by_header=True,
                )
                wire = frame(payload, mask=mask)
                buf = r.get_buffer(-1)
                buf[:100] = wire[:100]
                r.buffer_updated(100)
                array = r.get_buffer(-1).obj
                assert len(array) == size  # at once, not FIRST_FRAME_BYTES
                feed(r, wire[100:], rng)
                (g,) = got
                assert bytes(g) == payload and g.readonly and g.obj is array
        r = FrameReceiver(
            PausableTransport(),  # type: ignore[arg-type]
            Inner(),  # type: ignore[arg-type]
            got.append,
            0,
            sized_by_header=True,
        )
        wire = head(SIZED_BY_HEADER_MAX + 1) + os.urandom(16)
        buf = r.get_buffer(-1)
        buf[: len(wire)] = wire
        r.buffer_updated(len(wire))
        assert len(r.get_buffer(-1).obj) == FIRST_FRAME_BYTES

    asyncio.run(body())


def test_a_node_over_its_memory_budget_begins_no_frame_until_answers_release_it() -> None:
    async def body() -> None:
        budget = MemoryBudget(200_000)
        r, transport, got = make(budget=budget)
        other, other_transport, other_got = make(budget=budget)
        payloads = [os.urandom(150_000), os.urandom(150_000)]
        feed(r, frame(payloads[0]), random.Random(1))
        assert transport.reading and budget.used == 150_000
        # begun under the budget, this frame completes past it (a frame never stalls)
        feed(r, frame(payloads[1]), random.Random(2))
        assert budget.used == 300_000 and [bytes(g) for g in got] == payloads
        # over the budget: no frame begins, on this stream or another; reading stops
        feed(r, frame(b"y" * 1000), random.Random(3))
        feed(other, frame(b"x" * 100), random.Random(4))
        assert len(got) == 2 and not other_got
        assert not transport.reading and PAUSED_BUDGET in r.paused
        assert not other_transport.reading and budget.used == 300_000
        budget.release(150_000)  # one answered: room again, the held frames go on
        assert transport.reading and other_transport.reading and not r.paused
        assert bytes(got[2]) == b"y" * 1000 and other_got == [b"x" * 100]
        assert budget.used == 150_000 + 1000 + 100

    asyncio.run(body())


def test_a_frame_larger_than_the_budget_still_arrives() -> None:
    async def body() -> None:
        budget = MemoryBudget(1 << 20)
        r, transport, got = make(budget=budget)
        payload = os.urandom(3 << 20)
        feed(r, frame(payload, mask=os.urandom(4)), random.Random(5))
        assert [bytes(g) for g in got] == [payload] and transport.reading
        budget.release(len(payload))
        assert budget.used == 0

    asyncio.run(body())


def test_a_frame_cut_off_midway_gives_its_bytes_back_to_the_budget() -> None:
    async def body() -> None:
        budget = MemoryBudget(1 << 30)
        r, _, got = make(budget=budget)
        wire = frame(os.urandom(3 << 20))
        buf = r.get_buffer(-1)
        buf[:65536] = wire[:65536]
        r.buffer_updated(65536)
        buf = r.get_buffer(-1)
        buf[:100_000] = wire[65536 : 65536 + 100_000]
        r.buffer_updated(100_000)
        assert budget.used == 65536 - 10 + 100_000
        r.connection_lost(None)
        assert budget.used == 0 and not got

    asyncio.run(body())


def test_answers_not_read_stop_the_reading_of_requests() -> None:
    async def body() -> None:
        r, transport, _ = make()
        r.pause_writing()
        assert not transport.reading and PAUSED_WRITES in r.paused
        r.pause("max_in_flight_per_stream")
        r.resume_writing()
        assert not transport.reading  # still over its requests in flight
        r.resume("max_in_flight_per_stream")
        assert transport.reading and transport.pauses == 1

    asyncio.run(body())


class FakeServer:
    """aiohttp's Server, as far as the guard hooks it."""

    def __init__(self) -> None:
        self.made: list[Any] = []

    def connection_made(self, handler: Any, transport: Any) -> None:
        self.made.append(handler)

    def connection_lost(self, handler: Any, exc: BaseException | None = None) -> None:
        pass


class AddressedTransport(PausableTransport):
    def __init__(self, ip: str) -> None:
        super().__init__()
        self.ip = ip
        self.aborted = False

    def get_extra_info(self, name: str) -> Any:
        return (self.ip, 40000) if name == "peername" else None

    def abort(self) -> None:
        self.aborted = True


def test_connections_past_either_cap_are_closed_at_once_and_counted() -> None:
    async def body() -> None:
        guard = EdgeGuard(EdgeLimits(max_connections=4, max_connections_per_ip=2))
        server = FakeServer()
        guard.install(server)  # type: ignore[arg-type]
        try:
            conns = [(object(), AddressedTransport(ip)) for ip in ["10.0.0.1"] * 3]
            for handler, transport in conns:
                server.connection_made(handler, transport)
            # not read from, and aborted once aiohttp's connection_made has returned
            assert [t.aborted for _, t in conns] == [False, False, False]
            assert [t.reading for _, t in conns] == [True, True, False]
            await asyncio.sleep(0)
            assert [t.aborted for _, t in conns] == [False, False, True]
            assert guard.refusals["max_connections_per_ip"] == 1
            more = [(object(), AddressedTransport(f"10.0.0.{i}")) for i in (2, 3, 4)]
            for handler, transport in more:
                server.connection_made(handler, transport)
            await asyncio.sleep(0)
            assert [t.aborted for _, t in more] == [False, False, True]
            assert guard.refusals["max_connections"] == 1
            assert guard.gauges()["connections"] == 4
            # one closes: room for another from its address
            server.connection_lost(conns[0][0], None)
            again = AddressedTransport("10.0.0.1")
            server.connection_made(object(), again)
            assert not again.aborted and guard.gauges()["connections"] == 4
        finally:
            await guard.stop()

    asyncio.run(body())


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_server_arguments(p)
    return p.parse_args(["--node-id", "1", "--data-dir", "d", "--listen", "127.0.0.1:9", *argv])


def test_every_limit_is_a_flag_with_its_default() -> None:
    cfg = config_from_args(parse())
    assert cfg.edge == EdgeLimits()
    assert cfg.edge.max_batches_per_produce == 10_000
    assert cfg.edge.max_topics_per_metadata == 10_000
    cfg = config_from_args(
        parse(
            "--queued-max-request-bytes", str(64 << 20),
            "--max-in-flight-per-stream", "8",
            "--request-header-timeout-ms", "500",
            "--connections-max-idle-ms", "700",
            "--max-connections", "30",
            "--max-connections-per-ip", "20",
            "--max-batches-per-produce", "5",
            "--max-topics-per-metadata", "6",
        )
    )  # fmt: skip
    assert cfg.edge == EdgeLimits(64 << 20, 8, 500, 700, 30, 20, 5, 6)


@pytest.mark.parametrize("flag", sorted(FLAGS.values()))
def test_a_limit_out_of_range_is_refused_naming_its_flag(flag: str) -> None:
    with pytest.raises(ValueError, match=f"^{flag}: expected an integer >= "):
        config_from_args(parse(flag, "0"))
