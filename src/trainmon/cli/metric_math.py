"""The GetMetricData request behind ``trainmon metrics --math`` (pure: metrics and arguments in, queries and
CLI-worded errors out).

Expressions use metrics by query Id, so each metric the command offers is bound to one. A metric name
that is a valid Id (``loss``) is its own Id; any other gets :func:`automatic_id` (``train:loss`` ->
``train_loss``, ``CPUUtilization`` -> ``cpu_utilization``). ``--id ID=METRIC`` binds a metric to an Id
of the user's choice instead of its automatic one. ``--math NAME=EXPR`` names an expression, so that
later ones can use it.

The request goes to CloudWatch's engine as it is, and its errors name fields of the request
(``MetricDataQueries.member.3.Expression``); :meth:`MathRequest.reworded` names the flags the user
typed instead, keeping the error code and the expression's column.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..cloudwatch.model import QUERY_ID, MetricKey
from ..errors import CloudWatchError

_CAMEL_BREAK = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NAMED = re.compile(r"\s*(\w+)\s*=(?!=)(.*)", re.DOTALL)  # NAME=EXPR, not NAME==EXPR
_MEMBER = re.compile(r"MetricDataQueries\.member\.(\d+)((?:\.\w+)*)")
_EXPRESSION = re.compile(r"\bexpression ([a-z]\w*)")
_UNKNOWN_ID = re.compile(r"unknown Id '(\w+)'\. An expression can use the Id of any other query in MetricDataQueries\.")


def automatic_id(name: str) -> str:
    """The query Id a metric gets unless ``--id`` gives it one.

    A valid Id stays as it is. Otherwise: CamelCase words are split with ``_``, letters lower-cased,
    every run of characters other than a-z and 0-9 becomes one ``_`` (none at either end), and ``m_``
    goes in front unless the result starts with a letter; at most 255 characters.
    """
    if QUERY_ID.fullmatch(name):
        return name
    text = re.sub(r"[^a-z0-9]+", "_", _CAMEL_BREAK.sub("_", name).lower()).strip("_")
    if not text[:1].isalpha():
        text = f"m_{text}"
    return text[:255]


def split_math(argument: str) -> tuple[str | None, str]:
    """``gap=validation_loss - train_loss`` -> ("gap", "validation_loss - train_loss"); no name -> None."""
    named = _NAMED.fullmatch(argument)
    if named is None:
        return None, argument.strip()
    return named.group(1), named.group(2).strip()


@dataclass(frozen=True, slots=True)
class Metric:
    """A metric expressions can use."""

    key: MetricKey
    label: str  # how results and messages show it: "train:loss", "CPUUtilization (algo-2)"
    id_source: str  # what its automatic Id is made of: its name, and its host when there are several


@dataclass(frozen=True, slots=True)
class Binding:
    id: str
    metric: Metric
    origin: str  # what bound it: "--id l=train:loss", or its label when automatic


@dataclass(frozen=True, slots=True)
class Math:
    id: str
    name: str | None  # NAME of NAME=EXPR
    expression: str
    origin: str  # '--math "gap=a - b"', as typed

    @property
    def label(self) -> str:
        return self.name or self.expression


@dataclass(frozen=True, slots=True)
class MathRequest:
    bindings: tuple[Binding, ...]
    maths: tuple[Math, ...]
    unbound: dict[str, list[str]]  # an automatic Id several metrics would get -> their labels

    def queries(self, period_s: int, stat: str) -> list[dict[str, Any]]:
        """MetricDataQueries: the bound metrics (not returned), then one expression per ``--math``."""
        metrics = [{"Id": b.id, "Label": b.metric.label, "ReturnData": False,
                    "MetricStat": {"Metric": b.metric.key.to_api(), "Period": period_s, "Stat": stat}}
                   for b in self.bindings]
        return metrics + [{"Id": m.id, "Expression": m.expression, "Label": m.label, "Period": period_s}
                          for m in self.maths]

    def math(self, query_id: str) -> Math:
        (found,) = [m for m in self.maths if m.id == query_id]
        return found

    def reworded(self, error: CloudWatchError) -> CloudWatchError:
        """The engine's error, naming the flags that made the request instead of its fields."""
        message = _UNKNOWN_ID.sub(lambda match: self._unknown_id(match.group(1)), error.message)
        message = _MEMBER.sub(lambda match: self._member(int(match.group(1)) - 1, match.group(2)), message)
        message = _EXPRESSION.sub(lambda match: self._expression(match.group(1)), message)
        message = message.replace("Circular reference in MetricDataQueries", "Circular reference in --math")
        message = message.replace("; or set ReturnData to false", "")
        message = re.sub(r"\bStartTime\b", "--start", re.sub(r"\bEndTime\b", "--end", message))
        if message.startswith("Syntax error"):
            message += self._syntax_hint()
        return type(error)(message, code=error.code)

    def _member(self, index: int, field: str) -> str:
        queries: list[Binding | Math] = [*self.bindings, *self.maths]
        if not 0 <= index < len(queries):
            return f"MetricDataQueries.member.{index + 1}{field}"
        query = queries[index]
        if field == ".MetricStat.Stat":
            return "--statistic"
        if field in (".MetricStat.Period", ".Period"):
            return "--period"
        if field == ".Expression" and isinstance(query, Math):
            return f'--math "{query.expression}"'
        return query.origin

    def _expression(self, query_id: str) -> str:
        found = [m for m in self.maths if m.id == query_id]
        return f'--math "{found[0].expression}"' if found else f"expression {query_id}"

    def _unknown_id(self, unknown: str) -> str:
        ids = [b.id for b in self.bindings] + [m.id for m in self.maths if m.name]
        parts = [f"unknown Id '{unknown}'."]
        close = difflib.get_close_matches(unknown, ids, n=1)
        if close:
            parts.append(f"Did you mean {close[0]}?")
        if unknown in self.unbound:
            parts.append(f"{unknown} would name {' and '.join(self.unbound[unknown])}: bind one with --id ID=METRIC.")
        if ids:
            shown = [b.id if b.id == b.metric.label else f"{b.id}={b.metric.label}" for b in self.bindings]
            shown += [f"{m.id} (a --math)" for m in self.maths if m.name]
            parts.append(f"The Ids here: {', '.join(shown)}; bind another metric with --id ID=METRIC.")
        else:
            parts.append("No metric is bound to an Id: bind one with --id ID=METRIC.")
        return " ".join(parts)

    def _syntax_hint(self) -> str:
        """Metric names such as train:loss are not Ids: say which Id to write."""
        written = [b for b in self.bindings if b.metric.key.name != b.id
                   and any(b.metric.key.name in m.expression for m in self.maths)]
        if not written:
            return ""
        pairs = ", ".join(f"{b.id} for {b.metric.key.name}" for b in written)
        return f" Expressions use metrics by Id: write {pairs}."


