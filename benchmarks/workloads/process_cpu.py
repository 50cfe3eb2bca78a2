"""CPU time of processes and of all their descendants, read from ``/proc`` (Linux).

A node of several shards is a process tree (shard 0 starts the others), so a
node's CPU is its tree's. Only live processes count: a descendant that ended
took its time with it (its parent's ``cutime`` gets it only once reaped).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

PROC = Path("/proc")
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system CPU seconds) of ``pid``; None when it is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # the command name, in parentheses, may hold spaces: split after its last ")"
    fields = text.rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3 of proc(5)): ppid is field 4, utime 14, stime 15
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


def tree_cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds used so far by ``pids`` and their live descendants
    (each process counted once; a pid that is gone counts 0)."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            stats[int(entry.name)] = stat
    children: dict[int, list[int]] = {}
    for pid, (ppid, _cpu) in stats.items():
        children.setdefault(ppid, []).append(pid)
    seen: set[int] = set()
    todo = [pid for pid in pids if pid in stats]
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(children.get(pid, []))
    return sum(stats[pid][1] for pid in seen)
