"""Monitor: what the system monitor and the profiler cost, how well they keep time, what they store.

- cost: a job tree of 50 sleeping processes in one new process group. ``SystemMonitor``
  (``system_interval_s=60``, ``profile_interval_ms=100``, a ``ProfileWriter`` to a temporary
  folder) runs for 20 s in a process of its own that does nothing else; its CPU time per second
  of wall time, in % of one core. Baseline: the obvious psutil loop, every 100 ms re-listing the
  tree (``Process(parent).children(recursive=True)``), ``cpu_times()`` and ``memory_info()`` of
  each process, ``cpu_percent(percpu=True)`` and ``virtual_memory()``. Target: under 1% of a core.
- accuracy: the same monitor for 20 s while two processes burn both cores; p50 and p99 of the
  interval between ticks (``SystemMonitor.tick_times``). Baseline, at the same time under the same
  load: a thread of this process looping on ``time.sleep(0.1)``. Target: p99 within 20 ms of 100 ms.
- storage: an hour of 100 ms profiler data from a synthetic but realistic host (8 cores, 2 GPUs,
  25 values a tick, computed with the monitor's own formulas from simulated /proc and NVML
  counters) fed through ``ProfileWriter.add`` as the monitor does, one file per simulated minute.
  Bytes on disk per sample, against a SQLite table with a row per sample and against plain
  float64 + int64 (16 bytes). Read back with ``trainmon.profile(job, location).dataframe()``,
  every value must be bit-identical. Target: at most 2 bytes per sample.

Run alone: ``python3 -m benchmarks.monitor``. The monitor and the psutil loop run in child
processes (``python3 -m benchmarks.monitor --child ...``) so that their CPU time is theirs alone.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .common import ROOT, Report, child_env, heading, median, percentile, ratio_text, scratch_dir, table

TREE_SIZE = 50
INTERVAL_MS = 100
RUN_S = 20.0
TARGET_CPU_PCT = 1.0
TARGET_JITTER_MS = 20.0
BURNERS = 2
HOUR_TICKS = 36_000
TICKS_PER_FILE = 600  # a file per minute of 100 ms ticks, as ProfileWriter rotates every 60 s
CORES = 8
GPUS = 2
TARGET_BYTES_PER_SAMPLE = 2.0
HOST = "algo-1"
JOB = "bench"

# A parent that forks the rest, all sleeping; started with start_new_session=True: its own process group.
TREE = """
import os, sys, time
for _ in range({children}):
    if os.fork() == 0:
        time.sleep(3600)
        os._exit(0)
sys.stdout.write("ready\\n")
sys.stdout.flush()
time.sleep(3600)
"""
BURN = "while True:\n    pass\n"


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def job_tree(size: int) -> Iterator[int]:
    """``size`` sleeping processes in a new process group; yields its id (the parent's pid)."""
    process = subprocess.Popen([sys.executable, "-c", TREE.format(children=size - 1)], stdout=subprocess.PIPE,
                               start_new_session=True)
    assert process.stdout is not None
    try:
        process.stdout.readline()
        yield process.pid
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
        process.stdout.close()


@contextmanager
def cpu_load(count: int) -> Iterator[None]:
    """``count`` processes spinning on a core each."""
    burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(count)]
    try:
        time.sleep(0.5)
        yield
    finally:
        for burner in burners:
            burner.kill()
        for burner in burners:
            burner.wait()


# -- child processes: one measured thing each, its result as JSON on stdout ---------------------------


