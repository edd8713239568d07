"""Containers: what running a host as a container of its image costs against running the same
command as a process, both under ``trainmon run``, alternated in the same run.

- Start: from ``trainmon run``'s start to the job's first record readable in the store, for a
  host that prints one metric line (``/bin/sh -c 'echo …'``): in the test image (created,
  started attached, its output on pipes) against the same shell command as a process. Median of
  five of each. Informational: the engine's own start (namespaces, mounts, the network) is most
  of it.
- Flood: a host printing 2,000,000 metric lines as fast as it can (the test image's ``train``
  in flood mode, and the same Python loop as a process): ``trainmon run``'s whole time, every
  line stored. Target: the container within 1.1x of the process.
- Sampling: the system monitor and the profiler (100 ms ticks) following a host of 50 sleeping
  processes for 20 s, in a process of their own (``benchmarks.monitor``'s child): the host a
  container of the image (its main process on this machine, as the launcher hands it to the
  monitor) against the same tree as a process group. CPU time per tick; informational (both read
  the same ``/proc`` files, one per process).

The image is the tests' (tests/containers.py builds it offline on first use: about a minute).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import monitor
from .common import Report, child_env, heading, median, scratch_dir, table

STARTS = 5
FLOOD_LINES = 2_000_000
TARGET_FLOOD_RATIO = 1.1
TIMEOUT_S = 600.0
POLL_S = 0.005
DEFINITION = "train:error=Train_error=(.*?);"
# the image's flood, as a process: the same loop as tests/images/algo/train's
FLOOD = ("import sys\nout = sys.stdout.buffer\nfor step in range(int(sys.argv[1])):\n"
         "    out.write(b'step %d Train_error=0.5; padding padding padding padding\\n' % step)\nout.flush()\n")


def _first_record(home: Path, name: str, command: list[str]) -> tuple[float, float, int]:
    """Seconds from launching ``trainmon run`` to the job's first record in the store, to its return,
    and its exit status."""
    from trainmon.store import open_store

    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "trainmon", "run", "--name", name, "--metric", DEFINITION,
                                "--disable-profiler", *command], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=child_env(TRAINMON_HOME=str(home)))
    first = float("nan")
    deadline = time.monotonic() + TIMEOUT_S
    store = None
    try:
        while time.monotonic() < deadline:
            if store is None and (home / "trainmon.db").exists():
                store = open_store(home)
            job = store.get_job(name) if store is not None else None
            if job is not None and store is not None and store.points(job.id, names=["train:error"]):
                first = time.perf_counter() - started
                break
            if process.poll() is not None and job is not None:
                break
            time.sleep(POLL_S)
        code = process.wait(TIMEOUT_S)
        return first, time.perf_counter() - started, code
    finally:
        if store is not None:
            store.close()


def _stored(home: Path, name: str) -> int:
    from trainmon.store import open_store

    store = open_store(home)
    try:
        job = store.get_job(name)
        return len(store.points(job.id, names=["train:error"])) if job is not None else 0
    finally:
        store.close()


def run(scale: float = 1.0) -> Report:
    report = Report("containers")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.containers import algo_image

    image = algo_image()
    lines = max(10_000, int(FLOOD_LINES * scale))
    echo = ["/bin/sh", "-c", "echo 'Train_error=0.5;'"]
    with scratch_dir("containers-") as work:
        heading(f"Container start: trainmon run -> first record stored, {STARTS} of each, alternated")
        starts: dict[str, list[float]] = {"process": [], "container": []}
        for index in range(STARTS):
            for kind, command in (("process", ["--", *echo]), ("container", ["--image", image, "--", *echo])):
                home = work / f"{kind}-{index}"
                first, _, code = _first_record(home, f"start-{index}", command)
                report.check(code == 0, f"{kind} start {index}: trainmon run exited 0 ({code})")
                starts[kind].append(first)
        table(["host", "median s", "min s", "max s"],
              [[kind, f"{median(v):.3f}", f"{min(v):.3f}", f"{max(v):.3f}"] for kind, v in starts.items()])
        report.ratio("start to first record: container / process", median(starts["container"]) / median(starts["process"]),
                     detail=f"({median(starts['container']):.2f} s / {median(starts['process']):.2f} s)")

        heading(f"Container flood: {lines:,} metric lines as fast as the host can print them")
        walls: dict[str, float] = {}
        for kind, command in (("process", ["--", sys.executable, "-c", FLOOD, str(lines)]),
                              ("container", ["--image", image, "-H", "mode=flood", "-H", f"lines={lines}"])):
            home = work / f"flood-{kind}"
            _, wall, code = _first_record(home, "flood", command)
            report.check(code == 0, f"{kind} flood: trainmon run exited 0 ({code})")
            stored = _stored(home, "flood")
            report.check(stored == lines, f"{kind} flood: every line's point stored ({stored:,} of {lines:,})")
            walls[kind] = wall
        table(["host", "trainmon run s", "lines/s"], [[k, f"{w:.2f}", f"{lines / w:,.0f}"] for k, w in walls.items()])
        ratio = walls["container"] / walls["process"]
        report.ratio("flood, trainmon run's time: container / process", ratio, f"<= {TARGET_FLOOD_RATIO}x",
                     ratio <= TARGET_FLOOD_RATIO, detail=f"({walls['container']:.2f} s / {walls['process']:.2f} s)")
        _sampling(report, image, max(3.0, monitor.RUN_S * scale), work)
    return report


def _sampling(report: Report, image: str, seconds: float, work: Path) -> None:
    heading(f"System metrics: the monitor following {monitor.TREE_SIZE} processes, {monitor.INTERVAL_MS} ms ticks, "
            f"{seconds:g} s each")
    per_tick: dict[str, float] = {}
    for kind in ("process", "container"):
        (work / f"sampling-{kind}").mkdir()
        with (monitor.job_tree(monitor.TREE_SIZE) if kind == "process" else _container_tree(image)) as leader:
            found = monitor.run_child("monitor", str(leader), str(seconds), str(work / f"sampling-{kind}"))
        ticks = len(found["tick_times"])
        report.check(found["processes_max"] == monitor.TREE_SIZE,
                     f"{kind}: the monitor followed the {monitor.TREE_SIZE} processes ({found['processes_max']:g})")
        per_tick[kind] = 1000 * found["cpu_s"] / max(1, ticks)
    table(["host", "CPU ms per tick"], [[kind, f"{ms:.3f}"] for kind, ms in per_tick.items()])
    report.ratio("system-metric sampling, CPU per tick: container host / process host",
                 per_tick["container"] / per_tick["process"],
                 detail=f"({per_tick['container']:.3f} ms / {per_tick['process']:.3f} ms)")


@contextmanager
def _container_tree(image: str) -> Iterator[int]:
    """The monitor's tree of sleeping processes, in a container of the image; its main process's id here."""
    from trainmon.runtime.containers.engine import find

    engine = find()
    started = engine.call(["run", "--detach", "--rm", *engine.limits(), image, "/usr/bin/python3", "-c",
                           monitor.TREE.format(children=monitor.TREE_SIZE - 1)]).stdout.strip()
    try:
        deadline = time.monotonic() + 60
        while len(_tree(engine.state(started)[1])) < monitor.TREE_SIZE and time.monotonic() < deadline:
            time.sleep(0.05)
        yield engine.state(started)[1]
    finally:
        engine.call(["rm", "--force", started], check=False)


def _tree(pid: int) -> list[int]:
    import psutil

    try:
        parent = psutil.Process(pid)
        return [parent.pid, *(child.pid for child in parent.children(recursive=True))]
    except psutil.Error:
        return []
