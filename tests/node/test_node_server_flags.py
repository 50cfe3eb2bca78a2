"""`raftlog server` flags of issue 17: --advertise, the two tokens, TLS files; and of
issue 44: TLS or --allow-plaintext beyond loopback (no node runs)."""

from __future__ import annotations

import argparse
import os
import pathlib
import re

import pytest

from raftlog.node.config import add_server_arguments, config_from_args, plaintext_warning
from raftlog.rpc.tls import TlsConfigError


@pytest.fixture(autouse=True)
def _no_env_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AUTH", "CLIENT", "ADMIN", "PEER"):
        monkeypatch.delenv(f"RAFTLOG_{name}_TOKEN", raising=False)


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_server_arguments(p)
    return p.parse_args(["--node-id", "1", "--data-dir", "d", *argv])


def test_the_node_binds_listen_and_is_known_by_advertise() -> None:
    cfg = config_from_args(
        parse(
            "--listen", "127.0.0.1:9001",
            "--advertise", "localhost:9101",
            "--peers", "1=localhost:9101,2=127.0.0.1:9002",
        )
    )  # fmt: skip
    assert (cfg.host, cfg.port, cfg.listen) == ("127.0.0.1", 9001, "127.0.0.1:9001")
    assert cfg.address == "localhost:9101"
    assert cfg.peers == {1: "localhost:9101", 2: "127.0.0.1:9002"}


