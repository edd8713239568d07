"""Search over training jobs in SQL both backends run: each job's properties kept in
``job_properties`` (a row per value, written with the job), and a Search's expression turned into
queries that read a few rows of an index rather than every job.

A filter is a probe of one job's rows (the index on job and name). Which jobs match is read from
the filter that keeps the fewest (a range of the index on name and value), each probing the
others; TotalHits counts them up to :data:`COUNTED` (beyond, it is a lower bound, as SageMaker's own
search engine counts). A page of at most that many matches is those jobs sorted; a page of more
is read in the sort's own order (an index on its property), probing each job until the page is
full, so its cost follows the page, not the matches.

``Metrics.<name>`` reads the job's metric series (``series.final_value``), and ``FinalMetricDataList.*``
its series as the list's elements, so they are current while the job prints. Every other name is
a row of ``job_properties`` (see :mod:`trainmon.jobs.search` for what one holds).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import groupby
from typing import Any

from ..jobs.search import (
    FINAL_METRICS,
    METRICS,
    RANGES,
    Condition,
    Expression,
    Nested,
    Property,
    Search,
    kind,
    properties,
)
from .sql import Sql, prefix_end

TABLE = """
    CREATE TABLE IF NOT EXISTS job_properties (
        job_id {id} NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
        name {text} NOT NULL,
        element INTEGER NOT NULL,
        text {text},
        num {real}
    );
    CREATE INDEX IF NOT EXISTS job_properties_of_job ON job_properties (job_id, name);
    CREATE INDEX IF NOT EXISTS job_properties_by_text ON job_properties (name, text, element, job_id) WHERE text IS NOT NULL;
    CREATE INDEX IF NOT EXISTS job_properties_by_number ON job_properties (name, num, element, job_id) WHERE num IS NOT NULL;
    CREATE INDEX IF NOT EXISTS series_by_final_value ON series (name, final_value, job_id) WHERE job_id IS NOT NULL;
    CREATE INDEX IF NOT EXISTS jobs_by_change_in_order ON jobs (last_modified_time, id);
"""
"""The schema Search needs (``{id}``, ``{text}``, ``{real}``: the backend's types of a job's id, of
text compared as bytes, and of a float)."""

INSERT = "INSERT INTO job_properties (job_id, name, element, text, num) VALUES (?, ?, ?, ?, ?)"
_COLUMNS = {"TrainingJobName": "j.name", "TrainingJobStatus": "j.status", "CreationTime": "j.creation_time",
            "LastModifiedTime": "j.last_modified_time"}  # names a column of jobs holds: their sort needs no join
_SERIES = {"MetricName": ("name", None), "Value": (None, "final_value"), "Timestamp": (None, "final_ms / 1000.0")}


def _series_columns(name: str, alias: str) -> tuple[str | None, str | None]:
    """A FinalMetricDataList member's text and number columns in a series row (None: it has none)."""
    text, number = _SERIES.get(name[len(FINAL_METRICS) + 1:], (None, None))
    return (text and f"{alias}.{text}"), (number and f"{alias}.{number}")


UNFILLED = "SELECT id, doc FROM jobs WHERE id NOT IN (SELECT job_id FROM job_properties)"
"""The jobs stored before ``job_properties`` was (every job has properties: its name, its status)."""


def backfill(jobs: Iterable[tuple[int, str]]) -> list[tuple[Any, ...]]:
    """The rows of ``job_properties`` for jobs stored before it: (id, document as JSON) each."""
    return [(job_id, *row) for job_id, doc in jobs for row in properties(json.loads(doc))]


def write_properties(sql: Sql, job_id: int, now: Sequence[Property], before: Sequence[Property] = ()) -> None:
    """A job's properties as ``now`` lists them, where they were ``before`` (what changed is rewritten)."""
    old = {name: list(rows) for name, rows in groupby(sorted(before), key=lambda row: row[0])}
    new = {name: list(rows) for name, rows in groupby(sorted(now), key=lambda row: row[0])}
    changed = [name for name in old.keys() | new.keys() if old.get(name) != new.get(name)]
    for name in sorted(changed):
        if name in old:
            sql.rows("DELETE FROM job_properties WHERE job_id = ? AND name = ?", (job_id, name))
    sql.many(INSERT, [(job_id, *row) for name in sorted(changed) for row in new.get(name, ())])


