"""The tuner: the process that runs one hyperparameter tuning job (``python -m trainmon.tuning NAME``,
started by CreateHyperParameterTuningJob).

It keeps up to ``MaxParallelTrainingJobs`` trials running, each an ordinary training job started
through the operations layer (so a trial has its own supervisor, logs, metrics, rules, launcher and
container), asks the search (:mod:`trainmon.tuning.space`) for each next trial's hyperparameters and
tells it what each trial's objective came to. Between passes it reads from the store what the
running trials printed: each value of the objective is one step, given to Hyperband's pruner, or
judged by SageMaker's median rule when ``TrainingJobEarlyStoppingType`` is Auto; a trial either
stops is stopped through StopTrainingJob. The tuning job ends when every trial it may run has
ended, when a completion criterion is met, when its time limit passes (Completed; the running trials
are stopped) or when it is stopped (Stopped).
"""

from __future__ import annotations

import math
import secrets
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from optuna.trial import Trial

from ..api import sagemaker
from ..api import tuning as operations
from ..clock import REAL_CLOCK, Clock
from ..errors import StoreError, TrainmonError, ValidationException
from ..jobs import tuning
from ..jobs.status import TERMINAL
from ..runtime.job import orphans
from ..store import JobRow, Store
from .space import Search

POLL_S = 0.2  # how often the running trials' new points are read
FAILURES_BEFORE_GIVING_UP = 3  # trials that fail, none succeeding, before the tuning job fails


@dataclass
class Running:
    """A trial the tuner follows while it runs."""

    name: str
    trial: Trial
    reported: int = 0  # objective values given to the search so far
    stopping: bool = False
    early: bool = False


