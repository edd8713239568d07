"""Nothing left behind: a process that wrote to the SQLite store leaves its write-ahead log empty
(0 bytes, or gone) when it is done with the file, so that the data directory's size after a
command is what it keeps; and emptying the log never raises, loses nothing, and never holds a
writer or a reader of another process back.

Real SQLite files and real processes (``trainmon maintain``, ``trainmon run``, a detached
supervisor, ``trainmon server``, a script that exits without closing its store). Most tests keep
a connection of their own open on the file meanwhile, as a server or ``trainmon logs --follow``
would: SQLite empties the log by itself only when the last connection to the file closes.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from trainmon.cloudwatch.model import MetricKey
from trainmon.cloudwatch.statistics import Sample
from trainmon.store import SqliteStore, open_store
from trainmon.store.sqlite import empty_log

from .conftest import PY, process_ends, run_cli, start_server, wait_for


def _wal(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def _left_empty(path: Path) -> bool:
    """Whether the database's write-ahead log is gone or holds nothing."""
    wal = _wal(path)
    return not wal.exists() or wal.stat().st_size == 0


def _in_the_file_alone(path: Path, sql: str) -> object:
    """``sql``'s answer from the database file alone, as it is on disk (SQLite's ``immutable``: the
    write-ahead log not read), which holds everything once the log is copied in."""
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        return db.execute(sql).fetchone()[0]
    finally:
        db.close()


