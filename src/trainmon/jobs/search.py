"""SageMaker's Search over training jobs, the pure part: a job's searchable properties (its
DescribeTrainingJob answer and its tags, flattened to the dotted names Search's filters use), and a
``SearchExpression`` checked as AWS checks it and read into a tree the store turns into SQL.

A property has a name (``ResourceConfig.InstanceType``, ``HyperParameters.lr``, ``Tags.team``),
the element it belongs to when its path crosses a list (``InputDataConfig.ChannelName`` of the
second channel is element 1: what a NestedFilters matches within), and a value as text, as a
number, or both (a hyperparameter is text that often reads as a number, and compares as one).
``Metrics.<name>`` (a metric's final value) is not a property of the document: the store reads it
from the job's metric series, so it is current while the job prints.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..errors import ValidationException
from .document import JobDocument
from .status import TRAINMON_FIELDS

Property = tuple[str, int, str | None, float | None]
"""A searchable value: (name, element: its index in the first list on its path or -1, text, number)."""

RESOURCES = ("TrainingJob", "Experiment", "ExperimentTrial", "ExperimentTrialComponent", "Endpoint", "Model",
             "ModelPackage", "ModelPackageGroup", "Pipeline", "PipelineExecution", "FeatureGroup", "FeatureMetadata",
             "Image", "ImageVersion", "Project", "HyperParameterTuningJob", "ModelCard", "PipelineVersion")
OPERATORS = ("Equals", "NotEquals", "GreaterThan", "GreaterThanOrEqualTo", "LessThan", "LessThanOrEqualTo",
             "Contains", "Exists", "NotExists", "In")
RANGES = {"GreaterThan": ">", "GreaterThanOrEqualTo": ">=", "LessThan": "<", "LessThanOrEqualTo": "<="}
SEARCHED = ("TrainingJob", "HyperParameterTuningJob")
MAX_ELEMENTS = 50  # Filters, NestedFilters and SubExpressions in one request, at every depth
MAX_LIST = 20
METRICS = "Metrics."
FINAL_METRICS = "FinalMetricDataList"
TIMESTAMPS = frozenset({
    "CreationTime", "TrainingStartTime", "TrainingEndTime", "LastModifiedTime",
    "SecondaryStatusTransitions.StartTime", "SecondaryStatusTransitions.EndTime",
    "DebugRuleEvaluationStatuses.LastModifiedTime", "ProfilerRuleEvaluationStatuses.LastModifiedTime",
    "FinalMetricDataList.Timestamp", "HyperParameterTuningEndTime", "BestTrainingJob.CreationTime",
    "BestTrainingJob.TrainingStartTime", "BestTrainingJob.TrainingEndTime",
    "TuningJobCompletionDetails.ConvergenceDetectedTime",
})
NUMBERS = frozenset({
    "ResourceConfig.InstanceCount", "ResourceConfig.VolumeSizeInGB", "ResourceConfig.KeepAlivePeriodInSeconds",
    "ResourceConfig.InstanceGroups.InstanceCount", "StoppingCondition.MaxRuntimeInSeconds",
    "StoppingCondition.MaxWaitTimeInSeconds", "StoppingCondition.MaxPendingTimeInSeconds", "TrainingTimeInSeconds",
    "BillableTimeInSeconds", "RetryStrategy.MaximumRetryAttempts", "ProfilerConfig.ProfilingIntervalInMilliseconds",
    "FinalMetricDataList.Value",
})
_NUMBER = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*")


def kind(name: str) -> str:
    """What a property holds: "timestamp", "number", or "text" (which may read as a number)."""
    if name in TIMESTAMPS:
        return "timestamp"
    return "number" if name.startswith(METRICS) or name in NUMBERS else "text"


def as_number(text: str) -> float | None:
    """A text's value as a finite number, when it is written as one (``1e-3``, ``0.5``; not ``nan``)."""
    if not _NUMBER.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def properties(doc: JobDocument) -> list[Property]:
    """A job's searchable properties: the SageMaker fields of its document (what DescribeTrainingJob
    answers, times as epoch seconds) and its tags as ``Tags.<key>``. The final metrics are the
    series' (see the module's docstring)."""
    answer = {key: value for key, value in doc.items() if key not in TRAINMON_FIELDS and key != "Tags"}
    tags = doc.get("Tags") or []
    found: list[Property] = []
    _flatten(answer, "", -1, found)
    for tag in tags:
        found.append((f"Tags.{tag['Key']}", -1, tag["Value"], as_number(tag["Value"])))
    return found


def _flatten(value: Any, path: str, element: int, into: list[Property]) -> None:
    if isinstance(value, dict):
        for key, member in value.items():
            _flatten(member, f"{path}.{key}" if path else str(key), element, into)
    elif isinstance(value, list):
        for index, member in enumerate(value):
            _flatten(member, path, index if element < 0 else element, into)
    elif isinstance(value, bool):
        into.append((path, element, "true" if value else "false", None))
    elif isinstance(value, (int, float)):
        if math.isfinite(value):
            into.append((path, element, None, float(value)))
    elif isinstance(value, str):
        into.append((path, element, value, as_number(value)))


