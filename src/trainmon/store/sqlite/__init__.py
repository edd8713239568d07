"""The embedded store: one SQLite file in WAL mode.

Writers take the write lock with ``BEGIN IMMEDIATE`` and hold it for one short batch, readers
never wait for writers (WAL), and a 30 s busy timeout absorbs the rest, so several jobs and
readers share the file without "database is locked". ``synchronous=NORMAL`` keeps every
committed batch through a crash of trainmon; each ingestion batch covers well under a second.

Log records are stored in chunks: the records one read of the job's pipe completed share a
timestamp and go in one row, joined by "\n" (no record contains one), as the bytes read,
zstd-compressed from half a kilobyte on. A job that prints a line at a time gets a row per line;
a flood gets a row per megabyte, about a fifth of it on disk, so storing it costs less than
writing it did, and paging stays an index lookup. A flood's packed texts are kept beside the
file, in ``trainmon.db-logs/`` (:mod:`.beside`), so that they are written once, not into the log
and again at its checkpoint.

Commits do not wait for the disk: once the write-ahead log passes CHECKPOINT_BYTES, a thread (one
per file in a process) copies it into the database file (a PASSIVE checkpoint, with the syncs it takes) on a
connection of its own, while writers go on. A writer copies it itself only past
SELF_CHECKPOINT_PAGES, when that thread falls behind.

Nothing is left behind: a process that wrote empties the log when it is done with the file
(:func:`empty_log`: the last of its stores on the file closed, or the interpreter's exit), and so
does a maintenance pass, so that the data directory's size after a command is what it keeps
(SQLite does so itself only when the last connection to the file closes). A PASSIVE checkpoint
copies what it can without waiting for anyone; the log is then emptied (TRUNCATE) only if nothing
was left to copy, with SQLite's busy handler off, so that the writer lock it takes is held for the
truncation alone and a reader or writer of another process makes it give up at once (tried again
for up to SETTLE_S while others read): it never blocks a job's capture, and a log it could not
empty is the next writer's, whose commits start it again.

NaN cannot be stored in SQLite (it becomes NULL), so a NULL value in ``points`` means NaN.
"""

from __future__ import annotations

import atexit
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from ...clock import REAL_CLOCK, Clock
from ...cloudwatch.retention import Retention
from ...cloudwatch.retention import current as current_retention
from ...config import private_file
from ...errors import StoreError
from .. import search, tuning
from ..base import PackedChunk, SqlStore
from ..codec import TEXT_BESIDE, unpack_text
from ..rows import Maintenance, StreamRow
from ..series.buffer import WriteBehind, drain_all
from ..sql import Problem, Sql, store_error
from .beside import LogFiles

