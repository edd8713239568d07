"""What a job's hosts use: CPU, memory, disk, network and GPU, host-wide and for the job's own processes.

Readings come from /proc (read directly: cheaper than psutil at 100 ms) and from NVML for GPUs.
Both are injected (`proc_root`, a :class:`GpuSource`), so tests can give a fake /proc tree or a
fake NVML behind the same interface. The job's processes are the members of each host's process
group plus their descendants; the tree is re-listed at most once a second and in between only
known processes are read, so a sample of a 50-process job stays cheap. A process that vanishes
between two samples is simply gone from the next one.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
RELIST_S = 1.0
IDLE_S = 1.0  # a process whose CPU time has not moved this long is read once a second
_WHOLE_DISK = re.compile(r"(sd[a-z]+|vd[a-z]+|xvd[a-z]+|hd[a-z]+|nvme\d+n\d+|mmcblk\d+)")


@dataclass(frozen=True, slots=True)
class GpuReading:
    index: int
    utilization_pct: float
    memory_used_pct: float
    process_memory_bytes: dict[int, int] = field(default_factory=dict)  # pid -> bytes, where the driver says


class GpuSource(Protocol):
    def read(self) -> list[GpuReading]: ...


class NoGpu:
    def read(self) -> list[GpuReading]:
        return []


class NvmlSource:
    """NVIDIA's NVML (``nvidia-ml-py``); only the GPUs in ``visible`` (CUDA_VISIBLE_DEVICES)."""

    def __init__(self, visible: Sequence[int] | None = None) -> None:
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        indexes = [i for i in range(count) if visible is None or i in visible]
        self._handles = [(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in indexes]

    def read(self) -> list[GpuReading]:
        nvml = self._nvml
        readings = []
        for index, handle in self._handles:
            rates = nvml.nvmlDeviceGetUtilizationRates(handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            per_process: dict[int, int] = {}
            try:
                for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if proc.usedGpuMemory is not None:
                        per_process[int(proc.pid)] = int(proc.usedGpuMemory)
            except nvml.NVMLError:
                pass
            readings.append(GpuReading(index, float(rates.gpu), 100.0 * memory.used / memory.total, per_process))
        return readings

    def close(self) -> None:
        self._nvml.nvmlShutdown()


def visible_gpus(environ: dict[str, str] | None = None) -> list[int] | None:
    """The GPU indexes CUDA_VISIBLE_DEVICES allows (None: all). UUIDs are not resolved here."""
    value = (environ if environ is not None else os.environ).get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return [int(part) for part in value.split(",") if part.strip().isdigit()]


def default_gpu_source(environ: dict[str, str] | None = None) -> GpuSource:
    """NVML when the library and a driver are there; otherwise no GPU metrics at all (never zeros)."""
    try:
        return NvmlSource(visible_gpus(environ))
    except Exception:
        return NoGpu()


@dataclass(frozen=True, slots=True)
class HostCounters:
    """Cumulative host-wide counters at one moment."""

    cpu_busy: tuple[int, ...]  # per core, clock ticks
    cpu_total: tuple[int, ...]
    iowait: int
    total: int
    memory_total_bytes: int
    memory_available_bytes: int
    disk_read_bytes: int
    disk_write_bytes: int
    net_receive_bytes: int
    net_transmit_bytes: int


@dataclass(frozen=True, slots=True)
class TreeCounters:
    """One host's process tree at one moment: gauges, and cumulative counters per process."""

    resident_bytes: int
    threads: int
    processes: int
    counters: dict[int, tuple[int, int, int]]  # pid -> (cpu clock ticks, read bytes, write bytes)

    @property
    def pids(self) -> frozenset[int]:
        return frozenset(self.counters)

    def since(self, earlier: TreeCounters) -> tuple[float, int, int]:
        """CPU seconds, read bytes and written bytes since ``earlier``, over the processes in both
        (a process seen for the first time brings no history, so it cannot make a spike)."""
        ticks = read = write = 0
        previous = earlier.counters
        for pid, now in self.counters.items():
            before = previous.get(pid)
            if before is not None and before != now:
                cpu_now, read_now, write_now = now
                ticks += max(0, cpu_now - before[0])
                read += max(0, read_now - before[1])
                write += max(0, write_now - before[2])
        return ticks / CLOCK_TICKS, read, write


class ProcReader:
    """Reads /proc (or a tree shaped like it), cheaply enough for a 100 ms tick.

    Files read every tick stay open and are re-read with ``pread``; a process's ``stat`` gives its
    CPU time, resident pages and threads in one read. Its ``io`` counters are read only when asked
    (once a second). Re-listing the tree reads ``stat`` only for processes not seen before.
    """

    def __init__(self, proc_root: str | Path = "/proc") -> None:
        self.root = Path(proc_root)
        self._fds: dict[str, int] = {}
        self._known: dict[int, tuple[int, int]] = {}  # pid -> (ppid, pgrp), as first read
        self._io: dict[int, tuple[int, int]] = {}  # pid -> (read bytes, write bytes), as last read
        self._disks: dict[bytes, bool] = {}
        self._last: dict[int, tuple[int, float]] = {}  # pid -> (cpu ticks, when they last moved)
        self._idle: dict[str, tuple[dict[int, tuple[int, int, int]], int, int, list[int]]] = {}

    def _read(self, relative: str) -> bytes:
        """The current contents of a /proc file, through a descriptor kept open."""
        fd = self._fds.get(relative)
        if fd is None:
            fd = os.open(self.root / relative, os.O_RDONLY)
            self._fds[relative] = fd
        try:
            return os.pread(fd, 1 << 16, 0)
        except OSError:
            self._forget(relative)
            raise

    def _forget(self, relative: str) -> None:
        fd = self._fds.pop(relative, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for relative in list(self._fds):
            self._forget(relative)

    def host(self) -> HostCounters:
        busy, total, iowait, all_total = [], [], 0, 0
        for line in self._read("stat").split(b"\n"):
            if not line.startswith(b"cpu"):
                break
            name, *fields = line.split()
            numbers = [int(x) for x in fields[:8]]
            line_total = sum(numbers)
            idle = numbers[3] + numbers[4]
            if name == b"cpu":
                iowait, all_total = numbers[4], line_total
            else:
                busy.append(line_total - idle)
                total.append(line_total)
        memory = {}
        for line in self._read("meminfo").split(b"\n")[:8]:
            key, _, rest = line.partition(b":")
            if key in (b"MemTotal", b"MemAvailable"):
                memory[key] = int(rest.split()[0]) * 1024
        read = write = 0
        try:
            for line in self._read("diskstats").split(b"\n"):
                name_end = line.find(b" ", 13)  # "   8       0 sda ..." : the name is the third field
                if not self._is_disk(line[:name_end]):
                    continue
                fields = line.split(None, 10)
                if len(fields) > 9:
                    read += int(fields[5]) * 512
                    write += int(fields[9]) * 512
        except OSError:
            pass
        receive = transmit = 0
        try:
            for line in self._read("net/dev").split(b"\n")[2:]:
                name, _, rest = line.partition(b":")
                if rest and name.strip() != b"lo":
                    fields = rest.split()
                    receive += int(fields[0])
                    transmit += int(fields[8])
        except OSError:
            pass
        return HostCounters(tuple(busy), tuple(total), iowait, all_total, memory.get(b"MemTotal", 0),
                            memory.get(b"MemAvailable", 0), read, write, receive, transmit)

    def _is_disk(self, head: bytes) -> bool:
        """Whether a diskstats line (its start) is a whole disk; decided once per device."""
        known = self._disks.get(head)
        if known is None:
            parts = head.split()
            known = self._disks[head] = len(parts) >= 3 and bool(_WHOLE_DISK.fullmatch(parts[2].decode()))
        return known

    def process_groups(self, pgids: Iterable[int]) -> dict[int, set[int]]:
        """pgid -> its members and their descendants; reads only processes not seen before."""
        wanted = set(pgids)
        present = {int(name) for name in os.listdir(self.root) if name.isdigit()}
        for gone in set(self._known) - present:
            del self._known[gone]
            self._io.pop(gone, None)
            self._last.pop(gone, None)
            self._forget(f"{gone}/stat")
            self._forget(f"{gone}/io")
        for pid in present - set(self._known):
            stat = self._stat(pid, keep_open=False)
            if stat is not None:
                self._known[pid] = (int(stat[1]), int(stat[2]))
        groups: dict[int, set[int]] = {pgid: {p for p, (_, g) in self._known.items() if g == pgid} for pgid in wanted}
        children: dict[int, list[int]] = {}
        for pid, (parent, _) in self._known.items():
            children.setdefault(parent, []).append(pid)
        for members in groups.values():  # descendants that left the group (setsid) still count
            stack = list(members)
            while stack:
                for child in children.get(stack.pop(), ()):
                    if child not in members:
                        members.add(child)
                        stack.append(child)
        return groups

    def _stat(self, pid: int, *, keep_open: bool = True) -> list[bytes] | None:
        """Fields of /proc/<pid>/stat after the command name: state, ppid, pgrp, ..."""
        try:
            if keep_open:
                data = self._read(f"{pid}/stat")
            else:
                data = (self.root / str(pid) / "stat").read_bytes()
        except OSError:
            return None
        return data[data.rfind(b")") + 2:].split()

    def tree(self, pids: Iterable[int], *, with_io: bool = True, key: str = "") -> TreeCounters:
        """The tree's counters now.

        ``with_io`` (once a second) reads every process, I/O counters included, and notes which
        processes are idle (CPU time unmoved for ``IDLE_S``). Other calls with the same ``key``
        read only the busy ones (the kernel's stat is costly) and carry the idle ones' figures
        over; whatever an idle process uses meanwhile is counted at the next full read.
        """
        if with_io or key not in self._idle:
            return self._full_tree(pids, key)
        idle_counters, idle_threads, idle_pages, busy = self._idle[key]
        counters = dict(idle_counters)
        threads, pages = idle_threads, idle_pages
        for pid in busy:
            reading = self._stat_numbers(pid)
            if reading is None:
                continue
            cpu, pid_threads, pid_pages = reading
            threads += pid_threads
            pages += pid_pages
            read, write = self._io.get(pid, (0, 0))
            counters[pid] = (cpu, read, write)
        return TreeCounters(pages * PAGE_BYTES, threads, len(counters), counters)

    def _full_tree(self, pids: Iterable[int], key: str) -> TreeCounters:
        now = time.monotonic()
        counters: dict[int, tuple[int, int, int]] = {}
        idle_counters: dict[int, tuple[int, int, int]] = {}
        threads = pages = idle_threads = idle_pages = 0
        busy = []
        for pid in pids:
            reading = self._stat_numbers(pid)
            if reading is None:
                continue
            cpu, pid_threads, pid_pages = reading
            known = self._last.get(pid)
            moved_at = now if known is None or known[0] != cpu else known[1]
            self._last[pid] = (cpu, moved_at)
            self._io[pid] = self._io_counters(pid)
            counters[pid] = (cpu, *self._io[pid])
            threads += pid_threads
            pages += pid_pages
            if now - moved_at >= IDLE_S:
                idle_counters[pid] = counters[pid]
                idle_threads += pid_threads
                idle_pages += pid_pages
            else:
                busy.append(pid)
        self._idle[key] = (idle_counters, idle_threads, idle_pages, busy)
        return TreeCounters(pages * PAGE_BYTES, threads, len(counters), counters)

    def _stat_numbers(self, pid: int) -> tuple[int, int, int] | None:
        """(CPU clock ticks, threads, resident pages) of a live process, from its stat."""
        relative = f"{pid}/stat"
        fd = self._fds.get(relative)
        try:
            if fd is None:
                fd = self._fds[relative] = os.open(self.root / relative, os.O_RDONLY)
            data = os.pread(fd, 1024, 0)
        except OSError:
            self._forget(relative)
            return None
        stat = data[data.rfind(b")") + 2:].split(None, 22)  # state ppid pgrp ... utime stime ... rss
        if stat[0] == b"Z":
            return None
        return int(stat[11]) + int(stat[12]), int(stat[17]), int(stat[21])

    def _io_counters(self, pid: int) -> tuple[int, int]:
        read = write = 0
        try:
            data = self._read(f"{pid}/io")
        except OSError:
            return read, write
        for line in data.split(b"\n"):
            if line.startswith(b"read_bytes:"):
                read = int(line[11:])
            elif line.startswith(b"write_bytes:"):
                write = int(line[12:])
        return read, write


def disk_used_pct(path: str | Path) -> float:
    """Used share of the volume holding ``path``, as df computes it."""
    stats = os.statvfs(path)
    used = (stats.f_blocks - stats.f_bfree) * stats.f_frsize
    available = stats.f_bavail * stats.f_frsize
    return 100.0 * used / (used + available) if used + available else 0.0


def rate(later: int, earlier: int, seconds: float) -> float:
    return max(0, later - earlier) / seconds if seconds > 0 else 0.0


def cpu_pct(busy_now: int, busy_then: int, total_now: int, total_then: int) -> float:
    total = total_now - total_then
    return 100.0 * max(0, busy_now - busy_then) / total if total > 0 else 0.0
