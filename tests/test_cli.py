"""The read side of the CLI: list, logs (follow, tail, hosts), metrics; several jobs at once."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from trainmon.store import open_store

from .conftest import PY, run_cli


def test_list_is_newest_first_and_filters(home: Path, script) -> None:
    ok = script("print('fine')")
    bad = script("raise SystemExit(1)")
    run_cli("run", "--name", "first-ok", "--", PY, str(ok), check=True)
    run_cli("run", "--name", "second-bad", "--", PY, str(bad))
    listing = run_cli("list", check=True).stdout.splitlines()
    assert listing[0].split()[:3] == ["NAME", "STATUS", "SECONDARY"]
    assert [line.split()[0] for line in listing[1:]] == ["second-bad", "first-ok"]
    failed = json.loads(run_cli("list", "--status", "Failed", "--json", check=True).stdout)
    assert [j["TrainingJobName"] for j in failed] == ["second-bad"]
    named = json.loads(run_cli("list", "--name-contains", "FIRST", "--json", check=True).stdout)
    assert [j["TrainingJobName"] for j in named] == ["first-ok"]


def test_logs_follow_streams_until_the_job_ends(home: Path, script) -> None:
    train = script(
        """
        import time
        for i in range(5):
            print(f"line {i}", flush=True)
            time.sleep(0.2)
        """
    )
    job = subprocess.Popen([sys.executable, "-m", "trainmon", "run", "--name", "follow", "--", PY, str(train)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while open_store(home).get_job("follow") is None and time.monotonic() < deadline:
        time.sleep(0.05)
    follower = run_cli("logs", "follow", "--follow", timeout=60)
    job.wait(timeout=60)
    assert follower.returncode == 0
    assert follower.stdout == "".join(f"line {i}\n" for i in range(5))


def test_logs_tail(home: Path, script) -> None:
    train = script("for i in range(100): print(i)")
    run_cli("run", "--name", "tail", "--", PY, str(train), check=True)
    assert run_cli("logs", "tail", "--tail", "3", check=True).stdout == "97\n98\n99\n"


def test_metrics_table_per_period(home: Path, script) -> None:
    train = script(
        """
        print("loss=4")
        print("loss=2")
        print("loss=nan")
        print("acc=0.5")
        """
    )
    run_cli("run", "--name", "table", "--metric", r"loss=loss=(\S+)", "--metric", r"acc=acc=(\S+)",
            "--", PY, str(train), check=True)
    rows = json.loads(run_cli("metrics", "table", "--period", "3600", "--json", check=True).stdout)
    by_name = {r["MetricName"]: r for r in rows}
    assert by_name["loss"]["SampleCount"] == 3 and by_name["loss"]["FiniteCount"] == 2
    assert by_name["loss"]["Average"] == 3.0 and by_name["loss"]["Minimum"] == 2.0
    assert by_name["loss"]["Maximum"] == 4.0 and by_name["loss"]["Last"] == "nan"
    assert by_name["acc"]["Average"] == 0.5
    only = json.loads(run_cli("metrics", "table", "--metric", "acc", "--json", check=True).stdout)
    assert {r["MetricName"] for r in only} == {"acc"}
    text = run_cli("metrics", "table", check=True).stdout
    assert "METRIC" in text and "loss" in text and "AVERAGE" in text


def test_describe_shows_diagnostics_for_a_misspelled_definition(home: Path, script) -> None:
    train = script("print('epoch 1 Valid_error=0.3;')")
    run_cli("run", "--name", "typo", "--metric", "valid:error=Valid_eror=(.*?);", "--", PY, str(train), check=True)
    text = run_cli("describe", "typo", check=True).stdout
    assert "valid:error: 0 points" in text
    assert "no record contains 'Valid_eror='" in text
    assert json.loads(run_cli("describe", "typo", "--json", check=True).stdout)["FinalMetricDataList"] == []


def test_several_jobs_write_while_others_read(home: Path, script) -> None:
    train = script(
        """
        import time
        for i in range(300):
            print(f"step {i} loss={i}", flush=True)
            if i % 50 == 0:
                time.sleep(0.05)
        """
    )
    runs = [
        subprocess.Popen([sys.executable, "-m", "trainmon", "run", "--name", f"busy-{n}", "--metric",
                          r"loss=loss=(\S+)", "--", PY, str(train)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for n in range(3)
    ]
    readers = []
    while any(r.poll() is None for r in runs):
        readers.append(run_cli("list"))
    errors = [r.communicate()[1] for r in runs]
    assert all(r.returncode == 0 for r in runs), errors
    assert all(r.returncode == 0 and "locked" not in r.stderr for r in readers)
    store = open_store(home)
    for n in range(3):
        job = store.get_job(f"busy-{n}")
        assert job.status == "Completed"
        assert [p.value for p in store.points(job.id)] == [float(i) for i in range(300)]


def test_bad_paths_and_numbers_give_one_line_errors(home: Path, tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.log")
    parse = run_cli("parse", "--metric", "l=l=(\\d)", missing)
    assert parse.returncode == 2 and parse.stderr.startswith("trainmon: ValidationException: cannot read log")
    hps = run_cli("run", "--name", "x", "--hyperparameters", missing, "--", "true")
    assert hps.returncode == 2 and "is neither JSON nor a readable file" in hps.stderr
    run_cli("run", "--name", "p", "--metric", "l=l=(\\d)", "--", PY, "-c", "print('l=1')", check=True)
    period = run_cli("metrics", "p", "--period", "-5")
    assert period.returncode == 2 and "--period must be a positive number" in period.stderr
    for result in (parse, hps, period):
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_logs_api_shows_control_characters_as_cloudwatch_does(home: Path) -> None:
    import trainmon

    run_cli("run", "--name", "tabs", "--", PY, "-c", "print('[0]\\ttrain-rmse:0.5')", check=True)
    logs = trainmon.client("logs")
    (stream,) = logs.describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix="tabs/")["logStreams"]
    page = logs.get_log_events(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=stream["logStreamName"])
    assert [e["message"] for e in page["events"]] == ["[0]#011train-rmse:0.5"]
    assert run_cli("logs", "tabs", check=True).stdout == "[0]\ttrain-rmse:0.5\n"  # the terminal view keeps the tab


def test_export_every_raw_point_with_its_record(home: Path, tmp_path: Path) -> None:
    import csv
    import io

    import pyarrow.parquet as pq

    import trainmon

    run_cli("run", "--name", "exp", "--metric", r"loss=loss=(\S+)", "--", PY, "-c",
            "print('a')\nprint('loss=0.5')\nprint('loss=nan')", check=True)
    rows = list(csv.DictReader(io.StringIO(run_cli("export", "exp", check=True).stdout)))
    assert [(r["metric_name"], r["value"], r["host"], r["record"]) for r in rows] == [
        ("loss", "0.5", "algo-1", "2"), ("loss", "nan", "algo-1", "3")]
    assert rows[0]["log_stream"].startswith("exp/algo-1-")
    lines = [json.loads(line) for line in run_cli("export", "exp", "--format", "jsonl", check=True).stdout.splitlines()]
    assert [line["value"] for line in lines] == [0.5, "nan"]
    target = tmp_path / "points.parquet"
    run_cli("export", "exp", "--format", "parquet", "--output", str(target), check=True)
    assert pq.read_table(target).column("record").to_pylist() == [2, 3]
    frame = trainmon.analytics("exp").dataframe()
    assert frame["metric_name"].tolist() == ["loss", "loss"]


def test_many_processes_creating_the_store_at_once_all_succeed(tmp_path: Path) -> None:
    home = tmp_path / "fresh"
    code = "from pathlib import Path; import sys; from trainmon.store import open_store; open_store(Path(sys.argv[1]))"
    for _ in range(3):
        if home.exists():
            import shutil

            shutil.rmtree(home)
        runs = [subprocess.Popen([sys.executable, "-c", code, str(home)], stderr=subprocess.PIPE, text=True)
                for _ in range(8)]
        errors = [run.communicate(timeout=60)[1] for run in runs]
        assert all(run.returncode == 0 for run in runs), errors


def test_the_demo_runs_a_real_job_with_live_metrics(home: Path) -> None:
    result = run_cli("demo", "--epochs", "2", "--name", "demo-test", timeout=180)
    assert result.returncode == 0, result.stderr
    assert "» train:error = " in result.stdout  # live metrics, while the job runs
    progress = [line for line in result.stdout.splitlines() if "» epoch:progress" in line]
    assert len(progress) == 2 and all("epoch:progress = 100 " in line for line in progress), progress
    assert all("points, the last shown)" in line for line in progress)  # a progress bar's redraws shown once
    assert "Training job demo-test: Completed\n" in result.stdout  # the secondary status only when it says more
    doc = json.loads(run_cli("describe", "demo-test", "--json", check=True).stdout)
    assert {m["MetricName"] for m in doc["FinalMetricDataList"]} == {
        "train:error", "validation:error", "train:loss", "validation:rmse", "epoch:progress"}
    assert doc["HyperParameters"] == {"epochs": "2", "learning_rate": "0.5", "batch_size": "64"}


def test_the_cli_starts_without_lark_or_regex() -> None:
    """Metric math's parser (lark) and the time-limited regex engine are loaded when first needed,
    not by every command at start."""
    code = "import sys, trainmon.cli; print(sorted({'lark', 'regex'} & set(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_parse_loads_neither_the_store_nor_the_operations(tmp_path: Path) -> None:
    """Only the group of the command given is imported: ``trainmon parse`` needs the parsing layer."""
    log = tmp_path / "train.log"
    log.write_text("epoch 1 loss=0.5\n")
    code = ("import sys; from trainmon.cli import main; status = main(['parse', '--metric', 'loss=loss=(\\S+)', "
            f"{str(log)!r}]); print(sorted(m for m in ('trainmon.store', 'trainmon.api', 'trainmon.runtime') "
            "if m in sys.modules), status)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["line 1\tloss\t0.5", "[] 0"]


def test_each_command_group_adds_the_commands_its_table_names() -> None:
    import argparse
    import importlib

    from trainmon.cli import GROUPS, build_parser
    from trainmon.cli.common import Commands

    for group, names in GROUPS.items():
        subparsers = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(f"trainmon.cli.{group}").register(Commands(subparsers))
        assert tuple(subparsers.choices) == names
    every = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert tuple(every) == tuple(name for names in GROUPS.values() for name in names)


def test_describe_shows_the_command_each_host_ran(home: Path, tmp_path: Path) -> None:
    """The Command the job stored (what its hosts run), not the request's fields: a directory image
    runs its train, a command-line image is split into arguments."""
    from trainmon.api.sagemaker import register_job
    from trainmon.cli.jobs import describe_text

    image = tmp_path / "image"
    image.mkdir()
    (image / "train").write_text(f"#!{PY}\nprint('hi')\n")
    (image / "train").chmod(0o755)
    db = open_store(home)
    try:
        for name, algorithm, shown in [
            ("from-directory", {"TrainingImage": str(image)}, str((image / "train").resolve())),
            ("from-command-line", {"TrainingImage": "python3 train.py --note 'two words'"},
             "python3 train.py --note 'two words'"),
            ("from-entrypoint", {"ContainerEntrypoint": ["python3", "-c", "print(1)"], "ContainerArguments": ["x"]},
             "python3 -c 'print(1)' x"),
        ]:
            register_job(db, {"TrainingJobName": name, "ProfilerConfig": {"DisableProfiler": True},
                              "AlgorithmSpecification": {"TrainingInputMode": "File", **algorithm}})
            facts = dict(line.strip().split("  ", 1) for line in describe_text(db, name).splitlines()[1:5])
            assert facts["Command"].strip() == shown
    finally:
        db.close()


def test_describe_reads_the_job_once(home: Path, monkeypatch) -> None:
    """``trainmon describe`` shows DescribeTrainingJob and DescribeJobMetrics from one read of the job:
    the job reaped (were it an orphan) once, the job and its final metrics read once."""
    from trainmon.api import sagemaker
    from trainmon.api.sagemaker import register_job
    from trainmon.cli.jobs import describe_text
    from trainmon.store import Batch

    db = open_store(home)
    try:
        job = register_job(db, {"TrainingJobName": "once", "ProfilerConfig": {"DisableProfiler": True},
                                "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["true"]}})
        stream = db.add_stream(job.id, "algo-1", "once/algo-1-1", 1000)
        db.write_batch(Batch(job.id, chunks=[(stream.id, 0, 1, 1000, "loss=0.5")], stream_stats={stream.id: (1, 9, 1000)},
                             points=[("loss", 1000, 0.5, "algo-1", stream.id, 0)]))
        calls: dict[str, int] = {}

        def counted(name: str, call):
            def wrapper(*args, **kwargs):
                calls[name] = calls.get(name, 0) + 1
                return call(*args, **kwargs)
            return wrapper

        monkeypatch.setattr(sagemaker.orphans, "reaped", counted("reaped", sagemaker.orphans.reaped))
        monkeypatch.setattr(db, "get_job", counted("get_job", db.get_job))
        monkeypatch.setattr(db, "final_metrics", counted("final_metrics", db.final_metrics))
        text = describe_text(db, "once")
        assert calls == {"reaped": 1, "get_job": 1, "final_metrics": 1}
        (row,) = [line.split() for line in text.splitlines() if line.strip().startswith("loss")]
        assert row[:2] == ["loss", "0.5"]  # the final value, from FinalMetricDataList
    finally:
        db.close()


def test_a_busy_port_says_to_give_another_or_0(home: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        busy = run_cli("server", "--port", str(port), timeout=60)
    assert busy.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in busy.stderr
    assert "--port 0 for any free one" in busy.stderr


def test_describe_says_where_a_command_ran(home: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "project dir"
    workdir.mkdir()
    (workdir / "train.py").write_text("import os; print('cwd=' + os.getcwd())\n", encoding="utf-8")
    run_cli("run", "--name", "where", "--", PY, "train.py", "a b", check=True, cwd=workdir)
    shown = run_cli("describe", "where", check=True).stdout
    assert re.search(rf"\n  Directory +{re.escape(str(workdir))}\n", shown), shown
    assert re.search(rf"\n  Command +{re.escape(PY)} train.py 'a b'\n", shown), shown
    assert f"cwd={workdir}" in run_cli("logs", "where", check=True).stdout