_MIGRATIONS: list[str | Callable[[sqlite3.Connection], None]] = [
    """
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        status TEXT NOT NULL,
        creation_time REAL NOT NULL,
        last_modified_time REAL NOT NULL,
        doc TEXT NOT NULL,
        supervisor TEXT,
        stop_requested TEXT,
        diagnostics TEXT NOT NULL DEFAULT '[]'
    );
    CREATE INDEX jobs_by_status ON jobs (status, creation_time);
    CREATE TABLE log_streams (
        id INTEGER PRIMARY KEY,
        job_id INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
        host TEXT NOT NULL,
        name TEXT NOT NULL UNIQUE,
        creation_ms INTEGER NOT NULL,
        first_event_ms INTEGER,
        last_event_ms INTEGER,
        last_ingestion_ms INTEGER,
        records INTEGER NOT NULL DEFAULT 0,
        stored_bytes INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX log_streams_by_job ON log_streams (job_id);
    CREATE TABLE log_chunks (
        stream_id INTEGER NOT NULL REFERENCES log_streams (id) ON DELETE CASCADE,
        first_seq INTEGER NOT NULL,
        count INTEGER NOT NULL,
        timestamp_ms INTEGER NOT NULL,
        text TEXT NOT NULL,
        PRIMARY KEY (stream_id, first_seq)
    ) WITHOUT ROWID;
    CREATE INDEX log_chunks_by_time ON log_chunks (stream_id, timestamp_ms);
    CREATE TABLE points (
        job_id INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        timestamp_ms INTEGER NOT NULL,
        value REAL,
        host TEXT NOT NULL,
        stream_id INTEGER NOT NULL,
        seq INTEGER NOT NULL
    );
    CREATE INDEX points_by_metric ON points (job_id, name, timestamp_ms);
    """,
    """
    CREATE TABLE metrics (
        id INTEGER PRIMARY KEY,
        namespace TEXT NOT NULL,
        name TEXT NOT NULL,
        dimensions TEXT NOT NULL,
        last_ms INTEGER NOT NULL,
        UNIQUE (namespace, name, dimensions)
    );
    CREATE TABLE datapoints (
        metric_id INTEGER NOT NULL REFERENCES metrics (id) ON DELETE CASCADE,
        timestamp_ms INTEGER NOT NULL,
        resolution INTEGER NOT NULL,
        count REAL NOT NULL,
        sum REAL NOT NULL,
        minimum REAL NOT NULL,
        maximum REAL NOT NULL,
        value REAL,
        unit TEXT NOT NULL
    );
    CREATE INDEX datapoints_by_metric ON datapoints (metric_id, timestamp_ms);
    CREATE TABLE job_metrics (
        job_id INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        last_ms INTEGER NOT NULL,
        PRIMARY KEY (job_id, name)
    ) WITHOUT ROWID;
    INSERT INTO job_metrics SELECT job_id, name, max(timestamp_ms) FROM points GROUP BY job_id, name;
    """,
    """
    CREATE TABLE series (
        id INTEGER PRIMARY KEY,
        namespace TEXT NOT NULL,
        name TEXT NOT NULL,
        dimensions TEXT NOT NULL,
        digest BLOB NOT NULL UNIQUE,
        job_id INTEGER REFERENCES jobs (id) ON DELETE CASCADE,
        last_ms INTEGER NOT NULL,
        points INTEGER NOT NULL DEFAULT 0,
        minimum REAL,
        maximum REAL,
        final_value REAL,
        final_ms INTEGER,
        rolled_ms INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX series_by_job ON series (job_id, name);
    CREATE INDEX series_by_name ON series (namespace, name);
    CREATE TABLE chunks (
        id INTEGER PRIMARY KEY,
        series_id INTEGER NOT NULL REFERENCES series (id) ON DELETE CASCADE,
        kind INTEGER NOT NULL,
        host TEXT NOT NULL,
        stream_id INTEGER NOT NULL,
        unit TEXT NOT NULL,
        resolution INTEGER NOT NULL,
        first_ms INTEGER NOT NULL,
        last_ms INTEGER NOT NULL,
        count INTEGER NOT NULL,
        sealed INTEGER NOT NULL,
        data BLOB NOT NULL,
        overview BLOB  -- of a sealed chunk of a job's points: what a chart of many reads (store.series.overview)
    );
    CREATE INDEX chunks_by_series ON chunks (series_id, last_ms);
    CREATE TABLE rollups (
        series_id INTEGER NOT NULL REFERENCES series (id) ON DELETE CASCADE,
        period INTEGER NOT NULL,
        timestamp_ms INTEGER NOT NULL,
        unit TEXT NOT NULL,
        count REAL NOT NULL,
        sum REAL NOT NULL,
        minimum REAL NOT NULL,
        maximum REAL NOT NULL,
        sketch BLOB,
        PRIMARY KEY (series_id, period, timestamp_ms, unit)
    ) WITHOUT ROWID;
    CREATE TABLE maintenance (id INTEGER PRIMARY KEY, holder TEXT, until_ms INTEGER NOT NULL);
    INSERT INTO maintenance VALUES (1, NULL, 0);
    """,
]
_MIGRATIONS.append(lambda db: _move_points_to_series(db))
_MIGRATIONS.append("""
    CREATE TABLE spool_progress (
        stream_id INTEGER NOT NULL REFERENCES log_streams (id) ON DELETE CASCADE,
        pipe TEXT NOT NULL,
        consumed BIGINT NOT NULL,
        after_cr SMALLINT NOT NULL,
        PRIMARY KEY (stream_id, pipe)
    )
    """)
