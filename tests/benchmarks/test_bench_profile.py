"""``python -m benchmarks profile``: its arguments, and flame graphs of a tiny Python process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import _bench_repo_path  # noqa: F401  (puts the repo root on sys.path)
import pytest

from benchmarks import cli, profile

BUSY = (
    "import subprocess, sys, time\n"
    "CHILD = 'import time\\ndef spin_child():\\n t = time.time()\\n"
    " while time.time() - t < 0.8: sum(range(500))\\nspin_child()'\n"
    "def spin_parent():\n"
    "    t = time.time()\n"
    "    while time.time() - t < 0.8: sum(range(500))\n"
    "child = subprocess.Popen([sys.executable, '-c', CHILD])\n"
    "spin_parent()\n"
    "child.wait()\n"
)


def test_unknown_scenario_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["profile", "no-such-scenario"])
    assert exc.value.code == 2
    assert "valid names" in capsys.readouterr().err


def test_arguments_pass_scenario_flags_through() -> None:
    args, rest = profile.build_parser().parse_known_args(
        ["small", "--quick", "--rate", "50", "--small-seconds", "1"]
    )
    assert (args.scenario, args.rate, args.out) == ("small", 50, None)
    assert rest == ["--quick", "--small-seconds", "1"]


def test_folded_parsing_and_kinds() -> None:
    text = (
        'process 1:"python -m benchmarks spark\n--quick";run (a.py:1);spin (a.py:2) 3\n'
        'process 1:"python -m benchmarks";process 2:"python -m raftlog server";append (n.py:9) 2\n'
        'process 1:"python -m benchmarks";process 3:"java";process 4:"python -m pyspark.daemon";'
        "write (w.py:5) 1\n"
        'process 1:"";loop (a.py:3) 4\n'
    )
    by_kind = profile.split_by_kind(profile.parse_folded(text))
    assert by_kind["driver"][0] == (["run (a.py:1)", "spin (a.py:2)"], 3)
    assert by_kind["driver"][1] == (["loop (a.py:3)"], 4)
    assert by_kind["node"] == [(["append (n.py:9)"], 2)]
    assert by_kind["spark-worker"] == [(["write (w.py:5)"], 1)]
    top = profile.top_frames(by_kind["driver"], 5)
    assert top[0] == ("loop (a.py:3)", 4 / 7, 4 / 7)
    waiting = [(["_worker (concurrent/futures/thread.py:81)"], 5), (["f (a.py:1)"], 2)]
    assert profile.busy_samples(waiting) == 2


def test_flame_graphs_of_a_tiny_process(tmp_path: Path) -> None:
    try:
        py_spy = profile.py_spy_path()
    except SystemExit as exc:  # never a skip: the harness needs it
        pytest.fail(f"{exc}")
    folded = tmp_path / "profile-tiny.folded"
    subprocess.run(
        [py_spy, "record", "--subprocesses", "--format", "raw", "--rate", "200",
         "-o", str(folded), "--", sys.executable, "-c", BUSY],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    summary = profile.write_reports(folded, tmp_path, "tiny", top=5)
    text = summary.read_text()
    assert "spin_parent" in text and "spin_child" in text
    # the launched process is "driver" when py-spy read its command line late, else "other"
    svgs = [p.read_text() for p in sorted(tmp_path.glob("profile-tiny-*.svg"))]
    svg = next(s for s in svgs if "spin_parent" in s)
    assert svg.startswith("<svg") and "spin_parent" in svg
    ElementTree.fromstring(svg)  # well-formed, labels cut before escaping


def test_svg_is_well_formed_with_long_escaped_frames() -> None:
    svg = profile.flame_svg([(["<module> (<frozen runpy>:88)" * 5, "f&g"], 3)], "t<1>", 300)
    ElementTree.fromstring(svg)