# -- a SearchExpression read into a tree


@dataclass(frozen=True)
class Condition:
    """One Filter: ``number`` is its Value read as the property's number (a timestamp's epoch
    seconds), where it is one; ``values`` are In's."""

    name: str
    operator: str
    value: str | None = None
    number: float | None = None
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class Nested:
    """A NestedFilters: one element of the list ``name`` satisfies every condition."""

    name: str
    conditions: tuple[Condition, ...]


@dataclass(frozen=True)
class Expression:
    operator: str  # "And" or "Or"
    parts: tuple[Condition | Nested | Expression, ...]


@dataclass(frozen=True)
class Search:
    """A Search request as the store runs it."""

    expression: Expression | None
    sort_by: str
    descending: bool


def read_request(Resource: Any, SearchExpression: Any, SortBy: Any, SortOrder: Any) -> Search:
    """A Search request's expression and order, checked as AWS checks them (ValidationException)."""
    if Resource is None:
        raise ValidationException("1 validation error detected: Value null at 'resource' failed to satisfy constraint: "
                                  "Member must not be null")
    if Resource not in RESOURCES:
        raise ValidationException(f"1 validation error detected: Value '{Resource}' at 'resource' failed to satisfy "
                                  f"constraint: Member must satisfy enum value set: [{', '.join(RESOURCES)}]")
    if Resource not in SEARCHED:
        raise ValidationException(f"trainmon searches training jobs and hyperparameter tuning jobs (Resource "
                                  f"TrainingJob or HyperParameterTuningJob); it keeps no {Resource}.")
    sort_by = "LastModifiedTime" if SortBy is None else _name(SortBy, "sortBy")
    if SortOrder not in (None, "Ascending", "Descending"):
        raise ValidationException(f"1 validation error detected: Value '{SortOrder}' at 'sortOrder' failed to satisfy "
                                  "constraint: Member must satisfy enum value set: [Ascending, Descending]")
    if sort_by.startswith(FINAL_METRICS):
        raise ValidationException(f"Cannot sort by {sort_by}: it is a list; sort by Metrics.<name> instead.")
    expression = None
    if SearchExpression is not None:
        budget = [MAX_ELEMENTS]
        contains = [0]
        expression = _expression(SearchExpression, "searchExpression", budget, contains)
    return Search(expression, sort_by, SortOrder != "Ascending")


def _expression(given: Any, at: str, budget: list[int], contains: list[int]) -> Expression:
    if not isinstance(given, dict):
        raise ValidationException(f"{at} must be a structure of Filters, NestedFilters, SubExpressions and Operator.")
    unknown = set(given) - {"Filters", "NestedFilters", "SubExpressions", "Operator"}
    if unknown:
        raise ValidationException(f"Unknown parameter in {at}: {', '.join(sorted(unknown))}; must be one of: "
                                  "Filters, NestedFilters, SubExpressions, Operator")
    operator = given.get("Operator", "And")
    if operator not in ("And", "Or"):
        raise ValidationException(f"1 validation error detected: Value '{operator}' at '{at}.operator' failed to "
                                  "satisfy constraint: Member must satisfy enum value set: [And, Or]")
    parts: list[Condition | Nested | Expression] = []
    for member, read in (("Filters", _filter), ("NestedFilters", _nested), ("SubExpressions", _expression)):
        items = given.get(member)
        if items is None:
            continue
        where = f"{at}.{member[0].lower()}{member[1:]}"
        if not isinstance(items, list) or not 1 <= len(items) <= MAX_LIST:
            raise ValidationException(f"1 validation error detected: Value at '{where}' failed to satisfy constraint: "
                                      f"Member must have length between 1 and {MAX_LIST}")
        for index, item in enumerate(items, 1):
            budget[0] -= 1
            if budget[0] < 0:
                raise ValidationException(f"A SearchExpression may hold at most {MAX_ELEMENTS} Filters, NestedFilters "
                                          "and SubExpressions in all, at every depth.")
            parts.append(read(item, f"{where}.{index}.member", budget, contains))
    if not parts:
        raise ValidationException("A SearchExpression must contain at least one subexpression, filter, or nested "
                                  "filter.")
    return Expression(operator, tuple(parts))


def _nested(given: Any, at: str, budget: list[int], contains: list[int]) -> Nested:
    if not isinstance(given, dict) or set(given) - {"NestedPropertyName", "Filters"}:
        raise ValidationException(f"{at} must be a structure of NestedPropertyName and Filters.")
    name = _name(given.get("NestedPropertyName"), f"{at}.nestedPropertyName")
    filters = given.get("Filters")
    if not isinstance(filters, list) or not 1 <= len(filters) <= MAX_LIST:
        raise ValidationException(f"1 validation error detected: Value at '{at}.filters' failed to satisfy constraint: "
                                  f"Member must have length between 1 and {MAX_LIST}")
    conditions = tuple(_filter(item, f"{at}.filters.{index}.member", budget, contains)
                       for index, item in enumerate(filters, 1))
    for condition in conditions:
        if not condition.name.startswith(name + "."):
            raise ValidationException(f"The filter on {condition.name} is not within the nested property {name}: "
                                      f"a nested filter's names start with '{name}.'.")
    return Nested(name, conditions)


