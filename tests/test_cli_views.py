"""What the CLI shows, as a new user meets it: how a followed job ended, durations, aligned
descriptions, why there are no final metrics, units."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pytest

from .conftest import PY, run_cli, wait_for


@pytest.mark.parametrize(("code", "status", "exit_status", "words"), [
    ("print('fine')", "Completed", 0, "ended Completed"),
    ("import sys; print('broken', file=sys.stderr); sys.exit(4)", "Failed", 1,
     "ended Failed: AlgorithmError: algo-1 exited with code 4."),
])
def test_logs_follow_says_how_the_job_ended_and_exits_by_it(home: Path, tmp_path: Path, code: str, status: str,
                                                            exit_status: int, words: str) -> None:
    go = tmp_path / "go"
    train = tmp_path / "train.py"
    train.write_text(f"import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.02)\n{code}\n")
    run_cli("run", "--name", "followed", "--detach", "--", PY, str(train), check=True)
    go.touch()
    follower = run_cli("logs", "followed", "--follow", timeout=120)
    assert follower.returncode == exit_status, follower.stderr
    assert f"trainmon: job followed {words}" in follower.stderr


def test_a_followed_stop_exits_3(home: Path, tmp_path: Path) -> None:
    train = tmp_path / "train.py"
    train.write_text("import time\nprint('running', flush=True)\ntime.sleep(600)\n")
    run_cli("run", "--name", "stopped", "--detach", "--", PY, str(train), check=True)
    wait_for(lambda: "running" in run_cli("logs", "stopped").stdout, "the first line")
    run_cli("stop", "stopped", check=True)
    follower = run_cli("logs", "stopped", "--follow", timeout=120)
    assert follower.returncode == 3 and "trainmon: job stopped ended Stopped" in follower.stderr


def test_list_shows_a_running_jobs_duration_and_iso_times(home: Path, tmp_path: Path) -> None:
    train = tmp_path / "train.py"
    train.write_text("import time\nprint('running', flush=True)\ntime.sleep(600)\n")
    run_cli("run", "--name", "running", "--detach", "--", PY, str(train), check=True)
    try:
        wait_for(lambda: "running" in run_cli("logs", "running").stdout, "the first line")
        created = datetime.fromisoformat(json.loads(run_cli("list", "--json", check=True).stdout)[0]["CreationTime"])
        wait_for(lambda: time.time() - created.timestamp() >= 2, "two seconds of the job")
        row = run_cli("list", check=True).stdout.splitlines()[1].split()
        assert row[:3] == ["running", "InProgress", "Training"]
        assert int(row[-2]) >= 2 and row[-1] == "s"  # to now, not to its last status change
        listed = json.loads(run_cli("list", "--json", check=True).stdout)[0]
        assert listed["TrainingJobArn"].endswith("/running") and "+00:00" in listed["LastModifiedTime"]
    finally:
        run_cli("stop", "running", "--wait", timeout=180)


def test_describe_aligns_its_labels_and_says_why_there_are_no_final_metrics(home: Path) -> None:
    run_cli("run", "--name", "plain", "-H", "learning_rate=0.1", "--", PY, "-c", "print('no metrics here')",
            check=True)
    text = run_cli("describe", "plain", check=True).stdout
    lines = text.splitlines()
    assert lines[0] == "Training job plain: Completed"
    facts = lines[1:lines.index("")]
    columns = {line.index(value) for line, value in ((fact, fact.split("  ")[-1].strip()) for fact in facts)}
    assert len(columns) == 1, facts  # every value starts in one column, "Hyperparameters" included
    assert "  (none: the job has no metric definitions)" in lines
    run_cli("run", "--name", "unmatched", "--metric", "loss=loss=(\\S+)", "--", PY, "-c", "print('lss=1')",
            check=True)
    assert "  (none: no definition matched; see below)" in run_cli("describe", "unmatched", check=True).stdout


def test_describe_lists_the_final_metrics_in_the_order_they_are_defined(home: Path) -> None:
    """As the console shows them: the metric defined first (the one a user watches most) first, not
    the first by name."""
    run_cli("run", "--name", "ordered", "--metric", "val:loss=loss=(\\S+)", "--metric", "epoch=epoch (\\d+)", "--",
            PY, "-c", "print('epoch 1 loss=0.5')", check=True)
    lines = run_cli("describe", "ordered", check=True).stdout.splitlines()
    table = lines[lines.index("Final metrics") + 2:]
    assert [line.split()[0] for line in table[:2]] == ["val:loss", "epoch"]


def test_stopped_by_its_time_limit_shows_the_secondary_status(home: Path, tmp_path: Path) -> None:
    train = tmp_path / "train.py"
    train.write_text("import time\ntime.sleep(600)\n")
    run_cli("run", "--name", "limited", "--max-runtime-seconds", "1", "--stop-grace-seconds", "0", "--", PY,
            str(train), timeout=120)
    assert run_cli("describe", "limited", check=True).stdout.splitlines()[0] == (
        "Training job limited: Stopped (MaxRuntimeExceeded)")


def test_system_metrics_and_profiles_carry_units(home: Path, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    train = tmp_path / "train.py"
    train.write_text("import time\nx = bytearray(20 << 20)\nend = time.time() + 2.5\nwhile time.time() < end:\n"
                     "    sum(range(10000))\n")
    run_cli("run", "--name", "units", "--system-metrics-interval", "1", "--profiling-interval-ms", "100", "--", PY,
            str(train), check=True, timeout=120)
    system = run_cli("metrics", "units", "--system", "--metric", "CPUUtilization", "--metric", "ResidentMemory",
                     check=True).stdout
    rows = [line.split() for line in system.splitlines()[2:]]
    cpu = [row for row in rows if row[0] == "CPUUtilization"]
    memory = [row for row in rows if row[0] == "ResidentMemory"]
    assert cpu and all(row[-1].endswith("%") for row in cpu)
    # bytes in a binary unit; a sample taken as the job's processes ended may hold none ("0 B")
    assert memory and all(row[-1] in ("KiB", "MiB", "GiB") or row[-2:] == ["0", "B"] for row in memory)
    assert any(row[-1] in ("KiB", "MiB", "GiB") for row in memory)
    profile = run_cli("profile", "units", "--metric", "job_resident_bytes", "--metric", "job_cpu_pct",
                      check=True).stdout
    resident = next(line for line in profile.splitlines() if "job_resident_bytes" in line)
    assert "MiB" in resident and "e+" not in resident
    assert "%" in next(line for line in profile.splitlines() if "job_cpu_pct" in line)
