"""The namespace fixture's clean-up of a crashed run (:func:`netns_hosts.remove_leftovers`):
the namespaces, veths and bridge of a run whose creating process is gone are deleted,
with a process still running inside; those of a live creator, and names the fixture does
not make, are left alone."""

from __future__ import annotations

import subprocess
import sys

import pytest
from netns_hosts import _names, missing_prerequisites, remove_leftovers

from raftlog.cluster import pid_alive


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=15)


def _set(tag: str) -> list[str]:
    """A run's names as :func:`netns_hosts.namespaces` makes them: bridge, namespace,
    the veth end on the bridge (the other end is inside the namespace)."""
    bridge, ns, outer, inner = f"rlb{tag}", f"rlns-{tag}-0", f"rlv{tag}0", f"rlp{tag}0"
    _ip("link", "add", bridge, "type", "bridge")
    _ip("netns", "add", ns)
    _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
    _ip("link", "set", inner, "netns", ns)
    _ip("link", "set", outer, "master", bridge)
    return [bridge, ns, outer]


def test_leftovers_of_a_dead_creator_go_and_the_rest_stays() -> None:
    missing = missing_prerequisites()
    if missing:
        pytest.fail(missing)
    dead = next(p for p in range(0x3FFFF0, 0x300000, -1) if not pid_alive(p))
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    squatter = None
    made: list[str] = []
    try:
        made += (gone := _set(f"{dead:06x}a1"))
        made += (kept := _set(f"{live.pid:06x}b2"))
        _ip("netns", "add", "rlns-not-ours")  # a name of the prefix's but not of the form
        made.append("rlns-not-ours")
        # a process left inside the dead run's namespace (a node that outlived its test)
        squatter = subprocess.Popen(
            ["ip", "netns", "exec", gone[1], sys.executable, "-c", "import time; time.sleep(60)"]
        )
        removed = remove_leftovers()
        spaces, links = _names()
        assert sorted(removed) == sorted(gone)
        assert not set(gone) & {*spaces, *links}
        assert set(kept) | {"rlns-not-ours"} <= {*spaces, *links}
        assert squatter.wait(timeout=10) == -9  # SIGKILLed as part of the dead run's namespace
    finally:
        for proc in (live, squatter):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        for name in made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=15)
            subprocess.run(["ip", "link", "del", name], capture_output=True, timeout=15)