def child_monitor(pgid: int, seconds: float, work: Path) -> dict[str, Any]:
    # Imported before the clock starts: a long-running supervisor pays for them once (the first flush
    # imports them, pandas too, through pyarrow; pa.array imports pyarrow.pandas_compat, and
    # `trainmon run` has imported fsspec's local filesystem when it checked the location), not every minute.
    import fsspec  # noqa: F401
    import fsspec.implementations.local  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow.pandas_compat  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    import trainmon
    from trainmon.runtime.watch.monitor import SystemMonitor
    from trainmon.store import open_store
    from trainmon.store.profiles import ProfileWriter

    store = open_store(work / "home")
    location = str(work / "profiles")
    profiler = ProfileWriter(location, JOB)
    monitor = SystemMonitor(store, JOB, {HOST: pgid}, work, system_interval_s=60,
                            profile_interval_ms=INTERVAL_MS, profiler=profiler)
    cpu_before, wall_before = _cpu_seconds(), time.monotonic()
    monitor.start()
    time.sleep(seconds)
    monitor.stop()
    cpu, wall = _cpu_seconds() - cpu_before, time.monotonic() - wall_before
    store.close()
    frame = trainmon.profile(JOB, location).dataframe()
    processes = frame[frame["metric"] == "job_processes"]["value"]
    return {
        "cpu_s": cpu, "wall_s": wall, "tick_times": list(monitor.tick_times),
        "error": repr(monitor.error) if monitor.error else None,
        "profile_failed": repr(profiler.failed) if profiler.failed else None,
        "samples_written": profiler.samples_written, "profiled_ticks": len(processes),
        "processes_min": float(processes.min()) if len(processes) else 0.0,
        "processes_max": float(processes.max()) if len(processes) else 0.0,
        "metrics": sorted(set(frame["metric"])),
    }


def child_psutil(pgid: int, seconds: float) -> dict[str, Any]:
    import psutil

    parent = psutil.Process(pgid)
    psutil.cpu_percent(percpu=True)
    every = INTERVAL_MS / 1000
    cpu_before, start = _cpu_seconds(), time.monotonic()
    ticks = seen = 0
    while start + (ticks + 1) * every <= start + seconds:
        time.sleep(max(0.0, start + (ticks + 1) * every - time.monotonic()))
        ticks += 1
        processes = [parent, *parent.children(recursive=True)]
        for process in processes:
            try:
                process.cpu_times()
                process.memory_info()
            except psutil.Error:
                pass
        psutil.cpu_percent(percpu=True)
        psutil.virtual_memory()
        seen = len(processes)
    return {"cpu_s": _cpu_seconds() - cpu_before, "wall_s": time.monotonic() - start, "ticks": ticks,
            "processes": seen}


def run_child(*args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "benchmarks.monitor", "--child", *args], cwd=ROOT,
                          capture_output=True, text=True, env=child_env(), timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"benchmark child {args[0]} exited {done.returncode}: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- 1. cost ---------------------------------------------------------------------------------------------


def measure_cost(report: Report, seconds: float, work: Path) -> dict[str, Any]:
    heading(f"Monitor cost: {TREE_SIZE}-process job tree, {INTERVAL_MS} ms ticks, {seconds:g} s each, idle machine")
    with job_tree(TREE_SIZE) as pgid:
        baseline = run_child("psutil", str(pgid), str(seconds), str(work))
        (work / "cost").mkdir()
        monitor = run_child("monitor", str(pgid), str(seconds), str(work / "cost"))
    ticks = len(monitor["tick_times"])
    monitor_pct = 100 * monitor["cpu_s"] / monitor["wall_s"]
    baseline_pct = 100 * baseline["cpu_s"] / baseline["wall_s"]
    table(["loop", "ticks", "CPU s", "wall s", "% of a core", "CPU ms/tick"], [
        ["trainmon SystemMonitor + ProfileWriter", ticks, f"{monitor['cpu_s']:.3f}", f"{monitor['wall_s']:.2f}",
         f"{monitor_pct:.2f}", f"{1000 * monitor['cpu_s'] / max(1, ticks):.3f}"],
        ["psutil loop re-listing the tree (baseline)", baseline["ticks"], f"{baseline['cpu_s']:.3f}",
         f"{baseline['wall_s']:.2f}", f"{baseline_pct:.2f}", f"{1000 * baseline['cpu_s'] / max(1, baseline['ticks']):.3f}"],
    ])
    report.check(monitor["error"] is None and monitor["profile_failed"] is None,
                 f"monitor ran without error ({monitor['error'] or monitor['profile_failed'] or 'none'})")
    report.check(baseline["processes"] == TREE_SIZE, f"psutil saw the {TREE_SIZE} processes ({baseline['processes']})")
    report.check(monitor["processes_min"] == monitor["processes_max"] == TREE_SIZE,
                 f"profile's job_processes is {TREE_SIZE} throughout "
                 f"({monitor['processes_min']:g}..{monitor['processes_max']:g})")
    report.check(monitor["profiled_ticks"] >= 0.9 * ticks > 0,
                 f"a profile row for (nearly) every tick ({monitor['profiled_ticks']} rows, {ticks} ticks)")
    report.ratio("monitor CPU: trainmon / psutil loop", monitor_pct / baseline_pct,
                 detail=f"({monitor_pct:.2f}% / {baseline_pct:.2f}% of a core)")
    report.absolute("monitor CPU at 100 ms, 50 processes", f"{monitor_pct:.2f}% of a core",
                    f"< {TARGET_CPU_PCT:g}%", monitor_pct < TARGET_CPU_PCT,
                    detail=f"(baseline {baseline_pct:.2f}%, {ratio_text(monitor_pct / baseline_pct)})")
    return monitor


