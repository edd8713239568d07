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
from trainmon.monitor import SystemMonitor
from trainmon.sampler import GpuReading, ProcReader, visible_gpus
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


def test_gpu_metrics_sum_over_the_jobs_gpus_with_a_fake_nvml(store, tmp_path: Path) -> None:
    process = subprocess.Popen([PY, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        from trainmon.profiler import ProfileWriter

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


def test_a_fake_proc_tree_is_read_like_the_real_one(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "10").mkdir(parents=True)
    (proc / "11").mkdir()
    (proc / "12").mkdir()
    (proc / "10" / "stat").write_text("10 (train) S 1 10 10 0 -1 0 0 0 0 0 50 25 0 0 20 0 4 0 100 1000 300 0")
    (proc / "11" / "stat").write_text("11 (a child) R 10 10 10 0 -1 0 0 0 0 0 5 5 0 0 20 0 1 0 100 1000 100 0")
    (proc / "12" / "stat").write_text("12 (escaped) R 11 12 12 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 100 1000 100 0")
    (proc / "10" / "io").write_text("rchar: 1\nread_bytes: 4096\nwrite_bytes: 8192\n")
    reader = ProcReader(proc)
    assert reader.process_groups([10]) == {10: {10, 11, 12}}  # a descendant that left the group counts
    before = reader.tree({10, 11})
    assert (before.processes, before.threads, before.resident_bytes) == (2, 5, 400 * os.sysconf("SC_PAGE_SIZE"))
    (proc / "10" / "stat").write_text("10 (train) S 1 10 10 0 -1 0 0 0 0 0 150 25 0 0 20 0 4 0 100 1000 300 0")
    cpu_seconds, read, write = reader.tree({10, 11}).since(before)
    assert cpu_seconds == pytest.approx(1.0) and (read, write) == (0, 0)
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
        before = reader.tree(members)
        os.kill(child, 9)  # gone between two samples
        deadline = time.monotonic() + 10
        while reader.tree(members).processes != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        after = reader.tree(members)
        assert before.processes == 2 and after.processes == 1
        assert after.since(before)[0] >= 0
        reader.close()
    finally:
        leader.kill()
        leader.communicate()


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


@pytest.mark.parametrize("interval", ["50", "300", "120000"])
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
        from trainmon.profiler import ProfileWriter

        monitor = SystemMonitor(store, "ticks", {"algo-1": process.pid}, tmp_path, system_interval_s=60,
                                profile_interval_ms=100, profiler=ProfileWriter(str(tmp_path / "p"), "ticks"))
        monitor.start()
        time.sleep(1.0)
        hog = threading.Thread(target=lambda: sum(range(3_000_000)))  # a busy thread in the same process
        hog.start()
        hog.join()
        time.sleep(0.5)
        monitor.stop()
    finally:
        process.kill()
        process.wait()
    ticks = list(monitor.tick_times)
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    assert gaps and min(gaps) > 0.05  # never bunched after a delay
    assert monitor.error is None
    assert os.path.isdir(tmp_path / "p" / "ticks" / "algo-1")
