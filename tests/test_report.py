"""The profiling report (trainmon.report, ``trainmon report``): its figures on a known profile, a real
profiled job's report opened in headless Chromium (every section, the host rows, charts drawn, a
finding marked, no request leaving the file), and the reports of a running job without a profile."""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trainmon import report
from trainmon.api.sagemaker import register_job
from trainmon.clock import ManualClock
from trainmon.jobs import rulestatus
from trainmon.jobs.status import TERMINAL
from trainmon.report import analysis, charts
from trainmon.report.gather import gather
from trainmon.report.page import SECTIONS
from trainmon.report.sources import read_system_metrics
from trainmon.report.text import clock as clock_text
from trainmon.runtime.job.jobstate import set_status
from trainmon.store import Batch, Store, profiles

from .conftest import PY, run_cli

Script = Callable[[str], Path]
CHROMIUM = os.environ.get("TRAINMON_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--disable-default-apps", "--disable-domain-reliability", "--no-pings",
                  "--no-first-run", "--disable-breakpad"]
WAIT_S = 60.0
SCREENSHOT = Path("/tmp/report-job.png")


# -- the figures, pure ---------------------------------------------------------------------------


def test_step_intervals_share_an_interval_among_its_steps_and_restart_with_a_counter() -> None:
    stamps = np.array([0, 1000, 1000, 3000, 4000, 4500], np.int64)
    values = np.array([0.0, 10.0, 10.0, 30.0, 0.0, 1.0])  # every 10th step printed (twice once), then a new epoch
    ends, per_step, count = analysis.step_intervals(stamps, values)
    assert ends.tolist() == [1000, 3000, 4000, 4500]
    assert per_step.tolist() == [0.1, 0.1, 1.0, 0.5] and count.tolist() == [10, 20, 1, 1]
    durations = analysis.step_durations(per_step, count)
    assert len(durations) == 32 and durations.sum() == pytest.approx(4.5)
    assert analysis.step_intervals(np.array([0, 5], np.int64), np.array([3.0, math.nan]))[0].size == 0


def test_periods_last_until_the_next_row_and_join_across_a_pixel() -> None:
    stamps = np.arange(0, 1000, 100, dtype=np.int64)
    held = np.array([1, 1, 0, 1, 0, 0, 0, 1, 1, 1], bool)
    assert analysis.periods(stamps, held) == [analysis.Period(0, 200), analysis.Period(300, 400),
                                              analysis.Period(700, 1000)]
    assert analysis.periods(stamps, held, merge_ms=100) == [analysis.Period(0, 400), analysis.Period(700, 1000)]


def test_a_series_is_aligned_to_other_rows_by_its_latest_value() -> None:
    own = (np.array([100, 300], np.int64), np.array([1.0, 3.0]))
    assert analysis.at(np.array([50, 100, 200, 300, 400], np.int64), own).tolist()[1:] == [1.0, 1.0, 3.0, 3.0]
    assert math.isnan(analysis.at(np.array([50], np.int64), own)[0])


def test_step_metric_is_a_rules_step_metric_or_a_common_name() -> None:
    assert analysis.step_metric(["loss", "train:global_step", "epoch"]) == "train:global_step"
    assert analysis.step_metric(["loss", "Iteration", "step"]) == "step"
    assert analysis.step_metric(["loss", "n"], preferred=["n"]) == "n"
    assert analysis.step_metric(["loss", "epoch"]) is None