_MIGRATIONS.append("""
    CREATE TABLE alarms (
        name TEXT PRIMARY KEY,
        config TEXT NOT NULL,
        namespace TEXT,
        metric_name TEXT,
        state TEXT NOT NULL,
        reason TEXT NOT NULL,
        reason_data TEXT,
        state_updated_ms INTEGER NOT NULL,
        transitioned_ms INTEGER NOT NULL,
        evaluation_state TEXT,
        configured_ms INTEGER NOT NULL,
        every_ms INTEGER NOT NULL,
        next_ms INTEGER NOT NULL,
        revision INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX alarms_by_due ON alarms (next_ms);
    CREATE INDEX alarms_by_metric ON alarms (namespace, metric_name);
    CREATE TABLE alarm_history (
        id INTEGER PRIMARY KEY,
        alarm_name TEXT NOT NULL,
        timestamp_ms INTEGER NOT NULL,
        item_type TEXT NOT NULL,
        summary TEXT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX alarm_history_by_alarm ON alarm_history (alarm_name, timestamp_ms);
    CREATE INDEX alarm_history_by_time ON alarm_history (timestamp_ms)
    """)
_MIGRATIONS.append(lambda db: _add_overviews(db))
# A log chunk's text is stored as the bytes read, zstd-compressed when that pays (store.codec.pack_text);
# older rows keep their text (packing 0).
_MIGRATIONS.append("ALTER TABLE log_chunks ADD COLUMN packing INTEGER NOT NULL DEFAULT 0")
# ListMetrics pages by (namespace, name, id): a page's cost is the same whatever the total.
_MIGRATIONS.append("CREATE INDEX IF NOT EXISTS series_in_order ON series (namespace, name, id)")
# ListTrainingJobs and DescribeLogStreams page by keyset too: an index on each order's columns (a
# job's id breaks ties; stream names are unique), so a page costs the same whatever comes before it.
# The one on (status, creation_time, id) serves what jobs_by_status did.
_MIGRATIONS.append("""
    CREATE INDEX IF NOT EXISTS jobs_by_name_in_order ON jobs (name, id);
    CREATE INDEX IF NOT EXISTS jobs_by_time_in_order ON jobs (creation_time, id);
    CREATE INDEX IF NOT EXISTS jobs_by_status_in_order ON jobs (status, id);
    CREATE INDEX IF NOT EXISTS jobs_by_status_time_in_order ON jobs (status, creation_time, id);
    DROP INDEX IF EXISTS jobs_by_status;
    CREATE INDEX IF NOT EXISTS log_streams_by_last_event ON log_streams ((coalesce(last_event_ms, 0)), name)
    """)

# Search: each job's properties as rows (store/search.py), those of the jobs already stored too.
_MIGRATIONS.append(search.TABLE.format(id="INTEGER", text="TEXT", real="REAL"))
_MIGRATIONS.append(lambda db: _backfill_properties(db))
# Hyperparameter tuning jobs (store/tuning.py); their trials are jobs.
_MIGRATIONS.append(tuning.TABLE.format(id="INTEGER", text="TEXT", real="REAL"))

# The roll-up periods the store holds and those a maintenance pass is building (store/series/tiers.py).
_MIGRATIONS.append(lambda db: _add_tier_record(db))
# The chunks maintenance has yet to seal, by series: found at once however many sealed ones there are
# (upkeep.seal_busy looks every few seconds).
_MIGRATIONS.append("CREATE INDEX IF NOT EXISTS chunks_unsealed ON chunks (series_id) WHERE sealed = 0")
# Log chunks in a table with rowids: see _log_chunks_by_rowid.
_MIGRATIONS.append(lambda db: _log_chunks_by_rowid(db))

OPEN_TIMEOUT_S = 30.0
KEPT_READERS = 8  # idle read-only connections a store keeps for its threads' reads (more are closed after use)
RELEASE_PAGES = 2048  # 8 MB of 4 KiB pages returned per transaction after a maintenance pass
RELEASE_SLICES = 256  # at most 2 GB a pass; the next pass goes on
CHECKPOINT_BYTES = 4 << 20  # a write-ahead log this large is copied into the file by the checkpointing thread
SELF_CHECKPOINT_PAGES = 16384  # (64 MB) a writer copies it itself only past this: the thread is behind
SETTLE_S = 1.0  # how long a process done with the file tries to empty the log while others read it
SETTLE_POLL_S = 0.01  # between those tries, holding no lock


