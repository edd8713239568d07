"""How long metric data is kept: CloudWatch's tiers by default, or what the team chooses.

A policy names how long datapoints are kept as they were written (``raw``) and which roll-up
tiers exist and how long each is kept. CloudWatch's (the default, ``cloudwatch``)::

    raw=3h,60s=15d,300s=63d,3600s=455d

Every tier's period is a multiple of 60 s and of the finer tier's, because each tier is rolled up
from the finer one. ``forever`` keeps the same tiers and expires nothing; any tier may say
``forever`` too (``raw=forever,60s=15d,...``). Set it with ``TRAINMON_RETENTION``.

What a job's log prints is not expired: its metric points are kept as long as the job (they are
the job's record, like its log, which is kept until the job is deleted); their roll-ups follow
the policy like every other metric's. Profiles are kept indefinitely, outside these tiers.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..errors import ValidationException

VARIABLE = "TRAINMON_RETENTION"
CLOUDWATCH = "raw=3h,60s=15d,300s=63d,3600s=455d"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_ENTRY = re.compile(r"\s*(raw|\d+[smhd])\s*=\s*(forever|\d+[smhd])\s*")


@dataclass(frozen=True)
class Retention:
    raw_s: int | None  # None: kept forever
    tiers: tuple[tuple[int, int | None], ...]  # (period_s, kept_s or None), finest first

    @property
    def periods(self) -> tuple[int, ...]:
        return tuple(period for period, _ in self.tiers)

    def describe(self) -> str:
        def shown(seconds: int | None) -> str:
            return "forever" if seconds is None else _duration(seconds)
        return ",".join([f"raw={shown(self.raw_s)}", *(f"{_duration(p)}={shown(k)}" for p, k in self.tiers)])


def parse(text: str) -> Retention:
    """A policy from its text: ``cloudwatch``, ``forever`` or ``raw=3h,60s=15d,...``."""
    spec = text.strip().lower()
    if spec in ("", "cloudwatch"):
        spec = CLOUDWATCH
    elif spec == "forever":
        spec = ",".join(entry.split("=")[0] + "=forever" for entry in CLOUDWATCH.split(","))
    raw: int | None = None
    raw_given = False
    tiers: list[tuple[int, int | None]] = []
    for entry in spec.split(","):
        match = _ENTRY.fullmatch(entry)
        if not match:
            raise ValidationException(
                f"{VARIABLE}: {entry.strip()!r} is not PERIOD=DURATION; write e.g. {CLOUDWATCH}, "
                "'cloudwatch' or 'forever' (durations in s, m, h or d, or 'forever')"
            )
        name, kept = match.groups()
        seconds = None if kept == "forever" else _seconds(kept)
        if name == "raw":
            raw, raw_given = seconds, True
        else:
            tiers.append((_seconds(name), seconds))
    if not raw_given:
        raise ValidationException(f"{VARIABLE}: say how long raw datapoints are kept (raw=3h, or raw=forever)")
    tiers.sort()
    for (period, kept), finer in zip(tiers, [None, *(period for period, _ in tiers)], strict=False):
        fault = _tier_fault(period, kept, finer)
        if fault:
            raise ValidationException(f"{VARIABLE}: a tier of {_duration(period)} {fault}")
    return Retention(raw, tuple(tiers))


def _tier_fault(period: int, kept: int | None, finer: int | None) -> str | None:
    """What is wrong with a tier (its period and how long it is kept, the next finer tier's period),
    and the rule it breaks; None when nothing is."""
    periods_rule = "each tier's period is a multiple of 60 s and of the finer tier's"
    if period % 60:
        return f"is not a whole number of minutes; {periods_rule}"
    if finer is not None and (period % finer or period == finer):
        return f"cannot be rolled up from the {_duration(finer)} tier; {periods_rule}"
    if kept is not None and kept <= period:  # (a period's row is made once it has ended: as old as that)
        return f"kept for {_duration(kept)} would lose each row as it is made; keep a tier longer than its period"
    return None


def current() -> Retention:
    return parse(os.environ.get(VARIABLE, ""))


def _seconds(text: str) -> int:
    return int(text[:-1]) * _UNITS[text[-1]]


def periods_text(periods: tuple[int, ...]) -> str:
    """Tier periods as a person reads them: ``1m, 5m, 1h`` (``none`` for none)."""
    return ", ".join(_duration(period) for period in periods) or "none"


def _duration(seconds: int) -> str:
    for unit in ("d", "h", "m"):
        if seconds % _UNITS[unit] == 0:
            return f"{seconds // _UNITS[unit]}{unit}"
    return f"{seconds}s"
