"""System metrics and the profiler.

The monitor's arithmetic (utilisation, rates, intervals, the tick schedule, profile rows) is
tested on a fake /proc tree and fake GPUs, driven by a :class:`ManualClock`: the figures are
exact and no test sleeps. Real jobs on the real /proc are tested for what holds however busy the
machine is (the job's share is at most the host's, a busy job outweighs an idle one, every
interval has its values), never for how much CPU they got.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import trainmon
from trainmon.clock import ManualClock, RealClock
from trainmon.cloudwatch.model import JOB_NAMESPACE, MetricKey
from trainmon.runtime.watch.gpu import GpuReading, visible_gpus
from trainmon.runtime.watch.monitor import SystemMonitor
from trainmon.runtime.watch.sampler import (
    CLOCK_TICKS,
    IDLE_READ_S,
    PAGE_BYTES,
    HostParser,
    ProcessTree,
    ProcReader,
    parse_cpu,
    parse_host,
    parse_memory,
)
from trainmon.store import Store, open_store
from trainmon.store.profiles import ProfileWriter

from .conftest import PY, run_cli

BURN = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time\\nt = time.time()\\nwhile time.time() - t < {seconds}: pass"])
t = time.time()
while time.time() - t < {seconds}:
    pass
child.wait()
"""
JOB = "fake-job"  # the job of the monitors on the fake /proc tree
T0_MS = 1_700_000_000_000  # a ManualClock's wall time when it starts, in ms
MEMORY_KB = 8_000_000  # the fake machine's MemTotal
TICK_SLACK_PCT = 5.0  # a process's and a core's CPU time are counted in clock ticks: a few apart in an interval


def host_metric(store, job: str, metric: str, host: str = "algo-1") -> list[float]:
    return [value for _, value in stamped_metric(store, job, metric, host)]


def stamped_metric(store, job: str, metric: str, host: str = "algo-1") -> list[tuple[int, float]]:
    key = MetricKey(JOB_NAMESPACE, metric, (("Host", f"{job}/{host}"),))
    return [(s.timestamp_ms, s.sum / s.count) for s in store.metric_samples(key, 0, 2**62)]


def start_monitor(store: Store, clock: ManualClock, fake: FakeProc, hosts: dict[str, int], job_dir: Path,
                  **options: Any) -> SystemMonitor:
    """A monitor of ``JOB`` on the fake /proc tree, started on the manual clock: it has taken its first readings."""
    monitor = SystemMonitor(store, JOB, hosts, job_dir, reader=ProcReader(fake.root), clock=clock, **options)
    clock.start(monitor)
    return monitor


