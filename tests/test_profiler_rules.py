"""Profiler rules (trainmon.rules.profiler, rules/profiler_setup.py, runtime/watch/profilewatch.py): each rule's
state machine on hand-built datapoints, configurations read and refused, ProfilerReport by default, the
hand-over from the monitor, the fake GPU, and real jobs that make the rules fire, or must not."""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import trainmon
from trainmon.api.training_request import job_document, with_profiler_report
from trainmon.cli import build_parser
from trainmon.cli.jobs import run_request
from trainmon.clock import ManualClock
from trainmon.config import job_dir
from trainmon.debug import records
from trainmon.errors import ValidationException
from trainmon.rules import ProfilerRule, catalog, profiler_setup, rule_configs
from trainmon.rules.configs import as_request
from trainmon.rules.metric import Finding
from trainmon.rules.profiler import (
    BatchSize,
    CPUBottleneck,
    Dataloader,
    Gpu,
    GPUMemoryIncrease,
    IOBottleneck,
    LoadBalancing,
    LowGPUUtilization,
    MaxInitializationTime,
    OverallSystemUsage,
    StepOutlier,
    Tick,
    Window,
    js_distance,
    tick,
)
from trainmon.rules.profiler import (
    ProfilerRule as StateMachine,
)
from trainmon.runtime.contract import tensors
from trainmon.runtime.watch import notify
from trainmon.runtime.watch.gpu import FakeGpuSource, GpuReading, default_gpu_source
from trainmon.runtime.watch.monitor import _row_names
from trainmon.runtime.watch.profilewatch import ProfilerRules, ProfileTap
from trainmon.runtime.watch.rulewatch import RuleWatcher
from trainmon.store import Batch, JobPoints, Store

from .conftest import PY, echo_watch, run_cli, sqlite_locked

Script = Callable[[str], Path]
JOB_TIMEOUT_S = 120


def datapoints(count: int, *, every_s: float = 0.1, cpu: tuple[float, ...] = (5.0, 5.0), iowait: float = 0.0,
               gpus: Iterable[tuple[float, float]] = ((10.0, 20.0),), processes: int = 1) -> list[Tick]:
    """``count`` datapoints alike: per-core CPU, I/O wait, (utilization, memory) per GPU, the job's processes."""
    shown = tuple(Gpu(index, used, memory) for index, (used, memory) in enumerate(gpus))
    return [Tick(i * every_s, cpu, iowait, 30.0, shown, processes) for i in range(count)]


def fired(rule: StateMachine, ticks: Iterable[Tick]) -> list[tuple[int, Finding]]:
    """Feed datapoints; every finding with the number of the datapoint (1, 2, ...) that brought it."""
    return [(number, finding) for number, datapoint in enumerate(ticks, 1) for finding in rule.observe(datapoint)]


def at(rule: StateMachine, ticks: Iterable[Tick]) -> list[int]:
    return [number for number, _ in fired(rule, ticks)]


# -- the bottlenecks -------------------------------------------------------------------------


def test_cpu_bottleneck_fires_after_patience_when_a_gpu_idles_while_a_core_is_busy() -> None:
    [(number, finding)] = fired(CPUBottleneck(), datapoints(1500, cpu=(95.0, 3.0), gpus=[(2.0, 10.0)]))
    assert number == 1001  # the first verdict comes after patience (1000) datapoints
    assert finding.values["bottleneck_pct"] == 100.0 and finding.values["cpu_utilization_pct"] == 95.0
    assert finding.thresholds == {"threshold": 50.0, "gpu_threshold": 10.0, "cpu_threshold": 90.0, "patience": 1000}
    assert "a GPU was below 10% utilization while a CPU core was above 90% at 1001 of 1001" in finding.message


def test_cpu_bottleneck_threshold_is_a_share_of_every_datapoint_so_far() -> None:
    busy_gpu = datapoints(600, cpu=(95.0, 95.0), gpus=[(80.0, 10.0)])
    idle_gpu = datapoints(900, cpu=(95.0, 95.0), gpus=[(2.0, 10.0)])
    assert at(CPUBottleneck(), busy_gpu + idle_gpu) == [1201]  # 601 of 1201 bottlenecks: just above 50%


@pytest.mark.parametrize("kind", ["busy gpu", "idle cpu"])
def test_cpu_bottleneck_stays_quiet_unless_both_hold(kind: str) -> None:
    ticks = datapoints(2000, cpu=(95.0, 95.0), gpus=[(80.0, 10.0)]) if kind == "busy gpu" else \
        datapoints(2000, cpu=(50.0, 50.0), gpus=[(2.0, 10.0)])
    assert at(CPUBottleneck(), ticks) == []


def test_io_bottleneck_fires_when_a_gpu_idles_while_the_cpus_wait_for_io() -> None:
    [(number, finding)] = fired(IOBottleneck(), datapoints(1200, iowait=60.0, gpus=[(5.0, 10.0)]))
    assert number == 1001 and finding.values["iowait_pct"] == 60.0
    assert finding.thresholds == {"threshold": 50.0, "gpu_threshold": 10.0, "io_threshold": 50.0, "patience": 1000}
    assert at(IOBottleneck(), datapoints(1200, iowait=40.0, gpus=[(5.0, 10.0)])) == []


@pytest.mark.parametrize("make", [CPUBottleneck, IOBottleneck, LowGPUUtilization, GPUMemoryIncrease, BatchSize,
                                  LoadBalancing])
def test_gpu_rules_find_nothing_on_a_host_without_gpus_and_say_so(make: Callable[[], StateMachine]) -> None:
    rule = make()
    assert at(rule, datapoints(1500, cpu=(99.0, 99.0), iowait=99.0, gpus=())) == []
    assert rule.notes("algo-1") == ["no GPU on algo-1"]


# -- the GPUs --------------------------------------------------------------------------------


