"""Metric series as a user writes them: bytes on disk against Parquet, and PutMetricData through the
client against the store's own write path.

The data: 100 series of 360,000 points each at 100 ms (10 hours; 36,000,000 samples at scale 1),
half system-like (CPU and memory percentages with two decimals, byte counters, throughputs),
half training-like (losses and accuracies with four decimals, a stepped learning rate, gradient
norms), stored with SageMaker's retention off (``forever``), so that nothing expires.

1. Bytes on disk, as each step leaves the data directory (nothing checkpointed by the benchmark).
   The series go in through ``Store.put_samples``, 50,000 samples a call (what the job writer
   batches), into a fresh SQLite store; the files (the database, its write-ahead log and index)
   are measured after every call (the peak), once the store is closed (after ingest), and once a
   ``trainmon maintain`` command, run as a process of its own, has exited (at rest: what it
   keeps, roll-ups included); then, for comparison, once a checkpoint of the benchmark's own has
   copied in and emptied whatever log was left (the same figure when nothing was). Baseline: the
   same samples as one Parquet file (pyarrow: series dictionary-encoded, timestamps
   DELTA_BINARY_PACKED, values BYTE_STREAM_SPLIT, zstd). Targets: at most 2.0 bytes a sample at
   rest as the command left it, at most 10 at the peak.
2. PutMetricData. The first ``PUT_SAMPLES`` of the samples through ``trainmon.client
   ("cloudwatch").put_metric_data``, 1,000 items a call (each a Value, with its series' name,
   dimension, unit and timestamp: every series' next 10 points), against the store's write path
   beneath it: the same samples, the same 1,000 a call, through ``Store.put_samples``. The
   client's time runs until every datapoint is stored and readable (its queue written:
   ``store.flush_samples()``), so what it queued counts once stored. Each part's input is made
   just before it and dropped after, so that none pays the garbage collector for another's.
   Targets: at least half the store's rate, and at least 500,000 samples/s. The store's rate in
   calls of 50,000 is printed beside them. The same calls with their timestamps and values as
   ``numpy.float64`` (as a script holding its series in arrays gives them), three times each,
   alternated with the Python floats' (the best of each): target at most 1.1x the floats' time.
3. ListMetrics pages. A store holding 100,000 metrics (10,000 at least; each a name and a Host
   dimension), listed page by
   page to the end (each page asked three times, the least time kept: its cost, not that of a
   first read of its rows from disk): the median time of a full page from the last tenth, against
   the same in a store of 10,000 names (the baseline). Target: at most 2x (a page costs the same
   however many metrics there are, so the ratio stays near 1; paged by offset, or by a keyset the
   index cannot start from, it grows with the total). The two stores are listed in turns, five
   times each (the machine's noise falls on both), and the medians compared.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .common import (
    Report,
    checkpointed_bytes,
    child_env,
    heading,
    rate,
    ratio_text,
    scratch_dir,
    sqlite_files_bytes,
    table,
    timed,
)

SERIES = 100
POINTS = 360_000
TICK_MS = 100
CALL_SAMPLES = 50_000
ITEMS_PER_PUT = 1_000
PUT_SAMPLES = 1_000_000
REST_TARGET, PEAK_TARGET = 2.0, 10.0
PUT_SHARE_TARGET, PUT_RATE_TARGET = 0.5, 500_000
NUMPY_TARGET = 1.1  # PutMetricData with numpy.float64 timestamps and values / with Python floats
CLIENT_TURNS = 3  # the client's runs of each kind, alternated: the best of each is its figure


def _series(points: int) -> list[tuple[str, str, str, np.ndarray]]:
    """(metric name, host, unit, values) of every series, values as printed (rounded)."""
    rng = np.random.default_rng(11)
    t = np.arange(points) / points
    found = []
    for index in range(SERIES // 2):
        host = f"algo-{index % 8 + 1}"
        kind = index % 5
        if kind == 0:
            values = np.clip(55 + 30 * np.sin(t * 40 + index) + rng.normal(0, 8, points), 0, 100).round(2)
            found.append((f"CPUUtilization{index}", host, "Percent", values))
        elif kind == 1:
            values = np.clip(40 + 20 * t + rng.normal(0, 0.05, points).cumsum() / 50, 0, 100).round(2)
            found.append((f"MemoryUtilization{index}", host, "Percent", values))
        elif kind == 2:
            values = (2e9 + np.cumsum(rng.integers(0, 4096, points))).astype(np.float64)
            found.append((f"ResidentMemory{index}", host, "Bytes", values))
        elif kind == 3:
            values = np.where(rng.random(points) < 0.7, 0, rng.lognormal(15, 1.5, points)).round(0)
            found.append((f"ProcessWriteThroughput{index}", host, "Bytes/Second", values))
        else:
            values = np.clip(rng.normal(8, 3, points), 0, None).round(2)
            found.append((f"DiskUtilization{index}", host, "Percent", values))
    for index in range(SERIES - SERIES // 2):
        host = f"algo-{index % 8 + 1}"
        kind = index % 4
        if kind == 0:
            values = (2.5 * np.exp(-3 * t) + 0.1 + rng.normal(0, 0.02, points)).round(4)
            found.append((f"train_loss{index}", host, "None", values))
        elif kind == 1:
            values = np.clip(1 - 0.9 * np.exp(-4 * t) + rng.normal(0, 0.01, points), 0, 1).round(4)
            found.append((f"train_accuracy{index}", host, "None", values))
        elif kind == 2:
            values = (0.1 * 0.5 ** np.floor(t * 5)).round(6)
            found.append((f"learning_rate{index}", host, "None", values))
        else:
            values = np.abs(rng.normal(1.5, 0.6, points) * np.exp(-t)).round(6)
            found.append((f"grad_norm{index}", host, "None", values))
    return found


def _calls(series: list[tuple[str, str, str, np.ndarray]], start_ms: int, points: int,
           per_call: int = CALL_SAMPLES) -> list[list[Any]]:
    """Store.put_samples calls of ``per_call`` samples: every series' next points, in time order."""
    from trainmon.cloudwatch.model import MetricKey
    from trainmon.cloudwatch.statistics import Sample

    stamps = (start_ms + np.arange(points, dtype=np.int64) * TICK_MS).tolist()
    step = max(1, per_call // len(series))
    calls = []
    for first in range(0, points, step):
        items = []
        for name, host, unit, values in series:
            key = MetricKey("Bench/Series", name, (("Host", host),))
            chunk = values[first:first + step].tolist()
            items.append((key, 1, [Sample(stamp, 1.0, v, v, v, v, unit)
                                   for stamp, v in zip(stamps[first:first + step], chunk, strict=True)]))
        calls.append(items)
    return calls


def _parquet_bytes(series: list[tuple[str, str, str, np.ndarray]], start_ms: int, points: int, path: Path) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    stamps = start_ms + np.arange(points, dtype=np.int64) * TICK_MS
    table_ = pa.table({
        "series": pa.DictionaryArray.from_arrays(pa.array(np.repeat(np.arange(len(series), dtype=np.int32), points)),
                                                 pa.array([name for name, *_ in series])),
        "timestamp_ms": pa.array(np.tile(stamps, len(series))),
        "value": pa.array(np.concatenate([values for *_, values in series])),
    })
    pq.write_table(table_, path, compression="zstd", use_dictionary=["series"],
                   column_encoding={"timestamp_ms": "DELTA_BINARY_PACKED", "value": "BYTE_STREAM_SPLIT"})
    return path.stat().st_size


def on_disk(report: Report, scale: float) -> None:
    from trainmon.cloudwatch.retention import parse
    from trainmon.store import open_store

    points = max(3_600, int(POINTS * scale))
    samples = points * SERIES
    heading(f"Bytes on disk: {SERIES} series x {points:,} points at {TICK_MS} ms ({samples:,} samples)")
    # (ending two hours ago: `trainmon maintain` seals and rolls up all of it, now)
    start_ms = (int(time.time()) - points * TICK_MS // 1000 - 7200) * 1000
    series = _series(points)
    with scratch_dir("series-") as home:
        store = open_store(home, database_url="", retention=parse("forever"))
        peak = 0
        write_s = 0.0
        for call in _calls(series, start_ms, points):
            elapsed, _ = timed(lambda call=call: store.put_samples(call))
            write_s += elapsed
            peak = max(peak, sqlite_files_bytes(home))
        store.close()
        after_ingest = sqlite_files_bytes(home)  # as the store's close left it
        maintain_s, maintained = timed(lambda: subprocess.run(
            [sys.executable, "-m", "trainmon", "--home", str(home), "maintain"], capture_output=True, text=True,
            env=child_env(TRAINMON_RETENTION="forever")))
        report.check(maintained.returncode == 0, f"trainmon maintain succeeded {maintained.stderr.strip()}".strip())
        at_rest = sqlite_files_bytes(home)  # as the command left the directory: nothing checkpointed since
        log_left = sum(path.stat().st_size for path in home.glob("trainmon.db-wal"))
        checkpointed = checkpointed_bytes(home)
        with sqlite3.connect(home / "trainmon.db") as db:
            stored = db.execute("SELECT sum(count) FROM chunks").fetchone()[0]
        report.check(stored == samples, f"every sample stored ({stored:,})")
        parquet = _parquet_bytes(series, start_ms, points, home / "baseline.parquet")
    table(["form", "bytes", "bytes/sample"], [
        ["trainmon, peak during ingest", f"{peak:,}", f"{peak / samples:.2f}"],
        ["trainmon, after ingest (the store closed)", f"{after_ingest:,}", f"{after_ingest / samples:.2f}"],
        ["trainmon, after `trainmon maintain` (at rest, as left)", f"{at_rest:,}", f"{at_rest / samples:.2f}"],
        ["  of which the write-ahead log", f"{log_left:,}", f"{log_left / samples:.2f}"],
        ["trainmon, the same once checkpointed", f"{checkpointed:,}", f"{checkpointed / samples:.2f}"],
        ["Parquet (baseline)", f"{parquet:,}", f"{parquet / samples:.2f}"],
    ])
    print(f"  ingest {rate(samples, write_s)} samples/s; `trainmon maintain` {maintain_s:.1f} s")
    report.absolute("bytes per sample at rest, as `trainmon maintain` left them",
                    f"{at_rest / samples:.2f} ({ratio_text(at_rest / parquet)} Parquet)", f"<= {REST_TARGET:g}",
                    at_rest / samples <= REST_TARGET)
    report.ratio("bytes at rest as left / once checkpointed", at_rest / checkpointed,
                 detail=f"(the log left: {log_left:,} bytes)")
    report.absolute("bytes per sample at the ingest peak", f"{peak / samples:.2f} ({ratio_text(peak / parquet)} "
                    "Parquet)", f"<= {PEAK_TARGET:g}", peak / samples <= PEAK_TARGET)
    report.ratio("bytes per sample after ingest / Parquet", after_ingest / parquet,
                 detail=f"{after_ingest / samples:.2f} vs {parquet / samples:.2f}")


def put_metric_data(report: Report, scale: float) -> None:
    samples = max(100_000, int(PUT_SAMPLES * scale)) // ITEMS_PER_PUT * ITEMS_PER_PUT
    points = samples // SERIES
    heading(f"PutMetricData: {samples:,} samples, {ITEMS_PER_PUT:,} items a call, against Store.put_samples")
    start_ms = (int(time.time()) - points * TICK_MS // 1000 - 3600) * 1000
    series = _series(points)
    with scratch_dir("put-") as work:
        # Each part's input lives only during its part: none pays the garbage collector for another's.
        store_s = _put_samples_s(work / "store", _calls(series, start_ms, points, ITEMS_PER_PUT))
        large_s = _put_samples_s(work / "large", _calls(series, start_ms, points))
        client_times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}  # (wall, CPU) seconds
        for turn, numpy_scalars in enumerate((False, True) * CLIENT_TURNS):
            wall_s, cpu_s, stored = _client_s(work / f"client-{turn}",
                                              _requests(series, start_ms, points, numpy_scalars))
            client_times[numpy_scalars].append((wall_s, cpu_s))
            report.check(stored == samples, f"every datapoint stored through the client ({stored:,}"
                                            f"{', numpy.float64' if numpy_scalars else ''})")
    client_s, numpy_s = (min(wall for wall, _ in client_times[kind]) for kind in (False, True))
    client_cpu_s, numpy_cpu_s = (min(cpu for _, cpu in client_times[kind]) for kind in (False, True))
    table(["path", "seconds", "samples/s"], [
        [f"Store.put_samples, {ITEMS_PER_PUT:,} a call (baseline)", f"{store_s:.2f}", rate(samples, store_s)],
        [f"client put_metric_data, {ITEMS_PER_PUT:,} items a call", f"{client_s:.2f}", rate(samples, client_s)],
        ["  the same, timestamps and values numpy.float64", f"{numpy_s:.2f}", rate(samples, numpy_s)],
        [f"Store.put_samples, {CALL_SAMPLES:,} a call", f"{large_s:.2f}", rate(samples, large_s)],
    ])
    print("  client runs, seconds (CPU seconds of the process): floats "
          + ", ".join(f"{wall:.2f} ({cpu:.2f})" for wall, cpu in client_times[False])
          + "; numpy.float64 " + ", ".join(f"{wall:.2f} ({cpu:.2f})" for wall, cpu in client_times[True]))
    share = store_s / client_s
    report.ratio("PutMetricData through the client / the store's write path", share, f">= {PUT_SHARE_TARGET:g}x",
                 share >= PUT_SHARE_TARGET)
    report.absolute("PutMetricData through the client, samples/s", rate(samples, client_s),
                    f">= {rate(PUT_RATE_TARGET, 1)}", samples / client_s >= PUT_RATE_TARGET)
    report.ratio("PutMetricData with numpy.float64 timestamps and values / with Python floats", numpy_s / client_s,
                 f"<= {NUMPY_TARGET:g}x", numpy_s / client_s <= NUMPY_TARGET,
                 detail=f"({numpy_s:.2f} s / {client_s:.2f} s; in CPU seconds, the least of each: "
                        f"{numpy_cpu_s / client_cpu_s:.2f}x, {numpy_cpu_s:.2f} / {client_cpu_s:.2f})")


def _client_s(home: Path, requests: list[list[dict[str, Any]]]) -> tuple[float, float, int]:
    """Seconds the client takes to put ``requests`` into a fresh SQLite store in ``home`` until all
    of it is stored, the CPU seconds of the process meanwhile (its threads': the writer's too; what
    other processes' load disturbs least), and the datapoints stored."""
    import trainmon
    from trainmon.runtime.watch import maintenance

    client = trainmon.client("cloudwatch", home=home)

    def put_all() -> None:
        for data in requests:
            client.put_metric_data(Namespace="Bench/Series", MetricData=data)
        client.store.flush_samples()  # the clock stops once every datapoint is stored, as readable

    cpu_s = time.process_time()
    client_s, _ = timed(put_all)
    cpu_s = time.process_time() - cpu_s
    stored = client.store._read("SELECT sum(count) FROM chunks")[0][0]
    maintainer = maintenance.running_for(client.store)  # (the one the first call started: its passes
    if maintainer is not None:  # would take the next part's cores)
        maintainer.stop()
    client.store.close()
    return client_s, cpu_s, stored


def _put_samples_s(home: Path, calls: list[list[Any]]) -> float:
    """Seconds ``Store.put_samples`` takes to write ``calls`` into a fresh SQLite store in ``home``."""
    from trainmon.store import open_store

    store = open_store(home, database_url="")
    elapsed, _ = timed(lambda: [store.put_samples(call) for call in calls])
    store.close()
    return elapsed


def _requests(series: list[tuple[str, str, str, np.ndarray]], start_ms: int, points: int,
              numpy_scalars: bool = False) -> list[list[dict[str, Any]]]:
    """PutMetricData's MetricData lists of ITEMS_PER_PUT items, every series' next points in turn;
    timestamps and values Python floats, or ``numpy.float64`` as indexing arrays gives them."""
    stamps = (start_ms + np.arange(points, dtype=np.int64) * TICK_MS) / 1000
    items: list[dict[str, Any]] = []
    for index in range(points):
        stamp = stamps[index] if numpy_scalars else float(stamps[index])
        for name, host, unit, values in series:
            items.append({"MetricName": name, "Dimensions": [{"Name": "Host", "Value": host}], "Unit": unit,
                          "Timestamp": stamp, "Value": values[index] if numpy_scalars else float(values[index]),
                          "StorageResolution": 1})
    return [items[first:first + ITEMS_PER_PUT] for first in range(0, len(items), ITEMS_PER_PUT)]


LIST_METRICS = 100_000
LIST_BASELINE = 10_000


LIST_ROUNDS = 5  # the two stores' late pages, measured in turns


def _listed(home: Path, count: int) -> Any:
    """A store holding ``count`` metrics at rest (maintained, its write-ahead log copied in, as a listing
    later meets it)."""
    import trainmon
    from trainmon.store import open_store

    store = open_store(home)
    cw = trainmon.client("cloudwatch", store=store)
    for start in range(0, count, 1000):
        cw.put_metric_data(Namespace="Listed", MetricData=[
            {"MetricName": f"metric-{n:07d}", "Value": 1.0, "Dimensions": [{"Name": "Host", "Value": f"host-{n}"}]}
            for n in range(start, min(count, start + 1000))])
    store.flush_samples()
    store.maintain()  # (what the writing process's maintainer would do meanwhile, done before the clock)
    checkpointed_bytes(home)
    return store


def _late_pages(store: Any) -> tuple[list[float], int]:
    """Seconds of each full page from the last tenth of listing every metric, and the pages."""
    import trainmon

    cw = trainmon.client("cloudwatch", store=store)
    times, token = [], None
    while True:
        asked = {"NextToken": token} if token else {}
        took = []
        for _ in range(3):  # the least of three: the page's own cost, not a first read of its rows from disk
            began = time.perf_counter()
            page = cw.list_metrics(Namespace="Listed", **asked)
            took.append(time.perf_counter() - began)
        times.append(min(took))
        token = page.get("NextToken")
        if token is None:
            break
    full = times[:-1]  # (the last page is the rest, or empty)
    return full[-max(1, len(full) // 10):], len(times)


def list_metrics(report: Report, scale: float) -> None:
    total = max(LIST_BASELINE, int(LIST_METRICS * scale))
    heading(f"ListMetrics: a late page of {total:,} metrics against one of {LIST_BASELINE:,}")
    few_times: list[float] = []
    many_times: list[float] = []
    with scratch_dir("list-metrics-") as work:
        few, many = _listed(work / "few", LIST_BASELINE), _listed(work / "many", total)
        try:
            for _ in range(LIST_ROUNDS):  # in turns: the machine's noise falls on both
                late, base_pages = _late_pages(few)
                few_times += late
                late, pages = _late_pages(many)
                many_times += late
        finally:
            few.close()
            many.close()
    baseline, late = float(np.median(few_times)), float(np.median(many_times))
    table(["metrics", "pages", f"late page ms (median of {LIST_ROUNDS} rounds)"],
          [[f"{LIST_BASELINE:,}", base_pages, f"{baseline * 1e3:.2f}"], [f"{total:,}", pages, f"{late * 1e3:.2f}"]])
    value = late / baseline
    report.ratio(f"a late ListMetrics page of {total:,} metrics / of {LIST_BASELINE:,}", value, "<= 2x",
                 value <= 2.0, detail=f"({late * 1e3:.2f} ms / {baseline * 1e3:.2f} ms)")


def run(scale: float) -> Report:
    report = Report("series")
    on_disk(report, scale)
    put_metric_data(report, scale)
    list_metrics(report, scale)
    return report
