"""Request shapes, checked as AWS's servers check them, with AWS's message form.

A shape says what a request field may hold (a structure's members, a list's items, a string's
length and pattern, a number's range). :meth:`Shape.check` walks a value and collects every
problem, each worded as AWS words it::

    2 validation errors detected: Value 0 at 'stoppingCondition.maxRuntimeInSeconds' failed to
    satisfy constraint: Member must have value greater than or equal to 1; Value null at
    'trainingJobName' failed to satisfy constraint: Member must not be null

botocore checks only types, required members and minimums on the client; maximums, patterns and
enums are the server's. Here every one is checked, and types too, since a request can come from
Python directly. A shape may carry a ``hint``: what to do about it, added after AWS's words.
Strings that reach a process (arguments, environment) refuse NUL, which no process can receive.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .errors import TrainmonError, ValidationException

_T = TypeVar("_T")


@dataclass
class Problems:
    """The problems found so far, in AWS's words."""

    found: list[str] = field(default_factory=list)

    def add(self, value: Any, path: str, constraint: str, hint: str | None = None) -> None:
        shown = "null" if value is None else _shown(value)
        text = f"Value {shown} at '{path}' failed to satisfy constraint: {constraint}"
        self.found.append(f"{text} ({hint})" if hint else text)

    def raise_if_any(self, error: type[TrainmonError] = ValidationException) -> None:
        """``error`` (a service's validation error) listing every problem, if there is one."""
        if self.found:
            count = len(self.found)
            raise error(f"{count} validation error{'s' if count > 1 else ''} detected: " + "; ".join(self.found))


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value) if isinstance(value, (int, float)) else (
        type(value).__name__ if not isinstance(value, (dict, list)) else repr(value))
    return text if len(text) <= 120 else text[:117] + "..."


def member_path(parent: str, name: str) -> str:
    """AWS's path of a member: names in lowerCamelCase, joined by dots."""
    own = name[:1].lower() + name[1:]
    return f"{parent}.{own}" if parent else own


def snake_case(name: str) -> str:
    """A member or operation name as Python's (``DescribeTrainingJob`` -> ``describe_training_job``),
    as boto3 names its methods."""
    return _CAPITAL.sub("_", name).lower()


_CAPITAL = re.compile(r"(?<!^)(?=[A-Z])")


class Shape:
    hint: str | None = None

    def check(self, value: Any, path: str, problems: Problems) -> Any:
        """The value as stored (unchanged unless a shape says otherwise); problems are collected."""
        raise NotImplementedError


@dataclass
class String(Shape):
    min: int = 0
    max: int | None = None
    pattern: str | None = None
    enum: tuple[str, ...] | None = None
    to_process: bool = False  # reaches a process: no NUL
    hint: str | None = None

    def check(self, value: Any, path: str, problems: Problems) -> Any:
        if not isinstance(value, str):
            problems.add(value, path, "Member must be a string", self.hint)
            return value
        if self.enum is not None and value not in self.enum:
            problems.add(value, path, f"Member must satisfy enum value set: [{', '.join(self.enum)}]", self.hint)
        if len(value) < self.min:
            problems.add(value, path, f"Member must have length greater than or equal to {self.min}", self.hint)
        if self.max is not None and len(value) > self.max:
            problems.add(value, path, f"Member must have length less than or equal to {self.max}", self.hint)
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            problems.add(value, path, f"Member must satisfy regular expression pattern: {self.pattern}", self.hint)
        if self.to_process and "\0" in value:
            problems.add(value, path, "Member must not contain the NUL character (a process cannot receive it)",
                         self.hint)
        return value


@dataclass
class Integer(Shape):
    min: int | None = None
    max: int | None = None
    allowed: tuple[int, ...] | None = None
    hint: str | None = None

    def check(self, value: Any, path: str, problems: Problems) -> Any:
        if not isinstance(value, int) or isinstance(value, bool):
            problems.add(value, path, "Member must be an integer", self.hint)
            return value
        _range(value, path, problems, self.min, self.max, self.hint)
        if self.allowed is not None and value not in self.allowed:
            problems.add(value, path, f"Member must satisfy enum value set: [{', '.join(map(str, self.allowed))}]",
                         self.hint)
        return value


