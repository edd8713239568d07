"""`trainmon parse`: test definitions on saved logs before a job runs."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import run_cli

DEFS = json.dumps([
    {"Name": "train:error", "Regex": "Train_error=(.*?);"},
    {"Name": "validation:rmse", "Regex": r".*\[[0-9]+\].*#011validation-rmse:([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?).*"},
    {"Name": "typo", "Regex": "Valid_eror=(.*?);"},
])
LOG = "héllo\nTrain_error=0.5; Valid_error=0.6;\r\n[0]\ttrain-rmse:0.3\tvalidation-rmse:0.4\nTrain_error=nan;\rTrain_error=abc;\n".encode()


def test_json_lines_give_line_offset_name_and_value(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(LOG)
    result = run_cli("parse", "--metric-definitions", DEFS, "--json", str(log))
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert rows == [
        {"line": 2, "offset": len("héllo\n".encode()), "name": "train:error", "value": 0.5},
        {"line": 3, "offset": LOG.index(b"[0]"), "name": "validation:rmse", "value": 0.4},
        {"line": 4, "offset": LOG.index(b"Train_error=nan"), "name": "train:error", "value": "nan"},
    ]


def test_summary_on_stderr_explains_rejections_and_misses(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(LOG)
    result = run_cli("parse", "--metric-definitions", DEFS, str(log))
    assert "train:error: 2 points, 1 NaN/infinite (kept, left out of statistics), 1 rejected (1 capture is not a number)" in result.stderr
    assert "typo: 0 points" in result.stderr
    assert "no record contains 'Valid_eror='" in result.stderr
    assert result.stdout.splitlines()[0] == "line 2\ttrain:error\t0.5"


def test_sagemaker_mode_keeps_cr_inside_records(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(LOG)
    result = run_cli("parse", "--metric", "e=Train_error=(.*?);", "--mode", "sagemaker", "--json", str(log))
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["line"], r["value"]) for r in rows] == [(2, 0.5), (4, "nan")]


def test_stdin_is_read_with_dash() -> None:
    result = run_cli("parse", "--metric", "loss=loss=(\\S+)", "--json", "-", input=b"a\nloss=1\nloss=2")
    assert [json.loads(line)["value"] for line in result.stdout.splitlines()] == [1.0, 2.0]


def test_tab_in_definition_warns_with_hash_011(tmp_path: Path) -> None:
    result = run_cli("parse", "--metric", "r=\\tvalidation-rmse:(\\S+)", "-", input=b"[0]\tvalidation-rmse:1\n")
    assert "write '#011' instead" in result.stderr
    # the regex as the user wrote it (no doubled backslashes), the record as the regex sees it (#011, not a tab)
    assert "regex '\\tvalidation-rmse:(\\S+)' did not match records holding '#011validation-rmse:'" in result.stderr


def test_invalid_definitions_exit_2_with_a_readable_message() -> None:
    result = run_cli("parse", "--metric-definitions", '[{"Name": "x", "Regex": "no group"}]', "-", input=b"")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "trainmon: ValidationException: Invalid metric definitions:\n"
        "  MetricDefinitions[1] ('x'): regex has no capture group; put the value in parentheses, e.g. 'loss=(\\S+)'."
    )


LATENCY_LOG = b"step 1 latency=250ms/step\nstep 2 latency=0.3s/step\nlatency=fast\n"


def test_definitions_sharing_a_name_warn_once_and_are_reported_each_by_position() -> None:
    result = run_cli("parse", "--metric", "latency=latency=([0-9.]+)ms/step", "--metric",
                     "latency=latency=([0-9.]+)s/step", "--json", "-", input=LATENCY_LOG)
    assert result.returncode == 0, result.stderr
    assert [(r["line"], r["name"], r["value"]) for r in map(json.loads, result.stdout.splitlines())] == [
        (1, "latency", 250.0), (2, "latency", 0.3)]
    warning = ("trainmon: warning: MetricDefinitions[1] and MetricDefinitions[2] share the name 'latency': each feeds "
               "the one metric 'latency' (as on SageMaker), and a record matched by more than one of them gives it "
               "a point from each, with the same timestamp.")
    assert result.stderr.splitlines()[0] == warning
    assert result.stderr.count("share the name") == 1
    assert "  latency (MetricDefinitions[1]): 1 point\n" in result.stderr
    assert "  latency (MetricDefinitions[2]): 1 point\n" in result.stderr


def test_a_definition_repeated_exactly_warns_and_gives_each_point_twice(tmp_path: Path) -> None:
    defs = tmp_path / "defs.json"
    defs.write_text(json.dumps({"MetricDefinitions": [{"Name": "loss", "Regex": r"loss=(\S+)"}] * 2}))
    result = run_cli("parse", "--metric-definitions", str(defs), "-", input=b"loss=0.5\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["line 1\tloss\t0.5", "line 1\tloss\t0.5"]
    assert result.stderr.splitlines()[0] == (
        "trainmon: warning: MetricDefinitions[2] ('loss') repeats MetricDefinitions[1] exactly (same Name and Regex): "
        "both are kept, so each record they match gives 'loss' two equal points; remove one of them.")


def test_a_regex_no_engine_bounds_on_long_records_is_warned_about_and_its_misses_are_not_called_absent() -> None:
    """A lookahead (RE2 cannot run it) in a regex that Python's re is proven fast on for 57
    characters only: warned about before any record is read, with the reason and the way out; each
    long record it is stopped on is rejected, and the summary says that, not that no record
    holds its literal."""
    slow = r"\s.*\s.*loss=(?=\d)(\S+)"
    lines = b"".join(b" ".join([b"w"] * 995) + b" loss=x\n" for _ in range(4))  # 2,000 characters: past the limit
    result = run_cli("parse", "--metric", f"loss={slow}", "-", input=lines)
    assert result.returncode == 0, result.stderr
    warning, *_ = [line for line in result.stderr.splitlines() if "linear-time engine cannot run it" in line]
    assert "(lookaround)" in warning and "at most 57 characters" in warning and "50 ms limit" in warning
    assert "Rewrite it without lookaround" in warning
    assert "loss: 0 points, 4 rejected (4 matching stopped after 50 ms" in result.stderr
    assert "no record contains" not in result.stderr
    quick = run_cli("parse", "--metric", r"loss=loss=(?=\d)(\S+)", "-", input=lines)  # linear: no warning
    assert "linear-time engine" not in quick.stderr and "no record matched" not in quick.stderr


def test_strict_fails_when_a_definition_yields_no_point(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("epoch 1 loss=0.5\nepoch 2 loss=x\n", encoding="utf-8")
    both = ("--metric", r"loss=loss=(\S+)", "--metric", r"acc=acc=(\S+)")
    strict = run_cli("parse", "--strict", *both, str(log))
    assert strict.returncode == 1
    assert strict.stdout == "line 1\tloss\t0.5\n"  # every point is still printed
    assert f"--strict: no point from acc in {log}" in strict.stderr
    assert run_cli("parse", *both, str(log)).returncode == 0  # without --strict, a summary only
    rejected = run_cli("parse", "--strict", "--metric", r"loss=loss=(x)", str(log))
    assert rejected.returncode == 1 and "1 rejected" in rejected.stderr and "no record contains" not in rejected.stderr
    assert run_cli("parse", "--strict", "--metric", r"loss=loss=(\S+)", str(log)).returncode == 0


def test_a_mistyped_option_names_the_one_meant(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("loss=0.5\n", encoding="utf-8")
    typo = run_cli("parse", "--metrics", r"loss=loss=(\S+)", str(log))
    assert typo.returncode == 2 and "--metrics: did you mean --metric?" in typo.stderr
    assert "--stats: did you mean --status?" in run_cli("list", "--stats", "Failed").stderr
    assert "did you mean" not in run_cli("list", "--zzzzzz").stderr


def test_a_definition_that_found_nothing_says_what_the_log_nearly_holds(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("epoch 1 Loss=0.5\nepoch 1 acc: 0.9\n", encoding="utf-8")
    shown = run_cli("parse", "--metric", r"loss=loss=(\S+)", "--metric", r"acc=acc=(\S+)", "--metric",
                    r"f1=f1=(\S+)", str(log)).stderr
    assert "no record contains 'loss=', but the text holds 'Loss=', 'loss=' in another case" in shown
    assert "no record contains 'acc=', but the text holds 'acc:' where the regex needs 'acc='" in shown
    assert "no record contains 'f1=': check the spelling in regex 'f1=(\\S+)'" in shown