def test_a_profile_file_in_any_row_order_is_read_per_metric_in_time_order(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trainmon.report.sources import read_profile

    directory = tmp_path / "job" / "algo-1"
    directory.mkdir(parents=True)
    for first, stamps in ((0, [30, 10, 20, 10]), (1, [40, 50, 40, 50])):  # rows not sorted by metric (or time)
        pq.write_table(pa.table({"timestamp_ms": pa.array(stamps, pa.int64()),
                                 "metric": pa.array(["b", "a", "b", "b"] if first == 0 else ["a", "b", "b", "a"]),
                                 "value": pa.array([3.0, 1.0, 2.0, 1.5] if first == 0 else [4.0, 5.0, 6.0, 7.0])}),
                       directory / f"{first}-x.parquet")
    read = read_profile(str(tmp_path), "job")
    metrics = read.readings["algo-1"].metrics
    assert read.unreadable == [] and sorted(metrics) == ["a", "b"] and (read.rows, read.left_out) == (8, 0)
    assert metrics["a"][0].tolist() == [10, 40, 50] and metrics["a"][1].tolist() == [1.0, 4.0, 7.0]
    assert metrics["b"][0].tolist() == [10, 20, 30, 40, 50] and metrics["b"][1].tolist() == [1.5, 2.0, 3.0, 6.0, 5.0]


def test_a_chart_of_a_million_points_keeps_its_spike_and_stays_small() -> None:
    stamps = np.arange(1_000_000, dtype=np.int64) * 10
    values = np.ones(1_000_000)
    values[777_777] = 100.0
    svg = charts.chart("spiky", [charts.Line("v", stamps, values)], start_ms=0, end_ms=10_000_000)
    drawn = int(re.search(r'data-points="(\d+)"', svg).group(1))  # type: ignore[union-attr]
    assert drawn <= 4 * charts.PLOT_W and len(svg) < 200_000
    path = re.search(r'<path class="series s0" d="([^"]+)"', svg).group(1)  # type: ignore[union-attr]
    ys = [float(y) for y in re.findall(r"[ML][\d.]+ ([\d.]+)", path)]
    assert min(ys) < charts.TOP + charts.PLOT_H / 10  # the one spike reaches the top of the plot


HOSTILE_VALUES = [[0.3, 0.30000000000000004], [1.0, 1.0000000000000002], [-1e308, 1e308], [1.7e308, 1.7e308],
                  [-5e-324, 5e-324], [math.nan, math.inf, -math.inf], [math.nan], [], [42.0], [7.0] * 100_000,
                  [-math.inf, 1e-300, 1.79e308]]


@pytest.mark.timeout(30)  # each of these hung (or raised OverflowError) before
def test_charts_of_hostile_values_and_times_end_with_bounded_axes() -> None:
    spans = [(0, 1000), (-2**62, 2**62), (0, 1), (1_700_000_000_000, 1_700_000_000_001)]
    for values in HOSTILE_VALUES:
        for start, end in spans:
            stamps = np.linspace(start, end, len(values)).astype(np.int64)
            markers = [charts.Marker(start, "m", values[0] if values else None)]
            svg = charts.chart("t", [charts.Line("v", stamps, np.asarray(values, np.float64))], start_ms=start,
                               end_ms=end, markers=markers, bands=[charts.Band(start, end, "cpu", "b")])
            numbers = re.findall(r' (?:x|y|x1|x2|y1|y2|cx|cy|width)="([^"]*)"', svg)
            numbers += re.findall(r"[ML]([-\d.]+) ([-\d.]+)", svg)[0] if "<path" in svg else []
            assert numbers and all(math.isfinite(float(n)) for n in numbers), (values[:3], start)
            assert svg.count('class="grid"') <= charts.MAX_TICKS and svg.count('class="tick"') <= charts.MAX_TICKS
    flat = charts.chart("t", [charts.Line("v", np.array([0, 1]), np.array([0.3, 0.30000000000000004]))],
                        start_ms=0, end_ms=1000)
    assert 2 <= flat.count('class="grid"') <= 6  # a band around the one value, with its ticks
    assert clock_text(1e300) == "1e+300 s after the epoch" and clock_text(math.nan) == "NaN s after the epoch"


# -- a known profile ---------------------------------------------------------------------------------

T0_S = float(int(time.time()))
TICKS = 600  # a minute at 100 ms
STEP_TIMES_S = [20.0 + 0.5 * k for k in range(40)] + [20.0 + 0.5 * 39 + 2.5]  # 39 steps of 0.5 s, then one of 2.5 s


def _tick_values(i: int) -> dict[str, dict[str, float]]:
    """Each host's row at tick i: algo-1 CPU-bound for 10 s, then waiting for I/O for 5 s, with idle GPUs;
    algo-2 has no GPU."""
    gpu_idle = i < 150
    return {
        "algo-1": {"cpu0_utilization_pct": 95.0 if i < 100 else 20.0, "cpu1_utilization_pct": 97.0 if i < 100 else 10.0,
                   "cpu_iowait_pct": 60.0 if 100 <= i < 150 else 1.0,
                   "gpu0_utilization_pct": 0.0 if gpu_idle else 90.0, "gpu1_utilization_pct": 5.0 if gpu_idle else 70.0,
                   "gpu0_memory_used_pct": i / 10, "gpu1_memory_used_pct": 20.0,
                   "job_resident_bytes": float(2**30 + i)},
        "algo-2": {"cpu0_utilization_pct": 50.0 + i % 7, "cpu_iowait_pct": 2.0},
    }


@pytest.fixture
def known(store: Store, tmp_path: Path) -> str:
    """A profiled two-host job of a minute, stored, with a profile written by the profiler's own writer,
    a step metric with known step times, a NaN loss and a CPUBottleneck finding."""
    location = str(tmp_path / "profiles")
    row = register_job(store, {
        "TrainingJobName": "known",
        "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["true"], "MetricDefinitions": [
            {"Name": "loss", "Regex": r"loss=(\S+)"}, {"Name": "step", "Regex": r"step=(\d+)"}]},
        "ResourceConfig": {"InstanceType": "local", "InstanceCount": 2, "VolumeSizeInGB": 0},
        "ProfilerConfig": {"S3OutputPath": location, "ProfilingIntervalInMilliseconds": 100},
        "ProfilerRuleConfigurations": [{"RuleConfigurationName": "CPUBottleneck", "RuleEvaluatorImage": "any",
                                        "RuleParameters": {"rule_to_invoke": "CPUBottleneck", "cpu_threshold": "80"}}],
    })
    set_status(store, "known", "Downloading", at=T0_S)
    set_status(store, "known", "Training", at=T0_S)
    clock = ManualClock(wall_s=T0_S)
    writer = profiles.ProfileWriter(location, "known", clock=clock)
    for i in range(TICKS):
        for host, values in _tick_values(i).items():
            writer.add(host, int(T0_S * 1000) + 100 * i, values)
        clock.advance(0.1)
    writer.close()
    assert writer.failed is None and len(profiles.Profile("known", location).files()) >= 2
    stream = store.add_stream(row.id, "algo-1", "known/algo-1-1", 0)
    points = []
    for seq, at_s in enumerate(STEP_TIMES_S):
        stamp = int((T0_S + at_s) * 1000)
        points += [("step", stamp, float(seq), "algo-1", stream.id, seq),
                   ("loss", stamp, None if seq == 30 else 1 / (1 + seq), "algo-1", stream.id, seq)]
    store.write_batch(Batch(row.id, chunks=[(stream.id, 0, len(STEP_TIMES_S), int(T0_S * 1000), "\n".join(
        ["record"] * len(STEP_TIMES_S)))], points=points, stream_stats={stream.id: (len(STEP_TIMES_S), 6, 0)}))

    def found(job: Any) -> None:
        rulestatus.add_finding(job.doc, {"RuleConfigurationName": "CPUBottleneck", "RuleName": "CPUBottleneck",
                                         "Host": "algo-1", "Time": T0_S + 5, "Message": "GPU idle while the CPU is busy",
                                         "Values": {}, "Thresholds": {"cpu_threshold": 80}}, T0_S + 5)

    store.update_job("known", found)
    set_status(store, "known", "Completed", at=T0_S + 60)
    return "known"


