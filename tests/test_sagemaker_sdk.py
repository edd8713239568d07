"""The SageMaker Python SDK, v2 and v3, unchanged, against a real ``trainmon server``: only
``AWS_ENDPOINT_URL`` (and a key) point it there. Each scenario is a script run by its own
interpreter, as a user's notebook or pipeline would run it: v2's from the test extras, v3's from a
virtual environment of its own (the two are one distribution), made on first use
(``scripts/test`` makes it before the tests)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import textwrap
from pathlib import Path

import pytest

from .conftest import PY, ServerProcess

SDK_TIMEOUT_S = 300
SDK_CONFIG = """\
SchemaVersion: '1.0'
SageMaker:
  PythonSDK:
    Modules:
      TelemetryOptOut: true
      Session:
        DefaultS3Bucket: sagemaker-trainmon
"""


def _run_with_sdk(server: ServerProcess, tmp_path: Path, body: str, python: str = sys.executable) -> dict[str, object]:
    """Run ``body`` (Python using the SDK; the v3 one with ``python=sdk_v3()``) with only the
    environment a user would set; it prints its findings as JSON on its last line."""
    config = tmp_path / ".config" / "sagemaker" / "config.yaml"  # what docs/aws.md has a user write once
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(SDK_CONFIG, encoding="utf-8")
    path = tmp_path / "with_sdk.py"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    env = {
        **os.environ,
        **server.aws_env(),
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
        "SAGEMAKER_SUPPRESS_V2_WARNING": "1",
        "HOME": str(tmp_path),  # no SDK defaults file of the machine's user
    }
    done = subprocess.run([python, str(path)], capture_output=True, text=True, timeout=SDK_TIMEOUT_S,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, f"the SDK script failed:\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}"
    found: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    found["stdout"] = done.stdout
    return found


def _image(tmp_path: Path) -> Path:
    """A local "image": a directory with an executable ``train``, as a container's entry point."""
    image = tmp_path / "image"
    image.mkdir()
    train = image / "train"
    train.write_text(textwrap.dedent(f"""\
        #!{PY}
        import json, os
        with open(os.path.join(os.environ["SM_INPUT_CONFIG_DIR"], "hyperparameters.json")) as given:
            hyperparameters = json.load(given)
        epochs = int(json.loads(hyperparameters.get("epochs", "3")))
        for epoch in range(epochs):
            print(f"epoch={{epoch}} Train_error={{1 / (epoch + 1):.4f}}; Valid_error={{1.5 / (epoch + 1):.4f}};")
        print("done")
        """), encoding="utf-8")
    train.chmod(0o755)
    return image


@pytest.mark.timeout(600)  # heavy by design: room for a machine busy with other tests
def test_an_estimator_fits_streams_its_log_and_has_analytics(server: ServerProcess, tmp_path: Path) -> None:
    image = _image(tmp_path)
    found = _run_with_sdk(server, tmp_path, f"""
        import json
        import sagemaker
        from sagemaker.estimator import Estimator

        estimator = Estimator(
            image_uri={str(image)!r},
            role="arn:aws:iam::000000000000:role/trainmon",
            instance_count=1,
            instance_type="ml.m5.large",
            hyperparameters={{"epochs": 4}},
            metric_definitions=[{{"Name": "train:error", "Regex": "Train_error=(.*?);"}},
                                {{"Name": "validation:error", "Regex": "Valid_error=(.*?);"}}],
        )
        estimator.fit(logs="All", job_name="sdk-estimator")
        description = estimator.latest_training_job.describe()
        frame = estimator.training_job_analytics.dataframe()
        print(json.dumps({{
            "status": description["TrainingJobStatus"],
            "finals": {{m["MetricName"]: m["Value"] for m in description["FinalMetricDataList"]}},
            "model": estimator.model_data,
            "metrics": sorted(set(frame["metric_name"])),
            "rows": len(frame),
        }}))
        """)
    assert found["status"] == "Completed"
    assert found["finals"] == {"train:error": pytest.approx(0.25), "validation:error": pytest.approx(0.375)}
    assert found["metrics"] == ["train:error", "validation:error"] and found["rows"] >= 2
    stdout = str(found["stdout"])
    assert "epoch=3 Train_error=0.2500; Valid_error=0.3750;" in stdout  # fit(logs="All") streamed the log
    assert str(found["model"]).endswith("sdk-estimator/output/model.tar.gz")
    # the artifact the job names is an object the AWS CLI downloads
    download = tmp_path / "model.tar.gz"
    copied = subprocess.run([sys.executable, "-m", "awscli", "s3", "cp", str(found["model"]), str(download)],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, **server.aws_env()})
    assert copied.returncode == 0, copied.stderr
    with tarfile.open(download) as archive:
        archive.getmembers()  # a whole gzip tarball


