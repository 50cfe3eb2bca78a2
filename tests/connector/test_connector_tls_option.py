"""Option ``tlsCaFile`` (else ``RAFTLOG_TLS_CA``): parsed, checked, carried to the clients."""

from __future__ import annotations

import pathlib
import pickle

import pytest
from pyspark_raftlog.connection import (
    ClusterServers,
    open_blocking_client,
    resolve_cluster,
    resolve_servers,
)
from pyspark_raftlog.options import OptionError, parse_sink_options, parse_source_options


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RAFTLOG_SERVERS", "RAFTLOG_AUTH_TOKEN", "RAFTLOG_CLIENT_TOKEN", "RAFTLOG_TLS_CA"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def ca_file(tmp_path: pathlib.Path) -> str:
    import trustme

    path = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(path))
    return str(path)


def test_the_option_arrives_lowercased_and_wins_over_the_environment(
    ca_file: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other.pem"
    other.write_bytes(pathlib.Path(ca_file).read_bytes())
    monkeypatch.setenv("RAFTLOG_TLS_CA", str(other))
    given = {"topic": "t", "servers": "a:1", "tlscafile": ca_file}
    opts = parse_sink_options(given, streaming=True)
    assert opts.tls_ca_file == ca_file
    source = parse_source_options({"topic": "t", "servers": "a:1"}, streaming=True)
    assert source.tls_ca_file == str(other)


def test_without_option_or_environment_there_is_no_tls() -> None:
    assert parse_source_options({"topic": "t"}, streaming=False).tls_ca_file is None


@pytest.mark.parametrize("value", ["", "  ", "/no/such/ca.pem"])
def test_a_bad_ca_path_is_named_by_option(value: str) -> None:
    with pytest.raises(OptionError, match="option 'tlsCaFile' must be the path of a"):
        parse_sink_options({"topic": "t", "tlscafile": value}, streaming=True)


def test_a_bad_environment_path_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAFTLOG_TLS_CA", "/no/such/ca.pem")
    with pytest.raises(OptionError, match=r"RAFTLOG_TLS_CA \(read because option 'tlsCaFile'"):
        parse_source_options({"topic": "t"}, streaming=True)


def test_kafkas_truststore_option_points_at_tls_ca_file() -> None:
    with pytest.raises(OptionError, match="tlsCaFile"):
        parse_sink_options({"topic": "t", "kafka.ssl.truststore.location": "x"}, streaming=True)


def test_resolved_servers_carry_token_and_ca_to_workers_and_clients(ca_file: str) -> None:
    opts = parse_source_options(
        {"topic": "t", "servers": "127.0.0.2:1", "authtoken": "s3cret", "tlscafile": ca_file},
        streaming=True,
    )
    servers = resolve_cluster(opts)
    assert servers == ["127.0.0.2:1"]
    again = pickle.loads(pickle.dumps(servers))  # as Spark ships it to executors
    assert isinstance(again, ClusterServers)
    assert (again.auth_token, again.tls_ca_file) == ("s3cret", ca_file)
    assert "s3cret" not in repr(again) and ca_file in repr(again)
    client = open_blocking_client(again, 1.0)
    try:
        assert client._client._scheme == "https"
    finally:
        client.close()
    plain = open_blocking_client(resolve_servers(("127.0.0.2:1",)), 1.0)
    try:
        assert plain._client._scheme == "http"
    finally:
        plain.close()