def test_low_gpu_utilization_fires_on_an_underused_gpu_and_not_on_a_busy_one() -> None:
    [(number, finding)] = fired(LowGPUUtilization(), datapoints(1200, gpus=[(90.0, 10.0), (30.0, 10.0)]))
    assert number == 1001 and finding.values["gpu"] == 1.0 and finding.values["p95"] == 30.0
    assert finding.message == ("gpu1 is underused: p95 utilization 30% < threshold_p95 70% over the last 500 "
                               "datapoints")
    assert at(LowGPUUtilization(), datapoints(1200, gpus=[(90.0, 10.0)])) == []


def test_low_gpu_utilization_fires_on_a_fluctuating_gpu() -> None:
    ticks = [Tick(i * 0.1, (5.0,), gpus=(Gpu(0, 100.0 if i % 2 else 0.0, 10.0),)) for i in range(1100)]
    [(number, finding)] = fired(LowGPUUtilization(), ticks)
    assert number == 1001 and "gpu0 utilization fluctuates: p95 100% > threshold_p95 70% but p5 0%" in finding.message


def test_low_gpu_utilization_percentiles_are_over_its_window() -> None:
    ticks = datapoints(1000, gpus=[(10.0, 10.0)]) + datapoints(600, gpus=[(90.0, 10.0)])
    assert at(LowGPUUtilization(window=100), ticks) == [1001]  # its last 100: 99 idle, 1 busy
    assert at(LowGPUUtilization(window=100, patience=1100), ticks) == []  # by 1101 the window holds busy ones only


def test_gpu_memory_increase_compares_two_adjacent_windows() -> None:
    ticks = datapoints(1000, gpus=[(50.0, 20.0)]) + datapoints(30, gpus=[(50.0, 40.0)])
    [(number, finding)] = fired(GPUMemoryIncrease(), ticks)
    assert number == 1003  # three readings at 40%: the last 10 average 26%, the 10 before 20%: up 6 > 5
    assert finding.values["increase_pct"] == pytest.approx(6.0)
    assert finding.thresholds == {"increase": 5.0, "window": 10, "patience": 1000}
    slow = [Tick(i * 0.1, (5.0,), gpus=(Gpu(0, 50.0, 20.0 + 0.01 * i),)) for i in range(3000)]
    assert at(GPUMemoryIncrease(), slow) == []  # 0.1 points from one window to the next


def test_gpu_memory_increase_keeps_its_window_sums_exact() -> None:
    from trainmon.rules.profiler import _Adjacent

    generator, adjacent, values = random.Random(3), _Adjacent(7), []
    for _ in range(500):
        values.append(generator.uniform(0, 100))
        if adjacent.add(values[-1]):
            assert (adjacent.before, adjacent.recent) == pytest.approx((sum(values[-14:-7]), sum(values[-7:])))
    assert len(values) == 500 and adjacent.recent == pytest.approx(sum(values[-7:]))


def test_load_balancing_fires_on_unevenly_loaded_gpus() -> None:
    [(number, finding)] = fired(LoadBalancing(), datapoints(1200, gpus=[(90.0, 10.0), (10.0, 10.0)]))
    assert number == 1001 and finding.values["distance"] == pytest.approx(math.sqrt(math.log(2)))
    assert "gpu0 and gpu1 are unevenly loaded" in finding.message
    assert at(LoadBalancing(), datapoints(1200, gpus=[(50.0, 10.0), (51.0, 10.0)])) == []
    single = LoadBalancing()
    assert at(single, datapoints(1200)) == [] and single.notes("algo-1") == ["algo-1 has one GPU: no load to balance"]


def test_js_distance_of_histograms() -> None:
    assert js_distance([1, 2, 3], [2, 4, 6]) == 0.0  # the same shape
    assert js_distance([5, 0], [0, 5]) == pytest.approx(math.sqrt(math.log(2)))
    assert 0 < js_distance([3, 1], [1, 3]) < math.sqrt(math.log(2))


def test_batch_size_fires_when_cpu_gpu_and_memory_are_all_low() -> None:
    [(number, finding)] = fired(BatchSize(), datapoints(1200, cpu=(20.0, 30.0), gpus=[(30.0, 20.0)]))
    assert number == 1001
    assert finding.values == {"gpu": 0.0, "gpu_p95": 30.0, "gpu_memory_p95": 20.0, "cpu_p95": 25.0}
    assert at(BatchSize(), datapoints(1200, cpu=(20.0, 30.0), gpus=[(90.0, 20.0)])) == []
    assert at(BatchSize(), datapoints(1200, cpu=(90.0, 90.0), gpus=[(30.0, 20.0)])) == []
    short = BatchSize(patience=10)  # past its patience, but its window of 500 never filled
    assert at(short, datapoints(200, cpu=(20.0, 30.0), gpus=[(30.0, 20.0)])) == []
    assert short.notes("algo-1") == ["algo-1 gave 200 datapoints, fewer than the window of 500: not judged"]


# -- steps -----------------------------------------------------------------------------------


def test_max_initialization_time_fires_when_no_step_came_in_time() -> None:
    ticks = datapoints(1400, every_s=1.0)
    [(number, finding)] = fired(MaxInitializationTime(), ticks)
    assert number == 1202 and finding.timestamp_s == 1201.0  # the first datapoint past 20 minutes
    assert finding.values == {"waited_seconds": 1201.0} and finding.thresholds == {"threshold": 20.0}
    on_time = MaxInitializationTime()
    on_time.observe_step(1, 600.0)
    assert at(on_time, ticks) == [] and on_time.notes("algo-1") == []
    late = MaxInitializationTime()
    late.observe_step(1, 1250.0)  # read before the datapoint that judges: steps come first in a pass
    assert [f.values["waited_seconds"] for _, f in fired(late, ticks)] == [1250.0]


