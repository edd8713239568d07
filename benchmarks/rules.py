"""Rules: what evaluating a running job's rules costs, against the job's own capture, in the same run.

A job prints, paced by the clock, ``STEPS_PER_S`` steps a second for ``RUN_S`` seconds: each step
a metric line ``step=N train_loss=X`` and a line of noise, every 10th step ``val_loss=Y`` too (a
job that logs its loss at every step, which is the most a rule has to read). It runs under
trainmon's ``Supervisor``, in a process of its own, with every metric rule (LossNotDecreasing,
Overfit, Overtraining, ExplodingTensor, StalledTrainingRule), none of which fires. A thread of
that process reads each of the supervisor's threads' CPU time from ``/proc/self/task/<tid>/stat``
every 20 ms.

Figure: **CPU of the rules' thread / CPU of capture** (the supervisor's capture threads: the
spooler's notes, the ingestor and its writer; the spooler process itself is not counted), target
**at most 0.25** (informational: the share of a core the rules take). Checks: the job Completed,
every rule NoIssuesFound, every point stored.

Profiler rules: a second job, profiled every 100 ms with four fake GPUs (``TRAINMON_FAKE_GPUS``),
prints ``step=N`` ``PROFILED_STEPS_PER_S`` times a second for ``PROFILED_RUN_S`` seconds under
the ten profiler rules ProfilerReport runs, each its own configuration with ``patience`` 10 (so
they judge every datapoint, which costs more than waiting), none firing. The same sampling gives
the CPU of the rules' thread (nothing else to evaluate there but the step records) and of the
monitor's thread. Then, in the same process, the job's own profile rows are fed again to fresh
rules, ``REPLAYED_DATAPOINTS`` of them, timed with the process's CPU clock: the evaluation alone,
finer than the threads' CPU ticks. Figure: **rules CPU per datapoint / monitor CPU per tick**
(the replay's, and the job's rules thread beside it), target **at most 1** (a datapoint costs
the rules no more than the monitor's tick that made it), with each in microseconds. Checks: the
job Completed, no rule Error, every profile row judged (the rules' datapoints, from
OverallSystemUsage, are the profile's rows), none dropped.

Run alone: ``python3 -m benchmarks.rules``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .common import ROOT, Report, child_env, heading, ratio_text, scratch_dir, table

STEPS_PER_S = 2000
RUN_S = 10.0
SAMPLE_S = 0.02
TARGET_RATIO = 0.25
CAPTURE_THREADS = ("trainmon-read-", "trainmon-ingest", "trainmon-store-writer", "trainmon-spool-notes")  # the supervisor's part of capture
NAME = "rules-bench"
PROFILED_NAME = "profiler-rules-bench"
PROFILED_RUN_S = 20.0
REPLAYED_DATAPOINTS = 20_000  # the job's profile rows fed again to fresh rules, for a figure finer than CPU ticks
PROFILED_STEPS_PER_S = 20
PROFILE_INTERVAL_MS = 100
FAKE_GPUS = [{"index": index, "utilization_pct": 85, "memory_used_pct": 40} for index in range(4)]
TARGET_PROFILED_RATIO = 1.0

JOB = """
import sys, time
steps, per_s = int(sys.argv[1]), float(sys.argv[2])
start = time.monotonic()
for step in range(steps):
    due = start + step / per_s
    while time.monotonic() < due:
        time.sleep(max(0.0, due - time.monotonic()))
    loss = 2.0 / (1 + step / 100)
    print(f"step={step} train_loss={loss:.6f}")
    print(f"[{step}] data loader: batch {step % 97} of 97 ready in 12 ms")
    if step % 10 == 9:
        print(f"step={step} val_loss={loss * 1.02:.6f}")