def test_a_known_profile_gives_its_figures(store: Store, known: str, tmp_path: Path) -> None:
    data = gather(store, known)
    assert data.hosts == ["algo-1", "algo-2"] and data.interval_ms == 100 and not data.running
    p = data.phases
    assert (p.duration_s, p.initialization_s, p.loop_s, p.finalization_s) == pytest.approx((60, 20, 22, 18))
    assert p.share(p.initialization_s) == pytest.approx(100 / 3)

    # every profile metric's figures agree with `trainmon profile`'s (pandas) summary
    from trainmon.report.page import _host_usage

    rows = {(u.host, u.metric): u for host in data.hosts for u in _host_usage(data.readings[host])}
    for expected in profiles.Profile(known, str(tmp_path / "profiles")).summary():
        mine = rows[(expected["host"], expected["metric"])]
        assert (mine.samples, mine.minimum, mine.p50, mine.p95, mine.p99, mine.maximum) == pytest.approx(
            tuple(expected[k] for k in ("samples", "min", "p50", "p95", "p99", "max")))
    total = rows[("algo-1", analysis.CPU_TOTAL)]  # the mean of the two cores: 96 for 100 ticks, 15 for 500
    assert (total.maximum, total.minimum, total.p50, total.unit) == (96.0, 15.0, 15.0, "Percent")
    assert rows[("algo-1", "job_resident_bytes")].unit == "Bytes"

    durations = np.array([0.5] * 39 + [2.5])
    [steps] = [analysis.step_stats(host, analysis.step_durations(per_step, count))
               for host, (_, per_step, count) in data.steps.items()]
    assert steps is not None and (steps.host, steps.steps) == ("algo-1", 40)
    assert (steps.mean, steps.maximum, steps.minimum, steps.p50) == pytest.approx((0.55, 2.5, 0.5, 0.5))
    assert (steps.p95, steps.p99) == pytest.approx(tuple(np.percentile(durations, [95, 99])))

    from trainmon.report import views

    assert data.thresholds[("CPUBottleneck", "cpu_threshold")] == 80.0  # the job's rule's, not the default 90
    cpu = views.bottleneck_bands(data, data.readings["algo-1"], "cpu", 0)
    io = views.bottleneck_bands(data, data.readings["algo-1"], "io", 0)
    start_ms = int(T0_S * 1000)
    assert cpu is not None and [(b.start_ms, b.end_ms) for b in cpu[0]] == [(start_ms, start_ms + 10_000)]
    assert io is not None and [(b.start_ms, b.end_ms) for b in io[0]] == [(start_ms + 10_000, start_ms + 15_000)]
    assert (cpu[1], io[1]) == pytest.approx((100 / 6, 50 / 6))
    assert views.bottleneck_bands(data, data.readings["algo-2"], "cpu", 0) is None  # no GPU: nothing to tell

    html = report.render(store, known)
    gpu = _section(html, "gpu-utilization")
    assert gpu.count('<figure class="chart" data-kind="gpu">') == 1 and gpu.count('class="series s') == 2
    assert "algo-2 shows no GPU chart: no GPU readings" in gpu
    rule_charts = _section(html, "rule-charts")
    assert "CPUBottleneck: 1 finding (algo-1)" in rule_charts and rule_charts.count('<g class="finding">') == 1
    assert rule_charts.count('class="band band-cpu"') == 1
    assert _section(html, "metrics").count('class="nonfinite') == 1  # the NaN loss, on the edge


