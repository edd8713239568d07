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
disk and network throughput, per GPU, the job's tree).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
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
    ProcReader,
    TreeCounters,
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

    def add(self, host: str, cpu_seconds: float, read: int, write: int) -> None:
        self.cpu_seconds[host] = self.cpu_seconds.get(host, 0.0) + cpu_seconds
        self.read_bytes[host] = self.read_bytes.get(host, 0) + read
        self.write_bytes[host] = self.write_bytes.get(host, 0) + write


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
        self._stopping = threading.Event()
        self._members: dict[str, set[int]] = {}
        self._last_trees: dict[str, TreeCounters] = {}
        self._listed_at = -1e9

    def stop(self) -> None:
        self._stopping.set()
        self.join()

    def run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # monitoring must never take the job down
            self.error = exc

    def _loop(self) -> None:
        start = time.monotonic()
        wall, host, trees = self._read()
        window = _Window(wall, host)
        next_system = start + self.system_interval_s
        profile_every = (self.profile_interval_ms or 0) / 1000
        next_profile = start + profile_every
        ticks = 1
        while True:
            deadline = start + ticks * self.tick_s
            if self._stopping.wait(max(0.0, deadline - time.monotonic())):
                break
            now = time.monotonic()
            ticks = max(ticks + 1, int((now - start) / self.tick_s) + 1)  # skip missed ticks, never bunch
            self.tick_times.append(now)
            window, (wall, host, trees) = self._tick(window, wall, host, trees,
                                                     profile=self.profiler is not None and now >= next_profile - 1e-3)
            if self.profiler is not None and now >= next_profile - 1e-3:
                next_profile += profile_every * (math.floor((now - next_profile) / profile_every) + 1)
            if now >= next_system - 1e-3:
                self._emit(window, host, wall)
                window = _Window(wall, host)
                next_system += self.system_interval_s
        window, (wall, host, trees) = self._tick(window, wall, host, trees, profile=False)
        if wall - window.wall_s >= 0.5:  # the part of an interval before the job ended
            self._emit(window, host, wall)
        if self.profiler is not None:
            self.profiler.close()
        self.reader.close()

    def _tick(self, window: _Window, wall: float, host: HostCounters, trees: dict[str, TreeCounters], *,
              profile: bool) -> tuple[_Window, tuple[float, HostCounters, dict[str, TreeCounters]]]:
        now_wall, now_host, now_trees = self._read()
        for name, tree in now_trees.items():  # gauges keep the last reading taken while processes lived
            if tree.processes or name not in self._last_trees:
                self._last_trees[name] = tree
        seconds = now_wall - wall
        gpus = self.gpu.read() if self.gpu is not None else []
        if gpus:
            window.gpu_utilization += sum(g.utilization_pct for g in gpus)
            window.gpu_memory += sum(g.memory_used_pct for g in gpus)
            window.gpu_ticks += 1
        usage = {}
        for name, tree in now_trees.items():
            usage[name] = tree.since(trees.get(name, tree))
            window.add(name, *usage[name])
        if profile and self.profiler is not None and seconds > 0:
            self._profile(now_wall, seconds, now_host, host, now_trees, usage, gpus)
        return window, (now_wall, now_host, now_trees)

    def _read(self) -> tuple[float, HostCounters, dict[str, TreeCounters]]:
        monotonic = time.monotonic()
        relist = monotonic - self._listed_at >= RELIST_S
        if relist:
            groups = self.reader.process_groups(self.hosts.values())
            self._members = {name: groups.get(pgid, set()) for name, pgid in self.hosts.items()}
            self._listed_at = monotonic
        wall = time.time()
        trees = {name: self.reader.tree(pids, with_io=relist, key=name) for name, pids in self._members.items()}
        return wall, self.reader.host(), trees

    def _emit(self, window: _Window, host: HostCounters, wall: float) -> None:
        seconds = wall - window.wall_s
        if seconds <= 0:
            return
        resolution = 60 if self.system_interval_s >= 60 else 1
        stamp_ms = int(window.wall_s * 1000)
        host_cpu = sum(cpu_pct(b, b0, t, t0) for b, b0, t, t0 in
                       zip(host.cpu_busy, window.host.cpu_busy, host.cpu_total, window.host.cpu_total, strict=False))
        try:
            disk: float | None = disk_used_pct(self.job_dir)
        except OSError:
            disk = None
        items = []
        for name, tree in self._last_trees.items():
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

    def _profile(self, wall: float, seconds: float, host: HostCounters, previous_host: HostCounters,
                 trees: dict[str, TreeCounters], usage: dict[str, tuple[float, int, int]],
                 gpus: list[GpuReading]) -> None:
        assert self.profiler is not None
        shared: dict[str, float] = {
            f"cpu{index}_utilization_pct": cpu_pct(b, b0, t, t0)
            for index, (b, b0, t, t0) in enumerate(zip(host.cpu_busy, previous_host.cpu_busy, host.cpu_total,
                                                       previous_host.cpu_total, strict=False))
        }
        total = host.total - previous_host.total
        shared["cpu_iowait_pct"] = 100.0 * (host.iowait - previous_host.iowait) / total if total > 0 else 0.0
        shared["memory_used_pct"] = _memory_pct(host)
        shared["disk_read_bytes_per_s"] = rate(host.disk_read_bytes, previous_host.disk_read_bytes, seconds)
        shared["disk_write_bytes_per_s"] = rate(host.disk_write_bytes, previous_host.disk_write_bytes, seconds)
        shared["network_receive_bytes_per_s"] = rate(host.net_receive_bytes, previous_host.net_receive_bytes, seconds)
        shared["network_transmit_bytes_per_s"] = rate(host.net_transmit_bytes, previous_host.net_transmit_bytes,
                                                      seconds)
        for gpu in gpus:
            shared[f"gpu{gpu.index}_utilization_pct"] = gpu.utilization_pct
            shared[f"gpu{gpu.index}_memory_used_pct"] = gpu.memory_used_pct
        stamp_ms = int(wall * 1000)
        for name, tree in trees.items():
            cpu_seconds, read, write = usage.get(name, (0.0, 0, 0))
            row = dict(shared)
            row["job_cpu_pct"] = 100.0 * cpu_seconds / seconds
            row["job_resident_bytes"] = float(tree.resident_bytes)
            row["job_threads"] = float(tree.threads)
            row["job_processes"] = float(tree.processes)
            row["job_read_bytes_per_s"] = read / seconds
            row["job_write_bytes_per_s"] = write / seconds
            if gpus:
                row["job_gpu_memory_bytes"] = float(sum(b for g in gpus for pid, b in g.process_memory_bytes.items()
                                                        if pid in tree.counters))
            self.profiler.add(name, stamp_ms, row)


def _memory_pct(host: HostCounters) -> float:
    if not host.memory_total_bytes:
        return 0.0
    return 100.0 * (host.memory_total_bytes - host.memory_available_bytes) / host.memory_total_bytes
