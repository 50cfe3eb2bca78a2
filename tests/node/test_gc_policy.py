"""The node's collector policy (raftlog.node.gc_policy): objects alive when replicas
open are frozen (no collection frees their cycles), a close thaws and frees them, and
nothing changes in a process that did not install the policy. Each case runs in a fresh
interpreter: the collector is process-wide, and pytest's own must stay as it is."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_PRELUDE = """
import gc, weakref
from raftlog.node import gc_policy

class Replica:  # a closed replica's state: a reference cycle
    pass

def replica():
    r = Replica()
    r.self = r
    return r
"""


def _run(body: str) -> str:
    """Run ``body`` after the prelude in a fresh interpreter; its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", _PRELUDE + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_cycle_alive_when_replicas_open_outlives_collections_until_a_close() -> None:
    out = _run(
        """
        gc_policy.install()
        r = replica()
        ref = weakref.ref(r)
        gc_policy.replicas_opened()
        assert gc.get_freeze_count() > 0
        del r
        gc.collect()
        print("after a full collection:", ref() is not None)
        gc_policy.replicas_closed()
        print("after a close:", ref() is not None, gc.get_freeze_count() > 0)
        s = gc_policy.stats()
        print("counted:", s["collections"][2] >= 2, s["frozen_objects"] == gc.get_freeze_count())
        print("young threshold:", gc.get_threshold()[0])
        """
    )
    assert out.splitlines() == [
        "after a full collection: True",  # frozen: no collection walks it
        "after a close: False True",  # thawed, freed, the rest frozen again
        "counted: True True",
        "young threshold: 10000",
    ]


def test_without_install_the_hooks_leave_the_collector_alone() -> None:
    out = _run(
        """
        threshold = gc.get_threshold()
        r = replica()
        ref = weakref.ref(r)
        gc_policy.replicas_opened()
        del r
        gc.collect()
        same = gc.get_threshold() == threshold
        print(gc_policy.installed(), gc.get_freeze_count(), ref() is None, same)
        """
    )
    assert out == "False 0 True True"
