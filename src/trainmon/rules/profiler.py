"""SageMaker Debugger's profiler rules, pure: a host's profile datapoints and steps in, findings out.

Each rule is a small state machine for one host. A *datapoint* is one profile tick of that host
(a :class:`Tick`: the row the system monitor makes every profiling interval, see
docs/system-metrics.md); :meth:`ProfilerRule.observe` takes one and returns the findings it
brings. Rules that need the training loop's steps (StepOutlier, MaxInitializationTime) are told
of each step with :meth:`ProfilerRule.observe_step` (the step's number and the time of its
record); the runner feeds steps from a step metric or the loss metric, and the tensor hook can
feed them too. No rule reads a file, the store or the clock.

What the rules count, precisely:

- **patience**: a rule records its first ``patience`` datapoints (they count in its shares,
  windows and histograms) but gives no verdict before datapoint ``patience + 1``, so the GPU idle
  of the job's initialization does not fire it at once (Debugger's meaning).
- **window**: percentiles and means are over the host's last ``window`` datapoints, per GPU
  where the rule is per GPU; a percentile is NumPy's default (linear between the two nearest ranks).
- The GPU rules (CPUBottleneck, IOBottleneck, LowGPUUtilization, GPUMemoryIncrease, BatchSize,
  LoadBalancing) count only datapoints that hold GPU readings: a host without GPUs gives them
  nothing to find, which :meth:`ProfilerRule.notes` says ("no GPU on algo-1"); nothing is ever
  read as zero.

A rule reports a condition when it starts, not again while it holds; once it clears the rule can
fire again (StepOutlier and MaxInitializationTime fire at most once).
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from .metric import Finding


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU's readings at a datapoint."""

    index: int
    utilization_pct: float
    memory_used_pct: float


@dataclass(frozen=True, slots=True)
class Tick:
    """One datapoint: what one profile tick of a host read (host-wide CPU per core, I/O wait and
    memory; each GPU; the number of the job's processes on the host)."""

    timestamp_s: float
    cpu_pct: tuple[float, ...]
    iowait_pct: float = 0.0
    memory_used_pct: float = 0.0
    gpus: tuple[Gpu, ...] = ()
    job_processes: int = 1


_CORE = re.compile(r"cpu(\d+)_utilization_pct")
_GPU = re.compile(r"gpu(\d+)_utilization_pct")


@lru_cache(maxsize=64)
def _layout(names: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[tuple[int, str, str], ...]]:
    """Which columns of a profile row are cores and GPUs (rows of one host share their names)."""
    cores = tuple(name for name in names if _CORE.fullmatch(name))
    gpus = tuple((int(match.group(1)), name, f"gpu{match.group(1)}_memory_used_pct")
                 for name in names if (match := _GPU.fullmatch(name)))
    return cores, gpus


def tick(timestamp_ms: int, values: Mapping[str, float]) -> Tick:
    """A datapoint from a profile row (``cpuN_utilization_pct``, ``cpu_iowait_pct``, ``gpuN_*``, ...)."""
    cores, gpus = _layout(tuple(values))
    return Tick(timestamp_ms / 1000, tuple(values[name] for name in cores), values.get("cpu_iowait_pct", 0.0),
                values.get("memory_used_pct", 0.0),
                tuple(Gpu(index, values[used], values.get(memory, 0.0)) for index, used, memory in gpus),
                int(values.get("job_processes", 1)))


@lru_cache(maxsize=8192)
def _position(count: int, q: float) -> tuple[int, int, float]:
    """Where the ``q`` quantile of ``count`` sorted values lies: the two ranks and how far between."""
    position = q * (count - 1)
    low = math.floor(position)
    return low, min(low + 1, count - 1), position - low


def quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted values, linear between the nearest ranks (NumPy's default)."""
    low, high, fraction = _position(len(ordered), q)
    below = ordered[low]
    return below + (ordered[high] - below) * fraction if fraction else below


class Window:
    """The last ``size`` values, in arrival order and sorted: a percentile costs a lookup, a new
    value one insertion into a sorted list (a memmove of at most ``size`` pointers)."""

    __slots__ = ("size", "_arrived", "ordered")

    def __init__(self, size: int) -> None:
        self.size = size
        self._arrived: deque[float] = deque()
        self.ordered: list[float] = []

    def add(self, value: float) -> None:
        arrived, ordered = self._arrived, self.ordered
        arrived.append(value)
        bisect.insort(ordered, value)
        if len(arrived) > self.size:
            del ordered[bisect.bisect_left(ordered, arrived.popleft())]

    def quantile(self, q: float) -> float:
        return quantile(self.ordered, q)

    def __len__(self) -> int:
        return len(self._arrived)


def _shown(value: float) -> str:
    return f"{value:.3g}"


class ProfilerRule:
    """A profiler rule for one host: datapoints and steps in, findings out (this base finds nothing)."""

    name = ""

    def observe(self, tick: Tick) -> list[Finding]:
        """The findings this datapoint brings (usually none)."""
        return []

    def observe_step(self, step: int, timestamp_s: float) -> list[Finding]:
        """The findings a step of the training loop brings (``timestamp_s``: when its record was read)."""
        return []

    reads_steps = False  # whether observe_step does anything (the rules that read no steps skip them)

    def observe_steps(self, steps: list[int], timestamps_s: list[float]) -> list[Finding]:
        """:meth:`observe_step` of each step in turn."""
        found: list[Finding] = []
        for step, timestamp_s in zip(steps, timestamps_s, strict=True):
            found.extend(self.observe_step(step, timestamp_s))
        return found

    def notes(self, host: str) -> list[str]:
        """What to tell at the end: why the rule could not judge this host (nothing: it could), or,
        for OverallSystemUsage, what it measured."""
        return []


class _GpuRule(ProfilerRule):
    """A rule on GPU readings: counts the datapoints that hold some, judges after ``patience``."""

    def __init__(self, patience: int) -> None:
        self.patience = patience
        self.datapoints = 0
        self.without_gpu = 0

    def observe(self, tick: Tick) -> list[Finding]:
        if not tick.gpus:
            self.without_gpu += 1
            return []
        self.datapoints += 1
        return self._observe(tick, self.datapoints > self.patience)

    def _observe(self, tick: Tick, ready: bool) -> list[Finding]:
        raise NotImplementedError

    def notes(self, host: str) -> list[str]:
        if not self.datapoints:
            return [f"no GPU on {host}"] if self.without_gpu else []
        if self.datapoints <= self.patience:
            return [f"{host} gave {self.datapoints} datapoints with GPU readings, not more than patience "
                    f"{self.patience}: not judged"]
        return []


class _Bottleneck(_GpuRule):
    """A GPU below ``gpu_threshold`` % while something else is busy, at more than ``threshold`` %
    of the datapoints so far (those of the patience included, as Debugger counts them)."""

    busy_parameter = ""  # the parameter for what must be busy, and the value it reads
    busy_value = ""

    def __init__(self, threshold: float, gpu_threshold: float, busy_threshold: float, patience: int) -> None:
        super().__init__(patience)
        self.threshold = threshold
        self.gpu_threshold = gpu_threshold
        self.busy_threshold = busy_threshold
        self.bottlenecks = 0
        self._firing = False

    def _busy(self, tick: Tick) -> float:
        raise NotImplementedError

    def _observe(self, tick: Tick, ready: bool) -> list[Finding]:
        lowest = min(gpu.utilization_pct for gpu in tick.gpus)
        busy = self._busy(tick)
        if lowest < self.gpu_threshold and busy > self.busy_threshold:
            self.bottlenecks += 1
        if not ready:
            return []
        share = 100.0 * self.bottlenecks / self.datapoints
        if share <= self.threshold:
            self._firing = False
            return []
        if self._firing:
            return []
        self._firing = True
        return [Finding(self.name, tick.timestamp_s, self._message(share),
                        values={"bottleneck_pct": share, "bottlenecks": float(self.bottlenecks),
                                "datapoints": float(self.datapoints), "gpu_utilization_pct": lowest,
                                self.busy_value: busy},
                        thresholds={"threshold": self.threshold, "gpu_threshold": self.gpu_threshold,
                                    self.busy_parameter: self.busy_threshold, "patience": self.patience})]

    def _message(self, share: float) -> str:
        raise NotImplementedError


class CPUBottleneck(_Bottleneck):
    """A GPU idle while a CPU core is busy: the lowest GPU utilization below ``gpu_threshold`` %
    and the busiest core (host-wide) above ``cpu_threshold`` %."""

    name = "CPUBottleneck"
    busy_parameter, busy_value = "cpu_threshold", "cpu_utilization_pct"

    def __init__(self, *, threshold: float = 50.0, gpu_threshold: float = 10.0, cpu_threshold: float = 90.0,
                 patience: int = 1000) -> None:
        super().__init__(threshold, gpu_threshold, cpu_threshold, patience)

    def _busy(self, tick: Tick) -> float:
        return max(tick.cpu_pct, default=0.0)

    def _message(self, share: float) -> str:
        return (f"a GPU was below {_shown(self.gpu_threshold)}% utilization while a CPU core was above "
                f"{_shown(self.busy_threshold)}% at {self.bottlenecks} of {self.datapoints} datapoints "
                f"({_shown(share)}% > threshold {_shown(self.threshold)}%)")


class IOBottleneck(_Bottleneck):
    """A GPU idle while the CPUs wait for I/O: the lowest GPU utilization below ``gpu_threshold`` %
    and the host's I/O wait above ``io_threshold`` %."""

    name = "IOBottleneck"
    busy_parameter, busy_value = "io_threshold", "iowait_pct"

    def __init__(self, *, threshold: float = 50.0, gpu_threshold: float = 10.0, io_threshold: float = 50.0,
                 patience: int = 1000) -> None:
        super().__init__(threshold, gpu_threshold, io_threshold, patience)

    def _busy(self, tick: Tick) -> float:
        return tick.iowait_pct

    def _message(self, share: float) -> str:
        return (f"a GPU was below {_shown(self.gpu_threshold)}% utilization while I/O wait was above "
                f"{_shown(self.busy_threshold)}% at {self.bottlenecks} of {self.datapoints} datapoints "
                f"({_shown(share)}% > threshold {_shown(self.threshold)}%)")


class LowGPUUtilization(_GpuRule):
    """Per GPU, over its last ``window`` datapoints: p95 below ``threshold_p95`` (underused), or
    p95 above it and p5 below ``threshold_p5`` (fluctuating)."""

    name = "LowGPUUtilization"

    def __init__(self, *, threshold_p95: float = 70.0, threshold_p5: float = 10.0, window: int = 500,
                 patience: int = 1000) -> None:
        super().__init__(patience)
        self.threshold_p95, self.threshold_p5, self.window = threshold_p95, threshold_p5, window
        self._windows: dict[int, Window] = {}
        self._firing: dict[int, str | None] = {}

    def _observe(self, tick: Tick, ready: bool) -> list[Finding]:
        found = []
        for gpu in tick.gpus:
            window = self._windows.get(gpu.index)
            if window is None:
                window = self._windows[gpu.index] = Window(self.window)
            window.add(gpu.utilization_pct)
            if not ready:
                continue
            p95, p5 = window.quantile(0.95), window.quantile(0.05)
            kind = ("underused" if p95 < self.threshold_p95 else
                    "fluctuating" if p95 > self.threshold_p95 and p5 < self.threshold_p5 else None)
            fired, self._firing[gpu.index] = self._firing.get(gpu.index), kind
            if kind is None or kind == fired:
                continue
            if kind == "underused":
                message = (f"gpu{gpu.index} is underused: p95 utilization {_shown(p95)}% < threshold_p95 "
                           f"{_shown(self.threshold_p95)}%")
            else:
                message = (f"gpu{gpu.index} utilization fluctuates: p95 {_shown(p95)}% > threshold_p95 "
                           f"{_shown(self.threshold_p95)}% but p5 {_shown(p5)}% < threshold_p5 "
                           f"{_shown(self.threshold_p5)}%")
            found.append(Finding(self.name, tick.timestamp_s, f"{message} over the last {len(window)} datapoints",
                                 values={"gpu": float(gpu.index), "p95": p95, "p5": p5,
                                         "datapoints": float(len(window))},
                                 thresholds={"threshold_p95": self.threshold_p95, "threshold_p5": self.threshold_p5,
                                             "window": self.window, "patience": self.patience}))
        return found


class GPUMemoryIncrease(_GpuRule):
    """Per GPU: the mean memory use of its last ``window`` datapoints exceeds the mean of the
    ``window`` before them by more than ``increase`` percentage points.

    Debugger's code compares two moving averages one datapoint apart, which only a single reading
    ``window`` x ``increase`` points higher can move that far; two adjacent windows see growth."""

    name = "GPUMemoryIncrease"

    def __init__(self, *, increase: float = 5.0, patience: int = 1000, window: int = 10) -> None:
        super().__init__(patience)
        self.increase, self.window = increase, window
        self._values: dict[int, _Adjacent] = {}
        self._firing: set[int] = set()

    def _observe(self, tick: Tick, ready: bool) -> list[Finding]:
        found = []
        for gpu in tick.gpus:
            values = self._values.get(gpu.index)
            if values is None:
                values = self._values[gpu.index] = _Adjacent(self.window)
            if not values.add(gpu.memory_used_pct) or not ready:
                continue
            before, recent = values.before / self.window, values.recent / self.window
            rise = recent - before
            if rise <= self.increase:
                self._firing.discard(gpu.index)
                continue
            if gpu.index in self._firing:
                continue
            self._firing.add(gpu.index)
            found.append(Finding(self.name, tick.timestamp_s, f"gpu{gpu.index} memory rose by {_shown(rise)} "
                                 f"percentage points: {_shown(recent)}% over the last {self.window} datapoints "
                                 f"against {_shown(before)}% over the {self.window} before (increase "
                                 f"{_shown(self.increase)})",
                                 values={"gpu": float(gpu.index), "increase_pct": rise, "memory_used_pct": recent,
                                         "previous_memory_used_pct": before},
                                 thresholds={"increase": self.increase, "window": self.window,
                                             "patience": self.patience}))
        return found


class _Adjacent:
    """The last ``2 x window`` values and the sums of their two halves, kept as values come."""

    __slots__ = ("window", "values", "before", "recent", "_updates")

    def __init__(self, window: int) -> None:
        self.window = window
        self.values: deque[float] = deque(maxlen=2 * window)
        self.before = self.recent = 0.0
        self._updates = 0

    def add(self, value: float) -> bool:
        """Whether both halves are full (their sums then up to date)."""
        values, window = self.values, self.window
        if len(values) < 2 * window:
            values.append(value)
            if len(values) < 2 * window:
                return False
            self._sum()
            return True
        middle = values[window]  # moves from the recent half to the earlier one
        self.before += middle - values[0]
        self.recent += value - middle
        values.append(value)
        self._updates += 1
        if self._updates >= 10_000:  # sums kept by adding and taking away drift: recomputed now and then
            self._sum()
        return True

    def _sum(self) -> None:
        self.before = sum(itertools.islice(self.values, self.window))
        self.recent = sum(itertools.islice(self.values, self.window, None))
        self._updates = 0


BALANCE_BINS = 50  # utilization histograms of 2% bins; 100% falls in the last
BALANCE_EVERY = 50  # LoadBalancing compares the histograms every this many datapoints (they move slowly)


def js_distance(first: Sequence[int], second: Sequence[int]) -> float:
    """The Jensen-Shannon distance (natural log) between two histograms, as distributions: 0 when
    they have the same shape, at most sqrt(ln 2) (about 0.83) when they share no bin."""
    total_first, total_second = sum(first), sum(second)
    if not total_first or not total_second:
        return 0.0
    divergence = 0.0
    for a, b in zip(first, second, strict=True):
        p, q = a / total_first, b / total_second
        middle = (p + q) / 2
        if p:
            divergence += p * math.log(p / middle)
        if q:
            divergence += q * math.log(q / middle)
    return math.sqrt(max(0.0, divergence / 2))


class LoadBalancing(_GpuRule):
    """The GPUs of a host are unevenly loaded: between some two of them, the Jensen-Shannon
    distance of their utilization histograms (all datapoints, 2% bins) is above ``threshold``."""

    name = "LoadBalancing"

    def __init__(self, *, threshold: float = 0.5, patience: int = 1000) -> None:
        super().__init__(patience)
        self.threshold = threshold
        self._histograms: dict[int, list[int]] = {}
        self._firing: set[tuple[int, int]] = set()

    def _observe(self, tick: Tick, ready: bool) -> list[Finding]:
        for gpu in tick.gpus:
            histogram = self._histograms.get(gpu.index)
            if histogram is None:
                histogram = self._histograms[gpu.index] = [0] * BALANCE_BINS
            histogram[min(BALANCE_BINS - 1, max(0, int(gpu.utilization_pct / (100 / BALANCE_BINS))))] += 1
        if not ready or len(self._histograms) < 2 or (self.datapoints - self.patience - 1) % BALANCE_EVERY:
            return []
        found = []
        for first, second in itertools.combinations(sorted(self._histograms), 2):
            distance = js_distance(self._histograms[first], self._histograms[second])
            pair = (first, second)
            if distance <= self.threshold:
                self._firing.discard(pair)
                continue
            if pair in self._firing:
                continue
            self._firing.add(pair)
            found.append(Finding(self.name, tick.timestamp_s, f"gpu{first} and gpu{second} are unevenly loaded: "
                                 f"the distance between their utilization histograms is {_shown(distance)} > "
                                 f"threshold {_shown(self.threshold)} ({self.datapoints} datapoints)",
                                 values={"gpu": float(first), "other_gpu": float(second), "distance": distance,
                                         "datapoints": float(self.datapoints)},
                                 thresholds={"threshold": self.threshold, "patience": self.patience}))
        return found

    def notes(self, host: str) -> list[str]:
        if self.datapoints and len(self._histograms) < 2:
            return [f"{host} has one GPU: no load to balance"]
        return super().notes(host)


class BatchSize(_GpuRule):
    """The batch may be too small: over the host's last ``window`` datapoints, the p95 of its CPU
    (the mean of its cores) is below ``cpu_threshold_p95`` and, for a GPU, the p95 of its
    utilization and of its memory are below theirs."""

    name = "BatchSize"

    def __init__(self, *, cpu_threshold_p95: float = 70.0, gpu_threshold_p95: float = 70.0,
                 gpu_memory_threshold_p95: float = 70.0, patience: int = 1000, window: int = 500) -> None:
        super().__init__(patience)
        self.cpu_threshold_p95, self.gpu_threshold_p95 = cpu_threshold_p95, gpu_threshold_p95
        self.gpu_memory_threshold_p95, self.window = gpu_memory_threshold_p95, window
        self._cpu = Window(window)
        self._gpus: dict[int, tuple[Window, Window]] = {}
        self._firing: set[int] = set()

    def _observe(self, tick: Tick, ready: bool) -> list[Finding]:
        self._cpu.add(sum(tick.cpu_pct) / len(tick.cpu_pct) if tick.cpu_pct else 0.0)
        for gpu in tick.gpus:
            windows = self._gpus.get(gpu.index)
            if windows is None:
                windows = self._gpus[gpu.index] = (Window(self.window), Window(self.window))
            windows[0].add(gpu.utilization_pct)
            windows[1].add(gpu.memory_used_pct)
        if not ready or len(self._cpu) < self.window:
            return []
        cpu_p95 = self._cpu.quantile(0.95)
        found = []
        for index, (utilization, memory) in sorted(self._gpus.items()):
            gpu_p95, memory_p95 = utilization.quantile(0.95), memory.quantile(0.95)
            if not (cpu_p95 < self.cpu_threshold_p95 and gpu_p95 < self.gpu_threshold_p95
                    and memory_p95 < self.gpu_memory_threshold_p95):
                self._firing.discard(index)
                continue
            if index in self._firing:
                continue
            self._firing.add(index)
            found.append(Finding(self.name, tick.timestamp_s, f"gpu{index} may be underused because the batch is "
                                 f"small: over the last {len(self._cpu)} datapoints its p95 utilization is "
                                 f"{_shown(gpu_p95)}% and p95 memory {_shown(memory_p95)}%, the CPU's p95 "
                                 f"{_shown(cpu_p95)}%, all below their thresholds ({_shown(self.gpu_threshold_p95)}%, "
                                 f"{_shown(self.gpu_memory_threshold_p95)}%, {_shown(self.cpu_threshold_p95)}%)",
                                 values={"gpu": float(index), "gpu_p95": gpu_p95, "gpu_memory_p95": memory_p95,
                                         "cpu_p95": cpu_p95},
                                 thresholds={"cpu_threshold_p95": self.cpu_threshold_p95,
                                             "gpu_threshold_p95": self.gpu_threshold_p95,
                                             "gpu_memory_threshold_p95": self.gpu_memory_threshold_p95,
                                             "window": self.window, "patience": self.patience}))
        return found

    def notes(self, host: str) -> list[str]:
        if self.datapoints > self.patience and len(self._cpu) < self.window:
            return [f"{host} gave {self.datapoints} datapoints, fewer than the window of {self.window}: not judged"]
        return super().notes(host)


class MaxInitializationTime(ProfilerRule):
    """No step within ``threshold_min`` minutes of the host's first datapoint: fires at the first
    datapoint past that time unless a step was read by then (once).

    ``expects_steps``: whether steps can come at all (a step or loss metric, or tensor rules, whose
    hook gives them); without, it judges only once a step has come (the hook's, in a job whose
    rules do not read tensors), so it never says "no step yet"."""

    name = "MaxInitializationTime"

    def __init__(self, *, threshold_min: float = 20.0, expects_steps: bool = True) -> None:
        self.threshold_min = threshold_min
        self.expects_steps = expects_steps
        self._start_s: float | None = None
        self._last_s: float | None = None
        self._first_step_s: float | None = None
        self._done = False

    def observe(self, tick: Tick) -> list[Finding]:
        if self._start_s is None:
            self._start_s = tick.timestamp_s
        self._last_s = tick.timestamp_s
        limit_s = self._start_s + 60.0 * self.threshold_min
        if self._done or tick.timestamp_s <= limit_s or not (self.expects_steps or self._first_step_s is not None):
            return []
        self._done = True
        if self._first_step_s is not None and self._first_step_s <= limit_s:
            return []
        if self._first_step_s is None:
            waited_s = tick.timestamp_s - self._start_s
            how = f"no step yet {waited_s:.1f} s after the host's first datapoint"
        else:
            waited_s = self._first_step_s - self._start_s
            how = f"the first step came {waited_s:.1f} s after the host's first datapoint"
        return [Finding(self.name, tick.timestamp_s, f"the training loop started late: {how} (threshold "
                        f"{_shown(self.threshold_min)} minutes)", values={"waited_seconds": waited_s},
                        thresholds={"threshold": self.threshold_min})]

    reads_steps = True

    def observe_step(self, step: int, timestamp_s: float) -> list[Finding]:
        if self._first_step_s is None or timestamp_s < self._first_step_s:
            self._first_step_s = timestamp_s
        return []

    def observe_steps(self, steps: list[int], timestamps_s: list[float]) -> list[Finding]:
        return self.observe_step(0, min(timestamps_s)) if timestamps_s else []

    def notes(self, host: str) -> list[str]:
        if self._first_step_s is not None:
            return []
        if not self.expects_steps:
            return [f"no steps known on {host}: the job has no step or loss metric, and no tensor hook step came"]
        if self._start_s is not None and self._last_s is not None:
            return [f"no step seen on {host} in the {self._last_s - self._start_s:.1f} s profiled, less than the "
                    f"threshold of {_shown(self.threshold_min)} minutes"] if not self._done else []
        return []


MIN_DURATIONS = 100  # step durations StepOutlier needs before it judges one (Debugger waits for 100 too)


class StepOutlier(ProfilerRule):
    """Step durations (the time between consecutive step records) more than ``stddev`` standard
    deviations above the mean of the durations before them, once ``MIN_DURATIONS`` are known:
    fires when more than ``n_outliers`` such steps have been seen (once)."""

    name = "StepOutlier"

    def __init__(self, *, stddev: float = 3.0, n_outliers: int = 10) -> None:
        self.stddev = stddev
        self.n_outliers = n_outliers
        self.outliers = 0
        self._last: tuple[int, float] | None = None
        self._count = 0
        self._mean = 0.0
        self._m2 = 0.0
        self._fired = False

    reads_steps = True

    def observe_step(self, step: int, timestamp_s: float) -> list[Finding]:
        return self.observe_steps([step], [timestamp_s])

    def observe_steps(self, steps: list[int], timestamps_s: list[float]) -> list[Finding]:
        """Each step in turn, in one loop (a job that prints its loss at every step gives millions)."""
        found = []
        last, count, mean, m2, outliers = self._last, self._count, self._mean, self._m2, self.outliers
        stddev = self.stddev
        for step, timestamp_s in zip(steps, timestamps_s, strict=True):
            if last is not None and last[0] == step:
                continue  # the same step again (another record that names it)
            previous, last = last, (step, timestamp_s)
            if previous is None:
                continue
            duration_s = timestamp_s - previous[1]
            if count >= MIN_DURATIONS:
                sigma = math.sqrt(m2 / count)
                if duration_s > mean + stddev * sigma:
                    outliers += 1
                    if outliers > self.n_outliers and not self._fired:
                        self._fired = True
                        found.append(Finding(self.name, timestamp_s, f"{outliers} step durations were more than "
                                             f"{_shown(stddev)} standard deviations above the mean (more than "
                                             f"n_outliers {self.n_outliers}): step {step} took {duration_s:.3g} s, "
                                             f"the mean is {mean:.3g} s, the standard deviation {sigma:.3g} s",
                                             step=step, values={"duration_seconds": duration_s, "mean_seconds": mean,
                                                                "stddev_seconds": sigma, "outliers": float(outliers)},
                                             thresholds={"stddev": stddev, "n_outliers": self.n_outliers}))
            count += 1
            delta = duration_s - mean
            mean += delta / count
            m2 += delta * (duration_s - mean)
        self._last, self._count, self._mean, self._m2, self.outliers = last, count, mean, m2, outliers
        return found

    def notes(self, host: str) -> list[str]:
        if self._last is None:
            return [f"no steps seen on {host}"]
        if self._count <= MIN_DURATIONS:
            return [f"{host} gave {self._count} step durations, not more than the {MIN_DURATIONS} StepOutlier needs"]
        return []


class Dataloader(ProfilerRule):
    """Data loader workers (the job's processes on the host beside its main one) against the
    host's cores: the median number of workers, over the datapoints that had any, below
    ``min_threshold`` % of the cores or above ``max_threshold`` %, after ``patience`` of them.

    trainmon sees processes, not a framework's data loader events (Debugger's source): every
    process of the job's tree beside the first counts as a worker."""

    name = "Dataloader"

    def __init__(self, *, min_threshold: float = 70.0, max_threshold: float = 200.0, patience: int = 10) -> None:
        self.min_threshold, self.max_threshold, self.patience = min_threshold, max_threshold, patience
        self._workers: Counter[int] = Counter()
        self.datapoints = 0
        self._firing: str | None = None

    def observe(self, tick: Tick) -> list[Finding]:
        workers = tick.job_processes - 1
        if workers < 1:
            return []
        self._workers[workers] += 1
        self.datapoints += 1
        if self.datapoints <= self.patience:
            return []
        median = _median(self._workers, self.datapoints)
        cores = len(tick.cpu_pct)
        kind = None
        if median < cores * self.min_threshold / 100:
            kind = f"fewer than min_threshold {_shown(self.min_threshold)}%"
        elif median > cores * self.max_threshold / 100:
            kind = f"more than max_threshold {_shown(self.max_threshold)}%"
        fired, self._firing = self._firing, kind
        if kind is None or kind == fired:
            return []
        return [Finding(self.name, tick.timestamp_s, f"a median of {_shown(median)} data loader worker processes ran "
                        f"on {cores} cores: {kind} of the cores ({self.datapoints} datapoints)",
                        values={"workers": median, "cores": float(cores), "datapoints": float(self.datapoints)},
                        thresholds={"min_threshold": self.min_threshold, "max_threshold": self.max_threshold,
                                    "patience": self.patience})]

    def notes(self, host: str) -> list[str]:
        if not self.datapoints:
            return [f"no worker processes on {host} (the job ran one process there)"]
        if self.datapoints <= self.patience:
            return [f"{host} gave {self.datapoints} datapoints with workers, not more than patience {self.patience}"]
        return []


def _median(counts: Counter[int], total: int) -> float:
    """The median of values given as value -> how many times."""
    wanted = ((total - 1) // 2, total // 2)
    found: list[float] = []
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        while len(found) < 2 and seen > wanted[len(found)]:
            found.append(float(value))
        if len(found) == 2:
            break
    return (found[0] + found[1]) / 2


class OverallSystemUsage(ProfilerRule):
    """Per host: the percentiles of its CPU (the mean of its cores), memory and each GPU's
    utilization and memory, for the record. It never fires (Debugger's never does either)."""

    name = "OverallSystemUsage"

    def __init__(self) -> None:
        self.datapoints = 0
        self._usage: dict[str, _Usage] = {"CPU": _Usage(), "memory": _Usage()}
        self._gpus: dict[int, tuple[_Usage, _Usage]] = {}

    def observe(self, tick: Tick) -> list[Finding]:
        self.datapoints += 1
        self._usage["CPU"].add(sum(tick.cpu_pct) / len(tick.cpu_pct) if tick.cpu_pct else 0.0)
        self._usage["memory"].add(tick.memory_used_pct)
        for gpu in tick.gpus:
            usage = self._gpus.get(gpu.index)
            if usage is None:
                usage = self._gpus[gpu.index] = self._usage[f"gpu{gpu.index}"], self._usage[
                    f"gpu{gpu.index} memory"] = _Usage(), _Usage()
            usage[0].add(gpu.utilization_pct)
            usage[1].add(gpu.memory_used_pct)
        return []

    def percentile(self, metric: str, q: float) -> float:
        """The ``q`` quantile of a metric, to the whole percent below (the bins are 1% wide)."""
        return self._usage[metric].percentile(q)

    def notes(self, host: str) -> list[str]:
        if not self.datapoints:
            return []
        parts = [f"{metric} p50 {usage.percentile(0.5):.0f}%, p95 {usage.percentile(0.95):.0f}%, "
                 f"max {usage.maximum:.0f}%" for metric, usage in self._usage.items()]
        return [f"{host}: {self.datapoints} datapoints; " + "; ".join(parts)]


class _Usage:
    """A percentage's histogram of 1% bins (0 to 100) and its maximum."""

    __slots__ = ("histogram", "count", "maximum")

    def __init__(self) -> None:
        self.histogram = [0] * 101
        self.count = 0
        self.maximum = -math.inf

    def add(self, value: float) -> None:
        index = int(value)
        self.histogram[100 if index > 100 else 0 if index < 0 else index] += 1
        self.count += 1
        if value > self.maximum:
            self.maximum = value

    def percentile(self, q: float) -> float:
        rank = q * (self.count - 1)
        seen = 0
        for value, count in enumerate(self.histogram):
            seen += count
            if seen > rank:
                return float(value)
        return 100.0
