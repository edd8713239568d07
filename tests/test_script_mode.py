"""Script mode: CreateTrainingJob requests shaped as the SageMaker SDK v2's framework estimators send
them (a framework image, ``sagemaker_program`` and ``sagemaker_submit_directory``) run their entry
point as the SageMaker training toolkit would, with real jobs through ``trainmon.client``."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

import trainmon
from trainmon.errors import ValidationException
from trainmon.runtime.contract import toolkit
from trainmon.store.objects import ObjectStore, parse_uri

from .conftest import PY, wait_for

IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.1.0-cpu-py310"
BUCKET = "sagemaker-us-east-1-123456789012"
DEFINITIONS = [{"Name": "train:loss", "Regex": r"loss=([0-9.]+);"}, {"Name": "train:epoch", "Regex": r"epoch=(\d+)"}]
TRAIN = textwrap.dedent("""
    import argparse
    import json
    import os
    import sys

    from helper import loss_at  # a module of the submitted source, found on PYTHONPATH

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--optimizer")
    parser.add_argument("--shuffle")
    parser.add_argument("--layers")
    args = parser.parse_args()
    print("argv=" + json.dumps(sys.argv[1:]))
    print("cwd=" + os.getcwd())
    print("env=" + json.dumps({k: v for k, v in os.environ.items() if k.startswith(("SM_", "SAGEMAKER_", "PYTHONPATH"))}))
    channel = os.environ.get("SM_CHANNEL_TRAINING")
    if channel:
        for name in sorted(os.listdir(channel)):
            path = os.path.join(channel, name)
            print(f"channel {name} link={os.path.islink(path)} text={open(path).read()!r}")
            with open(path, "w") as out:  # the job may change its copy, never the stored object
                out.write("changed by the job")
    for epoch in range(1, args.epochs + 1):
        print(f"epoch={epoch} loss={loss_at(epoch, args.lr):.4f};")
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.txt"), "w") as out:
        out.write("weights")
""")
HELPER = "def loss_at(epoch, lr):\n    return lr / epoch\n"


# -- trainmon's S3 subset, as the object store keeps it ---------------------------------------


class Objects:
    """The test's bucket in trainmon's object store (what ``aws s3 mb`` and ``aws s3 cp`` would make)."""

    def __init__(self, home: Path) -> None:
        self.store = ObjectStore(home)
        self.store.create_bucket(BUCKET)

    def put(self, bucket: str, key: str, data: bytes) -> str:
        self.store.put_object(bucket, key, data)
        return f"s3://{bucket}/{key}"

    def get(self, uri: str) -> bytes:
        body, _info = self.store.open_object(*parse_uri(uri))
        with body:
            return body.read()


@pytest.fixture
def objects(home: Path) -> Objects:
    return Objects(home)


# -- requests as the SDK sends them -----------------------------------------------------------


def source_tarball(files: dict[str, str]) -> bytes:
    """``sourcedir.tar.gz`` as the SDK packs ``source_dir``: its files at the top of the archive."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def sdk_request(name: str, submit_directory: str, **extra: Any) -> dict[str, Any]:
    """What ``sagemaker.pytorch.PyTorch(entry_point="train.py", source_dir="src", framework_version="2.1.0",
    py_version="py310", instance_type="ml.m5.large", hyperparameters={...}, metric_definitions=[...],
    disable_profiler=True).fit(...)`` sends (SDK v2): every hyperparameter value JSON-encoded."""
    user = {"epochs": 3, "lr": 0.1, "optimizer": "adam", "shuffle": True, "layers": [64, 32]}
    sagemaker = {"sagemaker_submit_directory": submit_directory, "sagemaker_program": "train.py",
                 "sagemaker_container_log_level": 20, "sagemaker_job_name": name, "sagemaker_region": "us-east-1"}
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "AlgorithmSpecification": {"TrainingImage": IMAGE, "TrainingInputMode": "File",
                                   "MetricDefinitions": DEFINITIONS, "EnableSageMakerMetricsTimeSeries": True},
        "RoleArn": "arn:aws:iam::123456789012:role/SageMakerRole",
        "HyperParameters": {key: json.dumps(value) for key, value in {**user, **sagemaker}.items()},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
        "ProfilerConfig": {"DisableProfiler": True},
    }
    request.update(extra)
    return request


def run_to_end(name: str, request: dict[str, Any]) -> dict[str, Any]:
    sm = trainmon.client("sagemaker")
    sm.create_training_job(**request)
    try:
        sm.get_waiter("training_job_completed_or_stopped").wait(
            TrainingJobName=name, WaiterConfig={"Delay": 0.1, "MaxAttempts": 1200})
    except trainmon.ClientError:
        pass  # Failed: the assertions below say why
    return dict(sm.describe_training_job(TrainingJobName=name))


