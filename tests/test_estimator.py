"""The SageMaker-SDK-style Estimator, end to end with real jobs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest

from trainmon import Estimator, Session, TrainingJobAnalytics, UnexpectedStatusException

from .conftest import PY, run_cli

DEFS = [{"Name": "train:error", "Regex": "Train_error=(.*?);"}, {"Name": "loss", "Regex": r"loss=(\S+)"}]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "helper.py").write_text("FACTOR = 0.5\n")
    (src / "train.py").write_text(
        "import argparse, os\n"
        "from helper import FACTOR\n"
        "p = argparse.ArgumentParser(); p.add_argument('--epochs', type=int); p.add_argument('--name')\n"
        "args = p.parse_args()\n"
        "print('channels', sorted(k for k in os.environ if k.startswith('SM_CHANNEL_')), args.name)\n"
        "for e in range(args.epochs):\n"
        "    print(f'Train_error={FACTOR ** e};')\n"
        "print('loss=0.25')\n"
        "open(os.path.join(os.environ['SM_MODEL_DIR'], 'm'), 'w').write('x')\n"
    )
    return src


def test_fit_streams_logs_and_gives_final_metrics_and_analytics(home: Path, source: Path, tmp_path: Path,
                                                                capsys) -> None:
    data = tmp_path / "data"
    data.mkdir()
    estimator = Estimator(entry_point="train.py", source_dir=str(source), role="local", instance_count=1,
                          instance_type="local", hyperparameters={"epochs": 3, "name": "run one"},
                          metric_definitions=DEFS, base_job_name="sdk")
    estimator.fit({"train": str(data), "validation": str(data)})
    out = capsys.readouterr().out
    assert "channels ['SM_CHANNEL_TRAIN', 'SM_CHANNEL_VALIDATION'] run one" in out
    assert "Train_error=0.25;" in out
    assert "Training - Training in progress." in out and "Completed - Training job completed" in out
    assert "Training seconds: " in out and "Billable seconds: " in out
    job = estimator.latest_training_job
    assert job.name.startswith("sdk-")
    finals = {m["MetricName"]: m["Value"] for m in job.describe()["FinalMetricDataList"]}
    assert finals == {"train:error": 0.25, "loss": 0.25}
    assert estimator.model_data.endswith(f"/{job.name}/output/model.tar.gz")
    frame = estimator.training_job_analytics.dataframe()
    assert list(frame.columns) == ["timestamp", "metric_name", "value"]
    assert frame[frame.metric_name == "train:error"]["value"].tolist() == [1.0, 0.5, 0.25]
    assert frame[frame.metric_name == "train:error"]["timestamp"].iloc[0] == 0.0
    per_period = TrainingJobAnalytics(job.name, period=3600, statistic="Maximum").dataframe()
    assert per_period[per_period.metric_name == "train:error"]["value"].tolist() == [1.0]
    csv = tmp_path / "metrics.csv"
    estimator.training_job_analytics.export_csv(csv)
    assert csv.read_text().splitlines()[0] == "timestamp,metric_name,value"


def test_failed_job_raises_with_its_failure_reason(home: Path, tmp_path: Path) -> None:
    script = tmp_path / "boom.py"
    script.write_text("import sys\nprint('ValueError: shapes do not match', file=sys.stderr)\nsys.exit(2)\n")
    estimator = Estimator(image_uri=f"{PY} {script}", role="local", instance_type="local")
    with pytest.raises(UnexpectedStatusException) as info:
        estimator.fit(wait=True, logs="None")
    assert info.value.actual_status == "Failed"
    assert "Failed. Reason: AlgorithmError: algo-1 exited with code 2." in str(info.value)
    assert "ValueError: shapes do not match" in str(info.value)


def test_attach_to_a_job_started_from_the_cli(home: Path, source: Path) -> None:
    started = run_cli("run", "--name", "from-cli", "--detach", "--metric", r"loss=loss=(\S+)", "-H", "epochs=2",
                      "--", PY, str(source / "train.py"), "--epochs", "2", check=True)
    assert "started in the background" in started.stdout
    estimator = Estimator.attach("from-cli")
    assert estimator.latest_training_job.describe()["TrainingJobStatus"] == "Completed"
    assert estimator.hyperparameters() == {"epochs": "2"}
    assert estimator.metric_definitions == [{"Name": "loss", "Regex": r"loss=(\S+)"}]
    assert estimator.training_job_analytics.dataframe()["value"].tolist() == [0.25]


def test_image_directory_with_train_and_channel_as_a_path(home: Path, tmp_path: Path) -> None:
    image = tmp_path / "image"
    image.mkdir()
    (image / "train").write_text(f"#!{PY}\nimport os\nprint('loss=' + str(len(os.listdir(os.environ['SM_CHANNEL_TRAINING']))))\n")
    (image / "train").chmod(0o755)
    data = tmp_path / "data"
    data.mkdir()
    (data / "a").write_text("1")
    (data / "b").write_text("2")
    estimator = Estimator(image_uri=str(image), role="local", instance_type="local",
                          metric_definitions=[{"Name": "files", "Regex": r"loss=(\d+)"}])
    estimator.fit(str(data), logs=False)
    assert estimator.latest_training_job.describe()["FinalMetricDataList"][0]["Value"] == 2.0


def test_fit_warns_of_definitions_that_share_a_name_and_both_feed_the_metric(home: Path, source: Path) -> None:
    shared = [{"Name": "error", "Regex": "Train_error=(.*?);"}, {"Name": "error", "Regex": r"loss=(\S+)"}]
    estimator = Estimator(entry_point="train.py", source_dir=str(source), hyperparameters={"epochs": 2},
                          metric_definitions=shared)
    with pytest.warns(UserWarning, match=r"MetricDefinitions\[1\] and MetricDefinitions\[2\] share the name 'error'"):
        estimator.fit(logs=False)
    frame = estimator.training_job_analytics.dataframe()
    assert frame["metric_name"].tolist() == ["error"] * 3  # one series, each point once
    assert frame["value"].tolist() == [1.0, 0.5, 0.25]


def test_bad_arguments_get_clear_errors(home: Path, source: Path) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        Estimator(image_uri="python x.py", colour="blue")
    with pytest.warns(UserWarning, match="'subnets' has no meaning off AWS"):
        Estimator(image_uri="python x.py", subnets=["subnet-1"])
    with pytest.raises(ValueError, match="Give image_uri"):
        Estimator(role="local")
    with pytest.raises(ValueError, match="entry_point 'nope.py' not found"):
        Estimator(entry_point="nope.py", source_dir=str(source))
    with pytest.raises(ValueError, match="no training job yet"):
        Estimator(image_uri="python x.py").model_data  # noqa: B018
    estimator = Estimator(entry_point="train.py", source_dir=str(source), metric_definitions=[{"Name": "x", "Regex": "("}])
    with pytest.raises(Exception, match="regex does not compile"):
        estimator.fit()


def test_stopped_job_warns_and_ctrl_c_offers_to_stop(home: Path, tmp_path: Path) -> None:
    script = tmp_path / "slow.py"
    script.write_text("import time\nprint('working', flush=True)\ntime.sleep(600)\n")
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import faulthandler\n"
        "faulthandler.dump_traceback_later(45)  # should it hang, where (the test waits 60 s)\n"
        "from trainmon import Estimator\n"
        f"e = Estimator(image_uri='{PY} {script}', role='local', instance_type='local', base_job_name='interrupt')\n"
        "try:\n"
        "    e.fit()\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted; status', e.latest_training_job.describe()['TrainingJobStatus'])\n"
    )
    # Ctrl-C as a terminal's user has it, whatever this process inherited (a shell's background
    # job runs with SIGINT ignored, and Python keeps an ignored SIGINT ignored)
    child = pexpect.spawn(PY, [str(driver)], encoding="utf-8", timeout=60, env={**__import__("os").environ},
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    child.expect("working")
    child.sendintr()
    child.expect(r"Stop training job interrupt-[0-9-]+\? \[y/N\]")
    child.sendline("y")
    child.expect("interrupted; status (Stopping|Stopped)")
    child.expect(pexpect.EOF)
    name = json.loads(run_cli("list", "--json", check=True).stdout)[0]["TrainingJobName"]
    session = Session()
    deadline = time.monotonic() + 30
    while session.describe_training_job(name)["TrainingJobStatus"] != "Stopped" and time.monotonic() < deadline:
        time.sleep(0.1)
    with pytest.warns(UserWarning, match="was stopped"):
        Estimator.attach(name)


def test_documented_example_runs(home: Path) -> None:
    result = subprocess.run([sys.executable, str(ROOT / "docs" / "examples" / "estimator_example.py")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "final train:error 0.3277" in result.stdout
    assert "Completed - Training job completed" in result.stdout


def test_the_sessions_sagemaker_client_is_the_sdks(tmp_path: Path) -> None:
    """Scripts written for the SageMaker SDK call ``session.sagemaker_client``: a SageMaker client
    on the session's store."""
    session = Session(tmp_path / "home")
    assert session.sagemaker_client.store is session.store
    assert session.sagemaker_client.list_training_jobs()["TrainingJobSummaries"] == []
