"""`trainmon run` end to end, with real training processes and a real SQLite file."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from trainmon import client as trainmon_client
from trainmon.runtime.processes import tags
from trainmon.store import open_store

from .conftest import PY, run_cli, wait_for

DEFS = '[{"Name": "train:error", "Regex": "Train_error=(.*?);"}, {"Name": "valid:error", "Regex": "Valid_error=(.*?);"}]'


def describe(name: str) -> dict:
    return json.loads(run_cli("describe", name, "--json", check=True).stdout)


def test_job_runs_with_metrics_final_values_and_model(home: Path, script) -> None:
    train = script(
        """
        import os, sys
        for epoch in range(1, 4):
            print(f"epoch {epoch} Train_error={0.5 / epoch:.3f}; Valid_error={0.6 / epoch:.3f};")
        print("Train_error=nan;")
        print("a warning", file=sys.stderr)
        open(os.path.join(os.environ["SM_MODEL_DIR"], "weights.bin"), "wb").write(b"123")
        """
    )
    result = run_cli("run", "--name", "ok-1", "--metric-definitions", DEFS, "--", PY, str(train))
    assert result.returncode == 0, result.stderr
    assert "epoch 3 Train_error=0.167;" in result.stdout  # echoed to the terminal
    assert "a warning" in result.stderr
    doc = describe("ok-1")
    assert doc["TrainingJobStatus"] == "Completed" and doc["SecondaryStatus"] == "Completed"
    assert [t["Status"] for t in doc["SecondaryStatusTransitions"]] == [
        "Starting", "Downloading", "Training", "Uploading", "Completed"]
    assert all("StatusMessage" in t and "EndTime" in t for t in doc["SecondaryStatusTransitions"])
    finals = {m["MetricName"]: m["Value"] for m in doc["FinalMetricDataList"]}
    assert finals == {"train:error": 0.167, "valid:error": 0.2}  # last *finite* value; NaN kept but skipped
    assert doc["TrainingTimeInSeconds"] >= 1 and doc["BillableTimeInSeconds"] == doc["TrainingTimeInSeconds"]
    assert doc["AlgorithmSpecification"]["MetricDefinitions"] == json.loads(DEFS)
    artifact = Path(doc["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://"))
    assert artifact == home / "output" / "ok-1" / "output" / "model.tar.gz"
    with tarfile.open(artifact) as archive:
        assert archive.getnames() == ["weights.bin"]

    store = open_store(home)
    job = store.get_job("ok-1")
    points = store.points(job.id, names=["train:error"])
    assert [p.value for p in points][:3] == [0.5, 0.25, 0.167]
    (stream,) = store.streams(job.id)
    assert stream.name.startswith("ok-1/algo-1-") and len(stream.name.split("-")[-1]) == 10
    events = store.events(stream.id)
    for point in points:  # every point traces to the record it came from
        assert events[point.seq].message.find("Train_error=") >= 0
        assert events[point.seq].timestamp_ms == point.timestamp_ms


LATENCY = [{"Name": "latency", "Regex": "latency=([0-9.]+)ms/step"},
           {"Name": "latency", "Regex": "latency=([0-9.]+)s/step"}]
SHARED_WARNING = ("MetricDefinitions[1] and MetricDefinitions[2] share the name 'latency': each feeds the one metric "
                  "'latency' (as on SageMaker), and a record matched by more than one of them gives it a point from "
                  "each, with the same timestamp.")


def test_two_definitions_of_one_metric_both_feed_it_with_a_warning(home: Path, script) -> None:
    train = script(
        """
        print("step 1 latency=250ms/step")
        print("step 2 latency=0.3s/step")
        print("latency=5ms/step latency=0.1s/step")  # both regexes match this record
        """
    )
    result = run_cli("run", "--name", "latency", "--metric-definitions", json.dumps(LATENCY), "--", PY, str(train))
    assert result.returncode == 0, result.stderr
    assert result.stderr.count(SHARED_WARNING) == 1  # on stderr once; the summary on stdout shows it too
    assert f"trainmon: warning: {SHARED_WARNING}" in result.stderr.splitlines()
    doc = describe("latency")
    assert doc["AlgorithmSpecification"]["MetricDefinitions"] == LATENCY  # both kept, as given
    assert doc["FinalMetricDataList"][0]["Value"] == 0.1  # of the two points of one time, the last written

    store = open_store(home)
    job = store.get_job("latency")
    points = store.points(job.id, names=["latency"])
    assert [(p.seq, p.value) for p in points] == [(0, 250.0), (1, 0.3), (2, 5.0), (2, 0.1)]
    assert points[2].timestamp_ms == points[3].timestamp_ms  # one record, one time: neither point dropped

    metrics = trainmon_client("trainmon").describe_job_metrics(TrainingJobName="latency")
    assert [(m["MetricName"], m["Points"]) for m in metrics["Metrics"]] == [("latency", 4)]
    assert [(d["Name"], d["Matches"]) for d in metrics["Definitions"]] == [("latency", 2), ("latency", 2)]
    assert metrics["Warnings"] == [SHARED_WARNING]
    text = run_cli("describe", "latency", check=True).stdout
    assert f"  warning: {SHARED_WARNING}" in text
    assert "  latency (MetricDefinitions[1]): 2 points" in text and "  latency (MetricDefinitions[2]): 2 points" in text
    counts = json.loads(run_cli("metrics", "latency", "--statistic", "SampleCount", "--json", check=True).stdout)
    assert {r["MetricName"] for r in counts} == {"latency"} and sum(r["SampleCount"] for r in counts) == 4


def test_container_contract_files_and_environment(home: Path, script, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "rows.csv").write_text("1,2\n")
    train = script(
        """
        import json, os
        keys = ["SM_MODEL_DIR", "SM_OUTPUT_DIR", "SM_OUTPUT_DATA_DIR", "SM_INPUT_DIR", "SM_INPUT_CONFIG_DIR",
                "SM_CHANNELS", "SM_CHANNEL_TRAINING", "SM_HPS", "SM_HP_LR", "SM_HOSTS", "SM_CURRENT_HOST",
                "SM_NUM_CPUS", "SM_NUM_GPUS", "SM_TRAINING_ENV", "PYTHONUNBUFFERED", "MY_VAR"]
        env = {k: os.environ[k] for k in keys}
        config = os.environ["SM_INPUT_CONFIG_DIR"]
        env["hyperparameters.json"] = json.load(open(os.path.join(config, "hyperparameters.json")))
        env["resourceconfig.json"] = json.load(open(os.path.join(config, "resourceconfig.json")))
        env["channel_file"] = open(os.path.join(os.environ["SM_CHANNEL_TRAINING"], "rows.csv")).read()
        with open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "env.json"), "w") as f:
            json.dump(env, f)
        """
    )
    result = run_cli(
        "run", "--name", "contract", "--hyperparameters", '{"epochs": 3, "opt": "adam"}', "-H", "lr=0.1",
        "--channel", f"training={data}", "--environment", "MY_VAR=hello", "--", PY, str(train),
    )
    assert result.returncode == 0, result.stderr
    env = json.loads((home / "jobs" / "contract" / "algo-1" / "output" / "data" / "env.json").read_text())
    root = home / "jobs" / "contract" / "algo-1"
    assert env["SM_MODEL_DIR"] == str(root / "model")
    assert env["SM_INPUT_CONFIG_DIR"] == str(root / "input" / "config")
    assert env["hyperparameters.json"] == {"epochs": "3", "opt": "adam", "lr": "0.1"}  # strings, as SageMaker
    assert json.loads(env["SM_HPS"]) == {"epochs": 3, "opt": "adam", "lr": 0.1}
    assert env["SM_HP_LR"] == "0.1"
    assert json.loads(env["SM_CHANNELS"]) == ["training"]
    assert env["channel_file"] == "1,2\n"
    assert env["resourceconfig.json"]["current_host"] == "algo-1"
    assert env["resourceconfig.json"]["hosts"] == ["algo-1"]
    assert json.loads(env["SM_HOSTS"]) == ["algo-1"] and env["SM_CURRENT_HOST"] == "algo-1"
    assert int(env["SM_NUM_CPUS"]) == os.cpu_count() and env["SM_NUM_GPUS"] == "0"
    assert json.loads(env["SM_TRAINING_ENV"])["job_name"] == "contract"
    assert env["PYTHONUNBUFFERED"] == "1" and env["MY_VAR"] == "hello"
    output_tar = home / "output" / "contract" / "output" / "output.tar.gz"
    with tarfile.open(output_tar) as archive:
        assert archive.getnames() == ["env.json"]


def test_several_hosts_each_have_their_own_stream_and_prefix(home: Path, script) -> None:
    train = script(
        """
        import os
        host = os.environ["SM_CURRENT_HOST"]
        print(f"hello from {host} loss={host[-1]}")
        """
    )
    result = run_cli("run", "--name", "multi", "--instance-count", "3", "--metric", r"loss=loss=(\d)",
                     "--", PY, str(train))
    assert result.returncode == 0, result.stderr
    for n in (1, 2, 3):
        assert f"algo-{n} | hello from algo-{n}" in result.stdout
    store = open_store(home)
    job = store.get_job("multi")
    streams = store.streams(job.id)
    assert [s.host for s in streams] == ["algo-1", "algo-2", "algo-3"]
    assert sorted((p.host, p.value) for p in store.points(job.id)) == [("algo-1", 1.0), ("algo-2", 2.0), ("algo-3", 3.0)]
    logs = run_cli("logs", "multi", "--host", "algo-2", check=True).stdout
    assert logs == "hello from algo-2 loss=2\n"


def test_failure_reason_from_exit_code_and_stderr(home: Path, script) -> None:
    train = script(
        """
        import sys
        print("Traceback (most recent call last):", file=sys.stderr)
        print("ValueError: bad shape", file=sys.stderr)
        sys.exit(3)
        """
    )
    result = run_cli("run", "--name", "fails", "--", PY, str(train))
    assert result.returncode == 1
    doc = describe("fails")
    assert doc["TrainingJobStatus"] == "Failed" and doc["SecondaryStatus"] == "Failed"
    assert doc["FailureReason"].startswith("AlgorithmError: algo-1 exited with code 3.")
    assert doc["FailureReason"].endswith("ValueError: bad shape")
    assert "Failure reason" in result.stdout


def test_failure_reason_from_output_failure_file_is_cut_at_1024(home: Path, script) -> None:
    train = script(
        """
        import os, sys
        with open(os.path.join(os.environ["SM_OUTPUT_DIR"], "failure"), "w") as f:
            f.write("CUDA out of memory. " + "x" * 2000)
        sys.exit(1)
        """
    )
    run_cli("run", "--name", "failfile", "--", PY, str(train))
    reason = describe("failfile")["FailureReason"]
    assert reason.startswith("CUDA out of memory. ") and len(reason) == 1024


def test_job_killed_by_a_signal(home: Path, script) -> None:
    train = script("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    run_cli("run", "--name", "killed", "--", PY, str(train))
    assert describe("killed")["FailureReason"] == "AlgorithmError: algo-1 was killed by signal SIGKILL."


def test_command_that_does_not_exist_fails_the_job_without_traceback(home: Path) -> None:
    result = run_cli("run", "--name", "nocmd", "--", "definitely-not-a-command-xyz")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    doc = describe("nocmd")
    assert doc["TrainingJobStatus"] == "Failed"
    assert "cannot start 'definitely-not-a-command-xyz' on algo-1: No such file or directory" in doc["FailureReason"]


def test_max_runtime_stops_the_job_as_max_runtime_exceeded(home: Path, script) -> None:
    train = script(
        """
        import time
        print("started", flush=True)
        time.sleep(60)
        """
    )
    result = run_cli("run", "--name", "slow", "--max-runtime-seconds", "1", "--", PY, str(train))
    assert result.returncode == 3
    doc = describe("slow")
    assert doc["TrainingJobStatus"] == "Stopped" and doc["SecondaryStatus"] == "MaxRuntimeExceeded"
    statuses = [t["Status"] for t in doc["SecondaryStatusTransitions"]]
    assert statuses[-2:] == ["Stopping", "MaxRuntimeExceeded"]
    assert run_cli("logs", "slow", check=True).stdout == "started\n"


_STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _end_started_runs():
    """A failed test must not leave its `trainmon run` behind for the next one."""
    yield
    while _STARTED:
        process = _STARTED.pop()
        if process.poll() is None:
            process.kill()
        process.communicate()


def _as_a_shell_starts_it() -> None:
    """SIGINT's default handling, as a shell gives what it starts in the foreground: tests started in
    the background by a non-interactive shell ignore SIGINT and SIGQUIT, an ignored disposition
    survives exec, and a Ctrl-C sent before trainmon's own handlers would be lost in the kernel, as it
    never is in a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def _start(name: str, train: Path, *extra: str) -> subprocess.Popen[str]:
    """`trainmon run` in a process group of its own in this session, as a shell starts a job: its
    signals are then what they are in a terminal whatever runs the tests (in a process group the
    kernel deems orphaned, as under a runner that made pytest a session leader, SIGTSTP is discarded)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "trainmon", "run", "--name", name, *extra, "--", PY, str(train)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, process_group=0, preexec_fn=_as_a_shell_starts_it,
    )
    _STARTED.append(process)
    return process


def _wait_for_log(name: str, text: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    result = None
    while time.monotonic() < deadline:
        result = run_cli("logs", name)
        if text in result.stdout:
            return
        time.sleep(0.1)
    runs = [(p.args, p.poll()) for p in _STARTED]
    raise AssertionError(f"{text!r} never appeared in the logs of {name}; last `trainmon logs`: {result!r}; runs: {runs}")


def test_stop_from_another_terminal_ends_the_whole_process_group(home: Path, script, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    train = script(
        f"""
        import os, signal, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        def on_term(*_):
            print("got SIGTERM, saving checkpoint", flush=True)
            open(os.path.join(os.environ["SM_MODEL_DIR"], "ckpt"), "w").write("x")
            sys.exit(0)
        signal.signal(signal.SIGTERM, on_term)
        print("Train_error=0.5;", flush=True)
        time.sleep(600)
        """
    )
    proc = _start("stopme", train, "--metric-definitions", DEFS)
    _wait_for_log("stopme", "Train_error=0.5;")
    result = run_cli("stop", "stopme", check=True)
    assert "Stopping" in result.stdout
    proc.communicate(timeout=60)
    assert proc.returncode == 3
    doc = describe("stopme")
    assert doc["TrainingJobStatus"] == "Stopped" and doc["SecondaryStatus"] == "Stopped"
    assert doc["FinalMetricDataList"][0]["Value"] == 0.5
    assert run_cli("logs", "stopme").stdout.endswith("got SIGTERM, saving checkpoint\n")
    main_pid, child_pid = map(int, pids.read_text().split())
    for pid in (main_pid, child_pid):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert tarfile.open(home / "output" / "stopme" / "output" / "model.tar.gz").getnames() == ["ckpt"]
    again = run_cli("stop", "stopme")
    assert again.returncode == 2
    assert "The request was rejected because the training job is in status Stopped." in again.stderr


def test_job_ignoring_sigterm_is_killed_after_the_grace_period(home: Path, script) -> None:
    train = script(
        """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ignoring SIGTERM", flush=True)
        time.sleep(600)
        """
    )
    proc = _start("stubborn", train, "--stop-grace-seconds", "1")
    _wait_for_log("stubborn", "ignoring SIGTERM")
    run_cli("stop", "stubborn", check=True)
    proc.communicate(timeout=60)
    assert describe("stubborn")["TrainingJobStatus"] == "Stopped"


def test_ctrl_c_stops_the_foreground_job(home: Path, script) -> None:
    train = script(
        """
        import time
        print("running", flush=True)
        time.sleep(600)
        """
    )
    proc = _start("ctrlc", train)
    _wait_for_log("ctrlc", "running")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    doc = describe("ctrlc")
    assert doc["TrainingJobStatus"] == "Stopped"
    assert [t["Status"] for t in doc["SecondaryStatusTransitions"]][-2:] == ["Stopping", "Stopped"]


def _supervisor_pid(home: Path, name: str) -> int:
    store = open_store(home)
    try:
        job = store.get_job(name)
        assert job is not None and job.supervisor is not None
        return int(job.supervisor["pid"])
    finally:
        store.close()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()[0]


def test_a_sigterm_to_both_processes_of_trainmon_run_stops_the_job_in_order(home: Path, script) -> None:
    """`trainmon run` is two processes (the command, and the supervisor it forked into a session of
    its own); `pkill -f` reaches both, and the command passes its signal on: one stop, with the
    grace period, not a second request that kills the job at once."""
    train = script(
        """
        import signal, sys, time
        def stop(*_):
            print("got SIGTERM", flush=True)
            time.sleep(1)
            print("clean exit", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        print("ready", flush=True)
        time.sleep(600)
        """
    )
    proc = _start("both", train)
    _wait_for_log("both", "ready")
    supervisor = _supervisor_pid(home, "both")
    assert supervisor != proc.pid
    os.kill(proc.pid, signal.SIGTERM)
    os.kill(supervisor, signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode == 3  # Stopped
    assert describe("both")["TrainingJobStatus"] == "Stopped"
    assert "clean exit" in run_cli("logs", "both").stdout


def test_ctrl_z_stops_the_supervisor_with_the_command_and_fg_resumes_both(home: Path, script, tmp_path: Path) -> None:
    go = tmp_path / "go"
    train = script(
        f"""
        import os, time
        print("ready", flush=True)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.02)
        print("done", flush=True)
        """
    )
    proc = _start("paused", train)
    _wait_for_log("paused", "ready")
    supervisor = _supervisor_pid(home, "paused")
    os.kill(proc.pid, signal.SIGTSTP)  # what Ctrl-Z in the terminal sends the command
    wait_for(lambda: _state(proc.pid) == "T" and _state(supervisor) == "T", "both stopped")
    os.kill(proc.pid, signal.SIGCONT)  # the shell's fg
    wait_for(lambda: _state(supervisor) != "T", "the supervisor resumed")
    go.touch()
    proc.communicate(timeout=120)
    assert proc.returncode == 0 and describe("paused")["TrainingJobStatus"] == "Completed"


@pytest.mark.parametrize(("argv", "held"), [(["run", "--", "true"], True), (["--home", "/x", "demo"], True),
                                             (["describe", "run"], False), (["--debug", "list"], False)])
def test_a_command_that_starts_a_job_holds_stop_signals_before_it_imports_the_rest(argv: list[str], held: bool) -> None:
    """The command's first act, before trainmon.cli and what it imports: from then on a Ctrl-C is
    kept for the supervisor, never raised where a finalizer or a lookup could swallow it."""
    spy = textwrap.dedent(f"""
        import builtins, signal, sys
        seen, real = [], builtins.__import__
        def spy(name, globals=None, locals=None, fromlist=(), level=0):
            if (name, level) in (("cli", 1), ("trainmon.cli", 0)) and not seen:
                seen.append(getattr(signal.getsignal(signal.SIGINT), "__name__", "?"))
            return real(name, globals, locals, fromlist, level)
        builtins.__import__ = spy
        sys.argv = ["trainmon", *{[*argv, "--help"]!r}]
        from trainmon.__main__ import main
        try:
            main()
        except SystemExit:
            pass
        print("HANDLER", seen[0])
        """)
    done = subprocess.run([sys.executable, "-c", spy], capture_output=True, text=True, timeout=60)
    handler = [line for line in done.stdout.splitlines() if line.startswith("HANDLER ")]
    assert handler, done.stdout + done.stderr
    assert (handler[0] == "HANDLER _noted_early") == held, handler  # else Python's own, or an ignored SIGINT


@pytest.mark.timeout(600)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_at_any_moment_of_the_start_stops_the_job_and_leaves_nothing(home: Path, script, sig) -> None:
    """SIGINT or SIGTERM to `trainmon run` at moments spread over its start (before the fork, while
    the two processes hand over, while the job is registered and its hosts start, once it runs):
    every time, the command ends, the job (if it was made) is not left active, and no process of it
    is left."""
    train = script("import time; print('ready', flush=True); time.sleep(600)")
    for step, delay_ms in enumerate([0, 20, 50, 100, 150, 200, 300, 400, 600, 900, 1500]):
        name = f"storm-{sig}-{step}"
        proc = _start(name, train)
        deadline = time.monotonic() + delay_ms / 1000  # the moment is the variable: the outcome must not depend on it
        while time.monotonic() < deadline:
            time.sleep(0.001)
        proc.send_signal(sig)
        try:
            proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
            masks = {}  # of the terminal's process, the supervisor and what it started: where the signal went
            for process in tree:
                with contextlib.suppress(OSError, psutil.Error):
                    masks[f"{process.pid} {' '.join(process.cmdline()[1:4])}"] = [
                        line for line in Path(f"/proc/{process.pid}/status").read_text().splitlines()
                        if line.startswith(("SigBlk", "SigIgn", "SigCgt", "SigPnd", "ShdPnd"))]
            for process in reversed(tree):
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()  # (the supervisor and the job, in sessions of their own, too)
            try:
                said = proc.communicate(timeout=30)[1]
            except subprocess.TimeoutExpired:
                said = "(its output is still held open)"
            raise AssertionError(f"trainmon run went on after a signal {delay_ms} ms into it ({masks}; this test "
                                 f"process: {signal.pthread_sigmask(signal.SIG_BLOCK, [])}, "
                                 f"{signal.getsignal(signal.SIGINT)}); it said: {said[-2000:]!r}") from None
        listing = run_cli("list", "--json", check=True)  # (it reaps a job whose supervisor is gone)
        jobs = {job["TrainingJobName"]: job for job in json.loads(listing.stdout)}
        if name in jobs:
            assert jobs[name]["TrainingJobStatus"] in ("Stopped", "Failed"), (delay_ms, jobs[name])
            store = open_store(home)
            try:
                tag = store.get_job(name).supervisor["tag"]
            finally:
                store.close()
            if tag:
                assert tags.wait_for_spooler(tag, timeout_s=60) and not tags.tagged_processes(tag), delay_ms


def test_the_command_dies_of_the_signal_that_killed_its_supervisor(home: Path, script) -> None:
    train = script("import time; print('ready', flush=True); time.sleep(600)")
    proc = _start("killed-supervisor", train)
    _wait_for_log("killed-supervisor", "ready")
    os.kill(_supervisor_pid(home, "killed-supervisor"), signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert describe("killed-supervisor")["TrainingJobStatus"] == "Failed"  # reaped by the command that read it


def test_trainmon_run_called_from_python_returns_once_in_the_caller(home: Path, tmp_path: Path) -> None:
    """cli.main(["run", ...]) forks its supervisor; only the caller's process goes on from the call."""
    caller = tmp_path / "caller.py"
    caller.write_text(
        "import os\n"
        "from trainmon.cli import main\n"
        "for name in ('once-a', 'once-b'):\n"
        "    print('returned', main(['run', '--name', name, '--', 'true']), os.getpid(), flush=True)\n"
    )
    done = subprocess.run([sys.executable, str(caller)], capture_output=True, text=True, timeout=120)
    returns = [line.split() for line in done.stdout.splitlines() if line.startswith("returned")]
    assert returns == [["returned", "0", str(returns[0][2])]] * 2, done.stdout + done.stderr
    assert describe("once-b")["TrainingJobStatus"] == "Completed"