# -- 2. accuracy -----------------------------------------------------------------------------------------


def _intervals_ms(times: list[float]) -> list[float]:
    return [1000 * (b - a) for a, b in zip(times, times[1:], strict=False)]


def measure_accuracy(report: Report, seconds: float, work: Path) -> None:
    heading(f"Tick interval at {INTERVAL_MS} ms with {BURNERS} CPU burners on {os.cpu_count()} cores, {seconds:g} s")
    sleeps: list[float] = []
    stop = threading.Event()

    def sleep_loop() -> None:
        while not stop.is_set():
            time.sleep(INTERVAL_MS / 1000)
            sleeps.append(time.monotonic())

    (work / "accuracy").mkdir()
    with job_tree(TREE_SIZE) as pgid, cpu_load(BURNERS):
        thread = threading.Thread(target=sleep_loop, name="sleep-loop", daemon=True)
        thread.start()
        try:
            monitor = run_child("monitor", str(pgid), str(seconds), str(work / "accuracy"))
        finally:
            stop.set()
            thread.join()
    ticks = _intervals_ms(monitor["tick_times"])
    plain = _intervals_ms(sleeps)
    rows = []
    for label, values in (("trainmon SystemMonitor ticks", ticks), ("time.sleep(0.1) loop (baseline)", plain)):
        rows.append([label, len(values), f"{percentile(values, 0.01):.2f}", f"{median(values):.2f}",
                     f"{percentile(values, 0.99):.2f}", f"{max(values):.2f}",
                     sum(v > 1.5 * INTERVAL_MS for v in values)])
    table(["loop", "intervals", "p1 ms", "p50 ms", "p99 ms", "max ms", f"> {1.5 * INTERVAL_MS:g} ms"], rows)
    report.check(monitor["error"] is None, f"monitor ran without error under load ({monitor['error'] or 'none'})")
    print(f"  profile rows under load: {monitor['profiled_ticks']} for {len(monitor['tick_times'])} ticks")
    p99 = percentile(ticks, 0.99)
    report.ratio("tick interval p50: trainmon / sleep loop", median(ticks) / median(plain),
                 detail=f"({median(ticks):.2f} ms / {median(plain):.2f} ms)")
    report.ratio("tick interval p99: trainmon / sleep loop", p99 / percentile(plain, 0.99),
                 detail=f"({p99:.2f} ms / {percentile(plain, 0.99):.2f} ms)")
    report.absolute("tick interval p99 under load", f"{p99:.2f} ms", f"within {TARGET_JITTER_MS:g} ms of "
                    f"{INTERVAL_MS} ms", abs(p99 - INTERVAL_MS) <= TARGET_JITTER_MS)


# -- 3. storage ------------------------------------------------------------------------------------------