def empty_log(db: sqlite3.Connection, timeout_s: float = 0.0) -> bool:
    """Copy the write-ahead log into the database file and empty it (0 bytes), on ``db`` (a
    connection in no transaction); True once done. Never raises, never waits holding a lock: a
    PASSIVE checkpoint copies what no reader still needs, and only a log with nothing left to copy
    is emptied (TRUNCATE, SQLite's busy handler off for it: the writer lock it takes covers the
    truncation alone, and it gives up at once when another connection writes or reads from the
    log). While readers hold the log, tried again every SETTLE_POLL_S for up to ``timeout_s`` (0:
    once); not once the log grows or starts again: another process writes, and the log is its
    (its commits start it again, journal_size_limit being 0, and its end empties it)."""
    deadline_s = time.monotonic() + timeout_s
    try:
        busy_ms = db.execute("PRAGMA busy_timeout").fetchone()[0]
        db.execute("PRAGMA busy_timeout=0")
    except sqlite3.Error:
        return False
    seen = -1  # the log's frames at the last try
    try:
        while True:
            try:
                _busy, frames, copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                if frames == copied and db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0:
                    return True
            except sqlite3.Error as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    return False  # (a full disk, a file gone): the next writer meets it
                frames = -1
            if frames >= 0:  # (-1: another checkpoint was under way)
                if 0 <= seen != frames or time.monotonic() >= deadline_s:
                    return False
                seen = frames
            elif time.monotonic() >= deadline_s:
                return False
            time.sleep(SETTLE_POLL_S)
    finally:
        try:
            db.execute(f"PRAGMA busy_timeout={int(busy_ms)}")
        except sqlite3.Error:
            pass


class Checkpointer:
    """Copies a database's write-ahead log into its file on a thread of its own, started with the
    first log that needs it; one per file in a process, shared by its stores (:meth:`of`). A commit
    into WAL costs no sync; the checkpoint that follows every few megabytes syncs the log and the
    file, and done by the writer it held each ingestion batch of a flood behind the disk. SQLite's
    PASSIVE checkpoint waits for no one, and no one waits for it."""

    _open: ClassVar[dict[Path, Checkpointer]] = {}  # the process's, by file (resolved)
    _registry: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, path: Path) -> None:
        self.path = path
        self.wal = path.with_name(path.name + "-wal")
        self.passes = 0  # checkpoints run (what tests wait on)
        self.wrote = False  # a store of this process committed to the file: its log is emptied when done
        self._wanted = threading.Event()
        self._passed = threading.Condition()
        self._users = 0
        self._closed = False  # released by its last store
        self._thread: threading.Thread | None = None

    @classmethod
    def of(cls, path: Path) -> Checkpointer:
        """The file's checkpointer, taken by one more store (which gives it back with :meth:`release`)."""
        key = path.resolve()
        with cls._registry:
            found = cls._open.get(key) or cls._open.setdefault(key, cls(key))
            found._users += 1
            return found

    def release(self) -> bool:
        """A store is done with it; the last one ends the thread, and is told (True) to empty the log
        (:func:`empty_log`) when a store of the process wrote to the file."""
        with self._registry:
            self._users -= 1
            if self._users:
                return False
            del self._open[self.path]
            self._closed = True
        self._end_thread(None)
        return self.wrote

    def _end_thread(self, timeout_s: float | None) -> None:
        """The thread, told it is closed, ended (its connection with it)."""
        self._wanted.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    @classmethod
    def empty_logs_at_exit(cls) -> None:
        """At the interpreter's exit: PutMetricData's queue written, then the log of every file this
        process wrote to and still holds open emptied (a command that never closed its store)."""
        drain_all()
        with cls._registry:
            written = [checkpointer for checkpointer in cls._open.values() if checkpointer.wrote]
            for checkpointer in written:
                checkpointer._closed = True
        for checkpointer in written:
            checkpointer._end_thread(SETTLE_S)  # (its connection closed: the files go with the last one)
            try:
                db = sqlite3.connect(f"{checkpointer.path.as_uri()}?mode=rw", uri=True,  # (never makes one)
                                     isolation_level=None, check_same_thread=False)
            except sqlite3.Error:
                continue
            try:
                if empty_log(db, SETTLE_S):
                    checkpointer.wrote = False
            finally:
                db.close()

    def committed(self) -> None:
        """After a commit: the log copied soon if it holds CHECKPOINT_BYTES (its size says so: a
        log copied whole starts again from nothing, journal_size_limit being 0)."""
        self.wrote = True
        try:
            if os.stat(self.wal).st_size < CHECKPOINT_BYTES:
                return
        except OSError:
            return
        with self._registry:  # (writers of several threads and stores commit)
            if self._closed:
                return
            if self._thread is None or not self._thread.is_alive():  # (none yet, or a process forked since)
                self._thread = threading.Thread(target=self._run, name="trainmon-checkpoint", daemon=True)
                self._thread.start()
        self._wanted.set()

    def wait_for_pass(self, passes: int, timeout_s: float) -> bool:
        """Until ``passes`` checkpoints have run; False if they did not within ``timeout_s``."""
        with self._passed:
            return self._passed.wait_for(lambda: self.passes >= passes, timeout_s)

    def _run(self) -> None:
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error:
            return  # the writer checkpoints past SELF_CHECKPOINT_PAGES
        try:
            db.execute("PRAGMA synchronous=NORMAL")
            while True:
                self._wanted.wait()
                self._wanted.clear()
                if self._closed:
                    return
                try:
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error:
                    pass  # (a full disk, say): the writers meet it, and the next commit asks again
                with self._passed:
                    self.passes += 1
                    self._passed.notify_all()
        finally:
            db.close()


