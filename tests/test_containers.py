"""Training images run as containers (real Podman, images built offline: tests/containers.py),
under SageMaker's container contract, with everything trainmon does around a process."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import psutil
import pytest

import trainmon
from trainmon.errors import ValidationException, WaiterError
from trainmon.runtime.containers import engine as engines
from trainmon.runtime.containers.image import named_image, parse
from trainmon.store import open_store

from . import containers
from .conftest import run_cli, wait_for

SEED_DEFINITIONS = [{"Name": "train:error", "Regex": "Train_error=(.*?);"},
                    {"Name": "validation:error", "Regex": "Valid_error=(.*?);"}]
GROUP = "/aws/sagemaker/TrainingJobs"


@pytest.fixture(scope="module")
def algo() -> str:
    return containers.algo_image()


def _request(name: str, image: str, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::123456789012:role/local",
        "AlgorithmSpecification": {"TrainingImage": image, "TrainingInputMode": "File",
                                   "MetricDefinitions": SEED_DEFINITIONS},
        "OutputDataConfig": {"S3OutputPath": str(tmp_path / "out")},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        **extra,
    }


def _finished(sm: Any, name: str) -> dict[str, Any]:
    with contextlib.suppress(WaiterError):  # a job that Failed: its description says how
        sm.get_waiter("training_job_completed_or_stopped").wait(
            TrainingJobName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 900})
    return dict(sm.describe_training_job(TrainingJobName=name))


def _messages(name: str, host: str = "algo-1") -> list[str]:
    logs = trainmon.client("logs")
    streams = logs.describe_log_streams(logGroupName=GROUP, logStreamNamePrefix=f"{name}/{host}")["logStreams"]
    return [event["message"] for stream in streams for event in logs.get_log_events(
        logGroupName=GROUP, logStreamName=stream["logStreamName"], startFromHead=True)["events"]]


def _tag(home: Path, name: str) -> str:
    store = open_store(home)
    try:
        job = store.get_job(name)
        assert job is not None and job.supervisor
        return str(job.supervisor["tag"])
    finally:
        store.close()


# -- what names an image -----------------------------------------------------------------------


@pytest.mark.parametrize(("given", "name"), [
    ("my-algo:latest", "my-algo:latest"),
    ("team/algo", "team/algo:latest"),
    ("localhost/trainmon-test-base:1", "localhost/trainmon-test-base:1"),
    ("123456789012.dkr.ecr.us-west-2.amazonaws.com/my-algo:latest",
     "123456789012.dkr.ecr.us-west-2.amazonaws.com/my-algo:latest"),
    ("registry.example:5000/a/b@sha256:" + "a" * 64, "registry.example:5000/a/b@sha256:" + "a" * 64),
])
def test_image_references(given: str, name: str) -> None:
    found = named_image(given)
    assert found is not None and found.name == name


@pytest.mark.parametrize("given", ["python3", "python3 train.py", "/usr/bin/env", "./train", "local", "",
                                   "Upper:1", "a:b:c", "name@sha256:short"])
def test_commands_and_directories_are_not_images(given: str) -> None:
    assert named_image(given) is None


def test_an_ecr_uri_is_known_as_one() -> None:
    found = parse("123456789012.dkr.ecr.eu-central-1.amazonaws.com/repo:1")
    assert found is not None and found.in_ecr and found.registry.startswith("123456789012.")
    assert not (parse("localhost/repo:1") or pytest.fail()).in_ecr


def test_no_engine_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(engines.EngineError, match="neither podman nor docker is installed"):
        engines.find({"PATH": str(tmp_path)})
    with pytest.raises(engines.EngineError, match="TRAINMON_CONTAINER_ENGINE=nothing-here is not an executable"):
        engines.find({engines.ENGINE_VARIABLE: "nothing-here", "PATH": str(tmp_path)})


# -- an image's job, end to end ----------------------------------------------------------------


def test_the_seed_definitions_on_an_images_output(home: Path, tmp_path: Path, algo: str) -> None:
    sm = trainmon.client("sagemaker")
    sm.create_training_job(**_request("byo-fit", algo, tmp_path, HyperParameters={"epochs": "4"}))
    doc = _finished(sm, "byo-fit")
    assert doc["TrainingJobStatus"] == "Completed", doc.get("FailureReason")
    final = {m["MetricName"]: m["Value"] for m in doc["FinalMetricDataList"]}
    assert final == {"train:error": pytest.approx(0.25), "validation:error": pytest.approx(0.375)}
    messages = _messages("byo-fit")
    assert messages[:2] == ["epoch 0 Train_error=1.0000; Valid_error=1.5000;",
                            "epoch 1 Train_error=0.5000; Valid_error=0.7500;"]
    assert "training done" in messages  # its stderr too
    assert doc["AlgorithmSpecification"]["TrainingImage"] == algo
    assert containers.left_by(_tag(home, "byo-fit")) == []


def test_the_container_contract(home: Path, tmp_path: Path, algo: str) -> None:
    data = tmp_path / "train-data"
    data.mkdir()
    (data / "part-0.csv").write_text("1,2\n")
    single = tmp_path / "labels.txt"
    single.write_text("a\n")
    channels = [{"ChannelName": name, "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": str(path)}}}
                for name, path in (("train", data), ("labels", single))]
    sm = trainmon.client("sagemaker")
    sm.create_training_job(**_request("byo-contract", algo, tmp_path, HyperParameters={"mode": "contract", "lr": "0.1"},
                                      InputDataConfig=channels, Environment={"FROM_REQUEST": "yes"}))
    doc = _finished(sm, "byo-contract")
    assert doc["TrainingJobStatus"] == "Completed", doc.get("FailureReason")
    (line,) = [m for m in _messages("byo-contract") if m.startswith("CONTRACT ")]
    seen = json.loads(line.removeprefix("CONTRACT "))
    assert seen["argv"] == ["/usr/local/bin/train"]  # "train", as SageMaker runs an image without an entry point
    assert seen["cwd"] == "/srv"  # the image's own WORKDIR
    assert seen["hostname"] == "algo-1"
    assert seen["hyperparameters"] == {"mode": "contract", "lr": "0.1"}
    assert seen["resourceconfig"]["current_host"] == "algo-1" and seen["resourceconfig"]["hosts"] == ["algo-1"]
    assert set(seen["inputdataconfig"]) == {"train", "labels"}
    assert seen["channels"] == {"labels": ["labels.txt"], "train": ["part-0.csv"]}
    env = seen["env"]
    assert env["SM_CHANNEL_TRAIN"] == "/opt/ml/input/data/train"
    assert env["SM_MODEL_DIR"] == "/opt/ml/model" and env["SM_OUTPUT_DATA_DIR"] == "/opt/ml/output/data"
    assert env["SM_HP_LR"] == "0.1" and env["FROM_REQUEST"] == "yes"
    assert env["TRAINING_JOB_NAME"] == "byo-contract" and env["TRAINING_JOB_ARN"] == doc["TrainingJobArn"]
    # ml.m5.large: 2 vCPUs and 8 GiB, at most this machine's
    assert env["SM_NUM_CPUS"] == str(min(2, os.cpu_count() or 1))
    assert seen["memory_limit"] == str(min(8 << 30, psutil.virtual_memory().total))
    assert "/usr/bin" in seen["path"] and str(Path(os.sys.executable).parent) not in seen["path"].split(":")
    model = Path(doc["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://"))
    with tarfile.open(model) as archive:
        assert archive.extractfile("weights.txt").read() == b"w=1\n"  # type: ignore[union-attr]
    with tarfile.open(model.parent / "output.tar.gz") as archive:
        assert archive.extractfile("summary.txt").read() == b"best=0.25\n"  # type: ignore[union-attr]
    assert (data / "part-0.csv").read_text() == "1,2\n"  # mounted read-only: the job cannot change its input


def test_the_failure_file_is_the_failure_reason(home: Path, tmp_path: Path, algo: str) -> None:
    sm = trainmon.client("sagemaker")
    sm.create_training_job(**_request("byo-fail", algo, tmp_path, HyperParameters={"mode": "fail"}))
    doc = _finished(sm, "byo-fail")
    assert doc["TrainingJobStatus"] == "Failed"
    assert doc["FailureReason"] == "ValueError: the learning rate must be positive"
    assert containers.left_by(_tag(home, "byo-fail")) == []


def test_entrypoint_and_arguments_replace_the_images(home: Path, tmp_path: Path, algo: str) -> None:
    sm = trainmon.client("sagemaker")
    request = _request("byo-entry", algo, tmp_path)
    request["AlgorithmSpecification"].update(ContainerEntrypoint=["/bin/sh", "-c"],
                                             ContainerArguments=['echo "Train_error=0.5; in $0"'])
    sm.create_training_job(**request)
    doc = _finished(sm, "byo-entry")
    assert doc["TrainingJobStatus"] == "Completed", doc.get("FailureReason")
    assert _messages("byo-entry") == ["Train_error=0.5; in /bin/sh"]
    assert doc["FinalMetricDataList"][0]["Value"] == 0.5


def test_stop_ends_the_container(home: Path, tmp_path: Path, algo: str) -> None:
    sm = trainmon.client("sagemaker")
    sm.create_training_job(**_request("byo-stop", algo, tmp_path, HyperParameters={"mode": "wait"},
                                      TrainmonConfig={"StopGraceSeconds": 2}))
    wait_for(lambda: "waiting" in _messages("byo-stop"), "the container's first line")
    tag = _tag(home, "byo-stop")
    assert len(containers.left_by(tag)) == 1
    sm.stop_training_job(TrainingJobName="byo-stop")
    doc = _finished(sm, "byo-stop")
    assert doc["TrainingJobStatus"] == "Stopped"
    assert containers.left_by(tag) == []


def test_max_runtime_ends_the_container(home: Path, tmp_path: Path, algo: str) -> None:
    sm = trainmon.client("sagemaker")
    sm.create_training_job(**_request("byo-runtime", algo, tmp_path, HyperParameters={"mode": "wait"},
                                      StoppingCondition={"MaxRuntimeInSeconds": 2},
                                      TrainmonConfig={"StopGraceSeconds": 1}))
    doc = _finished(sm, "byo-runtime")
    assert doc["TrainingJobStatus"] == "Stopped"
    assert containers.left_by(_tag(home, "byo-runtime")) == []


def test_a_killed_supervisors_container_is_reaped(home: Path, tmp_path: Path, algo: str) -> None:
    sm = trainmon.client("sagemaker")
    sm.create_training_job(**_request("byo-reaped", algo, tmp_path, HyperParameters={"mode": "wait"}))
    wait_for(lambda: "waiting" in _messages("byo-reaped"), "the container's first line")
    store = open_store(home)
    try:
        supervisor = store.get_job("byo-reaped").supervisor  # type: ignore[union-attr]
    finally:
        store.close()
    tag = supervisor["tag"]
    assert len(containers.left_by(tag)) == 1
    os.kill(supervisor["pid"], signal.SIGKILL)
    wait_for(lambda: sm.describe_training_job(TrainingJobName="byo-reaped")["TrainingJobStatus"] == "Failed",
             "the job to be reaped")
    assert containers.left_by(tag) == []
    assert "supervising process" in sm.describe_training_job(TrainingJobName="byo-reaped")["FailureReason"]


def test_two_hosts_reach_each_other_by_name(home: Path, tmp_path: Path, algo: str) -> None:
    sm = trainmon.client("sagemaker")
    sm.create_training_job(**_request("byo-pair", algo, tmp_path, HyperParameters={"mode": "exchange"},
                                      ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 2,
                                                      "VolumeSizeInGB": 1}))
    doc = _finished(sm, "byo-pair")
    assert doc["TrainingJobStatus"] == "Completed", doc.get("FailureReason")
    assert _messages("byo-pair", "algo-1") == ["algo-1 got hello from algo-2"]
    assert _messages("byo-pair", "algo-2") == ["sent"]
    tag = _tag(home, "byo-pair")
    assert containers.left_by(tag) == []
    networks = containers.engine().call(["network", "ls", "--quiet", "--filter", f"label={engines.TAG_LABEL}={tag}"])
    assert networks.stdout.split() == []


def test_network_isolation_means_no_network(home: Path, tmp_path: Path, algo: str) -> None:
    sm = trainmon.client("sagemaker")
    request = _request("byo-isolated", algo, tmp_path, EnableNetworkIsolation=True)
    request["AlgorithmSpecification"].update(ContainerEntrypoint=["/bin/sh", "-c"],
                                             ContainerArguments=["ls /sys/class/net"])
    sm.create_training_job(**request)
    doc = _finished(sm, "byo-isolated")
    assert doc["TrainingJobStatus"] == "Completed", doc.get("FailureReason")
    assert _messages("byo-isolated") == ["lo"]


# -- bad input ---------------------------------------------------------------------------------


def test_an_image_that_does_not_exist_fails_the_job_saying_why(home: Path, tmp_path: Path) -> None:
    sm = trainmon.client("sagemaker")
    sm.create_training_job(**_request("byo-missing", "localhost/no-such-algo:1", tmp_path))
    doc = _finished(sm, "byo-missing")
    assert doc["TrainingJobStatus"] == "Failed"
    reason = doc["FailureReason"]
    assert reason.startswith("ClientError: image localhost/no-such-algo:1 is not on this machine and could not be "
                             "pulled")
    assert "podman build -t localhost/no-such-algo:1" in reason


def test_a_train_that_is_not_executable(home: Path, tmp_path: Path, algo: str) -> None:
    sm = trainmon.client("sagemaker")
    request = _request("byo-noexec", algo, tmp_path)
    request["AlgorithmSpecification"].update(ContainerEntrypoint=["/opt/ml/input/config/hyperparameters.json"])
    sm.create_training_job(**request)
    doc = _finished(sm, "byo-noexec")
    assert doc["TrainingJobStatus"] == "Failed"
    assert "permission denied" in doc["FailureReason"].lower()
    assert containers.left_by(_tag(home, "byo-noexec")) == []


def test_an_engine_that_does_not_answer_fails_the_job_saying_why(home: Path, tmp_path: Path, algo: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine installed but not running (here Podman told to use a service that is not there, as
    Docker's client is without its daemon): the job fails naming it and what to check."""
    monkeypatch.setenv("CONTAINER_HOST", f"unix://{tmp_path / 'no-service.sock'}")
    sm = trainmon.client("sagemaker")
    sm.create_training_job(**_request("byo-engine-down", algo, tmp_path))
    doc = _finished(sm, "byo-engine-down")
    assert doc["TrainingJobStatus"] == "Failed"
    reason = doc["FailureReason"]
    assert reason.startswith("ClientError: podman cannot be used (")
    assert "no-service.sock" in reason and "check that it runs and that you may use it (`podman info`" in reason


