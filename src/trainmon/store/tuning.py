"""Hyperparameter tuning jobs in SQL, for both backends (the ``tuning_jobs`` table).

A row holds the tuning job's document as JSON (:mod:`trainmon.jobs.tuning`) beside the columns
ListHyperParameterTuningJobs filters and sorts on, and ``tuner``: the process that runs its
search, as :func:`trainmon.runtime.job.orphans.identity` names a process, so that a reader can
tell a tuning job whose tuner died from one still running. Its trials are ordinary training jobs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from ..errors import ResourceInUse, ResourceNotFound
from .sql import Sql, Where

TABLE = """
    CREATE TABLE IF NOT EXISTS tuning_jobs (
        id {id} PRIMARY KEY,
        name {text} NOT NULL UNIQUE,
        status {text} NOT NULL,
        creation_time {real} NOT NULL,
        last_modified_time {real} NOT NULL,
        doc {text} NOT NULL,
        tuner {text}
    );
    CREATE INDEX IF NOT EXISTS tuning_jobs_by_time ON tuning_jobs (creation_time, id);
    CREATE INDEX IF NOT EXISTS tuning_jobs_by_status ON tuning_jobs (status, id);
"""
COLUMNS = "id, name, status, creation_time, last_modified_time, doc, tuner"
ORDERS = {"Name": "name", "Status": "status", "CreationTime": "creation_time"}


@dataclass(slots=True)
class TuningRow:
    id: int
    name: str
    status: str
    creation_time: float
    last_modified_time: float
    doc: dict[str, Any]
    tuner: dict[str, Any] | None


def from_row(row: Sequence[Any]) -> TuningRow:
    id_, name, status, created, modified, doc, tuner = row
    return TuningRow(id_, name, status, created, modified, json.loads(doc), json.loads(tuner) if tuner else None)


def values(row: TuningRow) -> tuple[Any, ...]:
    """The columns an update writes, in ``UPDATE``'s order, the id last."""
    return (row.doc["HyperParameterTuningJobStatus"], row.last_modified_time, json.dumps(row.doc),
            json.dumps(row.tuner) if row.tuner is not None else None, row.id)


UPDATE = "UPDATE tuning_jobs SET status = ?, last_modified_time = ?, doc = ?, tuner = ? WHERE id = ?"


def place(row: TuningRow, sort_by: str) -> tuple[Any, int]:
    """A tuning job's place in the order of ``sort_by``, where the next page goes on from."""
    value = {"Name": row.name, "Status": row.status}.get(sort_by, row.creation_time)
    return value, row.id


class TuningJobs:
    """The tuning-job half of :class:`~trainmon.store.base.SqlStore` (which brings the connection)."""

    _find: str
    _lock_job: str

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _transaction(self) -> AbstractContextManager[Sql]:
        raise NotImplementedError

    def _page(self, select: str, where: Where, columns: Sequence[str], after: Sequence[Any] | None, descending: bool,
              limit: int | None) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def create_tuning_job(self, name: str, doc: dict[str, Any], creation_time: float) -> TuningRow:
        with self._transaction() as sql:
            rows = sql.rows("INSERT INTO tuning_jobs (name, status, creation_time, last_modified_time, doc) "
                            f"VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING RETURNING {COLUMNS}",
                            (name, doc["HyperParameterTuningJobStatus"], creation_time, creation_time, json.dumps(doc)))
        if not rows:
            raise ResourceInUse(f"A hyperparameter tuning job named {name} already exists "
                                f"({doc['HyperParameterTuningJobArn']}).")
        return from_row(rows[0])

    def get_tuning_job(self, name: str) -> TuningRow | None:
        rows = self._read(f"SELECT {COLUMNS} FROM tuning_jobs WHERE name = ?", (name,))
        return from_row(rows[0]) if rows else None

    def tuning_jobs_after(self, after: tuple[Any, ...] | None, limit: int | None, *, status: str | None = None,
                          statuses: Sequence[str] | None = None, name_contains: str | None = None,
                          created_after: float | None = None, created_before: float | None = None,
                          modified_after: float | None = None, modified_before: float | None = None,
                          sort_by: str = "CreationTime", descending: bool = False) -> list[TuningRow]:
        """Up to ``limit`` tuning jobs in the order of ``sort_by`` after ``after`` (a row's :func:`place`)."""
        where = (Where().add("status = ?", status).any_of("status", statuses)
                 .add(f"{self._find}(lower(name), lower(?)) > 0", name_contains or None)
                 .add("creation_time > ?", created_after).add("creation_time < ?", created_before)
                 .add("last_modified_time > ?", modified_after).add("last_modified_time < ?", modified_before))
        rows = self._page(f"SELECT {COLUMNS} FROM tuning_jobs", where, (ORDERS.get(sort_by, "creation_time"), "id"),
                          after, descending, limit)
        return [from_row(row) for row in rows]

    def update_tuning_job(self, name: str, mutate: Callable[[TuningRow], None]) -> TuningRow:
        """Read, change and write one tuning job atomically; ``mutate`` edits the row in place."""
        with self._transaction() as sql:
            rows = sql.rows(f"SELECT {COLUMNS} FROM tuning_jobs WHERE name = ?{self._lock_job}", (name,))
            if not rows:
                raise ResourceNotFound(f"Amazon SageMaker can't find a tuning job with name {name}")
            row = from_row(rows[0])
            mutate(row)
            row.status = row.doc["HyperParameterTuningJobStatus"]
            sql.rows(UPDATE, values(row))
        return row

    def delete_tuning_job(self, name: str) -> None:
        with self._transaction() as sql:
            sql.rows("DELETE FROM tuning_jobs WHERE name = ?", (name,))
