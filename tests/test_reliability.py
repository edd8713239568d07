"""What a careful operator's probes found, each as a test: trainmon never harms what is not the
job's, never lets monitoring end the job, never stalls, never loses data silently.

Real processes throughout: `trainmon run` and detached supervisors, training scripts that print,
escape their process group, ignore signals; a PostgreSQL server the test stops and starts; a
SQLite file another process locks; a real small filesystem that fills up.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

import pytest

from trainmon.runtime.processes import tags
from trainmon.store import open_store

from .conftest import PY, echo_watch, postgres_cluster, run_cli, sqlite_locked, wait_for

OUTAGE_S = 60.0


def describe(name: str, env: dict[str, str] | None = None) -> dict:
    return json.loads(run_cli("describe", name, "--json", check=True, env=env).stdout)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test starts; killed if the test leaves them running."""
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.communicate()


def start_run(started: list, name: str, train: Path, *extra: str, env: dict[str, str] | None = None,
              **popen: object) -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-m", "trainmon", "run", "--name", name, *extra, "--", PY, str(train)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, **(env or {})}, **popen)  # type: ignore[call-overload]
    started.append(process)
    return process


# -- 1. the orphan reaper signals only processes it can prove are the job's ----------------------


@pytest.mark.parametrize("ends", ["reaped", "zombie"])
def test_a_live_supervisor_is_watched_once_proved_and_its_job_reaped_by_the_first_read_after_it_ends(
        home: Path, monkeypatch: pytest.MonkeyPatch, ends: str) -> None:
    """Readers reap at every read (a server's every request): a job's live supervisor is proved from
    /proc once, then watched (a pidfd), so that the reads after cost no /proc reads; once it has
    exited (reaped by its parent, or a zombie still), the first read reaps its job."""
    from trainmon.api.sagemaker import register_job
    from trainmon.runtime.job import orphans

    proofs: list[int] = []
    proved = orphans.alive
    monkeypatch.setattr(orphans, "alive", lambda supervisor: proofs.append(supervisor["pid"]) or proved(supervisor))
    stand_in = subprocess.Popen([PY, "-c", "import time; time.sleep(600)"])
    store = open_store(home)
    try:
        register_job(store, {"TrainingJobName": "watched", "ProfilerConfig": {"DisableProfiler": True},
                             "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["true"]}},
                     supervisor=orphans.identity(stand_in.pid))
        for _ in range(5):
            assert orphans.reap_orphans(store) == []
        assert proofs == [stand_in.pid] * 2  # proved before its pidfd was opened, and again after
        assert store.get_job("watched").status == "InProgress"
        stand_in.kill()
        if ends == "zombie":  # exited, not yet waited for by its parent
            os.waitid(os.P_PID, stand_in.pid, os.WEXITED | os.WNOWAIT)
        else:
            stand_in.wait()
        assert orphans.reap_orphans(store) == ["watched"]
        doc = store.get_job("watched").doc
        assert doc["TrainingJobStatus"] == "Failed" and "supervising process" in doc["FailureReason"]
        assert orphans.reap_orphans(store) == []
    finally:
        stand_in.kill()
        stand_in.wait()
        store.close()


def test_a_read_of_one_job_reaps_that_job_and_reads_no_other(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Describing a job whose supervisor has exited reaps it, at once; the other jobs running are not
    read for it (a server's every request about a job would otherwise cost what reading them all
    does), and an orphan among them is reaped by the next read of every job (a list)."""
    from trainmon.api import sagemaker
    from trainmon.runtime.job import orphans

    stand_ins = {name: subprocess.Popen([PY, "-c", "import time; time.sleep(600)"]) for name in ("asked", "other")}
    store = open_store(home)
    try:
        for name, stand_in in stand_ins.items():
            sagemaker.register_job(store, {
                "TrainingJobName": name, "ProfilerConfig": {"DisableProfiler": True},
                "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["true"]}},
                supervisor=orphans.identity(stand_in.pid))
        for stand_in in stand_ins.values():
            stand_in.kill()
            stand_in.wait()
        listed: list[object] = []
        every = store.supervisors
        monkeypatch.setattr(store, "supervisors", lambda *a: listed.append(a) or every(*a))
        described = sagemaker.describe_training_job(store, TrainingJobName="asked")
        assert described["TrainingJobStatus"] == "Failed" and "supervising process" in described["FailureReason"]
        assert listed == []  # no other job was read to answer for this one
        assert store.get_job("other").status == "InProgress"
        assert sagemaker.describe_training_job(store, TrainingJobName="asked")["TrainingJobStatus"] == "Failed"
        summaries = sagemaker.list_training_jobs(store)["TrainingJobSummaries"]
        assert {s["TrainingJobName"]: s["TrainingJobStatus"] for s in summaries} == {"asked": "Failed",
                                                                                     "other": "Failed"}
    finally:
        for stand_in in stand_ins.values():
            stand_in.kill()
            stand_in.wait()
        store.close()


def test_the_reaper_never_kills_a_process_it_cannot_prove_is_the_jobs(home: Path, script, tmp_path: Path) -> None:
    """A job's supervisor is killed -9; a process that is not the job's has the id the job's process
    group had (pid reuse), in a session of its own. Reading jobs kills what is left of the job, its
    escaped children included, and nothing else."""
    pids = tmp_path / "pids"
    train = script(
        f"""
        import subprocess, time
        escaped = subprocess.Popen(["setsid", "sleep", "600"])
        open({str(pids)!r}, "w").write(str(escaped.pid))
        print("running", flush=True)
        time.sleep(600)
        """
    )
    run_cli("run", "--name", "reaped", "--detach", "--", PY, str(train), check=True)
    wait_for(pids.exists, "the job's escaped child")
    store = open_store(home)
    supervisor = store.get_job("reaped").supervisor
    unrelated = subprocess.Popen(["setsid", "sleep", "600"])  # not the job's: it must survive
    try:
        os.kill(supervisor["pid"], signal.SIGKILL)
        wait_for(lambda: not alive(supervisor["pid"]), "the supervisor's death")

        def stored_group(row) -> None:  # what a reused id looks like to a reaper that trusts ids
            row.supervisor = {**row.supervisor, "pgids": [unrelated.pid]}

        store.update_job("reaped", stored_group)
        listing = run_cli("list", check=True)
        assert "reaped" in listing.stdout
        wait_for(lambda: not alive(int(pids.read_text())), "the job's escaped child to be ended")
        assert alive(unrelated.pid)
        doc = describe("reaped")
        assert doc["TrainingJobStatus"] == "Failed" and "supervising process" in doc["FailureReason"]
    finally:
        unrelated.kill()
        unrelated.wait()
        store.close()


# -- 2. no store outage of any length ends a job ------------------------------------------------


COUNTING_JOB = """
import os, sys, time
stop, count = sys.argv[1], sys.argv[2]
lines = 0
while not os.path.exists(stop):
    lines += 1
    print(f"step {lines} loss={1 / lines:.6f}", flush=True)
    time.sleep(0.02)
open(count, "w").write(str(lines))
"""


class Outcome(NamedTuple):
    printed: int  # lines the job printed
    status: str
    records: int  # records stored
    points: int  # metric points stored
    messages: str  # what trainmon printed on stderr


def _outage(started: list, tmp_path: Path, name: str, env: dict[str, str], stop_store: Callable[[], None],
            restart_store: Callable[[], None]) -> Outcome:
    """A job prints through an outage of the store; returns what it printed and what was stored."""
    job = tmp_path / f"{name}.py"
    job.write_text(COUNTING_JOB)
    stop, count = tmp_path / f"{name}.stop", tmp_path / f"{name}.count"
    process = subprocess.Popen(
        [sys.executable, "-m", "trainmon", "run", "--name", name, "--metric", r"loss=loss=(\S+)", "--", PY, str(job),
         str(stop), str(count)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **env})
    started.append(process)
    reader = open_store(Path(env["TRAINMON_HOME"]), database_url=env.get("TRAINMON_DATABASE_URL", ""))
    try:
        wait_for(lambda: sum(s.records for s in reader.streams()) >= 20, "the first records")
        stop_store()
        outage_ends = time.monotonic() + OUTAGE_S
        while time.monotonic() < outage_ends:  # the outage is the test's subject: it lasts this long
            assert process.poll() is None, f"trainmon ended during the outage: {process.stderr.read()}"
            time.sleep(0.5)
        restart_store()
        stop.touch()
        _, errors = process.communicate(timeout=300)
        assert process.returncode == 0, errors
        job_row = reader.get_job(name)
        (stream,) = reader.streams(job_row.id)
        return Outcome(int(count.read_text()), job_row.status, stream.records, len(reader.points(job_row.id)), errors)
    finally:
        reader.close()


def _assert_nothing_lost(outcome: Outcome) -> None:
    assert outcome.status == "Completed"
    assert outcome.records == outcome.printed
    assert outcome.points == outcome.printed
    assert "the store accepts writes again; nothing was lost" in outcome.messages


@pytest.mark.timeout(600)
def test_a_postgres_outage_of_a_minute_loses_nothing_and_ends_nothing(started, tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    with postgres_cluster() as server:
        server.admin("CREATE DATABASE outage TEMPLATE template0")
        home = tmp_path / "home"
        env = {"TRAINMON_HOME": str(home), "TRAINMON_DATABASE_URL": server.url("outage")}
        outcome = _outage(started, tmp_path, "pg-outage", env, server.stop, server.start)
    assert outcome.printed > 20
    _assert_nothing_lost(outcome)


@pytest.mark.timeout(600)
def test_sqlite_locked_for_a_minute_loses_nothing_and_ends_nothing(started, tmp_path: Path) -> None:
    home = tmp_path / "home"
    open_store(home).close()
    held = ExitStack()  # every writer waits while it holds the lock
    outcome = _outage(started, tmp_path, "sqlite-lock", {"TRAINMON_HOME": str(home)},
                      lambda: held.enter_context(sqlite_locked(home)), held.close)
    assert outcome.printed > 20
    _assert_nothing_lost(outcome)


@pytest.mark.timeout(600)
def test_output_left_waiting_when_the_job_ends_is_announced_then_stored(started, tmp_path: Path) -> None:
    """The store is held locked while the job prints 64 MB and exits: the output waits in the spool,
    ``trainmon run`` says how much of it it is still storing, and once the store takes writes again
    every record is stored."""

    home = tmp_path / "home"
    open_store(home).close()
    go = tmp_path / "go"
    os.mkfifo(go)
    job = tmp_path / "job.py"
    job.write_text(
        "import sys\n"
        "print('ready', flush=True)\n"
        f"open({str(go)!r}).read()  # until the test has locked the store\n"
        "block = (b'x' * 99 + b'\\n') * 10_000  # 1 MB\n"
        "for _ in range(64):\n"
        "    sys.stdout.buffer.write(block)\n"
    )
    process = start_run(started, "backlog", job, env={"TRAINMON_HOME": str(home)})
    ready, _ = echo_watch(process, "ready\n")  # (the echo of 64 MB, read as it comes)
    said = stderr_lines(process)
    assert ready.wait(120), "the job's first line was not echoed"
    with sqlite_locked(home):  # every writer waits
        with open(go, "w"):
            pass  # the job goes on
        line = _said_until(said, "still waiting in the spool").splitlines()[-1]
        waiting_mb = int(line.split("storing the ")[1].split(" MB")[0])
        assert waiting_mb == 64  # none of it stored: neither what waits unread nor what waits in a batch
    assert process.wait(timeout=300) == 0
    reader = open_store(home)
    try:
        row = reader.get_job("backlog")
        assert row is not None and row.status == "Completed"
        (stream,) = reader.streams(row.id)
        assert stream.records == 1 + 64 * 10_000
    finally:
        reader.close()


ENDING_JOB = """
import os, sys, time
go, finished = sys.argv[1], sys.argv[2]
for step in range(1, 51):
    print(f"step {step} loss={1 / step:.6f}", flush=True)
while not os.path.exists(go):  # until the test has stopped the store
    time.sleep(0.02)
print("last line loss=0.01", flush=True)
open(finished, "w").write("yes")
"""


def _store_gone_at_the_end(started: list, tmp_path: Path, server, *extra: str) -> tuple[subprocess.Popen[str], Path,
                                                                                         queue.Queue[str]]:
    """A job that prints 50 metric lines, waits for the test to stop PostgreSQL for good, prints
    one more line and exits 0; its `trainmon run`, and a queue of what that says on stderr."""

    job, go, finished = tmp_path / "ending.py", tmp_path / "go", tmp_path / "finished"
    job.write_text(ENDING_JOB)
    home = tmp_path / "home"
    env = {"TRAINMON_HOME": str(home), "TRAINMON_DATABASE_URL": server.url("gone")}
    process = subprocess.Popen(
        [sys.executable, "-m", "trainmon", "run", "--name", "gone", "--metric", r"loss=loss=(\S+)", *extra, "--", PY,
         str(job), str(go), str(finished)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **env})
    started.append(process)
    said = stderr_lines(process)
    reader = open_store(home, database_url=env["TRAINMON_DATABASE_URL"])
    try:
        wait_for(lambda: sum(s.records for s in reader.streams()) >= 50, "the job's first 50 records")
    finally:
        reader.close()
    server.stop()
    go.touch()
    return process, home, said


def stderr_lines(process: subprocess.Popen[str]) -> queue.Queue[str]:
    """The lines ``process`` writes on stderr, as they come (read by a thread, to its end)."""
    import threading

    lines = queue.Queue[str]()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _said_until(said: queue.Queue[str], words: str) -> str:
    """What trainmon said on stderr up to the line holding ``words`` (AssertionError after 120 s)."""
    lines: list[str] = []
    deadline = time.monotonic() + 120
    while not lines or words not in lines[-1]:
        lines.append(said.get(timeout=max(0.0, deadline - time.monotonic())))
    return "".join(lines)


def _reaped_as_it_ended(home: Path, url: str, exited: float, store_back: float) -> None:
    """The next command that reads jobs stores the spool's 51 records and points and records the
    job's real end: Completed, at the time its process exited (after ``exited``, before the store
    was back at ``store_back``)."""
    env = {"TRAINMON_HOME": str(home), "TRAINMON_DATABASE_URL": url}
    spool = home / "jobs" / "gone" / ".spool"
    assert (spool / "ending.json").is_file() and (spool / "algo-1-stdout").is_file()
    doc = describe("gone", env)
    assert doc["TrainingJobStatus"] == "Completed", doc.get("FailureReason")
    assert doc["SecondaryStatus"] == "Completed" and "FailureReason" not in doc
    assert doc["FinalMetricDataList"][0]["Value"] == pytest.approx(0.01)
    assert not spool.exists()
    store = open_store(home, database_url=url)
    try:
        job = store.get_job("gone")
        (stream,) = store.streams(job.id)
        assert stream.records == 51
        assert len(store.points(job.id)) == 51
        assert [e.message for e in store.events(stream.id, after_seq=49)] == ["last line loss=0.01"]
        ended = job.doc["TrainingEndTime"]
    finally:
        store.close()
    assert exited <= ended < store_back  # when the job's process ended, not when it was reaped


def test_patience_counts_refusals_from_the_first_and_starts_again_when_the_store_takes_a_write() -> None:
    from trainmon.errors import StoreError, StoreFull
    from trainmon.runtime.retry import Patience

    now = [0.0]
    told: list[str] = []
    interrupted = [False]
    patience = Patience(60, lambda: interrupted[0], clock=lambda: now[0], on_refusal=lambda e: told.append(e.message))
    gone = StoreError("cannot reach the store")
    assert not patience.lost(None)
    now[0] = 100.0
    assert not patience.lost(gone) and told == ["cannot reach the store"]  # the bounded wait begins here
    now[0] = 159.0
    assert not patience.lost(gone)
    assert not patience.lost(None)  # a write taken: the next refusal starts the count again
    now[0] = 200.0
    assert not patience.lost(gone) and told == ["cannot reach the store"]  # said once
    now[0] = 259.0
    assert not patience.lost(StoreFull("the disk is full"))  # a full disk has a bound of its own
    now[0] = 400.0
    assert not patience.lost(gone)
    now[0] = 460.0
    assert patience.lost(gone) and patience.lost_by == "store" and patience.lost(None)  # and it stays lost
    other = Patience(60, lambda: interrupted[0], clock=lambda: now[0])
    assert not other.lost(None)
    interrupted[0] = True
    assert other.lost(None) and other.lost_by == "interrupted"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_store_gone_for_good_after_the_jobs_last_line_does_not_hold_run(started, tmp_path: Path, sig) -> None:
    """PostgreSQL stopped for good after the job's last line: `trainmon run` says it waits for the
    store; a SIGTERM (or Ctrl-C) ends it at once, leaving the output and the job's end in the spool;
    once the store is back, the next command stores every record and the job ends Completed."""
    pytest.importorskip("psycopg")
    with postgres_cluster() as server:
        server.admin("CREATE DATABASE gone TEMPLATE template0")
        process, home, said = _store_gone_at_the_end(started, tmp_path, server)
        _said_until(said, "the job has ended, and the store refuses writes")
        process.send_signal(sig)
        assert process.wait(timeout=60) == 1
        rest = _said_until(said, "nothing is lost")
        assert "job gone ended Completed, but trainmon was asked to stop waiting for the store" in rest
        assert "trainmon describe gone" in rest and "Traceback" not in rest
        store_back = time.time()
        server.start()
        _reaped_as_it_ended(home, server.url("gone"), (tmp_path / "finished").stat().st_mtime, store_back)


@pytest.mark.timeout(600)
def test_a_store_gone_for_good_is_waited_for_a_bounded_time(started, tmp_path: Path) -> None:
    """With no signal, `trainmon run` ends by itself once the store has refused every write for
    --store-wait-seconds (60 s by default), saying why and what to run later."""
    pytest.importorskip("psycopg")
    with postgres_cluster() as server:
        server.admin("CREATE DATABASE gone TEMPLATE template0")
        process, home, said = _store_gone_at_the_end(started, tmp_path, server, "--store-wait-seconds", "2")
        assert process.wait(timeout=180) == 1
        rest = _said_until(said, "nothing is lost")
        assert "job gone ended Completed, but the store refused every write for 2 s (cannot reach the store" in rest
        store_back = time.time()
        server.start()
        _reaped_as_it_ended(home, server.url("gone"), (tmp_path / "finished").stat().st_mtime, store_back)


def test_readers_never_wait_for_a_writer(home: Path, script) -> None:
    """Another process holds SQLite's write lock for as long as it likes: describe, logs, list and
    metrics answer all the same, while it still holds it (WAL readers need no lock)."""
    job = script("""
        print("loss=0.5", flush=True)
    """)
    run_cli("run", "--name", "read-while-locked", "--metric", "loss=loss=(\\S+)", "--", PY, str(job), check=True,
            env={"TRAINMON_HOME": str(home)})
    env = {"TRAINMON_HOME": str(home)}
    with sqlite_locked(home):
        for command in (["describe", "read-while-locked"], ["logs", "read-while-locked"], ["list"],
                        ["metrics", "read-while-locked"]):
            answered = run_cli(*command, env=env, timeout=60)  # (on main: describe waited 28 s of 30)
            assert answered.returncode == 0, (command, answered.stderr)
        assert "loss=0.5" in run_cli("logs", "read-while-locked", env=env, timeout=60).stdout
        blocked = sqlite3.connect(home / "trainmon.db", timeout=0)
        try:  # the lock was held all along
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                blocked.execute("BEGIN IMMEDIATE")
        finally:
            blocked.close()


# -- 3. a host's main process ends its capture; stop always reaches Stopped ----------------------


def test_an_escaped_child_holding_stdout_does_not_hold_the_job(home: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "escaped"
    result = run_cli("run", "--name", "escaper", "--", "sh", "-c",
                     f"setsid sleep 600 & echo $! > {pid_file}; echo done", timeout=120)
    assert result.returncode == 0, result.stderr
    assert not alive(int(pid_file.read_text()))  # ended when the job ended, not waited for
    assert describe("escaper")["TrainingJobStatus"] == "Completed"
    assert run_cli("logs", "escaper", check=True).stdout == "done\n"


def test_a_double_forked_daemon_is_ended_with_the_job(home: Path, script, tmp_path: Path) -> None:
    """A daemon the classic way (fork, setsid, fork again, the middle one exits) leaves the job's
    process tree and its session; it is still the job's, and ends with it."""
    pid_file = tmp_path / "daemon"
    train = script(
        f"""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                open({str(pid_file)!r}, "w").write(str(os.getpid()))
                time.sleep(600)
            os._exit(0)
        while not os.path.exists({str(pid_file)!r}):
            time.sleep(0.01)
        print("daemon started", flush=True)
        """
    )
    result = run_cli("run", "--name", "daemonized", "--", PY, str(train), timeout=120)
    assert result.returncode == 0, result.stderr
    assert not alive(int(pid_file.read_text()))
    assert describe("daemonized")["TrainingJobStatus"] == "Completed"


def test_stop_ends_a_job_whose_child_escaped_its_session(home: Path, script, tmp_path: Path) -> None:
    pid_file = tmp_path / "escaped"
    train = script(
        f"""
        import subprocess, time
        child = subprocess.Popen(["setsid", "sh", "-c", "trap '' TERM; sleep 600"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        print("running", flush=True)
        time.sleep(600)
        """
    )
    run_cli("run", "--name", "stop-escaped", "--detach", "--stop-grace-seconds", "2", "--", PY, str(train),
            check=True)
    wait_for(pid_file.exists, "the escaped child")
    stopped = run_cli("stop", "stop-escaped", "--wait", timeout=120)
    assert stopped.returncode == 0 and stopped.stdout.strip() == "job stop-escaped: Stopped"
    wait_for(lambda: not alive(int(pid_file.read_text())), "the escaped child's end", timeout_s=30)
    assert describe("stop-escaped")["SecondaryStatus"] == "Stopped"


# -- 5. every field of a request is checked before anything runs ---------------------------------


@pytest.mark.parametrize(("arguments", "words"), [
    (["--hyperparameters", '{"a=b": "c"}'], "SM_HP_<NAME>: no '=' or NUL"),
    (["--hyperparameters", '{"lr": "0.1\\u0000"}'], "NUL character"),
    (["--channel", f"..={os.getcwd()}"], "ChannelName '..' is a path component"),
])
def test_arguments_a_process_cannot_take_are_refused_before_the_job_runs(home: Path, tmp_path: Path,
                                                                         arguments: list[str], words: str) -> None:
    marker = tmp_path / "ran"
    result = subprocess.run([sys.executable, "-m", "trainmon", "run", "--name", "refused", *arguments, "--", "touch",
                             str(marker)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert words in result.stderr and "Traceback" not in result.stderr
    assert not marker.exists()
    assert open_store(home).get_job("refused") is None


def test_a_nul_in_a_hyperparameter_key_is_refused_by_the_client(home: Path) -> None:
    import trainmon

    sm = trainmon.client("sagemaker")
    for request in ({"HyperParameters": {"a\x00b": "1"}}, {"HyperParameters": {"a=b": "1"}},
                    {"Environment": {"X": "1\x00"}},
                    {"AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["tr\x00ue"]}}):
        full = {"TrainingJobName": "nul", "AlgorithmSpecification": {"TrainingInputMode": "File",
                                                                     "ContainerEntrypoint": ["true"]}, **request}
        with pytest.raises(sm.exceptions.ClientError) as info:
            sm.create_training_job(**full)
        assert info.value.response["Error"]["Code"] == "ValidationException"
        assert "failed to satisfy constraint" in info.value.response["Error"]["Message"]
    assert open_store(home).get_job("nul") is None


MALFORMED = [
    {"ResourceConfig": "ml.m5.large"},
    {"ResourceConfig": {"InstanceCount": "2"}},
    {"StoppingCondition": ["MaxRuntimeInSeconds", 10]},
    {"HyperParameters": ["lr", "0.1"]},
    {"Environment": {"X": 1}},
    {"InputDataConfig": {"ChannelName": "train"}},
    {"InputDataConfig": [{"ChannelName": "train", "DataSource": "/data"}]},
    {"AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": "python train.py"}},
    {"OutputDataConfig": {"S3OutputPath": 5}},
    {"Tags": [{"Key": "k"}]},
    {"TrainmonConfig": {"StopGraceSeconds": "soon"}},
    {"ProfilerConfig": {"ProfilingIntervalInMilliseconds": 250}},
]


@pytest.mark.parametrize("malformed", MALFORMED, ids=[next(iter(m)) for m in MALFORMED])
def test_malformed_request_shapes_are_a_validation_exception(home: Path, malformed: dict) -> None:
    import trainmon

    sm = trainmon.client("sagemaker")
    request = {"TrainingJobName": "shape", "AlgorithmSpecification": {"TrainingInputMode": "File",
                                                                      "ContainerEntrypoint": ["true"]}, **malformed}
    with pytest.raises(sm.exceptions.ClientError) as info:
        sm.create_training_job(**request)
    error = info.value.response["Error"]
    assert error["Code"] == "ValidationException"
    field = next(iter(malformed))
    assert f"at '{field[0].lower()}{field[1:]}" in error["Message"]


def test_a_data_directory_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    result = run_cli("--home", "/proc/trainmon-test/x", "list")
    assert result.returncode == 1
    assert result.stderr.startswith("trainmon: InternalFailure: cannot create the data directory /proc/trainmon-test/x")
    assert "Traceback" not in result.stderr


# -- 6. a full disk: bounded memory, the job goes on, the loss recorded ---------------------------


@contextmanager
def tmpfs(tmp_path: Path, size: str) -> Iterator[Path]:
    """A real file system of ``size`` (tmpfs), mounted for the test."""
    mount = tmp_path / f"disk-{size}"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path, "8m") as mount:
        yield mount


@pytest.mark.timeout(600)
def test_on_a_small_disk_the_spool_leaves_the_store_room_for_every_record(tmp_path: Path) -> None:
    """38 MB of output on a 20 MB file system: the spool holds only what the store has not taken
    and never eats into the room it keeps for the store, so every record and point is stored (the
    spool once took 19.4 MB of it, and 604,403 of 655,737 records were lost)."""
    train = tmp_path / "flood.py"
    lines = 655_737
    train.write_text(
        "import sys\n"
        "out = sys.stdout.buffer\n"
        f"for i in range({lines}):\n"
        "    out.write(b'INFO step %07d of the epoch: loss=0.%06d lr=0.001 ok\\n' % (i, i))\n"
    )
    with tmpfs(tmp_path, "20m") as disk:
        env = {"TRAINMON_HOME": str(disk)}
        result = subprocess.run([sys.executable, "-m", "trainmon", "run", "--name", "flood", "--disable-profiler",
                                 "--metric", r"loss=loss=(\S+)", "--", PY, str(train)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, env={**os.environ, **env}, timeout=600)
        assert result.returncode == 0, result.stderr
        assert "could not be stored" not in result.stderr
        store = open_store(disk)
        try:
            job = store.get_job("flood")
            assert job.status == "Completed" and "UnstoredOutput" not in job.doc
            (stream,) = store.streams(job.id)
            assert stream.records == lines
            assert len(store.points(job.id)) == lines
        finally:
            store.close()


def kept_bytes(path: Path) -> int:
    """How many bytes of a file's size still have blocks (its holes left out; blocks reserved past
    its end too)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size, kept, at = os.fstat(fd).st_size, 0, 0
        while at < size:
            try:
                start = os.lseek(fd, at, os.SEEK_DATA)
            except OSError:  # no data past ``at``
                break
            at = os.lseek(fd, start, os.SEEK_HOLE)
            kept += min(at, size) - start
        return kept
    finally:
        os.close(fd)


def test_a_spool_frees_what_the_store_has_taken(home: Path, tmp_path: Path, started) -> None:
    """A job prints 24 MB, then waits: once its records are stored, its spool file keeps its size but
    holds a few MB of it at most; the records all read back, and the rest of the job's output is
    spooled after them."""
    go = tmp_path / "go"
    train = tmp_path / "print.py"
    train.write_text(
        "import os, sys, time\n"
        "out = sys.stdout.buffer\n"
        "for i in range(400_000):\n"
        "    out.write(b'step %07d of a long epoch, loss=0.%06d and more words\\n' % (i, i))\n"
        "out.flush()\n"
        f"while not os.path.exists({str(go)!r}):\n"
        "    time.sleep(0.02)\n"
        "print('last loss=0.5', flush=True)\n"
    )
    process = subprocess.Popen([sys.executable, "-m", "trainmon", "run", "--name", "frees", "--disable-profiler",
                                "--metric", r"loss=loss=(\S+)", "--", PY, str(train)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    started.append(process)
    spool = home / "jobs" / "frees" / ".spool" / "algo-1-stdout"
    size = 400_000 * len(b"step 0000000 of a long epoch, loss=0.000000 and more words\n")
    wait_for(lambda: spool.exists() and spool.stat().st_size >= size and kept_bytes(spool) < (8 << 20),
             "the spool's stored blocks to be freed")
    go.touch()
    _, errors = process.communicate(timeout=300)
    assert process.returncode == 0, errors
    store = open_store(home)
    try:
        job = store.get_job("frees")
        (stream,) = store.streams(job.id)
        assert stream.records == 400_001 and len(store.points(job.id)) == 400_001
        assert [e.message for e in store.events(stream.id, after_seq=399_998)] == [
            "step 0399999 of a long epoch, loss=0.399999 and more words", "last loss=0.5"]
    finally:
        store.close()


@pytest.mark.timeout(600)
def test_a_full_disk_keeps_memory_bounded_lets_the_job_finish_and_records_the_loss(small_disk: Path,
                                                                                   tmp_path: Path) -> None:
    finished = tmp_path / "finished"
    train = tmp_path / "flood.py"
    train.write_text(
        "import sys\n"
        "out = sys.stdout.buffer\n"
        "line = b'INFO data loader worker 3 prefetching shard 000123 of 004096 (queue depth 17) loss=0.5\\n'\n"
        "for _ in range(300_000_000 // len(line) // 1000):\n"
        "    out.write(line * 1000)\n"
        "out.write(b'final loss=0.25\\n')\n"
        f"open({str(finished)!r}, 'w').write('yes')\n"
    )
    peak = tmp_path / "peak"
    measured = (  # a process of its own, whose children are only trainmon and the job
        "import resource, subprocess, sys\n"
        "result = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL)\n"
        "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
        "sys.exit(result.returncode)\n"
    )
    # Without the profiler: what is measured is capture's memory on a full disk, not ProfilerReport's report
    # (which reads up to its own budget of the points stored, docs/report.md).
    result = subprocess.run([sys.executable, "-c", measured, str(peak), sys.executable, "-m", "trainmon", "run",
                             "--name", "full", "--disable-profiler", "--metric", r"loss=loss=(\S+)", "--", PY,
                             str(train)],
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "TRAINMON_HOME": str(small_disk)},
                            timeout=600)
    peak_mb = int(peak.read_text()) / 1024
    assert finished.read_text() == "yes"  # the job ran to its end
    assert result.returncode == 1 and "could not be stored" in result.stderr and "Traceback" not in result.stderr
    # for 300 MB of output (it took 605 MB before memory was capped): the 64 MiB held, and the store's own
    # buffers while it stores half the records (it stored none when the spool took the disk: 220-240 MB then)
    assert peak_mb < 400, peak_mb
    text = run_cli("describe", "full", env={"TRAINMON_HOME": str(small_disk)}).stdout
    assert "Training job full: Completed" in text
    assert "Not stored" in text and "metric points could not be stored" in text
    assert "Final metrics (from the points stored;" in text
    lost = json.loads(run_cli("describe", "full", "--json", env={"TRAINMON_HOME": str(small_disk)}).stdout)
    assert "UnstoredOutput" not in lost  # SageMaker's answer stays SageMaker's; trainmon's own operation says it
    import trainmon

    metrics = trainmon.client("trainmon", home=small_disk).describe_job_metrics(TrainingJobName="full")
    unstored = metrics["UnstoredOutput"]
    line = b"INFO data loader worker 3 prefetching shard 000123 of 004096 (queue depth 17) loss=0.5\n"
    lines_printed = 300_000_000 // len(line) // 1000 * 1000 + 1
    store = open_store(small_disk)
    try:
        (stream,) = store.streams(store.get_job("full").id)
        assert stream.records + unstored["Records"] == lines_printed  # every record stored or counted
        points = len(store.points(store.get_job("full").id)) + unstored["Points"]
        # a record a drop cut in two keeps its first part: a point in the rest is neither stored nor counted
        assert lines_printed - 2 <= points <= lines_printed
    finally:
        store.close()


# -- 7. a supervisor's death: its spool stored; SIGHUP survived; training time true ---------------


def test_a_dead_supervisors_spool_is_stored_by_whoever_reaps_the_job(home: Path, tmp_path: Path, started) -> None:
    """kill -9 of `trainmon run` while a job floods: the job has written everything to the spool;
    the next command that reads jobs stores all of it before marking the job Failed."""
    finished = tmp_path / "finished"
    train = tmp_path / "flood.py"
    chunks = 500  # half a million records, far more than the pipe holds
    train.write_text(
        "import sys, time\n"
        "out = sys.stdout.buffer\n"
        "block = b''.join(b'record %d loss=0.%d\\n' % (i, i % 10) for i in range(1000))\n"
        f"for _ in range({chunks}):\n"
        "    out.write(block)\n"
        "out.flush()\n"
        f"open({str(finished)!r}, 'w').write('yes')\n"
    )
    process = start_run(started, "crashed", train, "--metric", r"loss=loss=(\S+)")
    wait_for(finished.exists, "the job's last write")
    reader = open_store(home)
    try:
        tag = reader.get_job("crashed").supervisor["tag"]
    finally:
        reader.close()
    # the spooler ends once it has spooled the pipes to their end: what is still in a pipe dies with the supervisor
    assert tags.wait_for_spooler(tag, timeout_s=120), "the spooler did not end"
    process.kill()
    process.communicate()
    run_cli("list", check=True)
    doc = describe("crashed")
    assert doc["TrainingJobStatus"] == "Failed" and "supervising process" in doc["FailureReason"]
    store = open_store(home)
    try:
        job = store.get_job("crashed")
        (stream,) = store.streams(job.id)
        assert stream.records == chunks * 1000
        assert len(store.points(job.id)) == chunks * 1000
        events = store.events(stream.id, after_seq=chunks * 1000 - 3)
        assert [e.message for e in events] == ["record 998 loss=0.8", "record 999 loss=0.9"]
    finally:
        store.close()
    assert not (home / "jobs" / "crashed" / ".spool").exists()


def test_a_supervisor_takes_a_job_over_only_from_its_submitter_and_only_while_it_is_active(home: Path,
                                                                                           tmp_path: Path) -> None:
    """A Ray job's supervisor comes after the process that submitted it: it runs the job only if that
    process is still the job's supervisor (a submission that gave up has marked the job Failed), once."""
    from trainmon.api.training_request import job_document
    from trainmon.runtime.job import orphans
    from trainmon.runtime.job.jobstate import set_status
    from trainmon.runtime.job.supervisor import Supervisor
    from trainmon.runtime.launchers import registry

    marker = tmp_path / "ran"
    store = open_store(home)
    try:
        submitter = orphans.identity()
        for name in ("gave-up", "taken", "again"):
            request = {"TrainingJobName": name, "AlgorithmSpecification": {
                "TrainingInputMode": "File", "ContainerEntrypoint": [PY, "-c", f"open({str(marker)!r}, 'a').write('x')"]}}
            store.create_job(name, job_document(request, time.time(), home=home), time.time(), supervisor=submitter)
        set_status(store, "gave-up", "Failed", FailureReason="InternalServerError: the submission gave up")
        ended = Supervisor(store, "gave-up", hosts=registry.job_hosts, echo=False, handle_signals=False).run(taking_over=submitter)
        assert ended.status == "Failed" and ended.supervisor == submitter and not marker.exists()
        done = Supervisor(store, "taken", hosts=registry.job_hosts, echo=False, handle_signals=False).run(taking_over=submitter)
        assert done.status == "Completed" and marker.read_text() == "x"
        other = orphans.identity(os.getppid())  # another process took "again" first
        store.update_job("again", lambda row: setattr(row, "supervisor", other))
        untouched = Supervisor(store, "again", hosts=registry.job_hosts, echo=False, handle_signals=False).run(taking_over=submitter)
        assert untouched.status == "InProgress" and untouched.supervisor == other and marker.read_text() == "x"
    finally:
        store.close()


def test_training_time_ends_when_the_jobs_processes_did(home: Path, tmp_path: Path, started) -> None:
    """The supervisor dies while the job runs; the job ends on its own; a command notices later.
    The job's training time ends with its last output, not when it was noticed."""
    go, finished = tmp_path / "go", tmp_path / "finished"
    train = tmp_path / "short.py"
    train.write_text(
        "import os, time\n"
        "print('working', flush=True)\n"
        f"while not os.path.exists({str(go)!r}):\n"
        "    time.sleep(0.02)\n"
        f"open({str(finished)!r}, 'w').write('yes')\n"
    )
    process = start_run(started, "short", train)
    wait_for(lambda: "working" in run_cli("logs", "short").stdout, "the first line")
    process.kill()
    process.communicate()
    go.touch()
    wait_for(finished.exists, "the job's end")
    ended = finished.stat().st_mtime
    time.sleep(2)  # the reaper notices later: the time between is what must not count
    run_cli("list", check=True)
    doc = describe("short")
    assert doc["TrainingJobStatus"] == "Failed"
    end = datetime.fromisoformat(doc["TrainingEndTime"]).timestamp()
    assert end <= ended + 0.5
    assert doc["TrainingTimeInSeconds"] <= 2


def test_a_foreground_run_survives_sighup_with_its_job(home: Path, tmp_path: Path, started) -> None:
    proceed, finished = tmp_path / "proceed", tmp_path / "finished"
    train = tmp_path / "hup.py"
    train.write_text(
        "import os, time\n"
        "print('before', flush=True)\n"
        f"while not os.path.exists({str(proceed)!r}):\n"
        "    time.sleep(0.02)\n"
        "print('after loss=0.5', flush=True)\n"
        f"open({str(finished)!r}, 'w').write('yes')\n"
    )
    process = start_run(started, "hup", train, "--metric", r"loss=loss=(\S+)")
    wait_for(lambda: "before" in run_cli("logs", "hup").stdout, "the first line")
    process.send_signal(signal.SIGHUP)  # the ssh session drops
    proceed.touch()
    process.communicate(timeout=120)
    assert process.returncode == 0
    assert finished.read_text() == "yes"
    doc = describe("hup")
    assert doc["TrainingJobStatus"] == "Completed" and doc["FinalMetricDataList"][0]["Value"] == 0.5


# -- 8. privacy and terminals -------------------------------------------------------------------


def test_the_data_directory_and_the_database_are_private(tmp_path: Path) -> None:
    home = tmp_path / "fresh"
    run_cli("--home", str(home), "run", "--name", "private", "--", "true", check=True)
    assert home.stat().st_mode & 0o777 == 0o700
    assert (home / "jobs").stat().st_mode & 0o077 == 0
    for name in ("trainmon.db", "trainmon.db-wal", "trainmon.db-shm"):
        path = home / name
        if path.exists():
            assert path.stat().st_mode & 0o777 == 0o600, name
    # a flood's chunks, kept beside the database: its user's only too
    run_cli("--home", str(home), "run", "--name", "flood", "--", PY, "-c",
            "import os\nfor _ in range(20000): print(os.urandom(100).hex())", check=True)
    beside = home / "trainmon.db-logs"
    assert beside.stat().st_mode & 0o777 == 0o700
    kept = list(beside.iterdir())
    assert kept and all(path.stat().st_mode & 0o777 == 0o600 for path in kept), kept


def test_terminal_escapes_from_a_job_are_shown_not_obeyed(home: Path) -> None:
    pexpect = pytest.importorskip("pexpect")
    hostile = "\x1b[2J\x1b]0;owned\x07red\x1b[31m loss=1\rover"
    run_cli("run", "--name", "hostile", "--mode", "raw", "--", PY, "-c", f"print({hostile!r})", check=True)
    exact = run_cli("logs", "hostile", check=True).stdout  # not a terminal: the text as the job printed it
    assert exact == "\x1b[2J\x1b]0;owned\x07red\x1b[31m loss=1\nover\n"
    terminal = pexpect.spawn(sys.executable, ["-m", "trainmon", "logs", "hostile"], env=os.environ, timeout=60,
                             encoding="utf-8")
    shown = terminal.read()
    terminal.close()
    assert "\x1b" not in shown and "\x07" not in shown
    assert "\\x1b[2J\\x1b]0;owned\\x07red\\x1b[31m loss=1" in shown
    described = pexpect.spawn(sys.executable, ["-m", "trainmon", "describe", "hostile"], env=os.environ, timeout=60,
                              encoding="utf-8").read()
    assert "\x1b[2J" not in described