def synthetic_rows(ticks: int, seed: int = 20240601) -> Iterator[tuple[int, dict[str, float]]]:
    """(timestamp_ms, row) for each 100 ms tick of one host, as ``SystemMonitor._profile`` builds them.

    Simulated counters, turned into values by the monitor's own formulas: per-core busy/total
    jiffies at USER_HZ=100 (9-12 a core a tick, as /proc/stat gives on a real machine), so per-core
    percentages are ratios of small integers; MemAvailable drifting by a few pages; disk sectors and
    network bytes mostly unchanged with bursts, divided by the measured (jittery) wall interval;
    NVML's integer utilization, refreshed about every other read; GPU memory in whole MiB that steps
    at phase changes. The job: data loading for 2 minutes, then training with an evaluation of
    one minute every 10 minutes and a checkpoint write of 10 s every 20 minutes.
    """
    import numpy as np

    from trainmon.runtime.watch.sampler import CLOCK_TICKS, PAGE_BYTES, cpu_pct, rate

    rng = np.random.default_rng(seed)
    n = ticks + 1  # counters at n moments make ticks intervals
    # wall clock of each read: on a 100 ms grid plus the wake-up latency of the thread
    latency = 5e-5 + rng.exponential(2e-4, n) + (rng.random(n) < 0.01) * rng.exponential(3e-3, n)
    wall = (1_717_200_000.123456 + np.arange(n) * (INTERVAL_MS / 1000) + latency).tolist()
    second = np.arange(n) * INTERVAL_MS / 1000
    loading = second < 120
    evaluating = ~loading & (second % 600 >= 540)
    checkpointing = ~loading & (second % 1200 < 10) & (second >= 1200)
    training = ~(loading | evaluating | checkpointing)

    # per-core CPU: jiffies a core accounts per tick, and how many of them were busy
    total_step = 10 + rng.choice([-1, 0, 1, 2], size=(CORES, n), p=[0.18, 0.6, 0.2, 0.02])
    slow = 0.5 + 0.25 * np.sin(second / 37.0)[None, :] + rng.normal(0, 0.15, (CORES, n))
    load = np.empty((CORES, n))
    load[0] = np.where(checkpointing, 1.0, np.where(evaluating, 0.8, 0.97))  # the training process
    load[1:5] = np.where(loading | training, slow[1:5], 0.3 * slow[1:5])  # data-loader workers
    load[5:] = 0.04 + 0.03 * np.abs(rng.normal(0, 1, (CORES - 5, n)))  # the rest of the machine
    busy_step = rng.binomial(total_step, np.clip(load, 0.0, 1.0))
    cpu_total = np.cumsum(total_step, axis=1).tolist()
    cpu_busy = np.cumsum(busy_step, axis=1).tolist()
    all_total = np.cumsum(total_step.sum(axis=0)).tolist()
    io_bursts = loading | checkpointing
    iowait = np.cumsum(np.where(io_bursts, rng.poisson(2.0, n), rng.poisson(0.02, n))).tolist()

    memory_total = 64 * 1024 * 1024 * 1024  # MemTotal in bytes (kB x 1024)
    available_kb = 48 * 1024 * 1024 - np.cumsum(
        np.where(rng.random(n) < 0.7, rng.normal(0, 120, n).round() * 4, 0) + np.where(loading, 900 * 4, 0))
    available = (available_kb.astype(np.int64) * 1024).tolist()

    def bursts(base_rate: float, burst: np.ndarray, burst_bytes: float, unit: int) -> list[int]:
        """Cumulative bytes in ``unit`` steps: sporadic small transfers, large ones during ``burst``."""
        small = (rng.random(n) < base_rate) * rng.integers(1, 16, n) * unit
        large = burst * rng.normal(burst_bytes, burst_bytes / 5, n).clip(0) // unit * unit
        return np.cumsum(small + large).astype(np.int64).tolist()

    disk_read = bursts(0.01, loading, 40e6, 512 * 8)
    disk_write = bursts(0.03, checkpointing, 60e6, 512 * 8)
    net_receive = bursts(0.04, np.zeros(n, bool), 0, 66)
    net_transmit = bursts(0.04, np.zeros(n, bool), 0, 66)
    job_read = bursts(0.002, loading, 40e6, 4096)
    job_write = bursts(0.0, checkpointing, 60e6, 4096)

    # NVML: integer utilization over its own sample period (refreshed at about every other read)
    gpu_util = []
    for _ in range(GPUS):
        target = np.where(training, rng.normal(97, 3, n), np.where(evaluating, rng.normal(60, 15, n), 0.0))
        stall = training & (rng.random(n) < 0.03)
        target = np.where(stall, rng.uniform(0, 40, n), target).clip(0, 100).round()
        fresh = rng.random(n) < 0.55
        held = np.maximum.accumulate(np.where(fresh, np.arange(n), 0))
        gpu_util.append(target[held].tolist())
    gpu_total = 81_559 * 1024 * 1024
    gpu_used_mib = np.where(loading, 518, np.where(evaluating, 63_412, 61_870))
    gpu_used = [(gpu_used_mib + 4 * index).astype(np.int64) * 1024 * 1024 for index in range(GPUS)]
    job_gpu = (np.sum(gpu_used, axis=0) - GPUS * 518 * 1024 * 1024).tolist()
    gpu_used_list = [used.tolist() for used in gpu_used]

    # the job's tree: CPU ticks summed over its processes, resident pages, threads
    job_ticks = np.cumsum(busy_step[:5].sum(axis=0) + rng.poisson(0.3, n)).tolist()
    pages = (2_600_000 + np.cumsum(np.where(rng.random(n) < 0.2, rng.integers(-64, 80, n), 0))).tolist()
    threads = (312 + np.cumsum(np.where(rng.random(n) < 0.005, rng.choice([-1, 1], n), 0))).tolist()

    for k in range(1, n):
        seconds = wall[k] - wall[k - 1]
        row: dict[str, float] = {
            f"cpu{c}_utilization_pct": cpu_pct(cpu_busy[c][k], cpu_busy[c][k - 1], cpu_total[c][k], cpu_total[c][k - 1])
            for c in range(CORES)
        }
        total = all_total[k] - all_total[k - 1]
        row["cpu_iowait_pct"] = 100.0 * (iowait[k] - iowait[k - 1]) / total if total > 0 else 0.0
        row["memory_used_pct"] = 100.0 * (memory_total - available[k]) / memory_total
        row["disk_read_bytes_per_s"] = rate(disk_read[k], disk_read[k - 1], seconds)
        row["disk_write_bytes_per_s"] = rate(disk_write[k], disk_write[k - 1], seconds)
        row["network_receive_bytes_per_s"] = rate(net_receive[k], net_receive[k - 1], seconds)
        row["network_transmit_bytes_per_s"] = rate(net_transmit[k], net_transmit[k - 1], seconds)
        for g in range(GPUS):
            row[f"gpu{g}_utilization_pct"] = float(gpu_util[g][k])
            row[f"gpu{g}_memory_used_pct"] = 100.0 * gpu_used_list[g][k] / gpu_total
        cpu_seconds = (job_ticks[k] - job_ticks[k - 1]) / CLOCK_TICKS
        row["job_cpu_pct"] = 100.0 * cpu_seconds / seconds
        row["job_resident_bytes"] = float(pages[k] * PAGE_BYTES)
        row["job_threads"] = float(threads[k])
        row["job_processes"] = float(TREE_SIZE)
        row["job_read_bytes_per_s"] = (job_read[k] - job_read[k - 1]) / seconds
        row["job_write_bytes_per_s"] = (job_write[k] - job_write[k - 1]) / seconds
        row["job_gpu_memory_bytes"] = float(job_gpu[k])
        yield int(wall[k] * 1000), row


