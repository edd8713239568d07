"""A job's state in the store as the runtime moves it on: statuses, with their guard, written
through outages of the store.

:func:`set_status` is one status change, now. :class:`JobState` is the supervisor's side of its
job: the statuses it enters are queued with the time they happened and written in order as soon
as the store takes them, so that an outage of any length delays the record but never changes
it, and never ends the job. Reading the job (a stop request) during an outage gives no news
rather than an error. A supervisor that cannot wait any longer (the job has ended, the store
stays gone) leaves the statuses it could not write in a file (:meth:`JobState.leave`), and
whoever reaps the job writes them (:func:`replay`): the job's real end, not a guess.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ... import config
from ...errors import StoreError, StoreFull
from ...jobs.document import UnstoredOutput
from ...jobs.status import may_enter, transition
from ...store import JobRow, Store
from ..retry import FULL_DISK_TRIES, Backoff, Patience


def set_status(store: Store, name: str, status: str, message: str | None = None, *,
               at: float | None = None, ended_at: float | None = None, stop_requested: str | None = None,
               **fields: Any) -> JobRow:
    """Enter ``status`` (at ``at``, default now; and set ``fields`` of the document) unless the job's
    status forbids it: nothing follows an end, and a stop request is never undone by an InProgress
    status. ``stop_requested`` records why the job is stopping."""

    def mutate(job: JobRow) -> None:
        if stop_requested is not None:
            job.stop_requested = stop_requested
        if not may_enter(job.doc, status):
            return
        moment = at if at is not None else time.time()
        transition(job.doc, status, moment, message, ended_at=ended_at)
        job.doc.update(fields)  # type: ignore[typeddict-item]  # document fields given by name
        job.last_modified_time = moment

    return store.update_job(name, mutate)


@dataclass
class _Change:
    status: str
    message: str | None
    at: float
    stop_requested: str | None
    ended_at: float | None
    fields: dict[str, Any] = field(default_factory=dict)


class JobState:
    """The statuses one supervisor writes, kept in order until the store has them."""

    def __init__(self, store: Store, name: str, on_error: Callable[[str], None] | None = None) -> None:
        self.store = store
        self.name = name
        self.on_error = on_error or (lambda message: print(f"trainmon: {message}", file=sys.stderr))
        self._queue: list[_Change] = []
        self._failing: StoreError | None = None
        self._retry_at = 0.0
        self._backoff = Backoff()
        self.row: JobRow | None = None  # the job as last written
        self.interrupted = False  # set by the supervisor on Ctrl-C or SIGTERM: a stop request of its own

    def enter(self, status: str, message: str | None = None, *, stop_requested: str | None = None,
              ended_at: float | None = None, write: bool = True, **fields: Any) -> None:
        """Enter a status now; written at once (unless not ``write``), or as soon as the store takes it."""
        self._queue.append(_Change(status, message, time.time(), stop_requested, ended_at, fields))
        if write:
            self.flush()

    def flush(self) -> bool:
        """Write what is queued (unless the last try was too recent); whether everything is written."""
        if not self._queue or time.monotonic() < self._retry_at:
            return not self._queue
        while self._queue:
            change = self._queue[0]
            try:
                self.row = set_status(self.store, self.name, change.status, change.message, at=change.at,
                                      ended_at=change.ended_at, stop_requested=change.stop_requested,
                                      **change.fields)
            except StoreError as exc:
                self._failed(exc)
                return False
            self._queue.pop(0)
        if self._failing is not None:
            self.on_error("the store is back: the job's statuses are written.")
        self._failing = None
        self._backoff.reset()
        return True

    def finish(self, status: str, message: str | None = None, *, ended_at: float | None = None,
               patience: Patience | None = None, **fields: Any) -> JobRow | None:
        """Enter the final status (with ``message``, else its usual one) and wait until it is written:
        through an outage as long as ``patience`` lasts (any length without it), but not past
        ``FULL_DISK_TRIES`` tries on a disk that stays full. None when it was not written (it stays
        queued, for :meth:`leave`)."""
        self.enter(status, message, ended_at=ended_at, **fields)
        tries = 0
        while not self.flush():
            if patience is not None and patience.lost(self._failing):
                return None
            if isinstance(self._failing, StoreFull):
                tries += 1
                if tries >= FULL_DISK_TRIES:
                    self.on_error(f"{self._failing.message}. The job ended {status}, but that could not be stored.")
                    return None
            retry_at = self._retry_at
            while time.monotonic() < retry_at and not (patience is not None and patience.lost(self._failing)):
                time.sleep(min(0.25, retry_at - time.monotonic()))
        return self.row

    def leave(self, path: Path) -> None:
        """The statuses not written yet, kept in ``path`` for whoever reaps the job (:func:`replay`)."""
        config.write_private(path, json.dumps([asdict(change) for change in self._queue]))
        self._queue.clear()

    def stop_requested(self) -> str | None:
        """Why the job was asked to stop, if it was (Ctrl-C or SIGTERM to its supervisor counts); None
        too while the store cannot be read."""
        if self.interrupted:
            return "Stopped"
        try:
            row = self.store.get_job(self.name)
        except StoreError as exc:
            self._failed(exc)
            return None
        return row.stop_requested if row is not None else None

    def _failed(self, exc: StoreError) -> None:
        if self._failing is None:
            self.on_error(f"{exc.message}. The job goes on; its statuses and output are kept and written when "
                          "the store is back.")
        self._failing = exc
        self._retry_at = time.monotonic() + self._backoff.next_delay()


def replay(store: Store, name: str, path: Path, unstored: UnstoredOutput | None = None) -> JobRow | None:
    """The statuses a supervisor left (:meth:`JobState.leave`) written in order, at the times they
    happened, with ``unstored`` (what whoever reaps the job could not store) added to the last's;
    None when it left none (no file, or an unreadable one)."""
    try:
        changes = [_Change(**change) for change in json.loads(path.read_text(encoding="utf-8"))]
    except (OSError, ValueError, TypeError):
        return None
    if not changes:
        return None
    if unstored is not None:
        last = changes[-1].fields
        before = last.get("UnstoredOutput") or {"Records": 0, "Points": 0, "Bytes": 0, "Reason": unstored["Reason"]}
        last["UnstoredOutput"] = {key: before[key] + unstored[key] for key in ("Records", "Points", "Bytes")} | {
            "Reason": before["Reason"]}
    row = None
    for change in changes:
        row = set_status(store, name, change.status, change.message, at=change.at, ended_at=change.ended_at,
                         stop_requested=change.stop_requested, **change.fields)
    return row
