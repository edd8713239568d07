"""Which roll-up tiers a store holds: the store's record, not the policy of the process at hand.

A retention policy is a process's (``TRAINMON_RETENTION``), but the roll-ups it shapes are the
store's, written by every process that writes and read by every one that reads. So the store
records the periods its roll-ups are complete for, in ``maintenance.periods``: writers merge into
those and readers read those, whatever their own policy says. A store that has no record yet
(made before there was one) takes the policy of its first writer.

Only ``trainmon maintain`` changes the record, to its own policy's periods (``upkeep._retier``),
never a background pass: processes sharing a store may run with other policies (a job started
in a shell without the variable), and each would undo the other's tiers, each time with only what
the finer tier still keeps. It:

1. names them as the target (``maintenance.building``), and from then on writers merge into
   the recorded periods and the target's alike, and so do maintenance's roll-up passes, so every
   recorded period stays complete;
2. waits for the writers that read the record before (PostgreSQL: one may be making a series
   that the pass's list of series would miss), then, series by series, a slice of time a
   transaction under the series' lock, builds each period the target adds from the coarsest
   recorded period that divides it (or from the datapoints, where none does) and drops the rows of
   the others;
3. waits for the writers again, records the target, which readers use from then on, and drops
   what writers left in the periods it leaves out meanwhile.

A new tier holds what its source kept: a 10-minute tier built from a 1-minute tier kept 15 days
starts 15 days back. A pass cut short leaves the target named; the next one builds it again (or
another target) from the start (building a period replaces its rows, so doing it twice changes
nothing).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from ..sql import Sql

Periods = tuple[int, ...]


def parsed(value: str | None) -> Periods | None:
    return None if value is None else tuple(int(part) for part in value.split(",") if part)


def text(periods: Sequence[int]) -> str:
    return ",".join(str(period) for period in periods)


def recorded(sql: Sql) -> tuple[Periods | None, Periods | None]:
    """The periods the store's roll-ups are complete for (None: no record yet) and the target a
    maintenance pass is building (None: none)."""
    periods, building = sql.rows("SELECT periods, building FROM maintenance WHERE id = 1")[0]
    return parsed(periods), parsed(building)


def settled(sql: Sql, own: Sequence[int]) -> tuple[Periods, Periods | None]:
    """:func:`recorded`, a store without a record recording ``own`` (the caller's policy's) first:
    its roll-ups are taken to be that policy's."""
    periods, building = recorded(sql)
    if periods is None:
        sql.rows("UPDATE maintenance SET periods = ? WHERE id = 1 AND periods IS NULL", (text(own),))
        periods, building = recorded(sql)  # (another writer's, if it recorded first)
    assert periods is not None
    return periods, building


def readable(sql: Sql, own: Sequence[int]) -> Periods:
    """The periods a read takes roll-ups from (``own``, the reader's policy's, where the store has
    no record yet)."""
    periods, _ = recorded(sql)
    return tuple(own) if periods is None else periods


def written(sql: Sql, own: Sequence[int]) -> Periods:
    """The periods a write (or a roll-up pass) merges its datapoints into, finest first: the
    recorded ones and those a maintenance pass is building."""
    return merged(*settled(sql, own))


def merged(periods: Sequence[int], building: Sequence[int] | None) -> Periods:
    """The recorded periods with those a pass is building, finest first: what writes merge into."""
    return tuple(sorted(set(periods) | set(building or ())))


def coarsest_divisor(period: int, candidates: Iterable[int]) -> int | None:
    """The coarsest of ``candidates`` that divides ``period`` (what a tier is rolled up from:
    sketches merge exactly), None if none does."""
    return max((finer for finer in candidates if period % finer == 0), default=None)


def chain(periods: Sequence[int]) -> tuple[int, list[tuple[int, int]]]:
    """How every tier of ``periods`` is rolled up: a base period (their greatest common divisor,
    from the datapoints) and, finest first, each period with the one it is rolled up from: the
    coarsest one before it that divides it. (A policy's tiers divide each other; while a pass
    changes the store's, the tiers written are two policies' together, which may not.)"""
    base = math.gcd(*periods)
    steps: list[tuple[int, int]] = []
    for period in sorted(periods):
        if period != base:
            source = coarsest_divisor(period, [base, *(done for done, _ in steps)])
            assert source is not None  # (the base divides every period)
            steps.append((period, source))
    return base, steps