def _column_bytes(files: list[str]) -> dict[str, int]:
    """Compressed bytes of each column's chunks over all files; the rest of each file is footer."""
    import pyarrow.parquet as pq

    sizes: dict[str, int] = {}
    for name in files:
        meta = pq.ParquetFile(name).metadata
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for c in range(group.num_columns):
                column = group.column(c)
                sizes[column.path_in_schema] = sizes.get(column.path_in_schema, 0) + column.total_compressed_size
    return sizes


def _metric_family(metric: str) -> str:
    for prefix, family in (("cpu_iowait", "cpu_iowait_pct"), ("cpu", "cpuN_utilization_pct"),
                           ("gpu", "gpuN_" + metric.partition("_")[2])):
        if metric.startswith(prefix):
            return family
    return metric


def _value_bytes_by_family(files: list[str]) -> dict[str, int]:
    """The value column's bytes per metric family, each family's values written alone as the writer
    writes them (an estimate of what each costs inside the shared column)."""
    import io

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    sizes: dict[str, int] = {}
    for name in files:
        frame = pq.read_table(name)
        families = pa.array([_metric_family(m) for m in frame.column("metric").to_pylist()])
        for family in set(families.to_pylist()):
            part = frame.filter(pc.equal(families, family)).select(["value"])
            buffer = io.BytesIO()
            pq.write_table(part, buffer, compression="zstd", compression_level=9, use_dictionary=False,
                           column_encoding={"value": "BYTE_STREAM_SPLIT"})
            sizes[family] = sizes.get(family, 0) + pq.ParquetFile(buffer).metadata.row_group(0).column(0).total_compressed_size
    return sizes


