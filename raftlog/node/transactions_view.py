"""``GET /transactions``: what the transaction coordinators this node leads have
recorded, read-only, as JSON (the console's Spark writers and open transactions).

The answer is the state each ``__transactions`` partition led here has applied
(:meth:`raftlog.coordinator.tm_stm.TmStm.snapshot`, read as JSON and passed on as
it is: its fields are the coordinator's, and the console reads them leniently),
trimmed to the newest :data:`MAX_VERSIONS_PER_WRITER` versions of at most
:data:`MAX_WRITERS` writers, with the append time of each decision's batch in the
coordinator's log (``decision_times_ms``: when the decision was made). A
follower's state can lag its leader's, so only leaders answer; nothing here is
linearizable (the console shows a picture, not a decision).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

MAX_WRITERS = 50
"""Writers per coordinator partition in one answer (those with the newest commits)."""
MAX_VERSIONS_PER_WRITER = 20
"""Versions (micro-batches) per writer in one answer: the newest ones."""


def coordinator_view(node_id: int, replicas: Iterable[Any]) -> dict[str, Any]:
    """``{"node_id", "coordinators": [...]}``: one entry per ``__transactions``
    partition among ``replicas`` (PartitionReplica) that this node leads."""
    out = []
    for rep in replicas:
        if rep.tm is None or not rep.consensus.is_leader:
            continue
        state = json.loads(rep.tm.snapshot())
        writers = state.get("writers", {})
        newest = sorted(writers, key=lambda w: writers[w].get("last_committed", -1))
        kept: dict[str, Any] = {}
        times: dict[str, int] = {}
        for writer_id in newest[-MAX_WRITERS:]:
            writer = dict(writers[writer_id])
            versions = writer.get("versions", {})
            recent = sorted(versions, key=int)[-MAX_VERSIONS_PER_WRITER:]
            writer["versions"] = {n: versions[n] for n in recent}
            kept[writer_id] = writer
            for n in recent:
                for decision in versions[n].get("decisions", {}).values():
                    offset = decision.get("offset", -1)
                    stamp = _append_time_ms(rep.consensus, offset)
                    if stamp is not None:
                        times[str(offset)] = stamp
        out.append(
            {
                "partition": rep.partition,
                "applied_offset": state.get("applied_offset", -1),
                "writers": kept,
                "writers_total": len(writers),
                "decision_times_ms": times,
            }
        )
    return {"node_id": node_id, "coordinators": out}


def _append_time_ms(consensus: Any, offset: int) -> int | None:
    """The leader's append time of the committed batch holding ``offset``; None when
    it is not in the log (below its start, or not committed)."""
    if not isinstance(offset, int) or offset < 0:
        return None
    batches = consensus.read(offset, 1, offset)
    for batch in batches:
        if batch.base_offset <= offset <= batch.last_offset:
            return int(batch.timestamp_ms)
    return None
