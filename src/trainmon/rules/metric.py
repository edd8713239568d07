"""The built-in rules that watch a job's metrics, pure: records of metric values in, findings out.

Each rule is a small state machine for one host. :meth:`observe` takes one log record's metric
values (a :class:`Record`: every point that one record gave, by metric name) and returns the
findings that record brought; :class:`StalledTraining` is asked instead, with the time now and
the time of the host's last record, whether the host has been silent too long. No rule reads a
file, the store or the clock: the runner (:mod:`trainmon.runtime.watch.rulewatch`) feeds them.

A rule reports a condition when it starts (the value that crossed the threshold), not again on
every later record while it holds; once the condition clears, the rule can fire again. Steps, where
a rule needs them, count the points of the loss metric (1, 2, 3, ...), or are the last value of
the step metric when one is configured. Non-finite values are ExplodingTensor's: the other rules
skip them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Record:
    """The metric values of one log record, by metric name, and when the record was read."""

    timestamp_s: float
    values: Mapping[str, float]


@dataclass(frozen=True)
class Finding:
    """A rule's condition met: when, at which step, which values crossed which thresholds, in words too."""

    rule: str
    timestamp_s: float
    message: str
    step: int | None = None
    metric: str | None = None
    values: dict[str, float] = field(default_factory=dict)
    thresholds: dict[str, Any] = field(default_factory=dict)
    tensor: str | None = None  # the tensor rules' (trainmon.rules.tensor): the tensor it names


class MetricRule(Protocol):
    def observe(self, record: Record) -> list[Finding]:
        """The findings this record brings (usually none)."""


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _shown(value: float) -> str:
    return f"{value:.6g}"


class _Steps:
    """A host's training step: the count of the loss metric's points, or the step metric's last value."""

    def __init__(self, loss_metric: str, step_metric: str | None) -> None:
        self.loss_metric = loss_metric
        self.step_metric = step_metric
        self.step = 0
        self._count = 0

    def advance(self, record: Record) -> int:
        """The step of this record (after it)."""
        if self.step_metric is not None:
            value = record.values.get(self.step_metric)
            if _finite(value):
                self.step = int(value)  # type: ignore[arg-type]  # _finite: not None
        if self.loss_metric in record.values:
            self._count += 1
            if self.step_metric is None:
                self.step = self._count
        return self.step


class LossNotDecreasing:
    """Every ``num_steps`` steps, the loss must have fallen by ``diff_percent`` % since the last
    check, and must not be more than ``increase_threshold_percent`` % above its lowest value."""

    name = "LossNotDecreasing"

    def __init__(self, loss_metric: str, *, num_steps: int = 10, diff_percent: float = 0.1,
                 increase_threshold_percent: float = 5.0, step_metric: str | None = None) -> None:
        self.metric = loss_metric
        self.num_steps = num_steps
        self.diff_percent = diff_percent
        self.increase_threshold_percent = increase_threshold_percent
        self._steps = _Steps(loss_metric, step_metric)
        self._checked: tuple[int, float] | None = None  # (step, loss) of the last check
        self._lowest = math.inf
        self._firing = False

    def observe(self, record: Record) -> list[Finding]:
        step = self._steps.advance(record)
        loss = record.values.get(self.metric)
        if loss is None or not math.isfinite(loss):
            return []
        if self._checked is None:
            self._checked, self._lowest = (step, loss), loss
            return []
        if step - self._checked[0] < self.num_steps:
            self._lowest = min(self._lowest, loss)
            return []
        finding = self._check(record.timestamp_s, step, loss)
        self._checked = (step, loss)
        self._lowest = min(self._lowest, loss)
        fired = finding is not None and not self._firing
        self._firing = finding is not None
        return [finding] if fired and finding is not None else []

    def _check(self, timestamp_s: float, step: int, loss: float) -> Finding | None:
        previous_step, previous = self._checked or (step, loss)
        lowest = self._lowest
        thresholds = {"num_steps": self.num_steps, "diff_percent": self.diff_percent,
                      "increase_threshold_percent": self.increase_threshold_percent}
        values = {"loss": loss, "previous_loss": previous, "previous_step": float(previous_step),
                  "lowest_loss": lowest}
        if loss - lowest > abs(lowest) * self.increase_threshold_percent / 100:
            rise = (loss - lowest) / abs(lowest) * 100 if lowest else math.inf
            values["increase_percent"] = rise
            return Finding(self.name, timestamp_s, f"{self.metric} rose to {_shown(loss)} at step {step}, "
                           f"{_shown(rise)}% above its lowest value {_shown(lowest)} (increase_threshold_percent "
                           f"{_shown(self.increase_threshold_percent)})", step, self.metric, values, thresholds)
        needed = abs(previous) * self.diff_percent / 100
        if previous - loss < needed or (needed == 0 and loss >= previous):
            fall = (previous - loss) / abs(previous) * 100 if previous else 0.0
            values["decrease_percent"] = fall
            return Finding(self.name, timestamp_s, f"{self.metric} did not decrease by {_shown(self.diff_percent)}% "
                           f"in {step - previous_step} steps: {_shown(previous)} at step {previous_step}, "
                           f"{_shown(loss)} at step {step} ({_shown(fall)}%)", step, self.metric, values, thresholds)
        return None


