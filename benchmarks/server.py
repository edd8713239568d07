"""The server: how soon a printed point reaches a live stream, and how many requests it answers
while jobs write.

- live: a job served by ``trainmon server`` prints 100 lines ``t=<time.time()> value=<i>``, 50 ms
  apart; a client follows ``/api/jobs/<job>/events`` (what an open chart listens to) and notes when
  each point arrives; then the same in a job page open in headless Chromium, noting when each
  point joins its chart. Baseline: the same job's lines read from a plain pipe. Target: p99 under 1 s.
- load: while 10 jobs each print 200 metric lines a second, 4 client threads on loopback ask for a
  job's description (``GET /api/jobs/<job>``) and a metric's statistics per minute, 4 s each, in
  turns of 1 s (the jobs' data grows as they write, and each kind meets every stage of it).
  Baseline: the same clients fetching a static file of the console from the same server, in the
  same turns. Printed: requests/s and p99 of each, and the ratio to the baseline. Target: at least
  0.8x.
- console (when Debian's chromium and the console's files are there): a job page whose metric has
  1,000,000 points, opened in headless Chromium: the time until its chart is painted and the bytes
  the page fetched; the same for a comparison of 10 such jobs, and for that comparison again
  while 10 jobs write as in the load part (the median of 3 openings), and the server's part of it
  alone: the one request for the 10 jobs' points, with no job writing and while they write (the
  median of 3 each). Targets: under 1 s and under 200 KB. Baseline: the time to load the page
  with no chart (a job without points); for the comparison while jobs write, also the same with
  no job writing.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .common import Report, Served, heading, median, percentile, running_server, scratch_dir, table
from .latency import JOBS, through_pipe

LIVE_POINTS = 100
LIVE_INTERVAL_MS = 50.0
LOAD_JOBS = 10
LOAD_THREADS = 4
LOAD_SECONDS = 4.0
LOAD_TURNS = 4  # each kind's LOAD_SECONDS in this many turns, the kinds taking turns
TARGET_LOAD_RATIO = 0.8
CHART_POINTS = 1_000_000
TARGET_LIVE_P99_S = 1.0
TARGET_PAINT_S = 1.0
TARGET_BYTES = 200_000
TIMEOUT_S = 180.0


def _create(client: Any, name: str, command: list[str], definitions: list[dict[str, str]]) -> None:
    answer = client.post("/api/jobs", json={
        "TrainingJobName": name, "ProfilerConfig": {"DisableProfiler": True},
        "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": command,
                                   "MetricDefinitions": definitions}})
    answer.raise_for_status()


def live(server: Served, work: Path, count: int) -> list[float]:
    """Seconds from print to arrival in the job's event stream, for each point."""
    import httpx

    command = [sys.executable, str(JOBS), "stamped", "--report", str(work / "live.json"), "--count", str(count),
               "--interval-ms", str(LIVE_INTERVAL_MS), "--delay-s", "1.0"]
    latencies: dict[int, float] = {}
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=TIMEOUT_S) as client:
        _create(client, "live", command, [{"Name": "sent", "Regex": r"t=([0-9.]+)"}])
        with client.stream("GET", "/api/jobs/live/events?since=0&logs=0") as response:
            event = ""
            for line in response.iter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event == "points":
                    now = time.time()
                    points = json.loads(line[6:]).get("sent", {})
                    for record, value in zip(points["Record"], points["Values"], strict=True):
                        latencies.setdefault(record, now - value)
                elif event == "end" or len(latencies) >= count:
                    break
    return list(latencies.values())


