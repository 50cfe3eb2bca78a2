"""The console reads the Spark writers' micro-batches from what a real coordinator
state records (:mod:`raftlog.node.transactions_view` over ``CoordinatorState``), and
renders them escaped."""

from __future__ import annotations

import json
from types import SimpleNamespace

import aiohttp_jinja2
from aiohttp import web

from raftlog.console.app import add_console_routes
from raftlog.console.page import PAGE
from raftlog.console.view import ConsoleSource, _writers
from raftlog.coordinator.state import CoordinatorState
from raftlog.node.transactions_view import coordinator_view


def _participant(pid: int, partition: int, records: int = -1) -> dict:
    p = {"attempt": f"a{pid}", "run": "run-1", "topic": "events", "partition": partition}
    p |= {"producer_id": pid, "epoch": 0}
    if records >= 0:
        p["records"] = records
    return p


class _Consensus:
    """What coordinator_view reads of a leader: leadership and committed batches."""

    is_leader = True

    def read(self, start: int, max_bytes: int, end: int) -> list:
        return [SimpleNamespace(base_offset=start, last_offset=start, timestamp_ms=1000 + start)]


def _view(state: CoordinatorState) -> str:
    tm = SimpleNamespace(snapshot=state.snapshot)
    rep = SimpleNamespace(tm=tm, consensus=_Consensus(), partition=0)
    return json.dumps(coordinator_view(1, [rep]))


def test_micro_batches_as_the_coordinator_recorded_them() -> None:
    state = CoordinatorState()
    offset = 0

    def apply(cmd: dict) -> dict:
        nonlocal offset
        offset += 1
        result = state.apply(cmd, offset)
        assert result.get("status") != "error", result
        return result

    w = "query:q-1"
    for version in (0, 1, 2):
        for pid, part in ((10 * version + 1, 0), (10 * version + 2, 1)):
            apply({"op": "register", "writer": w, "version": version,
                   "participant": _participant(pid, part)})  # fmt: skip
    # versions 0 and 1 committed (0 with all markers written), 2 still open
    for version, rows in ((0, (100, 150)), (1, (7, 0))):
        named = [
            _participant(10 * version + 1, 0, rows[0]),
            _participant(10 * version + 2, 1, rows[1]),
        ]
        apply({"op": "decide", "writer": w, "version": version, "run": "run-1",
               "commit": True, "named": named})  # fmt: skip
    decided_at = offset - 1  # version 0's decision
    apply({"op": "complete", "writer": w, "version": 0, "run": "run-1",
           "markers": {"1": 5, "2": 6}})  # fmt: skip

    writers, open_txns = _writers([_view(state)])
    assert [x["writer"] for x in writers] == [w]
    assert writers[0]["last_committed"] == 1
    batches = {b["version"]: b for b in writers[0]["batches"]}
    assert [b["version"] for b in writers[0]["batches"]] == [2, 1, 0]  # newest first
    assert batches[0] | {"time_ms": None} == {
        "version": 0, "state": "committed", "rows": 250, "partitions": 2,
        "topics": ["events"], "participants": 2, "time_ms": None,
    }  # fmt: skip
    assert batches[0]["time_ms"] == 1000 + decided_at
    assert (batches[1]["state"], batches[1]["rows"]) == ("committing", 7)
    assert (batches[2]["state"], batches[2]["rows"], batches[2]["time_ms"]) == ("open", None, None)
    assert [(o["writer"], o["version"], o["state"]) for o in open_txns] == [
        (w, 1, "committing"),
        (w, 2, "open"),
    ]


def test_the_page_escapes_what_clients_named() -> None:
    app = web.Application()
    add_console_routes(app, ConsoleSource(["127.0.0.1:1"]))  # the app's own environment
    env = aiohttp_jinja2.get_env(app)
    evil = "<script>alert(1)</script>"
    view = {
        "time": "t", "healthy": True, "problems": [], "controller_leader": 1, "nodes": [],
        "topics": [], "open_transactions": [],
        "writers": [{"writer": evil, "last_committed": 0, "batches": []}],
    }  # fmt: skip
    html = env.get_template(PAGE).render(view=view, refresh_s=2)
    assert evil not in html and "&lt;script&gt;" in html
    assert '<meta http-equiv="refresh" content="2">' in html