@dataclass
class Number(Shape):
    min: float | None = None
    max: float | None = None
    hint: str | None = None

    def check(self, value: Any, path: str, problems: Problems) -> Any:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            problems.add(value, path, "Member must be a finite number", self.hint)
            return value
        _range(value, path, problems, self.min, self.max, self.hint)
        return value


def _range(value: float, path: str, problems: Problems, low: float | None, high: float | None,
           hint: str | None) -> None:
    if low is not None and value < low:
        problems.add(value, path, f"Member must have value greater than or equal to {low}", hint)
    if high is not None and value > high:
        problems.add(value, path, f"Member must have value less than or equal to {high}", hint)


@dataclass
class Boolean(Shape):
    hint: str | None = None

    def check(self, value: Any, path: str, problems: Problems) -> Any:
        if not isinstance(value, bool):
            problems.add(value, path, "Member must be a boolean", self.hint)
        return value


@dataclass
class ListOf(Shape):
    item: Shape
    min: int = 0
    max: int | None = None
    hint: str | None = None

    def check(self, value: Any, path: str, problems: Problems) -> Any:
        if not isinstance(value, (list, tuple)):
            problems.add(value, path, "Member must be a list", self.hint)
            return value
        if len(value) < self.min:
            problems.add(value, path, f"Member must have length greater than or equal to {self.min}", self.hint)
        if self.max is not None and len(value) > self.max:
            problems.add(value, path, f"Member must have length less than or equal to {self.max}", self.hint)
        return [self.item.check(item, f"{path}.{index}.member", problems) for index, item in enumerate(value, 1)]


@dataclass
class MapOf(Shape):
    key: String
    value: Shape
    max: int | None = None
    hint: str | None = None

    def check(self, value: Any, path: str, problems: Problems) -> Any:
        if not isinstance(value, Mapping):
            problems.add(value, path, "Member must be a map", self.hint)
            return value
        if self.max is not None and len(value) > self.max:
            problems.add(f"{len(value)} entries", path, f"Map must have at most {self.max} entries", self.hint)
        checked = {}
        for key, item in value.items():
            self.key.check(key, f"{path}.key", problems)
            checked[key] = self.value.check(item, f"{path}.{key}" if isinstance(key, str) else path, problems)
        return checked


@dataclass
class Json(Shape):
    """A value trainmon keeps without reading it: any JSON value (strings, numbers, booleans, lists
    and objects with string keys), so that it can be stored and given back."""

    hint: str | None = None

    def check(self, value: Any, path: str, problems: Problems) -> Any:
        if not _is_json(value):
            problems.add(value, path, "Member must be JSON data (strings, numbers, booleans, lists, maps)", self.hint)
        return value


def _is_json(value: Any) -> bool:
    if value is None or isinstance(value, (str, bool, int)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_is_json(item) for item in value)
    if isinstance(value, Mapping):
        return all(isinstance(key, str) and _is_json(item) for key, item in value.items())
    return False


@dataclass
class Structure(Shape):
    members: dict[str, Shape]
    required: tuple[str, ...] = ()
    hint: str | None = None

    def check(self, value: Any, path: str, problems: Problems) -> Any:
        if not isinstance(value, Mapping):
            problems.add(value, path or "request", "Member must be a structure", self.hint)
            return value
        for name in self.required:
            if value.get(name) is None:
                problems.add(None, member_path(path, name), "Member must not be null", self.hint)
        unknown = sorted(str(name) for name in value if name not in self.members)
        if unknown:
            where = f" at '{path}'" if path else ""
            problems.found.append(f"{unknown_parameters(unknown, where)}; must be among: {', '.join(self.members)}")
        return {name: self.members[name].check(item, member_path(path, name), problems)
                for name, item in value.items() if name in self.members and item is not None}


def unknown_parameters(names: Iterable[str], where: str = "") -> str:
    """AWS's words for members a request may not hold: ``Unknown parameter(s) in input: Foo``."""
    return f"Unknown parameter(s){where}: {', '.join(names)}"