@pytest.fixture(scope="module")
def foreign_image(algo: str) -> str:
    """The base image's files as an image for another processor than this machine's."""
    engine = containers.engine()
    foreign = "arm64" if engines.machine_architecture() != "arm64" else "amd64"
    name = f"localhost/trainmon-test-foreign:{foreign}"
    if not engine.present(name):
        created = engine.call(["create", containers.base_image(), "true"]).stdout.strip()
        try:
            with tempfile.TemporaryDirectory() as scratch:
                archive = os.path.join(scratch, "root.tar")
                engine.call(["export", "--output", archive, created])
                engine.call(["import", "--arch", foreign, archive, name], timeout_s=600)
        finally:
            engine.call(["rm", "--force", created], check=False)
    return name


def test_an_image_for_another_processor_fails_the_job_saying_what_to_do(home: Path, tmp_path: Path,
                                                                        foreign_image: str) -> None:
    built_for = containers.engine().architecture(foreign_image)
    if engines._emulated(built_for):
        pytest.skip(f"this machine runs {built_for} programs through an emulator: such an image runs")
    sm = trainmon.client("sagemaker")
    sm.create_training_job(**_request("byo-foreign", foreign_image, tmp_path))
    doc = _finished(sm, "byo-foreign")
    assert doc["TrainingJobStatus"] == "Failed"
    here = engines.machine_architecture()
    assert doc["FailureReason"] == (
        f"ClientError: image {foreign_image} is built for {built_for} and this machine is {here}: build it for "
        f"{here} (`podman build --platform linux/{here} ...`), or register an emulator for {built_for} (Debian: "
        "`apt-get install qemu-user-static binfmt-support`).")
    assert containers.left_by(_tag(home, "byo-foreign")) == []


