"""docs/spark.md lists every option the connector accepts, and no other.

The option tables are what a user reads to write a query; an option the code
accepts but the table leaves out (or the reverse) is a doc that has drifted.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pyspark_raftlog.options import SINK_OPTIONS, SOURCE_OPTIONS

DOC = Path(__file__).resolve().parents[1] / "docs" / "spark.md"


def table_options(header: str) -> set[str]:
    """The option names (backquoted words) in the first column of the table whose
    header row starts with ``| header |``."""
    lines = DOC.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    names: set[str] = set()
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        first = line.split("|")[1]
        names.update(re.findall(r"`([A-Za-z]+)`", first))
    return names


@pytest.mark.parametrize(
    ("header", "accepted"),
    [("sink option", SINK_OPTIONS), ("source option", SOURCE_OPTIONS)],
)
def test_option_table_matches_the_code(header: str, accepted: tuple[str, ...]) -> None:
    documented = table_options(header)
    assert sorted(set(accepted) - documented) == [], "accepted but not documented"
    assert sorted(documented - set(accepted)) == [], "documented but not accepted"
