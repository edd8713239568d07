"""What both backends speak: SQL with ``?`` placeholders through a two-method adapter, and driver
errors in the same words."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol, TypeVar

from ..errors import DuplicateKey, StoreError, StoreFull

T = TypeVar("T")


class Sql(Protocol):
    """One transaction of a backend; SQL with ``?`` placeholders."""

    greatest: str  # the two-argument maximum: SQLite's max, PostgreSQL's GREATEST
    # A statement that waits for every transaction that wrote to ``series`` to end and holds off new
    # ones until this one's end (PostgreSQL's LOCK TABLE); empty where write transactions take
    # turns already (SQLite's).
    series_writes_wait: str

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...


Transaction = Callable[[], AbstractContextManager[Sql]]


Problem = Literal["full", "locked", "unreachable", "duplicate", "other"]


def store_error(problem: Problem, location: str, detail: str) -> StoreError:
    """The error a driver failure becomes, in the same words for every backend."""
    if problem == "full":
        return StoreFull(f"the disk holding {location} is full: free some space; what was stored so far stays readable")
    if problem == "locked":
        return StoreError(f"the store at {location} stayed locked for 30 s by another process: {detail}")
    if problem == "unreachable":
        return StoreError(
            f"cannot reach the store at {location}: {detail}. Check that the server runs and accepts this "
            "user, or set TRAINMON_DATABASE_URL to another database"
        )
    if problem == "duplicate":
        return DuplicateKey(f"store error at {location}: {detail}")
    return StoreError(f"store error at {location}: {detail}")


class Where:
    """A WHERE clause from optional conditions, with ``?`` placeholders; a condition whose value is
    None is left out."""

    def __init__(self) -> None:
        self.conditions: list[str] = []
        self.args: list[Any] = []

    def add(self, condition: str, *values: Any) -> Where:
        if all(value is not None for value in values):
            self.conditions.append(condition)
            self.args.extend(values)
        return self

    def any_of(self, column: str, values: Sequence[Any] | None) -> Where:
        """``column`` is one of ``values`` (left out when there are none)."""
        if values:
            self.conditions.append(f"{column} IN ({','.join('?' * len(values))})")
            self.args.extend(values)
        return self

    @property
    def sql(self) -> str:
        return " AND ".join(self.conditions) or "TRUE"


def limit_clause(rows: int | None) -> str:
    return "" if rows is None else f" LIMIT {int(rows)}"


def prefix_end(prefix: str) -> str | None:
    """The least string after every string that starts with ``prefix`` (None: there is none)."""
    kept = prefix.rstrip(chr(0x10FFFF))
    if not kept:
        return None
    code = ord(kept[-1]) + 1
    return kept[:-1] + chr(0xE000 if 0xD800 <= code <= 0xDFFF else code)  # (surrogates are no characters)


def pages() -> Iterator[int]:
    """How many log chunks each read fetches: 1, 2, 4, ... 64. A chunk holds a record (a job that
    prints a line at a time) or a megabyte of them (a flood): a read asks for few first, so a page of
    records never costs a read of 64 megabytes."""
    rows = 1
    while True:
        yield rows
        rows = min(64, rows * 2)
