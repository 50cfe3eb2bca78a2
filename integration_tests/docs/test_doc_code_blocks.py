"""Every code block of README.md and docs/*.md is either run here or marked as not
runnable, with the reason, in the doc itself (issue 49): the docs cannot drift.

The mark is an HTML comment (invisible on the rendered page) on the line before the
block's opening fence:

- ``<!-- doc-test: run -->``: the block is run by bash (``set -euo pipefail``)
  against a local cluster of the test's own (a fresh ``RAFTLOG_HOME`` per doc file,
  its blocks run in order). A block of ``$ command`` lines runs each command and
  compares its output (stdout and stderr) with the lines the doc shows under it,
  with ``127.0.0.1:<port>`` read as any port; a command with no lines under it is
  only run. A ``python`` block is run by the venv's Python against the same
  cluster (the connector finds it through ``RAFTLOG_HOME``, as a user's script
  does), with a working directory of its own.
- ``<!-- doc-test: output -->``: the block is what the block before it prints; the
  run's standard output must equal it line for line.
- ``<!-- doc-test: skip: <why> -->``: not run (a synopsis with placeholders, a
  remote cluster, a fragment around the reader's own DataFrame, a diagram).

A block without a mark fails the test that lists them, so a new block is run or
says why not.
"""

from __future__ import annotations

import itertools
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import NamedTuple

import pytest

from raftlog.cluster import start_cluster, stop_cluster

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARK = re.compile(r"^<!-- doc-test: (run|output|skip: \S.*) -->$")
FENCE = re.compile(r"^```")
LANGUAGE = re.compile(r"^```(\w*)")
PORT = re.compile(r"127\.0\.0\.1:\d+")
BLOCK_TIMEOUT_S = 120
# A Python block starts a SparkSession (and its JVM) of its own.
PYTHON_BLOCK_TIMEOUT_S = 300


class Block(NamedTuple):
    line: int  # of the opening fence, counted from 1
    mark: str | None  # "run", "output", "skip: <why>", or None when unmarked
    language: str  # what follows the opening fence ("python", "sh", "")
    lines: list[str]


def blocks(doc: pathlib.Path) -> Iterator[Block]:
    """Every fenced block of ``doc`` in order, with the mark on the line before it."""
    lines = doc.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = LANGUAGE.match(lines[i])
        if opening:
            end = next(j for j in range(i + 1, len(lines)) if FENCE.match(lines[j]))
            mark = MARK.match(lines[i - 1]) if i > 0 else None
            yield Block(
                i + 1, mark.group(1) if mark else None, opening.group(1), lines[i + 1 : end]
            )
            i = end + 1
        else:
            i += 1


def test_every_code_block_is_run_or_says_why_not() -> None:
    unmarked = [
        f"{doc.relative_to(ROOT)}:{block.line}"
        for doc in DOCS
        for block in blocks(doc)
        if block.mark is None
    ]
    assert not unmarked, (
        "code blocks without '<!-- doc-test: run -->' or '<!-- doc-test: skip: <why> -->' "
        f"on the line before: {unmarked}"
    )


def test_every_output_block_follows_a_block_that_runs() -> None:
    orphans = [
        f"{doc.relative_to(ROOT)}:{block.line}"
        for doc in DOCS
        for before, block in itertools.pairwise(blocks(doc))
        if block.mark == "output" and before.mark != "run"
    ]
    first = [
        f"{doc.relative_to(ROOT)}:{bs[0].line}"
        for doc in DOCS
        if (bs := list(blocks(doc))) and bs[0].mark == "output"
    ]
    assert not orphans + first, f"output blocks with no run block before them: {orphans + first}"


RUN_DOCS = [d for d in DOCS if any(block.mark == "run" for block in blocks(d))]


@pytest.fixture
def home(tmp_path: pathlib.Path) -> Iterator[dict[str, str]]:
    """The environment of a doc's commands: a local cluster of its own, the venv first
    on PATH; its nodes are stopped by PID at the end."""
    root = tmp_path / "raftlog-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTLOG_")}
    env["RAFTLOG_HOME"] = str(root)
    env["PATH"] = f"{pathlib.Path(sys.executable).parent}:{env.get('PATH', '')}"
    saved = os.environ.get("RAFTLOG_HOME")
    os.environ["RAFTLOG_HOME"] = str(root)
    try:
        start_cluster(root)
        yield env
    finally:
        stop_cluster(root, timeout_s=10.0)
        if saved is None:
            os.environ.pop("RAFTLOG_HOME", None)
        else:
            os.environ["RAFTLOG_HOME"] = saved


def _run(
    argv: list[str], env: dict[str, str], cwd: pathlib.Path, timeout_s: float
) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=cwd)


def _python(script: str, env: dict[str, str], cwd: pathlib.Path) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-c", script], env, cwd, PYTHON_BLOCK_TIMEOUT_S)


def _bash(script: str, env: dict[str, str], cwd: pathlib.Path) -> subprocess.CompletedProcess:
    return _run(["bash", "-c", "set -euo pipefail\n" + script], env, cwd, BLOCK_TIMEOUT_S)


def _prompted(lines: list[str]) -> list[tuple[str, list[str]]]:
    """``$ command`` lines with the output lines the doc shows under each."""
    steps: list[tuple[str, list[str]]] = []
    for line in lines:
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
    return steps


@pytest.mark.parametrize("doc", RUN_DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_doc_blocks_run_as_shown(
    doc: pathlib.Path, home: dict[str, str], tmp_path: pathlib.Path
) -> None:
    doc_blocks = list(blocks(doc))
    for block, after in zip(doc_blocks, [*doc_blocks[1:], None], strict=True):
        if block.mark != "run":
            continue
        where = f"{doc.relative_to(ROOT)}:{block.line}"
        if block.language == "python":
            workdir = tmp_path / f"block-{block.line}"
            workdir.mkdir()
            done = _python("\n".join(block.lines), home, workdir)
            assert done.returncode == 0, f"{where} failed:\n{done.stdout}\n{done.stderr}"
            if after is not None and after.mark == "output":
                assert done.stdout.splitlines() == after.lines, (
                    f"{where} printed\n{done.stdout}\nwhere the doc shows\n"
                    + "\n".join(after.lines)
                )
        elif any(x.startswith("$ ") for x in block.lines):
            for command, shown in _prompted(block.lines):
                done = _bash(command, home, tmp_path)
                assert done.returncode == 0, f"{where}: `{command}` failed:\n{done.stderr}"
                if shown:
                    got = (done.stdout + done.stderr).splitlines()
                    assert [PORT.sub("127.0.0.1:<port>", x) for x in got] == [
                        PORT.sub("127.0.0.1:<port>", x) for x in shown
                    ], f"{where}: `{command}` printed\n{done.stdout}{done.stderr}"
        else:
            done = _bash("\n".join(block.lines), home, tmp_path)
            assert done.returncode == 0, f"{where} failed:\n{done.stdout}\n{done.stderr}"