def test_children_that_outlive_the_job_are_ended(home: Path, script, tmp_path: Path) -> None:
    pid_file = tmp_path / "child"
    train = script(
        f"""
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; print('child alive', flush=True); time.sleep(600)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        print("parent done", flush=True)
        """
    )
    result = run_cli("run", "--name", "orphans", "--", PY, str(train), timeout=60)
    assert result.returncode == 0
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)
    assert describe("orphans")["TrainingJobStatus"] == "Completed"


def test_duplicate_name_is_refused_with_resource_in_use(home: Path, script) -> None:
    train = script("print('hi')")
    run_cli("run", "--name", "dup", "--", PY, str(train), check=True)
    again = run_cli("run", "--name", "dup", "--", PY, str(train))
    assert again.returncode == 1
    assert again.stderr.startswith("trainmon: ResourceInUse: Training job names must be unique")


@pytest.mark.parametrize("name", ["bad_name", "-start", "x" * 64, ""])
def test_invalid_job_names_are_refused(home: Path, name: str) -> None:
    result = run_cli("run", f"--name={name}", "--", "true")
    assert result.returncode == 2
    assert "failed to satisfy constraint" in result.stderr


def test_invalid_definitions_exit_2_without_traceback_and_run_nothing(home: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    result = run_cli("run", "--name", "baddefs", "--metric", "loss=loss=(", "--", "touch", str(marker))
    assert result.returncode == 2
    assert "MetricDefinitions[1] ('loss'): regex does not compile" in result.stderr
    assert "Traceback" not in result.stderr
    assert not marker.exists()
    assert open_store(home).get_job("baddefs") is None


def test_unknown_job_gives_a_clear_error(home: Path) -> None:
    result = run_cli("describe", "nope")
    assert result.returncode == 2
    assert result.stderr.strip() == "trainmon: ValidationException: Requested resource not found. No training job named 'nope'."


def test_kill_9_of_trainmon_marks_the_job_failed_on_next_command(home: Path, script) -> None:
    train = script(
        """
        import time
        for i in range(1000):
            print(f"step {i} loss=0.{i}", flush=True)
            time.sleep(0.01)
        """
    )
    proc = _start("crashy", train, "--metric", r"loss=loss=(\S+)")
    _wait_for_log("crashy", "step 20 ")
    proc.kill()
    proc.communicate()
    doc = describe("crashy")
    assert doc["TrainingJobStatus"] == "Failed"
    assert "supervising process" in doc["FailureReason"] and "killed or crashed" in doc["FailureReason"]
    store = open_store(home)
    job = store.get_job("crashy")
    assert len(store.points(job.id)) >= 20  # what was captured before the crash is kept
    assert doc["FinalMetricDataList"]


def test_binary_garbage_and_huge_lines_are_captured(home: Path, script) -> None:
    train = script(
        """
        import os, sys
        out = sys.stdout.buffer
        out.write(bytes(range(256)) * 4 + b"\\n")
        out.write(b"x" * (10 * 1024 * 1024) + b" loss=0.25")  # 10 MB, no newline at all
        out.flush()
        """
    )
    result = run_cli("run", "--name", "garbage", "--metric", r"loss=loss=(\S+)", "--", PY, str(train))
    assert result.returncode == 0, result.stderr[-2000:]
    store = open_store(home)
    job = store.get_job("garbage")
    (stream,) = store.streams(job.id)
    events = store.events(stream.id)
    assert len(events[-1].message) == 10 * 1024 * 1024 + len(" loss=0.25")
    assert [p.value for p in store.points(job.id)] == [0.25]
    assert "\ufffd" in "".join(e.message for e in events[:-1])


@pytest.mark.timeout(600)  # heavy by design: room for a machine busy with other tests
def test_a_gigabyte_flood_is_captured_without_losing_a_line(home: Path, script) -> None:
    train = script(
        """
        import sys
        line = b"INFO data loader worker 3 prefetching shard 000123 of 004096 (queue depth 17)............\\n"
        chunk = line * 9999 + b"step loss=0.5\\n"
        out = sys.stdout.buffer
        for _ in range(1_000_000_000 // len(chunk)):
            out.write(chunk)
        """
    )
    with open(os.devnull, "wb") as sink:
        proc = subprocess.run([sys.executable, "-m", "trainmon", "run", "--name", "flood", "--metric",
                               r"loss=loss=(\S+)", "--", PY, str(train)], stdout=sink, stderr=subprocess.PIPE,
                              timeout=600)
    assert proc.returncode == 0, proc.stderr
    store = open_store(home)
    job = store.get_job("flood")
    (stream,) = store.streams(job.id)
    chunks = 1_000_000_000 // (90 * 9999 + 14)
    assert stream.records == chunks * 10_000
    assert stream.stored_bytes == chunks * (90 * 9999 + 14)
    assert len(store.points(job.id)) == chunks
    tail = run_cli("logs", "flood", "--tail", "2", check=True).stdout.splitlines()
    assert tail == ["INFO data loader worker 3 prefetching shard 000123 of 004096 (queue depth 17)............",
                    "step loss=0.5"]


def test_sagemaker_record_mode_for_a_job(home: Path, script) -> None:
    train = script(
        """
        import sys
        sys.stdout.write("10%\\r20%\\r30% loss=0.3\\n")
        """
    )
    run_cli("run", "--name", "smmode", "--mode", "sagemaker", "--metric", r"loss=#015(\d+)% loss", "--", PY,
            str(train), check=True)
    store = open_store(home)
    (stream,) = store.streams(store.get_job("smmode").id)
    assert [e.message for e in store.events(stream.id)] == ["10%\r20%\r30% loss=0.3"]
    assert describe("smmode")["FinalMetricDataList"][0]["Value"] == 30.0


@pytest.fixture
def small_disk(tmp_path: Path):
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "--lazy", str(mount)], check=True)


