"""Jobs whose hosts run on the nodes of a real Ray cluster (a head and three workers on this machine,
each worker with a resource of its own), writing to a real PostgreSQL server.

Every test submits through the CLI, as a user would; the pytest process itself never joins the
cluster. The tests share one cluster (starting one takes tens of seconds; see tests/raycluster.py,
which restarts a node a test killed) and run on one xdist worker (``xdist_group``).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trainmon.api import sagemaker, trainmon, tuning
from trainmon.store import Store, open_store

from .conftest import PY, PostgresServer, postgres_cluster, process_ends, start_server
from .raycluster import RayCluster, ray_cluster  # noqa: F401

pytestmark = [pytest.mark.xdist_group("ray"), pytest.mark.timeout(600)]

# Each host prints where it runs and three steps; the all-reduce job adds each host's rank over
# sockets, through the address and port the launcher gives (MASTER_ADDR, MASTER_PORT).
PRINTING_JOB = """
import os, sys, time
print("node", os.environ["TRAINMON_RAY_NODE_ID"], "host", os.environ["SM_CURRENT_HOST"], flush=True)
for step in range(3):  # 1.5 s at least: a host's system monitor emits an interval's part from 0.5 s on
    print(f"step={step} loss={(int(os.environ['RANK']) + 1) / (step + 1)}", flush=True)
    time.sleep(0.5)
print("to stderr", file=sys.stderr, flush=True)
"""

ALL_REDUCE_JOB = """
import json, os, socket, time
rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
master = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
addresses = json.loads(os.environ["SM_HOST_ADDRESSES"])
assert addresses[json.loads(os.environ["SM_HOSTS"])[0]] == master[0], (addresses, master)
value = 10 * (rank + 1)
if rank == 0:
    server = socket.create_server(master)
    peers, total = [], value
    while len(peers) < size - 1:
        connection, _ = server.accept()
        total += int(connection.recv(64).decode())
        peers.append(connection)
    for connection in peers:
        connection.sendall(str(total).encode())
        connection.close()