@contextlib.contextmanager
def writing(server: Served, work: Path, prefix: str = "load") -> Iterator[list[str]]:
    """LOAD_JOBS jobs ``<prefix>-<n>`` each printing 200 metric lines a second (two metrics a line),
    all of them writing before this yields their names; stopped when it ends."""
    import httpx

    names = [f"{prefix}-{n}" for n in range(LOAD_JOBS)]
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=TIMEOUT_S) as client:
        for name in names:
            command = [sys.executable, str(JOBS), "paced", "--report", str(work / f"{name}.json"), "--rate", "200",
                       "--seconds", "120"]
            _create(client, name, command, [{"Name": "loss", "Regex": r"loss=(\S+)"},
                                            {"Name": "step", "Regex": r"step (\d+)"}])
        deadline = time.monotonic() + TIMEOUT_S  # every job writing before the clock starts
        while time.monotonic() < deadline and sum(
                bool(j["FinalMetrics"]) for j in client.get("/api/jobs", params={"limit": 100}).json()[
                    "TrainingJobSummaries"] if j["TrainingJobName"] in names) < LOAD_JOBS:
            time.sleep(0.2)
        try:
            yield names
        finally:
            for name in names:
                client.post(f"/api/jobs/{name}/stop")


def load(server: Served, work: Path) -> dict[str, tuple[float, float, int]]:
    """Per request kind: (requests/s, p99 seconds, failed requests) under LOAD_THREADS clients, the
    kinds asked for in turns."""
    paths = {
        "static file (baseline)": "/static/uplot/uPlot.min.css",
        "describe": "/api/jobs/load-3",
        "statistics": "/api/jobs/load-3/metrics/loss/statistics?period=60&stat=p99",
    }
    answers: dict[str, list[tuple[float, bool]]] = {label: [] for label in paths}
    spent = dict.fromkeys(paths, 0.0)
    with writing(server, work):
        for _ in range(LOAD_TURNS):
            for label, path in paths.items():
                spent[label] += _hammer(server, path, LOAD_SECONDS / LOAD_TURNS, answers[label])
    return {label: (len(answered) / spent[label], percentile([took for took, _ in answered], 0.99),
                    sum(not ok for _, ok in answered)) for label, answered in answers.items()}


