"""The console as a workbench, in headless Chromium: the runs page over 10,000 jobs, scrolling its
rows, and Compare of 20 jobs with 10 metrics each.

1. The runs page. A store of 10,000 jobs (hyperparameters, a tag, a final metric: the search
   benchmark's), served by ``trainmon server``; from navigating to ``/`` until its first page of
   rows is in the table and painted (the next animation frame), median of five fresh browser
   contexts, against the same page over a store of 100 jobs (the baseline, in the same run).
   Target: under 1 s.
2. Scrolling. The page scrolled to its end until 2,000 rows are loaded (a page at a time, as a user
   scrolling gets them; the table's ``data-rows``, since it draws only the rows near the view),
   then scrolled through them for 3 s, a step of 40 px per animation frame: the frames a second,
   against the same scroll over 100 rows (the browser's own pace on this machine), and the rows
   the table had drawn at the end. Target: 60 frames a second, and at least 0.9x the baseline.
3. Compare. 20 jobs, each with 10 metrics of 2,000 points: from navigating to
   ``/compare?jobs=...`` until the main chart and every small chart are painted, and the bytes
   fetched, against Compare of 2 jobs with 1 metric each (the baseline). Targets: under 1.5 s and
   under 500 KB.

Checks: every row and every job's series arrive.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

from .common import Report, heading, running_server, scratch_dir, table

JOBS = 10_000
BASELINE_JOBS = 100
SCROLLED_ROWS = 2_000
COMPARED, METRICS, POINTS = 20, 10, 2_000
FIRST_PAINT_TARGET_S = 1.0
COMPARE_TARGET_S = 1.5
COMPARE_TARGET_BYTES = 500_000
# the rows the table holds: drawn or not (it draws those near the view), or, before it drew only
# those, the rows in the page
ROWS = """() => Math.max(Number(document.querySelector("table.jobs")?.dataset.rows || 0),
                 document.querySelectorAll("tr[data-job]").length)"""
ROWS_PAINTED = """(n) => new Promise((done) => {
  const rows = (""" + ROWS + """)();
  if (rows < n || !document.querySelector("tr[data-job]")) return done(false);
  requestAnimationFrame(() => requestAnimationFrame(() => done(true)));
})"""
SCROLL = """(seconds) => new Promise((done) => {
  const box = document.scrollingElement;
  const frames = [];
  const start = performance.now();
  box.scrollTop = 0;
  const step = (now) => {
    frames.push(now);
    box.scrollTop += 40;
    if (box.scrollTop + innerHeight >= box.scrollHeight) box.scrollTop = 0;
    if (now - start < seconds * 1000) requestAnimationFrame(step);
    else done(frames);
  };
  requestAnimationFrame(step);
})"""
CHARTS_READY = """(count) => {
  const charts = [...document.querySelectorAll("section.chart")];
  return charts.length >= count && charts.every((c) => c.dataset.loading === "0" && +c.dataset.points > 0
                                                   && c.querySelector("canvas"));
}"""
FETCHED = """() => performance.getEntriesByType("navigation").concat(performance.getEntriesByType("resource"))
  .reduce((sum, e) => sum + e.transferSize, 0)"""


def _compared(home: Path, jobs: int, metrics: int, points: int) -> list[str]:
    """Jobs with ``metrics`` metrics of ``points`` points each, written straight into the store."""
    import numpy as np

    from trainmon.api.sagemaker import register_job
    from trainmon.runtime.job.jobstate import set_status
    from trainmon.store import Batch, open_store

    store = open_store(home)
    names = [f"cmp-{n:02d}" for n in range(jobs)]
    try:
        rng = np.random.default_rng(3)
        start = int(time.time() * 1000) - points * 1000
        for n, name in enumerate(names):
            job = register_job(store, {"TrainingJobName": name, "ProfilerConfig": {"DisableProfiler": True},
                                       "HyperParameters": {"lr": str(10 ** -(1 + n % 4)), "batch": str(2 ** (4 + n % 3))},
                                       "AlgorithmSpecification": {"TrainingInputMode": "File",
                                                                  "ContainerEntrypoint": ["true"]}})
            set_status(store, name, "Completed")
            stream = store.add_stream(job.id, "algo-1", f"{name}/algo-1-1", start)
            points_of = []
            for m in range(metrics):
                values = np.exp(-np.arange(points) / (points / (2 + m))) + rng.normal(0, 0.02, points)
                points_of += [(f"metric-{m}", start + i * 1000, float(values[i]), "algo-1", stream.id, m * points + i)
                              for i in range(points)]
            store.write_batch(Batch(job.id, points=points_of))
        store.maintain()
    finally:
        store.close()
    return names


def _context(browser: Any, served: Any) -> Any:
    """A fresh browser context signed in to ``served`` (nothing cached: each page loads as a first visit)."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    served.sign_in(context)
    return context


def _opened(browser: Any, served: Any, path: str, ready: str, argument: Any) -> tuple[float, int]:
    """Seconds from navigating to ``path`` until ``ready`` holds, and the bytes the page fetched."""
    context = _context(browser, served)
    try:
        page = context.new_page()
        started = time.perf_counter()
        page.goto(served.url + path, wait_until="commit")
        page.wait_for_function(ready, arg=argument, polling="raf", timeout=120_000)
        return time.perf_counter() - started, page.evaluate(FETCHED)
    finally:
        context.close()


