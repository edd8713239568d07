"""Capture overhead: does running a job under ``trainmon run`` slow the job, and is anything lost?

- paced: a job prints 100,000 lines/s (``step N loss=0.123``, one ``print`` each, PYTHONUNBUFFERED=1)
  for 3 s, paced by the clock. It reports its own elapsed time; run with stdout to /dev/null (the
  baseline) and under ``trainmon run --metric loss=loss=(\\S+)``. Target: elapsed ratio about 1.0.
  The store must then hold every line as a record and every line's point, with its value.
- flood: a job writes realistic training output (the extraction benchmark's mixed log, over and
  over: 1 GB at scale 1) as fast as it can, under the extraction benchmark's 10 definitions. The
  job's own time into a plain pipe drained by this process (the baseline) and under ``trainmon
  run``, each the best of two; trainmon's end-to-end rate until the command returns with
  everything stored; the time from the job's exit to the command's return.
- paced flood: the same output at 100 MB/s for 10 s: does trainmon keep up (the time from the
  job's exit to the command's return), and is the job ever held back (its elapsed time and worst
  lag, against the job alone)?
- busy job: every core spinning through a fixed amount of arithmetic while the job writes the
  mixed log at 60 MB/s: the spinning's time under ``trainmon run`` against the job into a plain
  pipe drained by this process, each the best of two. Storing 60 MB/s takes trainmon about half a
  core; it must come from trainmon's own lower priority, not from the job (target: at most 1.2x).
- dense flood (informational): 100 MB of ``step N loss=...`` lines, every line a metric line.
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import extraction
from .common import Report, child_env, heading, mb_per_s, rate, ratio_text, scratch_dir, table

JOBS = Path(__file__).resolve().parent / "jobs.py"
PACED_RATE = 100_000
PACED_SECONDS = 3.0
FLOOD_MB = 1000.0
DENSE_FLOOD_MB = 100.0
PACED_MB_S, PACED_FLOOD_SECONDS = 100.0, 10.0
METRIC = r"loss=loss=(\S+)"
PIPE_TARGET, END_TO_END_TARGET, RETURN_TARGET_S, CPU_PER_GB_TARGET = 1.5, 300.0, 3.0, 4.0
BUSY_MB_S, BUSY_SPIN, BUSY_TARGET = 60.0, 40_000_000, 1.2


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


def _job_into(kind: str, work: Path, label: str, drain: Callable[[int], int], *args: str) -> dict[str, Any]:
    """The job writing into a pipe that ``drain`` empties (given its descriptor; it answers the bytes
    it took), and the job's report."""
    report = work / f"{label}-{kind}.json"
    process = subprocess.Popen(_job_command(kind, report, *args), stdout=subprocess.PIPE, env=child_env())
    assert process.stdout is not None
    received = drain(process.stdout.fileno())
    process.stdout.close()
    if process.wait() != 0:
        raise RuntimeError(f"job {kind} exited {process.returncode}")
    result = json.loads(report.read_text())
    result["received"] = received
    return result


def run_pipe(kind: str, work: Path, *args: str) -> dict[str, Any]:
    """The job writing into a plain pipe that this process drains as fast as it can."""
    def drain(fd: int) -> int:
        received = 0
        while data := os.read(fd, 1 << 20):
            received += len(data)
        return received

    return _job_into(kind, work, "pipe", drain, *args)


def run_pipe_to_file(kind: str, work: Path, *args: str) -> dict[str, Any]:
    """The job writing into a pipe that this process moves into a new file with ``splice`` (trainmon's
    spooler without its frames, notes and blocks reserved ahead): what keeping every byte the plain
    way costs the job."""
    target = work / f"file-{kind}.out"

    def drain(fd: int) -> int:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)  # as trainmon widens the job's pipes
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        received = 0
        try:
            while moved := os.splice(fd, out, 1 << 20, offset_dst=received):
                received += moved
        finally:
            os.close(out)
            target.unlink()
        return received

    return _job_into(kind, work, "file", drain, *args)


