"""Search's text form, for the CLI's ``--where`` and the console's filter box: a line a person types
that reads into the SearchExpression it stands for.

    HyperParameters.lr >= 0.01 and Metrics.validation:error < 0.2
    (Tags.team = vision or Tags.team = speech) and TrainingJobStatus in Completed,Stopped
    TrainingJobName contains resnet and Tags.owner exists and FailureReason not exists

``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``contains``, ``in`` (a comma-separated list), ``exists``
and ``not exists``; ``and`` binds tighter than ``or``; parentheses group. A name or a value with
spaces or operator characters in it is written in double quotes (``\\"`` for a quote).
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import ValidationException

SYMBOLS = {"=": "Equals", "!=": "NotEquals", ">": "GreaterThan", ">=": "GreaterThanOrEqualTo", "<": "LessThan",
           "<=": "LessThanOrEqualTo"}
WORDS = {"contains": "Contains", "in": "In"}
_TOKEN = re.compile(r'\s*(?:(?P<quoted>"(?:[^"\\]|\\.)*")|(?P<symbol>>=|<=|!=|=|>|<|\(|\))|(?P<bare>[^\s()"=!<>]+))')
_KEYWORDS = {"and", "or", "not", "exists", "contains", "in"}


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, bool, int]] = []  # (token, quoted, where)
        at = 0
        while text[at:].strip():
            found = _TOKEN.match(text, at)
            if found is None:
                raise _error(text, at, "a closing quote" if '"' in text[at:] else "a name, an operator or a value")
            quoted = found.group("quoted")
            token = (re.sub(r"\\(.)", r"\1", quoted[1:-1]) if quoted is not None
                     else found.group("symbol") or found.group("bare"))
            self.tokens.append((token, quoted is not None, found.start(found.lastgroup or 0)))
            at = found.end()
        self.next = 0

    def peek(self) -> tuple[str, bool, int] | None:
        return self.tokens[self.next] if self.next < len(self.tokens) else None

    def word(self, *words: str) -> bool:
        """Whether the next token is one of ``words`` (unquoted, any case); taken when it is."""
        token = self.peek()
        if token is not None and not token[1] and token[0].lower() in words:
            self.next += 1
            return True
        return False

    def take(self, what: str) -> tuple[str, bool, int]:
        token = self.peek()
        if token is None:
            raise _error(self.text, len(self.text), f"{what} at the end")
        self.next += 1
        return token


def parse(text: str) -> dict[str, Any] | None:
    """The SearchExpression a line of text stands for (None for an empty line: every job)."""
    reader = _Reader(text)
    if reader.peek() is None:
        return None
    expression = _any(reader)
    extra = reader.peek()
    if extra is not None:
        raise _error(text, extra[2], f"'and', 'or' or the end, not '{extra[0]}'")
    return expression


def _any(reader: _Reader) -> dict[str, Any]:
    parts = [_all(reader)]
    while reader.word("or"):
        parts.append(_all(reader))
    return parts[0] if len(parts) == 1 else _joined(parts, "Or")


def _all(reader: _Reader) -> dict[str, Any]:
    parts = [_one(reader)]
    while reader.word("and"):
        parts.append(_one(reader))
    return parts[0] if len(parts) == 1 else _joined(parts, "And")


def _joined(parts: list[dict[str, Any]], operator: str) -> dict[str, Any]:
    """Parts joined by ``operator``: lone filters as its Filters, groups as its SubExpressions."""
    filters = [part["Filters"][0] for part in parts if _lone_filter(part)]
    groups = [part for part in parts if not _lone_filter(part)]
    joined: dict[str, Any] = {}
    if filters:
        joined["Filters"] = filters
    if groups:
        joined["SubExpressions"] = groups
    if operator == "Or":
        joined["Operator"] = "Or"
    return joined


def _lone_filter(part: dict[str, Any]) -> bool:
    return list(part) == ["Filters"] and len(part["Filters"]) == 1


def _one(reader: _Reader) -> dict[str, Any]:
    token, quoted, where = reader.take("a property name")
    if token == "(" and not quoted:
        inner = _any(reader)
        close = reader.take("')'")
        if close[0] != ")" or close[1]:
            raise _error(reader.text, close[2], f"')', not '{close[0]}'")
        return inner
    if not quoted and (token in SYMBOLS or token in "()" or token.lower() in _KEYWORDS):
        raise _error(reader.text, where, f"a property name, not '{token}'")
    name = token
    if reader.word("exists"):
        return {"Filters": [{"Name": name, "Operator": "Exists"}]}
    if reader.word("not"):
        if not reader.word("exists"):
            raise _error(reader.text, _place(reader), "'exists' after 'not'")
        return {"Filters": [{"Name": name, "Operator": "NotExists"}]}
    operator_token, operator_quoted, operator_at = reader.take("an operator")
    operator = None if operator_quoted else SYMBOLS.get(operator_token) or WORDS.get(operator_token.lower())
    if operator is None:
        raise _error(reader.text, operator_at, f"an operator after {name} ({', '.join(SYMBOLS)}, contains, in, "
                                               f"exists, not exists), not '{operator_token}'")
    value, value_quoted, value_at = reader.take("a value")
    if not value_quoted and (value in SYMBOLS or value in "()"):
        raise _error(reader.text, value_at, f"a value after {operator_token}, not '{value}'")
    return {"Filters": [{"Name": name, "Operator": operator, "Value": value}]}


def _place(reader: _Reader) -> int:
    token = reader.peek()
    return token[2] if token is not None else len(reader.text)


def _error(text: str, at: int, expected: str) -> ValidationException:
    return ValidationException(f"Cannot read the search at character {at + 1} ({text[:at]}▸{text[at:]}): expected "
                               f"{expected}.")


def names(expression: dict[str, Any] | None) -> list[str]:
    """The property names an expression's filters read, each once, in the order they come."""
    found: list[str] = []
    if expression:
        filters = [*expression.get("Filters", []), *(item for nested in expression.get("NestedFilters", [])
                                                     for item in nested.get("Filters", []))]
        found += [item["Name"] for item in filters]
        for sub in expression.get("SubExpressions", []):
            found += names(sub)
    return list(dict.fromkeys(found))
