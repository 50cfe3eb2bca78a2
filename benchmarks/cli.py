"""``python -m benchmarks [SCENARIO ...] [--quick] [--out DIR] [scenario flags]``.

``python -m benchmarks profile SCENARIO ...`` runs one under py-spy (:mod:`benchmarks.profile`);
``python -m benchmarks report [RUN_DIR ...]`` writes the README's goals table, summary.png
and HISTORY.md rows from recorded runs (:mod:`benchmarks.report_files`).

Exit status: 0 when every selected scenario ran or was skipped, 1 when one
failed (the results are still written), 2 on a usage error such as an unknown
scenario name.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import textwrap
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks import machine
from benchmarks.plots import write_plot
from benchmarks.registry import Registry, UnknownScenario, load_all
from benchmarks.report_files import write_run_goals
from benchmarks.results import ScenarioResult, format_figure, write_json, write_markdown
from benchmarks.runner import run_all

RESULTS_ROOT = Path(__file__).resolve().parent / "results"


def default_out_dir(today: datetime.date | None = None) -> Path:
    """``benchmarks/results/<YYYY-MM-DD>/`` next to this package."""
    return RESULTS_ROOT / (today or datetime.date.today()).isoformat()


COMMANDS = (
    ("profile SCENARIO ...", "run one scenario under py-spy: flame graphs per process kind"),
    ("report [RUN_DIR ...]", "the goals of recorded runs: README table, summary.png, HISTORY.md"),
)


def epilog(registry: Registry) -> str:
    """The help's tail: the other commands, then every scenario with one line each."""
    lines = ["commands:"]
    lines += [f"  python -m benchmarks {cmd:<22} {what}" for cmd, what in COMMANDS]
    lines += ["", "scenarios:"]
    width = max((len(n) for n in registry.names()), default=0)
    for entry in registry.all():
        text = textwrap.shorten(entry.description, 116 - width, placeholder=" ...")
        lines.append(f"  {entry.name:<{width}}  {text}")
    return "\n".join(lines)


def build_parser(registry: Registry) -> argparse.ArgumentParser:
    """The main parser, with every registered scenario's own flags in its own group."""
    names = registry.names()
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=textwrap.fill(  # the raw formatter keeps the epilog's lines; wrap this
            "Run raftlog's benchmark scenarios; write results.json, results.md, goals.md, "
            "summary.png and PNG plots. Two other commands: `profile SCENARIO` (under py-spy) "
            "and `report` (the README's goals table); see the end.",
            79,
            break_on_hyphens=False,
        ),
        epilog=epilog(registry),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "scenarios",
        nargs="*",
        metavar="SCENARIO",
        help=f"scenarios to run (default: all): {', '.join(names)}",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for CI")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output directory (default: benchmarks/results/<YYYY-MM-DD>/)",
    )
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument(
        "--servers",
        default=None,
        metavar="HOST:PORT,...",
        help="measure this existing raftlog cluster instead of starting a local one "
        "(small, throughput, idempotent; scenarios that kill or restart nodes skip)",
    )
    parser.add_argument(
        "--shards",
        type=int,
        default=1,
        metavar="N",
        help="processes per node (raftlog server --shards) of the local clusters the "
        "scenarios start (default 1, as raftlog local start)",
    )
    parser.add_argument(
        "--flush-scope",
        choices=("node", "group"),
        default="node",
        help="how the local clusters' nodes make writes durable (raftlog server "
        "--flush-scope): node, one syncfs for all partitions; group, an fsync per "
        "partition's log (default node, as the server)",
    )
    for entry in registry.all():
        if entry.add_arguments is not None:
            entry.add_arguments(parser.add_argument_group(f"scenario {entry.name}"))
    return parser


