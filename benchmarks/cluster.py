"""The Ray launcher: submitting a job, live points from worker nodes, many small jobs on a small cluster.

A real cluster on this machine (``tests.raycluster.RayCluster(3, head_cpus=0)``: a head without
CPUs, which holds the cluster's coordinator (the jobs' supervisors), and three worker nodes of one
CPU each, so one host a node) and a throwaway PostgreSQL server (``tests.conftest.postgres_cluster``, fsync off) that every
node and this process reach. Every job is submitted through the CLI as a user would
(``trainmon run --launcher ray --ray-address ADDR``); this process never joins the cluster, it
reads the shared store (``trainmon.store.open_store``) as any other machine would.

1. Submit -> first record stored. ``trainmon run ... -- python -c 'print(...)'`` (one host, one
   line, then exit) from starting the command to the line readable in the store
   (``get_job_log_records``, polled every 10 ms). Baseline: the same job with the local launcher
   on the same store. One warm-up run each, then SUBMIT_RUNS runs each, alternating; best and
   median. The job's SecondaryStatusTransitions (and the moment its supervisor claimed the job)
   split the time into phases.
2. Print on a worker node -> point readable here. A 2-host job prints LINES lines
   ``t=<time.time()> value=<i>`` per host, INTERVAL_MS apart, under ``--metric 'sent=t=([0-9.]+)'``;
   this process polls ``store.points`` every 5 ms and notes when it first sees each point;
   latency = first seen - printed. Baseline: the same job with the local launcher, same store.
3. MANY_JOBS small jobs at once. ``trainmon run --detach --launcher ray`` MANY_JOBS times in a row
   (each one host printing three lines); with one CPU a worker, at most three run at once and the
   rest queue (the launcher waits for room). Wall time from the first submit to the last job
   Completed (its final status's time). Baseline: the same jobs one after another (submit, wait
   until it ended, next), measured on SEQUENTIAL_SAMPLE of them and scaled to MANY_JOBS.

Skipped, with a message, when Ray, psycopg, pytest (the test helpers need it) or the PostgreSQL
binaries are missing. Every process the benchmark starts (the CLI, its submission processes, the
nodes, and what runs on them) carries a marker in its environment; once the cluster is closed,
whatever still carries it is reported (a failed check) and killed, then PostgreSQL stops.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import signal
import subprocess
import sys
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common import Report, child_env, heading, median, percentile, ratio_text, scratch_dir, table

JOBS = Path(__file__).resolve().parent / "jobs.py"
PY = sys.executable
WORKERS = 3
SUBMIT_RUNS = 5
LINES = 200  # per host
INTERVAL_MS = 20.0
HOSTS = ("algo-1", "algo-2")
MANY_JOBS = 50
SEQUENTIAL_SAMPLE = 5
RECORD_POLL_S = 0.01
POINT_POLL_S = 0.005
STATUS_POLL_S = 0.1
JOB_TIMEOUT_S = 300.0
MANY_TIMEOUT_S = 120.0  # plus this much per 3 jobs (one round of the three nodes)
CLUSTER_TRIES = 3  # a busy machine sometimes fails to start a node in time
MARKER = "TRAINMON_BENCHMARK_CLUSTER"
TERMINAL = ("Completed", "Failed", "Stopped")

ONE_LINE = "print('hello from the job', flush=True)\n"
FEW_LINES = "for step in range(3):\n    print(f'step={step} loss={1 / (step + 1)}', flush=True)\n"


def _missing() -> str | None:
    """Why the benchmark cannot run here, or None."""
    for module in ("ray", "psycopg", "pytest"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    try:
        from tests.conftest import POSTGRES_BIN
        from tests.raycluster import ray_cli
    except ImportError as exc:
        return f"the test helpers (tests/conftest.py, tests/raycluster.py) cannot be imported: {exc}"
    if not (POSTGRES_BIN / "initdb").exists():
        return f"PostgreSQL is not installed at {POSTGRES_BIN} (set TRAINMON_TEST_POSTGRES_BIN)"
    try:
        ray_cli()
    except RuntimeError as exc:
        return str(exc)
    return None


# -- the cluster, the store, and everything started ------------------------------------------------


def _marked(token: str) -> list[int]:
    """The processes that carry this run's marker in their environment: started by this benchmark."""
    needle = f"{MARKER}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ and state != b"Z":
            found.append(int(entry))
    return found