def _hammer(server: Served, path: str, seconds: float, answers: list[tuple[float, bool]]) -> float:
    """LOAD_THREADS clients asking for ``path`` for ``seconds``, each answer's time and whether it
    was a 200 added to ``answers``; the seconds it took."""
    import httpx

    def client_loop() -> None:
        with httpx.Client(base_url=server.url, headers=server.headers, timeout=TIMEOUT_S) as client:
            stop = time.monotonic() + seconds
            while time.monotonic() < stop:
                started = time.perf_counter()
                ok = client.get(path).status_code == 200
                answers.append((time.perf_counter() - started, ok))

    threads = [threading.Thread(target=client_loop) for _ in range(LOAD_THREADS)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - began


def run(scale: float = 1.0) -> Report:
    report = Report("server")
    count = max(20, int(LIVE_POINTS * scale))
    heading(f"Server: live points ({count} lines {LIVE_INTERVAL_MS:g} ms apart) and requests while "
            f"{LOAD_JOBS} jobs write")
    with scratch_dir("server-") as work:
        console_figures = console(work, scale)  # first, on a machine no job is busy on
        pipe = through_pipe(work, count)
        home = work / "home"
        with running_server(home) as server:
            arrived = live(server, work, count)
            in_chart = chart_latency(server, work, count)
            served = load(server, work)  # last: its jobs are still stopping when it ends
    report.check(len(arrived) == count, f"every point reached the event stream ({len(arrived)} of {count})")
    if arrived:
        table(["path", "median ms", "p99 ms"],
              [["plain pipe", f"{median(pipe) * 1e3:.2f}", f"{percentile(pipe, 0.99) * 1e3:.2f}"],
               ["server event stream", f"{median(arrived) * 1e3:.1f}", f"{percentile(arrived, 0.99) * 1e3:.1f}"]])
        p99 = percentile(arrived, 0.99)
        report.ratio("live p99: event stream / plain pipe", p99 / percentile(pipe, 0.99))
        report.absolute("a printed point reaches an open chart's stream, p99", f"{p99 * 1e3:.0f} ms",
                        f"< {TARGET_LIVE_P99_S * 1e3:.0f} ms", p99 < TARGET_LIVE_P99_S,
                        detail=f"(median {median(arrived) * 1e3:.0f} ms)")
    if in_chart is not None:
        report.check(len(in_chart) >= count, f"every point reached the open chart ({len(in_chart)} of {count})")
        p99 = percentile(in_chart, 0.99)
        report.absolute("a printed point appears in an open chart in Chromium, p99", f"{p99 * 1e3:.0f} ms",
                        f"< {TARGET_LIVE_P99_S * 1e3:.0f} ms", p99 < TARGET_LIVE_P99_S,
                        detail=f"(median {median(in_chart) * 1e3:.0f} ms; ratio to the plain pipe's p99 "
                               f"{p99 / percentile(pipe, 0.99):.0f}x)")
    table(["request", "requests/s", "p99 ms", "failed"],
          [[label, f"{rps:,.0f}", f"{p99 * 1e3:.1f}", failed] for label, (rps, p99, failed) in served.items()])
    report.check(all(failed == 0 for _, _, failed in served.values()), "every request answered 200")
    base_rps, base_p99, _ = served["static file (baseline)"]
    for label in ("describe", "statistics"):
        rps, p99, _ = served[label]
        report.ratio(f"{label} requests/s while {LOAD_JOBS} jobs write / static file", rps / base_rps,
                     f">= {TARGET_LOAD_RATIO:g}x", rps / base_rps >= TARGET_LOAD_RATIO,
                     f"({rps:,.0f}/s, p99 {p99 * 1e3:.1f} ms; static {base_rps:,.0f}/s, p99 {base_p99 * 1e3:.1f} ms)")
    if console_figures is None:
        print("  console: skipped (needs Debian's chromium, Playwright and the console's files)")
    else:
        quiet = next((figures[0] for label, figures in console_figures.items() if label.startswith("compare")
                      and "write" not in label), None)
        for label, (painted_s, fetched, baseline_s) in console_figures.items():
            if label.startswith("points of"):  # the compare's request alone: seconds, bytes, with no job writing
                report.ratio(f"{label}: time / the same with no job writing", painted_s / baseline_s,
                             detail=f"({painted_s * 1e3:.0f} ms / {baseline_s * 1e3:.0f} ms, {fetched:,} B)")
                report.absolute(f"{label}: time", f"{painted_s * 1e3:.0f} ms", f"< {TARGET_PAINT_S * 1e3:.0f} ms",
                                painted_s < TARGET_PAINT_S)
                continue
            report.ratio(f"{label}: time to a painted chart / page without a chart", painted_s / baseline_s,
                         detail=f"({painted_s * 1e3:.0f} ms / {baseline_s * 1e3:.0f} ms)")
            if "write" in label and quiet is not None:
                report.ratio(f"{label}: time to a painted chart / the same with no job writing", painted_s / quiet,
                             detail=f"({painted_s * 1e3:.0f} ms / {quiet * 1e3:.0f} ms)")
            report.absolute(f"{label}: time to a painted chart", f"{painted_s * 1e3:.0f} ms",
                            f"< {TARGET_PAINT_S * 1e3:.0f} ms", painted_s < TARGET_PAINT_S)
            report.absolute(f"{label}: bytes fetched for it", f"{fetched:,} B", f"< {TARGET_BYTES:,} B",
                            fetched < TARGET_BYTES)
    return report


def chart_latency(server: Served, work: Path, count: int) -> list[float] | None:
    if shutil.which("chromium") is None:
        return None
    try:
        from .console_pages import live_in_chart

        return live_in_chart(server, work, count, LIVE_INTERVAL_MS)
    except ImportError:
        return None


def console(work: Path, scale: float) -> dict[str, tuple[float, int, float]] | None:
    """Per page: (seconds to a painted chart, bytes fetched by the page, seconds for the baseline
    page), or None when the browser or the console is missing."""
    if shutil.which("chromium") is None:
        return None
    try:
        from .console_pages import measure

        return measure(work, max(10_000, int(CHART_POINTS * scale)),
                       lambda server: writing(server, work, "writer"), f"while {LOAD_JOBS} jobs write")
    except ImportError:
        return None


if __name__ == "__main__":
    sys.exit(1 if run().failures else 0)