"""

RULES = [
    {"rule_to_invoke": "LossNotDecreasing", "num_steps": "100", "loss_metric": "train_loss"},
    {"rule_to_invoke": "Overfit", "loss_metric": "train_loss", "validation_metric": "val_loss"},
    {"rule_to_invoke": "Overtraining", "loss_metric": "train_loss", "validation_metric": "val_loss",
     "patience_train": "1000", "patience_validation": "1000", "delta": "0"},
    {"rule_to_invoke": "ExplodingTensor"},
    {"rule_to_invoke": "StalledTrainingRule", "threshold": "60"},
]


def _task_cpu_s(native_id: int) -> float | None:
    """A thread's CPU time (user + system) from /proc, or None once it has ended."""
    try:
        stat = Path(f"/proc/self/task/{native_id}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child(work: Path, steps: int) -> dict[str, Any]:
    from trainmon.api.sagemaker import register_job
    from trainmon.report import write_job_report
    from trainmon.runtime.job.supervisor import Supervisor
    from trainmon.runtime.launchers import registry
    from trainmon.store import open_store

    store = open_store(work / "home")
    script = work / "job.py"
    script.write_text(JOB, encoding="utf-8")
    request = {
        "TrainingJobName": NAME,
        "AlgorithmSpecification": {
            "TrainingInputMode": "File",
            "ContainerEntrypoint": [sys.executable, str(script), str(steps), str(STEPS_PER_S)],
            "MetricDefinitions": [{"Name": "step", "Regex": r"step=(\d+) train"},
                                  {"Name": "train_loss", "Regex": r"train_loss=(\S+)"},
                                  {"Name": "val_loss", "Regex": r"val_loss=(\S+)"}]},
        "DebugRuleConfigurations": [{"RuleConfigurationName": p["rule_to_invoke"], "RuleEvaluatorImage": "local",
                                     "RuleParameters": p} for p in RULES],
        "ProfilerConfig": {"DisableProfiler": True},
    }
    register_job(store, request)
    cpu: dict[tuple[str, int], float] = {}
    done = threading.Event()

    sampler = threading.Thread(target=_thread_cpu, args=(done, cpu), daemon=True)
    sampler.start()
    started = time.monotonic()
    process_before = time.process_time()
    row = Supervisor(store, NAME, hosts=registry.job_hosts, report=write_job_report, echo=False, handle_signals=False).run()
    wall_s = time.monotonic() - started
    process_s = time.process_time() - process_before
    done.set()
    sampler.join()
    statuses = [s["RuleEvaluationStatus"] for s in row.doc.get("DebugRuleEvaluationStatuses", [])]
    points = len(store.points(row.id))
    store.close()
    by_role: dict[str, float] = {"rules": 0.0, "capture": 0.0, "other": 0.0}
    by_thread: dict[str, float] = {}
    for (name, _), seconds in cpu.items():
        role = "rules" if name == "trainmon-rules" else "capture" if name.startswith(CAPTURE_THREADS) else "other"
        by_role[role] += seconds
        by_thread[name] = by_thread.get(name, 0.0) + seconds
    return {"status": row.status, "rule_statuses": statuses, "points": points, "wall_s": wall_s,
            "process_cpu_s": process_s, **{f"{role}_cpu_s": seconds for role, seconds in by_role.items()},
            "threads": by_thread}


def _thread_cpu(done: threading.Event, cpu: dict[tuple[str, int], float]) -> None:
    """The CPU time of each of this process's trainmon threads, sampled until ``done``."""
    while not done.wait(SAMPLE_S):
        for thread in threading.enumerate():
            if thread.name.startswith("trainmon-") and thread.native_id is not None:
                seconds = _task_cpu_s(thread.native_id)
                if seconds is not None:
                    key = (thread.name, thread.native_id)
                    cpu[key] = max(cpu.get(key, 0.0), seconds)


def profiled_child(work: Path, steps: int) -> dict[str, Any]:
    """The profiler rules' job: its threads' CPU, its rule statuses and how many datapoints they judged."""
    from trainmon.api.sagemaker import register_job
    from trainmon.report import write_job_report
    from trainmon.rules.profiler_setup import REPORT_RULES
    from trainmon.runtime.job.supervisor import Supervisor
    from trainmon.runtime.launchers import registry
    from trainmon.store import open_store
    from trainmon.store.profiles import Profile

    store = open_store(work / "home")
    script = work / "steps.py"
    script.write_text(JOB.replace('print(f"[{step}]', '# print(f"[{step}]'), encoding="utf-8")
    gpus = work / "gpus.json"
    gpus.write_text(json.dumps(FAKE_GPUS), encoding="utf-8")
    location = str(work / "profiles")
    rules = [{"RuleConfigurationName": rule, "RuleEvaluatorImage": "local", "RuleParameters": {
        "rule_to_invoke": rule, **({"patience": "10"} if rule not in (
            "MaxInitializationTime", "OverallSystemUsage", "StepOutlier") else {})}} for rule in REPORT_RULES]
    register_job(store, {
        "TrainingJobName": PROFILED_NAME,
        "AlgorithmSpecification": {
            "TrainingInputMode": "File",
            "ContainerEntrypoint": [sys.executable, str(script), str(steps), str(PROFILED_STEPS_PER_S)],
            "MetricDefinitions": [{"Name": "step", "Regex": r"step=(\d+) train"}]},
        "Environment": {"TRAINMON_FAKE_GPUS": str(gpus)},
        "ProfilerConfig": {"ProfilingIntervalInMilliseconds": PROFILE_INTERVAL_MS, "S3OutputPath": location},
        "ProfilerRuleConfigurations": rules,
    })
    cpu: dict[tuple[str, int], float] = {}
    done = threading.Event()
    sampler = threading.Thread(target=_thread_cpu, args=(done, cpu), daemon=True)
    sampler.start()
    row = Supervisor(store, PROFILED_NAME, hosts=registry.job_hosts, report=write_job_report, echo=False, handle_signals=False).run()
    done.set()
    sampler.join()
    statuses = {s["RuleConfigurationName"]: (s["RuleEvaluationStatus"], s.get("StatusDetails", ""))
                for s in row.doc.get("ProfilerRuleEvaluationStatuses", [])}
    store.close()
    frame = Profile(PROFILED_NAME, location).dataframe()
    rows = int(frame[frame.metric == "job_processes"].shape[0])
    replay_s, replayed = _replay(frame, rules)
    by_role = {"rules": 0.0, "monitor": 0.0}
    for (name, _), seconds in cpu.items():
        if name == "trainmon-rules":
            by_role["rules"] += seconds
        elif name.startswith("trainmon-monitor-"):
            by_role["monitor"] += seconds
    return {"status": row.status, "statuses": statuses, "profile_rows": rows, "replay_cpu_s": replay_s,
            "replayed": replayed, **{f"{role}_cpu_s": seconds for role, seconds in by_role.items()}}


def _replay(frame: Any, rules: list[dict[str, Any]]) -> tuple[float, int]:
    """The CPU seconds fresh rules take over ``REPLAYED_DATAPOINTS`` of the job's profile rows (again
    and again, later each time), and how many they took."""
    from trainmon.rules import catalog
    from trainmon.runtime.watch.profilewatch import ProfilerRules, ProfileTap

    table_ = frame.pivot_table(index="timestamp", columns="metric", values="value")
    stamps = [int(stamp.timestamp() * 1000) for stamp in table_.index]
    rows = [dict(zip(table_.columns, values, strict=True)) for values in table_.itertuples(index=False)]
    if not rows:
        return 0.0, 0
    span_ms = stamps[-1] - stamps[0] + PROFILE_INTERVAL_MS
    tap = ProfileTap(capacity_rows=REPLAYED_DATAPOINTS)
    for i in range(REPLAYED_DATAPOINTS):
        round_, index = divmod(i, len(rows))
        tap.put("algo-1", stamps[index] + round_ * span_ms, rows[index])
    evaluator = ProfilerRules([catalog.setup(rule, catalog.PROFILER, ["step"], PROFILED_NAME) for rule in rules], tap)
    started = time.process_time()
    evaluator.evaluate()
    return time.process_time() - started, REPLAYED_DATAPOINTS


def run_profiled(report: Report, scale: float) -> None:
    steps = max(40, int(PROFILED_STEPS_PER_S * PROFILED_RUN_S * scale))
    heading(f"Rules: the ten profiler rules on a job profiled every {PROFILE_INTERVAL_MS} ms with "
            f"{len(FAKE_GPUS)} fake GPUs, {steps / PROFILED_STEPS_PER_S:.0f} s")
    with scratch_dir("profiler-rules-") as work:
        done = subprocess.run([sys.executable, "-m", "benchmarks.rules", "--child-profiled", str(work), str(steps)],
                              cwd=ROOT, capture_output=True, text=True, env=child_env(), timeout=600)
        if done.returncode != 0:
            report.failures.append(f"the profiled child exited {done.returncode}: {done.stderr[-2000:]}")
            return
        result = json.loads(done.stdout.strip().splitlines()[-1])
    statuses = result["statuses"]
    report.check(result["status"] == "Completed", f"the profiled job ended {result['status']}")
    report.check(len(statuses) == 10 and all(status != "Error" for status, _ in statuses.values()),
                 f"ten profiler rules evaluated, none Error: {sorted(s for s, _ in statuses.values())}")
    usage = statuses.get("OverallSystemUsage", ("", ""))[1]
    judged = int(usage.split(": ", 1)[1].split(" datapoints")[0]) if " datapoints" in usage else -1
    report.check(judged == result["profile_rows"], f"the rules judged {judged} datapoints of the profile's "
                 f"{result['profile_rows']} rows")
    report.check(not any("dropped" in details for _, details in statuses.values()), "no datapoint dropped")
    rows = max(1, result["profile_rows"])
    rules_us, monitor_us = 1e6 * result["rules_cpu_s"] / rows, 1e6 * result["monitor_cpu_s"] / rows
    replay_us = 1e6 * result["replay_cpu_s"] / max(1, result["replayed"])
    table(["measured", "CPU s", "datapoints (ticks)", "µs each"], [
        ["rules thread in the job: 10 profiler rules, its step records", f"{result['rules_cpu_s']:.3f}", rows,
         f"{rules_us:.1f}"],
        ["the 10 rules' evaluation alone (the job's rows replayed)", f"{result['replay_cpu_s']:.3f}",
         result["replayed"], f"{replay_us:.1f}"],
        ["monitor thread in the job: sampling, profile rows (baseline)", f"{result['monitor_cpu_s']:.3f}", rows,
         f"{monitor_us:.1f}"],
    ])
    share = replay_us / monitor_us if monitor_us else float("inf")
    report.ratio("profiler rules CPU per datapoint / monitor CPU per tick", share, f"<= {TARGET_PROFILED_RATIO:g}",
                 share <= TARGET_PROFILED_RATIO, f"rules {replay_us:.1f} µs (in the job's thread "
                 f"{rules_us:.1f} µs), monitor {monitor_us:.1f} µs, {result['profile_rows']} datapoints")


def run(scale: float = 1.0) -> Report:
    report = Report("rules")
    steps = max(200, int(STEPS_PER_S * RUN_S * scale))
    heading(f"Rules: {len(RULES)} metric rules on a job printing {STEPS_PER_S} steps/s "
            f"({2.1 * STEPS_PER_S:,.0f} lines/s), {steps} steps")
    with scratch_dir("rules-") as work:
        done = subprocess.run([sys.executable, "-m", "benchmarks.rules", "--child", str(work), str(steps)], cwd=ROOT,
                              capture_output=True, text=True, env=child_env(), timeout=600)
        if done.returncode != 0:
            report.failures.append(f"the child exited {done.returncode}: {done.stderr[-2000:]}")
            return report
        result = json.loads(done.stdout.strip().splitlines()[-1])
    expected_points = steps * 2 + steps // 10
    if result["status"] != "Completed":
        report.failures.append(f"the job ended {result['status']}")
    if result["rule_statuses"] != ["NoIssuesFound"] * len(RULES):
        report.failures.append(f"rule statuses {result['rule_statuses']}, not NoIssuesFound each")
    if result["points"] != expected_points:
        report.failures.append(f"{result['points']} points stored, not {expected_points}")
    if "trainmon-rules" not in result["threads"]:
        report.failures.append(f"no rules thread was seen: {result['threads']}")
    rules_s, capture_s, wall_s = result["rules_cpu_s"], result["capture_cpu_s"], result["wall_s"]
    table(["threads", "CPU s", "% of a core", "µs per point"], [
        ["rules (trainmon-rules)", f"{rules_s:.3f}", f"{100 * rules_s / wall_s:.2f}",
         f"{1e6 * rules_s / max(1, result['points']):.2f}"],
        ["capture (notes, ingest, writer)", f"{capture_s:.3f}", f"{100 * capture_s / wall_s:.2f}",
         f"{1e6 * capture_s / max(1, result['points']):.2f}"],
        ["supervisor process, all threads", f"{result['process_cpu_s']:.3f}",
         f"{100 * result['process_cpu_s'] / wall_s:.2f}", ""],
    ])
    print(f"  wall {wall_s:.2f} s, {result['points']} points, rules {', '.join(result['rule_statuses'])}")
    share = rules_s / capture_s if capture_s else float("inf")
    report.ratio("rules CPU / capture CPU", share, f"<= {TARGET_RATIO:g}", share <= TARGET_RATIO,
                 f"rules {100 * rules_s / wall_s:.2f}% of a core, capture {100 * capture_s / wall_s:.2f}% "
                 f"({ratio_text(share)})")
    run_profiled(report, scale)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.rules")
    parser.add_argument("--child", nargs=2, metavar=("WORK", "STEPS"))
    parser.add_argument("--child-profiled", nargs=2, metavar=("WORK", "STEPS"))
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child[0]), int(args.child[1]))))
        return 0
    if args.child_profiled:
        print(json.dumps(profiled_child(Path(args.child_profiled[0]), int(args.child_profiled[1]))))
        return 0
    report = run(args.scale)
    for failure in report.failures:
        print(f"  FAILED check: {failure}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
