"""A job's state in the store as the runtime moves it on: statuses, with their guard."""

from __future__ import annotations

import time
from typing import Any

from ..jobs.status import may_enter, transition
from ..store import JobRow, Store


def set_status(store: Store, name: str, status: str, message: str | None = None, *,
               ended_at: float | None = None, **fields: Any) -> JobRow:
    """Enter ``status`` (and set ``fields`` of the document) unless the job's status forbids it:
    nothing follows an end, and a stop request is never undone by an InProgress status."""

    def mutate(job: JobRow) -> None:
        if not may_enter(job.doc, status):
            return
        now = time.time()
        transition(job.doc, status, now, message, ended_at=ended_at)
        job.doc.update(fields)  # type: ignore[typeddict-item]  # document fields given by name
        job.last_modified_time = now

    return store.update_job(name, mutate)