def _filter(given: Any, at: str, budget: list[int], contains: list[int]) -> Condition:
    if not isinstance(given, dict) or set(given) - {"Name", "Operator", "Value"}:
        raise ValidationException(f"{at} must be a structure of Name, Operator and Value.")
    name = _name(given.get("Name"), f"{at}.name")
    operator = given.get("Operator", "Equals")
    if operator not in OPERATORS:
        raise ValidationException(f"1 validation error detected: Value '{operator}' at '{at}.operator' failed to "
                                  f"satisfy constraint: Member must satisfy enum value set: [{', '.join(OPERATORS)}]")
    value = given.get("Value")
    if operator in ("Exists", "NotExists"):
        return Condition(name, operator)
    if not isinstance(value, str) or not 1 <= len(value) <= 1024:
        raise ValidationException(f"The {operator} filter on {name} needs a Value: a string of 1 to 1024 characters.")
    of_kind = kind(name)
    if operator in ("Contains", "In"):
        if of_kind != "text":
            raise ValidationException(f"The {operator} operator is only supported for text properties; {name} is a "
                                      f"{of_kind}.")
        if operator == "Contains":
            contains[0] += 1
            if contains[0] > 1:
                raise ValidationException("'CONTAINS' operator usage limit of 1 exceeded.")
            return Condition(name, operator, value)
        return Condition(name, operator, value, values=tuple(part.strip() for part in value.split(",")))
    number = _timestamp(value, name) if of_kind == "timestamp" else as_number(value)
    if number is None and of_kind == "number":
        raise ValidationException(f"The value '{value}' of the filter on {name} must be an integer or floating-point "
                                  "decimal.")
    if number is None and operator in RANGES:
        raise ValidationException(f"The {operator} operator compares numbers: '{value}' is not one, and {name} is a "
                                  "text property. Use Equals, NotEquals, Contains or In for text.")
    return Condition(name, operator, value, number)


def _timestamp(value: str, name: str) -> float:
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValidationException(f"The value '{value}' of the filter on {name} must be an ISO 8601 date-time: "
                                  "YYYY-mm-dd'T'HH:MM:SS.") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _name(value: Any, at: str) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= 255:
        raise ValidationException(f"1 validation error detected: Value at '{at}' failed to satisfy constraint: Member "
                                  "must be a string of length between 1 and 255")
    return value


# -- an expression run over a few documents' properties in Python (tuning jobs: tens, not 100,000s),
# with the meaning store/search.py gives it in SQL


def _holds(condition: Condition, value: tuple[str | None, float | None]) -> bool:
    """Whether one value satisfies a (positive) filter."""
    text, number = value
    operator = condition.operator
    if operator == "Exists":
        return text is not None or number is not None
    if operator == "Equals":
        return ((text is not None and kind(condition.name) == "text" and text == condition.value)
                or (number is not None and condition.number is not None and number == condition.number))
    if operator in RANGES:
        if number is None or condition.number is None:
            return False
        return {">": number > condition.number, ">=": number >= condition.number, "<": number < condition.number,
                "<=": number <= condition.number}[RANGES[operator]]
    if text is None:
        return False
    if operator == "Contains":
        return (condition.value or "").lower() in text.lower()
    return text in condition.values  # In


def _satisfied(condition: Condition, values: list[tuple[str | None, float | None]]) -> bool:
    """A filter over a property's values: NotEquals and NotExists hold where it has none."""
    positive = {"NotEquals": "Equals", "NotExists": "Exists"}.get(condition.operator)
    if positive is None:
        return any(_holds(condition, value) for value in values)
    return not any(_holds(Condition(condition.name, positive, condition.value, condition.number), v) for v in values)


def matches(found: list[Property], expression: Expression | None) -> bool:
    """Whether a document whose properties are ``found`` matches ``expression``."""
    if expression is None:
        return True
    by_name: dict[str, list[tuple[int, str | None, float | None]]] = {}
    for name, element, text, number in found:
        by_name.setdefault(name, []).append((element, text, number))

    def part_holds(part: Condition | Nested | Expression) -> bool:
        if isinstance(part, Expression):
            results = (part_holds(sub) for sub in part.parts)
            return any(results) if part.operator == "Or" else all(results)
        if isinstance(part, Condition):
            return _satisfied(part, [(text, number) for _, text, number in by_name.get(part.name, [])])
        elements = {element for name, rows in by_name.items() if name.startswith(part.name + ".")
                    for element, _, _ in rows if element >= 0}
        return any(all(_satisfied(condition, [(text, number) for e, text, number in by_name.get(condition.name, [])
                                              if e == element]) for condition in part.conditions)
                   for element in elements)

    return part_holds(expression)


def sort_key(found: list[Property], name: str) -> tuple[int, float, str] | None:
    """A document's place in the order of property ``name``: numbers before text (None: it has none)."""
    value = next(((text, number) for key, _, text, number in found if key == name), None)
    if value is None:
        return None
    text, number = value
    return (0, number, "") if number is not None else (1, 0.0, text or "")