def run_trainmon(kind: str, work: Path, name: str, *args: str, definitions: tuple[str, ...] = ("--metric", METRIC),
                 home: Path | None = None) -> dict[str, Any]:
    """The job under ``trainmon run``, stdout to /dev/null; adds trainmon's wall and CPU time, and
    how long after the job's end (when the job says) the command returned."""
    report = work / f"trainmon-{kind}.json"
    home = home or work / "home"
    command = [sys.executable, "-m", "trainmon", "run", "--name", name, *definitions, "--",
               *_job_command(kind, report, *args)]
    cpu_before = _children_cpu()
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          env=child_env(TRAINMON_HOME=str(home)))
    returned_at = time.time()
    wall = time.perf_counter() - start
    cpu = _children_cpu() - cpu_before
    if done.returncode != 0:
        raise RuntimeError(f"trainmon run exited {done.returncode}: {done.stderr.decode(errors='replace')}")
    result = json.loads(report.read_text())
    result.update(wall_s=wall, children_cpu_s=cpu, home=str(home))
    if "ended_at" in result:
        result["return_after_s"] = returned_at - result["ended_at"]
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


def dense_flood(report: Report, work: Path, scale: float) -> None:
    megabytes = DENSE_FLOOD_MB * scale
    args = ("--megabytes", str(megabytes))
    heading(f"Capture throughput, every line a metric line: a job writing {megabytes:g} MB of them as fast as it can")
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


def _mixed_log() -> tuple[Path, int, int, dict[str, int]]:
    """The extraction benchmark's log: its path, records and points (per metric) of one copy."""
    from trainmon.parsing.definitions import validate_definitions
    from trainmon.parsing.extract import Extractor, scan_file_blocks
    from trainmon.parsing.framing import Mode

    path = extraction.log_path(extraction.LINES)
    extractor = Extractor(validate_definitions(extraction.DEFINITIONS), Mode.TERMINAL)
    per_metric: dict[str, int] = {}
    for block in scan_file_blocks(str(path), extractor):
        for index in block.definitions.tolist():
            name = extraction.DEFINITIONS[index]["Name"]
            per_metric[name] = per_metric.get(name, 0) + 1
    return path, extraction.ceiling(path), sum(per_metric.values()), per_metric


def _verify_replay(report: Report, home: Path, name: str, copies: int, log: tuple[Path, int, int, dict[str, int]],
                   size: int) -> None:
    """Every record, byte and point of every copy stored."""
    from trainmon.store import open_store

    _, records, points, per_metric = log
    store = open_store(home)
    try:
        job = store.get_job(name)
        if not report.check(job is not None and job.status == "Completed", f"job {name} Completed"):
            return
        assert job is not None
        streams = store.streams(job.id)
        stored = sum(s.records for s in streams)
        report.check(stored == records * copies, f"every record stored ({stored:,} of {records * copies:,})")
        stored_bytes = sum(s.stored_bytes for s in streams)
        report.check(stored_bytes == size, f"every byte accounted for ({stored_bytes:,} of {size:,})")
        counts = {n: summary[0] for n, summary in store.metric_summaries(job.id).items()}
        expected = {n: count * copies for n, count in per_metric.items()}
        report.check(counts == expected, f"every point stored ({sum(counts.values()):,} of {points * copies:,}), "
                     "per metric")
    finally:
        store.close()