class SqliteStore(SqlStore):
    """The store in one SQLite file; ``home`` is the data directory (by default the file's)."""

    _find = "instr"
    _search_dialect = search.Dialect(_find, " INDEXED BY job_properties_of_job", " INDEXED BY series_by_job")

    def __init__(self, path: Path | str, home: Path | None = None, retention: Retention | None = None, *,
                 clock: Clock = REAL_CLOCK, write_behind: WriteBehind | None = None) -> None:
        self.path = Path(path)
        self.retention = retention if retention is not None else current_retention()
        self.clock = clock
        self.write_behind = write_behind or WriteBehind()
        self.home = home if home is not None else self.path.parent
        self.location = str(self.path)
        self.log_files = LogFiles(self.path.resolve())  # a flood's log chunks, beside the database
        self._undo_on_rollback: list[Callable[[], None]] = []  # what a write transaction did beside the database
        self.database_url: str | None = None
        self._lock = threading.RLock()
        self.checkpointer: Checkpointer | None = None  # a store that can write has one (its file's)
        self._released = False
        self._readers: list[sqlite3.Connection] = []  # idle connections that reads take while _db is busy
        self._readers_lock = threading.Lock()
        self._reader_uri: str | None = None  # how a reader opens the file (None: it cannot: reads wait for _db)
        self._closed = False
        deadline = time.monotonic() + OPEN_TIMEOUT_S
        private_file(self.path)  # logs and hyperparameters (passwords, say) are its user's only
        for suffix in ("-wal", "-shm"):  # SQLite gives these the database file's mode; older ones are made so
            private_file(self.path.with_name(self.path.name + suffix), create=False)
        while True:
            try:
                self._db = sqlite3.connect(
                    self.path, timeout=OPEN_TIMEOUT_S, isolation_level=None, check_same_thread=False
                )
                break
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open the store at {self.path}: {exc}") from exc
        while True:
            try:
                # Switching a new file to WAL does not wait on a busy handler: when several
                # processes create the store at once, the losers retry here.
                # A new file gives back the pages that sealing and expiry free (_release_space):
                # set before anything (WAL included) writes the file's header.
                if self._db.execute("PRAGMA page_count").fetchone()[0] == 0:  # (on a file with pages it would
                    self._db.execute("PRAGMA auto_vacuum = INCREMENTAL")  # wait on a writer, and do nothing)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.execute("PRAGMA foreign_keys=ON")
                self._db.execute(f"PRAGMA wal_autocheckpoint={SELF_CHECKPOINT_PAGES}")
                self._db.execute("PRAGMA journal_size_limit=0")
                migrated = self._migrate()
                self._reader_uri = f"{self.path.resolve().as_uri()}?mode=ro"
                self.checkpointer = Checkpointer.of(self.path)
                if migrated:
                    self.checkpointer.wrote = True
                return
            except (sqlite3.OperationalError, StoreError) as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    self._db.close()
                    if self._open_read_only():
                        return
                    raise StoreError(f"cannot open the store at {self.path}: {exc}") from exc
                time.sleep(0.05)
            except sqlite3.Error as exc:
                self._db.close()
                raise StoreError(f"cannot open the store at {self.path}: {exc}") from exc

    def _open_read_only(self) -> bool:
        """On a full disk SQLite cannot make the files WAL mode needs (``-shm``, ``-wal``) once the
        last writer closed them, nor write a checkpoint. The store can still be read: the file
        alone, as unchanging, when it holds everything, else through the WAL left with it; for
        reading only (a write says the database is read-only). False when it cannot be read (it
        needs a migration, say)."""
        wal = self.path.with_name(self.path.name + "-wal")
        if not self.path.exists():
            return False
        # A WAL left behind (a writer killed, or its last checkpoint refused by the full disk) holds
        # the newest pages: read through it, with the -shm index it came with. An empty one is the
        # failed open's: the file alone is then the whole store.
        pending = wal.exists() and wal.stat().st_size > 0
        try:
            self._db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro{'' if pending else '&immutable=1'}",
                                       uri=True, isolation_level=None, check_same_thread=False)
            current = self._db.execute("PRAGMA user_version").fetchone()[0] == len(_MIGRATIONS)
        except sqlite3.Error:
            return False
        if not current:
            self._db.close()
        return bool(current)

    def _close_connection(self) -> None:
        """The connection closed; the last store of the process on the file, if the process wrote
        to it, first empties the log (SQLite would only when no other process has the file open)."""
        last_writer = False
        if self.checkpointer is not None and not self._released:
            self._released = True
            last_writer = self.checkpointer.release()
        with self._readers_lock:
            self._closed = True
            readers, self._readers = self._readers, []
        for reader in readers:
            reader.close()
        with self._lock:
            if last_writer:
                empty_log(self._db, SETTLE_S)
            self._db.close()

    def _writer_factory(self) -> Callable[[], SqliteStore]:
        return partial(_existing, self.path, self.home, self.retention)

    # -- plumbing --------------------------------------------------------------------------

    def _migrate(self) -> bool:
        """The schema brought up to date, under the write lock only when it is behind: a store that is
        current opens without waiting on a writer (WAL readers never do). Whether it wrote."""
        try:
            if self._db.execute("PRAGMA user_version").fetchone()[0] == len(_MIGRATIONS):
                return False
        except sqlite3.Error as exc:
            raise _translate(exc, self.path) from exc
        with self._write() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            for number, script in enumerate(_MIGRATIONS[version:], start=version + 1):
                if callable(script):
                    script(db)
                else:
                    for statement in script.split(";"):
                        if statement.strip():
                            db.execute(statement)
                db.execute(f"PRAGMA user_version={number}")
        return True

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise _translate(exc, self.path) from exc
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                for undo in self._undo_on_rollback:
                    undo()
                if isinstance(exc, sqlite3.Error):
                    raise _translate(exc, self.path) from exc
                raise
            finally:
                self._undo_on_rollback.clear()
        if self.checkpointer is not None:
            self.checkpointer.committed()

    @contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        """A connection to read on: the store's own when no other thread holds it (a store used by
        one thread at a time opens no other), else an idle reader, opened when there is none. So the
        reads of a server's threads go on together (SQLite runs a query without Python's lock), and
        none waits for another's query, a write transaction or a maintenance pass on the store's
        connection; up to KEPT_READERS idle ones are kept. A reader sees what is committed, as a read of ``_db`` outside a transaction does;
        a thread inside a write transaction holds ``_db`` and reads on it, its own writes too."""
        if self._reader_uri is None:  # (a store opened read-only, on a full disk)
            with self._lock:
                yield self._db
            return
        if self._lock.acquire(blocking=False):  # (the thread that holds it takes it again)
            try:
                yield self._db
            finally:
                self._lock.release()
            return
        with self._readers_lock:
            db = self._readers.pop() if self._readers else None
        if db is None:
            try:
                db = sqlite3.connect(self._reader_uri, uri=True, timeout=OPEN_TIMEOUT_S, isolation_level=None,
                                     check_same_thread=False)
            except sqlite3.Error as exc:
                raise _translate(exc, self.path) from exc
        try:
            yield db
        finally:
            with self._readers_lock:
                if not self._closed and not db.in_transaction and len(self._readers) < KEPT_READERS:
                    self._readers.append(db)
                    db = None
            if db is not None:
                db.close()

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._reader() as db:
            try:
                return db.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise _translate(exc, self.path) from exc

    def _release_space(self, done: Maintenance) -> None:
        """Free pages back to the file system, a slice per transaction so that writers wait
        milliseconds at most (files made before incremental vacuum keep reusing their free pages),
        then the pass's log emptied if no one else holds it now (a maintenance pass writes tens of
        megabytes of log, which would stay until the next write)."""
        for _ in range(RELEASE_SLICES):
            with self._lock:
                try:
                    if not self._db.execute("PRAGMA freelist_count").fetchone()[0]:
                        break
                    # A transaction of its own; through executescript, as the module's execute steps
                    # this pragma once and so frees one page.
                    self._db.executescript(f"PRAGMA incremental_vacuum({RELEASE_PAGES});")
                except sqlite3.Error as exc:
                    raise _translate(exc, self.path) from exc
        with self._lock:
            empty_log(self._db)

    def _insert_chunks(self, sql: Sql, chunks: list[PackedChunk]) -> None:
        """Inside the write transaction (so a retried batch that was stored appends nothing): a flood's
        large chunks appended beside the database first, cut back off their files if it fails."""
        placed = self.log_files.place(chunks)
        if placed.began:
            self._undo_on_rollback.append(placed.cut_back)
        sql.many("INSERT INTO log_chunks (stream_id, first_seq, count, timestamp_ms, text, packing) "
                 "VALUES (?, ?, ?, ?, ?, ?)", placed.chunks)

    def _unpacked(self, stream_id: int, count: int, text: str | bytes, packing: int) -> str:
        if not packing & TEXT_BESIDE:
            return unpack_text(text, packing)
        found = self.log_files.read(stream_id, text) if isinstance(text, bytes) else None
        if found is None:  # (the database copied without its files, say: said in each record's place)
            kept = f"{self.log_files.directory.name}/{stream_id}"
            return "\n".join([f"[trainmon: this record's text was kept in {kept}, which no longer holds it]"] * count)
        return unpack_text(found, packing & ~TEXT_BESIDE)

    def add_stream(self, job_id: int, host: str, name: str, creation_ms: int) -> StreamRow:
        stream = super().add_stream(job_id, host, name, creation_ms)
        self.log_files.forget([stream.id])  # a file of a deleted stream that had this number
        return stream

    def _deleting_job(self, sql: Sql, name: str) -> None:
        """Its streams' files beside the database, removed while the write lock is held: no stream given
        one of their numbers meanwhile can have its file removed."""
        self.log_files.forget(row[0] for row in sql.rows(
            "SELECT log_streams.id FROM log_streams JOIN jobs ON jobs.id = log_streams.job_id WHERE jobs.name = ?",
            (name,)))

    @contextmanager
    def _transaction(self) -> Iterator[Sql]:
        with self._write() as db:
            yield _Sql(db)

    @contextmanager
    def _snapshot(self) -> Iterator[Sql]:
        """Reads that see one state of the store (a read transaction: writers go on)."""
        with self._reader() as db:
            try:
                db.execute("BEGIN")
                try:
                    yield _Sql(db)
                finally:
                    db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise _translate(exc, self.path) from exc