def test_no_engine_refuses_the_job_before_it_exists(home: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(engines.ENGINE_VARIABLE, str(tmp_path / "no-engine"))
    sm = trainmon.client("sagemaker")
    with pytest.raises(ValidationException, match="is a container image, and TRAINMON_CONTAINER_ENGINE="):
        sm.create_training_job(**_request("byo-noengine", "my-algo:1", tmp_path))


# -- the command line --------------------------------------------------------------------------


def test_trainmon_run_image(home: Path, tmp_path: Path, algo: str) -> None:
    done = run_cli("run", "--name", "byo-cli", "--image", algo, "--metric", "train:error=Train_error=(.*?);",
                   "-H", "epochs=2", "--disable-profiler", "--system-metrics-interval", "1")
    assert done.returncode == 0, done.stderr
    assert "epoch 1 Train_error=0.5000; Valid_error=0.7500;" in done.stdout
    assert "train:error" in done.stdout
    listed = run_cli("images", check=True)
    assert algo in listed.stdout


def test_trainmon_run_image_refuses_a_command_line(home: Path) -> None:
    done = run_cli("run", "--image", "python3 train.py")
    assert done.returncode == 2
    assert "does not name a container image" in done.stderr


def test_isolated_hosts_on_ray_nodes_are_refused(home: Path, tmp_path: Path) -> None:
    """Containers on Ray's nodes reach each other through their nodes' network, which trainmon cannot
    cut off: several isolated hosts there are refused before the job exists, saying where they can run."""
    from trainmon.api.training_request import job_document

    request = _request("byo-ray", "my-algo:1", tmp_path, EnableNetworkIsolation=True,
                       TrainmonConfig={"Launcher": "ray", "RayAddress": "127.0.0.1:6379"})
    request["ResourceConfig"]["InstanceCount"] = 2
    with pytest.raises(ValidationException, match="EnableNetworkIsolation: the hosts of a Ray job reach each other "
                       "through their nodes' own network"):
        job_document(request, 0.0, home=home, database_url="postgresql://trainmon@127.0.0.1/trainmon")


def test_estimator_with_an_image_uri(home: Path, tmp_path: Path, algo: str) -> None:
    estimator = trainmon.Estimator(image_uri=algo, role="local", instance_type="ml.m5.large",
                                   hyperparameters={"epochs": "2"}, metric_definitions=SEED_DEFINITIONS,
                                   output_path=str(tmp_path / "out"))
    estimator.fit(wait=True, logs="None")
    name = estimator.latest_training_job.job_name
    assert name.startswith("trainmon-test-algo-")  # the repository's name, as the SageMaker SDK makes it
    frame = estimator.training_job_analytics.dataframe()
    assert sorted(zip(frame["metric_name"], frame["value"], strict=True)) == [
        ("train:error", 0.5), ("train:error", 1.0), ("validation:error", 0.75), ("validation:error", 1.5)]
    attached = trainmon.Estimator.attach(name)
    assert attached.image_uri == algo


def test_system_metrics_are_the_containers_own(home: Path, tmp_path: Path, algo: str) -> None:
    """The monitor follows the container's processes, not the engine's client that waits for them."""
    from .test_monitor import host_metric

    sm = trainmon.client("sagemaker")
    for name, code in (("byo-busy", "import time\nend = time.time() + 3\nwhile time.time() < end:\n    pass\n"),
                       ("byo-idle", "import time\ntime.sleep(3)\n")):
        request = _request(name, algo, tmp_path, TrainmonConfig={"SystemMetricsIntervalSeconds": 1},
                           ProfilerConfig={"DisableProfiler": True})
        request["AlgorithmSpecification"].update(ContainerEntrypoint=["/usr/bin/python3", "-c"],
                                                 ContainerArguments=[code])
        sm.create_training_job(**request)
    for name in ("byo-busy", "byo-idle"):
        assert _finished(sm, name)["TrainingJobStatus"] == "Completed"
    store = open_store(home)
    try:
        busy, idle = host_metric(store, "byo-busy", "CPUUtilization"), host_metric(store, "byo-idle", "CPUUtilization")
        assert len(busy) >= 2 and len(idle) >= 2  # 3 s jobs, 1 s intervals
        assert sum(busy) > sum(idle)  # a busy loop outweighs a sleep: the container's, not its client's
        assert max(host_metric(store, "byo-busy", "ProcessCount")) == 1
    finally:
        store.close()


def test_checkpoints_are_restored_and_kept(home: Path, tmp_path: Path, algo: str) -> None:
    """CheckpointConfig: what one job leaves in /opt/ml/checkpoints the next one finds there, kept in
    a local directory or under an s3:// prefix of the object store."""
    from trainmon.store.objects import ObjectStore

    kept = tmp_path / "checkpoints"
    objects = ObjectStore(home)
    objects.create_bucket("runs")
    objects.put_object("runs", "ckpt/step.txt", b"41")
    sm = trainmon.client("sagemaker")
    for name, uri in (("byo-ckpt-1", str(kept)), ("byo-ckpt-2", str(kept)), ("byo-ckpt-s3", "s3://runs/ckpt")):
        sm.create_training_job(**_request(name, algo, tmp_path, HyperParameters={"mode": "checkpoint"},
                                          CheckpointConfig={"S3Uri": uri}))
        assert _finished(sm, name)["TrainingJobStatus"] == "Completed"
    assert _messages("byo-ckpt-1") == ["resumed at step 0"]
    assert _messages("byo-ckpt-2") == ["resumed at step 1"]
    assert (kept / "step.txt").read_text() == "2"
    assert _messages("byo-ckpt-s3") == ["resumed at step 41"]
    body, _ = objects.open_object("runs", "ckpt/step.txt")
    with body:
        assert body.read() == b"42"
    request = _request("byo-ckpt-path", algo, tmp_path, CheckpointConfig={"S3Uri": str(kept), "LocalPath": "/ckpt"})
    request["AlgorithmSpecification"].update(ContainerEntrypoint=["/bin/sh", "-c"],
                                             ContainerArguments=["cat /ckpt/step.txt; echo; echo 7 > /ckpt/step.txt"])
    sm.create_training_job(**request)
    assert _finished(sm, "byo-ckpt-path")["TrainingJobStatus"] == "Completed"
    assert _messages("byo-ckpt-path") == ["2"]  # restored at the LocalPath the request names
    assert (kept / "step.txt").read_text() == "7\n"


def test_a_checkpoint_place_that_cannot_be_is_refused(home: Path, tmp_path: Path) -> None:
    sm = trainmon.client("sagemaker")
    with pytest.raises(ValidationException, match="CheckpointConfig.S3Uri 's3://nobucket/x'"):
        sm.create_training_job(**_request("byo-ckpt-bad", "my-algo:1", tmp_path,
                                          CheckpointConfig={"S3Uri": "s3://nobucket/x"}))
    with pytest.raises(ValidationException, match="CheckpointConfig.LocalPath 'relative' must be an absolute path"):
        sm.create_training_job(**_request("byo-ckpt-bad", "my-algo:1", tmp_path,
                                          CheckpointConfig={"S3Uri": str(tmp_path / "kept"), "LocalPath": "relative"}))
    # a place that would copy checkpoints into themselves, or that means wherever the job is created
    for uri, said in (("", "CheckpointConfig.S3Uri '': a local directory must be given by its absolute path"),
                      ("ckpt", "CheckpointConfig.S3Uri 'ckpt': a local directory must be given by its absolute path"),
                      (str(home.parent), f"CheckpointConfig.S3Uri '{home.parent}' holds trainmon's directory of jobs"),
                      (home.as_uri(), f"CheckpointConfig.S3Uri '{home.as_uri()}' holds trainmon's directory of jobs"),
                      (str(home / "jobs" / "x"), "is in trainmon's directory of jobs")):
        with pytest.raises(ValidationException, match=re.escape(said)):
            sm.create_training_job(**_request("byo-ckpt-bad", "my-algo:1", tmp_path, CheckpointConfig={"S3Uri": uri}))
    for local in (tmp_path / "kept" / "here", tmp_path):  # a process's LocalPath inside S3Uri, or holding it
        with pytest.raises(ValidationException, match="hold one another: checkpoints would be copied into themselves"):
            sm.create_training_job(**_request("byo-ckpt-bad", "my-algo:1", tmp_path, CheckpointConfig={
                "S3Uri": str(tmp_path / "kept"), "LocalPath": str(local)}))
    assert sm.list_training_jobs()["TrainingJobSummaries"] == []


def test_a_process_jobs_checkpoints_are_at_its_local_path(home: Path, tmp_path: Path, script) -> None:
    kept, local = tmp_path / "kept", tmp_path / "work"
    kept.mkdir()
    (kept / "step.txt").write_text("5")
    train = script(f"""
        from pathlib import Path
        path = Path({str(local)!r}) / "step.txt"
        print("resumed at step", path.read_text(), flush=True)
        path.write_text("6")
        """)
    sm = trainmon.client("sagemaker")
    request = _request("proc-ckpt", "unused", tmp_path, CheckpointConfig={"S3Uri": kept.as_uri(),
                                                                           "LocalPath": str(local)})
    request["AlgorithmSpecification"] = {"TrainingInputMode": "File", "ContainerEntrypoint": [sys.executable, str(train)]}
    sm.create_training_job(**request)
    assert _finished(sm, "proc-ckpt")["TrainingJobStatus"] == "Completed"
    assert _messages("proc-ckpt") == ["resumed at step 5"]
    assert (kept / "step.txt").read_text() == "6"


# -- GPUs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("instance_type", "machine", "hosts", "expected"), [
    ("ml.g5.xlarge", ["0", "1", "2", "3"], 2, [["0"], ["1"]]),  # one each, in turn
    ("ml.g5.12xlarge", ["0", "1", "2", "3", "4", "5", "6", "7"], 2, [["0", "1", "2", "3"], ["4", "5", "6", "7"]]),
    ("ml.g5.12xlarge", ["0", "1"], 2, [["0", "1"], ["0", "1"]]),  # too few: as many as there are, shared
    ("ml.g5.xlarge", ["0", "1"], 3, [["0"], ["1"], ["0"]]),
    ("ml.m5.large", ["0", "1"], 1, [[]]),  # a type without GPUs gets none
    ("local", ["0", "1"], 2, [["0", "1"], ["0", "1"]]),  # local: every GPU, as a process sees them
    ("ml.g5.xlarge", [], 1, [[]]),  # a machine without GPUs has none to give
    ("ml.p3.8xlarge", ["GPU-a", "GPU-b", "GPU-c", "GPU-d"], 1, [["GPU-a", "GPU-b", "GPU-c", "GPU-d"]]),
])
def test_the_gpus_each_container_host_gets(instance_type: str, machine: list[str], hosts: int,
                                           expected: list[list[str]]) -> None:
    from trainmon.runtime.contract.instances import host_gpus

    assert [host_gpus(instance_type, index, machine) for index in range(hosts)] == expected


