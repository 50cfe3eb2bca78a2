"""A shard's command line carries no token (issue 44, item 5): shard 0 drops the token
flags from the argv it passes on, and gives the tokens in the environment."""

from __future__ import annotations

import argparse

import pytest

from raftlog.node.config import add_server_arguments, config_from_args
from raftlog.node.shards import shard_environment, without_token_flags

ARGV = [
    "server", "--node-id", "1", "--listen", "127.0.0.1:9001", "--data-dir", "d",
    "--auth-token", "secret-c", "--admin-token=secret-a", "--peer-tok", "secret-p",
    "--client-token-file", "/run/c", "--peers", "1=127.0.0.1:9001", "--shards", "2",
]  # fmt: skip


def test_token_flags_and_values_are_dropped() -> None:
    kept = without_token_flags(ARGV)
    assert not any("secret" in a or "token" in a or a == "/run/c" for a in kept), kept
    assert kept == [
        "server", "--node-id", "1", "--listen", "127.0.0.1:9001", "--data-dir", "d",
        "--peers", "1=127.0.0.1:9001", "--shards", "2",
    ]  # fmt: skip


def test_the_shard_gets_the_tokens_in_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AUTH", "CLIENT", "ADMIN", "PEER"):
        monkeypatch.delenv(f"RAFTLOG_{name}_TOKEN", raising=False)
    monkeypatch.setenv("RAFTLOG_AUTH_TOKEN", "stale")
    p = argparse.ArgumentParser()
    add_server_arguments(p)
    args = p.parse_args(
        ["--node-id", "1", "--listen", "127.0.0.1:9001", "--data-dir", "d",
         "--auth-token", "c", "--admin-token", "a", "--peer-token", "p"]
    )  # fmt: skip
    env = shard_environment(config_from_args(args))
    assert (env["RAFTLOG_CLIENT_TOKEN"], env["RAFTLOG_ADMIN_TOKEN"]) == ("c", "a")
    assert env["RAFTLOG_PEER_TOKEN"] == "p" and "RAFTLOG_AUTH_TOKEN" not in env
    # what the shard resolves from its argv and environment is shard 0's
    monkeypatch.delenv("RAFTLOG_AUTH_TOKEN")
    for k in ("RAFTLOG_CLIENT_TOKEN", "RAFTLOG_ADMIN_TOKEN", "RAFTLOG_PEER_TOKEN"):
        monkeypatch.setenv(k, env[k])
    shard = config_from_args(p.parse_args(without_token_flags(
        ["--node-id", "1", "--listen", "127.0.0.1:9001", "--data-dir", "d", "--auth-token", "x"]
    )))  # fmt: skip
    assert (shard.auth_token, shard.admin_token, shard.peer_token) == ("c", "a", "p")
