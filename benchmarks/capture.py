"""Capture overhead: does running a job under ``trainmon run`` slow the job, and is anything lost?

- paced: a job prints 100,000 lines/s (``step N loss=0.123``, one ``print`` each, PYTHONUNBUFFERED=1)
  for 3 s, paced by the clock. It reports its own elapsed time; run with stdout to /dev/null (the
  baseline) and under ``trainmon run --metric loss=loss=(\\S+)``. Target: elapsed ratio about 1.0.
  The store must then hold every line as a record and every line's point, with its value.
- flood: a job writes N MB of such lines as fast as it can. Throughput as the job sees it with
  stdout to /dev/null, to a plain pipe drained by this process, and under ``trainmon run``; and
  trainmon's end-to-end rate (until the command returns with everything stored).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import Report, child_env, heading, mb_per_s, rate, scratch_dir, table

JOBS = Path(__file__).resolve().parent / "jobs.py"
PACED_RATE = 100_000
PACED_SECONDS = 3.0
FLOOD_MB = 40.0
METRIC = r"loss=loss=(\S+)"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _job_command(kind: str, report: Path, *args: str) -> list[str]:
    return [sys.executable, str(JOBS), kind, "--report", str(report), *args]


def run_direct(kind: str, work: Path, *args: str) -> dict[str, Any]:
    """The job alone, its stdout to /dev/null."""
    report = work / f"direct-{kind}.json"
    subprocess.run(_job_command(kind, report, *args), stdout=subprocess.DEVNULL, env=child_env(), check=True)
    return json.loads(report.read_text())


def run_pipe(kind: str, work: Path, *args: str) -> dict[str, Any]:
    """The job writing into a plain pipe that this process drains as fast as it can."""
    report = work / f"pipe-{kind}.json"
    process = subprocess.Popen(_job_command(kind, report, *args), stdout=subprocess.PIPE, env=child_env())
    assert process.stdout is not None
    fd = process.stdout.fileno()
    received = 0
    while True:
        data = os.read(fd, 1 << 20)
        if not data:
            break
        received += len(data)
    process.stdout.close()
    if process.wait() != 0:
        raise RuntimeError(f"job {kind} exited {process.returncode}")
    result = json.loads(report.read_text())
    result["received"] = received
    return result


def run_trainmon(kind: str, work: Path, name: str, *args: str) -> dict[str, Any]:
    """The job under ``trainmon run``, stdout to /dev/null; adds trainmon's wall and CPU time."""
    report = work / f"trainmon-{kind}.json"
    home = work / "home"
    command = [sys.executable, "-m", "trainmon", "run", "--name", name, "--metric", METRIC, "--",
               *_job_command(kind, report, *args)]
    cpu_before = _children_cpu()
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          env=child_env(TRAINMON_HOME=str(home)))
    wall = time.perf_counter() - start
    cpu = _children_cpu() - cpu_before
    if done.returncode != 0:
        raise RuntimeError(f"trainmon run exited {done.returncode}: {done.stderr.decode(errors='replace')}")
    result = json.loads(report.read_text())
    result.update(wall_s=wall, children_cpu_s=cpu, home=str(home))
    return result


def verify(report: Report, home: Path, name: str, lines: int, size: int | None, step_of: Callable[[int], int]) -> None:
    """Every line a record, every line's point stored, with the value the job printed."""
    from trainmon.store import open_store

    from .jobs import loss_of

    store = open_store(home)
    try:
        job = store.get_job(name)
        if not report.check(job is not None, f"job {name} is in the store"):
            return
        assert job is not None
        report.check(job.status == "Completed", f"job status is Completed ({job.status})")
        streams = store.streams(job.id)
        records = sum(s.records for s in streams)
        report.check(records == lines, f"every line stored as a record ({records:,} of {lines:,})")
        if size is not None:
            stored = sum(s.stored_bytes for s in streams)
            report.check(stored == size, f"every byte accounted for ({stored:,} of {size:,})")
        points = store.points(job.id)
        report.check(len(points) == lines, f"every point extracted ({len(points):,} of {lines:,})")
        seqs = sorted(p.seq for p in points)
        report.check(seqs == list(range(lines)), "one point per record, none missing or doubled")
        wrong = sum(1 for p in points if p.value != loss_of(step_of(p.seq)))
        report.check(wrong == 0, f"every value as printed ({wrong:,} differ)")
    finally:
        store.close()


def fixed_overhead(work: Path) -> float:
    """Wall time of ``trainmon run`` around a job that does nothing: start-up, set-up, describe."""
    home = work / "home-empty"
    best = float("inf")
    for attempt in range(2):
        command = [sys.executable, "-m", "trainmon", "run", "--name", f"empty-{attempt}", "--", sys.executable,
                   "-c", "pass"]
        start = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=child_env(TRAINMON_HOME=str(home)), check=True)
        best = min(best, time.perf_counter() - start)
    return best