def test_max_initialization_time_takes_fractions_of_a_minute_and_needs_steps_to_expect() -> None:
    assert [f.timestamp_s for _, f in fired(MaxInitializationTime(threshold_min=0.02),
                                            datapoints(10, every_s=0.25))] == [1.25]
    stepless = MaxInitializationTime(threshold_min=0.02, expects_steps=False)
    assert at(stepless, datapoints(10, every_s=0.25)) == []
    assert stepless.notes("algo-1") == ["no steps known on algo-1: the job has no step or loss metric, and no "
                                        "tensor hook step came"]


def _steps(rule: StepOutlier, durations: list[float]) -> list[Finding]:
    found, now = [], 0.0
    found.extend(rule.observe_step(0, now))
    for step, duration in enumerate(durations, 1):
        now += duration
        found.extend(rule.observe_step(step, now))
    return found


def test_step_outlier_fires_after_more_than_n_outliers() -> None:
    steady = [0.9, 1.1] * 75
    [finding] = _steps(StepOutlier(), steady + [2.0] * 20)
    assert finding.step == 161 and finding.values["outliers"] == 11.0  # the 11th outlier: more than 10
    assert finding.thresholds == {"stddev": 3.0, "n_outliers": 10}
    assert _steps(StepOutlier(), steady * 3) == []
    assert _steps(StepOutlier(), [0.9, 1.1] * 20 + [2.0] * 20) == []  # fewer than 100 durations known: no verdict


def test_step_outlier_counts_a_step_once_whatever_records_name_it() -> None:
    rule = StepOutlier()
    rule.observe_step(1, 0.0)
    rule.observe_step(1, 5.0)  # another record of step 1 (its validation loss, say)
    rule.observe_step(2, 6.0)
    assert rule._count == 1 and rule._mean == 6.0


def test_dataloader_compares_worker_processes_with_the_cores() -> None:
    eight_cores = (5.0,) * 8
    [(number, finding)] = fired(Dataloader(), datapoints(50, cpu=eight_cores, processes=2))
    assert number == 11 and "a median of 1 data loader worker processes ran on 8 cores: fewer" in finding.message
    assert at(Dataloader(), datapoints(50, cpu=eight_cores, processes=9)) == []
    assert "more than max_threshold 200%" in fired(Dataloader(), datapoints(50, cpu=eight_cores, processes=30))[0][
        1].message
    alone = Dataloader()
    assert at(alone, datapoints(50, cpu=eight_cores)) == []
    assert alone.notes("algo-1") == ["no worker processes on algo-1 (the job ran one process there)"]


def test_overall_system_usage_never_fires_and_sums_up() -> None:
    rule = OverallSystemUsage()
    ticks = [Tick(i * 0.1, (float(i % 100), float(i % 100)), 0.0, 40.0, (Gpu(0, 70.0, 10.0),)) for i in range(1000)]
    assert at(rule, ticks) == []
    [note] = rule.notes("algo-1")
    assert note.startswith("algo-1: 1000 datapoints; CPU p50 49%, p95 94%, max 99%; memory p50 40%")
    assert "gpu0 p50 70%" in note


# -- the pieces ------------------------------------------------------------------------------


def test_window_percentiles_are_numpys() -> None:
    generator = random.Random(7)
    window = Window(50)
    values = [generator.uniform(0, 100) for _ in range(300)]
    for value in values:
        window.add(value)
    for q in (0.05, 0.5, 0.95):
        assert window.quantile(q) == pytest.approx(float(np.quantile(values[-50:], q)))


def test_a_datapoint_from_the_monitors_row() -> None:
    names = _row_names(2, (0, 1))
    row = dict(zip(names, [float(i) for i in range(len(names))], strict=True))
    row["job_processes"] = 3.0
    datapoint = tick(1_700_000_000_500, row)
    assert datapoint.timestamp_s == 1_700_000_000.5 and datapoint.cpu_pct == (0.0, 1.0)
    assert datapoint.iowait_pct == row["cpu_iowait_pct"] and datapoint.job_processes == 3
    assert datapoint.gpus == (Gpu(0, row["gpu0_utilization_pct"], row["gpu0_memory_used_pct"]),
                              Gpu(1, row["gpu1_utilization_pct"], row["gpu1_memory_used_pct"]))
    assert tick(0, dict(zip(_row_names(2, ()), [1.0] * 14, strict=True))).gpus == ()


def test_the_tap_never_waits_and_counts_what_it_drops() -> None:
    tap = ProfileTap(capacity_rows=3)
    for i in range(5):
        tap.put("algo-1", i, {"cpu0_utilization_pct": float(i)})
    assert [stamp for _, stamp, _ in tap.take()] == [2, 3, 4] and tap.dropped == 2
    assert tap.take() == []
    setup = _setup("CPUBottleneck", patience="0")
    rules = ProfilerRules([setup], tap)
    tap.put("algo-1", 1000, {"cpu0_utilization_pct": 99.0, "gpu0_utilization_pct": 1.0, "gpu0_memory_used_pct": 1.0})
    [(name, host, finding)] = rules.evaluate()
    assert (name, host, finding.values["dropped_datapoints"]) == ("CPUBottleneck", "algo-1", 2.0)
    assert rules.notes(rules.configured[0])[-1].startswith("2 profile datapoints were dropped before the rules read")


# -- configurations --------------------------------------------------------------------------


def _setup(rule: str, names: tuple[str, ...] = ("train:loss",), kind: str = catalog.PROFILER,
           **parameters: str) -> catalog.RuleSetup:
    config = {"RuleConfigurationName": rule, "RuleEvaluatorImage": "x",
              "RuleParameters": {"rule_to_invoke": rule, **parameters}}
    return catalog.setup(config, kind, list(names), "my-job", notify.check_target)