class Overfit:
    """At each validation point from ``start_step`` on: (validation − mean training loss) / mean
    training loss above ``ratio_threshold`` at ``patience`` validation points in a row fires.

    The training mean is over the training points since the previous validation point (the same
    stretch of training); the last training value when there were none."""

    name = "Overfit"

    def __init__(self, loss_metric: str, validation_metric: str, *, start_step: int = 0, patience: int = 1,
                 ratio_threshold: float = 0.1, step_metric: str | None = None) -> None:
        self.loss_metric = loss_metric
        self.validation_metric = validation_metric
        self.start_step = start_step
        self.patience = patience
        self.ratio_threshold = ratio_threshold
        self._steps = _Steps(loss_metric, step_metric)
        self._sum = 0.0
        self._count = 0
        self._last_training: float | None = None
        self._over = 0
        self._firing = False

    def observe(self, record: Record) -> list[Finding]:
        step = self._steps.advance(record)
        training = record.values.get(self.loss_metric)
        if training is not None and math.isfinite(training):
            self._sum += training
            self._count += 1
            self._last_training = training
        validation = record.values.get(self.validation_metric)
        if validation is None or not math.isfinite(validation) or self._last_training is None:
            return []
        mean = self._sum / self._count if self._count else self._last_training
        self._sum, self._count = 0.0, 0
        if step < self.start_step:
            return []
        ratio = (validation - mean) / abs(mean) if mean else (math.inf if validation > mean else 0.0)
        self._over = self._over + 1 if ratio > self.ratio_threshold else 0
        if self._over < self.patience:
            self._firing = False
            return []
        if self._firing:
            return []
        self._firing = True
        message = (f"{self.validation_metric} {_shown(validation)} is {_shown(ratio * 100)}% above the mean "
                   f"{self.loss_metric} {_shown(mean)} at step {step}: ratio {_shown(ratio)} > ratio_threshold "
                   f"{_shown(self.ratio_threshold)} at {self._over} validation point(s) in a row (patience "
                   f"{self.patience})")
        return [Finding(self.name, record.timestamp_s, message, step, self.validation_metric,
                        {"validation_loss": validation, "training_loss_mean": mean, "ratio": ratio},
                        {"ratio_threshold": self.ratio_threshold, "patience": self.patience,
                         "start_step": self.start_step})]


