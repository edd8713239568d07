"""A host run as a process sees its directory at /opt/ml, as a container does (a private mount
namespace: trainmon.runtime.processes.optml), and framework images: a script-mode job runs in its
framework image when this machine has it, and as a process that finds SageMaker's paths when not."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import trainmon
from trainmon.errors import ValidationException, WaiterError
from trainmon.runtime.processes import optml

from . import containers
from .conftest import PY, run_cli

GROUP = "/aws/sagemaker/TrainingJobs"
ABSENT_FRAMEWORK_IMAGE = f"{containers.FRAMEWORK_REPOSITORY}:0.0-not-on-this-machine"


def _run(name: str, tmp_path: Path, **request: Any) -> dict[str, Any]:
    sm = trainmon.client("sagemaker")
    sm.create_training_job(TrainingJobName=name, RoleArn="arn:aws:iam::000000000000:role/trainmon",
                           OutputDataConfig={"S3OutputPath": str(tmp_path / "out")},
                           StoppingCondition={"MaxRuntimeInSeconds": 600}, **request)
    with contextlib.suppress(WaiterError):  # a job that Failed: its description says how
        sm.get_waiter("training_job_completed_or_stopped").wait(
            TrainingJobName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 1500})
    return dict(sm.describe_training_job(TrainingJobName=name))


def _messages(name: str, host: str = "algo-1") -> list[str]:
    logs = trainmon.client("logs")
    streams = logs.describe_log_streams(logGroupName=GROUP, logStreamNamePrefix=f"{name}/{host}")["logStreams"]
    return [event["message"] for stream in streams for event in logs.get_log_events(
        logGroupName=GROUP, logStreamName=stream["logStreamName"], startFromHead=True)["events"]]


def _model_members(doc: dict[str, Any]) -> list[str]:
    with tarfile.open(doc["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://")) as archive:
        return sorted(archive.getnames())


# -- a process's /opt/ml -------------------------------------------------------------------------


def test_a_process_job_finds_sagemakers_paths(home: Path, tmp_path: Path, script: Callable[[str], Path]) -> None:
    train = script("""
        import json, os
        with open("/opt/ml/input/config/hyperparameters.json") as given:
            print("epochs", json.load(given)["epochs"])
        with open("/opt/ml/input/config/resourceconfig.json") as given:
            print("host", json.load(given)["current_host"])
        print("data", sorted(os.listdir("/opt/ml/input/data/train")))
        with open("/opt/ml/model/weights.txt", "w") as out:
            out.write("w")
        print("same directory", os.path.samefile("/opt/ml/model", os.environ["SM_MODEL_DIR"]))
        """)
    data = tmp_path / "data"
    data.mkdir()
    (data / "part-0.csv").write_text("1,2\n")
    doc = _run("optml-paths", tmp_path, AlgorithmSpecification={
        "TrainingInputMode": "File", "ContainerEntrypoint": [PY, str(train)]}, HyperParameters={"epochs": "3"},
        InputDataConfig=[{"ChannelName": "train", "DataSource": {"S3DataSource": {"S3Uri": str(data)}}}],
        ResourceConfig={"InstanceType": "local", "InstanceCount": 2, "VolumeSizeInGB": 1})
    assert doc["TrainingJobStatus"] == "Completed", doc.get("FailureReason")
    for host in ("algo-1", "algo-2"):  # each host its own /opt/ml
        assert _messages("optml-paths", host) == ["epochs 3", f"host {host}", "data ['part-0.csv']",
                                                  "same directory True"]
    assert _model_members(doc) == ["weights.txt"]


def test_the_machines_opt_is_as_it_was(home: Path, tmp_path: Path, script: Callable[[str], Path]) -> None:
    """Inside, /opt holds the machine's entries and ml; outside, nothing of the job's is left."""
    before = sorted(os.listdir("/opt")) if os.path.isdir("/opt") else None
    train = script("""
        import os
        print(sorted(os.listdir("/opt")))
        """)
    doc = _run("optml-opt", tmp_path, AlgorithmSpecification={"TrainingInputMode": "File",
                                                               "ContainerEntrypoint": [PY, str(train)]})
    assert doc["TrainingJobStatus"] == "Completed", doc.get("FailureReason")
    assert before is not None, "this machine has no /opt: the namespace's own /opt is not made"
    assert _messages("optml-opt") == [str(sorted({*before, "ml"}))]
    assert (sorted(os.listdir("/opt"))) == before


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory another user may enter (pytest's own are the user's alone)."""
    made = Path(tempfile.mkdtemp(prefix="trainmon-optml-"))
    made.chmod(0o755)
    yield made
    shutil.rmtree(made, ignore_errors=True)