@pytest.mark.timeout(600)  # heavy by design: room for a machine busy with other tests
def test_a_framework_estimator_runs_its_entry_point_in_script_mode(server: ServerProcess, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "helpers.py").write_text("def loss(epoch):\n    return 2.0 / (epoch + 1)\n", encoding="utf-8")
    (source / "train.py").write_text(textwrap.dedent("""\
        import argparse
        from helpers import loss

        parser = argparse.ArgumentParser()
        parser.add_argument("--epochs", type=int)
        parser.add_argument("--lr", type=float)
        args = parser.parse_args()
        for epoch in range(args.epochs):
            print(f"epoch {epoch} lr={args.lr} loss={loss(epoch):.3f};")
        """), encoding="utf-8")
    found = _run_with_sdk(server, tmp_path, f"""
        import json
        from sagemaker.pytorch import PyTorch

        estimator = PyTorch(
            entry_point="train.py",
            source_dir={str(source)!r},
            framework_version="2.1",
            py_version="py310",
            role="arn:aws:iam::000000000000:role/trainmon",
            instance_count=1,
            instance_type="ml.m5.large",
            hyperparameters={{"epochs": 3, "lr": 0.1}},
            metric_definitions=[{{"Name": "loss", "Regex": "loss=([0-9.]+);"}}],
        )
        estimator.fit(logs="All", job_name="sdk-script-mode")
        description = estimator.latest_training_job.describe()
        print(json.dumps({{
            "status": description["TrainingJobStatus"],
            "image": description["AlgorithmSpecification"]["TrainingImage"],
            "finals": {{m["MetricName"]: m["Value"] for m in description["FinalMetricDataList"]}},
        }}))
        """)
    assert found["status"] == "Completed"
    assert "pytorch-training" in str(found["image"])
    assert found["finals"] == {"loss": pytest.approx(0.667)}
    assert "epoch 2 lr=0.1 loss=0.667;" in str(found["stdout"])


@pytest.mark.timeout(600)  # heavy by design: room for a machine busy with other tests
def test_an_estimator_runs_an_image_tagged_as_in_ecr(server: ServerProcess, tmp_path: Path) -> None:
    """`podman build -t <account>.dkr.ecr.<region>.amazonaws.com/repo:tag .`, then the SDK's
    Estimator with that URI: the local image runs, with no registry at all."""
    from . import containers

    ecr = "123456789012.dkr.ecr.us-west-2.amazonaws.com/my-algo:sdk"
    containers.engine().call(["tag", containers.algo_image(), ecr])
    found = _run_with_sdk(server, tmp_path, f"""
        import json
        from sagemaker.estimator import Estimator

        estimator = Estimator(
            image_uri={ecr!r},
            role="arn:aws:iam::000000000000:role/trainmon",
            instance_count=1,
            instance_type="ml.m5.large",
            hyperparameters={{"epochs": 4}},
            metric_definitions=[{{"Name": "train:error", "Regex": "Train_error=(.*?);"}}],
        )
        estimator.fit(logs="All", job_name="sdk-image")
        description = estimator.latest_training_job.describe()
        print(json.dumps({{
            "status": description["TrainingJobStatus"],
            "image": description["AlgorithmSpecification"]["TrainingImage"],
            "finals": {{m["MetricName"]: m["Value"] for m in description["FinalMetricDataList"]}},
        }}))
        """)
    assert found["status"] == "Completed"
    assert found["image"] == ecr
    assert found["finals"] == {"train:error": pytest.approx(0.25)}
    assert "epoch 3 Train_error=0.2500; Valid_error=0.3750;" in str(found["stdout"])


SDK_V3_VENV = Path(__file__).resolve().parent.parent / ".venv-sdk3"
SDK_V3 = "sagemaker>=3,<4"


