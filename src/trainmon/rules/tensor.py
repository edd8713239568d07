"""The built-in rules on tensors, pure: one step's tensor reductions in, findings out.

A training script records tensors with :mod:`trainmon.debug`, which writes reductions (mean, mean
of absolute values, L2 norm, min, max, NaN and infinity counts, the zero fraction, the size, and
for weights the norm of the last update), never the tensors themselves: a :class:`TensorRecord`
each. Each rule here is a state machine for one host: :meth:`TensorRule.observe` takes the records
of one step (those the rule selects: :class:`Selection`, Debugger's ``collection_names`` and
``tensor_regex``) and returns the findings they bring. No rule reads a file or the clock: the
runner (:mod:`trainmon.runtime.watch.tensorfeed`) feeds them.

As the metric rules do (:mod:`.metric`), a rule reports a condition when it starts, per tensor,
and not again while it holds; once it clears, the tensor can fire again. The tensors that start a
condition at the same step make one finding: it names the worst of them and how many there were,
so a hundred layers whose gradients vanish together are one finding, not a hundred.
"""

from __future__ import annotations

import functools
import math
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .metric import Finding

NAMED_IN_MESSAGE = 5  # tensors a finding's message names, beyond which it counts them


@dataclass(frozen=True)
class TensorRecord:
    """One tensor's reductions at one step, as the hook recorded them (None: not defined, e.g. empty)."""

    step: int
    name: str
    collections: frozenset[str]
    timestamp_s: float
    size: int
    mean: float | None = None
    mean_abs: float | None = None
    l2: float | None = None
    min: float | None = None
    max: float | None = None
    nan: int = 0
    inf: int = 0
    zero_fraction: float | None = None
    update_l2: float | None = None  # ‖w_t − w_(t−1)‖, for weights whose previous step was kept

    def reductions(self) -> tuple[float | None, ...]:
        """What UnchangedTensor compares between steps."""
        return (self.mean, self.mean_abs, self.l2, self.min, self.max)


@dataclass(frozen=True)
class Selection:
    """Which tensors a rule reads: those in one of ``collections`` or whose whole name ``regex``
    matches; with neither, every tensor."""

    collections: frozenset[str] = frozenset()
    regex: re.Pattern[str] | None = None

    def selects(self, record: TensorRecord) -> bool:
        if not self.collections and self.regex is None:
            return True
        return bool(self.collections & record.collections) or (
            self.regex is not None and _name_matcher(self.regex)(record.name))

    def describe(self) -> str:
        parts = []
        if self.collections:
            parts.append(f"collection{'s' if len(self.collections) > 1 else ''} {', '.join(sorted(self.collections))}")
        if self.regex is not None:
            parts.append(f"tensor_regex {self.regex.pattern}")
        return " or ".join(parts) or "every tensor"


MAX_TRACKED = 100_000  # tensors a rule keeps state for (a job may make names without end)
MAX_NAME_CHARS = 1024  # a tensor name longer than this is selected by its collections only, never by tensor_regex


@functools.lru_cache(maxsize=64)
def _name_matcher(regex: re.Pattern[str]) -> Callable[[str], bool]:
    """Whether ``regex`` matches a whole tensor name, in bounded time whatever the job named its
    tensors: Python's re up to the length the regex's parse tree bounds it for, RE2 past it (and
    at every length for a nested repetition), else the ``regex`` package with its time limit; a
    name longer than MAX_NAME_CHARS is not matched (:mod:`trainmon.parsing.engines`)."""
    from ..parsing.engines import TIME_LIMIT_S, Bound, _timed_regex, compile_re2

    python_chars = min(Bound(regex.pattern).python_chars(), MAX_NAME_CHARS)
    re2 = compile_re2(regex.pattern)
    timed: Any = None if re2 is not None else _timed_regex(regex.pattern)

    def matches(name: str) -> bool:
        if len(name) <= python_chars:
            return regex.fullmatch(name) is not None
        if len(name) > MAX_NAME_CHARS:
            return False
        if re2 is not None:
            return re2.fullmatch(name) is not None
        try:  # a regex RE2 cannot run, without nested repetition (catalog refuses the others)
            return timed.fullmatch(name, timeout=TIME_LIMIT_S) is not None
        except TimeoutError:
            return False
    return matches


