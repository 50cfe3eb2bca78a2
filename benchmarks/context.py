"""What a scenario's ``run(ctx)`` is given: the mode, the out dir, its flags, progress."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from benchmarks.results import ScenarioResult, Series


def _ignore(_: float) -> None:
    return None


@dataclasses.dataclass
class RunContext:
    """Per-scenario context.

    ``quick``: run small enough for CI (the whole ``--quick`` run stays well under
    a minute per scenario). ``out_dir``: where results go; its filesystem is the
    one measured by disk-bound scenarios. ``args``: the parsed command line,
    including every scenario's own flags (``None`` when not given, so a scenario
    picks its quick or full default). ``notes`` are recorded with the results.
    """

    quick: bool
    out_dir: Path
    args: argparse.Namespace
    _set_total: Callable[[float], None] = _ignore
    _advance: Callable[[float], None] = _ignore
    notes: list[str] = dataclasses.field(default_factory=list)
    earlier: list[ScenarioResult] = dataclasses.field(default_factory=list)
    """Results of the scenarios already run in this invocation (e.g. ``disk`` for a ceiling)."""
    series: list[Series] = dataclasses.field(default_factory=list)
    """Plot lines recorded with :meth:`add_series`, kept with the results."""

    def set_total(self, total: float) -> None:
        """Set the length of this scenario's progress bar (in whatever units it advances)."""
        self._set_total(total)

    def advance(self, amount: float = 1.0) -> None:
        """Move this scenario's progress bar forward."""
        self._advance(amount)

    def earlier_rows(self, name: str) -> list[dict[str, str | int | float]]:
        """The rows of scenario ``name`` if it already ran (status ok) in this invocation."""
        for result in self.earlier:
            if result.name == name and result.status == "ok":
                return result.rows
        return []

    def add_series(
        self,
        panel: str,
        line: str,
        x: str,
        y: str,
        points: list[tuple[float, float]],
        log_x: bool = False,
    ) -> None:
        """Record one line of panel ``panel`` (axes ``x`` and ``y``) for the plot.

        A line without points, or whose y values are all zero, is not recorded: a
        plot never shows a figure that was not measured as if it were zero.
        """
        if points and any(y_ != 0 for _, y_ in points):
            pts = [(float(a), float(b)) for a, b in points]
            self.series.append(Series(panel, line, x, y, pts, log_x))

    def note(self, text: str) -> None:
        """Record a remark shown under the scenario's table (e.g. how it measured)."""
        self.notes.append(text)

    def option(self, name: str, quick: int, full: int) -> int:
        """The scenario flag ``name`` if given, else the quick or full default."""
        value = getattr(self.args, name, None)
        if value is None:
            return quick if self.quick else full
        return int(value)

    @contextlib.contextmanager
    def scratch_dir(self, prefix: str) -> Iterator[Path]:
        """A temporary directory inside ``out_dir`` (same filesystem), removed afterwards."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=f".{prefix}-", dir=self.out_dir))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)
