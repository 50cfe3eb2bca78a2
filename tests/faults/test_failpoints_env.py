"""Failpoints: parsing RAFTLOG_FAILPOINTS, the no-op path, error/sleep/kill actions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from raftlog.faults import failpoints
from raftlog.faults.failpoints import Failpoint, FailpointConfigError, FailpointError, parse


@pytest.fixture(autouse=True)
def _reset_failpoints():
    yield
    failpoints.configure(os.environ.get(failpoints.ENV_VAR, ""))


def test_parse_every_form():
    got = parse(
        " log.before_flush=kill , raft.before_vote_save=kill@3,"
        "raft.follower.before_reply=sleep:25@50%,x-y_z=error"
    )
    assert got == {
        "log.before_flush": Failpoint("log.before_flush", "kill"),
        "raft.before_vote_save": Failpoint("raft.before_vote_save", "kill", nth=3),
        "raft.follower.before_reply": Failpoint(
            "raft.follower.before_reply", "sleep", sleep_ms=25, probability=0.5
        ),
        "x-y_z": Failpoint("x-y_z", "error"),
    }
    assert parse("") == {} and parse("  ") == {}
    assert parse("s=crash@2") == {"s": Failpoint("s", "crash", nth=2)}


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("log.before_flush", "missing '='"),
        ("=kill", "missing '='"),
        ("log.before_flush=", "missing '='"),
        ("log.before_flush=explode", "unknown action 'explode'"),
        ("a=kill,a=error", "given twice"),
        ("a b=kill", "may only hold letters"),
        ("a=kill@0", "not a hit number >= 1"),
        ("a=kill@x", "not a hit number >= 1"),
        ("a=kill@150%", "not in (0%, 100%]"),
        ("a=kill@abc%", "not a percentage"),
        ("a=sleep:fast", "whole number of milliseconds"),
        ("a=kill,", "missing '='"),
    ],
)
def test_malformed_spec_names_the_variable_and_form(spec, why):
    with pytest.raises(FailpointConfigError) as exc:
        parse(spec)
    message = str(exc.value)
    assert message.startswith("RAFTLOG_FAILPOINTS: bad entry")
    assert why in message
    assert "<site>=<action>[@<trigger>]" in message


def test_known_site_constants():
    assert failpoints.LOG_BEFORE_FLUSH == "log.before_flush"
    assert failpoints.LOG_AFTER_FLUSH == "log.after_flush"
    assert failpoints.RAFT_BEFORE_VOTE_SAVE == "raft.before_vote_save"
    assert failpoints.RAFT_FOLLOWER_BEFORE_REPLY == "raft.follower.before_reply"
    assert failpoints.TXN_AFTER_DECISION == "txn.after_decision"
    assert failpoints.TXN_AFTER_END_TXN == "txn.after_end_txn"
    assert failpoints.PRODUCE_SKIP_BATCH_CHECK == "produce.skip_batch_check"
    assert len(failpoints.KNOWN_SITES) == 7


def test_disabled_site_is_a_noop_and_not_counted():
    failpoints.configure("")
    assert failpoints.enabled() == frozenset()
    failpoints.failpoint(failpoints.LOG_BEFORE_FLUSH)  # must not raise or die
    assert failpoints.hits(failpoints.LOG_BEFORE_FLUSH) == 0
    failpoints.configure("other.site=error")
    failpoints.failpoint(failpoints.LOG_BEFORE_FLUSH)
    assert failpoints.hits(failpoints.LOG_BEFORE_FLUSH) == 0


def test_error_action_raises_naming_the_site():
    failpoints.configure("log.after_flush=error")
    with pytest.raises(FailpointError, match=r"'log\.after_flush'") as exc:
        failpoints.failpoint("log.after_flush")
    assert exc.value.site == "log.after_flush"
    assert failpoints.hits("log.after_flush") == 1


def test_nth_hit_fires_once():
    failpoints.configure("s=error@3")
    failpoints.failpoint("s")
    failpoints.failpoint("s")
    with pytest.raises(FailpointError):
        failpoints.failpoint("s")
    failpoints.failpoint("s")  # the 4th hit passes again
    assert failpoints.hits("s") == 4


def test_probability_trigger_fires_some_not_all(monkeypatch):
    rolls = iter([0.9, 0.1, 0.5])
    monkeypatch.setattr(failpoints.random, "random", lambda: next(rolls))
    failpoints.configure("s=error@40%")
    failpoints.failpoint("s")  # 0.9 >= 0.4: no
    with pytest.raises(FailpointError):
        failpoints.failpoint("s")  # 0.1 < 0.4: fires
    failpoints.failpoint("s")  # 0.5: no


def test_sleep_action_sleeps_for_the_given_ms(monkeypatch):
    slept = []
    monkeypatch.setattr(failpoints.time, "sleep", slept.append)
    failpoints.configure("s=sleep:250")
    failpoints.failpoint("s")
    assert slept == [0.25]


def _run_child(code: str, spec: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != failpoints.ENV_VAR}
    if spec is not None:
        env[failpoints.ENV_VAR] = spec
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )


CHILD = (
    "import sys\n"
    "from raftlog.faults.failpoints import failpoint\n"
    "print('before', flush=True)\n"
    "failpoint('log.before_flush')\n"
    "print('after', flush=True)\n"
)


def test_kill_action_sigkills_the_process_at_the_site():
    child = _run_child(CHILD, "log.before_flush=kill")
    assert child.returncode == -signal.SIGKILL
    assert child.stdout == "before\n"  # died at the site: 'after' never printed


def test_kill_on_nth_hit_in_a_child():
    code = (
        "from raftlog.faults.failpoints import failpoint\n"
        "for i in range(5):\n"
        "    print(i, flush=True)\n"
        "    failpoint('raft.before_vote_save')\n"
    )
    child = _run_child(code, "raft.before_vote_save=kill@3")
    assert child.returncode == -signal.SIGKILL
    assert child.stdout.split() == ["0", "1", "2"]


CRASH_CHILD = (
    "import pathlib, sys\n"
    "from raftlog.faults import failpoints\n"
    "def boom():\n"
    "    raise RuntimeError('hook failed')\n"
    "failpoints.add_crash_hook(boom)\n"
    "failpoints.add_crash_hook(lambda: pathlib.Path(sys.argv[1]).write_text('cut'))\n"
    "failpoints.add_crash_hook(lambda: print('removed hook ran'))()\n"
    "failpoints.failpoint('log.before_flush')\n"
    "print('after', flush=True)\n"
)


@pytest.mark.parametrize(("action", "hooks_ran"), [("crash", True), ("kill", False)])
def test_crash_runs_hooks_then_sigkills_and_kill_does_not(tmp_path, action, hooks_ran):
    marker = tmp_path / "marker"
    env = {k: v for k, v in os.environ.items() if k != failpoints.ENV_VAR}
    env[failpoints.ENV_VAR] = f"log.before_flush={action}"
    child = subprocess.run(
        [sys.executable, "-c", CRASH_CHILD, str(marker)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == -signal.SIGKILL
    assert child.stdout == ""  # neither the removed hook nor the code after the site ran
    assert marker.exists() is hooks_ran
    assert ("RuntimeError: hook failed" in child.stderr) is hooks_ran


def test_child_without_env_runs_through():
    child = _run_child(CHILD, None)
    assert child.returncode == 0 and child.stdout == "before\nafter\n"


def test_bad_env_fails_at_import_naming_the_variable():
    child = _run_child(CHILD, "log.before_flush=boom")
    assert child.returncode == 1
    assert "RAFTLOG_FAILPOINTS: bad entry 'log.before_flush=boom'" in child.stderr
    assert child.stdout == ""