def _rewritten_bytes(files: list[str], encoding: dict[str, str]) -> int:
    """Bytes of the same tables written again as the writer does, but with other column encodings."""
    import io

    import pyarrow.parquet as pq

    total = 0
    for name in files:
        buffer = io.BytesIO()
        pq.write_table(pq.read_table(name), buffer, compression="zstd", compression_level=9, use_dictionary=["metric"],
                       column_encoding=encoding)
        total += len(buffer.getvalue())
    return total


def measure_storage(report: Report, ticks: int, work: Path, live_metrics: list[str] | None) -> None:
    import numpy as np
    import pandas as pd

    import trainmon
    from trainmon.store.profiles import ProfileWriter, stored_bytes

    minutes = ticks * INTERVAL_MS / 60_000
    heading(f"Profile storage: {ticks:,} ticks of {INTERVAL_MS} ms ({minutes:g} min), {CORES} cores, {GPUS} GPUs")
    location = str(work / "profiles")
    writer = ProfileWriter(location, JOB, rotate_s=float("inf"))  # rotated by simulated time below
    stamps: list[int] = []
    metrics: list[str] = []
    values: list[float] = []
    flushes: list[float] = []
    started = time.perf_counter()
    for tick, (stamp_ms, row) in enumerate(synthetic_rows(ticks), 1):
        writer.add(HOST, stamp_ms, row)
        stamps.extend([stamp_ms] * len(row))
        metrics.extend(row)
        values.extend(row.values())
        if tick % TICKS_PER_FILE == 0:
            flush_started = time.perf_counter()
            writer.flush()
            flushes.append(time.perf_counter() - flush_started)
    writer.close()
    elapsed = time.perf_counter() - started
    samples = len(values)
    profile = trainmon.profile(JOB, location)
    files = profile.files()
    size = stored_bytes(files, location)
    per_row = samples // ticks
    print(f"  {samples:,} samples ({per_row} a tick) in {len(files)} files, {size:,} bytes, "
          f"generated and written in {elapsed:.1f} s")
    print(f"  writing a minute's file ({TICKS_PER_FILE * per_row:,} samples) takes {median(flushes) * 1e3:.0f} ms "
          f"(p50; max {max(flushes) * 1e3:.0f} ms) on the thread that calls add(): the monitor's, so the tick "
          f"after a rotation starts that much late")
    report.check(writer.failed is None and writer.samples_written == samples,
                 f"profile writer wrote every sample ({writer.samples_written:,} of {samples:,}, "
                 f"failure: {writer.failed!r})")
    if live_metrics is not None:
        # the synthetic row has the live monitor's metrics (its host's cores and GPUs aside)
        def shape(names: list[str]) -> set[str]:
            return {name for name in names if not (name[:3] in ("cpu", "gpu") and name[3].isdigit())}
        synthetic = shape(metrics[:per_row])
        if not any(name.startswith("gpu") for name in live_metrics):  # a host without GPUs: no GPU memory either
            synthetic.discard("job_gpu_memory_bytes")
        report.check(shape(live_metrics) == synthetic,
                     "synthetic rows name the metrics the live monitor wrote (beyond per-core/per-GPU)")

    # lossless: every value back, bit for bit
    started = time.perf_counter()
    frame = profile.dataframe()
    read_s = time.perf_counter() - started
    expected = pd.DataFrame({"timestamp_ms": np.array(stamps, np.int64), "metric": metrics,
                             "value": np.array(values, np.float64)})
    expected = expected.sort_values(["timestamp_ms", "metric"], kind="stable").reset_index(drop=True)
    same = (len(frame) == len(expected)
            and bool((frame["host"] == HOST).all())
            and np.array_equal(((frame["timestamp"] - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1))
                               .to_numpy(np.int64), expected["timestamp_ms"].to_numpy())
            and bool((frame["metric"].to_numpy() == expected["metric"].to_numpy()).all())
            and np.array_equal(frame["value"].to_numpy(np.float64).view(np.int64),
                               expected["value"].to_numpy().view(np.int64)))
    report.check(same, f"lossless: dataframe() gives back every timestamp, metric and value bit for bit "
                       f"({len(frame):,} rows, read in {read_s:.1f} s)")

    sqlite_path = work / "samples.sqlite"
    db = sqlite3.connect(sqlite_path)
    db.execute("CREATE TABLE samples (ts INTEGER, host TEXT, metric TEXT, value REAL)")
    db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?)",
                   zip(stamps, [HOST] * samples, metrics, values, strict=True))
    db.commit()
    db.close()
    sqlite_size = os.path.getsize(sqlite_path)
    raw_size = 16 * samples

    per_sample = size / samples
    table(["storage", "bytes", "bytes/sample"], [
        ["trainmon profile (Parquet, per-minute files)", f"{size:,}", f"{per_sample:.3f}"],
        ["SQLite, a row per sample (baseline)", f"{sqlite_size:,}", f"{sqlite_size / samples:.3f}"],
        ["plain int64 + float64 (baseline)", f"{raw_size:,}", "16.000"],
    ])
    columns = _column_bytes(files)
    families = _value_bytes_by_family(files)
    print("  where the bytes are (informational):")
    rows: list[list[object]] = [[f"column {name}", f"{count:,}", f"{count / samples:.3f}"]
                                for name, count in sorted(columns.items())]
    rows.append(["footers and page headers", f"{size - sum(columns.values()):,}",
                 f"{(size - sum(columns.values())) / samples:.3f}"])
    rows += [[f"  values of {family} (alone)", f"{count:,}", f"{count / samples:.3f}"]
             for family, count in sorted(families.items(), key=lambda item: -item[1])]
    split = _rewritten_bytes(files, {"timestamp_ms": "DELTA_BINARY_PACKED", "value": "BYTE_STREAM_SPLIT"})
    rows.append(["the same files, value column BYTE_STREAM_SPLIT (not PLAIN)", f"{split:,}", f"{split / samples:.3f}"])
    table(["part", "bytes", "bytes/sample overall"], rows)
    report.ratio("profile size: trainmon / SQLite row per sample", size / sqlite_size,
                 detail=f"({per_sample:.3f} / {sqlite_size / samples:.2f} bytes/sample)")
    report.ratio("profile size: trainmon / plain int64+float64", per_sample / 16,
                 detail=f"({per_sample:.3f} / 16 bytes/sample)")
    report.absolute("profile bytes per sample, lossless", f"{per_sample:.3f}", f"<= {TARGET_BYTES_PER_SAMPLE:g}",
                    per_sample <= TARGET_BYTES_PER_SAMPLE)