@pytest.mark.parametrize(("rule", "defaults"), [
    ("BatchSize", {"cpu_threshold_p95": 70, "gpu_threshold_p95": 70, "gpu_memory_threshold_p95": 70,
                   "patience": 1000, "window": 500}),
    ("CPUBottleneck", {"threshold": 50, "gpu_threshold": 10, "cpu_threshold": 90, "patience": 1000}),
    ("Dataloader", {"min_threshold": 70, "max_threshold": 200}),
    ("GPUMemoryIncrease", {"increase": 5, "patience": 1000, "window": 10}),
    ("IOBottleneck", {"threshold": 50, "gpu_threshold": 10, "io_threshold": 50, "patience": 1000}),
    ("LoadBalancing", {"threshold": 0.5, "patience": 1000}),
    ("LowGPUUtilization", {"threshold_p95": 70, "threshold_p5": 10, "window": 500, "patience": 1000}),
    ("MaxInitializationTime", {"threshold": 20}),
    ("OverallSystemUsage", {}),
    ("StepOutlier", {"stddev": 3, "n_outliers": 10}),
    ("ProfilerReport", {"opt_out_telemetry": False}),
])
def test_debuggers_code_defaults(rule: str, defaults: dict[str, Any]) -> None:
    setup = _setup(rule)
    assert setup.issues == [] and setup.evaluated
    assert {key: setup.parameters[key] for key in defaults} == defaults
    assert setup.parameters["scan_interval_us"] == 60_000_000


def test_profiler_report_runs_the_ten_rules_with_overrides_by_rule_in_any_case() -> None:
    setup = _setup("ProfilerReport", CPUBottleneck_cpu_threshold="80", lowgpuutilization_WINDOW="50")
    assert setup.issues == []
    assert setup.parameters["CPUBottleneck_cpu_threshold"] == 80.0 and setup.parameters["LowGPUUtilization_window"] == 50
    made = {type(rule).__name__: rule for rule, _ in profiler_setup.evaluators(setup)}
    assert sorted(made) == sorted(profiler_setup.REPORT_RULES) and len(made) == 10
    assert made["CPUBottleneck"].busy_threshold == 80.0 and made["CPUBottleneck"].threshold == 50.0  # type: ignore[attr-defined]
    assert made["LowGPUUtilization"].window == 50  # type: ignore[attr-defined]


@pytest.mark.parametrize(("names", "parameters", "source"), [
    (("Global_Step", "train:loss"), {}, profiler_setup.StepSource("Global_Step")),  # a step-like name, any case
    (("iteration", "loss"), {}, profiler_setup.StepSource("iteration")),
    (("train:loss",), {}, profiler_setup.StepSource("train:loss", counted=True)),  # else each loss point
    (("step", "loss"), {"step_metric": "loss"}, profiler_setup.StepSource("loss")),
    (("accuracy",), {}, None),
])
def test_steps_come_from_a_step_metric_or_the_loss(names: tuple[str, ...], parameters: dict[str, str],
                                                    source: profiler_setup.StepSource | None) -> None:
    setup = _setup("StepOutlier", names, **parameters)
    assert setup.issues == []
    [(_, found)] = profiler_setup.evaluators(setup)
    assert found == source and setup.metrics == ((source.metric,) if source else ())


def _problems(rules: list[dict[str, Any]], **request: Any) -> str:
    with pytest.raises(ValidationException) as caught:
        job_document({"TrainingJobName": "my-job", "ProfilerRuleConfigurations": rules, "AlgorithmSpecification": {
            "ContainerEntrypoint": ["true"], "MetricDefinitions": [{"Name": "loss", "Regex": r"loss=(\S+)"}]},
            **request}, 0.0)
    return caught.value.message


def _config(rule: str, name: str | None = None, **parameters: str) -> dict[str, Any]:
    return {"RuleConfigurationName": name or rule, "RuleEvaluatorImage": "any",
            "RuleParameters": {"rule_to_invoke": rule, **parameters}}


@pytest.mark.parametrize(("config", "words"), [
    (_config("CPUBottleneck", threshold="150"), "Value '150' at 'profilerRuleConfigurations.1.member.ruleParameters."
     "threshold' failed to satisfy constraint: Member must be a number greater than or equal to 0 and less than or "
     "equal to 100 (rule CPUBottleneck, parameter threshold)"),
    (_config("LowGPUUtilization", window="0"), "Member must be an integer greater than or equal to 1"),
    (_config("MaxInitializationTime", threshold="0"), "Member must be a number greater than 0"),
    (_config("StepOutlier", mode="TEST"), "Member must satisfy enum value set: [TRAIN, EVAL, PREDICT, GLOBAL]"),
    (_config("StepOutlier", step_metric="step"), "Member must be the name of one of the job's metric definitions"),
    (_config("Dataloader", min_threshold="300"), "Member must not be above max_threshold (200)"),
    (_config("IOBottleneck", cpu_threshold="5"), "Member must be a parameter of IOBottleneck"),
    (_config("ProfilerReport", CPUBottleneck_io_threshold="5"), "ruleParameters.CPUBottleneck_io_threshold' failed "
     "to satisfy constraint: Member must be a parameter of CPUBottleneck"),
    (_config("ProfilerReport", GPUBottleneck_threshold="5"), "or <Rule>_<parameter> for a rule it runs: BatchSize"),
    (_config("ProfilerReport", StepOutlier_stddev="-1"), "(rule ProfilerReport, parameter StepOutlier_stddev)"),
])
def test_bad_profiler_configurations_are_validation_errors_naming_rule_and_parameter(
        home: Path, config: dict[str, Any], words: str) -> None:
    assert words in _problems([config])


def test_a_fraction_of_a_minute_is_a_valid_initialization_threshold() -> None:
    assert _setup("MaxInitializationTime", threshold="0.02").parameters["threshold"] == 0.02