def _describe_pids(pids: list[int]) -> str:
    shown = []
    for pid in pids[:5]:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read().replace(b"\0", b" ").decode(errors="replace")
            shown.append(f"{pid} {argv[:100].strip()}")
        except OSError:
            shown.append(str(pid))
    return "; ".join(shown) + (f"; and {len(pids) - 5} more" if len(pids) > 5 else "")


def _kill_marked(token: str, leftovers: list[str]) -> None:
    """SIGKILL whatever still carries the marker (noting it first), until nothing does."""
    found = _marked(token)
    if found:
        leftovers.append(f"{len(found)} process(es): {_describe_pids(found)}")
    deadline = time.monotonic() + 15
    while found and time.monotonic() < deadline:
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
        found = _marked(token)


def _start_cluster(env: dict[str, str]) -> Any:
    from tests.raycluster import RayCluster

    for attempt in range(1, CLUSTER_TRIES + 1):
        cluster = RayCluster(WORKERS, head_cpus=0, env=env)
        started = time.perf_counter()
        try:
            cluster.start()  # closes itself when it fails
        except Exception as exc:
            last = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            print(f"  the Ray cluster did not start (try {attempt} of {CLUSTER_TRIES}): {last}")
            if attempt == CLUSTER_TRIES:
                raise
            continue
        print(f"  Ray cluster: head (0 CPUs) and {WORKERS} workers (1 CPU each) at {cluster.address}, "
              f"started in {time.perf_counter() - started:.1f} s")
        return cluster
    raise AssertionError("unreachable")


