"""Failpoints: named code sites where a test can make the process die, fail or stall.

Enabled only by the environment variable ``RAFTLOG_FAILPOINTS``, read once at
import::

    RAFTLOG_FAILPOINTS="log.before_flush=kill,raft.before_vote_save=kill@3"

Each comma-separated entry is ``<site>=<action>[@<trigger>]``:

- actions: ``kill`` (SIGKILL this process without running any cleanup; the
  page cache survives, as after a process crash), ``killsession`` (SIGKILL the
  process group of this process's session leader, e.g. a Spark driver with its
  JVM, from one of its Python workers), ``crash`` (run the hooks
  registered with :func:`add_crash_hook`, which drop what was written but
  not fsynced, then SIGKILL: a power cut), ``error`` (raise
  :class:`FailpointError`), ``sleep:<ms>`` (block the calling thread for that
  many milliseconds);
- trigger (optional): ``@N`` fires on the N-th hit only (N >= 1), ``@P%``
  fires on each hit with probability P (0 < P <= 100); without one, every
  hit fires.

A malformed value raises :class:`FailpointConfigError` at import, naming
``RAFTLOG_FAILPOINTS`` and the expected form, so a typo cannot silently
disable a fault.

Cost when nothing is enabled: one global frozenset membership test per call
(``name in _ENABLED`` on an empty frozenset). Site names are free-form (a
failpoint need not be known here to be enabled) but the sites the engine
has are listed below as constants.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import re
import signal
import threading
import time
import traceback
from collections.abc import Callable, Mapping

ENV_VAR = "RAFTLOG_FAILPOINTS"

LOG_BEFORE_FLUSH = "log.before_flush"
"""In ``SegmentedLog.sync_flush``, before the fsync: written data is not yet durable."""
LOG_AFTER_FLUSH = "log.after_flush"
"""In ``SegmentedLog.sync_flush``, after the fsync, before the flushed offset is marked."""
RAFT_BEFORE_VOTE_SAVE = "raft.before_vote_save"
"""Before a node durably saves a new term/vote (it has decided, not yet persisted)."""
RAFT_FOLLOWER_BEFORE_REPLY = "raft.follower.before_reply"
"""On a follower, after handling append_entries (appended, maybe flushed), before replying."""

TXN_AFTER_DECISION = "txn.after_decision"
"""In the transaction coordinator's EndTxn (on the ``__transactions`` leader), after the
decision this call took is durable, before any marker."""
TXN_AFTER_END_TXN = "txn.after_end_txn"
"""On the driver (``raftlog.client.transactions.decide``), after the coordinator answered
EndTxn (the decision and its markers durable), before the caller hears of it."""

PRODUCE_SKIP_BATCH_CHECK = "produce.skip_batch_check"
"""With the ``error`` action, a node appends produced batches without checking their
payloads (raftlog.records.payload_check), as nodes did before the check existed: how
tests write the corrupt batches that readers must still get past."""

KNOWN_SITES = frozenset(
    {
        PRODUCE_SKIP_BATCH_CHECK,
        LOG_BEFORE_FLUSH,
        LOG_AFTER_FLUSH,
        RAFT_BEFORE_VOTE_SAVE,
        RAFT_FOLLOWER_BEFORE_REPLY,
        TXN_AFTER_DECISION,
        TXN_AFTER_END_TXN,
    }
)

_EXPECTED = (
    "expected comma-separated <site>=<action>[@<trigger>] entries, where action is kill, "
    "killsession, crash, error or sleep:<ms> and trigger is @N (the N-th hit, N >= 1) "
    "or @P% (each hit with probability P, 0 < P <= 100), e.g. "
    f'{ENV_VAR}="log.before_flush=kill,raft.before_vote_save=kill@3"'
)
_SITE = re.compile(r"^[A-Za-z0-9_.\-]+$")


class FailpointConfigError(ValueError):
    """``RAFTLOG_FAILPOINTS`` (or a spec given to :func:`parse`) is malformed."""


class FailpointError(RuntimeError):
    """Raised at a site whose failpoint has the ``error`` action."""

    def __init__(self, site: str) -> None:
        super().__init__(f"failpoint {site!r} fired (action error)")
        self.site = site


@dataclasses.dataclass(frozen=True, slots=True)
class Failpoint:
    """What to do at one site. ``nth``: fire on that hit only; ``probability``: per hit."""

    site: str
    action: str  # "kill", "killsession", "crash", "error" or "sleep"
    sleep_ms: int = 0
    nth: int | None = None
    probability: float | None = None


def parse(spec: str) -> dict[str, Failpoint]:
    """Parse a ``RAFTLOG_FAILPOINTS`` value; raises FailpointConfigError on any bad entry."""
    out: dict[str, Failpoint] = {}
    if not spec.strip():
        return out
    for raw in spec.split(","):
        entry = raw.strip()

        def bad(why: str, entry: str = entry) -> FailpointConfigError:
            return FailpointConfigError(f"{ENV_VAR}: bad entry {entry!r}: {why}; {_EXPECTED}")

        site, eq, rest = entry.partition("=")
        site = site.strip()
        if not eq or not site or not rest.strip():
            raise bad("missing '=' or an empty site or action")
        if not _SITE.match(site):
            raise bad(f"site {site!r} may only hold letters, digits, '.', '_' and '-'")
        if site in out:
            raise bad(f"site {site!r} is given twice")
        action, at, trigger = rest.strip().partition("@")
        nth: int | None = None
        probability: float | None = None
        if at:
            if trigger.endswith("%"):
                try:
                    probability = float(trigger[:-1]) / 100.0
                except ValueError:
                    raise bad(f"trigger {trigger!r} is not a percentage") from None
                if not 0.0 < probability <= 1.0:
                    raise bad(f"probability {trigger!r} is not in (0%, 100%]")
            else:
                if not trigger.isdigit() or int(trigger) < 1:
                    raise bad(f"trigger {trigger!r} is not a hit number >= 1 or a percentage")
                nth = int(trigger)
        sleep_ms = 0
        if action.startswith("sleep:"):
            ms = action[len("sleep:") :]
            if not ms.isdigit():
                raise bad(f"sleep needs a whole number of milliseconds, got {ms!r}")
            action, sleep_ms = "sleep", int(ms)
        elif action not in ("kill", "killsession", "crash", "error"):
            raise bad(f"unknown action {action!r}")
        out[site] = Failpoint(site, action, sleep_ms, nth, probability)
    return out


def _from_env(environ: Mapping[str, str]) -> dict[str, Failpoint]:
    return parse(environ.get(ENV_VAR, ""))


_POINTS: dict[str, Failpoint] = _from_env(os.environ)
_ENABLED: frozenset[str] = frozenset(_POINTS)
_hits: dict[str, int] = {}
_hits_lock = threading.Lock()
_crash_hooks: list[Callable[[], None]] = []


def failpoint(name: str) -> None:
    """Mark the code site ``name``; act if ``RAFTLOG_FAILPOINTS`` enabled it (else no-op)."""
    if name not in _ENABLED:
        return
    _fire(_POINTS[name])


def _fire(point: Failpoint) -> None:
    with _hits_lock:
        hit = _hits.get(point.site, 0) + 1
        _hits[point.site] = hit
    if point.nth is not None and hit != point.nth:
        return
    if point.probability is not None and random.random() >= point.probability:
        return
    if point.action == "crash":
        _run_crash_hooks()
    if point.action in ("kill", "crash"):
        # SIGKILL, not sys.exit: no finally blocks, no atexit, no buffered flushes,
        # as close to pulling the plug as a process can do to itself.
        os.kill(os.getpid(), signal.SIGKILL)
    elif point.action == "killsession":
        # the process group of this session's leader: a Spark driver that a test started
        # in a session of its own (Python driver and JVM) dies at once, as under kill -9.
        # Not our own group: pyspark's daemon puts each Python worker in a group of its own.
        os.killpg(os.getsid(0), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    elif point.action == "error":
        raise FailpointError(point.site)
    else:
        time.sleep(point.sleep_ms / 1000.0)


def add_crash_hook(hook: Callable[[], None]) -> Callable[[], None]:
    """Run ``hook`` when a ``crash`` failpoint fires, just before SIGKILL; returns a remover.

    Meant for "drop everything after the last fsync": the node registers, per
    log, ``lambda: cut_to_flushed(log.directory, log.flushed_offset)`` (see
    :mod:`raftlog.faults.crash`). Hooks run in registration order on the
    thread that hit the failpoint; one that raises is reported on stderr and
    the others still run.
    """
    with _hits_lock:
        _crash_hooks.append(hook)

    def remove() -> None:
        with _hits_lock, contextlib.suppress(ValueError):
            _crash_hooks.remove(hook)

    return remove


def _run_crash_hooks() -> None:
    with _hits_lock:
        hooks = list(_crash_hooks)
    for hook in hooks:
        try:
            hook()
        except Exception:  # the process dies next anyway; say why the cut may be partial
            traceback.print_exc()


def configure(spec: str) -> None:
    """Replace the enabled failpoints with ``spec`` (same form as the env var) and reset hits.

    For in-process tests; processes under test get theirs from the environment.
    """
    global _POINTS, _ENABLED
    points = parse(spec)
    with _hits_lock:
        _POINTS, _ENABLED = points, frozenset(points)
        _hits.clear()


def hits(name: str) -> int:
    """How many times the enabled failpoint ``name`` was reached (0 when not enabled)."""
    with _hits_lock:
        return _hits.get(name, 0)


def enabled() -> frozenset[str]:
    """The sites enabled now."""
    return _ENABLED