def _print_machine(console: Console, info: dict, vers: dict[str, str]) -> None:
    disk = (
        f"{info['disk_device']} ({info['disk_filesystem']}, {info['disk_kind']}) "
        f"mounted at {info['disk_mount']}, {info['disk_free_gib']} GiB free"
    )
    console.print(
        f"[bold]machine[/]: {info['cpu']}, {info['cores']} cores ({info['cores_usable']} "
        f"usable), {info['memory_gib']} GiB memory, {info['os']}"
    )
    console.print(f"[bold]disk[/] of {info['disk_path']}: {disk}")
    console.print("[bold]versions[/]: " + ", ".join(f"{k} {v}" for k, v in vers.items()))


def _summary_table(results: list[ScenarioResult]) -> Table:
    table = Table(title="raftlog benchmarks")
    table.add_column("scenario", style="bold")
    table.add_column("case")
    table.add_column("figures")
    table.add_column("s", justify="right")
    for r in results:
        if r.status != "ok":
            style = "yellow" if r.status == "skipped" else "red"
            table.add_row(r.name, f"[{style}]{r.detail}[/]", "", f"{r.seconds:.1f}")
            continue
        for i, row in enumerate(r.rows):
            labels = ", ".join(v for v in row.values() if isinstance(v, str))
            figures = "\n".join(
                f"{k} {format_figure(v)}" for k, v in row.items() if not isinstance(v, str)
            )
            table.add_row(
                r.name if i == 0 else "", labels, figures, f"{r.seconds:.1f}" if i == 0 else ""
            )
    return table


def main(argv: list[str] | None = None, registry: Registry | None = None) -> int:
    """Parse ``argv``, run the scenarios, print the table, write the files; the exit status."""
    args_list = sys.argv[1:] if argv is None else argv
    if args_list[:1] == ["profile"]:  # python -m benchmarks profile SCENARIO ...
        from benchmarks.profile import main as profile_main

        return profile_main(args_list[1:])
    if args_list[:1] == ["report"]:  # python -m benchmarks report [RUN_DIR ...]
        from benchmarks.report_files import main as report_main

        return report_main(args_list[1:])
    registry = registry if registry is not None else load_all()
    parser = build_parser(registry)
    args = parser.parse_args(argv)
    console = Console()
    if not console.is_terminal:  # piped or captured: do not wrap the table at 80 columns
        console = Console(width=140)
    if args.list:
        for entry in registry.all():
            print(f"{entry.name:<12} {entry.description}")
        return 0
    try:
        selected = registry.select(args.scenarios)
    except UnknownScenario as exc:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    out_dir: Path = args.out if args.out is not None else default_out_dir()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"{parser.prog}: error: cannot create --out {out_dir}: {exc}", file=sys.stderr)
        return 2

    info, vers = machine.machine(out_dir), machine.versions()
    _print_machine(console, info, vers)
    header = {
        "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "quick": args.quick,
        "command": shlex.join(
            ["python", "-m", "benchmarks", *(sys.argv[1:] if argv is None else argv)]
        ),
        "commit": machine.git_commit(),
        "machine": info,
        "versions": vers,
    }
    load = [machine.load_average()]
    results = run_all(selected, quick=args.quick, out_dir=out_dir, args=args, console=console)
    load.append(machine.load_average())
    if None not in load:  # the 1-minute load at the start and the end: was the machine shared?
        header["load"] = load
    plots: dict[str, str] = {}
    for entry, result in zip(selected, results, strict=True):
        try:
            path = write_plot(entry, result, out_dir)
        except Exception as exc:  # a broken plot must not lose the measured figures
            result.notes.append(f"plot failed: {type(exc).__name__}: {exc}")
            path = None
        if path is not None:
            plots[entry.name] = path.name
    write_json(out_dir / "results.json", header, results, plots)
    goals = ""
    try:
        doc = json.loads((out_dir / "results.json").read_text())
        write_run_goals(out_dir, doc, registry.goals())
        goals = (out_dir / "goals.md").read_text()
    except Exception as exc:  # a broken goals report must not lose the measured figures
        console.print(f"[red]goals report failed[/]: {type(exc).__name__}: {exc}")
    write_markdown(out_dir / "results.md", header, results, plots, goals)
    console.print(_summary_table(results))
    console.print(f"results written to {out_dir}")
    return 1 if any(r.status == "failed" for r in results) else 0
