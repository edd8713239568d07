"""Metric definitions: SageMaker's ``[{"Name": ..., "Regex": ...}]``, validated before anything runs.

Several definitions may share a name, as in AWS's own examples (one regex for ``ms/step``, one for
``s/step``): each feeds the one metric, and :func:`definition_warnings` says so. Definitions are
kept as given, in order, so a definition's position (from 1, as in the messages) is its index plus one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ValidationException
from .engines import slow_reason, unsafe_reason

MAX_DEFINITIONS = 40
MAX_NAME_CHARS = 255
MAX_REGEX_CHARS = 500


@dataclass(frozen=True)
class MetricDefinition:
    name: str
    regex: str

    def to_api(self) -> dict[str, str]:
        return {"Name": self.name, "Regex": self.regex}


def load_definitions(source: str | Path | None) -> list[dict[str, Any]]:
    """Read definitions given as inline JSON or as the path of a JSON file (not yet validated)."""
    if source is None:
        return []
    text = str(source).strip()
    if not text.startswith(("[", "{")):
        path = Path(text).expanduser()
        if not path.is_file():
            raise ValidationException(
                f"Metric definitions {text!r} are neither inline JSON nor a readable file. "
                'Give JSON such as \'[{"Name": "train:error", "Regex": "Train_error=(.*?);"}]\' or a file that holds it.'
            )
        text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationException(
            f"Metric definitions are not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}."
        ) from None
    if isinstance(data, dict) and "MetricDefinitions" in data:
        data = data["MetricDefinitions"]
    if not isinstance(data, list):
        raise ValidationException('Metric definitions must be a JSON list of {"Name": ..., "Regex": ...} objects.')
    return data


def parse_short_form(items: Iterable[str]) -> list[dict[str, Any]]:
    """``NAME=REGEX`` (the CLI's ``--metric``); the first ``=`` separates, regexes may hold more."""
    result = []
    for item in items:
        name, sep, regex = item.partition("=")
        if not sep:
            raise ValidationException(f"--metric {item!r} must look like NAME=REGEX, e.g. 'train:error=Train_error=(.*?);'.")
        result.append({"Name": name, "Regex": regex})
    return result


def validate_definitions(raw: Any) -> list[MetricDefinition]:
    """Check SageMaker's limits plus what SageMaker never checks (compiles, has a group).

    Every problem is reported at once, each naming the definition's position and name.
    """
    found, problems = check_definitions(raw)
    if problems:
        raise ValidationException("Invalid metric definitions:\n  " + "\n  ".join(message for _, message in problems))
    return [definition for definition in found if definition is not None]


def check_definitions(raw: Any) -> tuple[list[MetricDefinition | None], list[tuple[int, str]]]:
    """Each definition, None where it has a problem, and the problems: (its position from 1, or 0
    for the list's own, the message naming the position and name). A value that is no list is a
    ValidationException."""
    if raw is None:
        return [], []
    if not isinstance(raw, list):
        raise ValidationException("MetricDefinitions must be a list.")
    problems: list[tuple[int, str]] = []
    if len(raw) > MAX_DEFINITIONS:
        problems.append((0, f"{len(raw)} metric definitions given; at most {MAX_DEFINITIONS} are allowed."))
    result: list[MetricDefinition | None] = []
    for position, item in enumerate(raw, start=1):
        found = _problems(item, f"MetricDefinitions[{position}]")
        problems += [(position, problem) for problem in found]
        result.append(MetricDefinition(item["Name"], item["Regex"]) if not found else None)
    return result, problems


def _problems(item: Any, where: str) -> list[str]:
    """What is wrong with one definition (nothing: it is good)."""
    if not isinstance(item, dict):
        return [f'{where} must be an object with "Name" and "Regex".']
    problems = []
    unknown = sorted(set(item) - {"Name", "Regex"})
    name, regex = item.get("Name"), item.get("Regex")
    label = f"{where} ({name!r})" if isinstance(name, str) and name else where
    if unknown:
        problems.append(f"{label}: unknown field(s) {', '.join(map(repr, unknown))}; only \"Name\" and \"Regex\" exist.")
    if not isinstance(name, str) or not name:
        problems.append(f'{label}: "Name" must be a non-empty string.')
    elif len(name) > MAX_NAME_CHARS:
        problems.append(f'{label}: "Name" is {len(name)} characters; at most {MAX_NAME_CHARS} are allowed.')
    if not isinstance(regex, str) or not regex:
        return [*problems, f'{label}: "Regex" must be a non-empty string.']
    if len(regex) > MAX_REGEX_CHARS:
        return [*problems, f'{label}: "Regex" is {len(regex)} characters; at most {MAX_REGEX_CHARS} are allowed.']
    try:
        compiled = re.compile(regex)
    except re.error as exc:
        return [*problems, f"{label}: regex does not compile: {exc.msg} at position {exc.pos}."]
    if compiled.groups < 1:
        return [*problems, f"{label}: regex has no capture group; put the value in parentheses, e.g. 'loss=(\\S+)'."]
    unsafe = unsafe_reason(regex)
    if unsafe:
        problems.append(f"{label}: {unsafe}.")
    return problems


def near_miss(literal: str, text: str) -> str | None:
    """Why a regex that needs ``literal`` found none in ``text`` when the text nearly holds it: the
    literal in another case, or with one character missing, added or different. A hint, or None."""
    if not literal or literal in text:
        return None
    folded = re.search(re.escape(literal), text, re.IGNORECASE)
    if folded:
        return (f"the text holds {folded.group()!r}, {literal!r} in another case: fix the case, or start the regex "
                "with (?i)")
    if len(literal) < 3 or len(literal) > 64:
        return None
    for at in range(len(literal)):
        for pattern in (re.escape(literal[:at]) + "." + re.escape(literal[at + 1:]),  # one different
                        re.escape(literal[:at]) + re.escape(literal[at + 1:]),  # one missing
                        re.escape(literal[:at]) + "." + re.escape(literal[at:])):  # one added
            close = re.search(pattern, text)
            if close and close.group() != literal:
                return f"the text holds {close.group()!r} where the regex needs {literal!r}: one character differs"
    return None


def definition_warnings(definitions: Sequence[MetricDefinition], *, escapes_control: bool) -> list[str]:
    """Advice that does not stop a job, in the order of the definitions: names that several
    definitions share, a definition repeated exactly, a tab written where the log will show ``#011``."""
    positions: dict[str, list[int]] = {}
    for position, definition in enumerate(definitions, start=1):
        positions.setdefault(definition.name, []).append(position)
    warnings = []
    first_of: dict[MetricDefinition, int] = {}
    for position, definition in enumerate(definitions, start=1):
        shared = positions[definition.name]
        regexes = {definitions[p - 1].regex for p in shared}
        if position == shared[0] and len(regexes) > 1:
            warnings.append(_shared_name_warning(definition.name, shared))
        if definition in first_of:
            warnings.append(
                f"{_label(position, definition)} repeats {_label(first_of[definition])} exactly (same Name and "
                f"Regex): both are kept, so each record they match gives {definition.name!r} two equal points; "
                f"remove one of them."
            )
        else:
            first_of[definition] = position
        slow = slow_reason(definition.regex)
        if slow:
            warnings.append(f"{_label(position, definition)}: {slow}.")
        if escapes_control and ("\t" in definition.regex or "\\t" in definition.regex):
            warnings.append(
                f"{_label(position, definition)}: its regex contains a tab, but log records show a tab as '#011' "
                f"(as SageMaker's pipeline does); write '#011' instead, or use --mode raw."
            )
    return warnings


def _shared_name_warning(name: str, positions: Sequence[int]) -> str:
    """Definitions (at these positions, from 1) that share a name, with different regexes."""
    labels = [_label(p) for p in positions]
    listed = ", ".join(labels[:-1]) + " and " + labels[-1]
    return (f"{listed} share the name {name!r}: each feeds the one metric {name!r} (as on SageMaker), and a "
            f"record matched by more than one of them gives it a point from each, with the same timestamp.")


def _label(position: int, definition: MetricDefinition | None = None) -> str:
    where = f"MetricDefinitions[{position}]"
    return f"{where} ({definition.name!r})" if definition is not None else where