COUNTED = 10_000


@dataclass(frozen=True)
class Dialect:
    """What a backend writes differently: its substring function, and what makes a probe of one
    job's rows use the index on job and name (SQLite's planner, without statistics, may take the
    index on name and value instead and read a range per job)."""

    find: str
    by_job: str = ""  # " INDEXED BY job_properties_of_job" for SQLite
    series_by_job: str = ""  # " INDEXED BY series_by_job"


def search_jobs(sql: Sql, search: Search, dialect: Dialect, offset: int, limit: int) -> tuple[list[int], int]:
    """The ids of the jobs that match, in the search's order, from ``offset`` (at most ``limit``),
    and how many match (exactly up to :data:`COUNTED`; COUNTED + 1 means more)."""
    matching, args, total = _matching(sql, search.expression, dialect)
    if total is None:
        total = sql.rows(f"SELECT count(*) FROM ({matching} LIMIT {COUNTED + 1}) c", args)[0][0]
    if total <= COUNTED and not _walk_is_cheaper(sql, total, offset + limit):
        join, join_args, order = _order(search.sort_by, search.descending, dialect)
        rows = sql.rows(f"SELECT j.id FROM jobs j{join} WHERE j.id IN ({matching}) ORDER BY {order} "
                        f"LIMIT {int(limit)} OFFSET {int(offset)}", [*join_args, *args])
        return [row[0] for row in rows], total
    return _walk(sql, search, dialect, offset, limit), total


def _walk_is_cheaper(sql: Sql, matches: int, wanted: int) -> bool:
    """Whether reading jobs in the sort's order until ``wanted`` match (one in every jobs/matches,
    where they are spread evenly) reads fewer rows than sorting every match: for a filter that
    keeps many jobs, not for one that keeps few (the jobs counted by the largest id: no scan)."""
    jobs = sql.rows("SELECT max(id) FROM jobs")[0][0] or 0
    return wanted * jobs < matches * matches


def _matching(sql: Sql, expression: Expression | None, dialect: Dialect) -> tuple[str, list[Any], int | None]:
    """A query of the ids of the jobs that match (each once): driven by the top-level filter that
    keeps the fewest jobs (counted up to COUNTED + 1 each, where there is a choice), the rest
    probed; by the jobs themselves when no filter can drive (an Or, or only negations). And how
    many match, when counting the drivers told."""
    if expression is None:
        return "SELECT j.id FROM jobs j", [], None
    drivers = []
    parts = expression.parts if expression.operator == "And" else ()
    for index, part in enumerate(parts):
        if isinstance(part, Condition) and part.operator not in ("NotEquals", "NotExists") and not \
                part.name.startswith(FINAL_METRICS):
            drivers.append((index, *_driver(part, dialect)))
    if not drivers:
        condition, args = _expression(expression, "j.id", dialect)
        return f"SELECT j.id FROM jobs j WHERE {condition}", args, None
    kept = None
    if len(drivers) > 1:
        counts = [sql.rows(f"SELECT count(*) FROM ({driver} LIMIT {COUNTED + 1}) d", args)[0][0]
                  for _, driver, args in drivers]
        kept = min(counts)
        drivers = [drivers[counts.index(kept)]]
    chosen, driver, args = drivers[0]
    rest = Expression("And", tuple(part for index, part in enumerate(parts) if index != chosen))
    if not rest.parts:
        return driver, args, kept
    condition, more = _expression(rest, "m.job_id", dialect)
    return f"SELECT m.job_id FROM ({driver}) m WHERE {condition}", [*args, *more], None


def _driver(condition: Condition, dialect: Dialect) -> tuple[str, list[Any]]:
    """The ids of the jobs a positive filter keeps, from the index on name and value: a property
    outside lists is one row per job; one in a list (element 0, 1, ...) may be several."""
    if condition.name.startswith(METRICS):
        predicate, args = _predicate(condition, None, "d.final_value", dialect.find)
        return (f"SELECT d.job_id FROM series d WHERE d.job_id IS NOT NULL AND d.name = ? AND ({predicate})",
                [condition.name[len(METRICS):], *args])
    predicate, args = _predicate(condition, "d.text", "d.num", dialect.find)
    return (f"SELECT d.job_id FROM job_properties d WHERE d.name = ? AND d.element < 0 AND ({predicate}) UNION ALL "
            f"SELECT DISTINCT d.job_id FROM job_properties d WHERE d.name = ? AND d.element >= 0 AND ({predicate})",
            [condition.name, *args, condition.name, *args])