def log_lines(name: str) -> list[str]:
    records = trainmon.client("trainmon").get_job_log_records(TrainingJobName=name, Limit=1000)["Records"]
    return [record["Message"] for record in records]


def line(lines: list[str], prefix: str) -> str:
    found = [text for text in lines if text.startswith(prefix)]
    assert found, f"no line starting {prefix!r} in {lines}"
    return found[0][len(prefix):]


EXPECTED_ARGV = ["--epochs", "3", "--layers", "[64, 32]", "--lr", "0.1", "--optimizer", "adam", "--shuffle", "True"]


def test_sdk_request_with_s3_source_channel_and_output_runs_the_entry_point(home: Path, objects: Objects) -> None:
    name = "pytorch-training-2025-01-01-00-00-00-000"
    source = objects.put(BUCKET, f"{name}/source/sourcedir.tar.gz", source_tarball(
        {"train.py": TRAIN, "helper.py": HELPER, "requirements.txt": "torch==2.1.0\n"}))
    data = objects.put(BUCKET, "data/train/rows.csv", b"1,2\n3,4\n")
    request = sdk_request(
        name, source,
        InputDataConfig=[{"ChannelName": "training", "DataSource": {"S3DataSource": {
            "S3DataType": "S3Prefix", "S3Uri": f"s3://{BUCKET}/data/train", "S3DataDistributionType": "FullyReplicated"}}}],
        OutputDataConfig={"S3OutputPath": f"s3://{BUCKET}/output"},
        DebugHookConfig={"S3OutputPath": f"s3://{BUCKET}/output", "CollectionConfigurations": []},
    )
    job = run_to_end(name, request)
    lines = log_lines(name)
    assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"), lines)

    # the framework image is not on this machine: a local Python runs the entry point, which says so
    assert lines[0].startswith(f"trainmon: the image {request['AlgorithmSpecification']['TrainingImage']} is not on "
                               "this machine: the entry point runs with ")
    assert lines[1].startswith("trainmon: requirements.txt is not installed")
    assert json.loads(line(lines, "argv=")) == EXPECTED_ARGV
    code_dir = home / "jobs" / name / "algo-1" / "code"
    assert line(lines, "cwd=") == str(code_dir)
    env = json.loads(line(lines, "env="))
    assert env["PYTHONPATH"].split(":")[0] == str(code_dir)
    assert env["SM_USER_ENTRY_POINT"] == "train.py" and env["SM_MODULE_NAME"] == "train"
    assert env["SM_MODULE_DIR"] == source
    assert json.loads(env["SM_USER_ARGS"]) == EXPECTED_ARGV
    assert json.loads(env["SM_HPS"]) == {"epochs": 3, "layers": [64, 32], "lr": 0.1, "optimizer": "adam",
                                         "shuffle": True}
    assert env["SM_HP_OPTIMIZER"] == "adam" and env["SM_HP_LAYERS"] == "[64,32]" and env["SM_HP_SHUFFLE"] == "true"
    assert not any(key.startswith("SM_HP_SAGEMAKER") for key in env)
    assert env["SAGEMAKER_REGION"] == "us-east-1" and env["SM_LOG_LEVEL"] == "20"

    assert "channel rows.csv link=False text='1,2\\n3,4\\n'" in lines
    assert objects.get(data) == b"1,2\n3,4\n"  # the stored object, unchanged

    finals = {m["MetricName"]: m["Value"] for m in job["FinalMetricDataList"]}
    assert finals == {"train:loss": pytest.approx(0.0333), "train:epoch": 3.0}
    artifacts = job["ModelArtifacts"]["S3ModelArtifacts"]
    assert artifacts == f"s3://{BUCKET}/output/{name}/output/model.tar.gz"
    assert objects.store.head_object(*parse_uri(artifacts)).etag.startswith('"')  # an object of the store
    with tarfile.open(fileobj=io.BytesIO(objects.get(artifacts))) as archive:
        assert archive.extractfile("model.txt").read() == b"weights"  # type: ignore[union-attr]
    assert job["AlgorithmSpecification"]["TrainingImage"] == IMAGE
    assert job["HyperParameters"] == request["HyperParameters"]  # as given, as SageMaker echoes them