def test_profiler_rules_need_the_profiler(home: Path) -> None:
    message = _problems([_config("CPUBottleneck"), _config("ProfilerReport")], ProfilerConfig={"DisableProfiler": True})
    assert message.startswith("2 validation errors detected")
    assert ("Value 'CPUBottleneck' at 'profilerRuleConfigurations.1.member.ruleParameters.rule_to_invoke' failed to "
            "satisfy constraint: Member must be a rule the job can evaluate: profiler rules read the profiler's data, "
            "and this job's profiler is disabled") in message
    assert "(rule ProfilerReport: turn the profiler on, or leave the rule out)" in message


def test_overall_framework_metrics_is_accepted_and_reported_as_an_error(home: Path) -> None:
    doc = job_document({"TrainingJobName": "my-job", "AlgorithmSpecification": {"ContainerEntrypoint": ["true"]},
                        "ProfilerRuleConfigurations": [_config("OverallFrameworkMetrics"), _config("CPUBottleneck")]},
                       0.0)
    statuses = doc["ProfilerRuleEvaluationStatuses"]
    assert [(s["RuleConfigurationName"], s["RuleEvaluationStatus"]) for s in statuses] == [
        ("OverallFrameworkMetrics", "Error"), ("CPUBottleneck", "InProgress")]
    assert "it needs framework profiling, which trainmon does not do" in statuses[0]["StatusDetails"]


# -- ProfilerReport by default, and rules from Python -----------------------------------------


def test_profiler_report_is_added_as_the_sdk_did_unless_profiler_rules_are_given_or_profiling_is_off(
        home: Path) -> None:
    added = with_profiler_report({"TrainingJobName": "j"}, 1_700_000_000.7)
    assert added["ProfilerRuleConfigurations"] == [{
        "RuleConfigurationName": "ProfilerReport-1700000000", "RuleEvaluatorImage": rule_configs_image(),
        "RuleParameters": {"rule_to_invoke": "ProfilerReport"}}]
    off = {"TrainingJobName": "j", "ProfilerConfig": {"DisableProfiler": True}}
    assert with_profiler_report(off, 0.0) == off
    given = {"TrainingJobName": "j", "ProfilerRuleConfigurations": [_config("CPUBottleneck")]}
    assert with_profiler_report(given, 0.0) == given

    def cli(*options: str) -> list[str]:
        request, _ = run_request(build_parser().parse_args(["run", "--name", "j", *options, "--", "true"]))
        return [r["RuleParameters"]["rule_to_invoke"] for r in request.get("ProfilerRuleConfigurations", [])]

    assert cli() == ["ProfilerReport"] and cli("--rule", "ExplodingTensor") == ["ProfilerReport"]
    assert cli("--disable-profiler") == [] and cli("--rule", "CPUBottleneck:threshold=30") == ["CPUBottleneck"]

    def estimator(**arguments: Any) -> list[str]:
        request = trainmon.Estimator(image_uri="true", **arguments)._request("j", None)
        return [r["RuleConfigurationName"].split("-")[0] for r in request.get("ProfilerRuleConfigurations", [])]

    assert estimator() == ["ProfilerReport"] and estimator(disable_profiler=True) == [] and estimator(rules=[]) == []
    assert estimator(rules=[ProfilerRule.sagemaker(rule_configs.CPUBottleneck(), name="cpu")]) == ["cpu"]


def rule_configs_image() -> str:
    from trainmon.rules.configs import DEBUGGER_IMAGE

    return DEBUGGER_IMAGE


def test_profiler_rule_sagemaker_gives_the_sdks_shape() -> None:
    rule = ProfilerRule.sagemaker(rule_configs.CPUBottleneck(threshold=30, patience=5), name="cpu",
                                  s3_output_path="s3://bucket/rules")
    assert rule.to_profiler_rule_config_dict() == {
        "RuleConfigurationName": "cpu", "RuleEvaluatorImage": rule.image_uri, "S3OutputPath": "s3://bucket/rules",
        "RuleParameters": {"rule_to_invoke": "CPUBottleneck", "threshold": "30", "patience": "5"}}
    field, entry = as_request(rule)
    assert field == "ProfilerRuleConfigurations" and catalog.setup(entry, field, [], "j").issues == []
    assert as_request(rule_configs.ProfilerReport())[0] == "ProfilerRuleConfigurations"
    assert as_request(_config("StepOutlier"))[0] == "ProfilerRuleConfigurations"  # a plain dict, by its rule
    for name in profiler_setup.EVALUATED:
        made = getattr(rule_configs, name)()
        assert catalog.setup(ProfilerRule.sagemaker(made).to_profiler_rule_config_dict(), catalog.PROFILER,
                             ["loss"], "j").issues == []


def test_the_sagemaker_sdks_own_profiler_rules_are_accepted() -> None:
    sdk = pytest.importorskip("sagemaker.debugger", reason="the SageMaker SDK is not installed")
    rule = sdk.ProfilerRule.sagemaker(sdk.rule_configs.ProfilerReport(CPUBottleneck_threshold=20))
    field, entry = as_request(rule)
    read = catalog.setup(entry, field, ["loss"], "j")
    assert field == "ProfilerRuleConfigurations" and read.issues == []
    assert read.parameters["CPUBottleneck_threshold"] == 20.0


# -- the fake GPU ----------------------------------------------------------------------------


def _write_gpus(path: Path, gpus: list[dict[str, Any]]) -> None:
    part = path.with_suffix(".part")
    part.write_text(json.dumps(gpus), encoding="utf-8")
    os.replace(part, path)  # as the docs ask: never half a file


