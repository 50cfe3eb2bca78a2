"""``python -m benchmarks profile SCENARIO [--quick] [--out DIR] [--rate HZ] [scenario flags]``.

Runs ``python -m benchmarks SCENARIO ...`` under ``py-spy record --subprocesses``, so
every Python process of the run is sampled: the driver (this harness, which is also
the client of the small-write scenarios and Spark's driver), the raftlog nodes it
starts, and Spark's Python workers (children of the JVM, a child of the driver).
py-spy writes collapsed stacks; they are split by process kind and written beside
the scenario's results, in ``--out``:

- ``profile-<scenario>.folded``: every sample (py-spy's raw format);
- ``profile-<scenario>-<kind>.folded`` and ``.svg``: one flame graph per process kind
  (``node``, ``spark-worker``, ``driver``, ``other``);
- ``profile-<scenario>.md``: per kind, the top frames by share of that kind's samples,
  self (the frame was running) and total (the frame was on the stack).
"""

from __future__ import annotations

import argparse
import collections
import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

INSTALL = "pip install py-spy  (or: pip install -e '.[bench]')"
KINDS = ("node", "spark-worker", "driver", "other")
_PROCESS = re.compile(r'^process (\d+):"(.*)"$', re.S)


def py_spy_path() -> str:
    """The py-spy executable (beside this Python first); SystemExit with the install command."""
    beside = Path(sys.executable).with_name("py-spy")
    if beside.exists():
        return str(beside)
    found = shutil.which("py-spy")
    if found is None:
        raise SystemExit(f"py-spy is not installed: {INSTALL}")
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks profile",
        description="Run one scenario under py-spy (driver, nodes and Spark Python workers) "
        "and write flame graphs per process kind beside its results.",
    )
    parser.add_argument("scenario", metavar="SCENARIO", help="the scenario to profile")
    parser.add_argument("--out", type=Path, default=None, help="output directory")
    parser.add_argument("--rate", type=int, default=100, help="samples per second (default 100)")
    parser.add_argument("--top", type=int, default=15, help="frames per kind in the summary")
    return parser


def parse_folded(text: str) -> list[tuple[list[str], int]]:
    """Collapsed stacks ``a;b;c COUNT`` (a process frame's command line may hold newlines)."""
    stacks: list[tuple[list[str], int]] = []
    pending = ""
    for line in text.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        head, sep, count = pending.rpartition(" ")
        if sep and count.isdigit() and not _open_quote(head):
            stacks.append((_split_frames(head), int(count)))
            pending = ""
    return stacks


def _open_quote(text: str) -> bool:
    return text.count('"') % 2 == 1


def _split_frames(stack: str) -> list[str]:
    """Split on ';' outside the double-quoted command lines of process frames."""
    frames, current, quoted = [], [], False
    for ch in stack:
        if ch == '"':
            quoted = not quoted
        if ch == ";" and not quoted:
            frames.append("".join(current))
            current = []
        else:
            current.append(ch)
    frames.append("".join(current))
    return frames


def kind_of(cmdline: str) -> str:
    """The process kind from its command line."""
    if "-m raftlog" in cmdline or "raftlog server" in cmdline:
        return "node"
    if "pyspark" in cmdline or ("daemon" in cmdline and "spark" in cmdline.lower()):
        return "spark-worker"
    if "benchmarks" in cmdline:
        return "driver"
    return "other"


def split_by_kind(stacks: list[tuple[list[str], int]]) -> dict[str, list[tuple[list[str], int]]]:
    """Per kind, the stacks without their process frames (kind = the innermost process)."""
    out: dict[str, list[tuple[list[str], int]]] = collections.defaultdict(list)
    for frames, count in stacks:
        kind, rest = "other", frames
        for i, frame in enumerate(frames):
            match = _PROCESS.match(frame)
            if match:
                cmdline = " ".join(match.group(2).split())
                # py-spy may read the command line of the process it launched only after it
                # exited (""): the outermost process is the harness, i.e. the driver.
                kind = "driver" if i == 0 and not cmdline else kind_of(cmdline)
                rest = frames[i + 1 :]
                if kind == "other" and any("spark" in f for f in frames[:i]):
                    kind = "spark-worker"  # e.g. a worker sampled as the JVM's jspawnhelper
        out[kind].append((rest or ["(idle)"], count))
    return dict(out)


WAITS = re.compile(
    r"^(\(idle\)|_worker \(concurrent/futures/thread\.py|\w*Selector\.select \(selectors\.py"
    r"|Condition\.wait \(threading\.py|sleep \(asyncio/tasks\.py|Event\.wait \(threading\.py)"
)
"""Leaf frames that are a thread waiting (py-spy's idle detection misses some: an executor
thread blocked on its queue is sampled as running); reported, and left out of "busy"."""


