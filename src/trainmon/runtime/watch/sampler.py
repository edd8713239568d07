"""What a job's hosts use: CPU, memory, disk, network and GPU, host-wide and for the job's own processes.

Readings come from /proc, read directly (cheaper than psutil at 100 ms), and from a GPU source
(:mod:`.gpu`). Both are injected (``proc_root``, a :class:`~.gpu.GpuSource`), so tests can give a
fake /proc tree or fake GPUs behind the same interface. The host-wide files (stat, meminfo, diskstats, net/dev)
are read every tick through descriptors kept open (:meth:`ProcReader.host_files`); only the
fields used are parsed (:func:`parse_host`, or a :class:`HostParser`, which skips files that
did not change since the previous reading).

The job's processes are the members of each host's process group plus their descendants. What
is read when (a :class:`ProcessTree` per host, driven by the monitor):

- The tree is re-listed at most once a second (``RELIST_S``), and only when the machine has
  started a process or thread since the last listing (``processes`` in /proc/stat): nothing can
  have joined otherwise. A new member is read at once (a baseline: what it used before it was
  seen is not counted). A process that vanishes between two samples is gone from the next.
- A *busy* process (new, or its CPU time moved between its last two once-a-second reads) has its
  ``stat`` read every tick (CPU time, resident memory, threads) through a descriptor kept open,
  and its ``io`` once a second: the job's read and write bytes arrive a second at a time.
- An *idle* process (its CPU time did not move between two once-a-second reads) is re-read,
  ``stat`` and ``io``, every ``IDLE_READ_S`` (5) seconds, opening the files for that read; its
  last figures stand in between. If its CPU time moved, it is busy again from then on. So what a
  process that wakes up uses (CPU time, I/O, memory) is counted up to ``IDLE_READ_S`` late, all
  in the tick of that read: sums over time stay exact, but at 100 ms that tick shows seconds' worth
  of CPU time. If it exits before that read, what it used since its last read is not counted. A
  process that exits while idle leaves the counts at the next listing or its next read, whichever
  comes first.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ..processes.procfs import ProcessStat, children_of, descendants, parse_process_stat

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


RELIST_S = 1.0  # the tree is re-listed, and busy processes' io read, at most this often


IDLE_READ_S = 5.0  # an idle process is re-read this often


_LATE_S = 0.5  # an idle process due at most this long from now is read now (reads happen once a second)


_CHUNK_BYTES = 1 << 16


_PAGE_FILL_BYTES = 3072  # /proc's seq files hand out up to a page per read: a read this long may not be all


_STAT_BYTES = 1024  # /proc/<pid>/stat up to rss: its command name is at most 64 bytes


_MEMORY = re.compile(rb"^(MemTotal|MemAvailable): +(\d+)", re.M)


_WHOLE_DISK = rb"(?:sd[a-z]+|vd[a-z]+|xvd[a-z]+|hd[a-z]+|nvme\d+n\d+|mmcblk\d+)"  # not partitions, loops, dm


_DISK_LINE = re.compile(rb"\n *\d+ +\d+ " + _WHOLE_DISK + rb" +\d+ +\d+ +(\d+) +\d+ +\d+ +\d+ +(\d+)")


_INTERFACE_LINE = re.compile(rb"\n *([^ :]+): *(\d+) +\d+ +\d+ +\d+ +\d+ +\d+ +\d+ +\d+ +(\d+)")


class HostCounters(NamedTuple):
    """Cumulative host-wide counters at one moment."""

    cpu_busy: list[int]  # per core, clock ticks
    cpu_total: list[int]
    iowait: int
    total: int
    memory_total_bytes: int
    memory_available_bytes: int
    disk_read_bytes: int
    disk_write_bytes: int
    net_receive_bytes: int
    net_transmit_bytes: int
    forks: int  # processes and threads started since boot; -1 where unknown


def parse_host(stat: bytes, meminfo: bytes, diskstats: bytes, net_dev: bytes) -> HostCounters:
    """Host counters from the contents of /proc/stat, /proc/meminfo, /proc/diskstats and /proc/net/dev."""
    return HostCounters(*parse_cpu(stat), *parse_memory(meminfo), *parse_disks(diskstats),
                        *parse_interfaces(net_dev), parse_forks(stat))


def parse_cpu(stat: bytes) -> tuple[list[int], list[int], int, int]:
    """Per-core busy and total clock ticks, then the machine's iowait and total, from /proc/stat.

    Busy is every state but idle and iowait; total is the first eight states (guest time is
    already in user). The lines are parsed a column (a state of every core) at a time, not a line
    at a time: a machine with 96 cores has 97 of them, every tick.
    """
    end = stat.find(b"\nintr")  # the "cpu" lines come first: "cpu" (all cores), "cpu0", "cpu1", ...
    if end < 0:  # not the kernel's usual layout: find where they end
        end = 0
        while stat.startswith(b"cpu", end):
            end = stat.find(b"\n", end) + 1 or len(stat)
    block = stat[:end]
    tokens = block.split()
    lines = block.count(b"cpu")
    width = len(tokens) // lines if lines else 0  # the name and 8 to 10 states, the same on every line
    if width < 9 or width * lines != len(tokens):
        raise ValueError(f"unexpected CPU lines in /proc/stat: {block[:200]!r}")
    user, nice, system, idle, iowait, irq, softirq, steal = (list(map(int, tokens[i::width])) for i in range(1, 9))
    busy = list(map(sum, zip(user, nice, system, irq, softirq, steal, strict=True)))
    totals = list(map(sum, zip(busy, idle, iowait, strict=True)))
    return busy[1:], totals[1:], iowait[0], totals[0]


def parse_forks(stat: bytes) -> int:
    """Processes and threads started since boot, from /proc/stat; -1 where it does not say."""
    start = stat.find(b"\nprocesses ") + 11
    return int(stat[start:stat.find(b"\n", start)]) if start > 10 else -1


def parse_memory(meminfo: bytes) -> tuple[int, int]:
    """(MemTotal, MemAvailable) in bytes, from /proc/meminfo."""
    fields = meminfo.split(None, 8)  # MemTotal: N kB MemFree: N kB MemAvailable: N kB, in the kernel's order
    if fields[0:1] == [b"MemTotal:"] and fields[6:7] == [b"MemAvailable:"]:
        return int(fields[1]) * 1024, int(fields[7]) * 1024
    named = dict(_MEMORY.findall(meminfo))
    return int(named.get(b"MemTotal", 0)) * 1024, int(named.get(b"MemAvailable", 0)) * 1024


def parse_disks(diskstats: bytes) -> tuple[int, int]:
    """Bytes read from and written to whole disks (not partitions, loops or device mapper), from /proc/diskstats."""
    disks = _DISK_LINE.findall(b"\n" + diskstats)
    return sum(int(read) for read, _ in disks) * 512, sum(int(write) for _, write in disks) * 512


def parse_interfaces(net_dev: bytes) -> tuple[int, int]:
    """Bytes received and sent over every interface but loopback, from /proc/net/dev."""
    interfaces = [(receive, transmit) for name, receive, transmit in _INTERFACE_LINE.findall(net_dev) if name != b"lo"]
    return sum(int(receive) for receive, _ in interfaces), sum(int(transmit) for _, transmit in interfaces)


class HostParser:
    """:func:`parse_host` for a stream of readings: a file whose contents did not change since the
    previous reading is not parsed again (on a quiet machine, diskstats, net/dev and often meminfo)."""

    def __init__(self) -> None:
        self._memory: tuple[bytes, tuple[int, int]] = (b"", (0, 0))
        self._disks: tuple[bytes, tuple[int, int]] = (b"", (0, 0))
        self._interfaces: tuple[bytes, tuple[int, int]] = (b"", (0, 0))

    def __call__(self, stat: bytes, meminfo: bytes, diskstats: bytes, net_dev: bytes) -> HostCounters:
        if meminfo != self._memory[0]:
            self._memory = (meminfo, parse_memory(meminfo))
        if diskstats != self._disks[0]:
            self._disks = (diskstats, parse_disks(diskstats))
        if net_dev != self._interfaces[0]:
            self._interfaces = (net_dev, parse_interfaces(net_dev))
        return HostCounters(*parse_cpu(stat), *self._memory[1], *self._disks[1], *self._interfaces[1],
                            parse_forks(stat))


def parse_stat(data: bytes) -> tuple[int, int, int] | None:
    """(CPU clock ticks, threads, resident pages) from /proc/<pid>/stat; None for a zombie (or nothing read)."""
    fields = data[data.rfind(b")") + 2:].split(None, 22)  # state ppid pgrp ... utime stime ... threads ... rss
    if len(fields) < 22 or fields[0] == b"Z":
        return None
    return int(fields[11]) + int(fields[12]), int(fields[17]), int(fields[21])


def parse_io(data: bytes) -> tuple[int, int]:
    """(read bytes, write bytes) from /proc/<pid>/io: what reached, or will reach, storage."""
    fields = data.split()
    if fields[8:12:2] == [b"read_bytes:", b"write_bytes:"]:  # the kernel's order
        return int(fields[9]), int(fields[11])
    named = dict(zip(fields[::2], fields[1::2], strict=False))
    return int(named.get(b"read_bytes:", 0)), int(named.get(b"write_bytes:", 0))


def _read_rest(fd: int, data: bytes) -> bytes:
    """The whole file, given its first read: /proc's seq files hand out up to a page per read."""
    if len(data) < _PAGE_FILL_BYTES:
        return data
    chunks = [data]
    offset = len(data)
    while chunk := os.pread(fd, _CHUNK_BYTES, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


class ProcReader:
    """Reads /proc (or a tree shaped like it), cheaply enough for a 100 ms tick.

    Host-wide files stay open and are re-read with ``pread``. Listing the machine's processes
    reads the ``stat`` of processes not seen before, once, for their parent and process group.
    """

    def __init__(self, proc_root: str | Path = "/proc") -> None:
        self.root = Path(proc_root)
        self._prefix = f"{self.root}/"
        self._host_fds: list[int] = []  # stat, meminfo, diskstats, net/dev (-1: missing)
        self._names: set[str] = set()
        self._known: dict[int, ProcessStat] = {}  # as first read
        self._groups: dict[int, frozenset[int]] = {}
        self._grouped: tuple[int, ...] = ()  # the process groups _groups is for

    def close(self) -> None:
        for fd in self._host_fds:
            if fd >= 0:
                os.close(fd)
        self._host_fds = []

    def host(self) -> HostCounters:
        return parse_host(*self.host_files())

    def host_files(self) -> tuple[bytes, bytes, bytes, bytes]:
        """The contents of /proc/stat, /proc/meminfo, /proc/diskstats and /proc/net/dev (the last two
        empty where missing), for :func:`parse_host`: reading is the part that cannot wait.

        Four ``pread`` calls on descriptors kept open, and nothing else unless a file is longer
        than /proc hands out in one read (a page: many disks or interfaces).
        """
        fds = self._host_fds or self._open_host_files()
        stat = os.pread(fds[0], _CHUNK_BYTES, 0)
        meminfo = os.pread(fds[1], _CHUNK_BYTES, 0)
        diskstats = os.pread(fds[2], _CHUNK_BYTES, 0) if fds[2] >= 0 else b""
        net_dev = os.pread(fds[3], _CHUNK_BYTES, 0) if fds[3] >= 0 else b""
        if max(len(stat), len(meminfo), len(diskstats), len(net_dev)) < _PAGE_FILL_BYTES:
            return stat, meminfo, diskstats, net_dev
        return (_read_rest(fds[0], stat), _read_rest(fds[1], meminfo), _read_rest(fds[2], diskstats),
                _read_rest(fds[3], net_dev))

    def _open_host_files(self) -> list[int]:
        fds = [os.open(self._prefix + "stat", os.O_RDONLY), os.open(self._prefix + "meminfo", os.O_RDONLY)]
        for optional in ("diskstats", "net/dev"):
            try:
                fds.append(os.open(self._prefix + optional, os.O_RDONLY))
            except OSError:
                fds.append(-1)
        self._host_fds = fds
        return fds

    def read(self, relative: str, size: int = _STAT_BYTES) -> bytes:
        """A small /proc file read once (open, read, close); OSError when it is gone."""
        fd = os.open(self._prefix + relative, os.O_RDONLY)
        try:
            return os.read(fd, size)
        finally:
            os.close(fd)

    def open_stat(self, pid: int) -> int:
        return os.open(f"{self._prefix}{pid}/stat", os.O_RDONLY)

    def io(self, pid: int) -> tuple[int, int]:
        """(read bytes, write bytes) of a process; zeros where they cannot be read (another user's)."""
        try:
            return parse_io(self.read(f"{pid}/io"))
        except OSError:
            return 0, 0

    def process_groups(self, pgids: Iterable[int]) -> dict[int, frozenset[int]]:
        """pgid -> its members and their descendants; reads only processes not seen before.

        The result is shared between calls: do not change it.
        """
        wanted = tuple(pgids)
        names = set(os.listdir(self.root))
        changed = wanted != self._grouped
        if names != self._names:
            members = set().union(*self._groups.values())
            for name in self._names - names:
                if name.isdigit():
                    pid = int(name)
                    self._known.pop(pid, None)
                    changed = changed or pid in members
            for name in names - self._names:
                if name.isdigit():
                    known = self._learn(int(name))
                    changed = changed or known is not None and (known.ppid in members or known.pgrp in wanted)
            self._names = names
        if changed:  # otherwise no group gained or lost a process
            self._groups = {pgid: self._descendants(pgid) for pgid in wanted}
            self._grouped = wanted
        return self._groups

    def _learn(self, pid: int) -> ProcessStat | None:
        try:
            data = self.read(f"{pid}/stat")
        except OSError:
            return None
        known = self._known[pid] = parse_process_stat(data)
        return known

    def _descendants(self, pgid: int) -> frozenset[int]:
        members = [pid for pid, known in self._known.items() if known.pgrp == pgid]
        return frozenset(descendants(members, children_of(self._known)))  # those that left the group (setsid) too


class TreeReading(NamedTuple):
    """One host's process tree at one tick: what it used since the previous reading, and its gauges now."""

    cpu_seconds: float
    read_bytes: int
    write_bytes: int
    resident_bytes: int
    threads: int
    processes: int


@dataclass(slots=True)
class _Process:
    """What was last read of one process of the tree."""

    pid: int
    busy: bool = True
    stat_fd: int = -1  # kept open while busy
    cpu_ticks: int = 0
    checked_cpu_ticks: int = 0  # at the last once-a-second read
    threads: int = 0
    pages: int = 0
    read_bytes: int = 0
    write_bytes: int = 0
    due_s: float = 0.0  # idle: when it is read next


class ProcessTree:
    """One host's job processes, followed from tick to tick: see the module's docstring for what is read when.

    ``follow`` takes the members after each listing and reads the new ones (a baseline: a process
    seen for the first time brings no history, so it cannot make a spike); ``read`` gives the
    tick's :class:`TreeReading`, with ``full=True`` once a second (busy processes' io, idle
    processes that are due), else from the busy processes' stat alone.
    """

    def __init__(self, reader: ProcReader) -> None:
        self.reader = reader
        self._processes: dict[int, _Process] = {}
        self._busy: list[_Process] = []
        self._threads = 0
        self._pages = 0
        self._still = TreeReading(0.0, 0, 0, 0, 0, 0)  # a tick's reading when no process is busy

    @property
    def pids(self) -> frozenset[int]:
        return frozenset(self._processes)

    def __contains__(self, pid: int) -> bool:
        return pid in self._processes

    def follow(self, pids: Iterable[int]) -> None:
        """The tree's members now: departed ones are dropped, new ones read."""
        members = set(pids)
        for pid in self._processes.keys() - members:
            self._drop(self._processes[pid])
        for pid in members - self._processes.keys():
            process = _Process(pid)
            try:
                process.stat_fd = self.reader.open_stat(pid)
            except OSError:
                continue
            self._processes[pid] = process
            numbers = self._stat(process)
            if numbers is None:
                self._drop(process)
                continue
            self._update(process, numbers)
            process.cpu_ticks = process.checked_cpu_ticks = numbers[0]
            process.read_bytes, process.write_bytes = self.reader.io(pid)
        self._settle()

    def close(self) -> None:
        for process in list(self._processes.values()):
            self._drop(process)

    def read(self, now_s: float, *, full: bool) -> TreeReading:
        if full:
            return self._read_full(now_s)
        if not self._busy:
            return self._still  # nothing is read: nothing can have changed
        ticks = 0
        gone = []
        for process in self._busy:
            try:
                numbers = parse_stat(os.pread(process.stat_fd, _STAT_BYTES, 0))
            except OSError:
                numbers = None
            if numbers is None:
                gone.append(process)
                continue
            ticks += self._update(process, numbers)
        if gone:
            for process in gone:
                self._drop(process)
            self._settle()
        return TreeReading(ticks / CLOCK_TICKS, 0, 0, self._pages * PAGE_BYTES, self._threads, len(self._processes))

    def _read_full(self, now_s: float) -> TreeReading:
        ticks = read = write = 0
        for process in list(self._processes.values()):
            if not (process.busy or process.due_s <= now_s + _LATE_S):
                continue
            numbers = self._stat(process)
            if numbers is None:
                self._drop(process)
                continue
            ticks += self._update(process, numbers)
            read_bytes, write_bytes = self.reader.io(process.pid)
            read += max(0, read_bytes - process.read_bytes)
            write += max(0, write_bytes - process.write_bytes)
            process.read_bytes, process.write_bytes = read_bytes, write_bytes
            self._classify(process, now_s)
        self._settle()
        return TreeReading(ticks / CLOCK_TICKS, read, write, self._pages * PAGE_BYTES, self._threads,
                           len(self._processes))

    def _settle(self) -> None:
        """After the members or their classes changed: which to read every tick, and the gauges meanwhile."""
        self._busy = [process for process in self._processes.values() if process.busy]
        self._still = TreeReading(0.0, 0, 0, self._pages * PAGE_BYTES, self._threads, len(self._processes))

    def _stat(self, process: _Process) -> tuple[int, int, int] | None:
        try:
            if process.stat_fd >= 0:
                return parse_stat(os.pread(process.stat_fd, _STAT_BYTES, 0))
            return parse_stat(self.reader.read(f"{process.pid}/stat"))
        except OSError:
            return None

    def _update(self, process: _Process, numbers: tuple[int, int, int]) -> int:
        """Takes a process's new stat figures; the CPU clock ticks it used since its last reading."""
        cpu, threads, pages = numbers
        self._threads += threads - process.threads
        self._pages += pages - process.pages
        process.threads, process.pages = threads, pages
        used = cpu - process.cpu_ticks if cpu > process.cpu_ticks else 0
        process.cpu_ticks = cpu
        return used

    def _classify(self, process: _Process, now_s: float) -> None:
        """After a once-a-second read: busy if its CPU time moved since the last one."""
        process.busy = process.cpu_ticks != process.checked_cpu_ticks
        process.checked_cpu_ticks = process.cpu_ticks
        if not process.busy:
            self._close(process)
            process.due_s = now_s + IDLE_READ_S
        elif process.stat_fd < 0:
            try:
                process.stat_fd = self.reader.open_stat(process.pid)
            except OSError:
                process.busy = False  # gone: its next read drops it
                process.due_s = now_s

    def _drop(self, process: _Process) -> None:
        self._close(process)
        if self._processes.pop(process.pid, None) is not None:
            self._threads -= process.threads
            self._pages -= process.pages

    @staticmethod
    def _close(process: _Process) -> None:
        if process.stat_fd >= 0:
            os.close(process.stat_fd)
            process.stat_fd = -1


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
