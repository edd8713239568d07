"""Report: how long the profiling report of a 10-hour job profiled every 100 ms takes, against reading its profile.

A synthetic but realistic host (the monitor benchmark's: 8 cores, 2 GPUs, 25 values a tick, made
with the monitor's own formulas) is profiled for 10 hours at 100 ms: 360,000 ticks, 9,000,000
rows, written by the profiler's own ``ProfileWriter`` as 600 files of a minute (made once, cached
in benchmarks/.data/). A job in a fresh SQLite store names that profile, with a step metric and a
loss printed every second (36,000 records), ExplodingTensor and CPUBottleneck configured and a
CPUBottleneck finding recorded. Timed in the same run, in turns, each the best of 5:

- baseline: reading every file of the profile with pyarrow (``pyarrow.parquet.read_table``, the
  metric names as the dictionary the file holds) and its three columns into NumPy arrays: the
  least any report of the profile has to do;
- report: ``trainmon.report.write_job_report`` of the job, to a file.

Figure: **report / reading the profile** (target **at most 3x**), with both in seconds and the
page's size. Informational: a 10-second job's report (100 ticks), target **under 0.3 s** (what
the ProfilerReport rule adds to the end of every profiled job). Checks: the report has every
section; its System Usage figures (samples, max and min of each metric) are those pyarrow's
group-by computes from the files.

Run alone: ``python3 -m benchmarks.report``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from .common import Report, best_of, data_dir, heading, ratio_text, scratch_dir, table, timed
from .monitor import CORES, GPUS, HOST, TICKS_PER_FILE, synthetic_rows

HOURS = 10
TICKS_PER_HOUR = 36_000
JOB = "report-bench"
TARGET_RATIO = 3.0
TARGET_SMALL_S = 0.3
REPEATS = 5
FORMAT_VERSION = 1


def _profile(ticks: int) -> tuple[str, int, int]:
    """The cached profile of ``ticks`` ticks: (location, first and last timestamp in ms)."""
    from trainmon.store.profiles import Profile, ProfileWriter

    location = data_dir() / f"report-profile-{ticks}-v{FORMAT_VERSION}"
    done = location / "complete"
    if done.exists():
        first, last = (int(v) for v in done.read_text().split())
        return str(location), first, last
    shutil.rmtree(location, ignore_errors=True)
    started = time.perf_counter()
    writer = ProfileWriter(str(location), JOB, rotate_s=float("inf"))  # rotated by simulated time below
    first = last = 0
    for tick, (stamp_ms, row) in enumerate(synthetic_rows(ticks), 1):
        writer.add(HOST, stamp_ms, row)
        first, last = first or stamp_ms, stamp_ms
        if tick % TICKS_PER_FILE == 0:
            writer.flush()
    writer.close()
    if writer.failed is not None:
        raise RuntimeError(f"the profile could not be written: {writer.failed!r}")
    files = len(Profile(JOB, str(location)).files())
    print(f"  generated {writer.samples_written:,} rows in {files} files in {time.perf_counter() - started:.0f} s "
          f"(cached in {location})")
    done.write_text(f"{first} {last}")
    return str(location), first, last


def _job(store: Any, location: str, first_ms: int, last_ms: int, name: str = JOB) -> None:
    """The job that names the profile: profiled at 100 ms, its steps and loss every second, two rules, a finding."""
    from trainmon.api.sagemaker import register_job
    from trainmon.jobs import rulestatus
    from trainmon.runtime.job.jobstate import set_status
    from trainmon.store import Batch

    row = register_job(store, {
        "TrainingJobName": name,
        "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["python3", "train.py"],
                                   "MetricDefinitions": [{"Name": "step", "Regex": r"step=(\d+)"},
                                                         {"Name": "train:loss", "Regex": r"loss=(\S+)"}]},
        "ProfilerConfig": {"S3OutputPath": location, "ProfilingIntervalInMilliseconds": 100},
        "DebugRuleConfigurations": [{"RuleConfigurationName": "ExplodingTensor", "RuleEvaluatorImage": "local",
                                     "RuleParameters": {"rule_to_invoke": "ExplodingTensor"}}],
        "ProfilerRuleConfigurations": [{"RuleConfigurationName": "CPUBottleneck", "RuleEvaluatorImage": "local",
                                        "RuleParameters": {"rule_to_invoke": "CPUBottleneck"}}],
    })
    start_s = first_ms / 1000 - 5
    set_status(store, name, "Downloading", at=start_s)
    set_status(store, name, "Training", at=start_s)
    stream = store.add_stream(row.id, HOST, f"{name}/{HOST}-1", int(start_s * 1000))
    seconds = max(2, (last_ms - first_ms) // 1000)
    for begin in range(0, seconds, 10_000):
        steps = range(begin, min(begin + 10_000, seconds))
        stamps = [first_ms + 1000 * step for step in steps]
        points = [point for seq, stamp in zip(steps, stamps, strict=True)
                  for point in (("step", stamp, float(seq), HOST, stream.id, seq),
                                ("train:loss", stamp, 2.0 / (1 + seq / 100), HOST, stream.id, seq))]
        store.write_batch(Batch(row.id, chunks=[(stream.id, steps[0], len(steps), stamps[0], "\n".join(
            f"step={seq}" for seq in steps))], points=points, stream_stats={stream.id: (len(steps), 8, stamps[-1])}))

    def found(job: Any) -> None:
        rulestatus.add_finding(job.doc, {"RuleConfigurationName": "CPUBottleneck", "RuleName": "CPUBottleneck",
                                         "Host": HOST, "Time": first_ms / 1000 + 60, "Message": "GPU idle, CPU busy",
                                         "Values": {}, "Thresholds": {}}, first_ms / 1000 + 60)

    store.update_job(name, found)
    set_status(store, name, "Completed", at=last_ms / 1000 + 30)


def _read_profile(files: list[str]) -> list[Any]:
    """The baseline: every file read with pyarrow, its columns made NumPy arrays."""
    import pyarrow.parquet as pq

    tables = []
    for name in files:
        table = pq.read_table(name, read_dictionary=["metric"])  # the names as the file keeps them: a dictionary
        table.column("timestamp_ms").to_numpy()
        table.column("value").to_numpy()
        table.column("metric").combine_chunks().indices.to_numpy()
        tables.append(table)
    return tables


def _check_usage(report: Report, html: str, tables: list[Any]) -> None:
    """The report's System Usage figures against pyarrow's group-by over the same files."""
    import pyarrow as pa

    from trainmon.report.analysis import profile_unit
    from trainmon.report.text import quantity

    joined = pa.concat_tables([t.cast(pa.schema([("timestamp_ms", pa.int64()), ("metric", pa.string()),
                                                 ("value", pa.float64())])) for t in tables])
    grouped = joined.group_by("metric").aggregate([("value", "count"), ("value", "max"), ("value", "min")])
    wrong = []
    for metric, count, high, low in zip(*(grouped.column(c).to_pylist() for c in ("metric", "value_count",
                                                                                  "value_max", "value_min")),
                                        strict=True):
        unit = profile_unit(metric)
        cells = re.search(rf"<tr><td>{HOST}</td><td>{metric}</td><td>[^<]*</td><td>([^<]*)</td>"
                          rf"(?:<td>[^<]*</td>){{3}}<td>([^<]*)</td><td>(\d+)</td></tr>", html)
        if cells is None or cells.groups() != (quantity(high, unit), quantity(low, unit), str(count)):
            wrong.append(metric)
    report.check(not wrong and grouped.num_rows == 25, f"System Usage holds the samples, max and min pyarrow gives "
                 f"for each of the {grouped.num_rows} metrics (wrong: {wrong or 'none'})")


def run(scale: float = 1.0) -> Report:
    from trainmon.report import write_job_report
    from trainmon.report.page import SECTIONS
    from trainmon.store import open_store
    from trainmon.store.profiles import Profile

    report = Report("report")
    ticks = max(TICKS_PER_FILE, int(HOURS * TICKS_PER_HOUR * scale) // TICKS_PER_FILE * TICKS_PER_FILE)
    hours = ticks / TICKS_PER_HOUR
    heading(f"Report: a {hours:g}-hour job profiled every 100 ms ({ticks:,} ticks, {CORES} cores, {GPUS} GPUs, "
            f"{ticks * 25:,} rows), against reading its profile with pyarrow")
    location, first_ms, last_ms = _profile(ticks)
    files = Profile(JOB, location).files()
    with scratch_dir("report-") as work:
        store = open_store(work / "home")
        try:
            _job(store, location, first_ms, last_ms)
            output = str(work / "report.html")
            baselines, reports = [], []
            for _ in range(REPEATS):  # taken in turns, so a busy moment of the machine does not fall on one alone
                baselines.append(timed(lambda: _read_profile(files)))
                reports.append(timed(lambda: write_job_report(store, JOB, output))[0])
            baseline_s, tables = min(baselines, key=lambda run: run[0])
            report_s = min(reports)
            html = Path(output).read_text(encoding="utf-8")
            small_s = _small_job(store, work)
        finally:
            store.close()
    table(["", "seconds", "rows/s"], [["reading the profile (baseline)", f"{baseline_s:.2f}",
                                       f"{ticks * 25 / baseline_s:,.0f}"],
                                      ["report", f"{report_s:.2f}", f"{ticks * 25 / report_s:,.0f}"]])
    charts = html.count('<figure class="chart"')
    print(f"  the page: {len(html) / 1e6:.2f} MB, {charts} charts")
    missing = [key for key, _ in SECTIONS if f'<section id="{key}">' not in html]
    report.check(not missing, f"the report has every section (missing: {missing or 'none'})")
    _check_usage(report, html, tables)
    ratio = report_s / baseline_s
    report.ratio("report / reading the profile", ratio, f"<= {TARGET_RATIO:g}x", ratio <= TARGET_RATIO,
                 f"{report_s:.2f} s against {baseline_s:.2f} s")
    report.absolute("a 10-second job's report", f"{small_s * 1000:.0f} ms", f"< {TARGET_SMALL_S * 1000:.0f} ms",
                    small_s < TARGET_SMALL_S, f"({ratio_text(small_s / report_s)} of the 10-hour one's)")
    return report


def _small_job(store: Any, work: Path) -> float:
    """The best of 5 reports of a 10-second job (100 ticks): what the ProfilerReport rule costs a short job."""
    from trainmon.report import write_job_report
    from trainmon.store.profiles import ProfileWriter

    location = str(work / "small-profile")
    writer = ProfileWriter(location, "small-job", rotate_s=float("inf"))
    first = last = 0
    for stamp_ms, row in synthetic_rows(100):
        writer.add(HOST, stamp_ms, row)
        first, last = first or stamp_ms, stamp_ms
    writer.close()
    _job(store, location, first, last, "small-job")
    seconds, _ = best_of(5, lambda: write_job_report(store, "small-job", str(work / "small.html")))
    return seconds


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.report")
    parser.add_argument("--scale", type=float, default=1.0)
    arguments = parser.parse_args()
    sys.exit(1 if run(arguments.scale).failures else 0)
