"""Several hosts, really (issue 44, item 7): three nodes in three network namespaces, a
Spark query writing through them while one node is cut off by its own packet filter.

The namespaces, veth pairs and bridge are :mod:`netns_hosts`'; the nodes serve TLS
(a ``trustme`` CA naming the three addresses) and take every token from their
environment. The shared local SparkSession, in the root namespace, streams
``rate-micro-batch`` rows (micro-batch ``b`` holds values ``[200 b, 200 (b + 1))``)
into a 3-partition topic with exactly-once. Once two micro-batches are committed,
the leader of partition 0 is cut off with nftables inside its namespace (every
packet in and out of its veth dropped); the query must keep committing on the
majority while it is cut off, and after the heal. Then every value of every committed
micro-batch must read back exactly once through Spark's batch read and through
``raftlog consume``, and the healed node must have caught up: its log end offset of
every partition equals the other replicas' and the high watermark, and
``raftlog cluster health`` asked through it alone reports a healthy cluster.
"""

from __future__ import annotations

import json
import pathlib
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from netns_hosts import (
    CLIENT_TOKEN_ENV,
    NetnsCluster,
    cli,
    client_env,
    make_tokens,
    missing_prerequisites,
    namespaces,
    running_nodes,
)
from prometheus_client.parser import text_string_to_metric_families
from stream_checks import (
    ROWS_PER_BATCH,
    assert_exactly_once,
    committed_batches,
    rate_stream,
    start_sink,
    unique_topic,
)
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_result,
    stop_after_attempt,
    stop_after_delay,
    wait_fixed,
)

from raftlog.client import BlockingRaftlogClient
from raftlog.rpc.tls import client_context

T = TypeVar("T")

PARTITIONS = 3
CUT_BATCHES = 3  # micro-batches that must commit while the node is cut off
CUT_MIN_S = 6.0  # the cut lasts at least this long: past the raft election timeouts
HEALED_BATCHES = 2  # micro-batches that must commit after the heal
BATCH_TIMEOUT_S = 90.0  # for each of the waits for committed micro-batches
# The sink's request timeout; each attempt gets a third of it. A cut-off node answers
# nothing (no reset either), so every call that still goes to it costs one attempt per
# client process until that process learns the new leader: with the default (30 s,
# attempts of 10 s) the first micro-batch after the cut took 66 s here, the test's
# bound would be most of it.
REQUEST_TIMEOUT_MS = 9000
CATCH_UP_TIMEOUT_S = 45.0
POLL_S = 0.5


@pytest.fixture
def netns_cluster(tmp_path: pathlib.Path) -> Iterator[NetnsCluster]:
    """Three nodes in three fresh namespaces; nodes stopped, then namespaces deleted."""
    missing = missing_prerequisites()
    if missing:
        pytest.fail(missing)
    with namespaces() as hosts, running_nodes(hosts, tmp_path / "cluster", make_tokens()) as c:
        yield c


def _wait_for(
    check: Callable[[], T],
    timeout_s: float,
    what: str,
    done: Callable[[T], bool] = lambda r: r is not None and r is not False,
) -> T:
    """``check()`` every POLL_S until ``done`` holds for its result, which is returned;
    AssertionError naming ``what`` and the last result after ``timeout_s`` (or as many
    checks as fit in it). An exception from ``check`` is raised at once."""

    def timed_out(state: RetryCallState) -> T:
        last = state.outcome.result() if state.outcome is not None else None
        raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}; last: {last}")

    retrying = Retrying(
        stop=stop_after_delay(timeout_s) | stop_after_attempt(int(timeout_s / POLL_S) + 1),
        wait=wait_fixed(POLL_S),
        retry=retry_if_result(lambda r: not done(r)),
        retry_error_callback=timed_out,
    )
    return retrying(check)


def _batches(query, checkpoint: pathlib.Path, at_least: int) -> Callable[[], int | None]:
    """A check for :func:`_wait_for`: the committed micro-batches once there are
    ``at_least``; the query's own error when it failed."""

    def check() -> int | None:
        if query.exception() is not None:
            raise AssertionError(f"the streaming query failed: {query.exception()}")
        n = committed_batches(checkpoint)
        return n if n >= at_least else None

    return check