class TensorRule(Protocol):
    name: str
    selection: Selection

    def observe(self, step: int, records: Sequence[TensorRecord]) -> list[Finding]:
        """The findings this step's selected records bring (usually none)."""


def _shown(value: float) -> str:
    return f"{value:.6g}"


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


@dataclass(frozen=True)
class _Crossing:
    """One tensor that starts a rule's condition: how bad (to sort by), its values, and in words."""

    name: str
    severity: float
    values: dict[str, float]
    words: str


class _Conditions:
    """Which tensors are in a rule's condition now, so each is reported when its condition starts."""

    def __init__(self) -> None:
        self._firing: set[str] = set()

    def update(self, name: str, met: bool) -> bool:
        """Whether ``name``'s condition has just started (past MAX_TRACKED tensors in the condition,
        a new one is not reported: it could not be remembered, and would be reported at every step)."""
        if not met:
            self._firing.discard(name)
            return False
        if name in self._firing or len(self._firing) >= MAX_TRACKED:
            return False
        self._firing.add(name)
        return True


def _finding(rule: str, step: int, records: Sequence[TensorRecord], crossed: list[_Crossing], what: str,
             thresholds: dict[str, Any]) -> list[Finding]:
    """One finding for the tensors whose condition started at ``step``: the worst named first."""
    if not crossed:
        return []
    crossed = sorted(crossed, key=lambda c: c.severity, reverse=True)
    first = crossed[0]
    message = f"{what} at step {step}: {first.words}"
    if len(crossed) > 1:
        others = "; ".join(c.words for c in crossed[1:NAMED_IN_MESSAGE])
        more = len(crossed) - NAMED_IN_MESSAGE
        message += f"; {others}" + (f"; and {more} more tensor{'s' if more > 1 else ''}" if more > 0 else "")
        message += f" ({len(crossed)} tensors)"
    timestamp_s = max(r.timestamp_s for r in records)
    values = {**first.values, "tensors": float(len(crossed))}
    return [Finding(rule, timestamp_s, message, step, None, values, thresholds, tensor=first.name)]


class VanishingGradient:
    """A gradient's mean absolute value below ``threshold`` (Debugger's default 1e-7)."""

    name = "VanishingGradient"

    def __init__(self, *, threshold: float = 1e-7, selection: Selection | None = None) -> None:
        self.threshold = threshold
        self.selection = selection or Selection(frozenset({"gradients"}))
        self._conditions = _Conditions()

    def observe(self, step: int, records: Sequence[TensorRecord]) -> list[Finding]:
        crossed = []
        for record in records:
            value = record.mean_abs
            if not _finite(value):
                continue
            assert value is not None
            if self._conditions.update(record.name, value < self.threshold):
                crossed.append(_Crossing(record.name, -value, {"mean_abs": value},
                                         f"{record.name} mean |value| {_shown(value)}"))
        return _finding(self.name, step, records, crossed, f"gradients vanish below threshold "
                        f"{_shown(self.threshold)}", {"threshold": self.threshold})


class ExplodingTensor:
    """A tensor holds NaN, or ±infinity unless ``only_nan`` (the hook counts both in every tensor)."""

    name = "ExplodingTensor"

    def __init__(self, *, only_nan: bool = False, selection: Selection | None = None) -> None:
        self.only_nan = only_nan
        self.selection = selection or Selection()
        self._conditions = _Conditions()

    def observe(self, step: int, records: Sequence[TensorRecord]) -> list[Finding]:
        crossed = []
        for record in records:
            bad = record.nan + (0 if self.only_nan else record.inf)
            if self._conditions.update(record.name, bad > 0):
                if record.size == 1:
                    words = f"{record.name} is {'NaN' if record.nan else _shown(record.max or 0.0)}"
                else:
                    words = f"{record.name} holds {record.nan} NaN and {record.inf} infinite of {record.size} values"
                crossed.append(_Crossing(record.name, bad / max(1, record.size), {
                    "nan": float(record.nan), "inf": float(record.inf), "size": float(record.size)}, words))
        what = "NaN values" if self.only_nan else "NaN or infinite values"
        return _finding(self.name, step, records, crossed, what, {"only_nan": self.only_nan})


