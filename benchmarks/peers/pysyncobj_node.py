"""One PySyncObj node process for the ``peers`` scenario (run as a script, not imported).

    python pysyncobj_node.py SELF_HOST:PORT PARTNER_HOST:PORT ...

The replicated state machine is an append-only list of records, the shape of
PySyncObj's own ``benchmarks/testobj.py`` (a ``@replicated`` method per command,
submitted with a callback inside the node process). Default ``SyncObjConf``:
batched append entries, an in-memory journal, no fsync.

Control is one JSON object per line on stdin, one JSON answer per line on
stdout (PySyncObj's own output is sent to stderr so it cannot corrupt the
protocol)::

    {"cmd": "status"}                 -> {"leader": "h:p" | null, "applied": n}
    {"cmd": "append", "value": "..."} -> {"ok": true} once committed and applied
    {"cmd": "read"}                   -> {"count": n, "last": "..." | null}
    {"cmd": "bench", "seconds": s, "size": 100, "inflight": w}
        -> {"success": n, "errors": n, "seconds": s, "latencies": [...sample]}
    {"cmd": "quit"}                   -> {"ok": true}, then exit

``bench`` keeps ``inflight`` commands outstanding (a semaphore released by each
callback) for ``seconds`` and counts the successful callbacks; the submitting
loop and the drain at the end are bounded in time.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from typing import TextIO

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated

APPEND_TIMEOUT_S = 10.0
DRAIN_TIMEOUT_S = 5.0
LATENCY_SAMPLE = 20000
"""At most this many latencies go back to the launcher (a uniform-enough prefix sample)."""


class AppendLog(SyncObj):
    """A replicated append-only list of records."""

    def __init__(self, self_addr: str, partners: list[str]) -> None:
        super().__init__(self_addr, partners, SyncObjConf(dynamicMembershipChange=False))
        self._records: list[str] = []

    @replicated
    def append(self, record: str) -> int:
        self._records.append(record)
        return len(self._records)

    def count(self) -> int:
        return len(self._records)

    def last(self) -> str | None:
        return self._records[-1] if self._records else None


def bench(obj: AppendLog, seconds: float, size: int, inflight: int) -> dict[str, object]:
    """Submit ``size``-character records with ``inflight`` outstanding for ``seconds``."""
    slots = threading.Semaphore(inflight)
    lock = threading.Lock()
    stats = {"success": 0, "errors": 0}
    latencies: list[float] = []
    payload = "%0*x" % (size, random.randrange(16**size))  # noqa: UP031 (fixed-width hex)

    def done(_result: object, err: int, sent: float) -> None:
        with lock:
            if err == FAIL_REASON.SUCCESS:
                stats["success"] += 1
                if len(latencies) < LATENCY_SAMPLE:
                    latencies.append(time.perf_counter() - sent)
            else:
                stats["errors"] += 1
        slots.release()

    start = time.perf_counter()
    deadline = start + seconds
    while True:
        remaining = deadline - time.perf_counter()
        if remaining <= 0 or not slots.acquire(timeout=remaining):
            break
        sent = time.perf_counter()
        obj.append(payload, callback=lambda r, e, s=sent: done(r, e, s))
    elapsed = time.perf_counter() - start
    # Let the outstanding commands finish (bounded) so the next command starts clean;
    # only those acknowledged within the window count towards the rate.
    with lock:
        counted = dict(stats)
        sample = list(latencies)
    drain_until = time.perf_counter() + DRAIN_TIMEOUT_S
    for _ in range(inflight):
        if not slots.acquire(timeout=max(0.0, drain_until - time.perf_counter())):
            break
    return {**counted, "seconds": elapsed, "latencies": sample}


def handle(obj: AppendLog, cmd: object, msg: dict[str, object]) -> dict[str, object]:
    """One control command's answer."""
    if cmd == "status":
        leader = obj._getLeader()
        return {
            "leader": None if leader is None else str(getattr(leader, "address", leader)),
            "applied": obj.count(),
        }
    if cmd == "append":
        obj.append(str(msg["value"]), sync=True, timeout=APPEND_TIMEOUT_S)
        return {"ok": True}
    if cmd == "read":
        return {"count": obj.count(), "last": obj.last()}
    if cmd == "bench":
        return bench(obj, float(msg["seconds"]), int(msg["size"]), int(msg["inflight"]))
    if cmd == "quit":
        return {"ok": True}
    return {"error": f"unknown cmd {cmd!r}"}


def serve(obj: AppendLog, out: TextIO) -> None:
    """Answer control commands from stdin until ``quit`` or end of input."""
    for line in sys.stdin:
        msg = json.loads(line)
        cmd = msg.get("cmd")
        try:
            answer = handle(obj, cmd, msg)
        except Exception as exc:  # the launcher reports it; the node stays up
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), file=out, flush=True)
        if cmd == "quit":
            return


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(f"usage: {os.path.basename(__file__)} SELF PARTNER...", file=sys.stderr)
        return 2
    protocol_out = sys.stdout
    sys.stdout = sys.stderr  # PySyncObj's prints must not interleave with the protocol
    obj = AppendLog(argv[0], argv[1:])
    try:
        serve(obj, protocol_out)
    finally:
        obj.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