# -- the benchmark ---------------------------------------------------------------------------------------


def run(scale: float = 1.0) -> Report:
    report = Report("monitor")
    seconds = max(3.0, RUN_S * scale)
    ticks = max(TICKS_PER_FILE, int(HOUR_TICKS * scale) // TICKS_PER_FILE * TICKS_PER_FILE)
    with scratch_dir("monitor-") as work:
        try:
            live = measure_cost(report, seconds, work)
        except RuntimeError as exc:
            report.check(False, str(exc))
            live = None
        try:
            measure_accuracy(report, seconds, work)
        except RuntimeError as exc:
            report.check(False, str(exc))
        (work / "storage").mkdir()
        measure_storage(report, ticks, work / "storage", live["metrics"] if live else None)
    return report


def _child_main(argv: list[str]) -> int:
    kind, pgid, seconds, work = argv[0], int(argv[1]), float(argv[2]), Path(argv[3])
    result = child_monitor(pgid, seconds, work) if kind == "monitor" else child_psutil(pgid, seconds)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.monitor")
    parser.add_argument("--child", nargs=4, metavar=("KIND", "PGID", "SECONDS", "WORK"), help=argparse.SUPPRESS)
    parser.add_argument("--scale", type=float, default=1.0)
    arguments = parser.parse_args()
    if arguments.child:
        sys.exit(_child_main(arguments.child))
    sys.exit(1 if run(arguments.scale).failures else 0)
