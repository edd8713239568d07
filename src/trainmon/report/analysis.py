"""The report's figures, pure: arrays and job times in, plain records out.

Nothing here reads a file or the store. The statistics are those of SageMaker's profiler report:
per host and metric the maximum, p99, p95, p50 and minimum (NaN left out, percentiles interpolated
linearly between the closest ranks, as numpy's and ``trainmon profile``'s); the job's phases
(initialization until the first step, the training loop, finalization after the last step); step
durations from the times of a step metric's points; and the periods in which a host's CPU (or its
I/O wait) was high while its GPUs were idle, the conditions of CPUBottleneck and IOBottleneck.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .. import units

Columns = tuple[np.ndarray, np.ndarray]  # (epoch ms, int64, ascending; values, float64)

STEP_NAMES = ("step", "global_step", "globalstep", "steps", "iteration", "iterations", "iter", "batch",
              "batch_idx", "batch_index", "batch_num", "minibatch")
"""Metric names that count training steps, in the order they are preferred; a prefix such as
``train:`` or ``train/`` is ignored (``train:step`` is a step metric)."""

CPU_TOTAL = "cpu_utilization_pct"  # the mean of a host's cores, made here from cpuN_utilization_pct
IOWAIT = "cpu_iowait_pct"
_CORE = re.compile(r"cpu(\d+)_utilization_pct")
_GPU = re.compile(r"gpu(\d+)_(utilization|memory_used)_pct")
PERCENTILES = (99.0, 95.0, 50.0)
MAX_STEPS = 5_000_000  # durations counted one per step up to this many steps, else one per interval


@dataclass(frozen=True)
class Usage:
    """One metric of one host over the job: what the System Usage table shows."""

    host: str
    metric: str
    unit: str
    samples: int
    maximum: float
    p99: float
    p95: float
    p50: float
    minimum: float


@dataclass(frozen=True)
class Phases:
    """The job's time split as SageMaker's Training Job Summary splits it (epoch seconds).

    ``first_s``/``last_s`` are the first and last step (or, without a step metric, metric point);
    None when the job printed none. ``running``: the job has not ended, ``end_s`` is now."""

    start_s: float
    end_s: float
    first_s: float | None
    last_s: float | None
    running: bool

    @property
    def duration_s(self) -> float:
        return max(0.0, self.end_s - self.start_s)

    @property
    def initialization_s(self) -> float | None:
        return None if self.first_s is None else max(0.0, self.first_s - self.start_s)

    @property
    def loop_s(self) -> float | None:
        return None if self.first_s is None or self.last_s is None else max(0.0, self.last_s - self.first_s)

    @property
    def finalization_s(self) -> float | None:
        return None if self.last_s is None or self.running else max(0.0, self.end_s - self.last_s)

    def share(self, seconds: float | None) -> float | None:
        """``seconds`` as a percentage of the job's duration."""
        if seconds is None or self.duration_s <= 0:
            return None
        return 100.0 * seconds / self.duration_s


@dataclass(frozen=True)
class StepStats:
    """Step durations (seconds) of one host."""

    host: str
    steps: int
    mean: float
    maximum: float
    p99: float
    p95: float
    p50: float
    minimum: float


@dataclass(frozen=True)
class Period:
    """A stretch of time (epoch ms, end exclusive) in which a condition held."""

    start_ms: int
    end_ms: int


# -- units ----------------------------------------------------------------------------------


def profile_unit(metric: str) -> str:
    """The unit of a profiler metric, from its name; a count when it names none."""
    return units.profile_unit(metric) or "Count"


# -- system usage ---------------------------------------------------------------------------


def usage(host: str, metric: str, unit: str, values: np.ndarray) -> Usage | None:
    """The Usage row of one metric's values (None when it holds no number)."""
    kept = values[~np.isnan(values)]
    if not len(kept):
        return None
    p99, p95, p50 = (float(v) for v in np.percentile(kept, PERCENTILES))
    return Usage(host, metric, unit, len(kept), float(kept.max()), p99, p95, p50, float(kept.min()))


def metric_order(name: str) -> tuple[int, int, str]:
    """The order metrics are listed in: the CPU total, cores, I/O wait, GPUs, the rest by name."""
    core = _CORE.fullmatch(name)
    gpu = _GPU.fullmatch(name)
    if name == CPU_TOTAL:
        return (0, 0, name)
    if core:
        return (1, int(core.group(1)), name)
    if name == IOWAIT:
        return (2, 0, name)
    if gpu:
        return (3, int(gpu.group(1)), name)
    return (4, 0, name)


# -- a host's series --------------------------------------------------------------------------


def at(stamps: np.ndarray, columns: Columns) -> np.ndarray:
    """``columns``' values at ``stamps``: the latest at or before each (NaN before its first). A
    profile's metrics of one host share their rows' times, so this is usually the values as they are."""
    own, values = columns
    if len(own) == len(stamps) and np.array_equal(own, stamps):
        return values
    index = np.searchsorted(own, stamps, side="right") - 1
    found = np.where(index >= 0, values[np.clip(index, 0, None)] if len(values) else np.nan, np.nan)
    return np.asarray(found, dtype=np.float64)