def _walk(sql: Sql, search: Search, dialect: Dialect, offset: int, limit: int) -> list[int]:
    """A page read in the sort's order, phase by phase (jobs with a number, then with text, then
    without the property), each phase skipped by its count when the page starts beyond it."""
    way = " DESC" if search.descending else ""
    name = search.sort_by
    phases: list[tuple[str, str, list[Any], str]]  # (rows of a phase, their job's id, arguments, order)
    if name in _COLUMNS:
        phases = [("SELECT j.id FROM jobs j WHERE {c}", "j.id", [], f"{_COLUMNS[name]}{way}, j.id{way}")]
    elif name.startswith(METRICS):
        metric = name[len(METRICS):]
        phases = [("SELECT s.job_id FROM series s WHERE s.job_id IS NOT NULL AND s.name = ? AND s.final_value IS NOT "
                   "NULL AND {c}", "s.job_id", [metric], f"s.final_value{way}, s.job_id{way}"),
                  (f"SELECT j.id FROM jobs j WHERE NOT EXISTS (SELECT 1 FROM series p{dialect.series_by_job} WHERE "
                   "p.job_id = j.id AND p.name = ? AND p.final_value IS NOT NULL) AND {c}", "j.id", [metric],
                   f"j.id{way}")]
    else:
        first = "SELECT s.job_id FROM job_properties s WHERE s.name = ? AND s.element <= 0 AND "
        phases = [(first + "s.num IS NOT NULL AND {c}", "s.job_id", [name], f"s.num{way}, s.text{way}, s.job_id{way}"),
                  (first + "s.num IS NULL AND s.text IS NOT NULL AND {c}", "s.job_id", [name],
                   f"s.text{way}, s.job_id{way}"),
                  (f"SELECT j.id FROM jobs j WHERE NOT EXISTS (SELECT 1 FROM job_properties p{dialect.by_job} WHERE "
                   "p.job_id = j.id AND p.name = ? AND p.element <= 0) AND {c}", "j.id", [name], f"j.id{way}")]
    found: list[int] = []
    skip = offset
    for select, job, args, order in phases:
        condition, more = _expression(search.expression, job, dialect) if search.expression else ("TRUE", [])
        query, query_args = select.format(c=f"({condition})"), [*args, *more]
        rows = sql.rows(f"{query} ORDER BY {order} LIMIT {limit - len(found)} OFFSET {skip}", query_args)
        found += [row[0] for row in rows]
        if len(found) == limit:
            break
        skip = 0 if rows else skip - sql.rows(f"SELECT count(*) FROM ({query}) m", query_args)[0][0]
    return found


def _order(name: str, descending: bool, dialect: Dialect) -> tuple[str, list[Any], str]:
    """The join a sort by ``name`` needs, its arguments, and the ORDER BY: jobs without the
    property come last either way, numbers before text; the job's id breaks ties (the order
    :func:`_walk` reads in). The join reads each job's own rows (the index on job and name): left
    to itself, SQLite without statistics reads every job's rows of that name for each job."""
    way = " DESC" if descending else ""
    if name in _COLUMNS:
        return "", [], f"{_COLUMNS[name]}{way}, j.id{way}"
    if name.startswith(METRICS):
        return (f" LEFT JOIN series s{dialect.series_by_job} ON s.job_id = j.id AND s.name = ?", [name[len(METRICS):]],
                f"s.final_value IS NULL, s.final_value{way}, j.id{way}")
    # a property in a list sorts by its first element's value
    return (f" LEFT JOIN job_properties s{dialect.by_job} ON s.job_id = j.id AND s.name = ? AND s.element <= 0",
            [name], f"s.num IS NULL AND s.text IS NULL, s.num IS NULL, s.num{way}, s.text{way}, j.id{way}")


def _expression(expression: Expression, job: str, dialect: Dialect) -> tuple[str, list[Any]]:
    """An expression as a condition on the job whose id is ``job`` (SQL), each filter a probe."""
    pieces: list[str] = []
    args: list[Any] = []
    for part in expression.parts:
        if isinstance(part, Expression):
            piece, more = _expression(part, job, dialect)
        elif isinstance(part, Nested):
            piece, more = _nested(part, job, dialect)
        else:
            piece, more = _condition(part, job, dialect)
        pieces.append(f"({piece})")
        args += more
    return f" {expression.operator.upper()} ".join(pieces), args