def _scroll_fps(browser: Any, served: Any, rows: int) -> tuple[float, float, int, int]:
    """Frames a second and the 95th percentile of frame times (ms) over a 3 s scroll once ``rows``
    rows are loaded; the rows loaded, and those drawn (in the page) at the end."""
    url = served.url + "/"
    context = _context(browser, served)
    try:
        page = context.new_page()
        page.goto(url)
        page.wait_for_function(ROWS_PAINTED, arg=min(rows, 100), polling="raf", timeout=120_000)
        loaded = 0
        for _ in range(rows // 50 + 10):
            loaded = page.evaluate(ROWS)
            if loaded >= rows:
                break
            page.evaluate("() => window.scrollTo(0, document.body.scrollHeight)")
            page.wait_for_function(f"(n) => ({ROWS})() > n", arg=loaded, timeout=60_000)
        frames: list[float] = page.evaluate(SCROLL, 3)
        drawn: int = page.evaluate("() => document.querySelectorAll('tr[data-job]').length")
        gaps = sorted(b - a for a, b in zip(frames, frames[1:], strict=False))
        return (len(frames) - 1) / ((frames[-1] - frames[0]) / 1000), gaps[int(0.95 * (len(gaps) - 1))], loaded, drawn
    finally:
        context.close()


def run(scale: float) -> Report:
    report = Report("workbench")
    if shutil.which("chromium") is None:
        report.failures.append("Debian's chromium is needed (apt-get install chromium)")
        return report
    from playwright.sync_api import sync_playwright

    from .search import _filled

    total = max(1_000, int(JOBS * scale))
    heading(f"Workbench: the runs page over {total:,} jobs, scrolling, Compare of {COMPARED} jobs x {METRICS} metrics")
    with scratch_dir("workbench-") as work, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            _filled(work / "many", total).close()
            _filled(work / "few", BASELINE_JOBS).close()
            with running_server(work / "many") as many, running_server(work / "few") as few:
                paint_many = median(_opened(browser, many, "/", ROWS_PAINTED, 100)[0] for _ in range(5))
                paint_few = median(_opened(browser, few, "/", ROWS_PAINTED, 100)[0] for _ in range(5))
                fps, p95, loaded, drawn = _scroll_fps(browser, many, SCROLLED_ROWS)
                fps_few, p95_few, _, drawn_few = _scroll_fps(browser, few, BASELINE_JOBS)
            report.check(loaded >= SCROLLED_ROWS, f"{SCROLLED_ROWS:,} rows loaded by scrolling ({loaded:,})")
            names = _compared(work / "compared", COMPARED, METRICS, POINTS)
            with running_server(work / "compared") as served:
                def compare(jobs: list[str]) -> tuple[float, int]:
                    return _opened(browser, served, f"/compare?jobs={','.join(jobs)}", CHARTS_READY, 1 + METRICS)

                compare(names[:2])  # (a first read of the store)
                compare_s, compare_bytes = compare(names)
                base_s, base_bytes = compare(names[2:4])
        finally:
            browser.close()
    table(["figure", "measured", "baseline"], [
        [f"runs page, first rows painted ({total:,} jobs / {BASELINE_JOBS})", f"{paint_many * 1e3:.0f} ms",
         f"{paint_few * 1e3:.0f} ms"],
        [f"scrolling {loaded:,} rows / {BASELINE_JOBS}", f"{fps:.0f} fps (p95 {p95:.1f} ms, {drawn} drawn)",
         f"{fps_few:.0f} fps (p95 {p95_few:.1f} ms, {drawn_few} drawn)"],
        [f"compare {COMPARED} jobs x {METRICS} metrics / 2 jobs", f"{compare_s * 1e3:.0f} ms, {compare_bytes / 1e3:.0f} kB",
         f"{base_s * 1e3:.0f} ms, {base_bytes / 1e3:.0f} kB"],
    ])
    report.ratio(f"runs page first paint, {total:,} jobs / {BASELINE_JOBS}", paint_many / paint_few,
                 detail=f"({paint_many * 1e3:.0f} ms / {paint_few * 1e3:.0f} ms)")
    report.absolute("runs page first paint", f"{paint_many * 1e3:.0f} ms", f"< {FIRST_PAINT_TARGET_S * 1e3:.0f} ms",
                    paint_many < FIRST_PAINT_TARGET_S)
    report.ratio(f"scrolling {loaded:,} rows, frames a second / over {BASELINE_JOBS} rows", fps / fps_few,
                 ">= 0.9x", fps / fps_few >= 0.9, detail=f"({fps:.0f} / {fps_few:.0f} fps)")
    report.ratio(f"compare {COMPARED} jobs x {METRICS} metrics / 2 jobs, time to paint", compare_s / base_s,
                 detail=f"({compare_s * 1e3:.0f} ms / {base_s * 1e3:.0f} ms)")
    report.absolute("compare 20 x 10, painted", f"{compare_s * 1e3:.0f} ms", f"< {COMPARE_TARGET_S * 1e3:.0f} ms",
                    compare_s < COMPARE_TARGET_S)
    report.absolute("compare 20 x 10, bytes", f"{compare_bytes / 1e3:.0f} kB", f"< {COMPARE_TARGET_BYTES / 1e3:.0f} kB",
                    compare_bytes < COMPARE_TARGET_BYTES)
    return report


if __name__ == "__main__":
    sys.exit(1 if run(1.0).failures else 0)