def fill(disk: Path) -> None:
    """Take every byte left on ``disk`` (unbuffered: what a refused write left unwritten is not
    written again when the file is truncated or closed)."""
    with open(disk / "filler", "wb", buffering=0) as filler:
        with pytest.raises(OSError):
            while True:
                filler.write(b"x" * 65536)
        filler.truncate(filler.tell())


def test_full_disk_gives_a_clear_error_and_keeps_what_was_written(small_disk: Path, script) -> None:
    train = script(
        """
        import os, time
        print("first line loss=1", flush=True)
        time.sleep(0.5)
        for i in range(120_000):  # 13 MB that compresses to about half: more than the 3 MB disk holds
            print(f"line {i} " + os.urandom(50).hex())
        """
    )
    env = {"TRAINMON_HOME": str(small_disk)}
    result = run_cli("run", "--name", "full", "--metric", r"loss=loss=(\S+)", "--", PY, str(train), env=env,
                     timeout=300)
    assert result.returncode != 0
    assert "is full: free some space; what was stored so far stays readable" in result.stderr
    assert "Traceback" not in result.stderr
    logs = run_cli("logs", "full", env=env)
    assert logs.returncode == 0
    assert logs.stdout.startswith("first line loss=1\n")
    store = open_store(small_disk)
    try:
        assert [p.value for p in store.points(store.get_job("full").id)] == [1.0]
    finally:
        store.close()


