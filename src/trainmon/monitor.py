"""The system monitor of one job: SageMaker's per-host metrics and the profiler, from outside the job.

It runs as a thread of the job's supervisor, never in the training processes. Ticks are
scheduled on absolute deadlines, so a slow tick does not shift the ones after it, and a missed
tick is skipped rather than bunched. Every ``system_interval_s`` it stores, per host, under
namespace ``/aws/sagemaker/TrainingJobs`` and dimension ``Host=<job>/algo-N``:

    CPUUtilization        %, the job's processes, summed over cores (0-100 x cores)
    MemoryUtilization     %, the job's resident memory of the machine's memory
    DiskUtilization       %, the volume holding the job's directory
    GPUUtilization        %, summed over the job's GPUs (absent without GPUs)
    GPUMemoryUtilization  %, summed over the job's GPUs (absent without GPUs)
    HostCPUUtilization, HostMemoryUtilization, ProcessCount, ThreadCount, ResidentMemory (Bytes),
    ProcessReadThroughput, ProcessWriteThroughput (Bytes/Second)

and every profiling tick it hands the profiler a row of finer readings (per core, I/O wait,
disk and network throughput, per GPU, the job's tree). What the sampler reads at which tick is
described in :mod:`trainmon.sampler`.

A tick costs a wake-up, four host-wide reads and the ``stat`` of the job's busy processes; what
is done per tick is kept to a few Python calls (no per-tick objects beyond the readings and the
profile row), so a 100 ms profile of a 50-process job costs well under 1% of a core.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from .cloudwatch.model import JOB_NAMESPACE, MetricKey
from .cloudwatch.statistics import Sample
from .errors import StoreError
from .profiler import ProfileWriter
from .sampler import (
    RELIST_S,
    GpuReading,
    GpuSource,
    HostCounters,
    ProcessTree,
    ProcReader,
    TreeReading,
    cpu_pct,
    disk_used_pct,
    rate,
)
from .store import Store

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
        # at least one tick a second, so processes that live less than an interval are counted
        self.tick_s = min(float(system_interval_s), MAX_TICK_S, (self.profile_interval_ms or 10**9) / 1000)
        self.tick_times: deque[float] = deque(maxlen=100_000)  # recent ticks: the interval accuracy is measurable
        self.error: Exception | None = None
        self._stop_requested = threading.Lock()  # held until stop(): the loop waits on it between ticks
        self._stop_requested.acquire()
        self._stopping = False
        self._trees = {name: ProcessTree(self.reader) for name in hosts}
        self._last_readings: dict[str, TreeReading] = {}
        self._listed_at = -math.inf
        self._listed_forks = -1
        self._wall = 0.0
        self._host: HostCounters | None = None

    def stop(self) -> None:
        if not self._stopping:
            self._stopping = True
            self._stop_requested.release()
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

    def _loop(self) -> None:
        start = time.monotonic()
        self._read(start)
        assert self._host is not None
        window = _Window(self._wall, self._host)
        next_system = start + self.system_interval_s
        profile_every = (self.profile_interval_ms or 0) / 1000
        next_profile = start + profile_every
        ticks = 1
        wait = self._stop_requested.acquire
        while True:
            deadline = start + ticks * self.tick_s
            if wait(True, max(0.0, deadline - time.monotonic())):
                break
            now = time.monotonic()
            ticks = max(ticks + 1, int((now - start) / self.tick_s) + 1)  # skip missed ticks, never bunch
            self.tick_times.append(now)
            profile = self.profiler is not None and now >= next_profile - 1e-3
            self._tick(now, window, profile=profile)
            if profile:
                next_profile += profile_every * (math.floor((now - next_profile) / profile_every) + 1)
            if now >= next_system - 1e-3:
                self._emit(window)
                window = _Window(self._wall, self._host)
                next_system += self.system_interval_s
        self._tick(time.monotonic(), window, profile=False)
        if self._wall - window.wall_s >= 0.5:  # the part of an interval before the job ended
            self._emit(window)
        if self.profiler is not None:
            self.profiler.close()

    def _tick(self, now: float, window: _Window, *, profile: bool) -> None:
        previous_wall, previous_host = self._wall, self._host
        readings = self._read(now)
        gpus = self.gpu.read() if self.gpu is not None else []
        if gpus:
            window.add_gpus(gpus)
        for name, reading in readings.items():
            window.add(name, reading)
        seconds = self._wall - previous_wall
        if profile and self.profiler is not None and seconds > 0 and previous_host is not None:
            self._profile(seconds, previous_host, readings, gpus)

    def _read(self, now: float) -> dict[str, TreeReading]:
        """Host counters and each host's tree, now; the tree is re-listed when it may have grown."""
        self._wall = time.time()
        self._host = host = self.reader.host()
        full = now - self._listed_at >= RELIST_S
        if full:
            self._listed_at = now
            if host.forks != self._listed_forks or host.forks < 0:  # otherwise nothing can have joined
                self._listed_forks = host.forks
                groups = self.reader.process_groups(self.hosts.values())
                for name, pgid in self.hosts.items():
                    self._trees[name].follow(groups.get(pgid, ()))
        readings = {name: tree.read(now, full=full) for name, tree in self._trees.items()}
        for name, reading in readings.items():  # gauges keep the last reading taken while processes lived
            if reading.processes or name not in self._last_readings:
                self._last_readings[name] = reading
        return readings

    def _emit(self, window: _Window) -> None:
        host, wall = self._host, self._wall
        seconds = wall - window.wall_s
        if seconds <= 0 or host is None:
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
            values: dict[str, tuple[float, str]] = {
                "CPUUtilization": (100.0 * window.cpu_seconds.get(name, 0.0) / seconds, "Percent"),
                "MemoryUtilization": (100.0 * tree.resident_bytes / host.memory_total_bytes
                                      if host.memory_total_bytes else 0.0, "Percent"),
                "HostCPUUtilization": (host_cpu, "Percent"),
                "HostMemoryUtilization": (_memory_pct(host), "Percent"),
                "ProcessCount": (float(tree.processes), "Count"),
                "ThreadCount": (float(tree.threads), "Count"),
                "ResidentMemory": (float(tree.resident_bytes), "Bytes"),
                "ProcessReadThroughput": (window.read_bytes.get(name, 0) / seconds, "Bytes/Second"),
                "ProcessWriteThroughput": (window.write_bytes.get(name, 0) / seconds, "Bytes/Second"),
            }
            if disk is not None:
                values["DiskUtilization"] = (disk, "Percent")
            if window.gpu_ticks:  # no GPU: no GPU metrics, never zeros
                values["GPUUtilization"] = (window.gpu_utilization / window.gpu_ticks, "Percent")
                values["GPUMemoryUtilization"] = (window.gpu_memory / window.gpu_ticks, "Percent")
            dimensions = (("Host", f"{self.job}/{name}"),)
            for metric, (value, unit) in values.items():
                items.append((MetricKey(JOB_NAMESPACE, metric, dimensions), resolution,
                              [Sample(stamp_ms, 1.0, value, value, value, value, unit)]))
        try:
            self.store.put_samples(items)
        except StoreError as exc:
            self.error = exc

    def _profile(self, seconds: float, previous: HostCounters, readings: dict[str, TreeReading],
                 gpus: list[GpuReading]) -> None:
        """A row per host: the machine's figures (shared), then the job's tree on that host."""
        assert self.profiler is not None and self._host is not None
        host = self._host
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
        for gpu in gpus:
            shared += (gpu.utilization_pct, gpu.memory_used_pct)
        names = _row_names(len(host.cpu_busy), tuple(gpu.index for gpu in gpus))
        stamp_ms = int(self._wall * 1000)
        for name, reading in readings.items():
            row = shared + [
                100.0 * reading.cpu_seconds / seconds,
                float(reading.resident_bytes),
                float(reading.threads),
                float(reading.processes),
                reading.read_bytes / seconds,
                reading.write_bytes / seconds,
            ]
            if gpus:
                tree = self._trees[name]
                row.append(float(sum(b for g in gpus for pid, b in g.process_memory_bytes.items() if pid in tree)))
            self.profiler.add(name, stamp_ms, dict(zip(names, row, strict=True)))


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