def sdk_v3() -> str:
    """The Python of the virtual environment that holds the SageMaker SDK v3, made if it is not."""
    python = SDK_V3_VENV / "bin" / "python"
    with open(Path(tempfile.gettempdir()) / "trainmon-test-sdk3.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if subprocess.run([str(python), "-c", "import sagemaker.train"], capture_output=True).returncode != 0:
            subprocess.run([sys.executable, "-m", "venv", str(SDK_V3_VENV)], check=True)
            subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", SDK_V3],
                           check=True, timeout=900)
    return str(python)


@pytest.mark.timeout(1200)  # heavy by design, and it may have to install the SDK first
@pytest.mark.parametrize("image_here", [False, True], ids=["image-absent", "image-here"])
def test_the_sdk_v3_model_trainer_runs_its_driver_in_a_framework_image(server: ServerProcess, tmp_path: Path,
                                                                          image_here: bool) -> None:
    """``ModelTrainer(training_image=<framework image>, source_code=SourceCode(...))`` sends its own
    driver as a channel and runs it through ContainerEntrypoint by its path under /opt/ml, after
    asking IAM about its role (SAGEMAKER_VALIDATE_ROLE left as it is): it completes whether this
    machine has the framework image (the job runs in it) or not (its driver runs as a process that
    sees /opt/ml, with a local Python)."""
    from . import containers

    image = containers.framework_image() if image_here else (
        "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.1.0-cpu-py310")
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(textwrap.dedent("""\
        import argparse, os
        parser = argparse.ArgumentParser()
        parser.add_argument("--epochs", type=int)
        arguments = parser.parse_args()
        for epoch in range(arguments.epochs):
            print(f"epoch {epoch} Train_error={1 / (epoch + 1):.4f};", flush=True)
        with open(os.path.join(os.environ["SM_MODEL_DIR"], "weights.txt"), "w") as out:
            out.write("w")
        """), encoding="utf-8")
    found = _run_with_sdk(server, tmp_path, f"""
        import io
        import json
        import tarfile
        import boto3
        from sagemaker.train import ModelTrainer
        from sagemaker.train.configs import MetricDefinition, SourceCode

        trainer = ModelTrainer(
            training_image={image!r},
            source_code=SourceCode(source_dir={str(source)!r}, entry_script="train.py"),
            role="arn:aws:iam::000000000000:role/trainmon",
            base_job_name="sdk3",
            hyperparameters={{"epochs": 3}},
        )
        trainer.with_metric_definitions([MetricDefinition(name="train:error", regex="Train_error=(.*?);")]).train(
            wait=True, logs=True)
        sm, logs = boto3.client("sagemaker"), boto3.client("logs")
        (summary,) = sm.list_training_jobs(NameContains="sdk3")["TrainingJobSummaries"]
        description = sm.describe_training_job(TrainingJobName=summary["TrainingJobName"])
        (stream,) = logs.describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs",
                                              logStreamNamePrefix=summary["TrainingJobName"])["logStreams"]
        events = logs.get_log_events(logGroupName="/aws/sagemaker/TrainingJobs",
                                     logStreamName=stream["logStreamName"], startFromHead=True)["events"]
        bucket, _, key = description["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("s3://").partition("/")
        archive = boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
        with tarfile.open(fileobj=io.BytesIO(archive)) as model:
            members = model.getnames()
        print(json.dumps({{
            "status": description["TrainingJobStatus"],
            "reason": description.get("FailureReason"),
            "members": members,
            "entrypoint": description["AlgorithmSpecification"].get("ContainerEntrypoint"),
            "finals": {{m["MetricName"]: m["Value"] for m in description["FinalMetricDataList"]}},
            "model": description["ModelArtifacts"]["S3ModelArtifacts"],
            "messages": [event["message"] for event in events],
        }}))
        """, python=sdk_v3())
    assert found["status"] == "Completed", found["reason"]
    assert found["entrypoint"] == ["/bin/bash"]  # the SDK's driver, by its path under /opt/ml
    assert found["finals"] == {"train:error": pytest.approx(0.3333)}
    messages = found["messages"]
    assert isinstance(messages, list)
    assert "epoch 2 Train_error=0.3333;" in messages
    said_absent = [m for m in messages if m.startswith(f"trainmon: the image {image} is not on this machine")]
    assert len(said_absent) == (0 if image_here else 1)
    model = str(found["model"])
    assert model.startswith("s3://sagemaker-trainmon/") and model.endswith("/output/model.tar.gz")
    assert found["members"] == ["weights.txt"]  # written to SM_MODEL_DIR, which the driver sets to /opt/ml/model