class _Plateau:
    """One loss's best value and how many of its points in a row have not improved on it by ``delta``."""

    def __init__(self, metric: str, patience: int, delta: float, parameter: str) -> None:
        self.metric, self.patience, self.delta, self.parameter = metric, patience, delta, parameter
        self.best: float | None = None
        self.best_step = 0
        self.since = 0
        self.firing = False

    def observe(self, value: float, step: int) -> bool:
        """Whether the loss has just gone ``patience`` points without improving."""
        if self.best is None or self.best - value >= self.delta:
            self.best, self.best_step, self.since, self.firing = value, step, 0, False
            return False
        self.since += 1
        if self.since >= self.patience and not self.firing:
            self.firing = True
            return True
        return False


class Overtraining:
    """The training loss has not improved by ``delta`` for ``patience_train`` of its points, or the
    validation loss for ``patience_validation`` of its points."""

    name = "Overtraining"

    def __init__(self, loss_metric: str, validation_metric: str, *, patience_train: int = 5,
                 patience_validation: int = 10, delta: float = 0.01, step_metric: str | None = None) -> None:
        self.delta = delta
        self._steps = _Steps(loss_metric, step_metric)
        self._plateaus = (_Plateau(loss_metric, patience_train, delta, "patience_train"),
                          _Plateau(validation_metric, patience_validation, delta, "patience_validation"))

    def observe(self, record: Record) -> list[Finding]:
        step = self._steps.advance(record)
        found = []
        for plateau in self._plateaus:
            value = record.values.get(plateau.metric)
            if value is None or not math.isfinite(value) or not plateau.observe(value, step):
                continue
            assert plateau.best is not None
            message = (f"{plateau.metric} has not improved by delta {_shown(self.delta)} for {plateau.since} of its "
                       f"points ({plateau.parameter} {plateau.patience}): best {_shown(plateau.best)} at step "
                       f"{plateau.best_step}, {_shown(value)} at step {step}")
            found.append(Finding(self.name, record.timestamp_s, message, step, plateau.metric,
                                 {"loss": value, "best_loss": plateau.best, "best_step": float(plateau.best_step)},
                                 {plateau.parameter: plateau.patience, "delta": self.delta}))
        return found


class ExplodingTensor:
    """A metric's value is NaN, or infinite unless ``only_nan``: once per metric, until it is finite again."""

    name = "ExplodingTensor"

    def __init__(self, metrics: frozenset[str], *, only_nan: bool = False, step_metric: str | None = None,
                 loss_metric: str | None = None) -> None:
        self.metrics = metrics
        self.only_nan = only_nan
        self._steps = _Steps(loss_metric or "", step_metric) if loss_metric or step_metric else None
        self._firing: set[str] = set()

    def observe(self, record: Record) -> list[Finding]:
        step = self._steps.advance(record) if self._steps is not None else None
        found = []
        for name, value in record.values.items():
            if name not in self.metrics:
                continue
            exploded = math.isnan(value) or (math.isinf(value) and not self.only_nan)
            if not exploded:
                self._firing.discard(name)
                continue
            if name in self._firing:
                continue
            self._firing.add(name)
            where = f" at step {step}" if step else ""
            found.append(Finding(self.name, record.timestamp_s, f"{name} is {_shown(value)}{where}", step or None,
                                 name, {"value": value}, {"only_nan": self.only_nan}))
        return found


class StalledTraining:
    """No new log record (nor metric point) from a host for ``threshold_s`` seconds."""

    name = "StalledTrainingRule"

    def __init__(self, threshold_s: float = 1800.0) -> None:
        self.threshold_s = threshold_s
        self._firing = False

    def check(self, now_s: float, last_activity_s: float) -> Finding | None:
        """A finding when the host has just been silent for ``threshold_s``; None otherwise."""
        silent_s = now_s - last_activity_s
        if silent_s < self.threshold_s:
            self._firing = False
            return None
        if self._firing:
            return None
        self._firing = True
        return Finding(self.name, now_s, f"no new log record or metric point for {silent_s:.1f} s (threshold "
                       f"{_shown(self.threshold_s)} s)", values={"silent_seconds": silent_s,
                                                               "last_activity": last_activity_s},
                       thresholds={"threshold": self.threshold_s})