def test_source_from_a_local_directory(home: Path, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(TRAIN)
    (source / "helper.py").write_text(HELPER)
    name = "from-directory"
    job = run_to_end(name, sdk_request(name, str(source)))
    lines = log_lines(name)
    assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"), lines)
    # no requirements.txt: trainmon says only that the framework image is not here
    assert [text for text in lines if text.startswith("trainmon:")] == [
        f"trainmon: the image {job['AlgorithmSpecification']['TrainingImage']} is not on this machine: the entry point "
        f"runs with {os.path.abspath(shutil.which(PY) or PY)}; pull or build it to run the job in it"]
    assert json.loads(line(lines, "argv=")) == EXPECTED_ARGV
    code_dir = home / "jobs" / name / "algo-1" / "code"
    assert line(lines, "cwd=") == str(code_dir)
    assert (code_dir / "helper.py").read_text() == HELPER  # a copy: the job cannot change the source
    assert {m["MetricName"]: m["Value"] for m in job["FinalMetricDataList"]}["train:loss"] == pytest.approx(0.0333)
    assert job["ModelArtifacts"]["S3ModelArtifacts"] == (home / "output" / name / "output" / "model.tar.gz").as_uri()


def test_a_file_uri_tarball_and_a_configured_interpreter(home: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    tarball = tmp_path / "sourcedir.tar.gz"
    tarball.write_bytes(source_tarball({"train.py": "import sys\nprint('python=' + sys.executable)\n"}))
    monkeypatch.setenv("TRAINMON_PYTHON", PY)
    name = "file-uri"
    job = run_to_end(name, sdk_request(name, tarball.as_uri()))
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert line(log_lines(name), "python=") == PY
    monkeypatch.setenv("TRAINMON_PYTHON", str(tmp_path / "no-such-python"))
    with pytest.raises(ValidationException, match="TRAINMON_PYTHON .* is not an executable Python interpreter"):
        trainmon.client("sagemaker").create_training_job(**sdk_request("bad-python", tarball.as_uri()))


# -- refused when created ----------------------------------------------------------------------


def _refused(request: dict[str, Any]) -> str:
    sm = trainmon.client("sagemaker")
    with pytest.raises(ValidationException) as info:
        sm.create_training_job(**request)
    assert info.value.response["Error"]["Code"] == "ValidationException"
    assert sm.store.get_job(request["TrainingJobName"]) is None  # nothing stored, nothing started
    return info.value.message


def test_a_member_that_escapes_the_code_directory_is_refused(home: Path, objects: Objects) -> None:
    source = objects.put(BUCKET, "evil/sourcedir.tar.gz", source_tarball({"train.py": TRAIN, "../evil": "x"}))
    message = _refused(sdk_request("evil", source))
    assert message.startswith("1 validation error detected: Value ")
    assert "at 'hyperParameters.sagemaker_submit_directory'" in message
    assert "member '../evil' would be written outside the code directory" in message
    assert not (home / "jobs" / "evil").exists()  # nothing unpacked anywhere


def test_a_program_missing_from_the_source_is_refused(home: Path, objects: Objects) -> None:
    source = objects.put(BUCKET, "nothing/sourcedir.tar.gz", source_tarball({"helper.py": HELPER}))
    message = _refused(sdk_request("no-program", source))
    assert "at 'hyperParameters.sagemaker_program' failed to satisfy constraint: Member must name a file in the " \
           f"submitted source: {source} holds no 'train.py'" in message


def test_a_source_that_is_not_a_tarball_or_names_nothing_is_refused(home: Path, tmp_path: Path,
                                                                    objects: Objects) -> None:
    not_tar = objects.put(BUCKET, "text/sourcedir.tar.gz", b"print('hello')\n")
    assert "is not a tar archive" in _refused(sdk_request("not-tar", not_tar))
    message = _refused(sdk_request("no-object", f"s3://{BUCKET}/missing/sourcedir.tar.gz"))
    assert "at 'hyperParameters.sagemaker_submit_directory'" in message and "missing/sourcedir.tar.gz" in message
    assert "names no file or directory" in _refused(sdk_request("no-path", str(tmp_path / "nowhere")))
    request = sdk_request("no-submit", str(tmp_path))
    del request["HyperParameters"]["sagemaker_submit_directory"]
    assert "Value null at 'hyperParameters.sagemaker_submit_directory'" in _refused(request)


def test_a_framework_image_without_script_mode_runs_as_its_container(home: Path) -> None:
    """No sagemaker_program: the image itself runs (here, with no registry to pull it from, the job
    fails at its start saying how to get it)."""
    request = sdk_request("no-script", "unused")
    request["HyperParameters"] = {"epochs": "3"}
    sm = trainmon.client("sagemaker")
    sm.create_training_job(**request)
    wait_for(lambda: sm.describe_training_job(TrainingJobName="no-script")["TrainingJobStatus"] == "Failed",
             "the job to fail")
    reason = sm.describe_training_job(TrainingJobName="no-script")["FailureReason"]
    assert reason.startswith(f"ClientError: image {IMAGE} is not on this machine and could not be pulled")
    assert "aws ecr get-login-password" in reason


def test_s3_channel_that_names_nothing_is_refused(home: Path, tmp_path: Path, objects: Objects) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    request = sdk_request("no-channel", str(tmp_path), InputDataConfig=[
        {"ChannelName": "training", "DataSource": {"S3DataSource": {"S3Uri": f"s3://{BUCKET}/nothing/here"}}}])
    assert "Channel 'training'" in _refused(request)


# -- the toolkit's rules -----------------------------------------------------------------------


@pytest.mark.parametrize(("hyperparameters", "argv"), [
    ({"epochs": 3, "lr": 0.1}, ["--epochs", "3", "--lr", "0.1"]),
    ({"b": "x", "a": "y"}, ["-a", "y", "-b", "x"]),  # sorted; a one-letter name gets one dash
    ({"flag": True, "off": False}, ["--flag", "True", "--off", "False"]),  # Python's str of a boolean
    ({"layers": [64, 32], "names": ["a", "b"]}, ["--layers", "[64, 32]", "--names", "['a', 'b']"]),
    ({"opts": {"z": 1, "a": "b"}}, ["--opts", "a=b,z=1"]),  # a dict as key=value pairs in key order
    ({"none": None, "text": "two words"}, ["--none", "", "--text", "two words"]),
    ({"big": 1e-05}, ["--big", "1e-05"]),
])
def test_hyperparameters_become_arguments_as_the_toolkit_maps_them(hyperparameters: dict[str, Any],
                                                                   argv: list[str]) -> None:
    assert toolkit.to_cmd_args(hyperparameters) == argv


def test_sagemaker_hyperparameters_are_not_the_users() -> None:
    split = toolkit.split({"epochs": "3", "sagemaker_program": '"train.py"', "sagemaker_distributed_dataparallel_enabled":
                           "false", "_tuning_objective_metric": '"loss"', "plain": "not json"})
    assert split.user == {"epochs": 3, "plain": "not json"}
    assert split.framework == {"sagemaker_distributed_dataparallel_enabled": False}


@pytest.mark.parametrize("image", [
    IMAGE,
    "763104351884.dkr.ecr.us-west-2.amazonaws.com/huggingface-pytorch-training:2.0.0-transformers4.28.1-gpu-py310-cu118-ubuntu20.04",
    "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3",
    "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/tensorflow-training:2.13-cpu-py310",
    "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-inference:2.1.0-cpu-py310",
])
def test_framework_images_are_ecr_images(image: str) -> None:
    assert toolkit.is_ecr_image(image)


@pytest.mark.parametrize("image", ["python train.py", "/srv/images/algo", "pytorch/pytorch:latest", "local"])
def test_local_images_are_not(image: str) -> None:
    assert not toolkit.is_ecr_image(image)


def _archive(tmp_path: Path, *members: tarfile.TarInfo) -> Path:
    path = tmp_path / "source.tar"
    with tarfile.open(path, "w") as archive:
        archive.addfile(_file("train.py"), io.BytesIO(b"print(1)\n"))
        for member in members:
            archive.addfile(member, io.BytesIO(b"x" * member.size) if member.isreg() else None)
    return path


def _file(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 9 if name == "train.py" else 1
    return info


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def _device(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.CHRTYPE
    return info


@pytest.mark.parametrize(("member", "problem"), [
    (_file("/etc/evil"), "would be written outside the code directory"),
    (_file("a/../../evil"), "would be written outside the code directory"),
    (_link("up", "../outside"), "links outside the code directory"),
    (_link("root", "/etc/passwd"), "links outside the code directory"),
    (_link("hard", "../outside", tarfile.LNKTYPE), "links outside the code directory"),
    (_device("tty"), "is a device, FIFO or other special file"),
])
def test_unsafe_members_are_refused(tmp_path: Path, member: tarfile.TarInfo, problem: str) -> None:
    with pytest.raises(toolkit.SourceError, match=problem):
        toolkit.check_source(_archive(tmp_path, member), "train.py")


def test_a_path_through_a_link_is_refused_and_links_inside_are_kept(tmp_path: Path) -> None:
    sneaky = _archive(tmp_path, _link("d/here", "."), _link("escape", "d/here/../.."))  # lexically inside
    with pytest.raises(toolkit.SourceError, match="'escape' links outside"):
        toolkit.check_source(sneaky, "train.py")
    inside = _archive(tmp_path, _file("lib/util.py"), _link("util.py", "lib/util.py"))
    toolkit.check_source(inside, "train.py")
    toolkit.install_source(inside, tmp_path / "code", "train.py")
    assert (tmp_path / "code" / "util.py").read_bytes() == b"x"