def paced(report: Report, work: Path, scale: float) -> None:
    seconds = PACED_SECONDS * max(scale, 0.2)
    args = ("--rate", str(PACED_RATE), "--seconds", str(seconds))
    heading(f"Capture overhead: a job printing {PACED_RATE:,} lines/s for {seconds:g} s (one print per line)")
    fixed = fixed_overhead(work)
    direct = run_direct("paced", work, *args)
    under = run_trainmon("paced", work, "paced", *args)
    lines = int(under["lines"])
    trainmon_cpu = under["children_cpu_s"] - under["cpu_s"]
    table(
        ["run", "job elapsed s", "job worst lag ms", "job CPU s", "wall s", "trainmon CPU s"],
        [
            ["job alone, stdout > /dev/null", f"{direct['elapsed_s']:.3f}", f"{direct['worst_lag_s'] * 1e3:.1f}",
             f"{direct['cpu_s']:.2f}", "-", "-"],
            ["under trainmon run", f"{under['elapsed_s']:.3f}", f"{under['worst_lag_s'] * 1e3:.1f}",
             f"{under['cpu_s']:.2f}", f"{under['wall_s']:.2f}", f"{trainmon_cpu:.2f}"],
            ["trainmon run of an empty job", "-", "-", "-", f"{fixed:.2f}", "-"],
        ],
    )
    busy = max(1e-9, under["wall_s"] - fixed)
    backlog = max(0.0, busy - under["elapsed_s"])
    print(f"  all stored {backlog:.2f} s after the job's last line (wall - empty-job wall - job elapsed); "
          f"{rate(lines, busy)} lines/s stored; trainmon CPU {trainmon_cpu / lines * 1e6:.1f} us per line")
    print("  (worst lag: how far the job ever fell behind its schedule, e.g. blocked on a full pipe or descheduled)")
    ratio = under["elapsed_s"] / direct["elapsed_s"]
    report.ratio("job runtime under trainmon / alone", ratio, "about 1.0 (<= 1.05)", ratio <= 1.05)
    keep_up = (lines / busy) / PACED_RATE
    report.ratio(f"stored lines/s / the job's {PACED_RATE:,} lines/s", keep_up,
                 detail="(below 1: trainmon stores more slowly than the job prints; the backlog waits in the spool)")
    verify(report, Path(under["home"]), "paced", lines, None, lambda seq: seq)


def flood(report: Report, work: Path, scale: float, megabytes: float) -> None:
    megabytes = megabytes * scale
    args = ("--megabytes", str(megabytes))
    heading(f"Capture throughput: a job writing {megabytes:g} MB of lines as fast as it can")
    direct = run_direct("flood", work, *args)
    pipe = run_pipe("flood", work, *args)
    under = run_trainmon("flood", work, "flood", *args)
    size, lines = int(under["bytes"]), int(under["lines"])
    trainmon_cpu = under["children_cpu_s"] - under["cpu_s"]
    table(
        ["run", "job elapsed s", "job MB/s", "wall s", "end-to-end MB/s", "lines/s"],
        [
            ["job alone, stdout > /dev/null", f"{direct['elapsed_s']:.4f}", mb_per_s(size, direct["elapsed_s"]),
             "-", "-", rate(lines, direct["elapsed_s"])],
            ["plain pipe, drained by a reader", f"{pipe['elapsed_s']:.4f}", mb_per_s(size, pipe["elapsed_s"]),
             "-", "-", rate(lines, pipe["elapsed_s"])],
            ["under trainmon run", f"{under['elapsed_s']:.4f}", mb_per_s(size, under["elapsed_s"]),
             f"{under['wall_s']:.2f}", mb_per_s(size, under["wall_s"]), rate(lines, under["wall_s"])],
        ],
    )
    print(f"  {lines:,} lines of {size / lines:.0f} bytes; trainmon CPU {trainmon_cpu:.2f} s "
          f"({trainmon_cpu / lines * 1e6:.1f} us per line, {trainmon_cpu / (size / 1e6):.2f} s per MB)")
    report.check(pipe["received"] == size, f"the plain pipe delivered every byte ({pipe['received']:,})")
    report.ratio("job write throughput: under trainmon / to /dev/null", direct["elapsed_s"] / under["elapsed_s"])
    report.ratio("job write throughput: under trainmon / to a plain pipe", pipe["elapsed_s"] / under["elapsed_s"])
    report.ratio("end-to-end capture throughput (all stored) / job to /dev/null", direct["elapsed_s"] / under["wall_s"])
    report.ratio("end-to-end capture throughput (all stored) / job to a plain pipe",
                 pipe["elapsed_s"] / under["wall_s"])
    verify(report, Path(under["home"]), "flood", lines, size, lambda seq: seq % 1000)


def run(scale: float = 1.0, flood_mb: float = FLOOD_MB) -> Report:
    report = Report("capture")
    with scratch_dir("capture-") as work:
        paced(report, work, scale)
    with scratch_dir("capture-") as work:
        flood(report, work, scale, flood_mb)
    return report


if __name__ == "__main__":
    sys.exit(1 if run().failures else 0)