def plan(metrics: Sequence[Metric], explicit: Sequence[tuple[str, Metric, str]], arguments: Sequence[str]) -> MathRequest:
    """Bind ``metrics`` to Ids and make one expression per ``--math`` argument.

    ``explicit`` holds the ``--id`` bindings: (Id, metric, the argument as typed). A metric bound
    there gets no automatic Id, nor does one whose automatic Id ``--id`` or a ``--math`` name takes.
    An Id that several metrics would get goes to the one named exactly so, else to none of them.
    """
    split = [split_math(argument) for argument in arguments]
    bindings = [Binding(query_id, metric, f"--id {text}") for query_id, metric, text in explicit]
    taken = {b.id for b in bindings} | {name for name, _ in split if name}
    chosen = {b.metric.key for b in bindings}
    groups: dict[str, list[Metric]] = {}
    for metric in dict.fromkeys(metrics):
        if metric.key not in chosen:
            groups.setdefault(automatic_id(metric.id_source), []).append(metric)
    unbound: dict[str, list[str]] = {}
    for query_id, group in groups.items():
        exact = [m for m in group if m.id_source == query_id]
        winner = group[0] if len(group) == 1 else exact[0] if len(exact) == 1 else None
        if winner is None:
            unbound[query_id] = [m.label for m in group]
        elif query_id not in taken:
            bindings.append(Binding(query_id, winner, winner.label))
            taken.add(query_id)
    maths = []
    for position, ((name, expression), argument) in enumerate(zip(split, arguments, strict=True), start=1):
        query_id = name or f"math_{position}"
        while name is None and query_id in taken:
            query_id += "_"
        taken.add(query_id)
        maths.append(Math(query_id, name, expression, f'--math "{argument}"'))
    return MathRequest(tuple(bindings), tuple(maths), unbound)
