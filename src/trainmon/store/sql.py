"""What both backends speak: SQL with ``?`` placeholders through a two-method adapter, and driver
errors in the same words."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol, TypeVar

from ..errors import DuplicateKey, StoreError, StoreFull

T = TypeVar("T")


class Sql(Protocol):
    """One transaction of a backend; SQL with ``?`` placeholders."""

    greatest: str  # the two-argument maximum: SQLite's max, PostgreSQL's GREATEST

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
