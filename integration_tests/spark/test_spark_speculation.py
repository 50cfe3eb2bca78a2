"""A speculative duplicate task attempt's rows never appear (issue 14).

Spark never runs a speculative copy of a task on a host where an attempt of it already
runs, so local mode (one host) never speculates: this runs a standalone cluster whose
two workers, and so their executors, are on distinct loopback hosts (127.0.0.2 and
127.0.0.3), the master and the driver on 127.0.0.1. The driver
(``spark_drivers/speculative_sink.py``, in its own interpreter: one SparkContext per JVM)
streams into the raftlog sink with ``spark.speculation`` on; in micro-batch 1, attempt 0
of partition 0 hands its rows to the writer slowly (which registers and writes them in
an open transaction), and does not end before the speculative attempt 1 has won and
Spark has killed it. The loser's participant is registered but not named in the commit
decision, so the decision must abort it. The test checks that the loser's rows are in
the log (read uncommitted), so it really took part; that they are never readable (read
committed, by the raftlog source); and that every row is read exactly once.

Planted faults it catches: abort markers skipped in ``TxnCoordinator._write_markers`` (the
loser's open transaction holds the last stable offset: micro-batch 1's rows missing);
the loser committed instead of aborted (its rows read twice).
"""

from __future__ import annotations

import json
from collections import Counter

from spark_drivers import run_driver
from standalone_cluster import WORKER_HOSTS
from stream_checks import assert_exactly_once, unique_topic

from raftlog.client import BlockingRaftlogClient

SLOW = "b1-p0"  # micro-batch 1, partition 0: see speculative_sink.py


def rows_in_log(servers: str, topic: str) -> list[list[int]]:
    """Every data row in ``topic``'s log, aborted and open transactions included
    (read_uncommitted), as [value, batch, spark_partition, attempt]."""
    from pyspark_raftlog.arrow_payload import decode_payload

    rows: list[list[int]] = []
    with BlockingRaftlogClient(servers, request_timeout_s=30.0) as client:
        for p in range(len(client.describe_topic(topic).partitions)):
            offset, hwm, _lso = client.list_offsets(topic, p)
            for _ in range(10_000):  # bounded: each fetch moves on by at least one batch
                if offset >= hwm:
                    break
                got = client.fetch(topic, p, offset, isolation="read_uncommitted")
                for b in got.batches:
                    cols = decode_payload(b.payload).to_pydict().values()
                    rows.extend(map(list, zip(*cols, strict=True)))
                offset = got.next_offset
    return rows


def test_speculative_loser_rows_never_appear(spark_standalone, servers, tmp_path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    checkpoint = tmp_path / "ck"
    out = tmp_path / "result.json"
    topic = unique_topic("speculation")
    done = run_driver(
        "speculative_sink.py",
        *(spark_standalone.url, servers, topic, str(checkpoint)),
        *(str(markers), str(out)),
        cwd=tmp_path,
        timeout_s=240,
    )
    assert done.returncode == 0, f"{done.stderr[-4000:]}\n{spark_standalone.logs()}"
    result = json.loads(out.read_text())
    assert result["hosts"] == sorted(WORKER_HOSTS)  # two executors, on distinct hosts

    # Both attempts of the slow task ran, on different hosts, and the copy won.
    loser, winner = markers / f"{SLOW}-a0", markers / f"{SLOW}-a1"
    seen = sorted(p.name for p in markers.iterdir())
    assert winner.exists(), f"no speculative attempt ran: {seen}"
    assert loser.read_text() != winner.read_text()
    assert (markers / f"{SLOW}-a1.done").exists()

    # The loser wrote rows into the log before it was killed: it was in the protocol.
    in_log = Counter(tuple(r[1:]) for r in rows_in_log(servers, topic))
    assert in_log[(1, 0, 0)] > 0, (
        f"the slow attempt wrote no rows; by (batch, part, attempt): {in_log}"
    )

    rows = result["rows"]
    assert result["committed"] >= 2
    assert_exactly_once([r[0] for r in rows], result["committed"])
    slow_rows = [r for r in rows if (r[1], r[2]) == (1, 0)]
    assert len(slow_rows) == 100 and {r[3] for r in slow_rows} == {1}, (
        f"rows of micro-batch 1, partition 0 by attempt: "
        f"{sorted({r[3] for r in slow_rows})}, {len(slow_rows)} rows"
    )