def test_advertise_defaults_to_listen_and_must_match_peers() -> None:
    cfg = config_from_args(parse("--listen", "127.0.0.1:9001"))
    assert cfg.address == "127.0.0.1:9001" and cfg.peers == {1: "127.0.0.1:9001"}
    mismatch = parse(
        "--listen", "127.0.0.1:9001", "--advertise", "localhost:9001", "--peers", "1=127.0.0.1:9001"
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"--peers: node 1 is listed as 127.0.0.1:9001 but it "):
        config_from_args(mismatch)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--listen", "0.0.0.0:9001"], "a wildcard --listen needs --advertise"),
        (["--listen", "127.0.0.1:9001", "--advertise", "h:0"], "--advertise: expected HOST:PORT"),
        (["--listen", "nohost"], "--listen: expected HOST:PORT"),
    ],
)
def test_bad_addresses_are_named(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config_from_args(parse(*argv))


def test_tokens_are_two_and_different(monkeypatch: pytest.MonkeyPatch) -> None:
    loopback = ["--listen", "127.0.0.1:9001"]
    with pytest.raises(ValueError, match="--auth-token needs --peer-token"):
        config_from_args(parse(*loopback, "--auth-token", "c"))
    with pytest.raises(ValueError, match="--peer-token must differ from --auth-token"):
        config_from_args(parse(*loopback, "--auth-token", "c", "--peer-token", "c"))
    monkeypatch.setenv("RAFTLOG_PEER_TOKEN", "p")  # the environment counts as the flag
    cfg = config_from_args(parse(*loopback, "--auth-token", "c"))
    assert (cfg.auth_token, cfg.peer_token) == ("c", "p")


def test_beyond_loopback_both_tokens_are_required() -> None:
    off = ["--listen", "127.0.0.2:9001"]  # 127.0.0.1 alone is loopback here
    with pytest.raises(ValueError, match="requires a client token and a peer token"):
        config_from_args(parse(*off, "--peer-token", "p"))
    # plaintext on purpose: what is checked here is the tokens (TLS is the next test's)
    cfg = config_from_args(
        parse(*off, "--auth-token", "c", "--peer-token", "p", "--allow-plaintext")
    )
    assert cfg.peer_token == "p"


def test_tls_files_all_or_none_and_checked(tmp_path: pathlib.Path) -> None:
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    paths = {name: tmp_path / name for name in ("c.pem", "k.pem", "ca.pem")}
    cert.cert_chain_pems[0].write_to_path(str(paths["c.pem"]))
    cert.private_key_pem.write_to_path(str(paths["k.pem"]))
    ca.cert_pem.write_to_path(str(paths["ca.pem"]))
    tls = ["--tls-cert", str(paths["c.pem"]), "--tls-key", str(paths["k.pem"])]
    loopback = ["--listen", "127.0.0.1:9001"]
    cfg = config_from_args(parse(*loopback, *tls, "--tls-ca", str(paths["ca.pem"])))
    assert cfg.tls is not None and cfg.tls.ca_file == str(paths["ca.pem"])
    assert config_from_args(parse(*loopback)).tls is None
    with pytest.raises(TlsConfigError, match="missing: --tls-ca"):
        config_from_args(parse(*loopback, *tls))
    other_key = tmp_path / "other.key"
    ca.issue_cert("127.0.0.1").private_key_pem.write_to_path(str(other_key))
    with pytest.raises(TlsConfigError, match="--tls-cert/--tls-key: expected a PEM"):
        config_from_args(
            parse(
                *loopback,
                "--tls-cert", str(paths["c.pem"]),
                "--tls-key", str(other_key),
                "--tls-ca", str(paths["ca.pem"]),
            )
        )  # fmt: skip


def test_leader_balance_and_lag_flags_default_and_are_checked_by_name() -> None:
    loopback = ["--listen", "127.0.0.1:9001"]
    cfg = config_from_args(parse(*loopback))
    assert (cfg.leader_balance_interval_ms, cfg.leader_balance_pin_ms) == (3000, 600_000)
    assert cfg.replica_lag_time_max_ms == 30_000
    cfg = config_from_args(
        parse(
            *loopback,
            "--leader-balance-interval-ms", "0",
            "--leader-balance-pin-ms", "5000",
            "--replica-lag-time-max-ms", "1000",
        )
    )  # fmt: skip
    assert (cfg.leader_balance_interval_ms, cfg.leader_balance_pin_ms) == (0, 5000)
    assert cfg.replica_lag_time_max_ms == 1000
    for flag, value, message in (
        ("--leader-balance-interval-ms", "50", "expected 0 (off) or 100..86400000 milliseconds"),
        ("--leader-balance-pin-ms", "-1", "expected 0..31536000000 milliseconds, got -1"),
        ("--replica-lag-time-max-ms", "0", "expected 100..86400000 milliseconds, got 0"),
    ):
        with pytest.raises(ValueError, match=re.escape(f"{flag}: {message}")):
            config_from_args(parse(*loopback, flag, value))


def test_shards_default_to_the_cores_and_are_checked_by_name() -> None:
    loopback = ["--listen", "127.0.0.1:9001"]
    cfg = config_from_args(parse(*loopback))
    assert (cfg.shards, cfg.shard_index) == (os.cpu_count() or 1, 0)
    assert config_from_args(parse(*loopback, "--shards", "3")).shards == 3
    for bad in ("0", "257"):
        with pytest.raises(ValueError, match=rf"--shards: expected 1\.\.256 processes, got {bad}"):
            config_from_args(parse(*loopback, "--shards", bad))
    with pytest.raises(ValueError, match=r"--shard-index: expected 0\.\.1, got 2"):
        config_from_args(parse(*loopback, "--shards", "2", "--shard-index", "2"))


def test_flush_scope_defaults_to_node_and_names_its_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    loopback = ["--listen", "127.0.0.1:9001"]
    assert config_from_args(parse(*loopback)).flush_scope == "node"
    assert config_from_args(parse(*loopback, "--flush-scope", "group")).flush_scope == "group"
    with pytest.raises(SystemExit):
        parse(*loopback, "--flush-scope", "disk")
    assert "argument --flush-scope: invalid choice: 'disk' (choose from node, group)" in (
        capsys.readouterr().err.replace("'node'", "node").replace("'group'", "group")
    )


@pytest.mark.parametrize(
    "where",
    [
        ["--listen", "127.0.0.2:9001"],  # the rest of 127.0.0.0/8 counts as a network
        ["--listen", "0.0.0.0:9001", "--advertise", "10.0.0.1:9001"],
        ["--listen", "127.0.0.1:9001", "--peers", "1=127.0.0.1:9001,2=10.0.0.2:9001"],
    ],
)
def test_beyond_loopback_tls_is_required_unless_plaintext_is_allowed(where: list[str]) -> None:
    tokens = ["--auth-token", "c", "--peer-token", "p"]
    with pytest.raises(ValueError) as info:
        config_from_args(parse(*where, *tokens))
    message = str(info.value)
    assert "without TLS sends the tokens across the network in plain text" in message
    assert "--tls-cert/--tls-key/--tls-ca" in message and "--allow-plaintext" in message
    cfg = config_from_args(parse(*where, *tokens, "--allow-plaintext"))
    assert cfg.allow_plaintext and cfg.tls is None
    warning = plaintext_warning(cfg)
    assert warning is not None and "cross the network in plain text" in warning
    assert "--allow-plaintext" in warning


def test_on_loopback_no_tls_is_needed_and_nothing_is_warned() -> None:
    for host in ("127.0.0.1", "localhost", "[::1]"):
        cfg = config_from_args(
            parse("--listen", f"{host}:9001", "--auth-token", "c", "--peer-token", "p")
        )
        assert cfg.tls is None and plaintext_warning(cfg) is None
        allowed = config_from_args(parse("--listen", f"{host}:9001", "--allow-plaintext"))
        assert plaintext_warning(allowed) is None  # nothing crosses a network


def test_beyond_loopback_with_tls_nothing_is_warned(tmp_path: pathlib.Path) -> None:
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.2")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "c.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "k.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    tls = ["--tls-cert", str(tmp_path / "c.pem"), "--tls-key", str(tmp_path / "k.pem")]
    off = ["--listen", "127.0.0.2:9001", "--auth-token", "c", "--peer-token", "p"]
    cfg = config_from_args(parse(*off, *tls, "--tls-ca", str(tmp_path / "ca.pem")))
    assert cfg.tls is not None and not cfg.allow_plaintext
    assert plaintext_warning(cfg) is None


def test_the_coordinator_topics_segment_size_is_a_flag_with_kafkas_default() -> None:
    listen = ("--listen", "127.0.0.1:9001")
    assert config_from_args(parse(*listen)).transaction_state_log_segment_bytes == 16 << 20
    cfg = config_from_args(parse(*listen, "--transaction-state-log-segment-bytes", "4096"))
    assert cfg.transaction_state_log_segment_bytes == 4096
    with pytest.raises(ValueError, match=r"--transaction-state-log-segment-bytes: expected 1024"):
        config_from_args(parse(*listen, "--transaction-state-log-segment-bytes", "10"))


def test_the_kafka_group_flags_help_gives_each_default_as_a_number() -> None:
    """The defaults come from GroupLimits, a dataclass with __slots__: read off the
    class, each would be a slot descriptor, and the help said so."""
    p = argparse.ArgumentParser()
    add_server_arguments(p)
    text = " ".join(p.format_help().split())
    for flag, default in (
        ("--kafka-max-groups", "10000"),
        ("--kafka-max-group-members", "1000"),
        ("--kafka-max-group-metadata-bytes", "65536"),
        ("--kafka-max-offset-metadata-bytes", "4096"),
    ):
        helped = text.split(flag, 2)[-1].split(" --", 1)[0]  # the flag's own help
        assert f"(default {default})" in helped, (flag, helped)
    assert "member '" not in text