def test_the_fake_gpu_shows_what_its_file_says(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    source = default_gpu_source({"TRAINMON_FAKE_GPUS": str(path)})
    assert isinstance(source, FakeGpuSource) and source.read() == []  # no file: no GPU, not zeros
    _write_gpus(path, [{"utilization_pct": 5, "memory_used_pct": 12.5}, {"index": 3, "utilization_pct": 95,
                                                                          "process_memory_bytes": {"42": 1024}}])
    assert source.read() == [GpuReading(0, 5.0, 12.5), GpuReading(3, 95.0, 0.0, {42: 1024})]
    _write_gpus(path, [{"utilization_pct": 60}])
    assert source.read() == [GpuReading(0, 60.0, 0.0)]
    path.write_text('[{"utilization_pct": ', encoding="utf-8")  # half written: the last readings stand
    assert source.read() == [GpuReading(0, 60.0, 0.0)]
    for wrong in ('[{"utilization_pct": 5, "index": null}]', '[{"utilization_pct": 5, "process_memory_bytes": 7}]',
                  '[{"utilization_pct": 5, "process_memory_bytes": {"x": 1}}]'):
        path.write_text(wrong, encoding="utf-8")  # not as documented: never an error that stops the monitor
        assert source.read() == [GpuReading(0, 60.0, 0.0)]
    path.unlink()
    assert source.read() == []


# -- the runner, on a real store with a manual clock ------------------------------------------


def _row(cpu: float, gpu: float | None) -> dict[str, float]:
    names = _row_names(2, (0,) if gpu is not None else ())
    row = dict.fromkeys(names, 1.0)
    row.update({"cpu0_utilization_pct": cpu, "cpu1_utilization_pct": cpu})
    if gpu is not None:
        row.update({"gpu0_utilization_pct": gpu, "gpu0_memory_used_pct": 10.0})
    return row


def test_the_runner_feeds_steps_then_datapoints_and_concludes_with_notes(store: Store) -> None:
    rules = [_config("CPUBottleneck", patience="2"), _config("ProfilerReport", MaxInitializationTime_threshold="0.01")]
    doc = job_document({"TrainingJobName": "watched", "ProfilerRuleConfigurations": rules, "AlgorithmSpecification": {
        "ContainerEntrypoint": ["true"], "MetricDefinitions": [{"Name": "step", "Regex": r"step=(\d+)"}]}},
        time.time(), home=store.home)
    row = store.create_job("watched", doc, time.time())
    stream = store.add_stream(row.id, "algo-1", "watched/algo-1-1", 0)
    tap = ProfileTap()
    clock = ManualClock(wall_s=1_700_000_000.0)
    watcher = RuleWatcher(store, row, clock=clock, profile=tap)
    clock.start(watcher)
    start_ms = 1_700_000_000_000
    for i in range(4):  # busy cores, an idle GPU; no step within 0.6 s
        tap.put("algo-1", start_ms + 300 * i, _row(99.0, 1.0))
    clock.advance(1.0)
    assert [(f["RuleConfigurationName"], f["Message"].split(":")[0]) for f in watcher.findings] == [
        ("CPUBottleneck", "a GPU was below 10% utilization while a CPU core was above 90% at 3 of 3 datapoints (100% > "
         "threshold 50%)"), ("ProfilerReport", "MaxInitializationTime")]
    store.write_batch(Batch(row.id, chunks=[(stream.id, 0, 1, start_ms + 1000, "step=1")],
                            points=[("step", start_ms + 1000, 1.0, "algo-1", stream.id, 0)],
                            stream_stats={stream.id: (1, 6, start_ms + 1000)}))
    watcher.finish()  # the verdicts
    assert watcher.is_alive()  # the report waits for the job's own final status
    watcher.job_ended()
    watcher.join()  # and then ProfilerReport's report
    stored = store.get_job("watched")
    assert stored is not None
    statuses = {s["RuleConfigurationName"]: s for s in stored.doc["ProfilerRuleEvaluationStatuses"]}
    assert statuses["CPUBottleneck"]["RuleEvaluationStatus"] == "IssuesFound"
    report = statuses["ProfilerReport"]["StatusDetails"].splitlines()
    assert report[0].startswith("RuleEvaluationConditionMet: Evaluation of the rule ProfilerReport resulted")
    assert report[1].startswith("MaxInitializationTime: the training loop started late: no step yet 0.9 s after")
    assert report[2].startswith(("Profiling report: ", "The profiling report was not written: "))
    assert "algo-1 gave 4 datapoints with GPU readings, not more than patience 1000: not judged (BatchSize, " \
           "CPUBottleneck, GPUMemoryIncrease, IOBottleneck, LowGPUUtilization)" in report
    assert "algo-1 gave 0 step durations, not more than the 100 StepOutlier needs (StepOutlier)" in report


def _hooked_job(store: Store, name: str, rules: list[dict[str, Any]], ends: list[float],
                metrics: list[dict[str, str]] | None = None) -> dict[str, dict[str, Any]]:
    """A job whose tensor hook wrote ``ends`` (steps 0, 1, ... ended then), run through a RuleWatcher
    to its verdicts: the profiler rules' statuses, by name."""
    doc = job_document({"TrainingJobName": name, "ProfilerRuleConfigurations": rules, "AlgorithmSpecification": {
        "ContainerEntrypoint": ["true"], "MetricDefinitions": metrics or []}}, time.time(), home=store.home)
    row = store.create_job(name, doc, time.time())
    path = tensors.tensor_dir(job_dir(store.home, name) / "algo-1") / records.file_name("algo-1")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(records.header(1, 500, ends[0]) + records.step_ends(0, ends[:60]) + "{\"hook\": "
                    "\"trainmon.debug\", \"steps\": {\"first\": 1, \"ends\": [\"x\"]}}\n"  # a bad one: skipped
                    + records.step_ends(60, ends[60:]), encoding="utf-8")
    tap = ProfileTap()
    for i in range(3):
        tap.put("algo-1", int(1000 * ends[0]) + 100 * i, _row(5.0, None))
    clock = ManualClock(wall_s=ends[0])
    watcher = RuleWatcher(store, row, clock=clock, profile=tap)
    clock.start(watcher)  # the first pass: the hook's steps, then the datapoints
    watcher.finish()
    watcher.join()
    assert watcher.tensors.files["algo-1"].bad_lines == (1 if watcher.profiling.hook_steps else 0)  # else unread
    stored = store.get_job(name)
    assert stored is not None
    return {s["RuleConfigurationName"]: s for s in stored.doc["ProfilerRuleEvaluationStatuses"]}


def test_the_hooks_steps_reach_step_outlier_and_max_initialization_time(store: Store) -> None:
    rules = [_config("StepOutlier", n_outliers="0", stddev="3"), _config("MaxInitializationTime", threshold="1")]
    even = [1_700_000_000.0 + i for i in range(150)]  # a step a second, no metric giving steps
    statuses = _hooked_job(store, "hooked-even", rules, even)
    assert statuses["StepOutlier"]["RuleEvaluationStatus"] == "NoIssuesFound"
    assert statuses["MaxInitializationTime"]["RuleEvaluationStatus"] == "NoIssuesFound"
    assert "no step" not in statuses["MaxInitializationTime"].get("StatusDetails", "")
    slow = even[:130] + [t + 5.0 for t in even[130:]]  # step 130 took 6 s
    statuses = _hooked_job(store, "hooked-slow", rules, slow)
    assert statuses["StepOutlier"]["RuleEvaluationStatus"] == "IssuesFound"
    assert "step 130 took 6 s, the mean is 1 s" in statuses["StepOutlier"]["StatusDetails"]
    stepped = _hooked_job(store, "hooked-stepped", rules, slow, [{"Name": "step", "Regex": r"step=(\d+)"}])
    assert stepped["StepOutlier"]["RuleEvaluationStatus"] == "NoIssuesFound"  # the step metric's steps win


@pytest.mark.parametrize("seed", range(3))
def test_step_outlier_judges_steps_given_together_as_one_at_a_time(seed: int) -> None:
    rng = random.Random(seed)
    stamps = [0.0]
    for _ in range(3000):
        stamps.append(stamps[-1] + (rng.choice([0.0, 0.0, 0.1, 0.1, 0.1, 7.0]) if rng.random() < 0.1 else 0.1))
    steps = [step // rng.choice([1, 1, 1, 2]) for step in range(len(stamps))]  # some steps named twice
    one, together = StepOutlier(n_outliers=5), StepOutlier(n_outliers=5)
    found = [f for step, stamp in zip(steps, stamps, strict=True) for f in one.observe_step(step, stamp)]
    cuts = sorted(rng.sample(range(1, len(steps)), 20))
    found_together = [f for start, end in zip([0, *cuts], [*cuts, len(steps)], strict=True)
                      for f in together.observe_steps(steps[start:end], stamps[start:end])]
    assert found == found_together and len(found) == 1
    assert (one.outliers, one._count, one._mean, one._m2) == (together.outliers, together._count, together._mean,
                                                               together._m2)


def _loss_point(timestamp_s: float, *, seq: int) -> JobPoints:
    """A train:loss point of algo-1's record ``seq``, as the rules' thread reads it."""
    return JobPoints(["train:loss"], {1: "algo-1"}, np.array([int(timestamp_s * 1000)]), np.array([1]), np.array([seq]),
                     np.array([0]), np.array([1.0]))


def test_the_hooks_steps_replace_the_loss_points_as_steps() -> None:
    setup = _setup("StepOutlier", n_outliers="0")
    assert setup.parameters.get("loss_metric") == "train:loss" and profiler_setup.reads_hook_steps(setup)
    rules = ProfilerRules([setup])
    rules.observe_points(_loss_point(5.0, seq=0))  # a step by the loss, before the hook's came
    found = [f for step in range(120) for _, _, f in rules.observe_step("algo-1", step, 100.0 + step)]
    found += [f for _, _, f in rules.observe_step("algo-1", 120, 230.0)]
    assert [f.step for f in found] == [120]  # the loss's point of 5.0 s is not a step before the hook's 100.0 s
    rules.observe_points(_loss_point(231.0, seq=1))  # and no step once the hook's came
    [(rule, _)] = rules.configured[0].rules("algo-1")
    assert isinstance(rule, StepOutlier) and rule.outliers == 1
    stepped = ProfilerRules([_setup("StepOutlier", ("step", "train:loss"), step_metric="step")])
    assert not stepped.hook_steps and stepped.observe_step("algo-1", 1, 1.0) == []


# -- real jobs ------------------------------------------------------------------------------

_BURN = """
    import multiprocessing, sys, time

    def burn(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass

    def found_late():
        # whether MaxInitializationTime has fired: a late job's first step comes only after it (the
        # rule judges the profile as far as the job's output is stored, a second or so behind)
        import os, trainmon
        findings = trainmon.client("trainmon").list_rule_findings(TrainingJobName=os.environ["TRAINING_JOB_NAME"])
        return any(f["RuleConfigurationName"] == "MaxInitializationTime" for f in findings["RuleFindings"])

    if __name__ == "__main__":
        first_step_late = sys.argv[1] == "late"
        if not first_step_late:
            print("step=1 loss=1.0", flush=True)
        workers = [multiprocessing.Process(target=burn, args=(3.0,)) for _ in range(2)]
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + 120
        while first_step_late and not found_late() and time.monotonic() < deadline:
            time.sleep(0.05)
        for worker in workers:
            worker.join()
        print("step=2 loss=0.5", flush=True)
"""
_METRICS = ("--metric", r"step=step=(\d+)", "--metric", r"loss=loss=(\S+)")


def _run(name: str, script: Path, *args: str, gpus: Path, rules: tuple[str, ...] = ()) -> dict[str, Any]:
    """``trainmon run`` a script profiled at 100 ms with the fake GPUs of ``gpus``; ListRuleFindings' answer."""
    options = ["run", "--name", name, "--profiling-interval-ms", "100", "--environment",
               f"TRAINMON_FAKE_GPUS={gpus}", *_METRICS]
    for rule in rules:
        options += ["--rule", rule]
    done = run_cli(*options, "--", PY, str(script), *args, timeout=JOB_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = trainmon.client("trainmon").list_rule_findings(TrainingJobName=name)
    return answer


def _statuses(answer: dict[str, Any]) -> dict[str, str]:
    return {rule["RuleConfigurationName"]: rule["RuleEvaluationStatus"] for rule in answer["Rules"]}


def test_a_cpu_bound_job_with_an_idle_gpu_fires_and_with_a_busy_gpu_does_not(home: Path, script: Script,
                                                                               tmp_path: Path) -> None:
    burn = script(_BURN)
    rules = ("CPUBottleneck:patience=3,threshold=30,cpu_threshold=40", "MaxInitializationTime:threshold=0.02")
    idle, busy = tmp_path / "idle.json", tmp_path / "busy.json"
    _write_gpus(idle, [{"utilization_pct": 2, "memory_used_pct": 5}])
    _write_gpus(busy, [{"utilization_pct": 95, "memory_used_pct": 60}])

    answer = _run("starved", burn, "late", gpus=idle, rules=rules)
    assert _statuses(answer) == {"CPUBottleneck": "IssuesFound", "MaxInitializationTime": "IssuesFound"}
    by_rule = {f["RuleConfigurationName"]: f for f in answer["RuleFindings"]}
    cpu = by_rule["CPUBottleneck"]
    assert cpu["Host"] == "algo-1" and cpu["Values"]["gpu_utilization_pct"] == 2.0
    assert cpu["Values"]["bottleneck_pct"] > 30 and cpu["Thresholds"]["cpu_threshold"] == 40.0
    assert by_rule["MaxInitializationTime"]["Values"]["waited_seconds"] > 1.2  # 0.02 minutes
    listed = run_cli("rules", "starved", check=True).stdout
    assert "CPUBottleneck          Profiler  IssuesFound  1" in listed
    assert "algo-1  CPUBottleneck          -     a GPU was below 10% utilization while a CPU core was above 40%" \
        in listed
    described = run_cli("describe", "starved", check=True).stdout
    assert "MaxInitializationTime  IssuesFound  the training loop started late: no step yet" in described

    answer = _run("fed", burn, "early", gpus=busy, rules=rules)
    assert _statuses(answer) == {"CPUBottleneck": "NoIssuesFound", "MaxInitializationTime": "NoIssuesFound"}
    assert answer["RuleFindings"] == []


def test_a_step_stored_late_is_known_before_the_profile_past_it_is_judged(home: Path, tmp_path: Path) -> None:
    """The job prints its first step at once, then the store is held locked past MaxInitializationTime's
    threshold while the profiler ticks on: the datapoints past the threshold wait until the step
    before them is stored, so the training loop did not start late."""
    import subprocess
    import sys

    go, done = tmp_path / "go", tmp_path / "done"
    os.mkfifo(go)
    os.mkfifo(done)
    job = tmp_path / "job.py"
    job.write_text(
        "import time\n"
        "print('ready', flush=True)\n"
        f"open({str(go)!r}).read()  # the test has locked the store\n"
        "print('step=1 loss=1.0', flush=True)\n"
        "time.sleep(4)  # past the 1.2 s threshold, the profiler ticking\n"
        f"open({str(done)!r}, 'w').close()\n"
        "print('step=2 loss=0.5', flush=True)\n"
    )
    errors = tmp_path / "stderr"
    with errors.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "trainmon", "run", "--name", "late-store", "--profiling-interval-ms", "100",
             "--rule", "MaxInitializationTime:threshold=0.02", *_METRICS, "--", PY, str(job)],
            stdout=subprocess.PIPE, stderr=stderr, text=True)
    ready, reader = echo_watch(process, "ready\n")
    try:
        assert ready.wait(JOB_TIMEOUT_S), "the job's first line was not echoed"
        with sqlite_locked(home):  # the step that follows is read, and waits to be stored
            with open(go, "w"):
                pass
            with open(done):  # the job slept past the threshold
                pass
        assert process.wait(JOB_TIMEOUT_S) == 0, errors.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        reader.join()
    answer = trainmon.client("trainmon").list_rule_findings(TrainingJobName="late-store")
    assert _statuses(answer) == {"MaxInitializationTime": "NoIssuesFound"}, answer["RuleFindings"]


def test_profiler_report_is_on_by_default_and_writes_the_report(home: Path, script: Script, tmp_path: Path) -> None:
    job = script("""
        import time
        for step in range(15):
            print(f"step={step} loss={1 / (1 + step):.4f}", flush=True)
            time.sleep(0.1)
    """)
    answer = _run("reported", job, gpus=tmp_path / "none.json")  # no such file: a host without GPUs
    [rule] = answer["Rules"]
    assert rule["RuleName"] == "ProfilerReport" and rule["RuleConfigurationName"].startswith("ProfilerReport-")
    assert rule["RuleEvaluationStatus"] == "NoIssuesFound"
    details = rule["StatusDetails"].splitlines()
    assert "no GPU on algo-1 (BatchSize, CPUBottleneck, GPUMemoryIncrease, IOBottleneck, LoadBalancing, " \
           "LowGPUUtilization)" in details
    first = details[0]
    if first.startswith("The profiling report was not written"):  # trainmon.report missing or failing: said so
        pytest.fail(first)
    assert first.startswith("Profiling report: ")
    page = Path(first.removeprefix("Profiling report: "))
    text = page.read_text(encoding="utf-8")
    assert page.is_file() and "<html" in text[:2000].lower()
    assert '<b id="status">Completed</b>' in text  # made after the job's final status, not while it packed up
    described = run_cli("describe", "reported", check=True).stdout
    assert f"{rule['RuleConfigurationName']}  NoIssuesFound  Profiling report: {page} (+" in described