def busy_samples(stacks: list[tuple[list[str], int]]) -> int:
    """Samples whose leaf frame is not a known wait."""
    return sum(c for frames, c in stacks if not WAITS.match(frames[-1]))


def top_frames(stacks: list[tuple[list[str], int]], n: int) -> list[tuple[str, float, float]]:
    """(frame, self share, total share) of the ``n`` frames with the most self samples."""
    total = sum(c for _, c in stacks) or 1
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    for frames, count in stacks:
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    return [(f, c / total, inclusive[f] / total) for f, c in own.most_common(n)]


def flame_svg(stacks: list[tuple[list[str], int]], title: str, width: int = 1200) -> str:
    """A plain icicle-style flame graph (root at the top); hover a box for its frame."""
    root: dict = {"n": 0, "c": {}}
    for frames, count in stacks:
        node = root
        node["n"] += count
        for frame in frames:
            node = node["c"].setdefault(frame, {"n": 0, "c": {}})
            node["n"] += count
    total = root["n"] or 1
    row_h, boxes, depth_max = 16, [], 0

    def walk(node: dict, x: float, depth: int) -> None:
        nonlocal depth_max
        for name, child in sorted(node["c"].items()):
            w = child["n"] / total * width
            if w >= 0.5:
                depth_max = max(depth_max, depth)
                hue = 20 + (hash(name) % 40)
                label = html.escape((name if w > 60 else "")[: int(w / 7)])
                tip = html.escape(f"{name} ({child['n'] / total:.1%})")
                boxes.append(
                    f'<g><title>{tip}</title><rect x="{x:.1f}" y="{20 + depth * row_h}" '
                    f'width="{w:.1f}" height="{row_h - 1}" fill="hsl({hue},90%,60%)"/>'
                    f'<text x="{x + 2:.1f}" y="{20 + depth * row_h + 12}" font-size="11">'
                    f"{label}</text></g>"
                )
                walk(child, x, depth + 1)
            x += w

    walk(root, 0.0, 0)
    height = 20 + (depth_max + 2) * row_h
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="monospace"><text x="2" y="14" font-size="13">'
        f"{html.escape(title)} ({total} samples)</text>" + "".join(boxes) + "</svg>\n"
    )


def write_reports(folded: Path, out_dir: Path, scenario: str, top: int) -> Path:
    """Split ``folded`` by kind; write per-kind .folded/.svg and the markdown summary."""
    by_kind = split_by_kind(parse_folded(folded.read_text(errors="replace")))
    all_samples = sum(c for stacks in by_kind.values() for _, c in stacks) or 1
    lines = [f"# Profile of `{scenario}`", "", f"{all_samples} samples in all.", ""]
    for kind in KINDS:
        stacks = by_kind.get(kind)
        if not stacks:
            continue
        samples = sum(c for _, c in stacks)
        stem = out_dir / f"profile-{scenario}-{kind}"
        stem.with_suffix(".folded").write_text("".join(f"{';'.join(f)} {c}\n" for f, c in stacks))
        stem.with_suffix(".svg").write_text(flame_svg(stacks, f"{scenario}: {kind}"))
        lines += [
            f"## {kind}: {samples} samples ({samples / all_samples:.0%})",
            "",
            f"busy (leaf not a known wait): {busy_samples(stacks)} samples; frames marked"
            " (wait) are threads waiting.",
            "",
            f"flame graph: `{stem.name}.svg`",
            "",
            "| self | total | frame |",
            "|---:|---:|---|",
        ]
        lines += [
            f"| {s:.1%} | {t:.1%} | `{f}`{' (wait)' if WAITS.match(f) else ''} |"
            for f, s, t in top_frames(stacks, top)
        ]
        lines.append("")
    summary = out_dir / f"profile-{scenario}.md"
    summary.write_text("\n".join(lines))
    return summary


def main(argv: list[str]) -> int:
    """Parse, run the scenario under py-spy, write the reports; the scenario's exit status."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    from benchmarks.cli import default_out_dir
    from benchmarks.registry import load_all

    names = load_all().names()
    if args.scenario not in names:
        parser.error(f"unknown scenario {args.scenario!r}; valid names: {', '.join(names)}")
    py_spy = py_spy_path()
    out_dir: Path = args.out if args.out is not None else default_out_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    folded = out_dir / f"profile-{args.scenario}.folded"
    command = [
        py_spy, "record", "--subprocesses", "--format", "raw",
        "--rate", str(args.rate), "-o", str(folded), "--",
        sys.executable, "-m", "benchmarks", args.scenario, "--out", str(out_dir), *rest,
    ]  # fmt: skip
    status = subprocess.run(command, check=False).returncode
    if not folded.exists():
        print(f"py-spy wrote no profile (exit {status})", file=sys.stderr)
        return status or 1
    print(f"profile summary: {write_reports(folded, out_dir, args.scenario, args.top)}")
    return status
