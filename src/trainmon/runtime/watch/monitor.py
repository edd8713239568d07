"""The system monitor of one job: SageMaker's per-host metrics and the profiler, from outside the job.

It runs as a thread of the job's supervisor, never in the training processes. Ticks are
scheduled on absolute deadlines, so a slow tick does not shift the ones after it, and a missed
tick is skipped rather than bunched: ticks stay at least half an interval apart. Every
``system_interval_s`` it stores, per host, under namespace ``/aws/sagemaker/TrainingJobs`` and
dimension ``Host=<job>/algo-N``:

    CPUUtilization        %, the job's processes, summed over cores (0-100 x cores)
    MemoryUtilization     %, the job's resident memory of the machine's memory
    DiskUtilization       %, the volume holding the job's directory
    GPUUtilization        %, summed over the job's GPUs (absent without GPUs)
    GPUMemoryUtilization  %, summed over the job's GPUs (absent without GPUs)
    HostCPUUtilization, HostMemoryUtilization, ProcessCount, ThreadCount, ResidentMemory (Bytes),
    ProcessReadThroughput, ProcessWriteThroughput (Bytes/Second)

and every profiling tick it makes the profiler a row of finer readings (per core, I/O wait,
disk and network throughput, per GPU, the job's tree), which also goes to ``tap`` when one is
given (the profiler rules', :mod:`trainmon.runtime.watch.profilewatch`: it never waits). What the
sampler reads at which tick is described in :mod:`trainmon.runtime.watch.sampler`.

A tick only takes readings: the host-wide files' contents, the job's busy processes (parsed at
once, they are few), the GPUs. Turning host readings into numbers, adding up the interval and
making the profile rows is done for the ticks of the last second together, once a second and
before each store, where the code and data are warm in the CPU's caches: done every 100 ms on a
machine that went idle in between, the same work costs about three times as much. Rows keep
each tick's own timestamp; they reach the profile's files up to a second later.

Time comes from the :class:`~trainmon.clock.Clock` the monitor is given (the system's by
default): its monotonic seconds schedule the ticks, its wall seconds stamp the readings, and the
monitor waits between ticks on the clock's stop signal. With a
:class:`~trainmon.clock.ManualClock`, a fake /proc tree (:class:`ProcReader` ``proc_root``)
and a fake :class:`GpuSource`, every figure it stores is exact.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from ...clock import REAL_CLOCK, Clock
from ...cloudwatch.model import JOB_NAMESPACE, MetricKey
from ...cloudwatch.statistics import single
from ...errors import StoreError
from ...store import Store
from ...store.profiles import ProfileWriter
from ...units import SYSTEM_UNITS
from .gpu import GpuReading, GpuSource
from .sampler import (
    RELIST_S,
    HostCounters,
    HostParser,
    ProcessTree,
    ProcReader,
    TreeReading,
    cpu_pct,
    disk_used_pct,
    rate,
)

MAX_TICK_S = 1.0


@dataclass
class _Window:
    """One system-metrics interval: host counters at its start, and what the ticks added up since."""

    wall_s: float
    host: HostCounters
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    read_bytes: dict[str, int] = field(default_factory=dict)
    write_bytes: dict[str, int] = field(default_factory=dict)
    gpu_utilization: float = 0.0
    gpu_memory: float = 0.0
    gpu_ticks: int = 0

    def add(self, host: str, reading: TreeReading) -> None:
        self.cpu_seconds[host] = self.cpu_seconds.get(host, 0.0) + reading.cpu_seconds
        if reading.read_bytes or reading.write_bytes:
            self.read_bytes[host] = self.read_bytes.get(host, 0) + reading.read_bytes
            self.write_bytes[host] = self.write_bytes.get(host, 0) + reading.write_bytes

    def add_gpus(self, gpus: list[GpuReading]) -> None:
        self.gpu_utilization += sum(g.utilization_pct for g in gpus)
        self.gpu_memory += sum(g.memory_used_pct for g in gpus)
        self.gpu_ticks += 1


class _Tick(NamedTuple):
    """One tick's readings, as taken: the host's files are parsed later (see the module's docstring)."""

    wall_s: float
    host_files: tuple[bytes, bytes, bytes, bytes]
    readings: dict[str, TreeReading]
    gpus: list[GpuReading]
    gpu_memory_bytes: dict[str, float]  # per host: what the driver reports for the job's processes
    profile: bool


class SystemMonitor(threading.Thread):
    def __init__(
        self,
        store: Store,
        job: str,
        hosts: dict[str, int],  # host name -> process group id
        job_dir: Path,
        *,
        system_interval_s: int = 60,
        profile_interval_ms: int | None = None,
        profiler: ProfileWriter | None = None,
        reader: ProcReader | None = None,
        gpu: GpuSource | None = None,
        clock: Clock = REAL_CLOCK,
        tap: Callable[[str, int, dict[str, float]], None] | None = None,
    ) -> None:
        super().__init__(name=f"trainmon-monitor-{job}", daemon=True)
        self.store = store
        self.job = job
        self.hosts = hosts
        self.job_dir = job_dir
        self.system_interval_s = system_interval_s
        self.profile_interval_ms = profile_interval_ms if profiler is not None else None
        self.profiler = profiler
        self.reader = reader or ProcReader()
        self.gpu = gpu
        self.clock = clock
        self.tap = tap  # also gets each profile row (host, timestamp_ms, values): the profiler rules'; never blocks
        # at least one tick a second, so processes that live less than an interval are counted
        self.tick_s = min(float(system_interval_s), MAX_TICK_S, (self.profile_interval_ms or 10**9) / 1000)
        self.tick_times: deque[float] = deque(maxlen=100_000)  # recent ticks: the interval accuracy is measurable
        self.error: Exception | None = None
        self._stop_requested = clock.stop_signal()  # set by stop(): the loop waits on it between ticks
        self._trees = {name: ProcessTree(self.reader) for name in hosts}
        self._pending: list[_Tick] = []
        self._parse_host = HostParser()
        self._last_readings: dict[str, TreeReading] = {}
        self._listed_forks = -1
        self._wall = 0.0  # the last tick taken into account, and its host counters
        self._host: HostCounters | None = None

    def stop(self) -> None:
        self._stop_requested.set()
        self.join()

    def run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # monitoring must never take the job down
            self.error = exc
        finally:
            for tree in self._trees.values():
                tree.close()
            self.reader.close()
            if self.gpu is not None:
                self.gpu.close()

    def _loop(self) -> None:
        clock = self.clock
        start = last_full = clock.monotonic()
        self._wall, self._host = clock.wall(), self.reader.host()
        self._relist()
        window = _Window(self._wall, self._host)
        next_system = start + self.system_interval_s
        profile_every = (self.profile_interval_ms or 0) / 1000
        next_profile = start + profile_every
        ticks = 1
        wait_until = self._stop_requested.wait_until
        while True:
            if wait_until(start + ticks * self.tick_s):
                break
            now = clock.monotonic()
            # the next tick is at least half an interval away: a late tick skips the ones it missed and
            # never runs a few milliseconds before the next
            ticks = max(ticks + 1, math.ceil((now - start) / self.tick_s + 0.5))
            self.tick_times.append(now)
            full = now - last_full >= RELIST_S  # once a second: io, idle processes, listing, accounting
            profile = self.profiler is not None and now >= next_profile - 1e-3
            self._take(now, full=full, profile=profile)
            if profile:
                next_profile += profile_every * (math.floor((now - next_profile) / profile_every) + 1)
            system = now >= next_system - 1e-3
            if full or system:
                self._account(window)
            if full:
                last_full = now
                self._relist()
            if system:
                self._emit(window)
                window = _Window(self._wall, self._host_now())
                next_system += self.system_interval_s
        self._take(clock.monotonic(), full=True, profile=False)
        self._account(window)
        if self._wall - window.wall_s >= 0.5:  # the part of an interval before the job ended
            self._emit(window)
        if self.profiler is not None:
            self.profiler.close()

    def _take(self, now: float, *, full: bool, profile: bool) -> None:
        """This tick's readings, kept for :meth:`_account`."""
        wall = self.clock.wall()
        host_files = self.reader.host_files()
        readings = {}
        for name, tree in self._trees.items():
            readings[name] = tree.read(now, full=full)
        gpus = self.gpu.read() if self.gpu is not None else []
        gpu_memory = {name: float(sum(b for g in gpus for pid, b in g.process_memory_bytes.items() if pid in tree))
                      for name, tree in self._trees.items()} if gpus else {}
        self._pending.append(_Tick(wall, host_files, readings, gpus, gpu_memory, profile))

    def _account(self, window: _Window) -> None:
        """Takes the pending ticks into the interval and the profile, in order."""
        for tick in self._pending:
            host = self._parse_host(*tick.host_files)
            previous_wall, previous = self._wall, self._host
            self._wall, self._host = tick.wall_s, host
            for name, reading in tick.readings.items():
                window.add(name, reading)
                if reading.processes or name not in self._last_readings:  # gauges: the last reading with processes
                    self._last_readings[name] = reading
            if tick.gpus:
                window.add_gpus(tick.gpus)
            seconds = tick.wall_s - previous_wall
            if tick.profile and previous is not None and seconds > 0:
                self._profile(tick, seconds, host, previous)
        self._pending.clear()

    def _host_now(self) -> HostCounters:
        assert self._host is not None, "no tick taken into account yet"
        return self._host

    def _relist(self) -> None:
        """Re-lists the job's processes when the machine has started any since the last listing."""
        forks = self._host_now().forks
        if forks == self._listed_forks and forks >= 0:
            return  # nothing can have joined; what left is dropped when its read fails
        self._listed_forks = forks
        groups = self.reader.process_groups(self.hosts.values())
        for name, pgid in self.hosts.items():
            self._trees[name].follow(groups.get(pgid, ()))

    def _emit(self, window: _Window) -> None:
        host, wall = self._host_now(), self._wall
        seconds = wall - window.wall_s
        if seconds <= 0:
            return
        resolution = 60 if self.system_interval_s >= 60 else 1
        stamp_ms = int(window.wall_s * 1000)
        host_cpu = sum(map(cpu_pct, host.cpu_busy, window.host.cpu_busy, host.cpu_total, window.host.cpu_total))
        try:
            disk: float | None = disk_used_pct(self.job_dir)
        except OSError:
            disk = None
        items = []
        for name, tree in self._last_readings.items():
            values: dict[str, float] = {
                "CPUUtilization": 100.0 * window.cpu_seconds.get(name, 0.0) / seconds,
                "MemoryUtilization": (100.0 * tree.resident_bytes / host.memory_total_bytes
                                      if host.memory_total_bytes else 0.0),
                "HostCPUUtilization": host_cpu,
                "HostMemoryUtilization": _memory_pct(host),
                "ProcessCount": float(tree.processes),
                "ThreadCount": float(tree.threads),
                "ResidentMemory": float(tree.resident_bytes),
                "ProcessReadThroughput": window.read_bytes.get(name, 0) / seconds,
                "ProcessWriteThroughput": window.write_bytes.get(name, 0) / seconds,
            }
            if disk is not None:
                values["DiskUtilization"] = disk
            if window.gpu_ticks:  # no GPU: no GPU metrics, never zeros
                values["GPUUtilization"] = window.gpu_utilization / window.gpu_ticks
                values["GPUMemoryUtilization"] = window.gpu_memory / window.gpu_ticks
            dimensions = (("Host", f"{self.job}/{name}"),)
            for metric, value in values.items():
                items.append((MetricKey(JOB_NAMESPACE, metric, dimensions), resolution,
                              [single(stamp_ms, value, SYSTEM_UNITS[metric])]))
        try:
            self.store.put_samples(items)
        except StoreError as exc:
            self.error = exc

    def _profile(self, tick: _Tick, seconds: float, host: HostCounters, previous: HostCounters) -> None:
        """A row per host: the machine's figures (shared), then the job's tree on that host."""
        assert self.profiler is not None
        total = host.total - previous.total
        shared = list(map(cpu_pct, host.cpu_busy, previous.cpu_busy, host.cpu_total, previous.cpu_total))
        shared += (
            100.0 * (host.iowait - previous.iowait) / total if total > 0 else 0.0,
            _memory_pct(host),
            rate(host.disk_read_bytes, previous.disk_read_bytes, seconds),
            rate(host.disk_write_bytes, previous.disk_write_bytes, seconds),
            rate(host.net_receive_bytes, previous.net_receive_bytes, seconds),
            rate(host.net_transmit_bytes, previous.net_transmit_bytes, seconds),
        )
        for gpu in tick.gpus:
            shared += (gpu.utilization_pct, gpu.memory_used_pct)
        names = _row_names(len(host.cpu_busy), tuple(gpu.index for gpu in tick.gpus))
        stamp_ms = int(tick.wall_s * 1000)
        for name, reading in tick.readings.items():
            row = shared + [
                100.0 * reading.cpu_seconds / seconds,
                float(reading.resident_bytes),
                float(reading.threads),
                float(reading.processes),
                reading.read_bytes / seconds,
                reading.write_bytes / seconds,
            ]
            if tick.gpus:
                row.append(tick.gpu_memory_bytes[name])
            values = dict(zip(names, row, strict=True))
            self.profiler.add(name, stamp_ms, values)
            if self.tap is not None:
                self.tap(name, stamp_ms, values)


@lru_cache(maxsize=8)
def _row_names(cores: int, gpus: tuple[int, ...]) -> tuple[str, ...]:
    """The profile row's metric names, in the order ``SystemMonitor._profile`` computes the values."""
    names = [f"cpu{index}_utilization_pct" for index in range(cores)]
    names += ["cpu_iowait_pct", "memory_used_pct", "disk_read_bytes_per_s", "disk_write_bytes_per_s",
              "network_receive_bytes_per_s", "network_transmit_bytes_per_s"]
    for index in gpus:
        names += [f"gpu{index}_utilization_pct", f"gpu{index}_memory_used_pct"]
    names += ["job_cpu_pct", "job_resident_bytes", "job_threads", "job_processes", "job_read_bytes_per_s",
              "job_write_bytes_per_s"]
    if gpus:
        names.append("job_gpu_memory_bytes")
    return tuple(names)


def _memory_pct(host: HostCounters) -> float:
    if not host.memory_total_bytes:
        return 0.0
    return 100.0 * (host.memory_total_bytes - host.memory_available_bytes) / host.memory_total_bytes