def _section(html: str, key: str) -> str:
    found = re.search(rf'<section id="{key}">(.*?)</section>', html, re.DOTALL)
    assert found, f"no section {key}"
    return found.group(1)


def test_a_report_goes_to_any_fsspec_url(store: Store, known: str) -> None:
    import fsspec

    where = report.write_job_report(store, known, "memory://reports/known.html")
    assert where == "memory://reports/known.html"
    with fsspec.open(where, "rt", encoding="utf-8") as handle:
        assert handle.read().startswith("<!DOCTYPE html>")


def test_a_damaged_profile_file_is_left_out_and_said(store: Store, known: str, tmp_path: Path) -> None:
    (tmp_path / "profiles/known/algo-1/1000000000-0badf11e.parquet").write_bytes(b"not parquet")
    html = report.render(store, known)
    assert "1 profile file could not be read and is left out" in html
    assert "<td>algo-1</td><td>gpu0_utilization_pct</td>" in _section(html, "system-usage")


def test_the_budget_reads_the_earliest_rows_and_points_and_the_page_says_what_it_left_out(
        store: Store, known: str, tmp_path: Path) -> None:
    from trainmon.report.sources import read_profile

    minutes = str(tmp_path / "minutes")  # two hosts, three minutes, a file per host per minute
    clock = ManualClock(wall_s=T0_S)
    writer = profiles.ProfileWriter(minutes, "m", clock=clock)
    for i in range(18):
        for host in ("algo-1", "algo-2"):
            writer.add(host, int(T0_S * 1000) + 10_000 * i, {"cpu0_utilization_pct": float(i), "cpu_iowait_pct": 1.0})
        clock.advance(10.0)
    writer.close()
    whole = read_profile(minutes, "m")
    assert (whole.rows, whole.files, whole.left_out) == (72, 6, 0)
    last = max(profiles.Profile("m", minutes).files(), key=lambda name: Path(name).name)
    cut = read_profile(minutes, "m", max_rows=71)  # a row short: the latest file is left out
    assert cut.left_out == 1 and cut.cut_s == int(Path(last).name.split("-")[0])
    kept = {host: cut.readings[host].metrics["cpu0_utilization_pct"][1].tolist() for host in ("algo-1", "algo-2")}
    assert kept["algo-1"] == kept["algo-2"] and 0 < len(kept["algo-1"]) < 18  # every host ends at the same moment
    assert read_profile(minutes, "m", max_rows=0).readings == {}

    whole = read_profile(str(tmp_path / "profiles"), known)
    cut = read_profile(str(tmp_path / "profiles"), known, max_rows=whole.rows - 1)
    html = report.render(store, known, budget=report.Budget(profile_rows=whole.rows - 1, metric_points=20))
    banner = re.search(r'<p class="banner cut">([^<]*)</p>', html)
    assert banner and "This report was cut short" in banner.group(1)
    assert f"the profile&#x27;s last {cut.left_out:,} of {whole.files:,} files (from " in banner.group(1)
    assert f"the points of the metric &#x27;step&#x27; after its first 10 (from {clock_text(T0_S + STEP_TIMES_S[10])}, of 41)" \
        in banner.group(1)
    assert "step (10 points)" in _section(html, "metrics")  # 20 points shared between step and loss
    assert '<p class="banner cut">' not in report.render(store, known)  # the default budget holds it all