def _scrape_log_ends(c: NetnsCluster, address: str) -> dict[tuple[str, str], float]:
    """(topic, partition) -> the log end offset of that node's replica, from its /metrics."""
    req = urllib.request.Request(f"https://{address}/metrics")
    req.add_header("Authorization", f"Bearer {c.tokens[CLIENT_TOKEN_ENV]}")
    ctx = client_context(c.ca_file)
    with urllib.request.urlopen(req, timeout=5, context=ctx) as resp:
        text = resp.read().decode()
    return {
        (s.labels["topic"], s.labels["partition"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "raftlog_partition_log_end_offset"
    }


def _log_ends(c: NetnsCluster, victim: int, topic: str) -> tuple[bool, dict, dict]:
    """(caught up, every replica's log end per partition, the high watermarks): caught up
    when the healed node's log end of each of its partitions equals the other replicas',
    and for ``topic`` also the high watermark that ``raftlog offsets`` reports through
    the healed node alone (not caught up while a node does not answer)."""
    try:
        ends = {n.node_id: _scrape_log_ends(c, n.address) for n in c.cluster.nodes}
    except OSError as exc:  # a node that does not answer has not caught up either
        return False, {}, {"metrics failed": repr(exc)}
    r = cli(
        "offsets",
        topic,
        "--format",
        "json",
        "--servers",
        c.cluster.node(victim).address,
        "--tls-ca",
        c.ca_file,
        env=client_env(c.tokens),
    )
    if r.returncode != 0:
        return False, ends, {"offsets failed": r.stderr.decode()}
    hwm = {str(p["partition"]): p["high_watermark"] for p in json.loads(r.stdout)["partitions"]}
    ours = {p for t, p in ends[victim] if t == topic}
    ok = ours == {str(p) for p in range(PARTITIONS)}
    for key, end in ends[victim].items():  # its __transactions replicas too
        others = {e[key] for node, e in ends.items() if node != victim and key in e}
        ok = ok and others == {end} and (key[0] != topic or end == hwm[key[1]])
    return ok, ends, hwm


def test_spark_through_three_namespaces_one_cut_off_and_healed(
    spark, netns_cluster: NetnsCluster, tmp_path: pathlib.Path
) -> None:
    c = netns_cluster
    token = c.tokens[CLIENT_TOKEN_ENV]
    topic = unique_topic("netns")
    checkpoint = tmp_path / "ck"
    started = time.monotonic()
    # a string ``value`` column alone: raw records, which `raftlog consume` prints as lines
    df = rate_stream(spark, partitions=PARTITIONS).selectExpr("CAST(value AS STRING) AS value")
    query = start_sink(
        df,
        topic,
        c.servers,
        checkpoint,
        authToken=token,
        tlsCaFile=c.ca_file,
        partitions=str(PARTITIONS),
        replicationFactor="3",
        lingerMs="50",
        requestTimeoutMs=str(REQUEST_TIMEOUT_MS),
    )
    try:
        _wait_for(_batches(query, checkpoint, 2), BATCH_TIMEOUT_S, "2 committed micro-batches")
        with BlockingRaftlogClient(
            c.servers, auth_token=token, tls_ca_file=c.ca_file, request_timeout_s=30.0
        ) as client:
            meta = client.describe_topic(topic)
        victim = meta.partitions[0].leader
        led = [p.partition for p in meta.partitions if p.leader == victim]
        assert victim in [n.node_id for n in c.cluster.nodes], meta
        where = c.index(victim)
        victim_node = c.cluster.node(victim)

        c.hosts.cut(where)
        try:
            assert c.hosts.is_cut(where)
            assert c.cluster.health(victim_node, timeout_s=2.0) is None, (
                f"node {victim} still answers from the root namespace while cut off"
            )
            cut_at = time.monotonic()
            before = committed_batches(checkpoint)
            _wait_for(
                _batches(query, checkpoint, before + CUT_BATCHES),
                BATCH_TIMEOUT_S,
                f"{CUT_BATCHES} micro-batches committed on the majority while node {victim} "
                f"(leader of partitions {led}) is cut off",
            )
            time.sleep(max(0.0, CUT_MIN_S - (time.monotonic() - cut_at)))
            during_cut = committed_batches(checkpoint) - before
            majority = [n.address for n in c.cluster.nodes if n.node_id != victim]
            with BlockingRaftlogClient(
                majority, auth_token=token, tls_ca_file=c.ca_file, request_timeout_s=30.0
            ) as client:
                moved = client.describe_topic(topic).partitions[0].leader
            assert moved not in (victim, -1), f"partition 0 is led by {moved} during the cut"
        finally:
            c.hosts.heal(where)
        assert not c.hosts.is_cut(where)
        _wait_for(
            lambda: c.cluster.health(victim_node, timeout_s=2.0), 30.0, f"node {victim} healed"
        )
        _wait_for(
            _batches(query, checkpoint, committed_batches(checkpoint) + HEALED_BATCHES),
            BATCH_TIMEOUT_S,
            f"{HEALED_BATCHES} micro-batches committed after the heal",
        )
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    committed = committed_batches(checkpoint)
    assert during_cut >= CUT_BATCHES

    read = (
        spark.read.format("raftlog")
        .option("servers", c.servers)
        .option("authToken", token)
        .option("tlsCaFile", c.ca_file)
        .option("topic", topic)
        .load()
    )
    by_spark = [int(bytes(r.value)) for r in read.select("value").collect()]
    assert_exactly_once(by_spark, committed)
    # a micro-batch whose commit Spark had not recorded when the query stopped may have
    # landed (its transaction committed): nothing beyond it
    assert max(by_spark) < (committed + 1) * ROWS_PER_BATCH

    consumed = cli(
        "consume",
        topic,
        "--from-beginning",
        "--timeout-ms",
        "3000",
        "--servers",
        c.servers,
        "--tls-ca",
        c.ca_file,
        env=client_env(c.tokens),
    )
    assert consumed.returncode == 0, consumed.stderr.decode()
    by_cli = [int(line) for line in consumed.stdout.decode().split()]
    assert_exactly_once(by_cli, committed)
    assert sorted(by_cli) == sorted(by_spark)

    _wait_for(
        lambda: _log_ends(c, victim, topic),
        CATCH_UP_TIMEOUT_S,
        f"node {victim}'s log ends to equal the other replicas' and the high watermark",
        done=lambda r: r[0],
    )

    def health():
        return cli(
            "cluster",
            "health",
            "--format",
            "json",
            "--servers",
            victim_node.address,
            "--tls-ca",
            c.ca_file,
            env=client_env(c.tokens),
        )

    _wait_for(
        health,
        CATCH_UP_TIMEOUT_S,
        f"`raftlog cluster health` through node {victim} to report a healthy cluster",
        done=lambda r: r.returncode == 0,
    )
    print(
        f"node {victim} (leader of partitions {led}) cut off for {during_cut} micro-batches; "
        f"{committed} committed, {len(by_spark)} rows read back; "
        f"{time.monotonic() - started:.1f}s from the query's start"
    )
