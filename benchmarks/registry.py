"""The scenario registry: names, descriptions and the ``run(ctx)`` of every scenario.

A scenario is one module in :mod:`benchmarks.scenarios` that decorates its
``run`` function with :func:`scenario`. :func:`load_all` imports every module in
that package, so adding a file is all it takes to add a scenario.

Contract of ``run(ctx) -> list[Row]``: each row is a non-empty dict whose
``str`` values label the row (e.g. ``{"case": "fsync every 1 MiB"}``) and whose
``int``/``float`` values are the measured figures, named with their unit
(``"MB/s"``). A scenario that cannot run raises :class:`Skip` with the reason;
any other exception marks the scenario failed (the run goes on).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import pkgutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from benchmarks.goals import Goal
from benchmarks.results import Row

if TYPE_CHECKING:
    from benchmarks.context import RunContext
    from benchmarks.results import ScenarioResult

RunFn = Callable[["RunContext"], list[Row]]
AddArgumentsFn = Callable[["argparse._ArgumentGroup"], None]
PlotFn = Callable[["ScenarioResult", "Any"], None]


class Skip(Exception):
    """Raised by a scenario that cannot run here; the reason is shown as ``skipped: <reason>``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UnknownScenario(KeyError):
    """A scenario name that is not registered; the message lists the valid names."""

    def __init__(self, unknown: list[str], valid: list[str]) -> None:
        super().__init__(", ".join(unknown))
        self.unknown = unknown
        self.valid = valid

    def __str__(self) -> str:
        return (
            f"unknown scenario(s): {', '.join(self.unknown)}; "
            f"valid names: {', '.join(self.valid) or '(none registered)'}"
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Scenario:
    """One registered scenario.

    ``add_arguments`` (optional) adds the scenario's own flags (e.g. ``--seeds``)
    to the main parser, inside an argument group named after the scenario.
    ``plot`` (optional) replaces the default bar chart: it gets the result and a
    matplotlib Figure to draw on. ``goals`` are what its figures are judged against
    (:mod:`benchmarks.goals`): the README table, ``summary.png`` and the goal figures.
    """

    name: str
    description: str
    run: RunFn
    add_arguments: AddArgumentsFn | None = None
    plot: PlotFn | None = None
    goals: tuple[Goal, ...] = ()


class Registry:
    """An ordered name -> :class:`Scenario` map; names are unique."""

    def __init__(self) -> None:
        self._scenarios: dict[str, Scenario] = {}

    def register(self, entry: Scenario) -> Scenario:
        """Add ``entry``; raises ValueError on a bad or duplicate name."""
        if not entry.name or not entry.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"scenario name must be letters, digits, - or _, got {entry.name!r}")
        if entry.name in self._scenarios:
            raise ValueError(f"scenario {entry.name!r} is registered twice")
        taken = {goal.key for _, goal in self.goals()}
        for goal in entry.goals:
            if goal.key in taken:
                raise ValueError(f"goal key {goal.key!r} of {entry.name!r} is used twice")
            taken.add(goal.key)
        self._scenarios[entry.name] = entry
        return entry

    def names(self) -> list[str]:
        """Registered names in alphabetical order, whatever order modules were imported in."""
        return sorted(self._scenarios)

    def all(self) -> list[Scenario]:
        return [self._scenarios[name] for name in self.names()]

    def goals(self) -> list[tuple[str, Goal]]:
        """Every ``(scenario name, goal)``, scenarios alphabetically, goals as declared."""
        return [(entry.name, goal) for entry in self.all() for goal in entry.goals]

    def select(self, names: list[str]) -> list[Scenario]:
        """The scenarios named (in the order given, duplicates dropped); all when empty.

        Raises :class:`UnknownScenario` listing every unknown name and the valid ones.
        """
        if not names:
            return self.all()
        unknown = [n for n in names if n not in self._scenarios]
        if unknown:
            raise UnknownScenario(unknown, self.names())
        return [self._scenarios[n] for n in dict.fromkeys(names)]


REGISTRY = Registry()
"""The registry the scenario modules register into."""


def scenario(
    name: str,
    description: str,
    *,
    add_arguments: AddArgumentsFn | None = None,
    plot: PlotFn | None = None,
    goals: tuple[Goal, ...] = (),
) -> Callable[[RunFn], RunFn]:
    """Decorator: register the decorated ``run(ctx)`` as scenario ``name`` in :data:`REGISTRY`."""

    def decorate(run: RunFn) -> RunFn:
        REGISTRY.register(Scenario(name, description, run, add_arguments, plot, tuple(goals)))
        return run

    return decorate


def load_all() -> Registry:
    """Import every module of :mod:`benchmarks.scenarios` (each registers itself); return it."""
    from benchmarks import scenarios

    for info in sorted(pkgutil.iter_modules(scenarios.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{scenarios.__name__}.{info.name}")
    return REGISTRY


def require(module: str, attr: str | None = None) -> Any:
    """Import ``module`` (and return ``module.attr``), or raise :class:`Skip` if not built yet.

    Only a module that does not exist, or lacks ``attr``, is a skip. A module that
    exists but fails to import is a real error and propagates (the scenario fails).
    """
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        spec = None
    if spec is None:
        raise Skip(f"{module} is not built yet (or not installed)")
    mod = importlib.import_module(module)
    if attr is None:
        return mod
    if not hasattr(mod, attr):
        raise Skip(f"{module}.{attr} is not built yet")
    return getattr(mod, attr)
