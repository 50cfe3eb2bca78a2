"""Comments and docstrings that cite a file of the repo name one that exists.

A citation is a path ending in ``.py`` or ``.md`` in a comment or a docstring of
the project's Python files: with a directory (``raftlog/node/upkeep.py``,
``docs/ARCHITECTURE.md``) it must exist from the repository root, from the citing
file's directory, or from ``connector/`` (the ``pyspark_raftlog`` package); a bare
name (``consensus.py``, ``README.md``) must be the name of some file of the repo.
Files of other projects that comments name are listed in :data:`ELSEWHERE`.
"""

from __future__ import annotations

import ast
import functools
import io
import os
import pathlib
import re
import tokenize

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
ROOTS = ("raftlog", "connector", "benchmarks", "tests", "integration_tests", "scripts")
SKIP = ("__pycache__", "reference")  # benchmarks/reference: recorded runs, not code

ELSEWHERE: dict[str, str] = {
    "benchmarks/testobj.py": "PySyncObj's (benchmarks/peers/pysyncobj_node.py follows it)",
    "writer.py": "aiohttp's websocket writer (raftlog/rpc/transport.py)",
}
"""Paths cited in comments that name another project's files, and whose."""

CITATION = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.(?:py|md))(?![\w/])")


def _sources() -> list[pathlib.Path]:
    return sorted(
        p
        for root in ROOTS
        for p in (REPO / root).rglob("*.py")
        if not any(part in SKIP for part in p.relative_to(REPO).parts)
    )


def _prose(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of ``path``."""
    source = path.read_text(encoding="utf-8")
    found = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                value = body[0].value.value
                if isinstance(value, str):
                    found.append((body[0].lineno, value))
    return found


@functools.cache
def _names() -> frozenset[str]:
    """The names of the repo's files (not its environment's, nor git's)."""
    names: set[str] = set()
    for _top, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("build", "__pycache__")]
        names.update(files)
    return frozenset(names)


def _exists(cited: str, citing: pathlib.Path, names: frozenset[str]) -> bool:
    if cited in ELSEWHERE:
        return True
    if "/" not in cited:
        return cited in names
    return any((base / cited).exists() for base in (REPO, citing.parent, REPO / "connector"))


def test_every_cited_file_exists() -> None:
    names = _names()
    missing = [
        f"{path.relative_to(REPO)}:{line}: {cited}"
        for path in _sources()
        for line, text in _prose(path)
        for cited in CITATION.findall(text)
        if not _exists(cited, path, names)
    ]
    assert not missing, "comments citing files that do not exist:\n" + "\n".join(missing)


def test_every_file_named_elsewhere_is_not_ours() -> None:
    """An ELSEWHERE entry that became a file of the repo would hide a wrong citation."""
    assert not [p for p in ELSEWHERE if (REPO / p).exists()]


@pytest.mark.parametrize(
    ("text", "cited"),
    [
        ("# see DESIGN.md, Producers", ["DESIGN.md"]),
        ('"""As raftlog/node/upkeep.py does (and docs/ARCHITECTURE.md)."""', None),
        ("# a.b.c is a module, not a file; x.pyc neither", []),
    ],
)
def test_the_citation_pattern(text: str, cited: list[str] | None) -> None:
    found = CITATION.findall(text)
    if cited is None:
        assert found == ["raftlog/node/upkeep.py", "docs/ARCHITECTURE.md"]
    else:
        assert found == cited


def test_a_missing_file_is_reported() -> None:
    names = _names()
    assert not _exists("DESIGN.md", REPO / "raftlog" / "x.py", names)
    assert not _exists("raftlog/node/no_such_module.py", REPO / "raftlog" / "x.py", names)
    assert _exists("raftlog/node/upkeep.py", REPO / "raftlog" / "x.py", names)
