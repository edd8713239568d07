"""Which series each chart of the report draws, and where findings are marked (pure).

A host's readings are the profile's (per core, per GPU, every tick) or, for a job that ran
without the profiler, its CloudWatch system metrics (summed over cores and GPUs, one datapoint a
period); :func:`series` names what a chart wants (the CPU, the I/O wait, each GPU) in either.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from . import analysis
from .analysis import Columns
from .charts import Band, Line, Marker
from .gather import JobData, RuleView
from .sources import PROFILE, HostReadings

CPU, IOWAIT, GPU, GPU_MEMORY, BUSIEST_GPU = "cpu", "iowait", "gpu", "gpu-memory", "busiest-gpu"
_CLOUDWATCH = {CPU: ["CPUUtilization"], GPU: ["GPUUtilization"], GPU_MEMORY: ["GPUMemoryUtilization"],
               BUSIEST_GPU: ["GPUUtilization"], IOWAIT: []}

PROFILER_VIEWS: dict[str, tuple[str, ...]] = {
    "CPUBottleneck": (CPU, BUSIEST_GPU), "IOBottleneck": (IOWAIT, BUSIEST_GPU), "LowGPUUtilization": (GPU,),
    "LoadBalancing": (GPU,), "GPUMemoryIncrease": (GPU_MEMORY,), "BatchSize": (CPU, GPU, GPU_MEMORY),
}
"""What a profiler rule watches, drawn in its chart when it found issues."""


def series(readings: HostReadings, what: str) -> list[tuple[str, Columns]]:
    """A host's series for ``what`` (CPU, IOWAIT, GPU, GPU_MEMORY, BUSIEST_GPU), labelled."""
    metrics = readings.metrics
    if readings.source != PROFILE:
        return [(f"{readings.host} {name}", metrics[name]) for name in _CLOUDWATCH[what] if name in metrics]
    if what == CPU:
        total = readings.derived(analysis.CPU_TOTAL, analysis.cpu_total)
        return [(f"{readings.host} CPU (mean of cores)", total)] if total is not None else []
    if what == IOWAIT:
        return [(f"{readings.host} I/O wait", metrics[analysis.IOWAIT])] if analysis.IOWAIT in metrics else []
    if what == BUSIEST_GPU:
        busiest = readings.derived(BUSIEST_GPU, analysis.busiest_gpu)
        return [(f"{readings.host} GPU (busiest)", busiest)] if busiest is not None else []
    kind = "utilization" if what == GPU else "memory_used"
    return [(f"{readings.host} {name.split('_', 1)[0]}", metrics[name]) for name in analysis.gpus(metrics, kind)]


def has_gpus(readings: HostReadings) -> bool:
    return bool(series(readings, GPU))


def lines(pairs: Iterable[tuple[str, Columns]]) -> list[Line]:
    return [Line(label, stamps, values) for label, (stamps, values) in pairs]


def bottleneck_bands(data: JobData, readings: HostReadings, which: str, merge_ms: int
                     ) -> tuple[list[Band], float] | None:
    """The CPU (``which="cpu"``) or I/O bottleneck periods of a profiled host with GPUs, and their
    share of its ticks; None when they cannot be told (no profile, no GPU, no reading)."""
    if readings.source != PROFILE:
        return None
    busy = series(readings, CPU if which == "cpu" else IOWAIT)
    gpu = readings.derived(BUSIEST_GPU, analysis.busiest_gpu)
    if not busy or gpu is None:
        return None
    rule, parameter = ("CPUBottleneck", "cpu_threshold") if which == "cpu" else ("IOBottleneck", "io_threshold")
    above, below = data.thresholds[(rule, parameter)], data.thresholds[(rule, "gpu_threshold")]
    found, share = analysis.bottlenecks(busy[0][1], gpu, above, below, merge_ms)
    word = "CPU" if which == "cpu" else "I/O wait"
    text = f"{word} bottleneck: {word} above {above:g}% while every GPU was below {below:g}%"
    return [Band(p.start_ms, p.end_ms, which, text) for p in found], share


# -- findings -----------------------------------------------------------------------------------


def finding_text(rule: RuleView, finding: dict[str, object]) -> str:
    step = f" at step {finding['Step']}" if finding.get("Step") is not None else ""
    return f"{rule.name} on {finding.get('Host', '?')}{step}: {finding.get('Message', '')}"


def value_at(columns: Columns | None, time_ms: int) -> float | None:
    """The series' value at a moment (its latest point at or before it); None when there is none."""
    if columns is None or not len(columns[0]):
        return None
    index = int(np.searchsorted(columns[0], time_ms, side="right")) - 1
    value = float(columns[1][max(index, 0)])
    return value if math.isfinite(value) else None


def metric_markers(data: JobData, metric: str, rules: Iterable[RuleView] | None = None) -> list[Marker]:
    """The findings of ``rules`` (default: all the job's) to mark on a metric's curve: those about
    this metric, and those of metric rules about no metric in particular (a silent host)."""
    found = []
    for rule in data.rules if rules is None else rules:
        for finding in rule.findings:
            about = finding.get("Metric")
            if about == metric or (about is None and rule.kind == "Debug" and rule.rule == "StalledTrainingRule"):
                time_ms = int(float(finding["Time"]) * 1000)
                columns = data.metrics.get(metric, {}).get(str(finding.get("Host", "")))
                value = value_at(columns, time_ms) if about == metric else None
                found.append(Marker(time_ms, finding_text(rule, finding), value))
    return found


def watched_metrics(data: JobData, rule: RuleView) -> list[str]:
    """The job metrics a rule read (its findings' metrics and its metric parameters), in the job."""
    named = [f.get("Metric") for f in rule.findings]
    named += [rule.parameters.get(key) for key in ("loss_metric", "validation_metric")]
    if rule.rule == "StalledTrainingRule" or rule.rule == "MaxInitializationTime":
        named.append(data.step_metric or next(iter(data.metrics), None))
    return [name for name in dict.fromkeys(n for n in named if isinstance(n, str)) if name in data.metrics]


def rule_markers(rule: RuleView, host: str | None = None) -> list[Marker]:
    return [Marker(int(float(f["Time"]) * 1000), finding_text(rule, f)) for f in rule.findings
            if host is None or f.get("Host") == host]


def step_lines(data: JobData) -> list[Line]:
    """Seconds per step over time, per host (each interval between step prints, at its end)."""
    return [Line(f"{host} seconds per step", ends, per_step) for host, (ends, per_step, _) in data.steps.items()
            if len(ends)]
