"""The README and the docs link only to files inside the repository, and those exist.

Users read the README first on a fresh clone; a link to a file that is not there
(moved, or outside the repo such as ../shared/) is a broken promise.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")
DOCS = [
    "README.md",
    "benchmarks/README.md",
    *(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")),
]


@pytest.mark.parametrize("doc", DOCS)
def test_every_link_is_a_file_in_the_repo(doc: str) -> None:
    path = ROOT / doc
    bad = []
    for target in LINK.findall(path.read_text()):
        target = target.split("#", 1)[0]
        if not target:
            continue  # an anchor in the same file
        resolved = (path.parent / target).resolve()
        if "://" in target or not resolved.is_relative_to(ROOT) or not resolved.exists():
            bad.append(target)
    assert bad == [], f"{doc} links outside the repo or to missing files: {bad}"