def _positive(condition: Condition) -> tuple[bool, Condition]:
    """Whether a filter is a negation (NotEquals, NotExists), and the filter it negates."""
    positive = {"NotEquals": "Equals", "NotExists": "Exists"}.get(condition.operator)
    return (False, condition) if positive is None else (True, replace(condition, operator=positive))


def _condition(condition: Condition, job: str, dialect: Dialect) -> tuple[str, list[Any]]:
    """A filter as a probe of the job's rows (NotEquals and NotExists hold for a job without the
    property, as they do on SageMaker)."""
    negated, positive = _positive(condition)
    name = condition.name
    if name.startswith(METRICS):
        rows, args = f"series p{dialect.series_by_job} WHERE p.job_id = {job} AND p.name = ?", [name[len(METRICS):]]
        predicate, more = _predicate(positive, None, "p.final_value", dialect.find)
    elif name.startswith(FINAL_METRICS + "."):
        rows, args = f"series p{dialect.series_by_job} WHERE p.job_id = {job}", []
        predicate, more = _predicate(positive, *_series_columns(name, "p"), dialect.find)
    else:
        rows, args = f"job_properties p{dialect.by_job} WHERE p.job_id = {job} AND p.name = ?", [name]
        predicate, more = _predicate(positive, "p.text", "p.num", dialect.find)
    return f"{'NOT ' if negated else ''}EXISTS (SELECT 1 FROM {rows} AND ({predicate}))", [*args, *more]


def _predicate(condition: Condition, text: str | None, number: str | None, find: str) -> tuple[str, list[Any]]:
    """What a row's value satisfies under a filter's (positive) operator: ``text`` and ``number``
    are its columns (None: it has none of that kind)."""
    operator = condition.operator
    if operator == "Exists":
        return " OR ".join(f"{column} IS NOT NULL" for column in (text, number) if column) or "FALSE", []
    if operator == "Equals":
        tests: list[str] = []
        args: list[Any] = []
        if text is not None and kind(condition.name) == "text":
            tests.append(f"{text} = ?")
            args.append(condition.value)
        if number is not None and condition.number is not None:
            tests.append(f"{number} = ?")
            args.append(condition.number)
        return " OR ".join(tests) or "FALSE", args
    if operator in RANGES:
        if number is None:
            return "FALSE", []
        return f"{number} {RANGES[operator]} ?", [condition.number]
    if text is None:
        return "FALSE", []
    if operator == "Contains":
        return f"{find}(lower({text}), lower(?)) > 0", [condition.value]
    return f"{text} IN ({', '.join('?' * len(condition.values))})", list(condition.values)  # In


def _nested(nested: Nested, job: str, dialect: Dialect) -> tuple[str, list[Any]]:
    """One element of the list satisfies every filter: its rows share the job and the element (a
    FinalMetricDataList's element is a metric's series)."""
    tests, args = [], []
    if nested.name == FINAL_METRICS:
        for condition in nested.conditions:
            negated, positive = _positive(condition)
            predicate, more = _predicate(positive, *_series_columns(condition.name, "s"), dialect.find)
            tests.append(f"{'NOT ' if negated else ''}({predicate})")
            args += more
        return (f"EXISTS (SELECT 1 FROM series s{dialect.series_by_job} WHERE s.job_id = {job} AND "
                f"{' AND '.join(tests)})"), args
    for condition in nested.conditions:
        negated, positive = _positive(condition)
        predicate, more = _predicate(positive, "q.text", "q.num", dialect.find)
        tests.append(f"{'NOT ' if negated else ''}EXISTS (SELECT 1 FROM job_properties q{dialect.by_job} WHERE "
                     f"q.job_id = e.job_id AND q.name = ? AND q.element = e.element AND ({predicate}))")
        args += [condition.name, *more]
    return (f"EXISTS (SELECT 1 FROM job_properties e{dialect.by_job} WHERE e.job_id = {job} AND e.name >= ? AND "
            f"e.name < ? AND e.element >= 0 AND {' AND '.join(tests)})"), [nested.name + ".", prefix_end(nested.name + "."), *args]