# After the buffers' own exit hook is registered (by the import above), so run before it: it drains them first.
atexit.register(Checkpointer.empty_logs_at_exit)


def _existing(path: Path, home: Path, retention: Retention) -> SqliteStore:
    """The store at ``path``, which must exist: a writer that finds it gone (its directory deleted)
    must not make an empty one there."""
    if not path.exists():
        raise FileNotFoundError(f"the store at {path} is gone")
    return SqliteStore(path, home, retention)


class _Sql:
    greatest = "max"
    series_writes_wait = ""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.db.execute(sql, args).fetchall()

    def many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.db.executemany(sql, rows)


def _backfill_properties(db: sqlite3.Connection) -> None:
    db.executemany(search.INSERT, search.backfill(db.execute(search.UNFILLED)))


def _move_points_to_series(db: sqlite3.Connection) -> None:
    """Migration 4: the row-per-point tables of migrations 1 and 2 become series and chunks."""
    from ..series.upkeep import convert_row_tables

    convert_row_tables(_Sql(db))
    for table in ("points", "datapoints", "job_metrics", "metrics"):
        db.execute(f"DROP TABLE {table}")


def _add_overviews(db: sqlite3.Connection) -> None:
    """Migration 7: sealed chunks' overviews (store.series.overview), a column that chunks are made with
    since, and an index of the chunks that maintenance gives one (store.series.overview.BLOCK: 128)."""
    if "overview" not in {row[1] for row in db.execute("PRAGMA table_info(chunks)")}:
        db.execute("ALTER TABLE chunks ADD COLUMN overview BLOB")
    db.execute("CREATE INDEX chunks_without_overview ON chunks (id) WHERE kind = 0 AND sealed = 1 "
               "AND overview IS NULL AND count > 128")