@pytest.mark.timeout(60)
def test_a_report_of_hostile_readings_is_written_whole(store: Store, tmp_path: Path) -> None:
    """NaN and infinities everywhere, empty and one-point series, a million identical values, a huge
    metric name, readings stamped at the ends of time: the page is written, and says what it left out."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    location = tmp_path / "profiles"
    register_job(store, {
        "TrainingJobName": "hostile",
        "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["true"], "MetricDefinitions": [
            {"Name": "loss", "Regex": r"loss=(\S+)"}, {"Name": "step", "Regex": r"step=(\d+)"}]},
        "ProfilerConfig": {"S3OutputPath": str(location), "ProfilingIntervalInMilliseconds": 100},
        "ProfilerRuleConfigurations": [{"RuleConfigurationName": "CPUBottleneck", "RuleEvaluatorImage": "any",
                                        "RuleParameters": {"rule_to_invoke": "CPUBottleneck"}}],
    })
    set_status(store, "hostile", "Training", at=T0_S)
    t0 = int(T0_S * 1000)
    million = 1_000_000
    columns: dict[str, tuple[list[int] | np.ndarray, list[float] | np.ndarray]] = {
        "cpu0_utilization_pct": (t0 + np.arange(million) * 100, np.full(million, 50.0)),
        "gpu0_utilization_pct": ([t0, t0 + 100], [math.nan, math.nan]),
        "gpu1_utilization_pct": ([t0, t0 + 100, t0 + 200], [math.inf, -math.inf, math.nan]),
        "cpu_iowait_pct": ([t0], [1e308]),
        "job_resident_bytes": ([-2**62, t0, 2**62], [-1e308, 1e308, 0.30000000000000004]),
        "gpu0_memory_used_pct": ([t0, t0 + 1], [0.3, 0.30000000000000004]),
        "m" * 100_000 + "_pct": ([t0], [1.0]),
    }
    directory = location / "hostile" / "algo-1"
    directory.mkdir(parents=True)
    names = sorted(columns)
    pq.write_table(pa.table({
        "timestamp_ms": pa.array(np.concatenate([np.asarray(columns[n][0], np.int64) for n in names])),
        "metric": pa.array([n for n in names for _ in range(len(columns[n][0]))]).dictionary_encode(),
        "value": pa.array(np.concatenate([np.asarray(columns[n][1], np.float64) for n in names]))}),
        directory / f"{int(T0_S)}-00000000.parquet")
    pq.write_table(pa.table({"timestamp_ms": pa.array([], pa.int64()), "metric": pa.array([], pa.string()),
                             "value": pa.array([], pa.float64())}), directory / f"{int(T0_S) + 60}-00000001.parquet")
    row = store.get_job("hostile")
    assert row is not None
    stream = store.add_stream(row.id, "algo-1", "hostile/algo-1-1", 0)
    points = [("loss", t0 + i, value, "algo-1", stream.id, i) for i, value in enumerate([math.nan, math.inf, -math.inf])]
    points.append(("step", t0 + 5, 1.0, "algo-1", stream.id, 3))
    store.write_batch(Batch(row.id, chunks=[(stream.id, 0, 4, t0, "r\nr\nr\nr")], points=points,
                            stream_stats={stream.id: (4, 4, 0)}))

    def found(job: Any) -> None:
        rulestatus.add_finding(job.doc, {"RuleConfigurationName": "CPUBottleneck", "RuleName": "CPUBottleneck",
                                         "Host": "algo-1", "Time": T0_S + 5, "Message": "x" * 10_000,
                                         "Values": {}, "Thresholds": {}}, T0_S)

    store.update_job("hostile", found)
    set_status(store, "hostile", "Completed", at=T0_S + 60)
    html = report.render(store, "hostile")
    assert html.endswith("</html>\n") and all(f'<section id="{key}">' for key, _ in SECTIONS)
    assert "1 profile metric name longer than 256 characters" in html and "m" * 300 not in html
    usage = _section(html, "system-usage")
    assert "<td>algo-1</td><td>cpu0_utilization_pct</td><td>percent</td><td>50%</td>" in usage
    assert f"<td>{million}</td>" in usage and "<td>gpu0_utilization_pct</td>" not in usage  # no number: no row
    assert not re.search(r'="[^"]*(?:nan|inf)[^"]*"', html.split("<style>")[0] + html.split("</style>")[1])


def test_a_tensor_rules_chart_draws_the_tensor_it_found_issues_with(store: Store) -> None:
    from trainmon import config
    from trainmon.debug import Hook
    from trainmon.runtime.contract.tensors import tensor_dir

    register_job(store, {
        "TrainingJobName": "hooked", "ProfilerConfig": {"DisableProfiler": True},
        "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["true"], "MetricDefinitions": []},
        "DebugRuleConfigurations": [{"RuleConfigurationName": "VanishingGradient", "RuleEvaluatorImage": "any",
                                     "RuleParameters": {"rule_to_invoke": "VanishingGradient"}}],
    })
    with Hook(1, tensor_dir=tensor_dir(config.job_dir(store.home, "hooked") / "algo-1"), host="algo-1") as hook:
        for step in range(5):  # a gradient that vanishes: 1, 0.1, ... 0.0001
            hook.record("fc.weight.grad", np.full(4, 10.0 ** -step), "gradients")
            hook.end_step()

    def found(job: Any) -> None:
        rulestatus.add_finding(job.doc, {"RuleConfigurationName": "VanishingGradient", "RuleName": "VanishingGradient",
                                         "Host": "algo-1", "Time": time.time(), "Step": 4, "Tensor": "fc.weight.grad",
                                         "Message": "fc.weight.grad vanished", "Values": {}, "Thresholds": {}}, time.time())

    store.update_job("hooked", found)
    charted = _section(report.render(store, "hooked"), "rule-charts")
    assert "VanishingGradient: 1 finding" in charted and 'data-points="5"' in charted
    assert "<title>fc.weight.grad</title>" in charted and charted.count('<g class="finding">') == 1
    assert "mean_abs per saved step" in charted


# -- a real job, in the browser -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="the report's browser test needs Playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (set TRAINMON_TEST_CHROMIUM)")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


def _open(browser: Any, path: str) -> tuple[Any, Any, list[str], list[str]]:
    """The report in a new page: (context, page, every request, the requests stopped: any not to a file)."""
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    context.set_default_timeout(WAIT_S * 1000)
    seen: list[str] = []
    stopped: list[str] = []

    def route(handle: Any) -> None:
        if handle.request.url.startswith("file://"):
            handle.continue_()
        else:
            stopped.append(handle.request.url)
            handle.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.on("request", lambda request: seen.append(request.url))
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(Path(path).as_uri())
    assert not errors
    return context, page, seen, stopped


JOB = """
import time
for step in range(30):
    loss = float("nan") if step == 18 else 1 / (1 + step)
    print(f"step={step} loss={loss}", flush=True)
    busy_until = time.monotonic() + 0.08
    while time.monotonic() < busy_until:  # the CPU has something to show
        pass
