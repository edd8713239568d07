"""Hyperparameter tuning: what the tuner costs over running the same trials by hand, how soon it
starts the next trial, and how soon it stops a trial the median rule condemns.

1. Overhead. A Random tuning job of 20 trials, one at a time, of a script that prints its loss for
   ten epochs; then the same 20 jobs (the same hyperparameters, read back from the tuning job) run
   by a plain loop of ``trainmon run``, as one would by hand. Figure: the tuning job's wall time
   (creation to its end) against the loop's; target <= 1.05x plus one trial's start (the loop's
   mean time per job).
2. Hand-over. In the tuning job above, from each trial's last objective point (its time as
   printed) to the next trial's creation; baseline: in the loop, from each job's last point to the
   next job's creation (``trainmon run`` returning and the next one starting).
3. Early stopping. A Grid of six trials, all started at once, with Auto early stopping: five good
   ones end at once; the sixth prints a bad value every 100 ms until stopped. Figure: from the
   point that condemns it (its first value after three trials ended) to its Stopping transition;
   baseline: how long a point a job prints takes to become readable in the store (a reader polling
   every 5 ms), measured on a plain job in the same run: the least any reader of the store could do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from .common import Report, child_env, heading, median, percentile, scratch_dir, table

TRIALS = 20
OVERHEAD_TARGET = 1.05
METRIC = "validation:loss"
REGEX = "validation:loss=([-0-9.e]+);"
SCRIPT = """\
import json, os, time
hp = json.loads(os.environ["SM_HPS"])
lr, depth = float(hp["lr"]), int(hp["depth"])
final = (lr - 0.1) ** 2 * 100 + (depth - 6) ** 2 * 0.1 + float(hp.get("offset", "0"))
epochs = int(hp.get("epochs", "10"))
for epoch in range(1, epochs + 1):
    print(f"epoch {epoch} validation:loss={final + 1.0 / epoch:.6f};", flush=True)
if final > float(hp.get("forever_over", "inf")):  # a trial that runs until it is stopped
    while True:
        print(f"validation:loss={final:.6f};", flush=True)
        time.sleep(0.1)