def _log_chunks_by_rowid(db: sqlite3.Connection) -> None:
    """log_chunks rebuilt as a table with rowids, its key an index beside it. A WITHOUT ROWID table
    keeps each row whole in its key's b-tree, and SQLite reads a cell's whole payload, overflow pages
    and all, to compare a key with it when the row overflows its page: a flood's writer read back as
    many pages as it wrote, the texts its inserts' searches passed. The index by time holds
    ``first_seq`` too, as the old one did through the key, so finding a chunk by its time reads no
    text. The rows are copied once (what the store holds of logs, compressed); a chunk whose stream is
    gone (a file edited with foreign keys off) is left out, as it could not be read."""
    db.execute("""
        CREATE TABLE log_chunks_by_rowid (
            stream_id INTEGER NOT NULL REFERENCES log_streams (id) ON DELETE CASCADE,
            first_seq INTEGER NOT NULL,
            count INTEGER NOT NULL,
            timestamp_ms INTEGER NOT NULL,
            text TEXT NOT NULL,
            packing INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (stream_id, first_seq)
        )""")
    db.execute("INSERT INTO log_chunks_by_rowid (stream_id, first_seq, count, timestamp_ms, text, packing) "
               "SELECT stream_id, first_seq, count, timestamp_ms, text, packing FROM log_chunks "
               "WHERE stream_id IN (SELECT id FROM log_streams) ORDER BY stream_id, first_seq")  # (orphans: no stream)
    db.execute("DROP TABLE log_chunks")
    db.execute("ALTER TABLE log_chunks_by_rowid RENAME TO log_chunks")
    db.execute("CREATE INDEX log_chunks_by_time ON log_chunks (stream_id, timestamp_ms, first_seq)")


def _add_tier_record(db: sqlite3.Connection) -> None:
    """The roll-up periods the store holds and those a maintenance pass is building, as columns of
    its one maintenance row (a store migrated again keeps them)."""
    present = {row[1] for row in db.execute("PRAGMA table_info(maintenance)")}
    for column in ("periods", "building"):
        if column not in present:
            db.execute(f"ALTER TABLE maintenance ADD COLUMN {column} TEXT")


def _translate(exc: sqlite3.Error, path: Path) -> StoreError:
    text = str(exc)
    problem: Problem = "other"
    if "full" in text:
        problem = "full"
    elif "locked" in text or "busy" in text:
        problem = "locked"
    elif getattr(exc, "sqlite_errorname", "") in ("SQLITE_CONSTRAINT_UNIQUE", "SQLITE_CONSTRAINT_PRIMARYKEY"):
        problem = "duplicate"
    return store_error(problem, str(path), text)
