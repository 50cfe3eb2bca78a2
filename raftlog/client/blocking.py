"""A blocking facade over :class:`RaftlogClient` for callers without an event loop
(Spark's Python workers). It runs a private event loop in a daemon thread; each
method submits the async call there and waits for its result, so the methods
are safe to call from any thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from raftlog.client.async_client import RaftlogClient
from raftlog.client.producer import IdempotentProducer
from raftlog.client.results import FetchResult, ProduceResult, ProducerSession, TopicMetadata

T = TypeVar("T")


class BlockingRaftlogClient:
    """Same methods and arguments as RaftlogClient, but blocking."""

    def __init__(
        self,
        servers: str | list[str],
        *,
        auth_token: str | None = None,
        tls_ca_file: str | None = None,
        request_timeout_s: float = 30.0,
        attempt_timeout_s: float | None = None,
        admin_token: str | None = None,
    ) -> None:
        """See :class:`RaftlogClient` for the arguments (``tls_ca_file``: HTTPS, verified
        against that PEM CA)."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="raftlog-client", daemon=True
        )
        self._thread.start()
        self._closed = False
        self._client: RaftlogClient = self._run(
            _make(
                servers,
                auth_token=auth_token,
                admin_token=admin_token,
                tls_ca_file=tls_ca_file,
                request_timeout_s=request_timeout_s,
                attempt_timeout_s=attempt_timeout_s,
            )
        )

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("the client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        """Close the connections and stop the loop thread (idempotent)."""
        if self._closed:
            return
        try:
            self._run(self._client.close())
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            if not self._thread.is_alive():
                self._loop.close()

    def call(self, fn: Callable[[RaftlogClient], Coroutine[Any, Any, T]]) -> T:
        """Run ``fn(async client)`` on the client's loop and return its result (for the
        async-only helpers, e.g. :func:`raftlog.client.transactions.committed_cut`)."""
        return self._run(fn(self._client))

    def submit(
        self, fn: Callable[[RaftlogClient], Coroutine[Any, Any, T]]
    ) -> concurrent.futures.Future[T]:
        """Start ``fn(async client)`` on the client's loop and return its future at once
        (``result()`` waits; ``cancel()`` cancels the call): a caller overlaps its own
        work with the call, e.g. the source's next fetch with decoding this one."""
        if self._closed:
            raise RuntimeError("the client is closed")
        return asyncio.run_coroutine_threadsafe(fn(self._client), self._loop)

    def __enter__(self) -> BlockingRaftlogClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        schema: bytes | None = None,
        exist_ok: bool = False,
    ) -> TopicMetadata:
        return self._run(
            self._client.create_topic(name, partitions, replication_factor, schema, exist_ok)
        )

    def describe_topic(
        self, name: str, *, offsets: bool = True, wait_for_leaders_s: float = 0.0
    ) -> TopicMetadata:
        return self._run(
            self._client.describe_topic(
                name, offsets=offsets, wait_for_leaders_s=wait_for_leaders_s
            )
        )

    def list_topics(self) -> list[str]:
        return self._run(self._client.list_topics())

    def delete_topic(self, name: str) -> None:
        self._run(self._client.delete_topic(name))

    def produce(
        self,
        topic: str,
        partition: int,
        records: list[tuple[bytes, int]],
        acks: str | int = "all",
        producer_id: int = -1,
        producer_epoch: int = -1,
        first_sequence: int = -1,
        transactional: bool = False,
        compression: str = "none",
    ) -> ProduceResult:
        return self._run(
            self._client.produce(
                topic,
                partition,
                records,
                acks,
                producer_id,
                producer_epoch,
                first_sequence,
                transactional,
                compression,
            )
        )

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int = 1024 * 1024,
        isolation: str = "read_committed",
    ) -> FetchResult:
        return self._run(self._client.fetch(topic, partition, offset, max_bytes, isolation))

    def list_offsets(self, topic: str, partition: int) -> tuple[int, int, int]:
        return self._run(self._client.list_offsets(topic, partition))

    def init_producer(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        *,
        transaction_timeout_ms: int | None = None,
    ) -> ProducerSession:
        """See :meth:`RaftlogClient.init_producer` (the session's transaction timeout:
        None or -1 the server default; capped by ``--max-transaction-timeout-ms``)."""
        return self._run(
            self._client.init_producer(
                topic, partition, producer_id, transaction_timeout_ms=transaction_timeout_ms
            )
        )

    def end_transaction(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        version: int = -1,
        acks: str | int = "all",
        *,
        record_count: int = -1,
        last_sequence: int = -1,
    ) -> int:
        """See :meth:`RaftlogClient.end_transaction`: acks must be "all", an abort bumps
        the epoch, a commit needs an open transaction matching ``record_count`` /
        ``last_sequence`` (-1: unchecked); the exact retry returns the original offset."""
        return self._run(
            self._client.end_transaction(
                topic,
                partition,
                producer_id,
                producer_epoch,
                commit,
                version,
                acks,
                record_count=record_count,
                last_sequence=last_sequence,
            )
        )

    def idempotent_producer(
        self,
        topic: str,
        partition: int,
        *,
        producer_id: int | None = None,
        max_in_flight: int = 5,
        transactional: bool = False,
        acks: str | int = "all",
        delivery_timeout_s: float = 120.0,
        transaction_timeout_ms: int | None = None,
    ) -> BlockingIdempotentProducer:
        producer = self._run(
            self._client.idempotent_producer(
                topic,
                partition,
                producer_id=producer_id,
                max_in_flight=max_in_flight,
                transactional=transactional,
                acks=acks,
                delivery_timeout_s=delivery_timeout_s,
                transaction_timeout_ms=transaction_timeout_ms,
            )
        )
        return BlockingIdempotentProducer(self, producer)