else:
    deadline = time.monotonic() + 60
    while True:
        try:
            connection = socket.create_connection(master, timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    connection.sendall(str(value).encode())
    total = int(connection.recv(64).decode())
print(f"allreduce_sum={total}", flush=True)
"""

PIDS_JOB = """
import os, subprocess, sys, time
daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
print("pids", os.getpid(), daemon.pid, flush=True)
while True:
    print("tick", flush=True)
    time.sleep(0.2)
"""

SLEEPING_JOB = """
import os, time
print("up", os.environ["SM_CURRENT_HOST"], flush=True)
while True:
    print("tick", flush=True)
    time.sleep(0.2)
"""


@pytest.fixture
def cluster(ray_cluster: RayCluster) -> RayCluster:  # noqa: F811
    return ray_cluster


@pytest.fixture
def database(postgres_server: PostgresServer) -> Iterator[str]:
    name = postgres_server.create_database()
    yield postgres_server.url(name)
    postgres_server.drop_database(name)


@pytest.fixture
def submitter(tmp_path: Path, cluster: RayCluster, database: str) -> Iterator[Submitter]:
    submitting = Submitter(cluster, database, tmp_path / "submitter-home")
    yield submitting
    submitting.store.close()


class Submitter:
    """The machine that submits: its own data directory, the shared store, the cluster's address."""

    def __init__(self, cluster: RayCluster, database: str, home: Path) -> None:
        self.cluster = cluster
        self.env = cluster.client_env({"TRAINMON_DATABASE_URL": database, "TRAINMON_HOME": str(home)})
        self.store: Store = open_store(home, database_url=database)
        self.home = home

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "trainmon", *args], env=self.env, capture_output=True, text=True,
                              errors="replace", timeout=timeout)

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([PY, "-m", "trainmon", *args], env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def describe(self, name: str) -> dict[str, Any]:
        return sagemaker.describe_training_job(self.store, TrainingJobName=name)

    def wait(self, name: str, until: Any, timeout: float = 240.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while self.store.get_job(name) is None:  # a command just started has not created it yet
            assert time.monotonic() < deadline, f"no job {name}"
            time.sleep(0.2)
        while True:
            description = self.describe(name)
            if until(description):
                return description
            assert time.monotonic() < deadline, f"gave up waiting: {description['SecondaryStatusTransitions']}"
            time.sleep(0.2)

    def records(self, name: str, host: str) -> list[str]:
        page = trainmon.get_job_log_records(self.store, TrainingJobName=name, Host=host, Limit=10_000)
        return [record["Message"] for record in page["Records"]]


def host_pids(submitter: Submitter, name: str, host: str) -> list[int]:
    """The pids a host of PIDS_JOB printed: its main process's and its daemon's."""
    deadline = time.monotonic() + 120
    while not (said := [r for r in submitter.records(name, host) if r.startswith("pids ")]):
        assert time.monotonic() < deadline, f"{host} of {name} printed no pids"
        time.sleep(0.2)
    return [int(pid) for pid in said[0].split()[1:]]


def node_of(cluster: RayCluster, node_id: str) -> int:
    """Which of the cluster's nodes (0 the head, 1..3 the workers) has Ray's node id ``node_id``."""
    for node in cluster.nodes():
        if node["NodeID"] == node_id:
            for index in range(4):
                if cluster.resource(index) in node["Resources"]:
                    return index
    raise AssertionError(f"no node {node_id}")


def job(submitter: Submitter, tmp_path: Path, body: str, name: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(body, encoding="utf-8")
    return path


def test_three_hosts_run_on_three_nodes_and_each_is_captured_there(submitter: Submitter, tmp_path: Path,
                                                                   cluster: RayCluster) -> None:
    script = job(submitter, tmp_path, PRINTING_JOB, "printing")
    done = submitter.run("run", "--name", "spread", "--launcher", "ray", "--instance-count", "3",
                         "--system-metrics-interval", "1", "--profiling-interval-ms", "100",
                         "--profile-output", str(tmp_path / "shared"),  # a directory every node reaches
                         "--metric", "loss=loss=(\\S+)", "--", PY, str(script))
    assert done.returncode == 0, done.stderr
    for host in ("algo-1", "algo-2", "algo-3"):
        assert f"{host} | step=2" in done.stdout  # followed from the store as it ran
    description = submitter.describe("spread")
    assert description["TrainingJobStatus"] == "Completed"
    placements = submitter.store.get_job("spread").doc["HostPlacements"]  # type: ignore[union-attr]
    nodes = {p["Host"]: node_of(cluster, p["NodeId"]) for p in placements}
    assert sorted(nodes) == ["algo-1", "algo-2", "algo-3"]
    assert sorted(nodes.values()) == [1, 2, 3]  # one worker node each (the head has no CPU for a host)
    for host, placement in zip(sorted(nodes), sorted(placements, key=lambda p: p["Host"]), strict=True):
        records = submitter.records("spread", host)
        assert records[0] == f"node {placement['NodeId']} host {host}"
        assert "to stderr" in records
        # the contract was laid out in that node's own data directory
        assert (cluster.node_home(nodes[host]) / "jobs" / "spread" / host / "input" / "config"
                / "resourceconfig.json").is_file()
    points = trainmon.get_job_metric_points(submitter.store, TrainingJobName="spread", MetricNames=["loss"])
    by_host: dict[str, list[float]] = {}
    for point in points["Points"]:
        by_host.setdefault(point["Host"], []).append(point["Value"])
    assert {host: sorted(values) for host, values in by_host.items()} == {
        "algo-1": [1 / 3, 0.5, 1.0], "algo-2": [2 / 3, 1.0, 2.0], "algo-3": [1.0, 1.5, 3.0]}
    system = trainmon.list_job_system_metrics(submitter.store, TrainingJobName="spread")
    assert {m["Host"] for m in system["Metrics"]} >= {"algo-1", "algo-2", "algo-3"}
    assert any(m["MetricName"] == "CPUUtilization" for m in system["Metrics"])
    # every node's profile rows reached the profiler rules, which run with the supervisor
    [report] = description["ProfilerRuleEvaluationStatuses"]
    assert report["RuleEvaluationStatus"] == "NoIssuesFound"
    assert "no profile datapoints" not in report["StatusDetails"], report["StatusDetails"]
    # and each node wrote its profile into the shared directory, read back from here
    profiled = trainmon.get_profile_summary(submitter.store, TrainingJobName="spread")["Metrics"]
    assert {row["host"] for row in profiled} == {"algo-1", "algo-2", "algo-3"}
    assert sorted({p.parts[-2] for p in (tmp_path / "shared" / "spread").glob("*/*.parquet")}) == [
        "algo-1", "algo-2", "algo-3"]


def test_hosts_reach_each_other_by_the_addresses_they_are_given(submitter: Submitter, tmp_path: Path) -> None:
    script = job(submitter, tmp_path, ALL_REDUCE_JOB, "allreduce")
    done = submitter.run("run", "--name", "allreduce", "--launcher", "ray", "--instance-count", "3",
                         "--metric", "sum=allreduce_sum=(\\d+)", "--", PY, str(script))
    assert done.returncode == 0, done.stdout + done.stderr
    finals = {m["MetricName"]: m["Value"] for m in submitter.describe("allreduce")["FinalMetricDataList"]}
    assert finals == {"sum": 60.0}
    for host in ("algo-1", "algo-2", "algo-3"):
        assert submitter.records("allreduce", host) == ["allreduce_sum=60"]


def test_hosts_run_as_containers_on_their_nodes_and_reach_each_other_by_name(submitter: Submitter,
                                                                            tmp_path: Path) -> None:
    """Each node's host agent runs its host as a container of the job's image, on the node's network,
    where algo-1 ... algo-N name the nodes (resourceconfig's names, as on SageMaker): the all-reduce
    meets at algo-1, and no container is left on any node."""
    from . import containers

    image = containers.algo_image()
    code = tmp_path / "code"  # a channel every node reaches (they share this machine's file system)
    code.mkdir()
    (code / "allreduce.py").write_text(ALL_REDUCE_JOB, encoding="utf-8")
    done = submitter.run("run", "--name", "ray-images", "--launcher", "ray", "--instance-count", "3",
                         "--image", image, "--metric", "sum=allreduce_sum=(\\d+)", "--disable-profiler",
                         "--channel", f"code={code}", "--", "/usr/bin/python3", "/opt/ml/input/data/code/allreduce.py")
    assert done.returncode == 0, done.stdout + done.stderr
    finals = {m["MetricName"]: m["Value"] for m in submitter.describe("ray-images")["FinalMetricDataList"]}
    assert finals == {"sum": 60.0}
    for host in ("algo-1", "algo-2", "algo-3"):
        assert submitter.records("ray-images", host) == ["allreduce_sum=60"]
    left = containers.engine().call(["ps", "--all", "--quiet", "--filter", "label=trainmon.job=ray-images"])
    assert left.stdout.split() == []


def test_a_detached_job_outlives_its_submitter_and_stops_from_anywhere(submitter: Submitter, tmp_path: Path,
                                                                       cluster: RayCluster) -> None:
    script = job(submitter, tmp_path, SLEEPING_JOB, "sleeping")
    done = submitter.run("run", "--name", "detached", "--detach", "--launcher", "ray", "--instance-count", "2",
                         "--stop-grace-seconds", "5", "--", PY, str(script))
    assert done.returncode == 0, done.stderr
    submitter.wait("detached", lambda d: d["SecondaryStatus"] == "Training")
    for host in ("algo-1", "algo-2"):
        deadline = time.monotonic() + 60
        while "tick" not in submitter.records("detached", host):
            assert time.monotonic() < deadline
            time.sleep(0.2)
    # the submitting command has returned, and its submission process has exited too: the job's
    # supervisor lives in the cluster
    supervisor = submitter.store.get_job("detached").supervisor  # type: ignore[union-attr]
    assert supervisor is not None and supervisor["pid"] in cluster.node_pids(0)
    # a second job's supervisor is a thread of the same process: the cluster's coordinator
    done = submitter.run("run", "--name", "second", "--detach", "--launcher", "ray", "--", PY, str(script))
    assert done.returncode == 0, done.stderr
    submitter.wait("second", lambda d: d["SecondaryStatus"] == "Training")
    assert submitter.store.get_job("second").supervisor["pid"] == supervisor["pid"]  # type: ignore[union-attr]
    for name in ("detached", "second"):
        stopped = submitter.run("stop", name)
        assert stopped.returncode == 0, stopped.stderr
    for name in ("detached", "second"):
        description = submitter.wait(name, lambda d: d["TrainingJobStatus"] in ("Stopped", "Failed", "Completed"))
        assert description["TrainingJobStatus"] == "Stopped", description.get("FailureReason")


def test_max_runtime_ends_every_host(submitter: Submitter, tmp_path: Path) -> None:
    script = job(submitter, tmp_path, SLEEPING_JOB, "sleeping")
    done = submitter.run("run", "--name", "limited", "--launcher", "ray", "--instance-count", "2",
                         "--max-runtime-seconds", "25", "--stop-grace-seconds", "2", "--", PY, str(script))
    description = submitter.describe("limited")
    assert description["TrainingJobStatus"] == "Stopped", description.get("FailureReason")
    assert description["SecondaryStatus"] == "MaxRuntimeExceeded"
    assert done.returncode != 0
    for host in ("algo-1", "algo-2"):
        assert "tick" in submitter.records("limited", host)


def test_a_node_killed_mid_job_fails_it_naming_the_host_and_node(submitter: Submitter, tmp_path: Path,
                                                                 cluster: RayCluster) -> None:
    script = job(submitter, tmp_path, PIDS_JOB, "pids")
    running = submitter.start("run", "--name", "killed", "--launcher", "ray", "--instance-count", "3",
                              "--stop-grace-seconds", "2", "--", PY, str(script))
    try:
        submitter.wait("killed", lambda d: d["SecondaryStatus"] == "Training")
        placements = {p["Host"]: p for p in submitter.store.get_job("killed").doc["HostPlacements"]}  # type: ignore[union-attr]
        victim = placements["algo-2"]
        index = node_of(cluster, victim["NodeId"])
        deadline = time.monotonic() + 60
        while "tick" not in submitter.records("killed", "algo-2"):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        orphans = host_pids(submitter, "killed", "algo-2")
        cluster.kill_node(index)
        description = submitter.wait("killed", lambda d: d["TrainingJobStatus"] in ("Failed", "Stopped", "Completed"))
        stdout, stderr = running.communicate(timeout=120)
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    assert description["TrainingJobStatus"] == "Failed", description
    reason = description["FailureReason"]
    assert "algo-2" in reason and victim["NodeId"] in reason, reason
    assert "tick" in submitter.records("killed", "algo-2")  # what it printed before stays
    for host in ("algo-1", "algo-3"):  # the others were ended: their last records came before the end
        assert "tick" in submitter.records("killed", host)
    assert running.returncode != 0
    assert "ended Failed" in stderr
    assert all(process_ends(pid) for pid in orphans)  # the host's processes did not outlive its node


def test_a_host_agent_lost_alone_takes_its_hosts_processes_with_it(submitter: Submitter, tmp_path: Path,
                                                                   cluster: RayCluster) -> None:
    import psutil

    script = job(submitter, tmp_path, PIDS_JOB, "pids")
    done = submitter.run("run", "--name", "agentless", "--detach", "--launcher", "ray", "--instance-count", "2",
                         "--stop-grace-seconds", "2", "--", PY, str(script))
    assert done.returncode == 0, done.stderr
    pids = {host: host_pids(submitter, "agentless", host) for host in ("algo-1", "algo-2")}
    placements = {p["Host"]: p for p in submitter.store.get_job("agentless").doc["HostPlacements"]}  # type: ignore[union-attr]
    index = node_of(cluster, placements["algo-2"]["NodeId"])
    def title(pid: int) -> str:
        try:
            return " ".join(psutil.Process(pid).cmdline())
        except psutil.Error:
            return ""

    [agent] = [pid for pid in cluster.node_pids(index) if title(pid).startswith("ray::HostAgent")]
    os.kill(agent, signal.SIGKILL)  # the agent's Ray worker alone: its node stays up
    description = submitter.wait("agentless", lambda d: d["TrainingJobStatus"] != "InProgress")
    assert description["TrainingJobStatus"] == "Failed"
    assert "algo-2 was lost" in description["FailureReason"], description["FailureReason"]
    assert all(process_ends(pid) for pid in pids["algo-2"])  # its lifeline ended them, daemon and all
    assert all(process_ends(pid) for pid in pids["algo-1"])  # the job's end ended the other host
    cluster.wait_nodes(timeout=10.0)  # and its node was not harmed: every node is alive


def test_a_coordinator_lost_leaves_its_jobs_to_be_reaped(submitter: Submitter, tmp_path: Path,
                                                         cluster: RayCluster) -> None:
    script = job(submitter, tmp_path, PIDS_JOB, "pids")
    jobs = {"orphaned": ("algo-1", "algo-2"), "orphaned-too": ("algo-1",)}  # two jobs of one coordinator
    for name, hosts in jobs.items():
        done = submitter.run("run", "--name", name, "--detach", "--launcher", "ray", "--instance-count",
                             str(len(hosts)), "--", PY, str(script))
        assert done.returncode == 0, done.stderr
    pids = [pid for name, hosts in jobs.items() for host in hosts for pid in host_pids(submitter, name, host)]
    [supervisor] = {submitter.store.get_job(name).supervisor["pid"] for name in jobs}  # type: ignore[union-attr]
    assert supervisor in cluster.node_pids(0)
    os.kill(supervisor, signal.SIGKILL)  # the coordinator's Ray worker, on the head
    # any command on the supervisor's machine notices, and reaps the jobs
    for name in jobs:
        description = submitter.wait(name, lambda d: d["TrainingJobStatus"] != "InProgress")
        assert description["TrainingJobStatus"] == "Failed"
        assert f"supervising process (pid {supervisor}) ended" in description["FailureReason"]
        assert "tick" in submitter.records(name, "algo-1")
    assert all(process_ends(pid) for pid in pids)  # Ray ended the agents it owned, their lifelines the hosts
    # the next job gets a coordinator of its own
    done = submitter.run("run", "--name", "after", "--launcher", "ray", "--", PY, "-c", "print('after')")
    assert done.returncode == 0, done.stderr
    assert submitter.records("after", "algo-1") == ["after"]


def test_the_coordinator_ends_once_idle_and_the_next_job_starts_another(submitter: Submitter) -> None:
    done = submitter.run("run", "--name", "first", "--launcher", "ray", "--", PY, "-c", "print('first')")
    assert done.returncode == 0, done.stderr
    coordinator = submitter.store.get_job("first").supervisor["pid"]  # type: ignore[union-attr]
    assert process_ends(coordinator, timeout=120)  # the cluster's nodes say TRAINMON_COORDINATOR_IDLE_SECONDS=3
    done = submitter.run("run", "--name", "second", "--launcher", "ray", "--", PY, "-c", "print('second')")
    assert done.returncode == 0, done.stderr
    assert submitter.records("second", "algo-1") == ["second"]
    assert submitter.store.get_job("second").supervisor["pid"] != coordinator  # type: ignore[union-attr]


def test_too_few_nodes_fail_at_once_or_wait_as_asked(submitter: Submitter, tmp_path: Path) -> None:
    script = job(submitter, tmp_path, PRINTING_JOB, "printing")
    done = submitter.run("run", "--name", "toomany", "--launcher", "ray", "--instance-count", "5",
                         "--", PY, str(script))
    description = submitter.describe("toomany")
    assert description["TrainingJobStatus"] == "Failed"
    assert description["FailureReason"].startswith("CapacityError: ")
    assert "5 hosts" in description["FailureReason"] and "has 3 nodes" in description["FailureReason"]
    assert done.returncode != 0
    done = submitter.run("run", "--name", "waits", "--launcher", "ray", "--instance-count", "5",
                         "--wait-for-nodes", "--resource-wait-seconds", "3", "--", PY, str(script))
    description = submitter.describe("waits")
    assert description["TrainingJobStatus"] == "Failed"
    assert "within 3 s" in description["FailureReason"]
    messages = [t["StatusMessage"] for t in description["SecondaryStatusTransitions"]]
    assert any(m.startswith("Waiting for the Ray cluster to place 5 hosts") for m in messages), messages


def test_an_unreachable_cluster_fails_the_job_with_the_reason(submitter: Submitter, tmp_path: Path) -> None:
    script = job(submitter, tmp_path, PRINTING_JOB, "printing")
    done = submitter.run("run", "--name", "nowhere", "--launcher", "ray", "--ray-address", "127.0.0.1:9",
                         "--", PY, str(script))
    assert done.returncode != 0
    reason = submitter.describe("nowhere")["FailureReason"]
    assert "cannot reach the Ray cluster at 127.0.0.1:9" in reason, reason


ESTIMATOR_DRIVER = """
import sys
from trainmon.sdk.estimator import Estimator
estimator = Estimator(image_uri=f"{sys.executable} {sys.argv[1]}", instance_count=2, launcher="ray",
                      host_resources={"CPU": 1}, metric_definitions=[{"Name": "loss", "Regex": "loss=(\\S+)"}],
                      rules=[])
estimator.fit(wait=True, logs="None")
print(estimator.latest_training_job.describe()["TrainingJobStatus"], estimator.model_data)
"""


TUNED_JOB = """
import json, os
lr = float(json.loads(os.environ["SM_HPS"])["lr"])
print("node", os.environ["TRAINMON_RAY_NODE_ID"], flush=True)
for step in range(3):
    print(f"step={step} loss={(lr - 0.1) ** 2 + 1 / (step + 1)}", flush=True)
"""


def test_a_tuning_jobs_trials_run_on_the_cluster(submitter: Submitter, tmp_path: Path) -> None:
    script = job(submitter, tmp_path, TUNED_JOB, "tuned")
    request = {
        "HyperParameterTuningJobName": "on-ray",
        "HyperParameterTuningJobConfig": {
            "Strategy": "Random", "RandomSeed": 1,
            "HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": "loss"},
            "ResourceLimits": {"MaxNumberOfTrainingJobs": 3, "MaxParallelTrainingJobs": 2},
            "ParameterRanges": {"ContinuousParameterRanges": [{"Name": "lr", "MinValue": "0.01", "MaxValue": "1"}]}},
        "TrainingJobDefinition": {
            "AlgorithmSpecification": {"TrainingImage": f"{PY} {script}", "TrainingInputMode": "File",
                                       "MetricDefinitions": [{"Name": "loss", "Regex": "loss=(\\S+)"}]},
            "TrainmonConfig": {"Launcher": "ray", "HostResources": {"CPU": 1}}},
    }
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps(request), encoding="utf-8")
    done = submitter.run("tune", str(path))
    assert done.returncode == 0, done.stderr
    trials = tuning.list_training_jobs_for_hyper_parameter_tuning_job(
        submitter.store, HyperParameterTuningJobName="on-ray")["TrainingJobSummaries"]
    assert len(trials) == 3 and all(t["TrainingJobStatus"] == "Completed" for t in trials)
    for trial in trials:  # each ran on a node of the cluster, its objective read from what it printed there
        row = submitter.store.get_job(trial["TrainingJobName"])
        assert row is not None and row.doc["HostPlacements"][0]["NodeId"]  # type: ignore[typeddict-item]
        lr = float(trial["TunedHyperParameters"]["lr"])
        value = trial["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]
        assert value == pytest.approx((lr - 0.1) ** 2 + 1 / 3)


def test_the_estimator_runs_a_job_on_ray(submitter: Submitter, tmp_path: Path) -> None:
    script = job(submitter, tmp_path, PRINTING_JOB, "printing")
    done = subprocess.run([PY, "-c", ESTIMATOR_DRIVER, str(script)], env=submitter.env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    status, model = done.stdout.split()[-2:]
    assert status == "Completed"
    assert Path(model.removeprefix("file://")).is_file()  # packed on algo-1's node, into the shared directory
    [name] = [s["TrainingJobName"] for s in sagemaker.list_training_jobs(submitter.store)["TrainingJobSummaries"]]
    placements = submitter.store.get_job(name).doc["HostPlacements"]  # type: ignore[union-attr]
    assert len({p["NodeId"] for p in placements}) == 2


TENSOR_JOB = """
import json, os
from trainmon.debug import Hook
hook = Hook(save_interval=1)
broken = os.environ["SM_CURRENT_HOST"] == json.loads(os.environ["SM_HOSTS"])[-1]  # the last host's explode
for step in range(5):
    hook.record("gradient/w", [float("nan") if broken and step == 3 else 0.5, 1.0], "gradients")
    hook.end_step()
print("done", flush=True)
"""


def test_the_tensor_rules_read_every_nodes_tensor_hook(submitter: Submitter, tmp_path: Path,
                                                       cluster: RayCluster) -> None:
    script = job(submitter, tmp_path, TENSOR_JOB, "tensors")
    done = submitter.run("run", "--name", "tensors", "--launcher", "ray", "--instance-count", "2",
                         "--disable-profiler", "--rule", "ExplodingTensor", "--", PY, str(script))
    assert done.returncode == 0, done.stderr
    answer = trainmon.list_rule_findings(submitter.store, TrainingJobName="tensors")
    [rule] = answer["Rules"]
    assert rule["RuleEvaluationStatus"] == "IssuesFound", rule
    assert [(f["Host"], f["Step"], f["Tensor"]) for f in answer["RuleFindings"]] == [("algo-2", 3, "gradient/w")]
    # a host on the head, where the supervisor keeps its copies of the tensor files: read once, not copied onto itself
    done = submitter.run("run", "--name", "on-head", "--launcher", "ray", "--host-resources", '{"head": 0.01}',
                         "--disable-profiler", "--rule", "ExplodingTensor", "--", PY, str(script))
    assert done.returncode == 0, done.stderr
    placement = submitter.store.get_job("on-head").doc["HostPlacements"][0]  # type: ignore[union-attr]
    assert node_of(cluster, placement["NodeId"]) == 0
    answer = trainmon.list_rule_findings(submitter.store, TrainingJobName="on-head")
    assert [(f["Host"], f["Step"], f["Tensor"]) for f in answer["RuleFindings"]] == [("algo-1", 3, "gradient/w")]


MODEL_JOB = """
import os
with open(os.path.join(os.environ["SM_MODEL_DIR"], "weights.txt"), "w") as model:
    model.write("written on " + os.environ["SM_CURRENT_HOST"])
print("saved", flush=True)
"""


def test_the_model_archive_goes_to_an_s3_compatible_service_from_algo_1s_node(submitter: Submitter, tmp_path: Path,
                                                                               cluster: RayCluster) -> None:
    import boto3

    service = start_server(tmp_path / "s3-home")  # a real S3-compatible service: trainmon's own gateway
    try:
        key = service.key  # the one the service issued on its first start
        s3 = boto3.client("s3", endpoint_url=service.url, aws_access_key_id=key.AccessKeyId,
                          aws_secret_access_key=key.SecretAccessKey, region_name="us-east-1")
        s3.create_bucket(Bucket="models")
        cluster.aws_config.write_text(  # what each node's AWS configuration says, as an operator would set it
            f"[default]\nregion = us-east-1\naws_access_key_id = {key.AccessKeyId}\n"
            f"aws_secret_access_key = {key.SecretAccessKey}\n"
            f"endpoint_url = {service.url}\ns3 =\n    addressing_style = path\n", encoding="utf-8")
        script = job(submitter, tmp_path, MODEL_JOB, "model")
        done = submitter.run("run", "--name", "tos3", "--launcher", "ray", "--instance-count", "2",
                             "--output-path", "s3://models/out", "--", PY, str(script))
        assert done.returncode == 0, done.stdout + done.stderr
        description = submitter.describe("tos3")
        assert description["ModelArtifacts"]["S3ModelArtifacts"] == "s3://models/out/tos3/output/model.tar.gz"
        body = s3.get_object(Bucket="models", Key="out/tos3/output/model.tar.gz")["Body"].read()
        with tarfile.open(fileobj=io.BytesIO(body)) as archive:
            assert archive.getnames() == ["weights.txt"]
            assert archive.extractfile("weights.txt").read() == b"written on algo-1"  # type: ignore[union-attr]
        # a bucket the nodes cannot reach fails the job before it trains, saying what to check
        done = submitter.run("run", "--name", "nobucket", "--launcher", "ray", "--output-path", "s3://absent/out",
                             "--", PY, str(script))
        assert done.returncode != 0
        description = submitter.describe("nobucket")
        assert description["TrainingJobStatus"] == "Failed"
        assert description["FailureReason"].startswith(
            "ClientError: OutputDataConfig.S3OutputPath: algo-1's node cannot reach bucket 'absent'"), description
        assert submitter.records("nobucket", "algo-1") == []  # it never ran
    finally:
        service.stop()


OUTAGE_JOB = """
import os, sys, time
gates = sys.argv[1]
host = os.environ["SM_CURRENT_HOST"]
def wait(gate):
    while not os.path.exists(os.path.join(gates, gate)):
        time.sleep(0.05)
for i in range(5):
    print(f"before={i}", flush=True)
wait("down")
for i in range(200):
    print(f"during={i}", flush=True)
open(os.path.join(gates, "printed-" + host), "w").close()
wait("up")
for i in range(5):
    print(f"after={i}", flush=True)
"""


def test_hosts_run_through_a_store_outage_and_store_everything_when_it_returns(tmp_path: Path,
                                                                               cluster: RayCluster) -> None:
    with postgres_cluster() as server:  # a server of this test's own, to stop
        submitter = Submitter(cluster, server.url(server.create_database()), tmp_path / "submitter-home")
        gates = tmp_path / "gates"
        gates.mkdir()
        script = job(submitter, tmp_path, OUTAGE_JOB, "outage")
        done = submitter.run("run", "--name", "outage", "--detach", "--launcher", "ray", "--instance-count", "2",
                             "--metric", "during=during=(\\d+)", "--", PY, str(script), str(gates))
        assert done.returncode == 0, done.stderr
        hosts = ("algo-1", "algo-2")
        deadline = time.monotonic() + 120
        while not all("before=4" in submitter.records("outage", host) for host in hosts):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        server.stop()
        try:
            (gates / "down").touch()
            deadline = time.monotonic() + 120
            while not all((gates / f"printed-{host}").exists() for host in hosts):  # printed with no store to take it
                assert time.monotonic() < deadline
                time.sleep(0.1)
            time.sleep(5)  # the outage itself is the subject: the hosts' writers meet it for a while
        finally:
            server.start()
        (gates / "up").touch()
        description = submitter.wait("outage", lambda d: d["TrainingJobStatus"] != "InProgress", timeout=300)
        assert description["TrainingJobStatus"] == "Completed", description.get("FailureReason")
        expected = ([f"before={i}" for i in range(5)] + [f"during={i}" for i in range(200)]
                    + [f"after={i}" for i in range(5)])
        points = trainmon.get_job_metric_points(submitter.store, TrainingJobName="outage", MetricNames=["during"])
        for host in hosts:
            assert submitter.records("outage", host) == expected
            assert sorted(p["Value"] for p in points["Points"] if p["Host"] == host) == list(map(float, range(200)))
        submitter.store.close()


# -- refused up front ---------------------------------------------------------------------------


def refused(env: dict[str, str], *flags: str) -> str:
    done = subprocess.run([sys.executable, "-m", "trainmon", "run", "--name", "refused", "--launcher", "ray", *flags,
                           "--", PY, "-c", "pass"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    return done.stderr


def test_a_ray_job_on_the_embedded_store_is_refused_with_what_to_do(home: Path) -> None:
    import os

    env = {**os.environ, "TRAINMON_HOME": str(home), "RAY_ADDRESS": "127.0.0.1:1"}
    assert "set TRAINMON_DATABASE_URL to a PostgreSQL server every node reaches" in refused(env)
    store = open_store(home)
    assert sagemaker.list_training_jobs(store)["TrainingJobSummaries"] == []
    store.close()


@pytest.mark.parametrize(("flags", "message"), [
    ((), "a Ray job needs the address of a running Ray cluster"),
    (("--ray-address", "127.0.0.1:1", "--instance-type", "ml.x9.huge"), "'ml.x9.huge' is not in trainmon's table"),
    (("--ray-address", "127.0.0.1:1", "--host-resources", '{"CPU": -1}'), "greater than or equal to 0"),
])
def test_a_ray_job_is_refused_up_front(home: Path, database: str, flags: tuple[str, ...], message: str) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update({"TRAINMON_HOME": str(home), "TRAINMON_DATABASE_URL": database})
    assert message in refused(env, *flags)
    store = open_store(home, database_url=database)
    assert sagemaker.list_training_jobs(store)["TrainingJobSummaries"] == []
    store.close()


def test_a_ray_job_is_refused_objects_only_this_machine_holds(home: Path, database: str) -> None:
    from trainmon.errors import ValidationException
    from trainmon.store.objects import ObjectStore

    ObjectStore(home).create_bucket("bucket")  # a bucket of this machine's object store
    (home / "s3" / "bucket" / "train").mkdir()
    (home / "s3" / "bucket" / "train" / "part-0").write_text("1,2\n", encoding="utf-8")
    store = open_store(home, database_url=database)
    request = {"TrainingJobName": "objects", "AlgorithmSpecification": {
        "TrainingInputMode": "File", "ContainerEntrypoint": [PY, "-c", "pass"]},
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
        "TrainmonConfig": {"Launcher": "ray", "RayAddress": "127.0.0.1:1"}}
    with pytest.raises(ValidationException, match="OutputDataConfig.S3OutputPath 's3://bucket/out': the objects of "
                       "trainmon's object store live on this machine"):
        sagemaker.create_training_job(store, **request)
    channel = {"ChannelName": "train", "DataSource": {"S3DataSource": {"S3Uri": "s3://bucket/train"}}}
    with pytest.raises(ValidationException, match="InputDataConfig.train 's3://bucket/train': the hosts of a Ray job "
                       "read their channels on their own nodes"):
        sagemaker.create_training_job(store, **{**request, "OutputDataConfig": {"S3OutputPath": str(home)},
                                                "InputDataConfig": [channel]})
    assert sagemaker.list_training_jobs(store)["TrainingJobSummaries"] == []
    store.close()
