"""Latency: from a line printed by the job to its point being readable by another process.

The job prints 1,000 lines ``t=<time.time()> value=<i>``, 5 ms apart, flushing each. Under
``trainmon run --metric sent=t=([0-9.]+)`` each point's value is the time its line was printed;
this process, with its own store connection (``trainmon.store.open_store``), polls the points
every 2 ms and notes when it first sees each one. Latency = first seen - printed.

Baseline: the same job writing into a plain pipe that this process reads line by line, as a
program reading the job's stdout directly would. Printed: median and p99 of both, and their
ratio. Target: p99 under 250 ms.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from .common import Report, child_env, heading, median, percentile, scratch_dir, table

JOBS = Path(__file__).resolve().parent / "jobs.py"
COUNT = 1000
INTERVAL_MS = 5.0
POLL_S = 0.002
TARGET_P99_MS = 250.0
TIMEOUT_S = 120.0


def _job(report: Path, count: int, delay_s: float) -> list[str]:
    return [sys.executable, str(JOBS), "stamped", "--report", str(report), "--count", str(count),
            "--interval-ms", str(INTERVAL_MS), "--delay-s", str(delay_s)]


def through_pipe(work: Path, count: int) -> list[float]:
    """Seconds from print to this process reading the line, for each line."""
    process = subprocess.Popen(_job(work / "pipe.json", count, 0.2), stdout=subprocess.PIPE, env=child_env())
    assert process.stdout is not None
    latencies = []
    for line in process.stdout:
        seen = time.time()
        printed = float(line.split(b" ", 1)[0][2:])
        latencies.append(seen - printed)
    process.wait()
    return latencies


def through_trainmon(work: Path, count: int) -> tuple[list[float], list[float], int]:
    """Seconds from print to the point being readable in the store, for each point; also the
    part of it until trainmon read the line (the point's own timestamp) and the job's exit code."""
    from trainmon.store import open_store

    home = work / "home"
    home.mkdir()
    command = [sys.executable, "-m", "trainmon", "run", "--name", "latency", "--metric", "sent=t=([0-9.]+)",
               "--", *_job(work / "trainmon.json", count, 1.0)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=child_env(TRAINMON_HOME=str(home)))
    store = open_store(home)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        job = None
        while job is None and time.monotonic() < deadline:
            job = store.get_job("latency")
            if job is None:
                time.sleep(POLL_S)
        assert job is not None, "trainmon run never created its job"
        seen: dict[int, float] = {}
        read_at: dict[int, float] = {}
        after_ms = 0
        finished = False
        while len(seen) < count and time.monotonic() < deadline:
            points = store.points(job.id, names=["sent"], start_ms=after_ms)
            now = time.time()
            for point in points:
                if point.seq not in seen:
                    seen[point.seq] = now - point.value
                    # The point's timestamp is when trainmon read the line, in whole ms (floored): compare
                    # it with the print time floored the same way.
                    read_at[point.seq] = (point.timestamp_ms - int(point.value * 1000)) / 1000
                after_ms = max(after_ms, point.timestamp_ms)
            if finished:
                break
            finished = process.poll() is not None  # one more pass after the job ended
            time.sleep(POLL_S)
    finally:
        store.close()
        if process.poll() is None:
            process.wait(TIMEOUT_S)
    return list(seen.values()), list(read_at.values()), process.returncode


def run(scale: float = 1.0) -> Report:
    report = Report("latency")
    count = max(100, int(COUNT * scale))
    heading(f"Latency: {count:,} lines {INTERVAL_MS:g} ms apart, print -> readable by another process")
    with scratch_dir("latency-") as work:
        pipe = through_pipe(work, count)
        stored, read, code = through_trainmon(work, count)
    report.check(len(pipe) == count, f"plain pipe: every line read ({len(pipe):,} of {count:,})")
    report.check(code == 0, f"trainmon run exited 0 ({code})")
    if not report.check(len(stored) == count, f"trainmon: every point seen ({len(stored):,} of {count:,})"):
        if not stored:
            return report
    rows = []
    for label, values in (("plain pipe, read by this process", pipe),
                          ("trainmon: print -> read by trainmon (point timestamp, whole ms)", read),
                          ("trainmon: print -> readable in the store (polled every 2 ms)", stored)):
        rows.append([label, f"{median(values) * 1e3:.2f}", f"{percentile(values, 0.99) * 1e3:.2f}",
                     f"{max(values) * 1e3:.2f}"])
    table(["path", "median ms", "p99 ms", "max ms"], rows)
    p99 = percentile(stored, 0.99) * 1e3
    report.ratio("median latency: trainmon / plain pipe", median(stored) / median(pipe),
                 detail=f"({median(stored) * 1e3:.2f} ms / {median(pipe) * 1e3:.3f} ms)")
    report.ratio("p99 latency: trainmon / plain pipe", percentile(stored, 0.99) / percentile(pipe, 0.99),
                 detail=f"({p99:.2f} ms / {percentile(pipe, 0.99) * 1e3:.3f} ms)")
    report.absolute("p99 latency under trainmon", f"{p99:.2f} ms", f"< {TARGET_P99_MS:g} ms", p99 < TARGET_P99_MS)
    return report


if __name__ == "__main__":
    sys.exit(1 if run().failures else 0)