def profile_rows(location: Path, job: str = JOB) -> dict[int, dict[str, float]]:
    """timestamp (ms) -> the row's metrics, of the profile's only host."""
    rows: dict[int, dict[str, float]] = {}
    for row in trainmon.profile(job, str(location)).dataframe().itertuples():
        rows.setdefault(int(row.timestamp.value // 10**6), {})[row.metric] = row.value
    return rows


def test_system_metrics_are_the_jobs_own_share(home: Path, script) -> None:
    """Two real jobs on the real /proc: what holds however busy the machine is."""
    burn = script(BURN.format(seconds=3))
    idle = script("import time\ntime.sleep(3)\n")
    runs = [subprocess.Popen([sys.executable, "-m", "trainmon", "run", "--name", name, "--system-metrics-interval",
                              "1", "--disable-profiler", "--", PY, str(path)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            for name, path in (("burner", burn), ("sleeper", idle))]
    for run in runs:
        assert run.wait(timeout=60) == 0, run.stderr.read() if run.stderr else ""
        if run.stderr:
            run.stderr.close()
    store = open_store(home)
    for job in ("burner", "sleeper"):
        own, machine = host_metric(store, job, "CPUUtilization"), host_metric(store, job, "HostCPUUtilization")
        assert len(own) >= 2  # a 3 s job, 1 s intervals
        assert len(machine) == len(host_metric(store, job, "ProcessCount")) == len(own)  # every metric, every interval
        assert all(0 <= mine <= whole + TICK_SLACK_PCT for mine, whole in zip(own, machine, strict=True))
    burning, sleeping = host_metric(store, "burner", "CPUUtilization"), host_metric(store, "sleeper", "CPUUtilization")
    assert sum(burning) > sum(sleeping)  # two busy processes outweigh a sleeping one
    assert sum(sleeping) < sum(host_metric(store, "sleeper", "HostCPUUtilization"))  # the burner's CPU is not its
    assert max(host_metric(store, "burner", "ProcessCount")) == 2
    assert 0 < max(host_metric(store, "burner", "MemoryUtilization")) < 100
    assert 0 < host_metric(store, "burner", "DiskUtilization")[0] < 100
    assert host_metric(store, "burner", "GPUUtilization") == []  # no GPU: absent, never zero
    listed = trainmon.client("cloudwatch").list_metrics(Namespace=JOB_NAMESPACE,
                                                        Dimensions=[{"Name": "Host", "Value": "burner/algo-1"}])
    assert {m["MetricName"] for m in listed["Metrics"]} >= {"CPUUtilization", "MemoryUtilization", "DiskUtilization"}
    table = run_cli("metrics", "burner", "--system", "--metric", "CPUUtilization", check=True).stdout
    assert "CPUUtilization (algo-1)" in table


def test_cpu_utilization_is_each_hosts_own_processes_exactly(store, tmp_path: Path) -> None:
    """Two hosts' process groups on one machine: each reports its own CPU time over the interval, and the machine's."""
    fake = FakeProc(tmp_path / "proc")
    fake.counters(cores=[(1000, 5000), (1000, 5000)])
    fake.process(10, ppid=1, pgrp=10, cpu_ticks=500, threads=4, pages=300)
    fake.process(11, ppid=10, pgrp=10, cpu_ticks=100)
    fake.process(20, ppid=1, pgrp=20, cpu_ticks=900)
    clock = ManualClock()
    monitor = start_monitor(store, clock, fake, {"algo-1": 10, "algo-2": 20}, tmp_path, system_interval_s=1)
    # the first second: algo-1 uses a core and a half, algo-2 nothing, the machine 80% of cpu0 and 90% of cpu1
    fake.process(10, ppid=1, pgrp=10, cpu_ticks=500 + CLOCK_TICKS, threads=4, pages=300, read_bytes=4096,
                 write_bytes=8192)
    fake.process(11, ppid=10, pgrp=10, cpu_ticks=100 + CLOCK_TICKS // 2)
    fake.counters(cores=[(1080, 5100), (1090, 5100)])
    clock.advance(1.0)
    # the next second: algo-1 uses half a core, the machine half of cpu0
    fake.process(10, ppid=1, pgrp=10, cpu_ticks=500 + CLOCK_TICKS + CLOCK_TICKS // 2, threads=4, pages=300,
                 read_bytes=4096, write_bytes=8192)
    fake.counters(cores=[(1130, 5200), (1090, 5200)])
    clock.advance(1.0)
    monitor.stop()
    assert monitor.error is None
    assert stamped_metric(store, JOB, "CPUUtilization") == [(T0_MS, 150.0), (T0_MS + 1000, 50.0)]
    assert stamped_metric(store, JOB, "CPUUtilization", "algo-2") == [(T0_MS, 0.0), (T0_MS + 1000, 0.0)]
    for host in ("algo-1", "algo-2"):
        assert host_metric(store, JOB, "HostCPUUtilization", host) == [170.0, 50.0]
        assert host_metric(store, JOB, "HostMemoryUtilization", host) == [25.0, 25.0]
    assert host_metric(store, JOB, "ProcessCount") == [2.0, 2.0]
    assert host_metric(store, JOB, "ProcessCount", "algo-2") == [1.0, 1.0]
    assert host_metric(store, JOB, "ThreadCount") == [5.0, 5.0]
    assert host_metric(store, JOB, "ResidentMemory") == [400.0 * PAGE_BYTES] * 2
    assert host_metric(store, JOB, "MemoryUtilization") == [100 * 400 * PAGE_BYTES / (MEMORY_KB * 1024)] * 2
    assert host_metric(store, JOB, "ProcessReadThroughput") == [4096.0, 0.0]
    assert host_metric(store, JOB, "ProcessWriteThroughput") == [8192.0, 0.0]
    assert len(host_metric(store, JOB, "DiskUtilization")) == 2
    assert host_metric(store, JOB, "GPUUtilization") == []  # no GPU: absent, never zero


class FakeNvml:
    """Two GPUs behind the same interface as NvmlSource."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def read(self) -> list[GpuReading]:
        return [GpuReading(0, 40.0, 10.0, {self.pid: 1 << 30}), GpuReading(1, 60.0, 30.0, {})]

    def close(self) -> None:
        pass


def test_gpu_metrics_sum_over_the_jobs_gpus_with_a_fake_nvml(store, tmp_path: Path) -> None:
    fake = FakeProc(tmp_path / "proc")
    fake.process(10, ppid=1, pgrp=10)
    clock = ManualClock()
    writer = ProfileWriter(str(tmp_path / "profiles"), JOB, clock=clock)
    monitor = start_monitor(store, clock, fake, {"algo-1": 10}, tmp_path, system_interval_s=1,
                            profile_interval_ms=100, profiler=writer, gpu=FakeNvml(10))
    clock.advance(1.55)  # ticks at 0.1 s to 1.5 s, then the job ends
    monitor.stop()
    assert monitor.error is None
    assert host_metric(store, JOB, "GPUUtilization") == [100.0, 100.0]  # the second interval: the last 0.55 s
    assert host_metric(store, JOB, "GPUMemoryUtilization") == [40.0, 40.0]
    frame = trainmon.profile(JOB, str(tmp_path / "profiles")).dataframe()
    assert list(frame[frame.metric == "gpu0_utilization_pct"]["value"]) == [40.0] * 15  # a row a tick
    assert set(frame[frame.metric == "job_gpu_memory_bytes"]["value"]) == {float(1 << 30)}


def test_visible_gpus_follow_cuda_visible_devices() -> None:
    assert visible_gpus({}) is None
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "1,3"}) == [1, 3]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []


class FakeProc:
    """A /proc tree in a temporary directory, written the way the kernel formats it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()
        self.host()

    def process(self, pid: int, *, ppid: int, pgrp: int, cpu_ticks: int = 0, threads: int = 1, pages: int = 100,
                state: str = "S", read_bytes: int = 0, write_bytes: int = 0, name: str = "train") -> None:
        (self.root / str(pid)).mkdir(exist_ok=True)
        (self.root / str(pid) / "stat").write_text(
            f"{pid} ({name}) {state} {ppid} {pgrp} {pgrp} 0 -1 4194304 0 0 0 0 {cpu_ticks} 0 0 0 20 0 {threads} 0 "
            f"100 1000 {pages} 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n")
        (self.root / str(pid) / "io").write_text(
            f"rchar: 1\nwchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: {read_bytes}\nwrite_bytes: {write_bytes}\n"
            "cancelled_write_bytes: 0\n")

    def vanish(self, pid: int) -> None:
        for name in ("stat", "io"):
            (self.root / str(pid) / name).write_text("")  # what a descriptor kept open reads: nothing
            (self.root / str(pid) / name).unlink()
        (self.root / str(pid)).rmdir()

    def host(self, *, forks: int = 1000, net_dev: str | None = None) -> None:
        (self.root / "stat").write_text(STAT.replace("processes 1000", f"processes {forks}"))
        (self.root / "meminfo").write_text(MEMINFO)
        (self.root / "diskstats").write_text(DISKSTATS)
        (self.root / "net").mkdir(exist_ok=True)
        (self.root / "net" / "dev").write_text(NET_DEV if net_dev is None else net_dev)

    def counters(self, *, cores: list[tuple[int, int]], iowait: int = 0, available_kb: int = 6_000_000,
                 disk_sectors: tuple[int, int] = (0, 0), net_bytes: tuple[int, int] = (0, 0),
                 forks: int = 1000) -> None:
        """The host's files for these counters: (busy, total) clock ticks of each core (``iowait``
        counted on the first), MemAvailable, sectors read and written, bytes received and sent."""
        waits = [iowait] + [0] * (len(cores) - 1)
        lines = [(f"cpu{index}", busy, total - busy - wait, wait)
                 for index, ((busy, total), wait) in enumerate(zip(cores, waits, strict=True))]
        lines.insert(0, ("cpu", sum(line[1] for line in lines), sum(line[2] for line in lines), iowait))
        stat = "".join(f"{name} {busy} 0 0 {idle} {wait} 0 0 0 0 0\n" for name, busy, idle, wait in lines)
        (self.root / "stat").write_text(f"{stat}intr 1 0\nctxt 1\nbtime 1700000000\nprocesses {forks}\n")
        (self.root / "meminfo").write_text(
            f"MemTotal: {MEMORY_KB} kB\nMemFree: 1000 kB\nMemAvailable: {available_kb} kB\n")
        (self.root / "diskstats").write_text(
            f" 259 0 nvme0n1 100 5 {disk_sectors[0]} 30 50 1 {disk_sectors[1]} 20 0 40 50 0 0 0 0 0 0\n")
        header = "".join(NET_DEV.splitlines(keepends=True)[:2])
        (self.root / "net" / "dev").write_text(
            f"{header}  eth0: {net_bytes[0]} 10 0 0 0 0 0 0 {net_bytes[1]} 10 0 0 0 0 0 0\n")


STAT = """\
cpu  1000 10 300 5000 40 0 50 7 0 0
cpu0 600 10 200 2000 30 0 40 5 0 0
cpu1 400 0 100 3000 10 0 10 2 0 0
intr 12345 0 0 1 2
ctxt 999
btime 1700000000
processes 1000
procs_running 1
procs_blocked 0
softirq 1 2 3
"""
MEMINFO = """\
MemTotal:        8000000 kB
MemFree:         1000000 kB
MemAvailable:    6000000 kB
Buffers:           10000 kB
"""
DISKSTATS = """\
   7       0 loop0 900 0 9000 10 0 0 0 0 0 10 10 0 0 0 0 0 0
 259       0 nvme0n1 100 5 2000 30 50 1 4000 20 0 40 50 0 0 0 0 0 0
 259       1 nvme0n1p1 90 5 1800 30 45 1 3600 20 0 40 50 0 0 0 0 0 0
   8       0 sda 10 0 20 1 5 0 40 1 0 2 2 0 0 0 0 0 0
   8       1 sda1 10 0 20 1 5 0 40 1 0 2 2 0 0 0 0 0 0
 253       0 dm-0 70 0 700 10 20 0 200 10 0 10 20 0 0 0 0 0 0
"""
NET_DEV = """\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 5000000      100    0    0    0     0          0         0  5000000      100    0    0    0     0       0          0
  eth0:123456789012  90000    0    0    0     0          0         0   700000    5000    0    0    0     0       0          0
docker0:     300       3    0    0    0     0          0         0      400       4    0    0    0     0       0          0
"""


def test_host_counters_from_the_kernels_files(tmp_path: Path) -> None:
    reader = ProcReader(FakeProc(tmp_path / "proc").root)
    host = reader.host()
    assert (host.cpu_busy, host.cpu_total) == ([855, 512], [2885, 3522])  # busy: all but idle and iowait
    assert (host.iowait, host.total) == (40, 6407)
    assert (host.memory_total_bytes, host.memory_available_bytes) == (8000000 * 1024, 6000000 * 1024)
    assert (host.disk_read_bytes, host.disk_write_bytes) == ((2000 + 20) * 512, (4000 + 40) * 512)  # whole disks
    assert (host.net_receive_bytes, host.net_transmit_bytes) == (123456789012 + 300, 700000 + 400)  # not lo
    assert host.forks == 1000
    assert host == parse_host(*reader.host_files())
    reader.close()


@pytest.mark.parametrize("stat", [
    STAT,
    "cpu  1000 10 300 5000 40 0 50 7\ncpu0 600 10 200 2000 30 0 40 5\ncpu1 400 0 100 3000 10 0 10 2\nctxt 1\n",
    "cpu  1000 10 300 5000 40 0 50 7 0 0\ncpu0 600 10 200 2000 30 0 40 5 0 0\ncpu1 400 0 100 3000 10 0 10 2 0 0",
])
def test_cpu_lines_of_any_width_and_layout(stat: str) -> None:
    assert parse_cpu(stat.encode()) == ([855, 512], [2885, 3522], 40, 6407)


@pytest.mark.parametrize(("meminfo", "expected"), [
    (MEMINFO, (8000000 * 1024, 6000000 * 1024)),
    ("MemFree: 5 kB\nMemAvailable: 7 kB\nMemTotal: 9 kB\n", (9 * 1024, 7 * 1024)),  # another order
    ("MemTotal: 9 kB\nMemFree: 5 kB\n", (9 * 1024, 0)),  # a kernel without MemAvailable
])
def test_memory_lines_in_any_order(meminfo: str, expected: tuple[int, int]) -> None:
    assert parse_memory(meminfo.encode()) == expected


def test_files_longer_than_a_read_are_read_whole(tmp_path: Path) -> None:
    lines = "".join(f"veth{i}: 1 0 0 0 0 0 0 0 2 0 0 0 0 0 0 0\n" for i in range(3000))  # about 130 kB
    fake = FakeProc(tmp_path / "proc")
    fake.host(net_dev=NET_DEV + lines)
    host = ProcReader(fake.root).host()
    assert (host.net_receive_bytes, host.net_transmit_bytes) == (123456789012 + 300 + 3000, 700000 + 400 + 6000)


def test_a_host_parser_gives_what_parse_host_gives_for_repeated_and_changed_files() -> None:
    files = (STAT.encode(), MEMINFO.encode(), DISKSTATS.encode(), NET_DEV.encode())
    parser = HostParser()
    assert parser(*files) == parser(*files) == parse_host(*files)
    changed = (files[0], files[1].replace(b"6000000", b"5000000"), b"", files[3].replace(b"  700000", b"  700001"))
    assert parser(*changed) == parse_host(*changed)


def test_a_fake_proc_tree_is_read_like_the_real_one(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path / "proc")
    fake.process(10, ppid=1, pgrp=10, cpu_ticks=75, threads=4, pages=300, read_bytes=4096, write_bytes=8192)
    fake.process(11, ppid=10, pgrp=10, cpu_ticks=10, pages=100, name="a child")
    fake.process(12, ppid=11, pgrp=12, cpu_ticks=2, pages=100, name="escaped (setsid)")
    fake.process(13, ppid=1, pgrp=13, name="another job")
    reader = ProcReader(fake.root)
    assert reader.process_groups([10]) == {10: {10, 11, 12}}  # a descendant that left the group counts
    tree = ProcessTree(reader)
    tree.follow({10, 11})
    first = tree.read(0.1, full=False)
    assert (first.processes, first.threads, first.resident_bytes) == (2, 5, 400 * PAGE_BYTES)
    assert first.cpu_seconds == 0  # what they used before they were seen is no spike
    fake.process(10, ppid=1, pgrp=10, cpu_ticks=175, threads=4, pages=300, read_bytes=4096, write_bytes=8192)
    assert tree.read(0.2, full=False).cpu_seconds == pytest.approx(100 / CLOCK_TICKS)
    fake.process(10, ppid=1, pgrp=10, cpu_ticks=175, threads=4, pages=300, read_bytes=5096, write_bytes=8192)
    assert tree.read(0.3, full=False)[1:3] == (0, 0)  # io is read once a second
    assert tree.read(1.0, full=True)[1:3] == (1000, 0)
    tree.close()
    reader.close()


def test_idle_processes_are_read_every_few_seconds_and_counted_then(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path / "proc")
    fake.process(20, ppid=1, pgrp=20, cpu_ticks=500, pages=100)
    reader = ProcReader(fake.root)
    tree = ProcessTree(reader)
    tree.follow({20})
    assert tree.read(1.0, full=True).cpu_seconds == 0  # its CPU time did not move: idle from now on
    fake.process(20, ppid=1, pgrp=20, cpu_ticks=530, pages=200, write_bytes=4096)  # it wakes up
    readings = [tree.read(1.0 + tick / 10, full=tick % 10 == 0) for tick in range(1, 50)]
    assert sum(r.cpu_seconds for r in readings) == 0 and readings[-1].resident_bytes == 100 * PAGE_BYTES
    caught_up = tree.read(1.0 + IDLE_READ_S, full=True)  # its next read
    assert caught_up.cpu_seconds == pytest.approx(30 / CLOCK_TICKS)
    assert (caught_up.write_bytes, caught_up.resident_bytes) == (4096, 200 * PAGE_BYTES)
    fake.process(20, ppid=1, pgrp=20, cpu_ticks=540, pages=200)
    assert tree.read(1.1 + IDLE_READ_S, full=False).cpu_seconds == pytest.approx(10 / CLOCK_TICKS)  # busy again
    tree.close()
    reader.close()


def test_counts_drop_at_once_when_the_last_busy_process_vanishes(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path / "proc")
    fake.process(50, ppid=1, pgrp=50)
    fake.process(51, ppid=50, pgrp=50)
    tree = ProcessTree(ProcReader(fake.root))
    tree.follow({50, 51})
    fake.process(51, ppid=50, pgrp=50, cpu_ticks=10)
    assert tree.read(1.0, full=True).processes == 2  # 50 is idle from now on, 51 busy
    fake.vanish(51)
    assert tree.read(1.1, full=False).processes == 1
    assert tree.read(1.2, full=False).processes == 1  # nothing is read now, and nothing stale is reported
    tree.close()


def test_listing_follows_processes_that_appear_and_vanish(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path / "proc")
    fake.process(30, ppid=1, pgrp=30)
    reader = ProcReader(fake.root)
    assert reader.process_groups([30]) == {30: {30}}
    fake.process(31, ppid=30, pgrp=30, state="R")
    fake.process(40, ppid=1, pgrp=40)  # not the job's
    assert reader.process_groups([30]) == {30: {30, 31}}
    tree = ProcessTree(reader)
    tree.follow({30, 31})
    fake.vanish(31)
    assert tree.read(0.1, full=False).processes == 1  # gone between two samples
    assert reader.process_groups([30]) == {30: {30}}
    fake.process(32, ppid=30, pgrp=30, state="Z")  # a zombie is no longer running
    tree.follow(reader.process_groups([30])[30])
    assert tree.pids == {30}
    tree.close()
    reader.close()


def test_processes_that_vanish_between_samples_are_survived() -> None:
    leader = subprocess.Popen(
        [PY, "-c", "import subprocess, sys, time\n"
                   "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
                   "print(child.pid, flush=True)\ntime.sleep(30)"],
        start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        assert leader.stdout is not None
        child = int(leader.stdout.readline())
        reader = ProcReader()
        members = reader.process_groups([leader.pid])[leader.pid]
        assert members == {leader.pid, child}
        tree = ProcessTree(reader)
        tree.follow(members)
        before = tree.read(0.0, full=False)
        os.kill(child, 9)  # gone between two samples (a zombie until the leader reaps it)
        deadline = time.monotonic() + 10
        while tree.read(0.1, full=False).processes != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        after = tree.read(0.2, full=True)
        assert before.processes == 2 and after.processes == 1 and after.cpu_seconds >= 0
        tree.close()
        reader.close()
    finally:
        leader.kill()
        leader.communicate()


def test_a_process_started_while_the_monitor_runs_is_counted(store, tmp_path: Path) -> None:
    """The tree is re-listed when the machine has started processes since the last listing."""
    fake = FakeProc(tmp_path / "proc")
    fake.process(30, ppid=1, pgrp=30)
    clock = ManualClock()
    monitor = start_monitor(store, clock, fake, {"algo-1": 30}, tmp_path, system_interval_s=1)
    clock.advance(1.0)  # the first interval: the leader alone
    fake.process(31, ppid=30, pgrp=30)
    fake.host(forks=1001)  # the machine has started a process
    clock.advance(2.0)  # listed at the next tick, counted from the one after
    monitor.stop()
    assert monitor.error is None
    assert host_metric(store, JOB, "ProcessCount") == [1.0, 1.0, 2.0]


def test_profile_rows_are_each_ticks_exact_shares_and_rates(store, tmp_path: Path) -> None:
    fake = FakeProc(tmp_path / "proc")
    fake.counters(cores=[(1000, 5000), (2000, 5000)], iowait=100, disk_sectors=(8000, 4000), net_bytes=(10**6, 10**5))
    fake.process(10, ppid=1, pgrp=10, cpu_ticks=500, threads=3, pages=200)
    clock = ManualClock()
    writer = ProfileWriter(str(tmp_path / "profiles"), JOB, clock=clock)
    monitor = start_monitor(store, clock, fake, {"algo-1": 10}, tmp_path, system_interval_s=60,
                            profile_interval_ms=500, profiler=writer)
    # the first half second: busy, reading and sending
    fake.counters(cores=[(1025, 5050), (2005, 5050)], iowait=110, disk_sectors=(9000, 4200),
                  net_bytes=(10**6 + 5000, 10**5 + 500))
    fake.process(10, ppid=1, pgrp=10, cpu_ticks=500 + CLOCK_TICKS // 4, threads=3, pages=200, read_bytes=4096)
    clock.advance(0.5)
    # the second: idle, with more memory in use
    fake.counters(cores=[(1025, 5100), (2005, 5100)], iowait=110, available_kb=4_000_000, disk_sectors=(9000, 4200),
                  net_bytes=(10**6 + 5000, 10**5 + 500))
    clock.advance(0.5)
    monitor.stop()
    assert monitor.error is None and writer.failed is None
    job = {"job_resident_bytes": 200.0 * PAGE_BYTES, "job_threads": 3.0, "job_processes": 1.0,
           "job_write_bytes_per_s": 0.0}
    assert profile_rows(tmp_path / "profiles") == {
        T0_MS + 500: {"cpu0_utilization_pct": 50.0, "cpu1_utilization_pct": 10.0, "cpu_iowait_pct": 10.0,
                      "memory_used_pct": 25.0, "disk_read_bytes_per_s": 1000 * 512 / 0.5,
                      "disk_write_bytes_per_s": 200 * 512 / 0.5, "network_receive_bytes_per_s": 5000 / 0.5,
                      "network_transmit_bytes_per_s": 500 / 0.5, "job_cpu_pct": 50.0,
                      "job_read_bytes_per_s": 0.0, **job},
        T0_MS + 1000: {"cpu0_utilization_pct": 0.0, "cpu1_utilization_pct": 0.0, "cpu_iowait_pct": 0.0,
                       "memory_used_pct": 50.0, "disk_read_bytes_per_s": 0.0, "disk_write_bytes_per_s": 0.0,
                       "network_receive_bytes_per_s": 0.0, "network_transmit_bytes_per_s": 0.0, "job_cpu_pct": 0.0,
                       "job_read_bytes_per_s": 4096 / 0.5, **job},  # io is read once a second: all of it here
    }


def test_profile_files_rotate_on_the_writers_clock(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    clock = ManualClock()
    writer = ProfileWriter(str(tmp_path / "profiles"), "rotates", rotate_s=60.0, clock=clock)
    writer.add("algo-1", T0_MS, {"cpu": 1.0})
    clock.advance(59.5)
    writer.add("algo-1", T0_MS + 59_500, {"cpu": 2.0})
    clock.advance(0.5)
    writer.add("algo-1", T0_MS + 60_000, {"cpu": 3.0})  # a minute on: the first file is due
    writer.add("algo-1", T0_MS + 60_100, {"cpu": 4.0})
    writer.close()
    files = trainmon.profile("rotates", str(tmp_path / "profiles")).files()
    assert [pq.read_table(name).column("value").to_pylist() for name in files] == [[1.0, 2.0, 3.0], [4.0]]


def test_profile_rows_may_differ_in_their_metrics(tmp_path: Path) -> None:
    from trainmon.store.profiles import ProfileWriter

    writer = ProfileWriter(str(tmp_path / "profiles"), "rows")
    writer.add("algo-1", 1000, {"cpu0_utilization_pct": 10.0})
    writer.add("algo-1", 1100, {"cpu0_utilization_pct": 20.0, "gpu0_utilization_pct": 90.0})
    writer.add("algo-2", 1100, {"cpu0_utilization_pct": 30.0})
    writer.close()
    frame = trainmon.profile("rows", str(tmp_path / "profiles")).dataframe()
    rows = [(int(r.timestamp.value // 10**6), r.host, r.metric, r.value) for r in frame.itertuples()]
    assert rows == [(1000, "algo-1", "cpu0_utilization_pct", 10.0), (1100, "algo-1", "cpu0_utilization_pct", 20.0),
                    (1100, "algo-1", "gpu0_utilization_pct", 90.0), (1100, "algo-2", "cpu0_utilization_pct", 30.0)]


def test_profile_summary_matches_numpy_and_leaves_nan_out(tmp_path: Path) -> None:
    import numpy as np

    from trainmon.store.profiles import ProfileWriter

    rng = np.random.default_rng(7)
    values = {"algo-1": rng.normal(50, 20, 997), "algo-2": rng.exponential(3.0, 301)}
    writer = ProfileWriter(str(tmp_path / "profiles"), "sums")
    for host, series in values.items():
        for index, value in enumerate(series):
            writer.add(host, 1000 + 100 * index, {"cpu": float(value), "gpu": float("nan") if index % 4 else 1.0})
    writer.close()
    rows = trainmon.profile("sums", str(tmp_path / "profiles")).summary()
    assert [(r["host"], r["metric"]) for r in rows] == [("algo-1", "cpu"), ("algo-1", "gpu"), ("algo-2", "cpu"),
                                                        ("algo-2", "gpu")]
    for row in rows:
        expected = values[row["host"]] if row["metric"] == "cpu" else np.ones(len(values[row["host"]][::4]))
        assert row["samples"] == len(expected)
        assert [row[k] for k in ("min", "p50", "p95", "p99", "max")] == pytest.approx(
            [expected.min(), *np.percentile(expected, [50, 95, 99]), expected.max()], rel=1e-12)
    assert trainmon.profile("nothing", str(tmp_path / "profiles")).summary() == []


def test_profiler_writes_parquet_a_dataframe_and_a_summary(home: Path, script) -> None:
    burn = script(BURN.format(seconds=1.5))
    run_cli("run", "--name", "profiled", "--profiling-interval-ms", "100", "--", PY, str(burn), check=True)
    doc = json.loads(run_cli("describe", "profiled", "--json", check=True).stdout)
    assert doc["ProfilingStatus"] == "Enabled"
    assert doc["ProfilerConfig"]["ProfilingIntervalInMilliseconds"] == 100
    files = list((home / "profiles" / "profiled" / "algo-1").glob("*.parquet"))
    assert files
    frame = trainmon.profile("profiled").dataframe()
    assert list(frame.columns) == ["timestamp", "host", "metric", "value"]
    cpu = frame[frame.metric == "job_cpu_pct"]
    assert len(cpu) > 0 and cpu["value"].max() > 0 and cpu["value"].min() >= 0
    rows = frame.groupby("timestamp")["metric"].nunique()
    assert rows.min() == rows.max() == frame.metric.nunique()  # every row has every metric
    assert {"cpu0_utilization_pct", "cpu_iowait_pct", "memory_used_pct", "disk_read_bytes_per_s",
            "network_receive_bytes_per_s", "job_resident_bytes", "job_processes"} <= set(frame.metric)
    summary = json.loads(run_cli("profile", "profiled", "--json", check=True).stdout)
    row = next(r for r in summary if r["metric"] == "job_cpu_pct")
    assert row["host"] == "algo-1" and row["min"] <= row["p50"] <= row["p95"] <= row["p99"] <= row["max"]
    assert "P99" in run_cli("profile", "profiled", check=True).stdout


@pytest.mark.parametrize("interval", ["0", "50", "300", "120000"])
def test_profiling_interval_outside_the_allowed_set(home: Path, interval: str) -> None:
    result = run_cli("run", "--name", "badinterval", "--profiling-interval-ms", interval, "--", "true")
    assert result.returncode == 2
    assert "ValidationException" in result.stderr and "one of 100, 200, 500, 1000, 5000, 60000" in result.stderr


def test_unwritable_or_unreachable_profile_locations_fail_at_start(home: Path, tmp_path: Path) -> None:
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("x")
    result = run_cli("run", "--name", "badloc", "--profile-output", str(blocked / "sub"), "--", "true")
    assert result.returncode == 2 and "cannot be written" in result.stderr
    remote = run_cli("run", "--name", "badloc", "--profile-output", "s3://no-such-bucket/x", "--", "true")
    assert remote.returncode == 2 and "profile location 's3://no-such-bucket/x'" in remote.stderr
    assert "Traceback" not in result.stderr + remote.stderr


def test_without_pyarrow_a_job_runs_unprofiled_and_one_that_asks_is_told_what_to_install(home: Path) -> None:
    """The profiler's packages are looked up, not imported, when a job starts: with pyarrow hidden,
    a job that did not ask for profiling runs without it, and one that asked is refused with what
    to install."""
    code = "import sys; sys.modules['pyarrow'] = None; from trainmon.cli import main; sys.exit(main(sys.argv[1:]))"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)

    plain = run("run", "--name", "unprofiled", "--", "true")
    assert plain.returncode == 0, plain.stderr
    job = json.loads(run_cli("describe", "unprofiled", "--json", check=True).stdout)
    assert job["TrainingJobStatus"] == "Completed" and "ProfilerRuleConfigurations" not in job
    asked = run("run", "--name", "asked", "--profiling-interval-ms", "500", "--", "true")
    assert asked.returncode == 2 and "profiling needs pyarrow: pip install 'trainmon[profiler]'" in asked.stderr
    with_pyarrow = run_cli("run", "--name", "profiled", "--", "true")
    assert with_pyarrow.returncode == 0, with_pyarrow.stderr
    assert json.loads(run_cli("describe", "profiled", "--json", check=True).stdout)["ProfilerRuleConfigurations"]
    # installed, it is found without being imported (a few tenths of a second a job's start does not wait for)
    looked_up = ("import sys; from trainmon.store import profiles; "
                 f"print(profiles.available(), profiles.check_location({str(home / 'profiles')!r}), 'pyarrow' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", looked_up], capture_output=True, text=True, timeout=120,
                          check=True).stdout.split() == ["True", "None", "False"]


def test_profile_location_filling_up_warns_and_the_job_completes(home: Path, script, tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], check=True)
    try:
        train = script(
            f"""
            import time
            try:  # the disk fills up while the job runs
                with open({str(disk / "filler")!r}, "wb") as f:
                    while True:
                        f.write(b"x" * 4096)
                        f.flush()
            except OSError:
                pass
            t = time.time()
            while time.time() - t < 1.5:
                pass
            print("trained")
            """
        )
        result = run_cli("run", "--name", "fills", "--profiling-interval-ms", "100", "--profile-output", str(disk),
                         "--", PY, str(train))
        assert result.returncode == 0, result.stderr
        assert "trained" in result.stdout
        assert "warning: system monitoring" in result.stderr and "the job itself was not affected" in result.stderr
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=True)


def test_sampler_keeps_its_schedule_and_skips_rather_than_bunches(store, tmp_path: Path) -> None:
    fake = FakeProc(tmp_path / "proc")
    fake.process(10, ppid=1, pgrp=10)
    clock = ManualClock()
    writer = ProfileWriter(str(tmp_path / "p"), "ticks", clock=clock)
    monitor = start_monitor(store, clock, fake, {"algo-1": 10}, tmp_path, system_interval_s=60,
                            profile_interval_ms=100, profiler=writer)
    clock.advance(0.25)  # on time: 0.1 and 0.2
    clock.jump(0.13)  # the tick due at 0.3 runs at 0.38; the one at 0.4 would follow 20 ms later: skipped
    clock.advance(0.25)  # back on the schedule: 0.5 and 0.6
    clock.jump(0.1)  # the tick due at 0.7 runs at 0.73; the one at 0.8 is 70 ms away: kept
    clock.advance(0.1)
    monitor.stop()
    ticks = list(monitor.tick_times)
    assert ticks == pytest.approx([0.1, 0.2, 0.38, 0.5, 0.6, 0.73, 0.8])
    assert min(b - a for a, b in zip(ticks, ticks[1:], strict=False)) >= 0.05  # never bunched: half an interval apart
    assert monitor.error is None
    assert len(profile_rows(tmp_path / "p", "ticks")) == len(ticks)  # a profile row for every tick
    assert os.path.isdir(tmp_path / "p" / "ticks" / "algo-1")


def test_a_manual_clock_wakes_each_waiter_at_its_deadline_and_on_a_stop() -> None:
    clock = ManualClock(monotonic_s=10.0, wall_s=1000.0)
    signal = clock.stop_signal()
    woken: list[tuple[float, bool]] = []

    def waiter() -> None:
        for deadline in (11.0, 12.0, 13.0, 100.0):
            stopped = signal.wait_until(deadline)
            woken.append((clock.monotonic(), stopped))
            if stopped:
                return

    thread = threading.Thread(target=waiter)
    clock.start(thread)
    assert woken == [] and (clock.monotonic(), clock.wall()) == (10.0, 1000.0)
    clock.advance(2.5)  # deadline by deadline
    assert woken == [(11.0, False), (12.0, False)] and clock.monotonic() == 12.5
    clock.jump(10.0)  # straight there: the waiter is late
    assert woken[2:] == [(22.5, False)] and clock.wall() == 1012.5
    signal.set()
    thread.join()
    assert woken[3:] == [(22.5, True)]
    assert signal.wait_until(0.0) and signal.wait_until(1e9)  # a set signal stays set


def test_the_real_clocks_stop_signal_ends_a_wait_and_stays_set() -> None:
    clock = RealClock()
    signal = clock.stop_signal()
    monotonic, wall = time.monotonic(), time.time()
    assert monotonic <= clock.monotonic() <= time.monotonic()  # the system's clocks
    assert wall <= clock.wall() <= time.time()
    assert signal.wait_until(clock.monotonic() - 1.0) is False  # a deadline passed: no wait at all
    signal.set()
    signal.set()
    assert signal.wait_until(clock.monotonic() + 3600.0) is True  # set: no wait either
    assert signal.wait_until(clock.monotonic() + 3600.0) is True


def test_writing_and_reading_a_profile_leaves_pandas_unimported(tmp_path: Path) -> None:
    """A job's supervisor writes its profile, and reads it for the report and the charts, without
    importing pandas (a quarter of a second of its CPU), and the file reads back whole: metric names,
    times and values."""
    script = (
        "import sys\n"
        "from trainmon.report.sources import read_profile\n"
        "from trainmon.store.profiles import Profile, ProfileWriter\n"
        f"location = {str(tmp_path / 'profiles')!r}\n"
        "writer = ProfileWriter(location, 'lean')\n"
        "writer.add('algo-1', 1000, {'cpu': 1.5, 'gpu0_utilization_pct': 90.0})\n"
        "writer.add('algo-1', 1100, {'cpu': 2.5, 'r\\u00e9seau': -1.0})\n"
        "writer.close()\n"
        "assert writer.failed is None, writer.failed\n"
        "read = read_profile(location, 'lean').readings['algo-1'].metrics\n"
        "assert {name: (c[0].tolist(), c[1].tolist()) for name, c in read.items()} == {\n"
        "    'cpu': ([1000, 1100], [1.5, 2.5]), 'gpu0_utilization_pct': ([1000], [90.0]),\n"
        "    'r\\u00e9seau': ([1100], [-1.0])}, read\n"
        "stamps, values = Profile('lean', location).columns('algo-1', 'cpu')\n"
        "assert (stamps.tolist(), values.tolist()) == ([1000, 1100], [1.5, 2.5])\n"
        "print('pandas' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
    frame = trainmon.profile("lean", str(tmp_path / "profiles")).dataframe()
    rows = sorted((int(r.timestamp.value // 10**6), r.metric, r.value) for r in frame.itertuples())
    assert rows == [(1000, "cpu", 1.5), (1000, "gpu0_utilization_pct", 90.0), (1100, "cpu", 2.5),
                    (1100, "r\u00e9seau", -1.0)]