def test_gpus_are_passed_as_each_engine_takes_them(tmp_path: Path) -> None:
    docker = engines.Engine("docker", str(tmp_path / "no-docker"))  # a client that cannot answer: no runtime known
    podman = containers.engine() if containers.engine().name == "podman" else engines.Engine("podman", "podman")
    assert docker.gpu_arguments(["0", "2"]) == ["--gpus", '"device=0,2"']
    assert podman.gpu_arguments([]) == []
    assert podman.gpus_unusable(cdi_dirs=[str(tmp_path)]) == (
        f"podman finds no CDI description of NVIDIA's GPUs in {tmp_path}: install the NVIDIA Container Toolkit and "
        "run `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`")
    assert "docker has neither NVIDIA's runtime nor a CDI description" in str(docker.gpus_unusable([str(tmp_path)]))
    (tmp_path / "nvidia.yaml").write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n")
    assert podman.gpus_unusable(cdi_dirs=[str(tmp_path)]) is None
    assert docker.gpus_unusable(cdi_dirs=[str(tmp_path)]) is None
    assert podman.gpu_arguments(["0", "1"]) == ["--device", "nvidia.com/gpu=0", "--device", "nvidia.com/gpu=1"]


def _nvidia_gpus() -> int:
    from trainmon.runtime.contract.layout import machine_gpus

    return len(machine_gpus())