def refuse_unknown(given: Iterable[Any], error: type[TrainmonError] = ValidationException, *,
                   allowed: Iterable[str] = (), where: str | None = None) -> None:
    """``error`` naming every member of ``given`` (an operation's ``**unsupported``, or a structure's
    keys) that is not ``allowed``; ``where`` names the structure (SageMaker's top level: "input")."""
    permitted = set(allowed)
    unknown = sorted(str(name) for name in given if name not in permitted)
    if unknown:
        raise error(unknown_parameters(unknown, f" in {where}" if where else "") + ".")


def offset_page(items: list[_T], token: Any, size: int, error: type[TrainmonError] = ValidationException,
                member: str = "NextToken") -> tuple[list[_T], str | None]:
    """A page of ``size`` items from where a token of offset paging (the digits of an offset)
    left off, and the next page's token (None when no items remain: a client that loops until the
    token stops advancing must get none). A token that is not a string is ``error`` in AWS's
    words, and so is one that is no offset this paging gave: never a silent restart."""
    given = _token_text(token, error, member)
    if given and not (given.isdecimal() and given.isascii() and len(given) <= 18):
        raise _foreign(given, error, member)
    start = int(given) if given else 0
    end = start + size
    return items[start:end], str(end) if end < len(items) else None


def request_fingerprint(request: Any) -> str:
    """What a page token is bound to (a request's filters and order): a token is only good for the
    request that gave it."""
    text = json.dumps(request, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def keyset_token(place: Sequence[Any], fingerprint: str) -> str:
    """The token of a keyset page's end: the sort key of its last item (its ``place``), and the
    fingerprint of the request."""
    raw = json.dumps({"p": list(place), "r": fingerprint}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode()


def keyset_place(token: Any, fingerprint: str, kinds: Sequence[type], error: type[TrainmonError] = ValidationException,
                 member: str = "NextToken") -> tuple[Any, ...] | None:
    """Where the keyset page a token asks for starts: the place :func:`keyset_token` put in it
    (None for the first page: no token, or an empty one). A token that is not a string, or that no
    page of this request gave, is ``error`` in :func:`offset_page`'s words."""
    given = _token_text(token, error, member)
    if not given:
        return None
    place = keyset_values(given, fingerprint, kinds)
    if place is None:
        raise _foreign(given, error, member)
    return place


def keyset_values(token: str, fingerprint: str, kinds: Sequence[type]) -> tuple[Any, ...] | None:
    """The place in a :func:`keyset_token` made for ``fingerprint``, when it holds a value of each
    of ``kinds`` (str, int: 64-bit, float: any finite number, given as a float); None otherwise."""
    if len(token) > 4096:
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        place, made_for = data["p"], data["r"]
    except (AttributeError, ValueError, TypeError, KeyError, RecursionError):
        return None
    if made_for != fingerprint or not isinstance(place, list) or len(place) != len(kinds) or \
            not all(map(_of_kind, place, kinds)):
        return None
    return tuple(float(value) if kind is float else value for value, kind in zip(place, kinds, strict=True))


def _of_kind(value: Any, kind: type) -> bool:
    if isinstance(value, str) or kind is str:
        return isinstance(value, kind)
    if isinstance(value, float):
        return kind is float and math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63


def _token_text(token: Any, error: type[TrainmonError], member: str) -> str | None:
    """A page token as given; ``error`` in AWS's words when it is not a string."""
    if token is None or isinstance(token, str):
        return token
    problems = Problems()
    String().check(token, member_path("", member), problems)
    problems.raise_if_any(error)
    raise AssertionError("unreachable")


def _foreign(token: str, error: type[TrainmonError], member: str) -> TrainmonError:
    return error(f"The {member} {token[:40]!r} is not one this service gave: pass a page's {member} as it came, "
                 "or none for the first page.")


def validate(shape: Structure, request: Mapping[str, Any]) -> dict[str, Any]:
    """The request checked against its shape: ValidationException listing every problem."""
    problems = Problems()
    checked = shape.check(request, "", problems)
    problems.raise_if_any()
    assert isinstance(checked, dict)
    return checked


def validate_members(members: dict[str, Shape], values: Mapping[str, Any]) -> None:
    """Some members of a request, each checked against its shape (None: missing)."""
    problems = Problems()
    for name, shape in members.items():
        value = values.get(name)
        if value is None:
            problems.add(None, member_path("", name), "Member must not be null")
        else:
            shape.check(value, member_path("", name), problems)
    problems.raise_if_any()