"""


def test_a_profiled_jobs_report_opens_in_chromium_with_every_section(browser: Any, home: Path, script: Script,
                                                                    tmp_path: Path) -> None:
    location = tmp_path / "profiles"
    run_cli("run", "--name", "reported", "--profiling-interval-ms", "100", "--profile-output", str(location),
            "--metric", r"loss=loss=(\S+)", "--metric", r"step=step=(\d+)", "--rule", "ExplodingTensor",
            "--", PY, str(script(JOB)), check=True)
    done = run_cli("report", "reported", check=True)
    path = done.stdout.strip()
    assert path == str(location.resolve() / "reported/rule-output/ProfilerReport/profiler-output/profiler-report.html")

    context, page, seen, stopped = _open(browser, path)
    try:
        for key, title in SECTIONS:
            assert page.locator(f"section#{key} > h2").inner_text() == title
        assert page.locator("#status").inner_text() == "Completed"
        assert page.locator("#summary table td", has_text="Training loop").count() >= 1

        hosts = page.locator("#system-usage table.usage tbody tr td:first-child").all_inner_texts()
        assert hosts and set(hosts) == {"algo-1"}
        metrics = page.locator("#system-usage table.usage tbody tr td:nth-child(2)").all_inner_texts()
        assert {"cpu_utilization_pct", "cpu0_utilization_pct", "cpu_iowait_pct", "job_cpu_pct"} <= set(metrics)
        [steps] = page.locator("#step-durations table.steps tbody tr").all()
        assert steps.locator("td").nth(0).inner_text() == "algo-1" and steps.locator("td").nth(1).inner_text() == "29"

        rule = page.locator("#rules table.rules tbody tr", has=page.locator("td:first-child b", has_text="ExplodingTensor"))
        cells = rule.locator("td").all_inner_texts()  # (ProfilerReport, on by default with the profiler, has a row too)
        assert cells[0].startswith("ExplodingTensor") and cells[1].startswith("IssuesFound") and cells[2:4] == ["Yes", "1"]
        assert "only_nan=False" in cells[4] and "learning rate" in cells[5]

        # charts drawn: series with points, the NaN on the edge, the finding marked
        drawn = page.eval_on_selector_all(
            "#metrics svg.plot path.series", "paths => paths.map(p => (p.getAttribute('d').match(/[ML]/g) || []).length)")
        assert len(drawn) == 2 and min(drawn) >= 20
        assert page.locator("#metrics circle.nonfinite").count() == 1
        assert page.locator("#rule-charts svg.plot g.finding").count() == 1
        assert page.locator("#metrics figure", has_text="loss").locator("g.finding").count() == 1
        assert page.locator("#bottlenecks svg.plot path.series").count() >= 2  # the CPU and the I/O wait
        assert page.locator("#step-durations svg.plot path.series").count() == 1
        box = page.locator("#metrics svg.plot").first.bounding_box()
        assert box is not None and box["width"] > 400 and box["height"] > 100

        gpu_metrics = [r["metric"] for r in profiles.Profile("reported", str(location)).summary()
                       if r["metric"].startswith("gpu")]
        if not gpu_metrics:  # this machine has no GPU: the report says why instead of drawing
            assert "algo-1 shows no GPU chart" in page.locator("#gpu-utilization").inner_text()
            assert page.locator("#gpu-utilization svg").count() == 0
            assert "has no GPU readings" in page.locator("#bottlenecks").inner_text()
        page.screenshot(path=str(SCREENSHOT), full_page=True)
    finally:
        context.close()
    assert seen == [Path(path).as_uri()] and stopped == []  # the file itself, and nothing else


def test_gpu_charts_are_drawn_in_the_browser(browser: Any, store: Store, known: str, tmp_path: Path) -> None:
    path = report.write_job_report(store, known, str(tmp_path / "known.html"))
    context, page, seen, stopped = _open(browser, path)
    try:
        assert page.locator("#gpu-utilization svg.plot path.series").count() == 2
        assert page.locator("#gpu-memory svg.plot path.series").count() == 2
        assert page.locator("#bottlenecks rect.band-cpu").count() == 1
        assert page.locator("#bottlenecks rect.band-io").count() == 1
        assert page.locator("#system-usage table.usage tbody tr td:first-child").all_inner_texts().count("algo-2") == 3
    finally:
        context.close()
    assert stopped == [] and len(seen) == 1


# -- a running job without a profile -----------------------------------------------------------------


RUNNING = """
import os, time
step = 0
while not os.path.exists(STOP) and step < 3000:
    print(f"step={step} loss={1 / (1 + step)}", flush=True)
    step += 1
    time.sleep(0.05)