@pytest.mark.skipif(_nvidia_gpus() == 0, reason="no NVIDIA GPU on this machine (NVML finds none): the GPU test runs "
                    "where one is")
def test_a_container_gets_its_instance_types_gpu(home: Path, tmp_path: Path, algo: str) -> None:
    """On a machine with an NVIDIA GPU and its container toolkit: an ml.g5.xlarge host's container
    sees one GPU, SM_NUM_GPUS says so, and the system monitor reads that GPU."""
    from .test_monitor import host_metric

    sm = trainmon.client("sagemaker")
    request = _request("byo-gpu", algo, tmp_path, TrainmonConfig={"SystemMetricsIntervalSeconds": 1},
                       ResourceConfig={"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 1})
    request["AlgorithmSpecification"].update(ContainerEntrypoint=["/bin/sh", "-c"], ContainerArguments=[
        "ls /dev | grep -c '^nvidia[0-9]'; echo SM_NUM_GPUS=$SM_NUM_GPUS; sleep 3"])
    sm.create_training_job(**request)
    doc = _finished(sm, "byo-gpu")
    assert doc["TrainingJobStatus"] == "Completed", doc.get("FailureReason")
    assert _messages("byo-gpu") == ["1", "SM_NUM_GPUS=1"]
    store = open_store(home)
    try:
        assert host_metric(store, "byo-gpu", "GPUUtilization")
    finally:
        store.close()
