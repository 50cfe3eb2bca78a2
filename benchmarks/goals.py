"""Goals: what a scenario's figures are measured against, and whether a run met them.

A scenario declares its goals once, in its module, with ``@scenario(..., goals=...)``;
the README table, ``summary.png``, the goal figures and ``HISTORY.md`` are all
computed from those declarations by :func:`evaluate` on a run's results, so they
cannot disagree.

A goal compares one figure of ours (a :class:`Pick`: a row's labels and a column)
either with a peer or ceiling measured in the same run (``peers``; the ratio is
ours / peer) or with a fixed bound (no peers; the ratio is ours / bound). It is
met when the ratio is at least ``target`` (``higher_is_better``) or at most it.

This module works on plain results data (the ``scenarios`` list of a
``results.json``, or :class:`~benchmarks.results.ScenarioResult` turned into
dicts), so a goal can be judged on any run ever recorded.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.results import format_figure

TIMES = "\N{MULTIPLICATION SIGN}"
"""The sign after a ratio, as in 0.70 times."""

ScenarioDoc = Mapping[str, Any]
"""One scenario's entry in results.json: ``name``, ``status``, ``rows``, ..."""


@dataclasses.dataclass(frozen=True)
class Pick:
    """One figure of one scenario's results: the row whose labels match, its ``column``.

    ``row`` maps label keys to values; a value is a shell-style pattern
    (``"etcd *"`` matches ``"etcd 3.4.23"``, ``"* leader kills"`` any count). ``scenario``
    empty means the goal's own scenario. ``name`` is how tables and plots call
    the figure (``"Spark's empty Python writer"``); ``detail``, a label key whose
    value is added to it in brackets, tells apart rows one pattern matches.
    """

    name: str
    row: tuple[tuple[str, str], ...]
    column: str
    scenario: str = ""
    detail: str = ""

    def find_all(
        self, scenarios: Mapping[str, ScenarioDoc], default: str
    ) -> list[tuple[float, str]]:
        """``(figure, name)`` of every matching row of the scenario, in row order.

        The scenario is ``self.scenario``, or ``default`` when empty. Empty when that
        scenario did not run ok, no row matches, or the rows lack the column.
        """
        doc = scenarios.get(self.scenario or default)
        if doc is None or doc.get("status") != "ok":
            return []
        found = []
        for row in doc.get("rows", []):
            if all(_matches(row.get(key), want) for key, want in self.row):
                value = row.get(self.column)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    detail = row.get(self.detail) if self.detail else None
                    found.append((float(value), f"{self.name} ({detail})" if detail else self.name))
        return found


def _matches(value: object, want: str) -> bool:
    return isinstance(value, str) and fnmatch.fnmatchcase(value, want)


@dataclasses.dataclass(frozen=True)
class Goal:
    """One goal of a scenario.

    ``key``: a short slug, unique over all scenarios (names the goal's PNG).
    ``what``: the question, as the README table's first column says it.
    ``ours``: candidates for our figure; the first one found is used (a goal
    stated at a size a run may not reach names the smaller sizes after it).
    ``peers``: the peers or ceilings measured in the same run; the best one found
    (the highest when ``higher_is_better``, else the lowest) is the reference.
    Empty: ``bound`` is. ``target``: the goal ratio (``0.8`` for "≥ 0.8 times the
    ceiling"; ``1.0`` for a bound). ``unit``: how a value is shown (default: the
    column name of ``ours``).
    """

    key: str
    what: str
    ours: tuple[Pick, ...]
    target: float = 1.0
    higher_is_better: bool = True
    peers: tuple[Pick, ...] = ()
    bound: float | None = None
    unit: str = ""

    def __post_init__(self) -> None:
        if not self.ours:
            raise ValueError(f"goal {self.key!r}: ours needs at least one Pick")
        if bool(self.peers) == (self.bound is not None):
            raise ValueError(f"goal {self.key!r}: give either peers or a bound, not both")
        if self.target <= 0 or (self.bound is not None and self.bound <= 0):
            raise ValueError(f"goal {self.key!r}: target and bound must be > 0")

    @property
    def sign(self) -> str:
        return "≥" if self.higher_is_better else "≤"

    def statement(self) -> str:
        """The goal in words: ``≥ 0.8`` :data:`TIMES` ``empty Python writer``, or ``≤ 1 s``."""
        if self.bound is not None:
            return f"{self.sign} {format_figure(self.bound)} {self.unit or self.ours[0].column}"
        return f"{self.sign} {format_figure(self.target)}{TIMES} {self.peers[0].name}"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A goal judged on one run. ``ours``/``peer`` None: not measured in that run.

    ``ratio`` is ours / peer, or ours / bound; ``score`` is how far the ratio is from
    the target in the good direction (``ratio / target``, inverted for a goal where
    lower is better): met exactly when ``score >= 1``.
    """

    goal: Goal
    scenario: str
    ours: float | None
    ours_name: str
    peer: float | None
    peer_name: str
    peers_found: tuple[tuple[float, str], ...] = ()
    """Every peer figure found, ``(value, name)``, the reference among them (figures)."""

    @property
    def measured(self) -> bool:
        return self.ours is not None and self.peer is not None

    @property
    def ratio(self) -> float | None:
        if self.ours is None or self.peer is None or self.peer == 0:
            return None
        return self.ours / self.peer

    @property
    def score(self) -> float | None:
        ratio = self.ratio
        if ratio is None:
            return None
        if self.goal.higher_is_better:
            return ratio / self.goal.target
        return self.goal.target / ratio if ratio > 0 else float("inf")

    @property
    def met(self) -> bool | None:
        """True/False, or None when not measured."""
        score = self.score
        return None if score is None else score >= 1.0


def evaluate(goal: Goal, scenario: str, scenarios: Mapping[str, ScenarioDoc]) -> Outcome:
    """Judge ``goal`` (declared by ``scenario``) on one run's ``scenarios`` (by name)."""
    ours, ours_name = None, goal.ours[0].name
    for pick in goal.ours:
        found = pick.find_all(scenarios, scenario)
        if found:
            ours, ours_name = found[0]
            break
    if goal.bound is not None:
        return Outcome(goal, scenario, ours, ours_name, goal.bound, "bound")
    found = [f for pick in goal.peers for f in pick.find_all(scenarios, scenario)]
    if not found:
        return Outcome(goal, scenario, ours, ours_name, None, goal.peers[0].name)
    peer, peer_name = (max if goal.higher_is_better else min)(found, key=lambda f: f[0])
    return Outcome(goal, scenario, ours, ours_name, peer, peer_name, tuple(found))


def evaluate_run(
    declared: Sequence[tuple[str, Goal]], scenarios: Sequence[ScenarioDoc]
) -> list[Outcome]:
    """Every declared ``(scenario, goal)`` judged on one run's scenario entries."""
    by_name = {doc["name"]: doc for doc in scenarios}
    return [evaluate(goal, name, by_name) for name, goal in declared]


def at_most(key: str, what: str, ours: tuple[Pick, ...], bound: float, unit: str = "") -> Goal:
    """A goal that our figure stays at or under ``bound`` (a time, a count per request)."""
    return Goal(key, what, ours, bound=bound, higher_is_better=False, unit=unit)


def row(**labels: str) -> tuple[tuple[str, str], ...]:
    """``row(case="...")``: the labels a :class:`Pick` matches, as keyword arguments."""
    return tuple(labels.items())