class WeightUpdateRatio:
    """A weight's last update, ‖w_t − w_(t−1)‖ / (‖w_t‖ + ``epsilon``), above ``large_threshold`` or
    below ``small_threshold``; every ``num_steps`` steps when given, else at every step it is known."""

    name = "WeightUpdateRatio"

    def __init__(self, *, num_steps: int | None = None, large_threshold: float = 10.0,
                 small_threshold: float = 1e-8, epsilon: float = 1e-9, selection: Selection | None = None) -> None:
        self.num_steps = num_steps
        self.large_threshold = large_threshold
        self.small_threshold = small_threshold
        self.epsilon = epsilon
        self.selection = selection or Selection(frozenset({"weights"}))
        self._checked: int | None = None
        self._conditions = _Conditions()

    def observe(self, step: int, records: Sequence[TensorRecord]) -> list[Finding]:
        updates = [r for r in records if _finite(r.update_l2) and _finite(r.l2)]
        if not updates:
            return []
        if self.num_steps is not None and self._checked is not None and step - self._checked < self.num_steps:
            return []
        self._checked = step
        crossed = []
        for record in updates:
            assert record.update_l2 is not None and record.l2 is not None
            ratio = record.update_l2 / (record.l2 + self.epsilon)
            large, small = ratio > self.large_threshold, ratio < self.small_threshold
            if self._conditions.update(record.name, large or small):
                side = (f"above large_threshold {_shown(self.large_threshold)}" if large else
                        f"below small_threshold {_shown(self.small_threshold)}")
                severity = math.log10(max(ratio, 1e-300) / self.large_threshold) if large else \
                    math.log10(self.small_threshold / max(ratio, 1e-300))
                crossed.append(_Crossing(record.name, severity, {
                    "ratio": ratio, "update_l2": record.update_l2, "weight_l2": record.l2},
                    f"{record.name} update/weight ratio {_shown(ratio)} {side} (update norm "
                    f"{_shown(record.update_l2)}, weight norm {_shown(record.l2)})"))
        return _finding(self.name, step, records, crossed, "weight updates out of bounds", {
            "large_threshold": self.large_threshold, "small_threshold": self.small_threshold,
            "epsilon": self.epsilon, **({"num_steps": self.num_steps} if self.num_steps is not None else {})})


class AllZero:
    """At least ``threshold`` % of a tensor's values are zero (Debugger's default 100: all of them)."""

    name = "AllZero"

    def __init__(self, *, threshold: float = 100.0, selection: Selection | None = None) -> None:
        self.threshold = threshold
        self.selection = selection or Selection()
        self._conditions = _Conditions()

    def observe(self, step: int, records: Sequence[TensorRecord]) -> list[Finding]:
        crossed = []
        for record in records:
            if record.zero_fraction is None or record.size == 0:
                continue
            percent = record.zero_fraction * 100
            if self._conditions.update(record.name, percent >= self.threshold):
                crossed.append(_Crossing(record.name, percent, {"zero_percent": percent, "size": float(record.size)},
                                         f"{record.name} {_shown(percent)}% zero ({record.size} values)"))
        return _finding(self.name, step, records, crossed, f"tensors at least {_shown(self.threshold)}% zero",
                        {"threshold": self.threshold})


def allclose(a: Sequence[float | None], b: Sequence[float | None], *, rtol: float, atol: float,
             equal_nan: bool) -> bool:
    """numpy.allclose(a, b) on two short vectors, without numpy: |a − b| <= atol + rtol × |b| for
    each pair; infinities equal only themselves; NaN equals NaN only with ``equal_nan``."""
    for x, y in zip(a, b, strict=True):
        if x is None or y is None:
            if x is not y:
                return False
            continue
        if math.isnan(x) or math.isnan(y):
            if not (equal_nan and math.isnan(x) and math.isnan(y)):
                return False
        elif math.isinf(x) or math.isinf(y):
            if x != y:
                return False
        elif abs(x - y) > atol + rtol * abs(y):
            return False
    return True


