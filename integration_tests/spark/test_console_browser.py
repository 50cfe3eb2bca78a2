"""The console in a real browser (issue 49): headless Chromium from Debian's packages
(``/usr/bin/chromium``), driven by Playwright's Python API (never its own browser
downloads), loads a node's ``/console`` of a 3-node cluster (``--console``) while a
Spark query (the session's shared SparkSession) writes to it, and checks what a person
looks for there:

- the Spark writer (the query's id) with its micro-batches as the coordinator recorded
  them, committed, with rows; and a new micro-batch appearing as the page refreshes;
- a node killed with SIGKILL shown as down within 10 s.

``raftlog console`` (the page on its own, read through the client API) is loaded too,
over plain HTTP, with and without the client token. The screenshot the test takes is
``docs/console.png``'s source (copied by hand when the page changes).
"""

from __future__ import annotations

import pathlib
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest
from stream_checks import rate_stream, unique_topic

from benchmarks.workloads.cluster_handle import ClusterHandle, running_cluster
from raftlog.cluster import free_ports

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DOWN_WITHIN_S = 10.0
PAGE_TIMEOUT_MS = 300_000  # liveness only: the first micro-batch on a busy 2-core machine


@pytest.fixture
def console_cluster(tmp_path: pathlib.Path) -> Iterator[ClusterHandle]:
    with running_cluster(tmp_path / "cluster", extra_args=["--console"]) as handle:
        yield handle


@pytest.fixture
def browser() -> Iterator[object]:
    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (scripts/env.sh does)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is missing: pip install -e '.[test]' (scripts/env.sh does)")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def standalone_console(console_cluster: ClusterHandle) -> Iterator[str]:
    """``raftlog console`` of the cluster on a free loopback port; stopped by PID."""
    port = free_ports(1)[0]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "raftlog",
            "console",
            "--servers",
            ",".join(console_cluster.servers),
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed once it serves
        assert f"http://127.0.0.1:{port}/console" in line, line
        yield f"http://127.0.0.1:{port}/console"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as resp:
        assert resp.status == 200
        return resp.read().decode()


def test_console_shows_micro_batches_landing_and_a_killed_node_down(
    spark, console_cluster: ClusterHandle, browser, standalone_console: str, tmp_path: pathlib.Path
) -> None:
    servers = ",".join(console_cluster.servers)
    topic = unique_topic("console")
    query = (
        rate_stream(spark)
        .writeStream.format("raftlog")
        .option("topic", topic)
        .option("servers", servers)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(f"http://{console_cluster.address(1)}/console")
        from playwright.sync_api import expect

        # the coordinator's writer id of a streaming query ends with the query's id
        writer = page.locator(f'table.writer[data-writer$="{query.id}"]')
        committed = writer.locator('tr.batch[data-state="committed"]')
        # the page refreshes itself (meta refresh): the query's first commits appear
        expect(committed.first).to_be_visible(timeout=PAGE_TIMEOUT_MS)
        first = int(committed.first.get_attribute("data-version"))
        rows = committed.first.locator("td").nth(1).inner_text()
        assert rows == "200", rows  # rate_stream: 200 rows per micro-batch
        assert topic in committed.first.inner_text()
        # a newer micro-batch lands while the page is open
        newer = writer.locator(f'tr.batch[data-version="{first + 1}"][data-state="committed"]')
        expect(newer).to_be_visible(timeout=PAGE_TIMEOUT_MS)
        expect(page.locator(f'tr.topic[data-topic="{topic}"]')).to_be_visible()
        for node in (1, 2, 3):
            expect(page.locator(f'tr.node[data-node="{node}"]')).to_have_attribute(
                "data-state", "up"
            )
        page.screenshot(path=str(tmp_path / "console.png"), full_page=False)

        # the same page on its own (raftlog console), read through the client API
        html = _get(standalone_console)
        assert f'{query.id}"' in html and f'data-topic="{topic}"' in html

        # a killed node is shown as down within 10 s
        console_cluster.kill(3, signal.SIGKILL)
        killed = time.monotonic()
        expect(page.locator('tr.node[data-node="3"]')).to_have_attribute(
            "data-state", "down", timeout=int(DOWN_WITHIN_S * 1000)
        )
        shown_after = time.monotonic() - killed
        assert shown_after <= DOWN_WITHIN_S
        assert "not healthy" in page.locator("#health").inner_text()
        print(f"node 3 shown as down {shown_after:.1f} s after SIGKILL")
    finally:
        query.stop()