@dataclass
class Tuner:
    store: Store
    name: str
    clock: Clock = REAL_CLOCK
    poll_s: float = POLL_S
    running: dict[str, Running] = field(default_factory=dict)
    finished: list[float | None] = field(default_factory=list)  # final objectives, in the order trials ended
    curves: list[list[float]] = field(default_factory=list)  # the objective of every trial that ended with one
    failures: int = 0

    def __post_init__(self) -> None:
        row = self.store.get_tuning_job(self.name)
        if row is None:
            raise TrainmonError(f"no hyperparameter tuning job named {self.name!r}")
        self.doc = row.doc
        self.config = self.doc["HyperParameterTuningJobConfig"]
        self.search = Search(self.doc)
        self.definitions = {d.get("DefinitionName"): d for d in tuning.definitions(self.doc)}
        self.metric = tuning.objective(self.doc, tuning.definitions(self.doc)[0])["MetricName"]
        self.limit = tuning.max_trials(self.doc)
        self.parallel = self.config["ResourceLimits"]["MaxParallelTrainingJobs"]
        self.deadline = self.doc["CreationTime"] + self.config["ResourceLimits"].get("MaxRuntimeInSeconds", math.inf)
        self.median_rule = self.config.get("TrainingJobEarlyStoppingType", "Off") == "Auto"
        self.started = len(self.doc.get("Trials", []))

    def run(self) -> str:
        """Run the tuning job to its end; its final status."""
        me = orphans.identity()

        def claim(row: Any) -> None:
            row.tuner = dict(me)

        self.store.update_tuning_job(self.name, claim)
        if "WarmStartConfig" in self.doc:
            self._warm_start()
        try:
            while True:
                try:
                    ended = self.step()
                except StoreError as exc:  # the store refuses for now: the trials run on, and so does the tuner
                    log(f"the store refused: {exc.message}; trying again")
                    ended = None
                if ended is not None:
                    return ended
                self.clock.stop_signal().wait_until(self.clock.monotonic() + self.poll_s)
        except Exception as exc:
            self._stop_all()
            reason = f"The tuner failed: {type(exc).__name__}: {exc}"[:1024]
            operations.finish(self.store, self.name, "Failed", FailureReason=reason)
            raise

    def step(self) -> str | None:
        """One pass: trials followed, stopped and started; the final status once the tuning job ends."""
        row = self.store.get_tuning_job(self.name)
        if row is None:  # (deleted: only an ended tuning job can be, so another tuner ended it)
            return "Deleted"
        self._follow()
        reason, not_improving, converged = tuning.completion(self.config, self.finished)
        self._record_progress(row.doc, not_improving, converged)
        if row.status == "Stopping":
            return self._end("Stopped", "stopped")
        if self.clock.wall() >= self.deadline:
            return self._end("Completed", "MaxRuntimeInSeconds reached")
        if reason is not None:
            return self._end("Completed", f"{reason} met")
        if self.failures >= FAILURES_BEFORE_GIVING_UP and not any(v is not None for v in self.finished):
            return self._end("Failed", "failed", FailureReason=(
                f"The first {self.failures} training jobs failed, and none reported the objective metric "
                f"{self.metric}: see their FailureReason and logs."))
        while len(self.running) < self.parallel and self.started < self.limit and not self.search.exhausted():
            self._launch()
        if not self.running and (self.started >= self.limit or self.search.exhausted()):
            return self._end("Completed", "every training job ended")
        return None

    def _follow(self) -> None:
        jobs = {job.name: job for job in self.store.jobs_named(list(self.running))}
        for name, run in list(self.running.items()):
            job = jobs.get(name)
            curve = self._curve(job) if job is not None else []
            if job is None or job.status in TERMINAL:
                self._ended(run, job, curve)
                continue
            if run.stopping:
                continue
            prune = self.search.report(run.trial, curve, run.reported)
            run.reported = len(curve)
            if not prune and self.median_rule and curve:
                prune = tuning.worse_than_median(curve, self.curves, self.search.minimize)
            if prune:
                self._stop(run, early=True)

    def _ended(self, run: Running, job: JobRow | None, curve: list[float]) -> None:
        del self.running[run.name]
        value = None
        if job is not None and job.status in ("Completed", "Stopped"):
            value = next((v for name, v, _ in self.store.final_metrics(job.id) if name == self.metric), None)
        if job is not None:
            self.search.report(run.trial, curve, run.reported)
        self.search.tell(run.trial, value, stopped_early=run.early and value is not None)
        self.finished.append(value)
        if value is not None:
            self.curves.append(curve)
        elif job is None or job.status == "Failed":
            self.failures += 1
        shown = "no objective" if value is None else f"{self.metric} = {value:g}"
        log(f"{run.name} ended {job.status if job else 'deleted'}{' (stopped early)' if run.early else ''}: {shown}")

    def _curve(self, job: JobRow) -> list[float]:
        values = self.store.point_columns(job.id, self.metric, host="algo-1").values
        return [float(v) for v in values if math.isfinite(v)]

    def _launch(self) -> None:
        self.started += 1
        trial, definition, tuned = self.search.ask()
        name = tuning.trial_name(self.name, self.started, secrets.token_hex(4))
        request = tuning.trial_request(self.doc, self.definitions[definition], name, tuned)
        entry: dict[str, Any] = {"TrainingJobName": name, "TunedHyperParameters": tuned}
        if definition is not None:
            entry["TrainingJobDefinitionName"] = definition
        try:
            job = sagemaker.register_job(self.store, request, tuning_job_arn=self.doc["HyperParameterTuningJobArn"])
        except ValidationException as exc:  # (checked when the tuning job was created; a file may have gone since)
            log(f"{name} could not be created: {exc.message}")
            self.search.tell(trial, None, stopped_early=False)
            self.finished.append(None)
            self.failures += 1
            return

        def add(row: Any) -> None:
            row.doc.setdefault("Trials", []).append(entry)
            row.last_modified_time = row.doc["LastModifiedTime"] = time.time()

        self.store.update_tuning_job(self.name, add)
        self.running[name] = Running(name, trial)
        try:
            sagemaker.start_job(self.store, job)
        except TrainmonError as exc:
            log(f"{name} could not start: {exc.message}")
        log(f"{name} started: {', '.join(f'{k}={v}' for k, v in tuned.items())}")

    def _stop(self, run: Running, *, early: bool) -> None:
        run.stopping, run.early = True, early
        why = (f"Stopped early by hyperparameter tuning job {self.name}: its {self.metric} at step {run.reported} was "
               f"worse than the other training jobs' at that step" if early else
               f"Stopped by hyperparameter tuning job {self.name}, which is ending")
        try:
            sagemaker.request_stop(self.store, run.name, why)
        except ValidationException:
            return  # it is ending already
        if early:
            log(f"{run.name} stopped early at step {run.reported}")

            def mark(row: Any) -> None:
                for trial in row.doc.get("Trials", []):
                    if trial["TrainingJobName"] == run.name:
                        trial["StoppedEarly"] = True

            self.store.update_tuning_job(self.name, mark)

    def _stop_all(self) -> None:
        for run in self.running.values():
            if not run.stopping:
                try:
                    self._stop(run, early=False)
                except TrainmonError:
                    pass

    def _end(self, status: str, why: str, **fields: Any) -> str | None:
        """Stop what runs; once nothing does, the tuning job's end."""
        self._stop_all()
        if self.running:
            return None
        operations.finish(self.store, self.name, status, **fields)
        log(f"tuning job {status.lower()}: {why}")
        return status

    def _record_progress(self, doc: dict[str, Any], not_improving: int, converged: bool) -> None:
        details = dict(doc.get("TuningJobCompletionDetails", {}))
        wanted = {"NumberOfTrainingJobsObjectiveNotImproving": not_improving}
        if converged and "ConvergenceDetectedTime" not in details:
            wanted["ConvergenceDetectedTime"] = self.clock.wall()  # type: ignore[assignment]
        if all(details.get(key) == value for key, value in wanted.items()):
            return

        def write(row: Any) -> None:
            row.doc["TuningJobCompletionDetails"] = {**row.doc.get("TuningJobCompletionDetails", {}), **wanted}

        self.store.update_tuning_job(self.name, write)

    def _warm_start(self) -> None:
        orphans.reap_orphans(self.store)  # (a parent's trial whose supervisor died reads as it ended)
        added = 0
        for parent in self.doc["WarmStartConfig"]["ParentHyperParameterTuningJobs"]:
            row = self.store.get_tuning_job(parent["HyperParameterTuningJobName"])
            if row is not None:
                added += self.search.warm_start(operations.trial_summaries(self.store, row))
        log(f"warm start: {added} trials of the parent tuning jobs")


def log(line: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}", file=sys.stdout, flush=True)