class UnchangedTensor:
    """A tensor's reductions (mean, mean |value|, norm, min, max) the same, by numpy.allclose's
    ``rtol``, ``atol`` and ``equal_nan``, over its last ``num_steps`` recorded steps (they need not be
    consecutive). It compares the reductions, not every element."""

    name = "UnchangedTensor"

    def __init__(self, *, num_steps: int = 3, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False,
                 selection: Selection | None = None) -> None:
        self.num_steps = num_steps
        self.rtol, self.atol, self.equal_nan = rtol, atol, equal_nan
        self.selection = selection or Selection()
        self._history: dict[str, deque[tuple[int, int, tuple[float | None, ...]]]] = {}
        self._conditions = _Conditions()

    def observe(self, step: int, records: Sequence[TensorRecord]) -> list[Finding]:
        crossed = []
        for record in records:
            history = self._history.get(record.name)
            if history is None:
                if len(self._history) >= MAX_TRACKED:
                    continue  # the first MAX_TRACKED names only
                history = self._history[record.name] = deque(maxlen=self.num_steps)
            if history and history[-1][0] == step:
                continue  # recorded twice at one step: the first counts
            current = record.reductions()
            history.append((step, record.size, current))
            unchanged = len(history) == self.num_steps and all(
                size == record.size and allclose(earlier, current, rtol=self.rtol, atol=self.atol,
                                                 equal_nan=self.equal_nan) for _, size, earlier in history)
            if self._conditions.update(record.name, unchanged):
                since = history[0][0]
                crossed.append(_Crossing(record.name, float(step - since), {
                    "since_step": float(since), **{k: v for k, v in zip(
                        ("mean", "mean_abs", "l2", "min", "max"), current, strict=True) if v is not None}},
                    f"{record.name} unchanged since step {since} (mean {_value(record.mean)}, norm "
                    f"{_value(record.l2)})"))
        return _finding(self.name, step, records, crossed, f"tensors unchanged over {self.num_steps} recorded steps",
                        {"num_steps": self.num_steps, "rtol": self.rtol, "atol": self.atol,
                         "equal_nan": self.equal_nan})


def _value(value: float | None) -> str:
    return "none" if value is None else _shown(value)


# -- rules from their parameters ----------------------------------------------------------------

DEFAULT_COLLECTIONS = {"VanishingGradient": frozenset({"gradients"}), "WeightUpdateRatio": frozenset({"weights"})}
"""The collection a rule reads when neither ``collection_names`` nor ``tensor_regex`` is given
(Debugger's defaults); the other rules read every tensor."""


def split_names(text: str) -> tuple[str, ...]:
    """``collection_names`` as Debugger takes it: names separated by commas (or semicolons)."""
    return tuple(dict.fromkeys(part.strip() for part in re.split(r"[,;]", text) if part.strip()))


def selection(rule: str, parameters: Mapping[str, Any]) -> Selection:
    """What a rule reads, from its ``collection_names`` and ``tensor_regex`` (or its default collection)."""
    names = parameters.get("collection_names")
    pattern = parameters.get("tensor_regex")
    if names is None and pattern is None:
        return Selection(DEFAULT_COLLECTIONS.get(rule, frozenset()))
    collections = frozenset(split_names(names) if isinstance(names, str) else names or ())
    regex = re.compile(pattern) if isinstance(pattern, str) else pattern
    return Selection(collections, regex)


_MAKERS: dict[str, Callable[[Mapping[str, Any], Selection], TensorRule]] = {
    "VanishingGradient": lambda p, s: VanishingGradient(threshold=p["threshold"], selection=s),
    "ExplodingTensor": lambda p, s: ExplodingTensor(only_nan=p["only_nan"], selection=s),
    "WeightUpdateRatio": lambda p, s: WeightUpdateRatio(
        num_steps=p.get("num_steps"), large_threshold=p["large_threshold"], small_threshold=p["small_threshold"],
        epsilon=p["epsilon"], selection=s),
    "AllZero": lambda p, s: AllZero(threshold=p["threshold"], selection=s),
    "UnchangedTensor": lambda p, s: UnchangedTensor(num_steps=p["num_steps"], rtol=p["rtol"], atol=p["atol"],
                                                    equal_nan=p["equal_nan"], selection=s),
}
RULES = tuple(_MAKERS)
"""The rules evaluated on the hook's tensors (ExplodingTensor also on the job's metrics)."""


def evaluator(rule: str, parameters: Mapping[str, Any]) -> TensorRule:
    """A new state machine of a tensor rule for one host, from its parameters (defaults filled in)."""
    return _MAKERS[rule](parameters, selection(rule, parameters))


def selected(rule: TensorRule, records: Iterable[TensorRecord]) -> list[TensorRecord]:
    return [record for record in records if rule.selection.selects(record)]