def test_another_user_gets_a_user_namespace_of_their_own_ids(shared_dir: Path) -> None:
    """As a user other than root (here nobody, or the user running the tests), in a user namespace
    that maps only that user's ids: the command runs as that user, and reads /opt/ml."""
    root = shared_dir / "host"
    (root / "input" / "config").mkdir(parents=True)
    (root / "input" / "config" / "hyperparameters.json").write_text('{"a": "1"}')
    program = shared_dir / "optml.py"
    shutil.copy(optml.__file__, program)  # where the other user may read it
    for path in (*root.rglob("*"), root, program):
        path.chmod(0o755 if path.is_dir() else 0o644)
    as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    uid = 65534 if as_user else os.geteuid()
    python = "/usr/bin/python3" if as_user and os.access("/usr/bin/python3", os.X_OK) else sys.executable
    done = subprocess.run([*as_user, python, "-I", "-S", str(program), str(root), "--", "sh", "-c",
                           "id -u; cat /opt/ml/input/config/hyperparameters.json"],
                          capture_output=True, text=True, timeout=60, cwd=shared_dir)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [str(uid), '{"a": "1"}']


@pytest.mark.skipif(os.geteuid() != 0, reason="taking the capability to make namespaces away needs root")
def test_a_job_the_system_refuses_a_namespace_runs_without_it(home: Path, script: Callable[[str], Path]) -> None:
    """Without CAP_SYS_ADMIN root may make no mount namespace: the job runs all the same, and its
    log says on its first line that it has no /opt/ml."""
    train = script("""
        import os
        print("has /opt/ml", os.path.exists("/opt/ml/model"))
        """)
    done = subprocess.run(["setpriv", "--bounding-set=-sys_admin", PY, "-m", "trainmon", "run", "--name", "refused",
                           "--disable-profiler", "--", PY, str(train)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    messages = _messages("refused")
    assert messages[0].startswith(f"{optml.NOTICE} (the system refused a private mount namespace: unshare: ")
    assert messages[1:] == [f"has /opt/ml {os.path.exists('/opt/ml/model')}"]


def test_a_process_keeps_its_checkpoints_where_it_sees_them_under_opt_ml(home: Path, tmp_path: Path,
                                                                          script: Callable[[str], Path]) -> None:
    """CheckpointConfig.LocalPath under /opt/ml: a process sees its own directory there, so that is
    where its checkpoints are restored and kept from, never the machine's /opt/ml."""
    machine_had_it = os.path.exists("/opt/ml/checkpoints")
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "step.txt").write_text("4")
    train = script("""
        from pathlib import Path
        path = Path("/opt/ml/checkpoints/step.txt")
        print("resumed at step", path.read_text(), flush=True)
        path.write_text(str(int(path.read_text()) + 1))
        """)
    for name in ("ckpt-1", "ckpt-2"):
        doc = _run(name, tmp_path, AlgorithmSpecification={"TrainingInputMode": "File",
                                                            "ContainerEntrypoint": [PY, str(train)]},
                   CheckpointConfig={"S3Uri": str(kept), "LocalPath": "/opt/ml/checkpoints"})
        assert doc["TrainingJobStatus"] == "Completed", doc.get("FailureReason")
    assert _messages("ckpt-1") == ["resumed at step 4"] and _messages("ckpt-2") == ["resumed at step 5"]
    assert (kept / "step.txt").read_text() == "6"
    assert os.path.exists("/opt/ml/checkpoints") == machine_had_it


def test_an_isolated_job_whose_framework_image_is_absent_is_refused(home: Path, tmp_path: Path) -> None:
    """Processes in the image's place could reach the network: the job is refused before it exists."""
    sm = trainmon.client("sagemaker")
    with pytest.raises(ValidationException, match=f"EnableNetworkIsolation: the image {re.escape(ABSENT_FRAMEWORK_IMAGE)} "
                       "is not on this machine, and the processes that would run in its place cannot be cut off"):
        sm.create_training_job(TrainingJobName="isolated-absent", RoleArn="arn:aws:iam::000000000000:role/trainmon",
                               EnableNetworkIsolation=True, AlgorithmSpecification={
                                   "TrainingImage": ABSENT_FRAMEWORK_IMAGE, "TrainingInputMode": "File",
                                   "ContainerEntrypoint": ["/bin/sh", "-c", "true"]})
    assert sm.list_training_jobs()["TrainingJobSummaries"] == []


@pytest.mark.parametrize(("image", "framework"), [
    ("763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.1.0-cpu-py310", True),
    ("763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-training:2.1.0-transformers4.36.0-gpu-py310-cu121",
     True),
    ("683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1", True),
    ("727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/tensorflow-training:2.13-cpu-py310", True),
    ("123456789012.dkr.ecr.us-east-1.amazonaws.com/fraud-model-training:latest", False),  # one's own
    ("123456789012.dkr.ecr.us-east-1.amazonaws.com/team/pytorch-training:1", False),
    ("pytorch-training:2.1.0", False),  # not in ECR
])
def test_framework_images_are_sagemakers_own(image: str, framework: bool) -> None:
    from trainmon.runtime.contract.toolkit import is_framework_image

    assert is_framework_image(image) is framework


def test_a_command_that_cannot_start_is_said_before_the_host_starts(home: Path, tmp_path: Path) -> None:
    doc = _run("optml-missing", tmp_path, AlgorithmSpecification={
        "TrainingInputMode": "File", "ContainerEntrypoint": [str(tmp_path / "no-such-program")]})
    assert doc["TrainingJobStatus"] == "Failed"
    assert doc["FailureReason"].startswith(f"ClientError: cannot start '{tmp_path / 'no-such-program'}' on algo-1: "
                                           "No such file or directory.")


# -- framework images ------------------------------------------------------------------------------


def _source(tmp_path: Path) -> Path:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(
        "import argparse, os\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--epochs', type=int)\n"
        "arguments = parser.parse_args()\n"
        "for epoch in range(arguments.epochs):\n"
        "    print(f'epoch {epoch} loss={1 / (epoch + 1):.3f};')\n"
        "print('in', os.getcwd())\n"
        "open('/opt/ml/model/weights.txt', 'w').write('w')\n", encoding="utf-8")
    return source


def _script_mode(image: str, source: Path) -> dict[str, Any]:
    return {"AlgorithmSpecification": {"TrainingImage": image, "TrainingInputMode": "File",
                                       "MetricDefinitions": [{"Name": "loss", "Regex": "loss=(.*?);"}]},
            "HyperParameters": {"sagemaker_program": '"train.py"', "sagemaker_submit_directory": json.dumps(str(source)),
                                "epochs": "3"},
            "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1}}


def test_a_script_runs_in_its_framework_image_when_it_is_here(home: Path, tmp_path: Path) -> None:
    image = containers.framework_image()
    doc = _run("framework-here", tmp_path, **_script_mode(image, _source(tmp_path)))
    assert doc["TrainingJobStatus"] == "Completed", doc.get("FailureReason")
    assert _messages("framework-here") == ["framework image: running train.py in /opt/ml/code", "epoch 0 loss=1.000;",
                                           "epoch 1 loss=0.500;", "epoch 2 loss=0.333;", "in /opt/ml/code"]
    assert [m["Value"] for m in doc["FinalMetricDataList"]] == [pytest.approx(0.333)]
    assert _model_members(doc) == ["weights.txt"]
    described = run_cli("describe", "framework-here", check=True).stdout
    assert image in described


def test_a_script_whose_framework_image_is_absent_runs_with_a_local_python(home: Path, tmp_path: Path) -> None:
    doc = _run("framework-absent", tmp_path, **_script_mode(ABSENT_FRAMEWORK_IMAGE, _source(tmp_path)))
    assert doc["TrainingJobStatus"] == "Completed", doc.get("FailureReason")
    messages = _messages("framework-absent")
    assert messages[0].startswith(f"trainmon: the image {ABSENT_FRAMEWORK_IMAGE} is not on this machine: the entry "
                                  "point runs with ")
    assert messages[1:4] == ["epoch 0 loss=1.000;", "epoch 1 loss=0.500;", "epoch 2 loss=0.333;"]
    assert messages[4] == f"in {home / 'jobs' / 'framework-absent' / 'algo-1' / 'code'}"
    assert _model_members(doc) == ["weights.txt"]  # written at /opt/ml/model
    described = run_cli("describe", "framework-absent", check=True).stdout
    assert f"{ABSENT_FRAMEWORK_IMAGE} (not on this machine: its hosts ran as processes)" in described


def test_an_entrypoint_of_an_absent_framework_image_runs_as_a_process(home: Path, tmp_path: Path) -> None:
    """The SageMaker SDK v3's shape: a framework image and a ContainerEntrypoint that runs a driver
    from a channel, by its path under /opt/ml."""
    drivers = tmp_path / "drivers"
    drivers.mkdir()
    (drivers / "run.sh").write_text("echo driver in $(pwd)\necho loss=0.25\\;\n")  # not executable, as uploaded
    doc = _run("framework-entrypoint", tmp_path, AlgorithmSpecification={
        "TrainingImage": ABSENT_FRAMEWORK_IMAGE, "TrainingInputMode": "File",
        "ContainerEntrypoint": ["/bin/sh", "-c", "chmod +x /opt/ml/input/data/drivers/run.sh && "
                                "/opt/ml/input/data/drivers/run.sh"],
        "MetricDefinitions": [{"Name": "loss", "Regex": "loss=(.*?);"}]},
        InputDataConfig=[{"ChannelName": "drivers", "DataSource": {"S3DataSource": {"S3Uri": str(drivers)}}}],
        ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1})
    assert doc["TrainingJobStatus"] == "Completed", doc.get("FailureReason")
    messages = _messages("framework-entrypoint")
    assert messages[0] == (f"trainmon: the image {ABSENT_FRAMEWORK_IMAGE} is not on this machine: its entry point "
                           "runs as a process of this machine, which sees /opt/ml as the container would, with "
                           f"{os.path.abspath(shutil.which(PY) or PY)} first on its PATH; pull or build it "
                           "to run the job in it")
    assert messages[1:] == [f"driver in {home / 'jobs' / 'framework-entrypoint' / 'algo-1'}", "loss=0.25;"]
    assert [m["Value"] for m in doc["FinalMetricDataList"]] == [0.25]


def test_an_absent_image_of_ones_own_is_not_run_as_a_process(home: Path, tmp_path: Path) -> None:
    """Only a framework image's work can be done without it: any other image a job names is its
    algorithm, which fails the job, saying how to get it, when it is not here."""
    doc = _run("own-absent", tmp_path, AlgorithmSpecification={
        "TrainingImage": "localhost/not-a-framework:1", "TrainingInputMode": "File",
        "ContainerEntrypoint": ["/bin/sh", "-c", "echo ran"]},
        ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1})
    assert doc["TrainingJobStatus"] == "Failed"
    assert doc["FailureReason"].startswith("ClientError: image localhost/not-a-framework:1 is not on this machine")