@contextmanager
def _held_open(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection of another party on the file, idle between reads (a server, a follower)."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    try:
        yield db
    finally:
        db.close()


def _samples(count: int, start_ms: int) -> list[tuple[MetricKey, int, list[Sample]]]:
    key = MetricKey("App", "loss", (("Host", "algo-1"),))
    return [(key, 1, [Sample(start_ms + i * 100, 1.0, i / 7, i / 7, i / 7, i / 7, "None") for i in range(count)])]


# -- empty_log: the checkpoint, on a plain WAL file ---------------------------------------------------


@pytest.fixture
def wal_file(tmp_path: Path) -> Iterator[tuple[Path, sqlite3.Connection]]:
    """A WAL-mode file with a table of 200 rows of 4 KB, its log not copied in."""
    path = tmp_path / "plain.db"
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")  # (the log stays as written: these tests copy it)
    db.execute("CREATE TABLE t (x BLOB)")
    for _ in range(200):
        db.execute("INSERT INTO t VALUES (randomblob(4096))")
    yield path, db
    db.close()


def test_emptying_the_log_while_another_connection_reads_neither_raises_nor_loses_anything(
        wal_file: tuple[Path, sqlite3.Connection]) -> None:
    path, db = wal_file
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM t").fetchone()[0] == 200  # a snapshot in the log
    for _ in range(50):
        db.execute("INSERT INTO t VALUES (randomblob(4096))")
    assert empty_log(db, timeout_s=0.2) is False  # the reader still needs the log: left as it is
    assert _wal(path).stat().st_size > 0
    assert reader.execute("SELECT count(*) FROM t").fetchone()[0] == 200  # its snapshot, intact
    reader.execute("COMMIT")
    assert db.execute("SELECT count(*) FROM t").fetchone()[0] == 250
    assert empty_log(db, timeout_s=0.2) is True  # the reader gone: copied and emptied
    assert _wal(path).stat().st_size == 0
    assert _in_the_file_alone(path, "SELECT count(*) FROM t") == 250
    assert db.execute("PRAGMA busy_timeout").fetchone()[0] == 5000  # (Python's default), given back
    reader.close()


def test_emptying_the_log_holds_no_writer_back(wal_file: tuple[Path, sqlite3.Connection]) -> None:
    """While a reader keeps the log from being emptied, the tries hold no lock a writer waits on:
    one with a 50 ms busy timeout commits throughout (a checkpoint that waited for the reader with
    the writer lock taken, SQLite's TRUNCATE with a busy handler, would make it fail)."""
    path, db = wal_file
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM t").fetchone()  # all of the log copied, but read from
    writer = sqlite3.connect(path, isolation_level=None, timeout=0.05, check_same_thread=False)
    results: list[bool] = []
    emptying = threading.Thread(target=lambda: results.append(empty_log(db, timeout_s=1.0)))
    emptying.start()
    try:
        for _ in range(40):
            writer.execute("BEGIN IMMEDIATE")
            writer.execute("INSERT INTO t VALUES (randomblob(4096))")
            writer.execute("COMMIT")
            time.sleep(0.01)
    finally:
        emptying.join()
        reader.execute("COMMIT")
        reader.close()
    assert results == [False]  # another connection writes: the log is its own
    assert writer.execute("SELECT count(*) FROM t").fetchone()[0] == 240
    writer.close()
    assert empty_log(db, timeout_s=1.0) is True
    assert _in_the_file_alone(path, "SELECT count(*) FROM t") == 240


# -- a store's close ---------------------------------------------------------------------------------


def test_the_last_store_of_a_process_closed_empties_the_log_while_another_holds_the_file(tmp_path: Path) -> None:
    path = tmp_path / "trainmon.db"
    store = SqliteStore(path)
    other = SqliteStore(path)  # (a supervisor's own store and its maintainer's, say)
    start_ms = int(time.time() * 1000) - 3_600_000
    with _held_open(path):
        store.put_samples(_samples(50_000, start_ms))
        other.put_samples(_samples(10, start_ms + 6_000_000))
        other.close()
        assert _wal(path).stat().st_size > 0  # another store of the process still has the file
        store.close()
        assert _wal(path).stat().st_size == 0
    assert _in_the_file_alone(path, "SELECT sum(count) FROM chunks") == 50_010


def test_a_store_closed_while_another_connection_reads_leaves_the_log_to_it_and_loses_nothing(
        tmp_path: Path) -> None:
    path = tmp_path / "trainmon.db"
    store = SqliteStore(path)
    start_ms = int(time.time() * 1000) - 3_600_000
    store.put_samples(_samples(1000, start_ms))
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    assert reader.execute("SELECT sum(count) FROM chunks").fetchone()[0] == 1000
    store.put_samples(_samples(500, start_ms + 200_000))
    store.close()  # does not raise, nor wait for the reader past SETTLE_S
    assert _wal(path).stat().st_size > 0  # the reader's snapshot needs it
    assert reader.execute("SELECT sum(count) FROM chunks").fetchone()[0] == 1000
    reader.execute("COMMIT")
    assert reader.execute("SELECT sum(count) FROM chunks").fetchone()[0] == 1500
    with _held_open(path):
        again = SqliteStore(path)
        again.put_samples(_samples(1, start_ms + 400_000))
        again.close()  # the next writer's close empties it
        assert _wal(path).stat().st_size == 0
    reader.close()
    assert _in_the_file_alone(path, "SELECT sum(count) FROM chunks") == 1501


# -- processes, as they end ---------------------------------------------------------------------------


def test_trainmon_maintain_leaves_the_store_checkpointed(home: Path) -> None:
    """The issue's case: maintenance writes tens of megabytes of log (sealing, roll-ups, pages given
    back), which used to stay beside the file until the next writer."""
    path = home / "trainmon.db"
    store = open_store(home)
    start_ms = (int(time.time()) - 5 * 3600) * 1000
    for first in range(0, 200_000, 50_000):
        store.put_samples([(MetricKey("App", f"m{n}", (("Host", "algo-1"),)), 1,
                            [Sample(start_ms + (first + i) * 50, 1.0, (i % 97) / 3, (i % 97) / 3, (i % 97) / 3,
                                    (i % 97) / 3, "None") for i in range(5_000)]) for n in range(10)])
    store.close()
    with _held_open(path):  # (a server, say)
        result = run_cli("maintain", "--json", check=True, env={"TRAINMON_RETENTION": "forever"})
        assert json.loads(result.stdout)["sealed_points"] == 200_000
        assert _left_empty(path)
    assert _in_the_file_alone(path, "SELECT sum(count) FROM chunks") == 200_000
    assert _in_the_file_alone(path, "SELECT count(*) FROM rollups") > 0


def test_trainmon_run_of_a_job_that_printed_many_points_leaves_the_store_checkpointed(home: Path, script) -> None:
    path = home / "trainmon.db"
    train = script("""
        import sys
        out = sys.stdout
        for step in range(100_000):
            out.write(f"step={step} loss={1 / (step + 1):.6f}\\n")
        """)
    open_store(home).close()  # (the file, for the connection below)
    with _held_open(path):  # (a server, say)
        run_cli("run", "--name", "many", "--metric", r"loss=loss=(\S+)", "--", PY, str(train), check=True)
        assert _left_empty(path)
    assert _in_the_file_alone(path, "SELECT sum(c.count) FROM chunks c JOIN series s ON s.id = c.series_id "
                                    "WHERE s.name = 'loss'") == 100_000
    assert _in_the_file_alone(path, "SELECT sum(records) FROM log_streams") == 100_000


def test_a_detached_supervisor_leaves_the_store_checkpointed(home: Path, script) -> None:
    """``python -m trainmon.cli.supervise``, the process CreateTrainingJob starts, as it ends."""
    path = home / "trainmon.db"
    train = script("""
        for step in range(20_000):
            print(f"loss={1 / (step + 1):.6f}")
        """)
    open_store(home).close()
    with _held_open(path) as held:
        run_cli("run", "--name", "detached", "--detach", "--metric", r"loss=loss=(\S+)", "--", PY, str(train),
                check=True)
        wait_for(lambda: held.execute("SELECT supervisor FROM jobs WHERE name = 'detached'").fetchone()[0] is not None,
                 "the job's supervisor")
        supervisor = json.loads(held.execute("SELECT supervisor FROM jobs WHERE name = 'detached'").fetchone()[0])
        assert process_ends(supervisor["pid"], timeout=120)
        assert held.execute("SELECT status FROM jobs WHERE name = 'detached'").fetchone()[0] == "Completed"
        assert _left_empty(path)
    assert _in_the_file_alone(path, "SELECT sum(records) FROM log_streams") == 20_000


def test_trainmon_server_leaves_the_store_checkpointed(home: Path) -> None:
    path = home / "trainmon.db"
    open_store(home).close()
    with _held_open(path):
        server = start_server(home)
        try:
            now = time.time()
            with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as http:
                for call in range(20):
                    answer = http.post("/api/cloudwatch/PutMetricData", json={"Namespace": "Team", "MetricData": [
                        {"MetricName": "loss", "Value": i / 3, "Timestamp": now - 600 + call * 10 + i / 100,
                         "StorageResolution": 1} for i in range(1000)]})
                    assert answer.status_code == 200, answer.text
        finally:
            assert server.stop() == 0, "".join(server.output)
        assert _left_empty(path)
    assert _in_the_file_alone(path, "SELECT sum(count) FROM chunks") == 20_000


def test_a_script_that_puts_and_exits_without_closing_leaves_everything_in_the_file(home: Path) -> None:
    """The exit writes PutMetricData's queue first, then empties the log (in that order, or the
    queue's write would be left in the log)."""
    path = home / "trainmon.db"
    open_store(home).close()
    with _held_open(path):
        child = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
            import time
            from pathlib import Path
            import trainmon
            from trainmon.store import WriteBehind, open_store
            store = open_store(Path({str(home)!r}), write_behind=WriteBehind(every_s=3600))  # only the exit writes
            cw = trainmon.client("cloudwatch", store=store)
            for call in range(3):
                cw.put_metric_data(Namespace="App", MetricData=[
                    {{"MetricName": "loss", "Value": 1.0, "Timestamp": time.time() - 600 + call * 10 + i / 100,
                      "StorageResolution": 1}} for i in range(1000)])
            """)], capture_output=True, text=True, timeout=120)
        assert child.returncode == 0, child.stderr
        assert _left_empty(path)
    assert _in_the_file_alone(path, "SELECT sum(count) FROM chunks") == 3000
