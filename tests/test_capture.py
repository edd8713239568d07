"""The pieces of capture and the runtime that the end-to-end tests reach only through a whole job."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

import trainmon.runtime.capture as capture
from trainmon.errors import StoreError, StoreFull
from trainmon.parsing.definitions import validate_definitions
from trainmon.parsing.framing import Mode
from trainmon.runtime.capture import (
    FRAME,
    Loss,
    LossCounter,
    MemoryBudget,
    PipeReader,
    RecordCutter,
    spool_files,
    spool_frames,
    spool_path,
)
from trainmon.runtime.procfs import descendants, parse_process_stat, read_process_stat
from trainmon.runtime.retry import Backoff
from trainmon.store.sql import store_error


def test_a_full_disk_is_its_own_store_error_in_the_same_words() -> None:
    full = store_error("full", "/data/trainmon.db", "database or disk is full")
    assert isinstance(full, StoreFull)
    assert full.message == ("the disk holding /data/trainmon.db is full: free some space; what was stored so far "
                            "stays readable")
    assert not isinstance(store_error("locked", "/data/trainmon.db", "database is locked"), StoreFull)
    assert type(store_error("other", "/data/trainmon.db", "the disk is full of surprises")) is StoreError


def test_backoff_doubles_up_to_its_most_and_starts_again() -> None:
    backoff = Backoff()
    assert [backoff.next_delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    backoff.reset()
    assert backoff.next_delay() == 0.5


@pytest.mark.parametrize("after_cr", [False, True])
def test_a_restarted_cutter_cuts_like_a_new_one(after_cr: bool) -> None:
    cutter = RecordCutter(Mode.TERMINAL)
    assert cutter.feed(b"half a rec") == b""
    cutter.restart(after_cr=after_cr)
    fresh = RecordCutter(Mode.TERMINAL, after_cr=after_cr)
    for data in (b"\nnext\r", b"\nlast"):
        assert cutter.feed(data) == fresh.feed(data)
        assert cutter.after_cr == fresh.after_cr
    assert cutter.finish() == fresh.finish() == b"last"


def test_a_loss_is_recorded_only_when_something_was_lost() -> None:
    assert Loss().unstored() is None
    assert Loss(3, 2, 40, "the disk is full").unstored() == {"Records": 3, "Points": 2, "Bytes": 40,
                                                             "Reason": "the disk is full"}
    assert Loss(0, 0, 5, "cut short").unstored() is not None  # bytes of a record never finished


def test_a_loss_counter_compiles_its_definitions_only_when_output_is_dropped() -> None:
    definitions = validate_definitions([{"Name": "loss", "Regex": r"loss=(\S+)"}])
    counter = LossCounter(definitions, Mode.TERMINAL)
    counter.finish()
    assert counter._extractor is None and counter.loss == Loss()
    counter.begin(b"o", b"step 3 lo", "the spool could not be written")  # mid-record: its first part was kept
    counter.drop(b"ss=9\nloss=1\nloss=")
    counter.drop(b"2\n")
    counter.finish()
    # "step 3 lo" is stored as a record; its lost point (loss=9, cut in two) and the next two records are not
    assert counter.loss == Loss(2, 3, 19, "the spool could not be written")


def test_a_loss_counter_counts_the_points_of_records_a_drop_cuts_once() -> None:
    definitions = validate_definitions([{"Name": "loss", "Regex": r"loss=([0-9.]+)"}, {"Name": "acc", "Regex": r"acc=(\S+)"}])
    counter = LossCounter(definitions, Mode.TERMINAL)
    counter.begin(b"5", b"loss=0.5", "full")  # the kept start has its point: the drop adds acc's only
    counter.drop(b" acc=0.9\nloss=1 acc=1\nloss=0.")
    assert counter.end(b"25 acc=0.8\nloss=3\n") is False  # kept again mid-record: "25 acc=0.8" is stored
    # the drop's own record (2 points), acc=0.9 of the first cut record, and loss=0.25 of the second (what is
    # stored of it, "25 acc=0.8", gives its acc point but a loss of 25 nowhere: "loss=0." was dropped)
    assert counter.loss == Loss(1, 4, 29, "full")
    counter.begin(b"=", b"lo", "full")
    counter.drop(b"ss")  # dropped and kept again inside one record: two stored pieces, one record's points
    counter.end(b"=7\n")
    assert counter.loss == Loss(1, 5, 31, "full")


def test_spool_files_are_named_by_host_and_stream(tmp_path: Path) -> None:
    paths = [spool_path(tmp_path, "algo-1", False), spool_path(tmp_path, "algo-1", True)]
    assert [p.name for p in paths] == ["algo-1-stdout", "algo-1-stderr"]
    for path in paths:
        path.write_bytes(b"")
    (tmp_path / "other").write_bytes(b"")
    assert sorted(spool_files(tmp_path)) == sorted(paths)


def test_a_spool_that_could_not_be_opened_is_tried_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capture, "SPOOL_RETRY_MS", 0)
    directory = tmp_path / "spool"  # missing at first: the spool cannot be opened
    path = spool_path(directory, "algo-1", False)
    read_end, write_end = os.pipe()
    wake = threading.Event()
    definitions = validate_definitions([])
    reader = PipeReader(read_end, path, wake, path.name, budget=MemoryBudget(),
                        losses=LossCounter(definitions, Mode.TERMINAL))
    reader.start()
    try:
        os.write(write_end, b"held in memory\n")
        deadline = time.monotonic() + 10
        while not reader.chunks and time.monotonic() < deadline:
            time.sleep(0.01)
        assert reader.spool_error is not None
        assert [c.data for c in reader.chunks] == [b"held in memory\n"]
        directory.mkdir()
        os.write(write_end, b"spooled\n")
        while len(reader.chunks) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        os.close(write_end)
        reader.join(10)
    first, second = reader.chunks
    assert second.data is None and reader.spool_error is None
    assert [(offset, length) for offset, _, length in spool_frames(path, FRAME.size)] == [(second.start, 8)]
    assert path.read_bytes()[second.start:] == b"spooled\n"


def test_a_process_stat_is_read_past_its_command_name(tmp_path: Path) -> None:
    line = b"42 (a) b (c)) R 7 42 42 0 -1 4194304 0 0 0 0 5 6 0 0 20 0 3 0 12345 1000 200 0\n"
    assert parse_process_stat(line) == ("R", 7, 42, 12345)
    me = read_process_stat(os.getpid())
    assert me is not None and me.ppid == os.getppid() and me.pgrp == os.getpgrp()
    assert read_process_stat(0, tmp_path) is None


def test_descendants_come_once_each_depth_first() -> None:
    children = {1: [2, 3], 3: [4], 4: [1]}  # a loop (a reused id) ends, too
    assert descendants([1], children) == [1, 3, 4, 2]
    assert descendants([5], children) == [5]