def cpu_total(metrics: Mapping[str, Columns]) -> Columns | None:
    """The mean utilization of a host's cores per row (the profile records each core)."""
    cores = sorted((name for name in metrics if _CORE.fullmatch(name)), key=metric_order)
    if not cores:
        return None
    stamps = metrics[cores[0]][0]
    total, counted = np.zeros(len(stamps)), np.zeros(len(stamps))
    for name in cores:  # core by core: no array of every core at once
        values = at(stamps, metrics[name])
        known = ~np.isnan(values)
        total += np.where(known, values, 0.0)
        counted += known
    with np.errstate(invalid="ignore", divide="ignore"):
        return stamps, np.where(counted > 0, total / counted, np.nan)


def gpus(metrics: Mapping[str, Columns], kind: str = "utilization") -> list[str]:
    """The host's ``gpuN_<kind>_pct`` metrics (kind: utilization or memory_used), by GPU number."""
    names = [name for name in metrics if (found := _GPU.fullmatch(name)) and found.group(2) == kind]
    return sorted(names, key=metric_order)


def busiest_gpu(metrics: Mapping[str, Columns]) -> Columns | None:
    """Per row, the utilization of the host's busiest GPU: the GPUs are idle when it is."""
    names = gpus(metrics)
    if not names:
        return None
    stamps = metrics[names[0]][0]
    busiest = np.full(len(stamps), -np.inf)
    for name in names:
        np.fmax(busiest, at(stamps, metrics[name]), out=busiest)  # fmax: a NaN reading is no reading
    busiest[busiest == -np.inf] = np.nan  # no GPU read: not idle, unknown
    return stamps, busiest


def periods(stamps: np.ndarray, held: np.ndarray, merge_ms: int = 0) -> list[Period]:
    """The runs of rows where ``held`` is true, each lasting until the next row (the last one, one
    median row interval), with runs less than ``merge_ms`` apart joined (a chart's pixel)."""
    if not len(stamps) or not held.any():
        return []
    step = int(np.median(np.diff(stamps))) if len(stamps) > 1 else 1000
    ends_at = np.append(stamps[1:], stamps[-1] + max(step, 1))
    flags = held.astype(np.int8)
    edges = np.diff(np.concatenate(([0], flags, [0])))
    begins, ends = stamps[np.flatnonzero(edges == 1)], ends_at[np.flatnonzero(edges == -1) - 1]
    apart = np.flatnonzero(begins[1:] - ends[:-1] > merge_ms)  # runs joined without a loop over them
    firsts, lasts = np.concatenate(([0], apart + 1)), np.append(apart, len(begins) - 1)
    return [Period(int(b), int(e)) for b, e in zip(begins[firsts].tolist(), ends[lasts].tolist(), strict=True)]


def bottlenecks(busy: Columns, gpu: Columns, busy_above: float, gpu_below: float,
                merge_ms: int = 0) -> tuple[list[Period], float]:
    """When ``busy`` (CPU or I/O wait, %) was above ``busy_above`` while the busiest GPU was below
    ``gpu_below``: the periods, and the share of rows (%) where that held."""
    stamps, values = busy
    idle = at(stamps, gpu) < gpu_below
    with np.errstate(invalid="ignore"):
        held = (values > busy_above) & idle
    share = 100.0 * float(held.mean()) if len(held) else 0.0
    return periods(stamps, held, merge_ms), share


# -- steps ------------------------------------------------------------------------------------


def step_metric(names: Sequence[str], preferred: Sequence[str] = ()) -> str | None:
    """The job's step metric: one a rule names (``step_metric``), else the first definition named
    like a step (any case, a ``train:``-style prefix ignored)."""
    for name in preferred:
        if name in names:
            return name
    by_base: dict[str, str] = {}
    for name in names:
        by_base.setdefault(re.split(r"[:/]", name.lower())[-1], name)
    return next((by_base[base] for base in STEP_NAMES if base in by_base), None)


def step_intervals(stamps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The intervals between a step metric's changes (one host, time order): when each ended
    (epoch ms), seconds per step in it, and how many steps it held. A step begins where the value
    changes; an interval over several steps (a job that prints every 10th) is shared among them; a
    value that goes back (a counter per epoch) starts one new step."""
    finite = np.isfinite(values)
    stamps, values = stamps[finite], values[finite]
    if len(values):
        changed = np.concatenate(([True], values[1:] != values[:-1]))
        stamps, values = stamps[changed], values[changed]
    if len(values) < 2:
        return np.empty(0, np.int64), np.empty(0), np.empty(0)
    elapsed = np.diff(stamps).astype(np.float64) / 1000.0
    moved = np.diff(values)
    count = np.where(moved >= 1, np.floor(moved), 1.0)
    return stamps[1:], elapsed / count, count


def step_durations(per_step: np.ndarray, count: np.ndarray) -> np.ndarray:
    """One duration per step, from :func:`step_intervals`' seconds per step and steps per interval."""
    if count.sum() > MAX_STEPS:  # a step value that leaps (a bad print) must not make an array of it
        return per_step
    return np.repeat(per_step, count.astype(np.int64))


def step_stats(host: str, durations: np.ndarray) -> StepStats | None:
    if not len(durations):
        return None
    p99, p95, p50 = (float(v) for v in np.percentile(durations, PERCENTILES))
    return StepStats(host, len(durations), float(durations.mean()), float(durations.max()), p99, p95, p50,
                     float(durations.min()))


def phases(start_s: float, end_s: float, first_s: float | None, last_s: float | None, running: bool) -> Phases:
    """The phases of a job, its first and last step clamped into [start, end]."""
    end_s = max(end_s, start_s)

    def clamp(moment: float | None) -> float | None:
        return None if moment is None else min(max(moment, start_s), end_s)

    return Phases(start_s, end_s, clamp(first_s), clamp(last_s), running)