"""


def _request(name: str, script: Path, **config: Any) -> dict[str, Any]:
    return {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobConfig": {
            "Strategy": "Random", "RandomSeed": 1,
            "HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": METRIC},
            "ResourceLimits": {"MaxNumberOfTrainingJobs": TRIALS, "MaxParallelTrainingJobs": 1},
            "ParameterRanges": {
                "ContinuousParameterRanges": [{"Name": "lr", "MinValue": "0.001", "MaxValue": "1",
                                               "ScalingType": "Logarithmic"}],
                "IntegerParameterRanges": [{"Name": "depth", "MinValue": "1", "MaxValue": "10"}]},
            **config},
        "TrainingJobDefinition": {
            "AlgorithmSpecification": {"TrainingImage": f"{sys.executable} {script}", "TrainingInputMode": "File",
                                       "MetricDefinitions": [{"Name": METRIC, "Regex": REGEX}]},
            "StaticHyperParameters": {"epochs": "10"}},
    }


def _wait_ended(client: Any, name: str, timeout_s: float = 900) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        answer: dict[str, Any] = client.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)
        if answer["HyperParameterTuningJobStatus"] not in ("InProgress", "Stopping"):
            return answer
        if time.monotonic() > deadline:
            raise TimeoutError(f"tuning job {name} did not end")
        time.sleep(0.05)


def _last_point_s(store: Any, job: str) -> float:
    row = store.get_job(job)
    stamps = store.point_columns(row.id, METRIC).stamps
    return float(stamps[-1]) / 1000.0


def _gaps(store: Any, names: list[str]) -> list[float]:
    """From each job's last point to the next job's creation."""
    rows = {name: store.get_job(name) for name in names}
    return [rows[b].creation_time - _last_point_s(store, a) for a, b in zip(names, names[1:], strict=False)]


def _print_to_readable(home: Path, script: Path) -> list[float]:
    """How long each point a running job prints takes to be readable in the store."""
    from trainmon.store import open_store

    name = "readable"
    process = subprocess.Popen([sys.executable, "-m", "trainmon", "run", "--name", name, "--metric",
                                f"{METRIC}={REGEX}", "--hyperparameters",
                                json.dumps({"lr": "0.1", "depth": "6", "forever_over": "-1"}), "--", sys.executable,
                                str(script)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=child_env(TRAINMON_HOME=str(home)))
    store = open_store(home)
    delays: list[float] = []
    seen = 0
    try:
        deadline = time.monotonic() + 60
        while len(delays) < 50 and time.monotonic() < deadline:
            row = store.get_job(name)
            if row is not None:
                stamps = store.point_columns(row.id, METRIC).stamps
                now = time.time()
                if len(stamps) > seen:
                    if seen:  # (the first read may find points written before the reader looked)
                        delays.append(now - float(stamps[-1]) / 1000.0)
                    seen = len(stamps)
            time.sleep(0.005)
    finally:
        subprocess.run([sys.executable, "-m", "trainmon", "stop", name, "--wait"], env=child_env(TRAINMON_HOME=str(home)),
                       capture_output=True, timeout=120)
        process.wait(timeout=120)
        store.close()
    return delays


def run(scale: float) -> Report:
    import trainmon
    from trainmon.store import open_store

    report = Report("tuning")
    trials = max(4, round(TRIALS * scale))
    heading(f"Tuning: {trials} trials by the tuner against a loop of `trainmon run`; hand-over; early stopping")
    with scratch_dir("tuning-") as root:
        script = root / "objective.py"
        script.write_text(textwrap.dedent(SCRIPT), encoding="utf-8")
        home = root / "home"
        home.mkdir()
        os.environ["TRAINMON_HOME"] = str(home)  # the tuner and its trials' supervisors follow it
        client = trainmon.client("sagemaker", home=home)
        store = open_store(home)

        body = _request("overhead", script)
        body["HyperParameterTuningJobConfig"]["ResourceLimits"]["MaxNumberOfTrainingJobs"] = trials
        client.create_hyper_parameter_tuning_job(**body)
        described = _wait_ended(client, "overhead")
        tuned_s = described["HyperParameterTuningEndTime"].timestamp() - described["CreationTime"].timestamp()
        summaries = sorted(client.list_training_jobs_for_hyper_parameter_tuning_job(
            HyperParameterTuningJobName="overhead", MaxResults=100, SortBy="CreationTime")["TrainingJobSummaries"],
            key=lambda s: s["CreationTime"])
        report.check(len(summaries) == trials and all(s["TrainingJobStatus"] == "Completed" for s in summaries),
                     f"the tuning job ran {trials} trials, each Completed")

        loop_names = []
        start = time.perf_counter()
        for number, summary in enumerate(summaries, start=1):
            name = f"loop-{number:03d}"
            hyperparameters = {"epochs": "10", **summary["TunedHyperParameters"]}
            subprocess.run([sys.executable, "-m", "trainmon", "run", "--name", name, "--metric", f"{METRIC}={REGEX}",
                            "--hyperparameters", json.dumps(hyperparameters), "--", sys.executable, str(script)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                           env=child_env(TRAINMON_HOME=str(home)), timeout=300)
            loop_names.append(name)
        loop_s = time.perf_counter() - start
        per_job = loop_s / trials
        finals = {s["TrainingJobName"]: s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] for s in summaries}
        loop_finals = [next(v for n, v, _ in store.final_metrics(store.get_job(name).id) if n == METRIC)
                       for name in loop_names]
        report.check(loop_finals == [finals[s["TrainingJobName"]] for s in summaries],
                     "each loop job's final objective is its trial's")
        tuner_gaps = _gaps(store, [s["TrainingJobName"] for s in summaries])
        loop_gaps = _gaps(store, loop_names)

        early = _request("early", script, TrainingJobEarlyStoppingType="Auto", Strategy="Grid")
        early["HyperParameterTuningJobConfig"]["ResourceLimits"] = {"MaxParallelTrainingJobs": 6}
        early["HyperParameterTuningJobConfig"]["ParameterRanges"] = {"CategoricalParameterRanges": [
            {"Name": "offset", "Values": ["0", "0.01", "0.02", "0.03", "0.04", "50"]}]}
        early["TrainingJobDefinition"]["StaticHyperParameters"] = {"epochs": "3", "lr": "0.1", "depth": "6"}
        early["TrainingJobDefinition"]["StaticHyperParameters"]["forever_over"] = "10"
        client.create_hyper_parameter_tuning_job(**early)
        _wait_ended(client, "early")
        found = client.list_training_jobs_for_hyper_parameter_tuning_job(HyperParameterTuningJobName="early",
                                                                         MaxResults=100)["TrainingJobSummaries"]
        bad = [s for s in found if s["TunedHyperParameters"]["offset"] == "50"]
        report.check(len(bad) == 1 and bad[0]["TrainingJobStatus"] == "Stopped"
                     and all(s["TrainingJobStatus"] == "Completed" for s in found if s not in bad),
                     "early stopping stopped the bad trial and no good one")
        latency_s = _decision_latency(store, client, found, bad[0]["TrainingJobName"]) if bad else float("nan")
        readable = _print_to_readable(home, script)
        store.close()

    overhead = tuned_s / loop_s
    table(["", "seconds", "per trial"],
          [["tuning job", f"{tuned_s:.1f}", f"{tuned_s / trials:.2f}"], ["loop of trainmon run", f"{loop_s:.1f}",
                                                                         f"{per_job:.2f}"]])
    allowed = OVERHEAD_TARGET + per_job / loop_s
    report.ratio(f"tuning job of {trials} trials / the same jobs by a loop of trainmon run", overhead,
                 f"<= {allowed:.3f}x (1.05x plus one trial's start)", overhead <= allowed)
    report.ratio("last objective point to the next trial's creation: tuner / loop (median)",
                 median(tuner_gaps) / median(loop_gaps), detail=f"tuner {median(tuner_gaps) * 1e3:.0f} ms, "
                 f"p90 {percentile(tuner_gaps, 0.9) * 1e3:.0f} ms; loop {median(loop_gaps) * 1e3:.0f} ms")
    report.ratio("early stop: condemning point to Stopping / a point printed to readable (median)",
                 latency_s / median(readable), detail=f"{latency_s * 1e3:.0f} ms against "
                 f"{median(readable) * 1e3:.0f} ms (p90 {percentile(readable, 0.9) * 1e3:.0f} ms)")
    return report


def _decision_latency(store: Any, client: Any, trials: list[dict[str, Any]], bad: str) -> float:
    """From the bad trial's first point printed after the third good trial ended to its Stopping."""
    ends = sorted(s["TrainingEndTime"].timestamp() for s in trials if s["TrainingJobName"] != bad)
    third_end = ends[2]
    row = store.get_job(bad)
    stamps = [float(s) / 1000.0 for s in store.point_columns(row.id, METRIC).stamps]
    condemning = next(s for s in stamps if s >= third_end)
    stopping = next(t["StartTime"].timestamp() for t in client.describe_training_job(TrainingJobName=bad)[
        "SecondaryStatusTransitions"] if t["Status"] == "Stopping")
    return stopping - condemning