def test_a_store_on_a_full_disk_can_still_be_read(small_disk: Path) -> None:
    """Once the last writer closed it, SQLite cannot make WAL mode's files on a full disk: the store
    opens for reading only, and a write says so."""
    from trainmon.api.sagemaker import register_job
    from trainmon.errors import StoreError

    request = {"TrainingJobName": "kept", "ProfilerConfig": {"DisableProfiler": True},
               "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["true"]}}
    store = open_store(small_disk)
    register_job(store, request)
    store.close()
    fill(small_disk)
    store = open_store(small_disk)
    try:
        assert store.get_job("kept") is not None
        with pytest.raises(StoreError, match="readonly"):
            register_job(store, {**request, "TrainingJobName": "more"})
    finally:
        store.close()
    listed = run_cli("list", env={"TRAINMON_HOME": str(small_disk)})
    assert listed.returncode == 0 and "kept" in listed.stdout, listed.stderr


def test_a_store_left_with_its_wal_on_a_full_disk_can_still_be_read(small_disk: Path) -> None:
    """A writer that ended without its last checkpoint (killed, or its disk full) leaves the WAL
    behind; on a full disk the store is still read, WAL included."""
    written = subprocess.run([PY, "-c", (
        "import os, pathlib, sys; from trainmon.store import open_store; from trainmon.api.sagemaker import "
        "register_job\n"
        "store = open_store(pathlib.Path(sys.argv[1]))\n"
        "register_job(store, {'TrainingJobName': 'in-the-wal', 'ProfilerConfig': {'DisableProfiler': True},"
        " 'AlgorithmSpecification': {'TrainingInputMode': 'File', 'ContainerEntrypoint': ['true']}})\n"
        "os._exit(0)  # no close: no checkpoint"), str(small_disk)], capture_output=True, text=True)
    assert written.returncode == 0, written.stderr
    assert (small_disk / "trainmon.db-wal").stat().st_size > 0
    fill(small_disk)
    listed = run_cli("list", env={"TRAINMON_HOME": str(small_disk)})
    assert listed.returncode == 0 and "in-the-wal" in listed.stdout, listed.stderr


def test_relative_commands_run_from_the_callers_directory(home: Path, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('loss=0.5')\n")
    result = subprocess.run([sys.executable, "-m", "trainmon", "run", "--name", "relative", "--metric",
                             r"loss=loss=(\S+)", "--", PY, "train.py"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert describe("relative")["FinalMetricDataList"][0]["Value"] == 0.5


def test_failure_reason_names_the_host_that_failed_first(home: Path, script) -> None:
    train = script(
        """
        import os, sys, time
        if os.environ["SM_CURRENT_HOST"] == "algo-2":
            print("algo-2 broke", file=sys.stderr)
            sys.exit(3)
        time.sleep(60)
        """
    )
    run_cli("run", "--name", "twohosts", "--instance-count", "2", "--stop-grace-seconds", "5", "--", PY, str(train))
    reason = describe("twohosts")["FailureReason"]
    assert reason.startswith("AlgorithmError: algo-2 exited with code 3.") and reason.endswith("algo-2 broke")


def test_a_deleted_jobs_files_do_not_leak_into_a_new_job_of_the_same_name(home: Path, script) -> None:
    failing = script(
        """
        import os, sys
        open(os.path.join(os.environ["SM_OUTPUT_DIR"], "failure"), "w").write("old failure")
        sys.exit(1)
        """
    )
    run_cli("run", "--name", "reuse", "--", PY, str(failing))
    assert describe("reuse")["FailureReason"] == "old failure"
    run_cli("delete", "reuse", check=True)
    run_cli("run", "--name", "reuse", "--", PY, "-c", "import sys; sys.exit(2)")
    assert describe("reuse")["FailureReason"] == "AlgorithmError: algo-1 exited with code 2."


def test_a_stop_request_is_never_undone_by_a_later_status(store) -> None:
    from trainmon.api import sagemaker
    from trainmon.runtime.job.jobstate import set_status

    sagemaker.register_job(store, {"TrainingJobName": "early", "AlgorithmSpecification": {"ContainerEntrypoint": ["true"]}})
    sagemaker.stop_training_job(store, TrainingJobName="early")
    set_status(store, "early", "Downloading")
    assert store.get_job("early").status == "Stopping"


def test_trainmon_loads_numpy_with_one_blas_thread_and_its_job_inherits_no_such_setting(home: Path) -> None:
    """OpenBLAS's idle threads spin after it loads: trainmon's own process loads NumPy with one thread
    (none beside its own is started), the variable that asks for it is gone before a job starts, and a
    user's own setting is left as it was, for trainmon and the job alike."""
    probe = "import os; print('BLAS', os.environ.get('OPENBLAS_NUM_THREADS'))"
    result = run_cli("run", "--name", "blas-1", "--", PY, "-c", probe, check=True)
    assert "BLAS None" in result.stdout
    result = run_cli("run", "--name", "blas-2", "--", PY, "-c", probe, check=True, env={"OPENBLAS_NUM_THREADS": "2"})
    assert "BLAS 2" in result.stdout
    threads = ("import os, sys; sys.argv = ['trainmon', '--version']\n"
               "from trainmon.__main__ import load_numpy_with_one_blas_thread\n"
               "load_numpy_with_one_blas_thread()\n"
               "print(len(os.listdir('/proc/self/task')), os.environ.get('OPENBLAS_NUM_THREADS'))\n")
    env = {key: value for key, value in os.environ.items() if key != "OPENBLAS_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", threads], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.split() == ["1", "None"]
