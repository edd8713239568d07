"""The store: jobs, log streams and metric points behind one interface.

``open_store()`` returns the embedded SQLite store in the data directory. The records that
cross this boundary are plain values (:mod:`trainmon.store.records`), so a second backend
implements the same methods against the same tests.
"""

from __future__ import annotations

from pathlib import Path

from .. import config
from .records import Batch, EventRow, JobRow, PointRow, StreamRow
from .sqlite import SqliteStore

__all__ = ["Batch", "EventRow", "JobRow", "PointRow", "StreamRow", "SqliteStore", "open_store"]


def open_store(root: Path | None = None) -> SqliteStore:
    directory = root or config.home()
    directory.mkdir(parents=True, exist_ok=True)
    return SqliteStore(config.database_path(directory))