def _empty_job_cpu(work: Path) -> float:
    """trainmon's own CPU seconds around a job that does nothing (start-up, set-up, describe): what a
    flood's CPU per GB is counted net of. The least of two."""
    best = float("inf")
    for attempt in range(2):
        before = _children_cpu()
        subprocess.run([sys.executable, "-m", "trainmon", "run", "--name", f"empty-cpu-{attempt}", "--metric", METRIC,
                        "--", sys.executable, "-c", "pass"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=child_env(TRAINMON_HOME=str(work / "home-empty-cpu")), check=True)
        best = min(best, _children_cpu() - before)
    return best


def _compress_once_cpu(path: Path, copies: int) -> float:
    """CPU seconds to compress the flood's bytes once, as the store packs a log chunk's text
    (``codec.pack_text``, 1 MiB pieces, one thread): the floor of what storing them costs, measured
    here."""
    from trainmon.store import codec

    data = path.read_bytes()
    pieces = [data[at:at + (1 << 20)] for at in range(0, len(data), 1 << 20)]
    start = time.process_time()
    for _ in range(copies):
        for piece in pieces:
            codec.pack_text(piece)
    return time.process_time() - start


def realistic_flood(report: Report, work: Path, scale: float, megabytes: float) -> None:
    """The flood under one definition (the figures with targets), then under the extraction
    benchmark's ten (informational: matching costs more)."""
    log = _mixed_log()
    path = log[0]
    copies = max(1, round(megabytes * scale * 1e6 / path.stat().st_size))
    size = copies * path.stat().st_size
    one = work / "one-definition.json"
    one.write_text(json.dumps(extraction.DEFINITIONS[:1]), encoding="utf-8")
    ten = work / "definitions.json"
    ten.write_text(json.dumps(extraction.DEFINITIONS), encoding="utf-8")
    empty_cpu = _empty_job_cpu(work)
    floor_cpu = _compress_once_cpu(path, copies)
    heading(f"Capture of a flood of training output: {size / 1e9:.2f} GB ({copies} copies of the extraction "
            f"benchmark's log, {log[1] * copies:,} records) as fast as the job can write it, one definition "
            f"({extraction.DEFINITIONS[0]['Regex']})")
    _flood(report, work, path, copies, size, one, "flood", empty_cpu, floor_cpu, targets=True)
    name = extraction.DEFINITIONS[0]["Name"]
    one_metric = (path, log[1], log[3].get(name, 0), {name: log[3].get(name, 0)})
    for attempt in range(2):
        _verify_replay(report, _flood_home(work, "flood", attempt), f"flood-{attempt}", copies, one_metric, size)
    heading(f"The same flood under the extraction benchmark's {len(extraction.DEFINITIONS)} definitions "
            f"(informational)")
    _flood(report, work, path, copies, size, ten, "flood10", empty_cpu, floor_cpu, targets=False)
    for attempt in range(2):
        _verify_replay(report, _flood_home(work, "flood10", attempt), f"flood10-{attempt}", copies, log, size)


def _flood_home(work: Path, label: str, attempt: int) -> Path:
    """The data directory of a flood's run (each run its own store, verified after the runs)."""
    return work / f"home-{label}-{attempt}"


def _cpu_per_gb(run: dict[str, Any], empty_cpu: float, gigabytes: float) -> float:
    """trainmon's CPU seconds a GB in one run: every process of ``trainmon run`` but the job's, net of
    an empty job's."""
    return (run["children_cpu_s"] - run["cpu_s"] - empty_cpu) / gigabytes


def _flood(report: Report, work: Path, path: Path, copies: int, size: int, definitions: Path, label: str,
           empty_cpu: float, floor_cpu: float, *, targets: bool) -> None:
    """The job's own time into a plain pipe, a pipe moved into a file and under trainmon, in turns,
    twice each; the figures, and (with ``targets``) whether they meet the targets."""
    args = ("--file", str(path), "--copies", str(copies))
    pipes, files, runs = [], [], []
    for attempt in range(2):  # in turns: the machine's noise falls on both
        pipes.append(run_pipe("replay", work, *args))
        files.append(run_pipe_to_file("replay", work, *args))
        runs.append(run_trainmon("replay", work, f"{label}-{attempt}", *args, home=_flood_home(work, label, attempt),
                                 definitions=("--metric-definitions", str(definitions))))
    pipe = min(pipes, key=lambda r: r["elapsed_s"])
    into_file = min(files, key=lambda r: r["elapsed_s"])
    under = min(runs, key=lambda r: r["elapsed_s"])
    fastest = min(runs, key=lambda r: r["wall_s"])
    gigabytes = size / 1e9
    cpu_per_gb = min(_cpu_per_gb(r, empty_cpu, gigabytes) for r in runs)
    table(
        ["run", "job elapsed s", "job MB/s", "wall s", "end-to-end MB/s", "exit to return s", "trainmon CPU s/GB"],
        [["plain pipe, drained by a reader (best of 2)", f"{pipe['elapsed_s']:.3f}", mb_per_s(size, pipe["elapsed_s"]),
          "-", "-", "-", "-"],
         ["a pipe moved into a new file (splice; best of 2)", f"{into_file['elapsed_s']:.3f}",
          mb_per_s(size, into_file["elapsed_s"]), "-", "-", "-", "-"]] +
        [[f"under trainmon run ({i + 1})", f"{r['elapsed_s']:.3f}", mb_per_s(size, r["elapsed_s"]), f"{r['wall_s']:.2f}",
          mb_per_s(size, r["wall_s"]), f"{r['return_after_s']:.2f}",
          f"{_cpu_per_gb(r, empty_cpu, gigabytes):.2f}"] for i, r in enumerate(runs)],
    )
    print(f"  trainmon's CPU counted net of an empty job's ({empty_cpu:.2f} s); compressing the flood once "
          f"(as the store packs a log chunk, one thread) took {floor_cpu / gigabytes:.2f} CPU s/GB here")
    report.check(pipe["received"] == size, f"the plain pipe delivered every byte ({pipe['received']:,})")
    report.check(into_file["received"] == size, f"the pipe into a file delivered every byte ({into_file['received']:,})")
    what = "flood" if targets else f"{label} (informational)"
    ratio = under["elapsed_s"] / pipe["elapsed_s"]
    report.ratio(f"{what}: the job's own time under trainmon / into a plain pipe", ratio,
                 f"<= {PIPE_TARGET:g}x" if targets else None, ratio <= PIPE_TARGET if targets else None)
    report.ratio(f"{what}: the job's own time under trainmon / into a pipe moved into a file", under["elapsed_s"] /
                 into_file["elapsed_s"], detail="(what trainmon adds to keeping every byte in a file)")
    end_to_end = size / 1e6 / fastest["wall_s"]
    report.absolute(f"{what}: end-to-end MB/s (until trainmon run returns, everything stored)", f"{end_to_end:.0f}",
                    f">= {END_TO_END_TARGET:g}" if targets else None, end_to_end >= END_TO_END_TARGET if targets else None,
                    f"({ratio_text(into_file['elapsed_s'] / fastest['wall_s'])} the rate of a pipe moved into a file)")
    back = fastest["return_after_s"]
    report.absolute(f"{what}: from the job's exit to trainmon run's return, s", f"{back:.2f}",
                    f"<= {RETURN_TARGET_S:g}" if targets else None, back <= RETURN_TARGET_S if targets else None)
    report.absolute(f"{what}: trainmon's CPU seconds per GB (net of an empty job)", f"{cpu_per_gb:.2f}",
                    f"<= {CPU_PER_GB_TARGET:g}" if targets else None, cpu_per_gb <= CPU_PER_GB_TARGET if targets else None,
                    f"({ratio_text(cpu_per_gb / (floor_cpu / gigabytes))} compressing it once)")


def paced_flood(report: Report, work: Path, scale: float) -> None:
    log = _mixed_log()
    path = log[0]
    seconds = PACED_FLOOD_SECONDS * max(scale, 0.2)
    copies = max(1, round(PACED_MB_S * seconds * 1e6 / path.stat().st_size))
    size = copies * path.stat().st_size
    rate = PACED_MB_S
    heading(f"Capture of training output at {rate:g} MB/s: {size / 1e9:.2f} GB, paced by the clock "
            f"({size / 1e6 / rate:.1f} s)")
    definitions_file = work / "definitions.json"
    definitions_file.write_text(json.dumps(extraction.DEFINITIONS), encoding="utf-8")
    args = ("--file", str(path), "--copies", str(copies), "--rate-mb-s", str(rate))
    alone = run_direct("replay", work, *args)
    under = run_trainmon("replay", work, "paced-flood", *args,
                         definitions=("--metric-definitions", str(definitions_file)))
    table(["run", "job elapsed s", "worst lag ms", "wall s", "exit to return s"], [
        ["job alone, stdout > /dev/null", f"{alone['elapsed_s']:.3f}", f"{alone['worst_lag_s'] * 1e3:.1f}", "-", "-"],
        ["under trainmon run", f"{under['elapsed_s']:.3f}", f"{under['worst_lag_s'] * 1e3:.1f}",
         f"{under['wall_s']:.2f}", f"{under['return_after_s']:.2f}"],
    ])
    ratio = under["elapsed_s"] / alone["elapsed_s"]
    report.ratio(f"paced {rate:g} MB/s: the job's time under trainmon / alone", ratio, "about 1.0 (<= 1.05)",
                 ratio <= 1.05)
    back = under["return_after_s"]
    report.absolute(f"paced {rate:g} MB/s: from the job's exit to trainmon run's return, s (kept up)", f"{back:.2f}",
                    f"<= {RETURN_TARGET_S:g}", back <= RETURN_TARGET_S)
    _verify_replay(report, Path(under["home"]), "paced-flood", copies, log, size)


def busy_job(report: Report, work: Path, scale: float) -> None:
    from trainmon.store import open_store

    path = _mixed_log()[0]
    workers = os.cpu_count() or 1
    spin = max(5_000_000, int(BUSY_SPIN * scale))
    heading(f"A job keeping all {workers} cores busy ({spin:,} iterations each) while it writes training output "
            f"at {BUSY_MB_S:g} MB/s")
    definitions_file = work / "definitions.json"
    definitions_file.write_text(json.dumps(extraction.DEFINITIONS), encoding="utf-8")
    args = ("--file", str(path), "--rate-mb-s", str(BUSY_MB_S), "--workers", str(workers), "--spin", str(spin))
    pipes, runs = [], []
    for attempt in range(2):  # in turns: the machine's noise falls on both
        pipes.append(run_pipe("busy", work, *args))
        runs.append(run_trainmon("busy", work, f"busy-{attempt}", *args, home=work / f"home-{attempt}",
                                 definitions=("--metric-definitions", str(definitions_file))))
    pipe = min(pipes, key=lambda r: r["spin_s"])
    under = min(runs, key=lambda r: r["spin_s"])
    table(["run", "spinning s", "MB written", "wall s", "exit to return s"],
          [[f"into a plain pipe ({i + 1})", f"{r['spin_s']:.2f}", f"{r['bytes'] / 1e6:.0f}", "-", "-"]
           for i, r in enumerate(pipes)] +
          [[f"under trainmon run ({i + 1})", f"{r['spin_s']:.2f}", f"{r['bytes'] / 1e6:.0f}", f"{r['wall_s']:.2f}",
            f"{r['return_after_s']:.2f}"] for i, r in enumerate(runs)])
    ratio = under["spin_s"] / pipe["spin_s"]
    report.ratio(f"busy job writing {BUSY_MB_S:g} MB/s: its spinning time under trainmon / into a plain pipe", ratio,
                 f"<= {BUSY_TARGET:g}x", ratio <= BUSY_TARGET)
    for index, result in enumerate(runs):
        store = open_store(Path(result["home"]))
        try:
            job = store.get_job(f"busy-{index}")
            stored = sum(s.stored_bytes for s in store.streams(job.id)) if job else 0
            report.check(job is not None and job.status == "Completed" and stored == result["bytes"],
                         f"busy job {index + 1}: Completed, every byte stored ({stored:,} of {result['bytes']:,})")
        finally:
            store.close()


def run(scale: float = 1.0, flood_mb: float = FLOOD_MB) -> Report:
    report = Report("capture")
    with scratch_dir("capture-") as work:
        paced(report, work, scale)
    with scratch_dir("capture-") as work:
        realistic_flood(report, work, scale, flood_mb)
    with scratch_dir("capture-") as work:
        paced_flood(report, work, scale)
    with scratch_dir("capture-") as work:
        busy_job(report, work, scale)
    with scratch_dir("capture-") as work:
        dense_flood(report, work, scale)
    return report


if __name__ == "__main__":
    sys.exit(1 if run().failures else 0)
