"""A node's data directory is tightened when open to others, and a secret file that
group or others can read is named with its mode and the fix (issue 44, item 5)."""

from __future__ import annotations

import logging
import os
import pathlib
import stat

import pytest

from raftlog.node.file_modes import (
    readable_by_others_warning,
    tighten_data_dir,
    warn_if_readable_by_others,
)


def mode(path: pathlib.Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_an_open_data_dir_is_made_private_and_the_change_logged(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(data, 0o755)
    with caplog.at_level(logging.WARNING, logger="raftlog.node"):
        assert tighten_data_dir(data) == 0o755
    assert mode(data) == 0o700
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert str(data) in record.getMessage() and "was mode 0755" in record.getMessage()
    assert "made it 0700" in record.getMessage()
    caplog.clear()
    assert tighten_data_dir(data) is None  # private already: nothing done, nothing said
    assert caplog.records == []


def test_only_group_and_others_lose_access(tmp_path: pathlib.Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(data, 0o570)  # the owner's own bits are the owner's business
    assert tighten_data_dir(data) == 0o570
    assert mode(data) == 0o500
    os.chmod(data, 0o700)


def test_a_missing_data_dir_or_a_file_in_its_place_is_left_alone(tmp_path: pathlib.Path) -> None:
    assert tighten_data_dir(tmp_path / "not-yet") is None
    assert not (tmp_path / "not-yet").exists()
    (tmp_path / "file").write_text("not a directory")
    os.chmod(tmp_path / "file", 0o644)
    assert tighten_data_dir(tmp_path / "file") is None
    assert mode(tmp_path / "file") == 0o644


@pytest.mark.parametrize(
    ("file_mode", "readers"),
    [(0o644, "group and others"), (0o640, "group"), (0o604, "others"), (0o444, "group and others")],
)
def test_a_secret_file_readable_by_others_is_named_with_its_mode(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture, file_mode: int, readers: str
) -> None:
    key = tmp_path / "node.key"
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    os.chmod(key, file_mode)
    with caplog.at_level(logging.WARNING, logger="raftlog.node"):
        warning = warn_if_readable_by_others(key, "--tls-key")
    assert warning == (
        f"--tls-key: {key} is readable by {readers} (mode {file_mode:04o}): any local user "
        f"who can read it holds the secret; run `chmod 600 {key}`"
    )
    assert [r.getMessage() for r in caplog.records] == [warning]
    assert caplog.records[0].levelno == logging.WARNING


def test_a_private_or_missing_secret_file_gets_no_warning(tmp_path: pathlib.Path) -> None:
    key = tmp_path / "node.key"
    key.write_text("secret")
    for private in (0o600, 0o400, 0o700):
        os.chmod(key, private)
        assert readable_by_others_warning(key, "--tls-key") is None
    assert readable_by_others_warning(tmp_path / "missing", "--peer-token-file") is None
