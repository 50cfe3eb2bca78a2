"""``raftlog console`` refuses bad flags with the flag named, before serving anything."""

from __future__ import annotations

import pytest

from raftlog.cli import main


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--listen", "10.0.0.1:9650"], "--listen: 10.0.0.1 is not loopback; serving the console"),
        (["--listen", "127.0.0.1"], "--listen: expected HOST:PORT"),
        (["--refresh", "0"], "--refresh: expected 1..3600 seconds, got 0"),
        (["--tls-cert", "c.pem"], "--tls-cert and --tls-key: give both or neither"),
    ],
)
def test_console_flags_are_checked(
    flags: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["console", "--servers", "127.0.0.1:1", *flags]) == 1
    assert says in capsys.readouterr().err
