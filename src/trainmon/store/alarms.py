"""Metric alarms and their history in SQL, for both backends (the ``alarms`` and ``alarm_history``
tables of the migrations).

An alarm row holds its configuration as JSON (PutMetricAlarm's members as given) beside the
columns the store filters on, and its state. Every write adds one to ``revision``; an evaluation
writes its outcome only if the revision is still the one it read, so a PutMetricAlarm or
SetAlarmState made while the alarm was being evaluated is never overwritten by a stale outcome.
Evaluations are handed out by ``next_ms``: :func:`claim_due` moves the due alarms' ``next_ms`` on
to their next slot in the same statement that returns them, so when several processes evaluate
(the server and every job's supervisor), each slot of an alarm is evaluated once.

History rows do not reference their alarm: CloudWatch keeps an alarm's history after the alarm is
deleted, for its retention time.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from typing import Any

from .rows import AlarmHistoryRow, AlarmRow
from .sql import Sql, Where

ALARM_COLUMNS = ("name, config, state, reason, reason_data, state_updated_ms, transitioned_ms, evaluation_state, "
                 "configured_ms, every_ms, next_ms, revision")
HISTORY_COLUMNS = "alarm_name, timestamp_ms, item_type, summary, data, id"


def alarm_from_row(row: Sequence[Any]) -> AlarmRow:
    name, config, *rest = row
    return AlarmRow(name, json.loads(config), *rest)


def read(sql: Sql, *, names: Sequence[str] | None = None, prefix: str | None = None, state: str | None = None,
         after: str | None = None, limit: int | None = None, namespace: str | None = None,
         metric_name: str | None = None, lock: str = "") -> list[AlarmRow]:
    """Alarms by name, those matching every filter given."""
    where = (Where().any_of("name", list(names) if names is not None else None).add("state = ?", state)
             .add("name > ?", after).add("namespace = ?", namespace).add("metric_name = ?", metric_name))
    if prefix:
        where.add("substr(name, 1, ?) = ?", len(prefix), prefix)
    if names is not None and not names:
        return []
    text = f"SELECT {ALARM_COLUMNS} FROM alarms WHERE {where.sql} ORDER BY name"
    if limit is not None:
        text += f" LIMIT {int(limit)}"
    return [alarm_from_row(row) for row in sql.rows(text + lock, where.args)]


def write(sql: Sql, alarm: AlarmRow) -> None:
    """Insert or replace ``alarm``; its revision becomes the stored one plus one."""
    metric = alarm.config.get("MetricName")
    rows = sql.rows(
        f"INSERT INTO alarms ({ALARM_COLUMNS}, namespace, metric_name) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (name) DO UPDATE SET config = excluded.config, state = excluded.state, "
        "reason = excluded.reason, reason_data = excluded.reason_data, state_updated_ms = excluded.state_updated_ms, "
        "transitioned_ms = excluded.transitioned_ms, evaluation_state = excluded.evaluation_state, "
        "configured_ms = excluded.configured_ms, every_ms = excluded.every_ms, next_ms = excluded.next_ms, "
        "namespace = excluded.namespace, metric_name = excluded.metric_name, revision = alarms.revision + 1 "
        "RETURNING revision",
        (alarm.name, json.dumps(alarm.config), alarm.state, alarm.reason, alarm.reason_data, alarm.state_updated_ms,
         alarm.transitioned_ms, alarm.evaluation_state, alarm.configured_ms, alarm.every_ms, alarm.next_ms,
         secrets.randbits(52),  # a new alarm's first revision: never one a deleted alarm of its name had
         alarm.config.get("Namespace") if metric else None, metric),
    )
    alarm.revision = rows[0][0]


def write_state(sql: Sql, alarm: AlarmRow) -> bool:
    """An evaluation's outcome (the state columns) if the alarm is still at ``alarm.revision``."""
    rows = sql.rows(
        "UPDATE alarms SET state = ?, reason = ?, reason_data = ?, state_updated_ms = ?, transitioned_ms = ?, "
        "evaluation_state = ?, revision = revision + 1 WHERE name = ? AND revision = ? RETURNING revision",
        (alarm.state, alarm.reason, alarm.reason_data, alarm.state_updated_ms, alarm.transitioned_ms,
         alarm.evaluation_state, alarm.name, alarm.revision),
    )
    if rows:
        alarm.revision = rows[0][0]
    return bool(rows)


def delete(sql: Sql, names: Sequence[str]) -> None:
    sql.many("DELETE FROM alarms WHERE name = ?", [(name,) for name in names])


def add_history(sql: Sql, items: Sequence[AlarmHistoryRow]) -> None:
    sql.many("INSERT INTO alarm_history (alarm_name, timestamp_ms, item_type, summary, data) VALUES (?, ?, ?, ?, ?)",
             [(item.alarm_name, item.timestamp_ms, item.item_type, item.summary, item.data) for item in items])


def any_due(sql: Sql, now_ms: int) -> bool:
    return bool(sql.rows("SELECT 1 FROM alarms WHERE next_ms <= ? LIMIT 1", (now_ms,)))


def claim_due(sql: Sql, now_ms: int, skip_locked: str) -> list[AlarmRow]:
    """The alarms due at ``now_ms``, their next evaluation moved to their next slot (the next
    multiple of ``every_ms``) in the same statement; ``skip_locked`` leaves rows another claimer
    holds to it (PostgreSQL), so claimers neither wait for nor deadlock with each other."""
    rows = sql.rows(
        "UPDATE alarms SET next_ms = (? / every_ms + 1) * every_ms WHERE name IN "
        f"(SELECT name FROM alarms WHERE next_ms <= ?{skip_locked}) RETURNING {ALARM_COLUMNS}",
        (now_ms, now_ms),
    )
    return sorted((alarm_from_row(row) for row in rows), key=lambda alarm: alarm.name)


def history(sql: Sql, *, name: str | None, item_type: str | None, start_ms: int | None, end_ms: int | None,
            ascending: bool, after: tuple[int, int] | None, limit: int) -> list[AlarmHistoryRow]:
    """History items by time (then by id), newest first unless ``ascending``; ``after``: the
    (timestamp, id) of the last item of the page before."""
    where = (Where().add("alarm_name = ?", name).add("item_type = ?", item_type).add("timestamp_ms >= ?", start_ms)
             .add("timestamp_ms <= ?", end_ms))
    comparison, order = (">", "ASC") if ascending else ("<", "DESC")
    if after is not None:
        where.add(f"(timestamp_ms {comparison} ? OR (timestamp_ms = ? AND id {comparison} ?))", after[0], after[0],
                  after[1])
    rows = sql.rows(f"SELECT {HISTORY_COLUMNS} FROM alarm_history WHERE {where.sql} "
                    f"ORDER BY timestamp_ms {order}, id {order} LIMIT {int(limit)}", where.args)
    return [AlarmHistoryRow(*row) for row in rows]


def expire_history(sql: Sql, before_ms: int) -> int:
    rows = sql.rows("DELETE FROM alarm_history WHERE timestamp_ms < ? RETURNING id", (before_ms,))
    return len(rows)