class Bench:
    """The submitting machine: its own data directory, the shared store, the cluster's address, and
    every CLI process it started (ended at the end, whatever happened)."""

    def __init__(self, work: Path, url: str, cluster: Any, token: str) -> None:
        from trainmon.store import open_store

        self.work = work
        self.home = work / "home"
        self.home.mkdir()
        self.address = cluster.address
        self.cluster_root = Path(cluster.root)
        self.env = cluster.client_env(child_env(TRAINMON_DATABASE_URL=url, TRAINMON_HOME=str(self.home),
                                                **{MARKER: token}))
        self.store = open_store(self.home, database_url=url)
        self.processes: list[subprocess.Popen[bytes]] = []
        self.names: list[str] = []
        self.scripts: dict[str, Path] = {}

    def script(self, name: str, body: str) -> Path:
        if name not in self.scripts:
            path = self.work / f"{name}.py"
            path.write_text(body, encoding="utf-8")
            self.scripts[name] = path
        return self.scripts[name]

    def command(self, name: str, launcher: str, *options: str) -> list[str]:
        self.names.append(name)
        ray = ["--launcher", "ray", "--ray-address", self.address] if launcher == "ray" else []
        return [PY, "-m", "trainmon", "run", "--name", name, *ray, *options]

    def start(self, argv: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.work / f"cli-{len(self.processes)}.log", "wb")
        try:
            process = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=log)
        finally:
            log.close()
        self.processes.append(process)
        return process

    def run(self, argv: list[str], timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        process = self.start(argv)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        return subprocess.CompletedProcess(argv, process.returncode, "", self.stderr(process))

    def stderr(self, process: subprocess.Popen[bytes]) -> str:
        path = self.work / f"cli-{self.processes.index(process)}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def row(self, name: str) -> Any:
        return self.store.get_job(name)

    def wait_ended(self, names: list[str], timeout: float) -> dict[str, Any]:
        """Every job's row once each has a final status (or the deadline passed: what there is)."""
        deadline = time.monotonic() + timeout
        wanted = set(names)
        rows: dict[str, Any] = {}
        while time.monotonic() < deadline:
            rows = {row.name: row for row in self.store.list_jobs() if row.name in wanted}
            if len(rows) == len(wanted) and all(row.status in TERMINAL for row in rows.values()):
                break
            time.sleep(STATUS_POLL_S if len(wanted) == 1 else 0.5)
        return rows

    def close(self) -> None:
        """Stop what still runs: the CLI processes (SIGINT, as Ctrl-C, asks their jobs to stop), then any
        job not ended (a stop request through the store); kill what is left after a bounded wait."""
        from trainmon.api import sagemaker

        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        try:
            running = [row.name for row in self.store.list_jobs() if row.status not in TERMINAL]
            for name in running:
                try:
                    sagemaker.stop_training_job(self.store, TrainingJobName=name)
                except Exception:
                    pass
            if running:
                print(f"  stopping {len(running)} job(s) still running")
                self.wait_ended(running, 60)
        except Exception as exc:
            print(f"  could not stop the jobs through the store: {exc}")
        deadline = time.monotonic() + 30
        for process in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.store.close()


@contextmanager
def _bench(work: Path, leftovers: list[str]) -> Iterator[Bench]:
    """PostgreSQL, the cluster and the submitting machine; afterwards, in this order: the jobs and CLI
    processes stopped, the cluster closed, whatever still carries the marker killed, PostgreSQL stopped."""
    from tests.conftest import postgres_cluster

    token = f"{os.getpid()}-{secrets.token_hex(6)}"
    with ExitStack() as stack:
        server = stack.enter_context(postgres_cluster())
        stack.callback(_kill_marked, token, leftovers)  # after the cluster is closed, before PostgreSQL stops
        server.admin("CREATE DATABASE bench_cluster TEMPLATE template0")
        cluster = _start_cluster({MARKER: token})
        stack.callback(cluster.close)
        bench = Bench(work, server.url("bench_cluster"), cluster, token)
        stack.callback(bench.close)
        yield bench


# -- a job's phases -----------------------------------------------------------------------------


def _transitions(row: Any) -> dict[str, float]:
    """When the job entered each secondary status (epoch seconds; the first time, for a repeated one)."""
    entered: dict[str, float] = {}
    for transition in row.doc.get("SecondaryStatusTransitions", []):
        entered.setdefault(transition["Status"], float(transition["StartTime"]))
    return entered


def _ended_at(row: Any) -> float:
    """When the job got its final status."""
    transitions = row.doc.get("SecondaryStatusTransitions", [])
    return float(transitions[-1]["StartTime"]) if transitions else row.last_modified_time


def _diagnose(bench: Bench, name: str) -> None:
    """What is known of a job that did not end as expected: its statuses, its supervisor, its submission's log."""
    row = bench.row(name)
    if row is None:
        print(f"    {name}: no such job in the store")
        return
    print(f"    {name}: {row.status}, {row.doc.get('SecondaryStatus')}: {str(row.doc.get('FailureReason', ''))[:400]}")
    for transition in row.doc.get("SecondaryStatusTransitions", []):
        print(f"      +{float(transition['StartTime']) - row.creation_time:7.2f} s  {transition['Status']}: "
              f"{transition.get('StatusMessage', '')}")
    supervisor = row.supervisor or {}
    alive = False
    if supervisor.get("pid"):
        try:
            os.kill(int(supervisor["pid"]), 0)
            alive = True
        except OSError:
            pass
    print(f"      supervisor {supervisor} ({'alive' if alive else 'not running'}), stop requested: "
          f"{row.stop_requested}")
    log = bench.home / "jobs" / name / "supervisor.log"
    if log.exists() and log.read_text(errors="replace").strip():
        print("      its submission's log: " + log.read_text(errors="replace")[-1500:].strip().replace("\n", "\n      "))
    for path in sorted(bench.cluster_root.glob("n*/ray*/session_latest/logs/worker-*")):  # the Ray workers' output
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if name in text and "Traceback" in text:
            tail = text[text.rfind("Traceback"):][:2500].strip()
            print(f"      {path.relative_to(bench.cluster_root)}: " + tail.replace("\n", "\n      "))


def _waited(row: Any) -> bool:
    return any(str(t.get("StatusMessage", "")).startswith("Waiting for the Ray cluster")
               for t in row.doc.get("SecondaryStatusTransitions", []))


# -- 1. submit -> first record -------------------------------------------------------------------


@dataclass
class Submission:
    launcher: str
    name: str
    returncode: int
    status: str
    first_s: float | None  # from starting the command to the first record readable here
    phases: dict[str, float] = field(default_factory=dict)  # phase -> seconds


PHASES = ("command started -> job created", "created -> supervisor claimed the job",
          "claimed -> placed (Downloading)", "placed -> host started (Training)",
          "Training -> first record readable", "first record -> Completed", "Completed -> command exited")


def submit_once(bench: Bench, name: str, launcher: str) -> Submission:
    from trainmon.api import trainmon

    argv = bench.command(name, launcher, "--", PY, str(bench.script("one_line", ONE_LINE)))
    started_at = time.time()
    process = bench.start(argv)
    deadline = time.monotonic() + JOB_TIMEOUT_S
    claimed_at = first_at = None
    while time.monotonic() < deadline:
        row = bench.row(name)
        if row is not None:
            if claimed_at is None and row.supervisor is not None and row.supervisor.get("tag"):
                claimed_at = time.time()  # the supervisor's identity carries the job's tag: it runs the job
            page = trainmon.get_job_log_records(bench.store, TrainingJobName=name, Limit=1)
            if page["Records"]:
                first_at = time.time()
                break
            if row.status in TERMINAL and process.poll() is not None:
                break  # ended without a record
        time.sleep(RECORD_POLL_S)
    try:
        process.wait(max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    exited_at = time.time()
    row = bench.row(name)
    status = row.status if row is not None else "(no job)"
    result = Submission(launcher, name, process.returncode, status,
                        first_at - started_at if first_at is not None else None)
    if row is None or first_at is None or status != "Completed":
        print(f"  {name}: {status}, exit {process.returncode}, first record {'seen' if first_at else 'not seen'}: "
              f"{bench.stderr(process)[-600:]}")
        _diagnose(bench, name)
        return result
    entered = _transitions(row)
    placed_at = entered.get("Downloading", first_at)
    # Polled, so seen up to a poll late; the supervisor claims the job before it places the hosts.
    claimed_at = min(claimed_at if claimed_at is not None else placed_at, placed_at)
    marks = [started_at, row.creation_time, claimed_at, placed_at, entered.get("Training", placed_at), first_at,
             entered.get("Completed", first_at), exited_at]
    result.phases = {phase: marks[i + 1] - marks[i] for i, phase in enumerate(PHASES)}
    return result


def submit_to_first_record(report: Report, bench: Bench, runs: int) -> None:
    heading(f"Submit -> first record stored: 1 host printing one line, {runs} runs per launcher, alternating")
    warm = {launcher: submit_once(bench, f"warmup-{launcher}", launcher) for launcher in ("ray", "local")}
    print("  warm-up (not counted): " + ", ".join(
        f"{launcher} {w.first_s:.2f} s" if w.first_s is not None else f"{launcher} no record"
        for launcher, w in warm.items()))
    results: dict[str, list[Submission]] = {"ray": [], "local": []}
    for i in range(runs):
        for launcher in ("ray", "local") if i % 2 == 0 else ("local", "ray"):
            results[launcher].append(submit_once(bench, f"submit-{launcher}-{i}", launcher))
    for launcher, label in (("ray", "Ray launcher"), ("local", "local launcher")):
        done = results[launcher]
        bad = [s for s in done if s.returncode != 0 or s.status != "Completed" or s.first_s is None]
        report.check(not bad, f"{label}: every job Completed with its record stored and `trainmon run` exited 0 "
                     f"({len(done) - len(bad)} of {len(done)})")
    ray = [s.first_s for s in results["ray"] if s.first_s is not None]
    local = [s.first_s for s in results["local"] if s.first_s is not None]
    if not ray or not local:
        return
    rows = [[launcher, *(f"{s.first_s:.2f}" if s.first_s is not None else "-" for s in results[launcher])]
            for launcher in ("ray", "local")]
    table(["launcher", *(f"run {i + 1} s" for i in range(runs))], rows)
    print("  where the time goes (median of the runs, seconds; from the job's SecondaryStatusTransitions and the "
          "moment its supervisor claimed it):")
    phased = {launcher: [s for s in results[launcher] if s.phases] for launcher in ("ray", "local")}
    table(["phase", "ray", "local"],
          [[phase, *(f"{median([s.phases[phase] for s in phased[launcher]]):.3f}" if phased[launcher] else "-"
                     for launcher in ("ray", "local"))] for phase in PHASES])
    report.ratio("submit -> first record, best: Ray / local launcher", min(ray) / min(local),
                 detail=f"({min(ray):.2f} s / {min(local):.2f} s; median {median(ray):.2f} s / "
                        f"{median(local):.2f} s = {ratio_text(median(ray) / median(local))})")


# -- 2. print -> point readable ----------------------------------------------------------------------


def through_store(bench: Bench, name: str, launcher: str, count: int) -> tuple[list[float], list[float], int, str]:
    """Seconds from print (on the host's node) to the point readable here, for each point; the part of it
    until trainmon read the line (the point's timestamp); the command's exit status; the job's status.

    ``store.points`` on PostgreSQL can raise KeyError when a host's series is created between its two
    statements (each sees its own snapshot under READ COMMITTED): counted, and read again at the next poll."""
    argv = bench.command(name, launcher, "--instance-count", str(len(HOSTS)), "--metric", "sent=t=([0-9.]+)", "--",
                         PY, str(JOBS), "stamped", "--report", os.devnull, "--count", str(count),
                         "--interval-ms", str(INTERVAL_MS), "--delay-s", "1.0")
    process = bench.start(argv)
    deadline = time.monotonic() + JOB_TIMEOUT_S
    seen: dict[tuple[int, int], float] = {}
    read_at: dict[tuple[int, int], float] = {}
    races = 0
    try:
        job = None
        while job is None and time.monotonic() < deadline and process.poll() is None:
            job = bench.row(name)
            if job is None:
                time.sleep(POINT_POLL_S)
        after = dict.fromkeys(HOSTS, 0)  # per host: the hosts' writers commit independently of each other
        finished = job is None
        while not finished and len(seen) < count * len(HOSTS) and time.monotonic() < deadline:
            finished = process.poll() is not None  # one more pass after the command ended
            try:
                points = bench.store.points(job.id, names=["sent"], start_ms=min(after.values()))
            except KeyError:
                races += 1
                points = []
            now = time.time()
            for point in points:
                key = (point.stream_id, point.seq)
                if key not in seen:
                    seen[key] = now - point.value
                    read_at[key] = (point.timestamp_ms - int(point.value * 1000)) / 1000
                after[point.host] = max(after.get(point.host, 0), point.timestamp_ms)
            time.sleep(POINT_POLL_S)
    finally:
        try:
            process.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if races:
        print(f"  note: {name}: store.points raised KeyError {races} time(s) (a series created between the "
              "statements of one read: a bug of the PostgreSQL store's reads); read again at the next poll")
    row = bench.row(name)
    status = row.status if row is not None else "(no job)"
    if status != "Completed":
        print(f"  {name}: {status}, exit {process.returncode}: {bench.stderr(process)[-600:]}")
        _diagnose(bench, name)
    return list(seen.values()), list(read_at.values()), process.returncode, status


def point_latency(report: Report, bench: Bench, count: int) -> None:
    heading(f"Print on a worker node -> point readable here: {len(HOSTS)} hosts x {count:,} lines "
            f"{INTERVAL_MS:g} ms apart, polled every {POINT_POLL_S * 1000:g} ms")
    runs = {}
    for launcher in ("local", "ray"):
        stored, read, code, status = through_store(bench, f"lines-{launcher}", launcher, count)
        runs[launcher] = (stored, read)
        report.check(code == 0 and status == "Completed", f"{launcher} launcher: the job Completed and "
                     f"`trainmon run` exited 0 ({status}, {code})")
        report.check(len(stored) == count * len(HOSTS), f"{launcher} launcher: every point seen "
                     f"({len(stored):,} of {count * len(HOSTS):,})")
    row = bench.row("lines-ray")
    if row is not None:
        nodes = {p["Host"]: p["NodeId"] for p in row.doc.get("HostPlacements", [])}
        report.check(len(set(nodes.values())) == len(HOSTS), f"Ray launcher: each host on a node of its own "
                     f"({', '.join(f'{h} {n[:8]}' for h, n in sorted(nodes.items()))})")
    if not runs["ray"][0] or not runs["local"][0]:
        return
    rows = []
    for label, values in (("local: print -> read by trainmon (point timestamp, whole ms)", runs["local"][1]),
                          ("local: print -> readable here", runs["local"][0]),
                          ("ray: print -> read by the host agent (point timestamp, whole ms)", runs["ray"][1]),
                          ("ray: print -> readable here", runs["ray"][0])):
        rows.append([label, f"{median(values) * 1e3:.1f}", f"{percentile(values, 0.99) * 1e3:.1f}",
                     f"{max(values) * 1e3:.1f}"])
    table(["path", "median ms", "p99 ms", "max ms"], rows)
    ray, local = runs["ray"][0], runs["local"][0]
    report.ratio("print -> readable, median: Ray / local launcher", median(ray) / median(local),
                 detail=f"({median(ray) * 1e3:.1f} ms / {median(local) * 1e3:.1f} ms)")
    report.ratio("print -> readable, p99: Ray / local launcher", percentile(ray, 0.99) / percentile(local, 0.99),
                 detail=f"({percentile(ray, 0.99) * 1e3:.1f} ms / {percentile(local, 0.99) * 1e3:.1f} ms)")


# -- 3. many small jobs ------------------------------------------------------------------------------


def _submit_detached(bench: Bench, name: str) -> str | None:
    done = bench.run(bench.command(name, "ray", "--detach", "--", PY, str(bench.script("few_lines", FEW_LINES))))
    return None if done.returncode == 0 else f"{name}: exit {done.returncode}: {done.stderr[-400:]}"


def _most_at_once(rows: list[Any]) -> int:
    """The most jobs that held a node at the same moment (from placed to final status)."""
    events = []
    for row in rows:
        entered = _transitions(row)
        if "Downloading" in entered:
            events += [(entered["Downloading"], 1), (_ended_at(row), -1)]
    most = current = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):  # an end before a start at the same instant
        current += step
        most = max(most, current)
    return most


def _handoffs(rows: list[Any]) -> list[float]:
    """On each node, from one job's final status to the next job's placement there (seconds)."""
    by_node: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        entered = _transitions(row)
        for placement in row.doc.get("HostPlacements", []):
            if "Downloading" in entered:
                by_node.setdefault(placement["NodeId"], []).append((entered["Downloading"], _ended_at(row)))
    gaps = []
    for spans in by_node.values():
        spans.sort()
        gaps += [later[0] - earlier[1] for earlier, later in zip(spans, spans[1:], strict=False)]
    return gaps


def _phase_medians(rows: list[Any]) -> list[str]:
    created, placed, trained = [], [], []
    for row in rows:
        entered = _transitions(row)
        if {"Downloading", "Training"} <= entered.keys():
            created.append(entered["Downloading"] - row.creation_time)
            placed.append(entered["Training"] - entered["Downloading"])
            trained.append(_ended_at(row) - entered["Training"])
    return [f"{median(values):.2f}" if values else "-" for values in (created, placed, trained)]


def many_jobs(report: Report, bench: Bench, count: int, sample: int) -> None:
    from trainmon.api import trainmon

    heading(f"{count} small jobs submitted at once to {WORKERS} worker nodes (1 CPU each), against one after "
            f"another (measured on {sample} and scaled to {count})")
    sequential: list[float] = []
    sequential_rows = []
    for i in range(sample):
        name = f"one-by-one-{i}"
        started_at = time.time()
        problem = _submit_detached(bench, name)
        row = bench.wait_ended([name], JOB_TIMEOUT_S).get(name) if problem is None else None
        if row is None or row.status != "Completed":
            report.check(False, f"one after another: {name} Completed "
                         f"({problem or (row.status if row is not None else 'never ended')})")
            _diagnose(bench, name)
            return
        sequential.append(_ended_at(row) - started_at)
        sequential_rows.append(row)
    names = [f"at-once-{i:03d}" for i in range(count)]
    started_at = time.time()
    problems = [p for p in (_submit_detached(bench, name) for name in names) if p is not None]
    submitted_at = time.time()
    report.check(not problems, f"every `trainmon run --detach` exited 0 ({count - len(problems)} of {count})"
                 + (f": {problems[0]}" if problems else ""))
    rows = bench.wait_ended(names, MANY_TIMEOUT_S + JOB_TIMEOUT_S / 10 * count)
    statuses = Counter(row.status for row in rows.values())
    completed = [row for row in rows.values() if row.status == "Completed"]
    if not report.check(len(completed) == count, f"every job Completed ({dict(statuses)}, "
                        f"{count - len(rows)} never created)"):
        for name in [n for n in names if n not in rows or rows[n].status != "Completed"][:3]:
            _diagnose(bench, name)
    if not completed:
        return
    lines_ok = sum(1 for row in completed if [r["Message"] for r in trainmon.get_job_log_records(
        bench.store, TrainingJobName=row.name, Host="algo-1")["Records"]] == [
        f"step={step} loss={1 / (step + 1)}" for step in range(3)])
    report.check(lines_ok == len(completed), f"each job's three lines stored ({lines_ok} of {len(completed)})")
    most = _most_at_once(completed)
    report.check(most <= WORKERS, f"at most {WORKERS} jobs held a node at once ({most})")
    nodes = Counter(p["NodeId"][:8] for row in completed for p in row.doc.get("HostPlacements", []))
    waited = sum(1 for row in completed if _waited(row))
    last_at = max(_ended_at(row) for row in completed)
    wall = last_at - started_at
    per_job = sum(sequential) / len(sequential)
    scaled = per_job * count
    busy = sum(_ended_at(row) - _transitions(row).get("Downloading", _ended_at(row)) for row in completed)
    gaps = _handoffs(completed)
    print(f"  one after another: {sample} jobs, {', '.join(f'{s:.2f}' for s in sequential)} s each (mean "
          f"{per_job:.2f} s): {count} would take {scaled:.1f} s (scaled from the {sample})")
    print(f"  at once: submitting {count} took {submitted_at - started_at:.1f} s "
          f"({(submitted_at - started_at) / count:.2f} s a `trainmon run --detach`); the last Completed "
          f"{wall:.1f} s after the first submit, {last_at - submitted_at:.1f} s after the last; {waited} waited "
          f"for room; hosts per node {dict(nodes)}")
    print(f"  {busy / wall:.2f} nodes busy on average of {WORKERS} (placed -> final status), at most {most} at once"
          + (f"; a node's handoff (a job's final status -> the next job placed there): median {median(gaps):.2f} s, "
             f"max {max(gaps):.2f} s" if gaps else ""))
    table(["median seconds", "created -> placed", "placed -> Training", "Training -> final status"],
          [["one after another", *_phase_medians(sequential_rows)], ["at once", *_phase_medians(completed)]])
    report.ratio(f"{count} jobs: one after another (scaled from {sample}) / at once", scaled / wall,
                 detail=f"({scaled:.1f} s / {wall:.1f} s; {count / wall * 60:.0f} jobs a minute at once; "
                        f"{WORKERS} nodes bound it at {WORKERS}x)")


# -- the benchmark --------------------------------------------------------------------------------


def run(scale: float = 1.0) -> Report:
    report = Report("cluster")
    runs = max(2, round(SUBMIT_RUNS * scale))
    lines = max(50, int(LINES * scale))
    count = max(WORKERS * 2, int(MANY_JOBS * scale))
    sample = min(count, max(2, round(SEQUENTIAL_SAMPLE * scale)))
    heading(f"Ray launcher: {WORKERS} worker nodes on this machine, a shared PostgreSQL store")
    missing = _missing()
    if missing is not None:
        print(f"  skipped: {missing}")
        return report
    leftovers: list[str] = []
    started = time.perf_counter()
    try:
        with scratch_dir("cluster-") as work, _bench(work, leftovers) as bench:
            submit_to_first_record(report, bench, runs)
            point_latency(report, bench, lines)
            many_jobs(report, bench, count, sample)
    except Exception as exc:
        traceback.print_exc()
        report.check(False, f"the benchmark ran to its end ({type(exc).__name__}: {exc})")
    report.check(not leftovers, "nothing left running once the cluster was closed"
                 + (f" ({leftovers[0]}, killed)" if leftovers else ""))
    print(f"  ({time.perf_counter() - started:.0f} s in all, the cluster's start and end included)")
    return report


if __name__ == "__main__":
    sys.exit(1 if run(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0).failures else 0)
