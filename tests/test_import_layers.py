"""The import rules of docs/ARCHITECTURE.md hold: layers, and no import cycles.

The layer table is read from ``docs/ARCHITECTURE.md`` ("Layout"), so the page
and this test cannot drift apart. Imports are read from the source (AST): every
module-level import counts, those under ``if TYPE_CHECKING:`` included; an import
inside a function body is deferred and does not. ``from package import name``
depends on ``package.name`` when that is a module, else on ``package``.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest
from tenacity import retry, retry_if_exception_type, stop_after_attempt

REPO = pathlib.Path(__file__).resolve().parent.parent
ROOTS = ("raftlog", "connector", "benchmarks")
DOC = REPO / "docs" / "ARCHITECTURE.md"


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, pathlib.Path]:
    return {
        _module_name(p): p
        for root in ROOTS
        for p in sorted((REPO / root).rglob("*.py"))
        if "__pycache__" not in p.parts
    }


MODULES = _modules()


@retry(retry=retry_if_exception_type(SystemError), stop=stop_after_attempt(5), reraise=True)
def _parse(path: pathlib.Path) -> ast.Module:
    """``path``'s syntax tree. CPython 3.11's AST construction keeps one recursion
    counter for all threads (python/cpython#106905): a parse in another thread (a
    thread left by an earlier test) can make this one fail with "AST constructor
    recursion depth mismatch", which a second try does not."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _imports(path: pathlib.Path, module: str) -> list[tuple[str, int]]:
    """(imported module, line) for every module-level import of ``path``."""
    tree = _parse(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, int]] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue  # deferred: runs only when called
            if isinstance(node, ast.Import):
                found.extend((a.name, node.lineno) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    found.append((sub if sub in MODULES else base, node.lineno))
            for field in ("body", "orelse", "handlers", "finalbody"):
                sub_body = getattr(node, field, None)
                if isinstance(sub_body, list):
                    visit(sub_body)

    visit(tree.body)
    return found


def _graph() -> dict[str, set[str]]:
    return {
        m: {target for target, _ in _imports(p, m) if target in MODULES and target != m}
        for m, p in MODULES.items()
    }


# ------------------------------------------------------------------- layers


def _layer_table() -> list[tuple[list[str], list[str] | None]]:
    """(row paths, allowed paths or None for "anything") from the doc's Layout table."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        paths = re.findall(r"`([^`]+)`", cells[0])
        may = cells[-1]
        allowed = re.findall(r"`([^`]+)`", may)
        rows.append((paths, None if may == "everything" else allowed))
    return rows


TABLE = _layer_table()


def _path_of(module: str) -> str:
    return MODULES[module].relative_to(REPO).as_posix()  # a package: its __init__.py


def _row_of(path: str) -> tuple[str, list[str] | None] | None:
    best: tuple[str, list[str] | None] | None = None
    for paths, allowed in TABLE:
        for p in paths:
            if (path == p or (p.endswith("/") and path.startswith(p))) and (
                best is None or len(p) > len(best[0])
            ):
                best = (p, allowed)
    return best


def test_the_doc_has_a_layer_table() -> None:
    rows = {p for paths, _ in TABLE for p in paths}
    assert {"raftlog/raft/", "raftlog/storage/", "connector/", "benchmarks/"} <= rows


def test_every_module_belongs_to_a_row() -> None:
    missing = sorted(p for p in (_path_of(m) for m in MODULES) if _row_of(p) is None)
    assert not missing, f"modules in no row of the Layout table of {DOC.name}: {missing}"


def test_imports_follow_the_layer_table() -> None:
    broken = []
    for module, path in MODULES.items():
        row = _row_of(_path_of(module))
        assert row is not None
        row_path, allowed = row
        if allowed is None:
            continue
        for target, line in _imports(path, module):
            if target not in MODULES:
                continue
            target_path = _path_of(target)
            target_row = _row_of(target_path)
            if target_row is not None and target_row[0] == row_path:
                continue  # its own row
            if (
                any(
                    target_path == a or target_path.startswith(a)
                    for a in allowed
                    if a.endswith("/")
                )
                or target_path in allowed
            ):
                continue
            broken.append(f"{path.relative_to(REPO)}:{line} imports {target} ({row_path} may "
                          f"import {', '.join(allowed) or 'nothing of the project'})")  # fmt: skip
    assert not broken, "imports that break docs/ARCHITECTURE.md's table:\n" + "\n".join(broken)


def test_nothing_in_raftlog_imports_spark() -> None:
    spark = [
        f"{p.relative_to(REPO)}:{line}"
        for m, p in MODULES.items()
        if m.startswith("raftlog")
        for target, line in _imports(p, m)
        if target.split(".")[0] in ("pyspark", "py4j")
    ]
    assert not spark


SERVER_PACKAGES = (
    "raftlog.node",
    "raftlog.coordinator",
    "raftlog.producers",
    "raftlog.raft",
    "raftlog.storage",
)
"""The server's packages: they never reach the cluster through the public client. What
both sides need of a payload (its layouts, codecs and check) is ``raftlog.records``."""


def _all_imports(path: pathlib.Path, module: str) -> list[tuple[str, int]]:
    """(imported module, line) for every import of ``path``, deferred ones included."""
    tree = _parse(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found += [(f"{base}.{a.name}", node.lineno) for a in node.names]
    return found


def _client_imports(modules: dict[str, pathlib.Path]) -> list[str]:
    """Every import of ``raftlog.client`` (deferred ones included) by a server module."""
    return [
        f"{module}:{line} imports {target}"
        for module, path in modules.items()
        if module.startswith(SERVER_PACKAGES)
        for target, line in _all_imports(path, module)
        if target == "raftlog.client" or target.startswith("raftlog.client.")
    ]


def test_the_server_never_imports_the_client() -> None:
    """The node, the coordinator, rm_stm, the Raft core and storage do their work
    themselves (the coordinator writes markers node to node): no import of
    ``raftlog.client``, not even one deferred into a function body (the node once rolled
    transactions forward through its own public client, and checked produced payloads
    with a module of the client's)."""
    found = _client_imports(MODULES)
    assert not found, "the server imports the client:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("raftlog.node.data_api", "from raftlog.client.framing import frame_records\n"),
        ("raftlog.producers.rm_stm", "def f():\n    import raftlog.client\n"),
        ("raftlog.raft.core", "from raftlog.client import errors\n"),
        ("raftlog.storage.log", "from raftlog.client.results import ProduceResult\n"),
        ("raftlog.coordinator.tm_stm", "from ..client import calls\n"),
    ],
)
def test_the_server_rule_fails_on_a_client_import(
    module: str, source: str, tmp_path: pathlib.Path
) -> None:
    """The rule above sees a server module's import of the client in every form."""
    path = REPO / (module.replace(".", "/") + ".py")
    planted = tmp_path / path.relative_to(REPO)
    planted.parent.mkdir(parents=True)
    planted.write_text(source, encoding="utf-8")
    found = _client_imports({module: planted})
    assert len(found) == 1 and found[0].startswith(f"{module}:"), found


# ------------------------------------------------------------------- cycles


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.add(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(frozenset(comp))
    return found


def test_no_import_cycles() -> None:
    cycles = sorted(sorted(c) for c in _cycles(_graph()))
    assert not cycles, f"import cycles: {cycles}"


def test_the_raft_core_imports_alone() -> None:
    graph = _graph()
    seen, todo = set(), ["raftlog.raft.core"]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph[m])
    assert "raftlog.raft.consensus" not in seen
    assert not any(m.startswith(("raftlog.rpc", "raftlog.node")) for m in seen)


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}, "c": set()}, [frozenset({"a", "b"})]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [frozenset({"a", "b", "c"})]),
    ],
)
def test_the_cycle_finder_finds_cycles(
    graph: dict[str, set[str]], expected: list[frozenset[str]]
) -> None:
    assert _cycles(graph) == expected