"""


def _until(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` until it holds, for at most WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_running_job_without_a_profile_is_reported_so_far_then_whole(home: Path, store: Store, script: Script,
                                                                       tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    job = script(RUNNING.replace("STOP", repr(str(stop))))
    try:
        run_cli("run", "--detach", "--name", "ongoing", "--disable-profiler", "--system-metrics-interval", "1",
                "--metric", r"loss=loss=(\S+)", "--metric", r"step=step=(\d+)", "--", PY, str(job), check=True)

        def going() -> bool:
            row = store.get_job("ongoing")
            return row is not None and store.metric_summaries(row.id).get("step", (0,))[0] >= 5 and bool(
                read_system_metrics(store, "ongoing"))

        _until(going, "the job's first steps and system metrics")
        html = report.render(store, "ongoing")
        assert 'class="banner running"' in html and "This job is still running" in html
        assert '<b id="status">InProgress (Training)</b>' in html and "(now: still running)" in html
        usage = _section(html, "system-usage")
        assert "CloudWatch system metrics" in usage and "<td>algo-1</td><td>CPUUtilization</td>" in usage
    finally:
        stop.touch()
    _until(lambda: getattr(store.get_job("ongoing"), "status", None) in TERMINAL, "the job to end")
    where = report.write_job_report(store, "ongoing")
    assert where == str(home / "profiles/ongoing/rule-output/ProfilerReport/profiler-output/profiler-report.html")
    html = Path(where).read_text(encoding="utf-8")
    assert "still running" not in html and '<b id="status">Completed</b>' in html and "not profiled" in html
    assert "Bottleneck periods need the profiler" in _section(html, "bottlenecks")
    assert "algo-1 shows no GPU chart" in _section(html, "gpu-memory")
    assert "<td>algo-1</td>" in _section(html, "step-durations")
    assert _section(html, "metrics").count('<figure class="chart" data-kind="metric">') == 2


def test_report_of_an_unknown_job_says_so(home: Path) -> None:
    done = run_cli("report", "no-such-job")
    assert done.returncode == 2
    assert done.stderr.strip() == ("trainmon: ValidationException: Requested resource not found. No training job "
                                   "named 'no-such-job'.")
