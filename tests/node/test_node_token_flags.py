"""The three roles' token flags of `raftlog server` (issue 44, item 1): --X-token,
--X-token-file and RAFTLOG_X_TOKEN for client, admin and peer; --auth-token and
RAFTLOG_AUTH_TOKEN stay the client token's; the three differ; a token file that
cannot be read or is empty is refused at start naming its flag. Also the node
flag --auto-create-topics-enable. No node runs."""

from __future__ import annotations

import argparse
import pathlib

import pytest

from raftlog.node.config import add_server_arguments, config_from_args

LOOPBACK = ["--listen", "127.0.0.1:9001"]


@pytest.fixture(autouse=True)
def _no_env_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AUTH", "CLIENT", "ADMIN", "PEER"):
        monkeypatch.delenv(f"RAFTLOG_{name}_TOKEN", raising=False)


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_server_arguments(p)
    return p.parse_args(["--node-id", "1", "--data-dir", "d", *LOOPBACK, *argv])


def tokens(*argv: str) -> tuple[str | None, str | None, str | None]:
    cfg = config_from_args(parse(*argv))
    return cfg.auth_token, cfg.admin_token, cfg.peer_token


def test_each_role_from_its_flag(tmp_path: pathlib.Path) -> None:
    assert tokens("--client-token", "c", "--admin-token", "a", "--peer-token", "p") == (
        "c",
        "a",
        "p",
    )
    # --auth-token stays the client token's flag
    assert tokens("--auth-token", "c", "--peer-token", "p")[0] == "c"


def test_each_role_from_its_file(tmp_path: pathlib.Path) -> None:
    for name, value in (("c", "client-secret"), ("a", "admin-secret"), ("p", "peer-secret")):
        (tmp_path / name).write_text(value + "\n")
    got = tokens(
        "--client-token-file", str(tmp_path / "c"),
        "--admin-token-file", str(tmp_path / "a"),
        "--peer-token-file", str(tmp_path / "p"),
    )  # fmt: skip
    assert got == ("client-secret", "admin-secret", "peer-secret")


def test_each_role_from_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAFTLOG_CLIENT_TOKEN", "c")
    monkeypatch.setenv("RAFTLOG_ADMIN_TOKEN", "a")
    monkeypatch.setenv("RAFTLOG_PEER_TOKEN", "p")
    assert tokens() == ("c", "a", "p")
    monkeypatch.delenv("RAFTLOG_CLIENT_TOKEN")
    monkeypatch.setenv("RAFTLOG_AUTH_TOKEN", "old")  # the alias
    assert tokens()[0] == "old"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--client-token", "x", "--admin-token", "x", "--peer-token", "p"],
            "--admin-token must differ from --client-token",
        ),
        (
            ["--client-token", "c", "--admin-token", "p", "--peer-token", "p"],
            "--admin-token must differ from --peer-token",
        ),
        (["--client-token", "p", "--peer-token", "p"], "--peer-token must differ"),
        (["--admin-token", "a"], "--admin-token needs --peer-token"),
    ],
)
def test_the_three_differ(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config_from_args(parse(*argv))


@pytest.mark.parametrize("role", ["client", "admin", "peer"])
def test_a_token_file_unreadable_or_empty_is_refused_naming_the_flag(
    tmp_path: pathlib.Path, role: str
) -> None:
    flag = f"--{role}-token-file"
    with pytest.raises(ValueError, match=f"{flag}: cannot read {tmp_path / 'missing'}"):
        config_from_args(parse(flag, str(tmp_path / "missing")))
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ValueError, match=f"{flag}: .* is empty"):
        config_from_args(parse(flag, str(empty)))
    with pytest.raises(ValueError, match=f"--{role}-token and {flag}: give one"):
        config_from_args(parse(f"--{role}-token", "t", flag, str(empty)))


def test_auto_create_topics_enable_flag() -> None:
    assert config_from_args(parse()).auto_create_topics_enable is True
    off = config_from_args(parse("--auto-create-topics-enable", "false"))
    assert off.auto_create_topics_enable is False
    with pytest.raises(SystemExit):
        parse("--auto-create-topics-enable", "maybe")