class BlockingIdempotentProducer:
    """The blocking face of :class:`~raftlog.client.producer.IdempotentProducer`.

    ``send`` returns a :class:`concurrent.futures.Future` at once; sends from one
    thread get sequences in call order.
    """

    def __init__(self, client: BlockingRaftlogClient, producer: IdempotentProducer) -> None:
        self._client = client
        self._producer = producer

    @property
    def producer_id(self) -> int:
        return self._producer.producer_id

    @property
    def epoch(self) -> int:
        return self._producer.epoch

    @property
    def last_committed_version(self) -> int:
        return self._producer.last_committed_version

    @property
    def producer(self) -> IdempotentProducer:
        """The async producer (use it on the client's loop only)."""
        return self._producer

    def send(self, values: list[bytes]) -> concurrent.futures.Future[ProduceResult]:
        return self._submit(self._producer.send, values)

    def send_batch(
        self, payload: bytes, record_count: int
    ) -> concurrent.futures.Future[ProduceResult]:
        return self._submit(self._producer.send_batch, payload, record_count)

    def _submit(self, fn: Any, *args: Any) -> concurrent.futures.Future[ProduceResult]:
        out: concurrent.futures.Future[ProduceResult] = concurrent.futures.Future()
        out.set_running_or_notify_cancel()

        def done(f: asyncio.Future[ProduceResult]) -> None:
            if f.cancelled():
                out.cancel()
            elif f.exception() is not None:
                out.set_exception(f.exception())
            else:
                out.set_result(f.result())

        async def queue() -> None:
            # on the loop, in call order: the batch's sequence is fixed here
            fn(*args).add_done_callback(done)

        self._client._run(queue())
        return out

    def flush(self) -> None:
        self._client._run(self._producer.flush())

    def commit(self, version: int = -1) -> int:
        return self._client._run(self._producer.commit(version))

    def abort(self) -> int:
        return self._client._run(self._producer.abort())

    def close(self, *, flush: bool = True) -> None:
        self._client._run(self._producer.close(flush=flush))

    def __enter__(self) -> BlockingIdempotentProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _make(servers: str | list[str], **kwargs: Any) -> RaftlogClient:
    # Built on the loop thread so aiohttp binds to the right loop.
    return RaftlogClient(servers, **kwargs)
