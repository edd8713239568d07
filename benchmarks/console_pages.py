"""The console in headless Chromium: time to the first painted chart of a metric with a million
points, and the bytes fetched for it (see server.py's docstring)."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from .common import Served, running_server, table

COMPARED = 10
CHART_READY = """(selector) => {
  const charts = [...document.querySelectorAll(selector)];
  return charts.length > 0 && charts.every((c) => c.dataset.loading === "0" && +c.dataset.points > 0
                                                && c.querySelector("canvas"));
}"""
PAGE_READY = "() => document.querySelector('.empty, section.chart') !== null"
FETCHED = """(part) => performance.getEntriesByType("navigation").concat(performance.getEntriesByType("resource"))
  .filter((e) => e.name.includes(part)).reduce((sum, e) => sum + e.transferSize, 0)"""


def _jobs(home: Path, points: int) -> None:
    """Jobs ``big-0`` .. ``big-9`` with ``points`` points of ``loss`` each (a noisy falling curve
    with a spike and a NaN), and ``empty`` with none, written straight into the store."""
    import numpy as np

    from trainmon.api.sagemaker import register_job
    from trainmon.runtime.job.jobstate import set_status
    from trainmon.store import Batch, open_store

    store = open_store(home)
    try:
        rng = np.random.default_rng(7)
        start = int(time.time() * 1000) - points * 100
        for name in [f"big-{n}" for n in range(COMPARED)] + ["empty"]:
            job = register_job(store, {"TrainingJobName": name, "ProfilerConfig": {"DisableProfiler": True},
                                       "HyperParameters": {"lr": str(0.1 * (1 + len(name)))},
                                       "AlgorithmSpecification": {"TrainingInputMode": "File",
                                                                  "ContainerEntrypoint": ["true"]}})
            set_status(store, name, "Completed")  # a finished job: the page reads it and follows nothing
            if name == "empty":
                break
            stream = store.add_stream(job.id, "algo-1", f"{name}/algo-1-1", start)
            values = np.exp(-np.arange(points) / (points / 4)) + rng.normal(0, 0.02, points)
            values[points // 3] = 5.0
            for first in range(0, points, 100_000):
                rows = range(first, min(points, first + 100_000))
                store.write_batch(Batch(job.id, points=[
                    ("loss", start + i * 100, None if i == points // 2 else float(values[i]), "algo-1", stream.id, i)
                    for i in rows]))
        store.maintain()  # sealed and rolled up, as a job's own maintainer leaves its data
    finally:
        store.close()


def _open(page: object, url: str, ready: str, argument: str | None = None) -> tuple[float, int, int]:
    """Seconds until ``ready`` holds after navigating to ``url``; bytes fetched in all and for points."""
    started = time.perf_counter()
    page.goto(url, wait_until="commit")  # type: ignore[attr-defined]
    page.wait_for_function(ready, arg=argument, polling="raf", timeout=120_000)  # type: ignore[attr-defined]
    elapsed = time.perf_counter() - started
    return (elapsed, page.evaluate(FETCHED, ""),  # type: ignore[attr-defined]
            page.evaluate(FETCHED, "/points"))  # type: ignore[attr-defined]


OBSERVE_ARRIVALS = """(metric) => {
  window.arrivals = [];
  let seen = 0;
  const note = () => {
    const chart = window.trainmonCharts[metric];
    const now = Date.now() / 1000;
    for (; chart && seen < chart.points; seen++) {
      const point = chart.pointAt(seen);
      if (point && point.value !== null) window.arrivals.push(now - point.value);
    }
  };
  const watch = () => {
    const section = document.querySelector(`section.chart[data-metric="${metric}"]`);
    if (!section) return setTimeout(watch, 20);
    new MutationObserver(note).observe(section, {attributes: true, attributeFilter: ["data-points"]});
    note();
  };
  watch();
}"""


def live_in_chart(server: Served, work: Path, count: int, interval_ms: float) -> list[float]:
    """Seconds from a job's print to the point being in its open chart, for each point after the
    page opened: the job prints its own time, the page notes when each point joins the chart."""
    import sys

    import httpx
    from playwright.sync_api import sync_playwright

    from .latency import JOBS

    command = [sys.executable, str(JOBS), "stamped", "--report", str(work / "chart-live.json"), "--count",
               str(count), "--interval-ms", str(interval_ms), "--delay-s", "3.0"]
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as client:
        client.post("/api/jobs", json={
            "TrainingJobName": "chart-live", "ProfilerConfig": {"DisableProfiler": True},
            "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": command,
                                       "MetricDefinitions": [{"Name": "sent", "Regex": r"t=([0-9.]+)"}]}},
                    ).raise_for_status()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            server.sign_in(context)
            page = context.new_page()
            page.goto(f"{server.url}/jobs/chart-live")
            page.evaluate(OBSERVE_ARRIVALS, "sent")
            page.wait_for_function("(n) => window.arrivals && window.arrivals.length >= n", arg=count,
                                   timeout=120_000)
            arrivals: list[float] = page.evaluate("() => window.arrivals")
        finally:
            browser.close()
    return arrivals


WRITING_OPENINGS = 3  # the comparison while jobs write: the median of this many openings
POINTS_REQUEST = f"points of {COMPARED} jobs, one request"


def _points_request(server: Served) -> tuple[float, int]:
    """The median of WRITING_OPENINGS fetches of the comparison's points, as its page asks for them
    (a bucket per 3 pixels of a 1,104-pixel chart, no records, times as deltas): seconds, bytes sent."""
    import httpx

    params = {"jobs": ",".join(f"big-{n}" for n in range(COMPARED)), "width": 368, "records": 0, "times": "delta"}
    times = []
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=120) as client:
        for _ in range(WRITING_OPENINGS):
            started = time.perf_counter()
            answer = client.get("/api/metrics/loss/points", params=params)
            answer.raise_for_status()
            times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2], answer.num_bytes_downloaded


def measure(work: Path, points: int, writing: Callable[[Served], AbstractContextManager[object]] | None = None,
            while_writing: str = "") -> dict[str, tuple[float, int, float]]:
    """Per page: (seconds to a painted chart, bytes fetched, seconds for the page without a chart).
    With ``writing`` (jobs that write while it is held), the comparison again while they write:
    the median of WRITING_OPENINGS openings, labelled with ``while_writing``."""
    from playwright.sync_api import sync_playwright

    home = work / "console-home"
    _jobs(home, points)
    results: dict[str, tuple[float, int, float]] = {}
    rows = []
    with running_server(home) as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            def fresh() -> object:
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                server.sign_in(context)
                return context.new_page()

            # a server that has served a page of points before (one of the compared jobs: its
            # second read is no warmer than the others' first); each page has a fresh browser
            # context, so its bytes include the console's own files
            _open(fresh(), f"{server.url}/jobs/big-{COMPARED - 1}", CHART_READY, "section.chart[data-metric=loss]")
            _open(fresh(), f"{server.url}/jobs/empty", PAGE_READY)
            baseline, base_bytes, _ = _open(fresh(), f"{server.url}/jobs/empty", PAGE_READY)
            rows.append(["job page, no points (baseline)", f"{baseline * 1e3:.0f}", f"{base_bytes:,}", "-"])
            for label, path in (("job page, 1 metric", "/jobs/big-0"),
                                (f"compare {COMPARED} jobs", "/compare?jobs=" + ",".join(
                                    f"big-{n}" for n in range(COMPARED)))):
                page = fresh()
                painted, fetched, data = _open(page, server.url + path, CHART_READY, "section.chart[data-metric=loss]")
                shown = page.evaluate("() => +document.querySelector('section.chart[data-metric=loss]').dataset.points")  # type: ignore[attr-defined]
                rows.append([f"{label}, {points:,} points each", f"{painted * 1e3:.0f}", f"{fetched:,}", f"{data:,}"])
                results[label] = (painted, fetched, baseline)
                if not shown:
                    raise AssertionError(f"{label}: the chart shows no points")
            if writing is not None:
                label = f"compare {COMPARED} jobs {while_writing}"
                path = "/compare?jobs=" + ",".join(f"big-{n}" for n in range(COMPARED))
                quiet = _points_request(server)
                with writing(server):
                    openings = sorted(_open(fresh(), server.url + path, CHART_READY, "section.chart[data-metric=loss]")
                                      for _ in range(WRITING_OPENINGS))
                    loaded = _points_request(server)
                results[POINTS_REQUEST + " " + while_writing] = (loaded[0], loaded[1], quiet[0])
                rows.append([f"{POINTS_REQUEST} (the server's part), no job writing", f"{quiet[0] * 1e3:.0f}",
                             "-", f"{quiet[1]:,}"])
                rows.append([f"{POINTS_REQUEST} {while_writing}", f"{loaded[0] * 1e3:.0f}", "-", f"{loaded[1]:,}"])
                painted, fetched, data = openings[len(openings) // 2]
                rows.append([f"{label}, {points:,} points each (median of {WRITING_OPENINGS}: "
                             + ", ".join(f"{o[0] * 1e3:.0f}" for o in openings) + ")",
                             f"{painted * 1e3:.0f}", f"{fetched:,}", f"{data:,}"])
                results[label] = (painted, fetched, baseline)
        finally:
            browser.close()
    table(["page", "ms to painted chart", "bytes fetched (all)", "bytes of points"], rows)
    return results
