"""No private name is used across modules of the project.

A name with one leading underscore is its module's own. Read from the source (AST) of
``raftlog/``, ``connector/`` and ``benchmarks/``, a module may not

- import another project module's private name (``from raftlog.client.calls import
  _CallState``), nor
- reach a private attribute on anything but ``self`` or ``cls`` (``client._send``,
  ``self._client._partition_call``, ``failpoints._active``) when that name is defined
  by another module of the project and not by itself.

A name is *defined* by a module when the module defines a function or class of that
name, assigns it (a module or class variable, ``self._name = ...``) or lists it in
``__slots__``. Private names of other projects (``os._exit``, aiohttp's ``ws._writer``)
are not the project's contracts and are out of scope. Access through ``self`` inside
a mixin (``RaftlogClient``'s parts in ``raftlog/client``) is not caught here.
"""

from __future__ import annotations

import ast
import functools
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
ROOTS = ("raftlog", "connector", "benchmarks")
SKIP = ("__pycache__", "reference")
PACKAGES = ("raftlog", "connector", "benchmarks", "pyspark_raftlog")  # pyspark_raftlog: connector/


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _sources() -> list[pathlib.Path]:
    return sorted(
        p
        for root in ROOTS
        for p in (REPO / root).rglob("*.py")
        if not any(s in p.relative_to(REPO).parts for s in SKIP)
    )


def _defined(tree: ast.Module) -> set[str]:
    """The private names ``tree`` defines (see the module doc)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            names.update(
                c.value
                for c in ast.walk(node.value)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            )
    return {n for n in names if _private(n)}


def _uses(tree: ast.Module) -> list[tuple[int, str, str]]:
    """(line, private name, how) for every import of a project module's private name
    and every private attribute reached on something other than ``self``/``cls``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PACKAGES:
            found += [
                (node.lineno, a.name, f"from {node.module} import {a.name}")
                for a in node.names
                if _private(a.name)
            ]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            receiver = node.value
            if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
                continue
            found.append((node.lineno, node.attr, f"{ast.unparse(receiver)}.{node.attr}"))
    return found


@functools.cache
def _trees() -> dict[pathlib.Path, ast.Module]:
    return {p: ast.parse(p.read_text(encoding="utf-8")) for p in _sources()}


def _cross_module_uses(trees: dict[pathlib.Path, ast.Module]) -> list[str]:
    defined = {p: _defined(t) for p, t in trees.items()}
    anywhere: dict[str, set[pathlib.Path]] = {}
    for p, names in defined.items():
        for n in names:
            anywhere.setdefault(n, set()).add(p)
    broken = []
    for p, tree in trees.items():
        for line, name, how in _uses(tree):
            owners = anywhere.get(name, set())
            imported = how.startswith("from ")
            if (imported and owners - {p}) or (not imported and owners and p not in owners):
                broken.append(f"{p.relative_to(REPO)}:{line} uses {how}")
    return broken


def test_no_private_name_is_used_across_modules() -> None:
    broken = _cross_module_uses(_trees())
    assert not broken, "private names used outside their module:\n" + "\n".join(broken)


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        ("from raftlog.a import _helper\n", "from raftlog.a import _helper"),
        ("def f(c):\n    return c._helper()\n", "c._helper"),
        ("def f(self):\n    return self._client._helper()\n", "self._client._helper"),
        ("from raftlog import a\n\nx = a._State\n", "a._State"),
    ],
)
def test_the_rule_sees_each_form(user: str, expected: str, tmp_path: pathlib.Path) -> None:
    """A private name of one module (``raftlog.a``) used by another is reported, in
    each form; used by its own module it is not."""
    owner = "class _State:\n    pass\n\n\ndef _helper():\n    return _State()\n"
    trees = {
        REPO / "raftlog" / "a.py": ast.parse(owner),
        REPO / "raftlog" / "b.py": ast.parse(user),
    }
    assert [b.split(" uses ", 1)[1] for b in _cross_module_uses(trees)] == [expected]
    trees[REPO / "raftlog" / "b.py"] = ast.parse(owner + "\n" + user.replace("from", "# from"))
    assert _cross_module_uses(trees) == []
