"""spark_conf/ discovery and parsing (no SparkSession is started here)."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import pytest
from pyspark_raftlog.session import read_spark_defaults, spark_conf_dir


def test_shipped_defaults_have_the_settings_the_tests_rely_on() -> None:
    conf = read_spark_defaults(spark_conf_dir() / "spark-defaults.conf")
    assert conf["spark.master"] == "local[2]"
    assert conf["spark.python.worker.reuse"] == "true"
    assert int(conf["spark.sql.shuffle.partitions"]) <= 8
    assert int(conf["spark.sql.execution.arrow.maxRecordsPerBatch"]) > 0
    assert "rootLogger.level = warn" in (spark_conf_dir() / "log4j2.properties").read_text()


def test_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "spark-defaults.conf"
    bad.write_text("# comment\n\nspark.master local[1]\nlonely\n")
    with pytest.raises(ValueError, match=r"spark-defaults.conf:4: expected 'key value'"):
        read_spark_defaults(bad)


def test_package_is_listable_so_spark_finds_default_source() -> None:
    # Spark registers DefaultSource of each pyspark_* module that pkgutil.iter_modules()
    # lists; an editable install's import hook is not listable, a strict one's link tree is.
    listed = {m.name for m in pkgutil.iter_modules() if m.name.startswith("pyspark_")}
    assert "pyspark_raftlog" in listed, (
        "pyspark_raftlog is importable but not listable: reinstall with "
        "`pip install -e . --config-settings editable_mode=strict --no-deps`"
    )


class _FakeBuilder:
    """Stands in for ``SparkSession.builder``: records what build_session asks of it."""

    def __init__(self) -> None:
        self.registered: list[type] = []

    def appName(self, name: str) -> _FakeBuilder:
        return self

    def config(self, key: str, value: str) -> _FakeBuilder:
        return self

    def master(self, master: str) -> _FakeBuilder:
        return self

    def getOrCreate(self) -> _FakeBuilder:
        return self

    @property
    def dataSource(self) -> _FakeBuilder:
        return self

    def register(self, source: type) -> None:
        self.registered.append(source)


def test_build_session_registers_the_data_source_in_the_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Planned in the session's own Python workers (see the session module's docstring):
    # a small df.write measured 50-130 ms faster than when Spark found it statically.
    from pyspark.sql import SparkSession
    from pyspark_raftlog.datasource import DefaultSource
    from pyspark_raftlog.session import build_session

    fake = _FakeBuilder()
    monkeypatch.setattr(SparkSession, "builder", fake)
    assert build_session("test") is fake
    assert fake.registered == [DefaultSource]
