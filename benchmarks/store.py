"""The metric store: ingest, bytes on disk, GetMetricStatistics from roll-ups, GetMetricData.

1. Ingest. 4 writer processes, each its own job, each writing 250,000 points (10 metrics, values
   printed with four decimals, a point a second per metric) in batches of 50,000 points, as the
   job writer batches a busy log (``capture.FLUSH_POINTS``), all into one store. Points per second from the first write to
   the last commit, into SQLite and into PostgreSQL (a throwaway server the benchmark starts,
   fsync off, as the tests run it). Baseline: the same processes inserting the same points as a
   row per point (the obvious schema, indexed by job, name and time) into the same backend.
   Target (SQLite): at least 1,000,000 points/s.
   Then maintenance seals the chunks; bytes per point on disk: the sealed chunks alone, and
   the whole SQLite file (roll-ups, indexes and free pages included) after a VACUUM.
   Baseline: the row-per-point table's file. Target: at most 4 bytes per point.
2. GetMetricStatistics over 7 days of 1-second data (604,800 points, one series), Period=3600,
   the five statistics and p99 (two calls: CloudWatch takes Statistics or ExtendedStatistics),
   and over the last day at Period=60, served from the roll-ups. Baseline: the same answer by a
   plain GROUP BY over the raw rows in a table of the same SQLite file (and p99 by a window
   query). Target: at least 10 times faster. The answers are checked against each other. The
   7 days are asked first before any maintenance pass (the data as PutMetricData's writes left
   it: unsealed, rolled up by the writes), then after one: target at most 2x the maintained
   data's time, and the same answer.
3. A running job's statistics: a job an hour and a half in (its first point 55 minutes into an
   hour, 50 points a second of one metric, written 10 s at a time as its supervisor batches them,
   with the maintenance pass its supervisor runs each minute), GetMetricStatistics per minute
   over its whole run (the five statistics and p99), against the same once the job is over and a
   pass has rolled everything up. Target: at most 2x (the running job's last minute or two is
   read from the points as written; the rest from the roll-ups). Checked: the same counts,
   minima and maxima, and p99 within 1%.
4. GetMetricData: 20 queries (15 metrics of different jobs, 5 expressions over them) over the
   metrics of 100 jobs (6 hours of a point every 10 s each), Period=300. Baseline: the 15
   metrics' statistics by plain GROUP BY queries over raw rows in the same file.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from queue import Empty
from typing import Any

import numpy as np

from trainmon.runtime.capture.writer import FLUSH_POINTS

from .common import Report, best_of, checkpointed_bytes, heading, ms, rate, ratio_text, scratch_dir, table

WRITERS = 4
POINTS_PER_WRITER = 250_000
BATCH = FLUSH_POINTS  # what the job writer stores at once when a busy log fills its batch (capture.py)
METRICS = 10
INGEST_TARGET = 1_000_000
BYTES_TARGET = 4.0
SPEEDUP_TARGET = 10.0
UNSEALED_TARGET = 1.0  # data no maintenance pass has sealed: no slower than the GROUP BY over its rows
UNMAINTAINED_TARGET = 2.0  # ... and at most twice the time of the same data once maintained
WEEK_S = 7 * 86_400
RUNNING_S = 5400  # a running job's 1.5 hours ...
RUNNING_RATE = 50  # ... of this many points a second
GMD_JOBS = 100
GMD_HOURS = 6


# -- ingest ---------------------------------------------------------------------------------


def _batches(worker: int, points: int, start_ms: int) -> list[list[tuple[Any, ...]]]:
    rng = np.random.default_rng(worker)
    per_metric = points // METRICS
    curves = [np.round(2 * np.exp(-np.arange(per_metric) / (per_metric / 3)) + rng.normal(0, 0.02, per_metric), 4)
              for _ in range(METRICS)]
    rows = [(f"metric{m}", start_ms + i * 1000, float(curves[m][i]), "algo-1", 0, i * METRICS + m)
            for i in range(per_metric) for m in range(METRICS)]
    return [rows[i:i + BATCH] for i in range(0, len(rows), BATCH)]


def _writer(home: str, url: str, worker: int, points: int, start_ms: int, baseline: bool,
            ready: Any, go: Any, done: Any) -> None:
    from trainmon.store import Batch, open_store

    store = open_store(Path(home), database_url=url)
    job = store.create_job(f"ingest-{worker}", {"TrainingJobStatus": "InProgress"}, time.time())
    stream = store.add_stream(job.id, "algo-1", f"ingest-{worker}/algo-1-0", start_ms)
    batches = [[(*row[:4], stream.id, row[5]) for row in batch] for batch in _batches(worker, points, start_ms)]
    write: Callable[[list[tuple[Any, ...]]], None]
    if baseline:
        write = _row_writer(store, job.id)
    else:
        def write(rows: list[tuple[Any, ...]]) -> None:
            store.write_batch(Batch(job.id, points=rows))
    ready.put(worker)
    go.wait()
    for batch in batches:
        write(batch)
    done.put(time.perf_counter())
    store.close()


_ROW_TABLE = ("CREATE TABLE IF NOT EXISTS bench_points (job_id BIGINT, name TEXT, timestamp_ms BIGINT, "
              "value DOUBLE PRECISION, host TEXT, stream_id BIGINT, seq BIGINT)")


def _row_writer(store: Any, job_id: int) -> Callable[[list[tuple[Any, ...]]], None]:
    """A row per point into the obvious table, one transaction per batch, with the backend's own API."""
    sqlite = store.database_url is None
    insert = "INSERT INTO bench_points VALUES ({})".format(",".join(["?" if sqlite else "%s"] * 7))

    def write(rows: list[tuple[Any, ...]]) -> None:
        with store._write() as db:
            if sqlite:
                db.executemany(insert, [(job_id, *row) for row in rows])
            else:
                with db.cursor().copy("COPY bench_points FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row((job_id, *row))
    return write


def _prepare_rows(home: Path, url: str) -> None:
    from trainmon.store import open_store

    store = open_store(home, database_url=url)
    with store._write() as db:  # type: ignore[attr-defined]
        db.execute(_ROW_TABLE)
        db.execute("CREATE INDEX IF NOT EXISTS bench_points_by_metric ON bench_points (job_id, name, timestamp_ms)")
    store.close()


def _ingest(home: Path, url: str, points: int, baseline: bool) -> float:
    """Points per second from WRITERS processes into one store."""
    context = multiprocessing.get_context("spawn")
    ready, done, go = context.Queue(), context.Queue(), context.Event()
    start_ms = (int(time.time()) - 86_400) * 1000
    workers = [context.Process(target=_writer, args=(str(home), url, w, points, start_ms, baseline, ready, go, done))
               for w in range(WRITERS)]
    for worker in workers:
        worker.start()
    for _ in workers:
        _get(ready, workers)
    began = time.perf_counter()
    go.set()
    ended = max(_get(done, workers) for _ in workers)
    for worker in workers:
        worker.join()
        if worker.exitcode:
            raise RuntimeError(f"a writer failed (exit code {worker.exitcode})")
    return points * WRITERS / (ended - began)


def _get(queue: Any, workers: list[Any]) -> Any:
    """The next message of the writers, or an error as soon as one of them died."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            return queue.get(timeout=0.5)
        except Empty:
            failed = [w.exitcode for w in workers if w.exitcode]
            if failed:
                raise RuntimeError(f"a writer failed (exit code {failed[0]})") from None
    raise RuntimeError("the writers did not finish in 10 minutes")


def ingest(report: Report, scale: float) -> None:
    from trainmon.store import open_store

    points = max(BATCH, int(POINTS_PER_WRITER * scale) // BATCH * BATCH)
    heading(f"Ingest: {WRITERS} writer processes x {points:,} points, batches of {BATCH:,}")
    rows = []
    for backend, url_of in (("SQLite", _sqlite_url), ("PostgreSQL", _postgres_url)):
        with url_of() as target:
            if target is None:
                print(f"  {backend}: skipped (no PostgreSQL server could be started)")
                continue
            with scratch_dir("ingest-") as work:
                home, base_home = work / "home", work / "baseline"
                home.mkdir()
                base_home.mkdir()
                base_url = target(base_home, "baseline")
                url = target(home, "chunks")
                _prepare_rows(base_home, base_url)
                baseline = _ingest(base_home, base_url, points, baseline=True)
                chunked = _ingest(home, url, points, baseline=False)
                rows.append((backend, rate(chunked, 1), rate(baseline, 1), ratio_text(chunked / baseline)))
                store = open_store(home, database_url=url)
                total = _scalar(store, "SELECT sum(count) FROM chunks")
                report.check(total == points * WRITERS, f"{backend}: every point stored ({total:,})")
                if backend == "SQLite":
                    report.absolute("SQLite ingest, points/s", f"{rate(chunked, 1)}/s ({ratio_text(chunked / baseline)} "
                                    "the row-per-point insert)", f">= {rate(INGEST_TARGET, 1)}/s",
                                    chunked >= INGEST_TARGET)
                    store.close()
                    store = open_store(home, database_url=url)
                    _bytes_per_point(report, store, home, base_home, points * WRITERS)
                else:
                    report.ratio("PostgreSQL ingest vs row-per-point COPY", chunked / baseline,
                                 detail=f"{rate(chunked, 1)} points/s")
                store.close()
    table(["backend", "chunks, points/s", "row per point, points/s", "ratio"], rows)


def _bytes_per_point(report: Report, store: Any, home: Path, base_home: Path, points: int) -> None:
    store.maintain(int(time.time() * 1000) + 3_600_000)
    chunk_bytes = _scalar(store, "SELECT sum(length(data) + coalesce(length(overview), 0)) FROM chunks")
    sealed = _scalar(store, "SELECT sum(count) FROM chunks WHERE sealed = 1")
    report.check(sealed == points, f"every point is in a sealed chunk after maintenance ({sealed:,})")
    whole = checkpointed_bytes(home)
    baseline = checkpointed_bytes(base_home)
    print(f"  sealed chunks {chunk_bytes / points:.2f} bytes/point (their overviews for charts included); whole file {whole / points:.2f} "
          f"(roll-ups, indexes and free pages included, no VACUUM); row per point {baseline / points:.1f}")
    report.absolute("SQLite bytes per point, sealed chunks", f"{chunk_bytes / points:.2f} "
                    f"({ratio_text(chunk_bytes / baseline)} the row-per-point file)", f"<= {BYTES_TARGET:g}",
                    chunk_bytes / points <= BYTES_TARGET, detail=f"whole file {whole / points:.2f} bytes/point")


def _scalar(store: Any, sql: str) -> Any:
    return store._read(sql)[0][0]


@contextmanager
def _sqlite_url() -> Iterator[Callable[[Path, str], str] | None]:
    yield lambda home, name: ""


@contextmanager
def _postgres_url() -> Iterator[Callable[[Path, str], str] | None]:
    try:
        from tests.conftest import POSTGRES_BIN, postgres_cluster
    except ImportError:
        yield None
        return
    if not (POSTGRES_BIN / "initdb").exists():
        yield None
        return
    with postgres_cluster() as server:
        def database(home: Path, name: str) -> str:
            server.admin(f"CREATE DATABASE {name} TEMPLATE template0")
            return server.url(name)
        yield database


# -- GetMetricStatistics --------------------------------------------------------------------


def _plain_statistics(db: sqlite3.Connection, start_ms: int, end_ms: int, period_ms: int) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT (timestamp_ms - ?) / ? AS slot, count(*), avg(value), sum(value), min(value), max(value) "
        "FROM bench_raw WHERE timestamp_ms >= ? AND timestamp_ms < ? GROUP BY slot ORDER BY slot",
        (start_ms, period_ms, start_ms, end_ms)).fetchall()


def _plain_p99(db: sqlite3.Connection, start_ms: int, end_ms: int, period_ms: int) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT slot, value FROM (SELECT (timestamp_ms - ?) / ? AS slot, value, "
        "row_number() OVER (PARTITION BY (timestamp_ms - ?) / ? ORDER BY value) AS rank, "
        "count(*) OVER (PARTITION BY (timestamp_ms - ?) / ?) AS n "
        "FROM bench_raw WHERE timestamp_ms >= ? AND timestamp_ms < ?) WHERE rank = CAST(0.99 * (n - 1) AS INTEGER) + 1 "
        "ORDER BY slot",
        (start_ms, period_ms, start_ms, period_ms, start_ms, period_ms, start_ms, end_ms)).fetchall()


def get_metric_statistics(report: Report, scale: float) -> None:
    from trainmon.cloudwatch.model import MetricKey
    from trainmon.cloudwatch.statistics import Sample
    from trainmon.sdk.clients import CloudWatchClient
    from trainmon.store import open_store

    seconds = max(86_400, int(WEEK_S * scale))
    heading(f"GetMetricStatistics: {seconds:,} points of 1-second data, one series")
    with scratch_dir("statistics-") as home:
        store = open_store(home, database_url="")
        now = int(time.time())
        end = now // 3600 * 3600
        start = end - seconds
        rng = np.random.default_rng(7)
        stamps = np.arange(start, end, dtype=np.int64) * 1000
        values = np.round(rng.lognormal(3, 0.6, len(stamps)), 3)
        key = MetricKey("Bench", "Latency", (("Service", "api"),))
        for first in range(0, len(stamps), 100_000):
            store.put_samples([(key, 1, [Sample(t, 1.0, v, v, v, v, "Milliseconds") for t, v in
                                         zip(stamps[first:first + 100_000].tolist(),
                                             values[first:first + 100_000].tolist(), strict=True)])])
        with store._write() as db:  # type: ignore[attr-defined]
            db.execute("CREATE TABLE bench_raw (timestamp_ms INTEGER NOT NULL, value REAL NOT NULL)")
            db.executemany("INSERT INTO bench_raw VALUES (?, ?)", zip(stamps.tolist(), values.tolist(), strict=True))
            db.execute("CREATE INDEX bench_raw_by_time ON bench_raw (timestamp_ms)")
        client = CloudWatchClient(store)
        db = sqlite3.connect(home / "trainmon.db")
        rows: list[tuple[str, ...]] = []
        unsealed = ("7 days, Period=3600, unsealed", start, 3600, UNSEALED_TARGET)
        unmaintained_s, unmaintained = _compare_statistics(report, client, db, rows, *unsealed, end)
        began = time.perf_counter()
        done = store.maintain(now * 1000)
        print(f"  maintenance (seal {done.sealed_points:,} points; roll up {done.rolled_series} series, the writes "
              f"rolled the rest up): {time.perf_counter() - began:.2f} s")
        maintained_s, maintained = _compare_statistics(report, client, db, rows, "7 days, Period=3600", start, 3600,
                                                       SPEEDUP_TARGET, end)
        _compare_statistics(report, client, db, rows, "1 day, Period=60", end - 86_400, 60, SPEEDUP_TARGET, end)
        table(["range", "trainmon, ms", "GROUP BY, ms", "+ p99 window, ms", "speed-up"], rows)
        report.check(unmaintained == maintained, "7 days, Period=3600: the same answer before maintenance and after")
        report.ratio("GetMetricStatistics 7 days, Period=3600, 5 statistics + p99: unmaintained data time / "
                     "maintained data time", unmaintained_s / maintained_s, f"<= {UNMAINTAINED_TARGET:g}x",
                     unmaintained_s / maintained_s <= UNMAINTAINED_TARGET,
                     detail=f"{ms(unmaintained_s)} ms vs {ms(maintained_s)} ms")
        db.close()
        store.close()


def _compare_statistics(report: Report, client: Any, db: sqlite3.Connection, rows: list[tuple[str, ...]], label: str,
                        first: int, period: int, target: float, end: int) -> tuple[float, Any]:
    """GetMetricStatistics (5 statistics, then p99) against the plain GROUP BY and window query: its
    time and its answer."""
    request = dict(Namespace="Bench", MetricName="Latency", Dimensions=[{"Name": "Service", "Value": "api"}],
                   StartTime=first, EndTime=end, Period=period)
    first_ms, period_ms = first * 1000, period * 1000
    ours_s, (stats, p99) = best_of(5, lambda: _statistics_and_p99(client, request))
    plain_s, plain = best_of(3, lambda: _plain_statistics(db, first_ms, end * 1000, period_ms))
    window_s, plain_p99 = best_of(3, lambda: _plain_p99(db, first_ms, end * 1000, period_ms))
    same = len(stats) == len(plain) == len(p99) == len(plain_p99) and all(
        s["SampleCount"] == row[1] and math.isclose(s["Sum"], row[3], rel_tol=1e-9)
        and s["Minimum"] == row[4] and s["Maximum"] == row[5]
        and abs(q["ExtendedStatistics"]["p99"] - exact[1]) <= 0.01 * exact[1]
        for s, row, q, exact in zip(stats, plain, p99, plain_p99, strict=False))
    report.check(same, f"{label}: trainmon's answer is the GROUP BY's (p99 within 1%)")
    baseline = plain_s + window_s
    rows.append((label, ms(ours_s), ms(plain_s), ms(baseline), ratio_text(baseline / ours_s)))
    report.ratio(f"GetMetricStatistics {label}, 5 statistics + p99: plain GROUP BY time / trainmon time",
                 baseline / ours_s, f">= {target:g}x", baseline / ours_s >= target,
                 detail=f"{ms(ours_s)} ms vs {ms(baseline)} ms")
    return ours_s, (stats, p99)


def _statistics_and_p99(client: Any, request: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """GetMetricStatistics' datapoints with the five statistics, then with p99 (CloudWatch takes
    Statistics or ExtendedStatistics, not both)."""
    from trainmon.cloudwatch.statistics import STATISTICS

    return (client.get_metric_statistics(**request, Statistics=list(STATISTICS))["Datapoints"],
            client.get_metric_statistics(**request, ExtendedStatistics=["p99"])["Datapoints"])


# -- a running job's statistics --------------------------------------------------------------


def running_job(report: Report, scale: float) -> None:
    from trainmon.cloudwatch.retention import parse
    from trainmon.sdk.clients import CloudWatchClient
    from trainmon.server.app import DECODED_BYTES
    from trainmon.store import Batch, codec, open_store

    rate_s = max(10, int(RUNNING_RATE * scale))
    heading(f"GetMetricStatistics of a running job: 1.5 h of {rate_s} points/s, Period=60, 5 statistics + p99")
    with scratch_dir("running-") as home:
        store = open_store(home, database_url="", retention=parse("forever"))
        first = (int(time.time()) // 3600 - 3) * 3600 + 3300  # 55 minutes into an hour
        now = first + RUNNING_S
        job = store.create_job("running", {"TrainingJobStatus": "InProgress"}, first)
        stream = store.add_stream(job.id, "algo-1", "running/algo-1-0", first * 1000)
        rng = np.random.default_rng(9)
        count = RUNNING_S * rate_s
        stamps = (first * 1000 + np.arange(count, dtype=np.int64) * 1000 // rate_s).tolist()
        values = np.round(2 * np.exp(-np.arange(count) / count) + rng.normal(0, 0.02, count), 4).tolist()
        points = [("loss", t, v, "algo-1", stream.id, i) for i, (t, v) in enumerate(zip(stamps, values, strict=True))]
        step = rate_s * 10
        for low in range(0, count, step):
            store.write_batch(Batch(job.id, points=points[low:low + step]))
            if low % (rate_s * 60) == 0:  # its supervisor's pass a minute
                store.maintain(points[min(count, low + step) - 1][1] + 1)
        store.maintain(now * 1000)
        client = CloudWatchClient(store)
        request = dict(Namespace="/aws/sagemaker/TrainingJobs", MetricName="loss", StartTime=first,
                       EndTime=now + 60, Period=60, Dimensions=[{"Name": "TrainingJobName", "Value": "running"}])
        budget, codec.decoded.budget = codec.decoded.budget, DECODED_BYTES  # chunks read again taken as decoded,
        try:  # as a server's requests take them
            running_s, running = best_of(5, lambda: _statistics_and_p99(client, request))
            store.maintain((now + 7200) * 1000)  # the job over: everything rolled up
            over_s, over = best_of(5, lambda: _statistics_and_p99(client, request))
        finally:
            codec.decoded.budget = budget
        report.check(len(running[0]) == len(over[0]) == RUNNING_S // 60 and all(
            a["SampleCount"] == b["SampleCount"] and a["Minimum"] == b["Minimum"] and a["Maximum"] == b["Maximum"]
            for a, b in zip(running[0], over[0], strict=True)) and all(
            abs(a["ExtendedStatistics"]["p99"] - b["ExtendedStatistics"]["p99"]) <= 0.01 * b["ExtendedStatistics"]["p99"]
            for a, b in zip(running[1], over[1], strict=True)), "the running job's answer is the finished one's")
        table(["", "ms"], [("running, 1.5 h in", ms(running_s)), ("over, rolled up", ms(over_s))])
        report.ratio("GetMetricStatistics of a job 1.5 h in, Period=60, 5 statistics + p99: running / rolled up",
                     running_s / over_s, f"<= {UNMAINTAINED_TARGET:g}x", running_s / over_s <= UNMAINTAINED_TARGET,
                     detail=f"{ms(running_s)} ms vs {ms(over_s)} ms")
        store.close()


# -- GetMetricData --------------------------------------------------------------------------


def get_metric_data(report: Report, scale: float) -> None:
    from trainmon.sdk.clients import CloudWatchClient
    from trainmon.store import Batch, open_store

    jobs = max(20, int(GMD_JOBS * scale))
    heading(f"GetMetricData: 20 queries over {jobs} jobs' metrics ({GMD_HOURS} h, a point every 10 s)")
    with scratch_dir("metric-data-") as home:
        store = open_store(home, database_url="")
        end = int(time.time()) // 300 * 300
        start = end - GMD_HOURS * 3600
        rng = np.random.default_rng(8)
        raw = []
        for number in range(jobs):
            job = store.create_job(f"job-{number:03d}", {"TrainingJobStatus": "Completed"}, time.time())
            stream = store.add_stream(job.id, "algo-1", f"job-{number:03d}/algo-1-0", start * 1000)
            stamps = list(range(start * 1000, end * 1000, 10_000))
            loss = np.round(2 * np.exp(-np.arange(len(stamps)) / 800) + rng.normal(0, 0.02, len(stamps)), 4).tolist()
            store.write_batch(Batch(job.id, points=[("train:loss", t, v, "algo-1", stream.id, i)
                                                    for i, (t, v) in enumerate(zip(stamps, loss, strict=True))]))
            raw.extend((number, t, v) for t, v in zip(stamps, loss, strict=True))
        with store._write() as db:  # type: ignore[attr-defined]
            db.execute("CREATE TABLE bench_raw (job INTEGER, timestamp_ms INTEGER, value REAL)")
            db.executemany("INSERT INTO bench_raw VALUES (?, ?, ?)", raw)
            db.execute("CREATE INDEX bench_raw_by_job ON bench_raw (job, timestamp_ms)")
        store.maintain(int(time.time() * 1000))
        chosen = [number * jobs // 15 for number in range(15)]
        queries: list[dict[str, Any]] = [{
            "Id": f"m{i}", "ReturnData": i < 5,
            "MetricStat": {"Metric": {"Namespace": "/aws/sagemaker/TrainingJobs", "MetricName": "train:loss",
                                      "Dimensions": [{"Name": "TrainingJobName", "Value": f"job-{number:03d}"}]},
                           "Period": 300, "Stat": ("Average", "Maximum", "p90")[i % 3]},
        } for i, number in enumerate(chosen)]
        queries += [{"Id": "mean", "Expression": "AVG(METRICS())"}, {"Id": "worst", "Expression": "MAX(METRICS())"},
                    {"Id": "gap", "Expression": "m1 - m0"}, {"Id": "speed", "Expression": "RATE(m3)"},
                    {"Id": "filled", "Expression": "FILL(m4, 0)"}]
        client = CloudWatchClient(store)

        def ours() -> dict[str, Any]:
            return client.get_metric_data(MetricDataQueries=queries, StartTime=start, EndTime=end)

        db = sqlite3.connect(home / "trainmon.db")

        def plain() -> list[Any]:
            return [db.execute("SELECT (timestamp_ms - ?) / 300000 AS slot, avg(value), max(value) FROM bench_raw "
                               "WHERE job = ? AND timestamp_ms >= ? AND timestamp_ms < ? GROUP BY slot",
                               (start * 1000, number, start * 1000, end * 1000)).fetchall() for number in chosen]

        ours_s, answer = best_of(5, ours)
        plain_s, rows = best_of(3, plain)
        results = {r["Id"]: r for r in answer["MetricDataResults"]}
        expected = [row[1] for row in sorted(rows[0])]
        report.check(len(answer["MetricDataResults"]) == 10 and all(r["StatusCode"] == "Complete" for r in answer[
            "MetricDataResults"]) and np.allclose(results["m0"]["Values"][::-1], expected, rtol=1e-9),
            "20 queries answered, m0 equal to the GROUP BY's averages")
        table(["", "ms"], [("GetMetricData, 20 queries", ms(ours_s)), ("15 plain GROUP BY queries", ms(plain_s))])
        report.ratio("GetMetricData 20 queries over 100 jobs: 15 plain GROUP BY queries' time / trainmon time",
                     plain_s / ours_s, detail=f"{ms(ours_s)} ms vs {ms(plain_s)} ms")
        db.close()
        store.close()


def run(scale: float) -> Report:
    report = Report("store")
    os.environ.pop("TRAINMON_RETENTION", None)
    ingest(report, scale)
    get_metric_statistics(report, scale)
    running_job(report, scale)
    get_metric_data(report, scale)
    return report
