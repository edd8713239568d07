"""System metrics and the profiler, with real jobs on the real /proc, and fakes only for absent GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import trainmon
from trainmon.cloudwatch.model import JOB_NAMESPACE, MetricKey
from trainmon.runtime.monitor import SystemMonitor
from trainmon.runtime.sampler import (
    CLOCK_TICKS,
    IDLE_READ_S,
    PAGE_BYTES,
    GpuReading,
    HostParser,
    ProcessTree,
    ProcReader,
    parse_cpu,
    parse_host,
    parse_memory,
    visible_gpus,
)
from trainmon.store import open_store

from .conftest import PY, run_cli

BURN = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time\\nt = time.time()\\nwhile time.time() - t < {seconds}: pass"])
t = time.time()
while time.time() - t < {seconds}:
    pass
child.wait()
"""


def host_metric(store, job: str, metric: str, host: str = "algo-1") -> list[float]:
    key = MetricKey(JOB_NAMESPACE, metric, (("Host", f"{job}/{host}"),))
    return [s.sum / s.count for s in store.metric_samples(key, 0, 2**62)]


def test_system_metrics_are_the_jobs_own_share(home: Path, script) -> None:
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
    burning, sleeping = host_metric(store, "burner", "CPUUtilization"), host_metric(store, "sleeper", "CPUUtilization")
    assert max(burning) > 80  # two busy processes on two cores: up to 200
    assert max(sleeping) < 20  # the same machine, but not this job's CPU
    assert max(host_metric(store, "burner", "ProcessCount")) == 2
    assert 0 < max(host_metric(store, "burner", "MemoryUtilization")) < 100
    assert 0 < host_metric(store, "burner", "DiskUtilization")[0] < 100
    assert host_metric(store, "burner", "GPUUtilization") == []  # no GPU: absent, never zero
    listed = trainmon.client("cloudwatch").list_metrics(Namespace=JOB_NAMESPACE,
                                                        Dimensions=[{"Name": "Host", "Value": "burner/algo-1"}])
    assert {m["MetricName"] for m in listed["Metrics"]} >= {"CPUUtilization", "MemoryUtilization", "DiskUtilization"}
    table = run_cli("metrics", "burner", "--system", "--metric", "CPUUtilization", check=True).stdout
    assert "CPUUtilization (algo-1)" in table


class FakeNvml:
    """Two GPUs behind the same interface as NvmlSource."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def read(self) -> list[GpuReading]:
        return [GpuReading(0, 40.0, 10.0, {self.pid: 1 << 30}), GpuReading(1, 60.0, 30.0, {})]

    def close(self) -> None:
        pass


def test_gpu_metrics_sum_over_the_jobs_gpus_with_a_fake_nvml(store, tmp_path: Path) -> None:
    process = subprocess.Popen([PY, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        from trainmon.store.profiles import ProfileWriter

        writer = ProfileWriter(str(tmp_path / "profiles"), "gpu-job")
        monitor = SystemMonitor(store, "gpu-job", {"algo-1": process.pid}, tmp_path, system_interval_s=1,
                                profile_interval_ms=100, profiler=writer, gpu=FakeNvml(process.pid))
        monitor.start()
        time.sleep(1.5)
        monitor.stop()
    finally:
        process.kill()
        process.wait()
    assert monitor.error is None
    assert host_metric(store, "gpu-job", "GPUUtilization")[0] == pytest.approx(100.0)
    assert host_metric(store, "gpu-job", "GPUMemoryUtilization")[0] == pytest.approx(40.0)
    frame = trainmon.profile("gpu-job", str(tmp_path / "profiles")).dataframe()
    gpu0 = frame[frame.metric == "gpu0_utilization_pct"]["value"]
    assert len(gpu0) >= 5 and set(gpu0) == {40.0}
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
    leader = subprocess.Popen(
        [PY, "-c", "import subprocess, sys, time\nsys.stdin.readline()\n"
                   "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\ntime.sleep(30)"],
        start_new_session=True, stdin=subprocess.PIPE, text=True)
    monitor = SystemMonitor(store, "grows", {"algo-1": leader.pid}, tmp_path, system_interval_s=1)
    try:
        monitor.start()
        deadline = time.monotonic() + 20
        while not host_metric(store, "grows", "ProcessCount") and time.monotonic() < deadline:
            time.sleep(0.05)  # the first interval is stored: the leader was listed alone
        assert leader.stdin is not None
        leader.stdin.write("go\n")
        leader.stdin.flush()
        while 2 not in host_metric(store, "grows", "ProcessCount") and time.monotonic() < deadline:
            time.sleep(0.05)
        monitor.stop()
    finally:
        os.killpg(leader.pid, 9)
        leader.communicate()
    assert monitor.error is None
    counts = host_metric(store, "grows", "ProcessCount")
    assert counts[0] == 1 and 2 in counts


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
    assert len(cpu) >= 8 and cpu["value"].max() > 50
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
    assert "use one of 100, 200, 500, 1000, 5000, 60000" in result.stderr


def test_unwritable_or_unreachable_profile_locations_fail_at_start(home: Path, tmp_path: Path) -> None:
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("x")
    result = run_cli("run", "--name", "badloc", "--profile-output", str(blocked / "sub"), "--", "true")
    assert result.returncode == 2 and "cannot be written" in result.stderr
    remote = run_cli("run", "--name", "badloc", "--profile-output", "s3://no-such-bucket/x", "--", "true")
    assert remote.returncode == 2 and "profile location 's3://no-such-bucket/x'" in remote.stderr
    assert "Traceback" not in result.stderr + remote.stderr


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
    process = subprocess.Popen([PY, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        from trainmon.store.profiles import ProfileWriter

        monitor = SystemMonitor(store, "ticks", {"algo-1": process.pid}, tmp_path, system_interval_s=60,
                                profile_interval_ms=100, profiler=ProfileWriter(str(tmp_path / "p"), "ticks"))
        monitor.start()
        time.sleep(1.0)

        def hog() -> None:  # a busy thread in the same process, keeping the GIL 170 ms at a time
            end = time.monotonic() + 0.8
            while time.monotonic() < end:
                pass

        switch = sys.getswitchinterval()
        sys.setswitchinterval(0.17)  # each tick waits that long for the GIL: 1.7 intervals late
        try:
            thread = threading.Thread(target=hog)
            thread.start()
            thread.join()
        finally:
            sys.setswitchinterval(switch)
        time.sleep(0.5)
        monitor.stop()
    finally:
        process.kill()
        process.wait()
    ticks = list(monitor.tick_times)
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    assert gaps and min(gaps) >= 0.05 - 0.002  # never bunched after a delay: at least half an interval apart
    assert monitor.error is None
    assert os.path.isdir(tmp_path / "p" / "ticks" / "algo-1")
