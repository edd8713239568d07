"""The store: jobs, log streams and metric points behind one interface.

:class:`Store` (``store/base.py``) is the contract. ``open_store()`` returns the PostgreSQL store
when a ``postgresql://`` URL is given (``database_url``, else ``TRAINMON_DATABASE_URL``), and
otherwise the embedded SQLite store, ``trainmon.db`` in the data directory. The records that
cross this boundary are plain values (:mod:`trainmon.store.rows`), and both backends pass
the same tests (``tests/test_store.py``). The PostgreSQL driver is an optional extra
(``trainmon[postgres]``), imported only when a URL asks for it.
"""

from __future__ import annotations

from pathlib import Path

from .. import config
from ..clock import REAL_CLOCK, Clock
from ..cloudwatch.retention import Retention
from ..errors import StoreError
from .contract import Store
from .rows import (
    AlarmHistoryRow,
    AlarmRow,
    Batch,
    EventRow,
    JobPoints,
    JobRow,
    Maintenance,
    PointBlock,
    PointColumns,
    PointRow,
    StreamRow,
)
from .series.buffer import WriteBehind
from .sqlite import SqliteStore
from .tuning import TuningRow

__all__ = ["AlarmHistoryRow", "AlarmRow", "Batch", "EventRow", "JobPoints", "JobRow", "Maintenance", "PointBlock", "PointColumns", "PointRow", "StreamRow", "SqliteStore", "Store", "TuningRow", "WriteBehind", "open_store"]

POSTGRES_SCHEMES = ("postgresql", "postgres")


def open_store(home: Path | None = None, *, database_url: str | None = None, retention: Retention | None = None,
               clock: Clock = REAL_CLOCK, write_behind: WriteBehind | None = None) -> Store:
    """The store for the data directory ``home`` (default: TRAINMON_HOME): PostgreSQL when
    ``database_url`` (default: TRAINMON_DATABASE_URL) is a postgresql:// URL, else SQLite in
    ``home``. An empty ``database_url`` means SQLite whatever the environment says. Metric data
    is kept as ``retention`` says (default: TRAINMON_RETENTION, else CloudWatch's tiers).
    PutMetricData's datapoints are written behind the calls as ``write_behind`` says
    (:mod:`trainmon.store.series.buffer`), on ``clock``'s time."""
    directory = home or config.home()
    config.make_private_dir(directory)
    url = (database_url if database_url is not None else config.database_url() or "").strip()
    if not url:
        return SqliteStore(config.database_path(directory), home=directory, retention=retention, clock=clock,
                           write_behind=write_behind)
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in POSTGRES_SCHEMES:
        shown = f"a {scheme}:// URL" if scheme else "not a URL"
        raise StoreError(
            f"the database URL ({config.DATABASE_URL_VARIABLE}) is {shown}: trainmon stores in PostgreSQL "
            "(postgresql://USER:PASSWORD@HOST:PORT/DATABASE), or, when it is unset, in SQLite in the data directory"
        )
    try:
        from .postgres import PostgresStore
    except ImportError as exc:
        raise StoreError(
            f"a PostgreSQL store needs the psycopg driver, which is not installed ({exc}): "
            "pip install 'trainmon[postgres]'"
        ) from exc
    return PostgresStore(url, directory, retention, clock=clock, write_behind=write_behind)
