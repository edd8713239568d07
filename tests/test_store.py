"""The store contract (``trainmon.store.base.Store``), run against every backend.

``any_store`` is SQLite in a temp dir, then a fresh database in the PostgreSQL server this test
run started (see conftest.py); each test here runs once per backend. Backend-specific checks
(selection by URL, migrations, connection errors) come at the end.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from trainmon.cloudwatch.model import JOB_NAMESPACE, MetricKey
from trainmon.cloudwatch.statistics import Sample
from trainmon.errors import ResourceInUse, StoreError, ValidationException
from trainmon.store import Batch, EventRow, SqliteStore, Store, open_store
from trainmon.store.rows import JobRow

from .conftest import PY, PostgresServer, StoreTarget, free_port, run_cli


def doc(name: str, status: str = "InProgress", **extra: Any) -> dict[str, Any]:
    return {"TrainingJobName": name, "TrainingJobStatus": status,
            "TrainingJobArn": f"arn:aws:sagemaker:local:000000000000:training-job/{name}", **extra}


def new_job(store: Store, name: str = "job", created: float = 1000.0, **extra: Any) -> JobRow:
    return store.create_job(name, doc(name, **extra), created)


def key(name: str, namespace: str = "App", **dimensions: str) -> MetricKey:
    return MetricKey(namespace, name, tuple(sorted(dimensions.items())))


# -- jobs ----------------------------------------------------------------------------------


def test_create_get_update_delete_job(any_store: Store) -> None:
    created = any_store.create_job("a-job", doc("a-job", Note="é ✓"), 1700000000.25, supervisor={"pid": 7})
    assert created.name == "a-job" and created.status == "InProgress" and created.id > 0
    assert created.creation_time == created.last_modified_time == 1700000000.25
    assert created.doc["Note"] == "é ✓" and created.supervisor == {"pid": 7}
    assert created.stop_requested is None and created.diagnostics == []
    assert any_store.get_job("a-job") == created
    assert any_store.get_job("no-such-job") is None

    def finish(row: JobRow) -> None:
        row.doc["TrainingJobStatus"] = "Completed"
        row.last_modified_time = 1700000009.5
        row.supervisor = None
        row.stop_requested = "Stopped"
        row.diagnostics = [{"Name": "loss", "Matched": 3}]

    updated = any_store.update_job("a-job", finish)
    assert updated.status == "Completed"  # the status column follows the document
    assert any_store.get_job("a-job") == updated
    assert updated.supervisor is None and updated.stop_requested == "Stopped"
    assert updated.last_modified_time == 1700000009.5 and updated.diagnostics == [{"Name": "loss", "Matched": 3}]

    any_store.delete_job("a-job")
    assert any_store.get_job("a-job") is None
    any_store.delete_job("a-job")  # deleting what is gone is no error


def test_log_chunks_stored_with_their_cr_breaks_read_back_as_records(any_store: Store) -> None:
    """A chunk kept with its "\\r" breaks as read (a progress bar's redraws) is read back as the same
    records a chunk joined by "\\n" holds, on both backends, compressed or not."""
    from trainmon.store.codec import CrBreaks

    job = new_job(any_store, "bars")
    stream = any_store.add_stream(job.id, "algo-1", "bars/algo-1-1", 0)
    bar = b"".join(b"%d%%|###\r" % percent for percent in range(100)) + b"epoch 1 loss=0.5"
    any_store.write_batch(Batch(job.id, chunks=[(stream.id, 0, 101, 10, CrBreaks(bar)),
                                                (stream.id, 101, 2, 20, CrBreaks(b"1%\r2%"))],
                                stream_stats={stream.id: (103, len(bar) + 6, 20)}))
    events = any_store.events(stream.id, limit=200)
    assert [e.message for e in events] == [f"{p}%|###" for p in range(100)] + ["epoch 1 loss=0.5", "1%", "2%"]
    assert [e.seq for e in events] == list(range(103))
    assert any_store.log_text(stream.id)[0].count("\n") == 103


def test_duplicate_job_name_is_resource_in_use(any_store: Store) -> None:
    new_job(any_store, "twice")
    with pytest.raises(ResourceInUse, match="already exists .*training-job/twice"):
        new_job(any_store, "twice", created=2000.0)
    assert any_store.get_job("twice").creation_time == 1000.0  # type: ignore[union-attr]
    assert len(any_store.list_jobs()) == 1
    new_job(any_store, "other")  # the store still works after the refusal


def test_update_job_is_all_or_nothing(any_store: Store) -> None:
    new_job(any_store, "steady")

    def half_done(row: JobRow) -> None:
        row.doc["TrainingJobStatus"] = "Failed"
        raise ValidationException("changed my mind")

    with pytest.raises(ValidationException, match="changed my mind"):
        any_store.update_job("steady", half_done)
    assert any_store.get_job("steady").status == "InProgress"  # type: ignore[union-attr]
    with pytest.raises(ValidationException, match="Requested resource not found"):
        any_store.update_job("missing", lambda row: None)


def test_list_jobs_filters_sorting_and_limit(any_store: Store) -> None:
    new_job(any_store, "Beta-run", created=200.0, status="Completed")
    new_job(any_store, "alpha-run", created=100.0, status="InProgress")
    new_job(any_store, "gamma", created=300.0, status="Failed")
    new_job(any_store, "delta-RUN", created=300.0, status="Completed")  # same time as gamma: id breaks the tie

    def names(**query: Any) -> list[str]:
        return [job.name for job in any_store.list_jobs(**query)]

    assert names() == ["delta-RUN", "gamma", "Beta-run", "alpha-run"]
    assert names(descending=False) == ["alpha-run", "Beta-run", "gamma", "delta-RUN"]
    assert names(sort_by="Name", descending=False) == ["Beta-run", "alpha-run", "delta-RUN", "gamma"]  # byte order
    assert names(sort_by="Status", descending=False) == ["Beta-run", "delta-RUN", "gamma", "alpha-run"]
    assert names(status="Completed") == ["delta-RUN", "Beta-run"]
    assert names(statuses=("Failed", "InProgress")) == ["gamma", "alpha-run"]
    assert names(name_contains="RUN") == ["delta-RUN", "Beta-run", "alpha-run"]  # case-insensitive
    assert names(name_contains="%") == [] and names(name_contains="_") == []  # no wildcards
    assert names(created_after=100.0, created_before=300.0) == ["Beta-run"]  # both bounds exclusive
    assert names(limit=2) == ["delta-RUN", "gamma"]
    assert names(limit=0) == []


def test_deleting_a_job_deletes_its_streams_points_and_metrics(any_store: Store) -> None:
    job = new_job(any_store, "gone")
    stream = any_store.add_stream(job.id, "algo-1", "gone/algo-1-1", 1)
    any_store.write_batch(Batch(job.id, chunks=[(stream.id, 0, 1, 5, "loss=1")],
                                points=[("loss", 5, 1.0, "algo-1", stream.id, 0)], stream_stats={stream.id: (1, 7, 5)}))
    any_store.delete_job("gone")
    assert any_store.streams() == [] and any_store.stream("gone/algo-1-1") is None
    assert any_store.points(job.id) == [] and any_store.metric_keys() == []
    again = new_job(any_store, "gone")  # the name is free again
    assert any_store.metric_names(again.id) == []


# -- log streams and events ----------------------------------------------------------------


def test_streams(any_store: Store) -> None:
    one, two = new_job(any_store, "one"), new_job(any_store, "two")
    a = any_store.add_stream(one.id, "algo-2", "one/algo-2-100", 100_000)
    b = any_store.add_stream(one.id, "algo-1", "one/algo-1-100", 100_001)
    c = any_store.add_stream(two.id, "algo-1", "two/algo-1-100", 100_002)
    assert len({a.id, b.id, c.id}) == 3
    assert (b.job_id, b.host, b.name, b.creation_ms) == (one.id, "algo-1", "one/algo-1-100", 100_001)
    assert (b.first_event_ms, b.last_event_ms, b.last_ingestion_ms, b.records, b.stored_bytes) == (None, None, None, 0, 0)
    assert any_store.streams(one.id) == [b, a]  # by name
    assert [s.name for s in any_store.streams()] == ["one/algo-1-100", "one/algo-2-100", "two/algo-1-100"]
    assert any_store.streams(prefix="one/algo-1") == [b]
    assert any_store.streams(prefix="one/%") == []  # a prefix, not a pattern
    assert any_store.streams(two.id, prefix="one/") == []
    assert any_store.stream("two/algo-1-100") == c and any_store.stream("two/algo-9") is None
    with pytest.raises(StoreError):
        any_store.add_stream(two.id, "algo-1", "two/algo-1-100", 1)  # stream names are unique


def test_write_batch_stores_chunks_points_counters_and_diagnostics(any_store: Store) -> None:
    job = new_job(any_store)
    stream = any_store.add_stream(job.id, "algo-1", "job/algo-1-1", 1000)
    any_store.write_batch(Batch(
        job.id,
        chunks=[(stream.id, 0, 2, 2000, "epoch 1\nloss=0.5"), (stream.id, 2, 1, 2100, "loss=0.25")],
        points=[("loss", 2000, 0.5, "algo-1", stream.id, 1), ("loss", 2100, 0.25, "algo-1", stream.id, 2)],
        stream_stats={stream.id: (3, 27, 2100)},
        diagnostics=[{"Name": "loss", "Matched": 2}],
    ))
    any_store.write_batch(Batch(job.id, chunks=[(stream.id, 3, 1, 2500, "done")], stream_stats={stream.id: (1, 5, 2500)}))
    assert [(e.seq, e.timestamp_ms, e.message) for e in any_store.events(stream.id)] == [
        (0, 2000, "epoch 1"), (1, 2000, "loss=0.5"), (2, 2100, "loss=0.25"), (3, 2500, "done")]
    after = any_store.stream("job/algo-1-1")
    assert after is not None
    # the first event's time is the first batch's earliest record's (what a reader of the stream from
    # its start, the rules, begins at), the last the newest batch's newest
    assert (after.first_event_ms, after.last_event_ms, after.last_ingestion_ms) == (2000, 2500, 2500)
    assert (after.records, after.stored_bytes) == (4, 32)
    assert any_store.get_job("job").diagnostics == [{"Name": "loss", "Matched": 2}]  # type: ignore[union-attr]
    assert [(p.name, p.timestamp_ms, p.value, p.seq) for p in any_store.points(job.id)] == [
        ("loss", 2000, 0.5, 1), ("loss", 2100, 0.25, 2)]
    any_store.write_batch(Batch(job.id))  # an empty batch is no error


def test_write_batch_is_all_or_nothing(any_store: Store) -> None:
    job = new_job(any_store)
    stream = any_store.add_stream(job.id, "algo-1", "job/algo-1-1", 1000)
    any_store.write_batch(Batch(job.id, chunks=[(stream.id, 0, 1, 10, "first")], stream_stats={stream.id: (1, 6, 10)}))
    clash = Batch(job.id, chunks=[(stream.id, 1, 1, 20, "second"), (stream.id, 0, 1, 20, "again")],
                  points=[("loss", 20, 1.0, "algo-1", stream.id, 1)], stream_stats={stream.id: (2, 13, 20)},
                  diagnostics=[{"x": 1}])
    with pytest.raises(StoreError):
        any_store.write_batch(clash)  # record 0 is stored already
    assert [e.message for e in any_store.events(stream.id)] == ["first"]
    assert any_store.points(job.id) == [] and any_store.metric_names(job.id) == []
    assert any_store.stream("job/algo-1-1").records == 1  # type: ignore[union-attr]
    assert any_store.get_job("job").diagnostics == []  # type: ignore[union-attr]


def test_a_batch_written_again_after_a_lost_reply_is_stored_once(any_store: Store) -> None:
    """The job's writer tries a batch again when the store's reply was lost, committed or not."""
    job = new_job(any_store)
    stream = any_store.add_stream(job.id, "algo-1", "job/algo-1-1", 1000)

    def batch() -> Batch:
        return Batch(job.id, chunks=[(stream.id, 0, 2, 10, "a\nloss=1"), (stream.id, 2, 1, 20, "loss=2")],
                     points=[("loss", 10, 1.0, "algo-1", stream.id, 1), ("loss", 20, 2.0, "algo-1", stream.id, 2)],
                     stream_stats={stream.id: (3, 14, 20)})

    any_store.write_batch(batch())
    any_store.write_batch(batch())  # committed the first time: nothing changes
    assert [e.message for e in any_store.events(stream.id)] == ["a", "loss=1", "loss=2"]
    assert [p.value for p in any_store.points(job.id)] == [1.0, 2.0]
    after = any_store.stream("job/algo-1-1")
    assert after is not None and (after.records, after.stored_bytes) == (3, 14)
    other = Batch(job.id, chunks=[(stream.id, 0, 1, 10, "a")], points=[("loss", 10, 9.0, "algo-1", stream.id, 0)])
    with pytest.raises(StoreError):
        any_store.write_batch(other)  # another batch for records already stored is refused, not dropped
    assert [p.value for p in any_store.points(job.id)] == [1.0, 2.0]


def test_log_text_round_trips_exactly(any_store: Store) -> None:
    job = new_job(any_store)
    stream = any_store.add_stream(job.id, "algo-1", "job/algo-1-1", 1)
    records = ["", "tab\there", "carriage\rreturn", "nul\x00byte", "ünïcödé ✓ 🚀", "\ufffd replaced", " ", "#011"]
    any_store.write_batch(Batch(job.id, chunks=[(stream.id, 0, len(records), 5, "\n".join(records))]))
    assert [e.message for e in any_store.events(stream.id)] == records


def _paging_stream(store: Store) -> tuple[int, list[EventRow]]:
    """A stream of 600 records in chunks of 1 to 5 (more than one page of 64 chunks) whose
    times rise by 10 ms per chunk, every third chunk at the same time as the one before."""
    job = new_job(store)
    stream = store.add_stream(job.id, "algo-1", "job/algo-1-1", 0)
    records: list[EventRow] = []
    chunks = []
    seq, stamp, index = 0, 1000, 0
    while seq < 600:
        count = min(1 + index % 5, 600 - seq)
        if index % 3:
            stamp += 10
        lines = [f"record {seq + i}" for i in range(count)]
        chunks.append((stream.id, seq, count, stamp, "\n".join(lines)))
        records += [EventRow(stream.id, seq + i, stamp, line) for i, line in enumerate(lines)]
        seq, index = seq + count, index + 1
    for start in range(0, len(chunks), 50):  # several batches
        store.write_batch(Batch(job.id, chunks=chunks[start:start + 50]))
    return stream.id, records


def _expected(records: list[EventRow], after_seq: int = -1, before_seq: int | None = None, start_ms: int | None = None,
              end_ms: int | None = None, limit: int = 10_000, newest_first: bool = False) -> list[EventRow]:
    chosen = [r for r in records if after_seq < r.seq < (before_seq if before_seq is not None else 2**62)
              and (start_ms is None or r.timestamp_ms >= start_ms) and (end_ms is None or r.timestamp_ms < end_ms)]
    return chosen[-limit:] if newest_first else chosen[:limit]


PAGING_CASES: list[dict[str, Any]] = [
    {},
    {"limit": 1},
    {"limit": 7},
    {"after_seq": 0, "limit": 3},
    {"after_seq": 2, "limit": 5},  # starts inside a chunk
    {"after_seq": 298, "limit": 150},  # crosses pages of chunks
    {"after_seq": 599},
    {"after_seq": 700},
    {"before_seq": 0},
    {"before_seq": 10, "newest_first": True, "limit": 4},
    {"newest_first": True, "limit": 1},
    {"newest_first": True, "limit": 333},
    {"newest_first": True, "after_seq": 590},
    {"after_seq": 100, "before_seq": 103},
    {"after_seq": 100, "before_seq": 400, "newest_first": True, "limit": 250},
    {"start_ms": 1500},
    {"start_ms": 1500, "limit": 3},
    {"start_ms": 1500, "end_ms": 1600},
    {"end_ms": 1050, "newest_first": True, "limit": 2},
    {"start_ms": 1500, "after_seq": 400, "limit": 10},
    {"start_ms": 1500, "newest_first": True, "limit": 10},
    {"start_ms": 99_999},
    {"end_ms": 1000},
    {"start_ms": 1200, "end_ms": 1200},
]


@pytest.mark.parametrize(("after_seq", "limit"), [(-1, 10_000), (-1, 1), (0, 4), (2, 5), (298, 150), (599, 10),
                                                (700, 10)])
def test_log_text_gives_the_records_from_where_a_reader_left_off(any_store: Store, after_seq: int,
                                                                  limit: int) -> None:
    stream_id, records = _paging_stream(any_store)
    text, last = any_store.log_text(stream_id, after_seq=after_seq, limit=limit)
    wanted = [r.message for r in records if r.seq > after_seq]
    lines = text.split("\n")
    assert text == "" or text.endswith("\n")
    got = lines[:-1]
    assert got == wanted[:len(got)] and len(got) >= min(limit, len(wanted))  # whole chunks, at least limit
    assert last == (after_seq + len(got) if got else after_seq)
    walked, position = [], -1
    while True:  # read a chunk or so at a time, every record once
        text, position_after = any_store.log_text(stream_id, after_seq=position, limit=3)
        if not text:
            break
        walked += text.split("\n")[:-1]
        position = position_after
    assert walked == [r.message for r in records]


def test_events_paging_forward_and_backward_with_time_filters(any_store: Store) -> None:
    stream_id, records = _paging_stream(any_store)
    assert any_store.events(stream_id) == records
    for case in PAGING_CASES:
        assert any_store.events(stream_id, **case) == _expected(records, **case), case
    # walking the whole stream a page at a time, both ways, gives every record once
    forward: list[EventRow] = []
    while page := any_store.events(stream_id, after_seq=forward[-1].seq if forward else -1, limit=37):
        forward += page
    backward: list[EventRow] = []
    while page := any_store.events(stream_id, before_seq=backward[0].seq if backward else None, limit=41,
                                   newest_first=True):
        backward = page + backward
    assert forward == backward == records
    assert any_store.events(stream_id + 1000) == []
    # the chunks from any record on, each whole: the one holding it first, and those in a time range
    for after in (-1, 0, records[len(records) // 2].seq, records[-1].seq, records[-1].seq + 5):
        chunks = list(any_store.log_chunks(stream_id, after_seq=after))
        assert chunks and chunks[0][0] <= max(0, after + 1)  # (past the end: the last chunk, to find nothing in)
        assert [EventRow(stream_id, first + i, stamp, message) for first, _, stamp, text in chunks
                for i, message in enumerate(text.split("\n"))] == [r for r in records if r.seq >= chunks[0][0]]
    start, end = records[1].timestamp_ms, records[-1].timestamp_ms
    in_range = list(any_store.log_chunks(stream_id, start_ms=start, end_ms=end))
    assert in_range and all(start <= stamp < end for _, _, stamp, _ in in_range)
    assert sum(count for _, count, _, _ in in_range) == sum(1 for r in records if start <= r.timestamp_ms < end)
    assert list(any_store.log_chunks(stream_id + 1000)) == []


# -- points --------------------------------------------------------------------------------


def _points_job(store: Store, name: str = "job") -> tuple[JobRow, int, int]:
    job = new_job(store, name)
    one = store.add_stream(job.id, "algo-1", f"{name}/algo-1-1", 0)
    two = store.add_stream(job.id, "algo-2", f"{name}/algo-2-1", 0)
    store.write_batch(Batch(job.id, points=[
        ("loss", 100, 3.0, "algo-1", one.id, 0),
        ("acc", 100, 0.1, "algo-1", one.id, 0),
        ("loss", 100, 2.5, "algo-2", two.id, 0),
        ("loss", 200, 2.0, "algo-1", one.id, 1),
        ("loss", 300, None, "algo-1", one.id, 2),  # NaN
        ("acc", 300, 0.7, "algo-2", two.id, 1),
    ]))
    store.write_batch(Batch(job.id, points=[
        ("loss", 400, math.inf, "algo-2", two.id, 2),
        ("loss", 400, 1.5, "algo-2", two.id, 3),  # same time: written later, so it is the last
        ("lr", 400, -math.inf, "algo-1", one.id, 3),
        ("lr", 500, math.nan, "algo-1", one.id, 4),
    ]))
    return job, one.id, two.id


def test_points_in_time_then_log_order_with_filters(any_store: Store) -> None:
    job, one, two = _points_job(any_store)
    everything = any_store.points(job.id)
    assert [(p.name, p.timestamp_ms, p.host) for p in everything] == [
        ("acc", 100, "algo-1"), ("loss", 100, "algo-1"), ("loss", 100, "algo-2"), ("loss", 200, "algo-1"),
        ("loss", 300, "algo-1"), ("acc", 300, "algo-2"), ("lr", 400, "algo-1"), ("loss", 400, "algo-2"),
        ("loss", 400, "algo-2"), ("lr", 500, "algo-1")]
    assert [(p.stream_id, p.seq) for p in everything[:3]] == [(one, 0), (one, 0), (two, 0)]
    loss = any_store.points(job.id, names=["loss"], host="algo-2")
    assert [(p.timestamp_ms, p.value) for p in loss] == [(100, 2.5), (400, math.inf), (400, 1.5)]
    assert [p.name for p in any_store.points(job.id, names=["acc", "lr"], start_ms=300, end_ms=500)] == ["acc", "lr"]
    assert any_store.points(job.id, names=["nothing"]) == [] and any_store.points(job.id + 99) == []
    assert any_store.metric_names(job.id) == ["acc", "loss", "lr"]


def test_nan_and_infinity(any_store: Store) -> None:
    job, _, _ = _points_job(any_store)
    values = {(p.name, p.timestamp_ms, p.seq): p.value for p in any_store.points(job.id)}
    assert math.isnan(values[("loss", 300, 2)]) and math.isnan(values[("lr", 500, 4)])  # None and nan both read as NaN
    assert values[("loss", 400, 2)] == math.inf and values[("lr", 400, 3)] == -math.inf
    # final metrics and summaries skip NaN and the infinities; the counts include them
    assert any_store.final_metrics(job.id) == [("acc", 0.7, 300), ("loss", 1.5, 400)]
    assert any_store.metric_summaries(job.id) == {"acc": (2, 0.1, 0.7), "loss": (6, 1.5, 3.0), "lr": (2, None, None)}


def test_final_metrics_is_the_last_finite_value(any_store: Store) -> None:
    job = new_job(any_store)
    stream = any_store.add_stream(job.id, "algo-1", "job/algo-1-1", 0)
    any_store.write_batch(Batch(job.id, points=[
        ("a", 10, 1.0, "algo-1", stream.id, 0), ("a", 30, 3.0, "algo-1", stream.id, 2),
        ("a", 20, 2.0, "algo-1", stream.id, 1),  # written after, but older
        ("b", 10, None, "algo-1", stream.id, 0),  # only NaN: no final value
        ("c", 50, 7.0, "algo-1", stream.id, 3), ("c", 50, 8.0, "algo-1", stream.id, 4),
        ("c", 60, math.nan, "algo-1", stream.id, 5),
        ("d", 5, -1e308, "algo-1", stream.id, 6), ("d", 6, 1.7976931348623157e308, "algo-1", stream.id, 7),
    ]))
    assert any_store.final_metrics(job.id) == [("a", 3.0, 30), ("c", 8.0, 50), ("d", 1.7976931348623157e308, 6)]
    assert any_store.metric_summaries(job.id)["d"] == (2, -1e308, 1.7976931348623157e308)
    assert any_store.final_metrics(job.id + 1) == [] and any_store.metric_summaries(job.id + 1) == {}
    other = new_job(any_store, "other")
    any_store.write_batch(Batch(other.id, points=[("z", 1, 4.0, "algo-1", stream.id, 0)]))
    assert any_store.final_metrics_of([other.id, job.id, other.id + 99, job.id]) == {
        job.id: [("a", 3.0, 30), ("c", 8.0, 50), ("d", 1.7976931348623157e308, 6)], other.id: [("z", 4.0, 1)]}
    assert any_store.final_metrics_of([]) == {}


# -- CloudWatch metrics --------------------------------------------------------------------


def test_put_samples_and_metric_samples(any_store: Store) -> None:
    cpu_a, cpu_b = key("CPU", Host="a"), key("CPU", Host="b")
    cpu_ab = key("CPU", Host="a", Zone="z")
    any_store.put_samples([
        (cpu_a, 60, [Sample(1000, 1.0, 10.0, 10.0, 10.0, 10.0, "Percent"), Sample(3000, 2.0, 50.0, 20.0, 30.0, None)]),
        (cpu_b, 1, [Sample(2000, 1.0, 5.0, 5.0, 5.0, 5.0, "Percent")]),
        (cpu_ab, 60, [Sample(2000, 1.0, 1.0, 1.0, 1.0, 1.0)]),
    ])
    any_store.put_samples([(cpu_a, 60, [Sample(2000, 1.0, 15.0, 15.0, 15.0, 15.0, "Percent")])])
    assert any_store.metric_samples(cpu_a, 0, 10_000) == [
        Sample(1000, 1.0, 10.0, 10.0, 10.0, 10.0, "Percent"), Sample(2000, 1.0, 15.0, 15.0, 15.0, 15.0, "Percent"),
        Sample(3000, 2.0, 50.0, 20.0, 30.0, None, "None")]
    assert [s.timestamp_ms for s in any_store.metric_samples(cpu_a, 1000, 3000)] == [1000, 2000]  # [start, end)
    assert any_store.metric_samples(cpu_b, 0, 10_000) == [Sample(2000, 1.0, 5.0, 5.0, 5.0, 5.0, "Percent")]
    assert [s.sum for s in any_store.metric_samples(cpu_ab, 0, 10_000)] == [1.0]  # the exact dimension set
    assert any_store.metric_samples(key("CPU"), 0, 10_000) == []
    assert any_store.metric_samples(key("CPU", namespace="Other", Host="a"), 0, 10_000) == []


def test_put_samples_is_all_or_nothing(any_store: Store) -> None:
    good = (key("Good"), 60, [Sample(1000, 1.0, 1.0, 1.0, 1.0, 1.0)])
    bad = (MetricKey(None, "Bad", ()), 60, [Sample(1000, 1.0, 1.0, 1.0, 1.0, 1.0)])  # type: ignore[arg-type]  # a namespace is required
    with pytest.raises(StoreError):
        any_store.put_samples([good, bad])
    assert any_store.metric_keys() == [] and any_store.metric_samples(key("Good"), 0, 10_000) == []


def test_put_samples_accepts_long_dimension_sets(any_store: Store) -> None:
    many = key("Wide", **{f"Dim{i:02}": "v" * 1024 for i in range(30)})  # CloudWatch's limits: 30 of 1,024 chars
    any_store.put_samples([(many, 60, [Sample(1000, 1.0, 2.0, 2.0, 2.0, 2.0)])])
    any_store.put_samples([(many, 60, [Sample(2000, 1.0, 3.0, 3.0, 3.0, 3.0)])])
    assert [s.sum for s in any_store.metric_samples(many, 0, 10_000)] == [2.0, 3.0]
    assert any_store.metric_keys(name="Wide") == [(many, 2000)]


def test_metric_keys_list_put_metrics_and_jobs_metrics(any_store: Store) -> None:
    job, _, _ = _points_job(any_store, "train-1")
    any_store.put_samples([
        (key("CPU", Host="a"), 60, [Sample(5000, 1.0, 1.0, 1.0, 1.0, 1.0), Sample(4000, 1.0, 1.0, 1.0, 1.0, 1.0)]),
        (key("Mem", namespace="Sys"), 60, [Sample(10, 1.0, 1.0, 1.0, 1.0, 1.0)]),
        (key("loss", namespace=JOB_NAMESPACE, TrainingJobName="train-1"), 60, [Sample(9000, 1.0, 1.0, 1.0, 1.0, 1.0)]),
    ])
    job_key = key("acc", namespace=JOB_NAMESPACE, TrainingJobName="train-1")
    assert any_store.metric_keys() == [  # by namespace ("/aws/..." first), name, dimensions
        (job_key, 300),
        (key("loss", namespace=JOB_NAMESPACE, TrainingJobName="train-1"), 9000),  # the newer of put and points
        (key("lr", namespace=JOB_NAMESPACE, TrainingJobName="train-1"), 500),
        (key("CPU", Host="a"), 5000),
        (key("Mem", namespace="Sys"), 10),
    ]
    assert any_store.metric_keys(namespace="Sys") == [(key("Mem", namespace="Sys"), 10)]
    assert [k.name for k, _ in any_store.metric_keys(namespace=JOB_NAMESPACE)] == ["acc", "loss", "lr"]
    assert any_store.metric_keys(namespace=JOB_NAMESPACE, name="lr") == [
        (key("lr", namespace=JOB_NAMESPACE, TrainingJobName="train-1"), 500)]
    assert any_store.metric_keys(name="nothing") == []
    # a job's metric reads as CloudWatch datapoints: its finite points, one sample each
    assert [(s.timestamp_ms, s.value) for s in any_store.metric_samples(job_key, 0, 10_000)] == [(100, 0.1), (300, 0.7)]
    loss = any_store.metric_samples(key("loss", namespace=JOB_NAMESPACE, TrainingJobName="train-1"), 0, 10_000)
    assert [(s.timestamp_ms, s.value) for s in loss] == [(100, 3.0), (100, 2.5), (200, 2.0), (400, 1.5), (9000, 1.0)]
    assert job.id > 0


# -- several writers -----------------------------------------------------------------------

WORKERS, THREADS, BATCHES = 4, 2, 15


def _writer(target: StoreTarget, job_id: int, worker: int, start: Any) -> None:
    """One process: two threads share one store object, each writing its own stream's batches,
    CloudWatch datapoints and updates of the job."""
    store = target.open()
    streams = [store.add_stream(job_id, f"algo-{worker}", f"job/algo-{worker}-{thread}", 0) for thread in range(THREADS)]
    start.wait(timeout=60)

    def bump(row: JobRow) -> None:
        row.doc["Bumps"] = row.doc.get("Bumps", 0) + 1

    def write(stream_id: int, thread: int) -> None:
        for batch in range(BATCHES):
            stamp = 1000 + batch * 10 + worker
            chunks = [(stream_id, batch * 6 + i * 2, 2, stamp, f"w{worker}t{thread}b{batch}r{i}a\nmore") for i in range(3)]
            points = [(name, stamp, float(batch), f"algo-{worker}", stream_id, batch * 6)
                      for name in ("loss", "acc", f"own-{worker}")]
            store.write_batch(Batch(job_id, chunks=chunks, points=points, stream_stats={stream_id: (6, 60, stamp)},
                                    diagnostics=[{"Worker": worker}]))
            store.update_job("job", bump)  # read-modify-write of one row, against the others
            store.put_samples([(key("Shared"), 60, [Sample(stamp, 1.0, 1.0, 1.0, 1.0, 1.0)]),
                               (key("Own", Worker=str(worker)), 60, [Sample(stamp, 1.0, 1.0, 1.0, 1.0, 1.0)])])

    threads = [threading.Thread(target=write, args=(s.id, t)) for t, s in enumerate(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    store.close()


def test_several_processes_write_at_once(store_target: StoreTarget, any_store: Store) -> None:
    job = new_job(any_store)
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(WORKERS)
    workers = [context.Process(target=_writer, args=(store_target, job.id, w, start)) for w in range(WORKERS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=90)
    assert [w.exitcode for w in workers] == [0] * WORKERS, "a writer failed: see its traceback above"

    streams = any_store.streams(job.id)
    assert len(streams) == WORKERS * THREADS
    for stream in streams:
        events = any_store.events(stream.id)
        assert [e.seq for e in events] == list(range(BATCHES * 6))
        assert (stream.records, stream.stored_bytes) == (BATCHES * 6, BATCHES * 60)
    points = any_store.points(job.id)
    assert len(points) == WORKERS * THREADS * BATCHES * 3
    assert any_store.metric_names(job.id) == ["acc", "loss", *[f"own-{w}" for w in range(WORKERS)]]
    newest = 1000 + (BATCHES - 1) * 10
    assert any_store.final_metrics(job.id)[0] == ("acc", float(BATCHES - 1), newest + WORKERS - 1)
    keys = dict(any_store.metric_keys(namespace="App"))
    assert keys[key("Shared")] == newest + WORKERS - 1
    assert all(keys[key("Own", Worker=str(w))] == newest + w for w in range(WORKERS))
    assert len(any_store.metric_samples(key("Shared"), 0, 10**9)) == WORKERS * THREADS * BATCHES
    assert any_store.get_job("job").doc["Bumps"] == WORKERS * THREADS * BATCHES  # type: ignore[union-attr]  # none lost


# -- end to end: a real job in PostgreSQL --------------------------------------------------

DEFS = '[{"Name": "train:error", "Regex": "Train_error=(.*?);"}]'


def test_trainmon_run_stores_its_job_in_postgres(home: Path, postgres_url: str, script) -> None:
    train = script(
        """
        for epoch in range(1, 4):
            print(f"epoch {epoch} Train_error={0.5 / epoch:.3f};")
        print("Train_error=nan;")
        """
    )
    env = {"TRAINMON_DATABASE_URL": postgres_url}
    result = run_cli("run", "--name", "pg-job", "--metric-definitions", DEFS, "--", PY, str(train), env=env)
    assert result.returncode == 0, result.stderr
    described = json.loads(run_cli("describe", "pg-job", "--json", env=env, check=True).stdout)
    assert described["TrainingJobStatus"] == "Completed"
    assert [(m["MetricName"], m["Value"]) for m in described["FinalMetricDataList"]] == [("train:error", 0.167)]
    assert not (home / "trainmon.db").exists()  # nothing went to SQLite
    assert run_cli("describe", "pg-job").returncode != 0  # and without the URL, the job is not there

    store = open_store(home, database_url=postgres_url)
    job = store.get_job("pg-job")
    assert job is not None and type(store).__name__ == "PostgresStore"
    (stream,) = store.streams(job.id)
    assert [e.message for e in store.events(stream.id)][-1] == "Train_error=nan;"
    store.close()


def test_a_detached_job_follows_its_clients_store(home: Path, postgres_url: str, script) -> None:
    """create_training_job starts a supervisor process: it must open the client's store, not SQLite."""
    import trainmon

    train = script("print('Train_error=0.25;')")
    store = open_store(home, database_url=postgres_url)  # the URL is not in the environment
    sagemaker = trainmon.client("sagemaker", store=store)
    sagemaker.create_training_job(
        TrainingJobName="detached", RoleArn="arn:aws:iam::123456789012:role/local",
        AlgorithmSpecification={"TrainingInputMode": "File", "ContainerEntrypoint": [PY, str(train)],
                                "MetricDefinitions": json.loads(DEFS)},
        OutputDataConfig={"S3OutputPath": str(home / "out")},
        ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
        StoppingCondition={"MaxRuntimeInSeconds": 120},
    )
    sagemaker.get_waiter("training_job_completed_or_stopped").wait(
        TrainingJobName="detached", WaiterConfig={"Delay": 0.1, "MaxAttempts": 600})
    described = sagemaker.describe_training_job(TrainingJobName="detached")
    assert [(m["MetricName"], m["Value"]) for m in described["FinalMetricDataList"]] == [("train:error", 0.25)]
    assert not (home / "trainmon.db").exists()
    store.close()


# -- choosing and opening a backend --------------------------------------------------------


def test_open_store_chooses_the_backend_by_url(tmp_path: Path, postgres_url: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from trainmon.store.postgres import PostgresStore

    sqlite = open_store(tmp_path)
    assert isinstance(sqlite, SqliteStore) and sqlite.home == tmp_path and sqlite.database_url is None
    monkeypatch.setenv("TRAINMON_DATABASE_URL", postgres_url)
    postgres = open_store(tmp_path)
    assert isinstance(postgres, PostgresStore) and postgres.home == tmp_path and postgres.database_url == postgres_url
    assert isinstance(open_store(tmp_path, database_url=""), SqliteStore)  # an empty URL means SQLite
    for bad in ("mysql://db/x", "trainmon.db"):
        with pytest.raises(StoreError, match="TRAINMON_DATABASE_URL.*postgresql://"):
            open_store(tmp_path, database_url=bad)
    sqlite.close()
    postgres.close()


def test_postgres_errors_say_where_and_hide_the_password(tmp_path: Path, postgres_server: PostgresServer) -> None:
    from trainmon.store.postgres import PostgresStore, redact

    assert redact("postgresql://me:secret@db:5432/x?sslmode=require") == "postgresql://me:***@db:5432/x?sslmode=require"
    closed = f"postgresql://me:secret@127.0.0.1:{free_port()}/nothing"  # nothing listens there
    with pytest.raises(StoreError, match=r"cannot reach the store at postgresql://me:\*\*\*@127.0.0.1") as caught:
        PostgresStore(closed, tmp_path)
    assert "secret" not in str(caught.value)
    with pytest.raises(StoreError, match="cannot reach.*does_not_exist"):
        PostgresStore(postgres_server.url("does_not_exist"), tmp_path)


def test_postgres_migrates_once_and_refuses_a_newer_schema(tmp_path: Path, postgres_url: str) -> None:
    import psycopg

    from trainmon.store.postgres import _MIGRATIONS as postgres_migrations
    from trainmon.store.postgres import PostgresStore

    first = PostgresStore(postgres_url, tmp_path)
    new_job(first, "kept")
    second = PostgresStore(postgres_url, tmp_path)  # opening again migrates nothing and keeps the data
    assert second.get_job("kept") is not None
    with psycopg.connect(postgres_url, autocommit=True) as db:
        assert db.execute("SELECT version FROM schema_version").fetchall() == [(len(postgres_migrations),)]
        db.execute("UPDATE schema_version SET version = 99")
    with pytest.raises(StoreError, match="schema version 99, newer than this trainmon knows .*upgrade trainmon"):
        PostgresStore(postgres_url, tmp_path)
    first.close()
    second.close()


def test_a_store_of_the_row_per_point_schema_is_migrated_to_series(tmp_path: Path) -> None:
    """Stores made before series and chunks (a row per point and per datapoint) keep their data."""
    import sqlite3

    from trainmon.store.sqlite import _MIGRATIONS as sqlite_migrations

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    for script in sqlite_migrations[:2]:
        db.executescript(str(script))
    db.execute("INSERT INTO jobs (name, status, creation_time, last_modified_time, doc) VALUES "
               "('old', 'Completed', 0, 0, '{}')")
    db.execute("INSERT INTO log_streams (job_id, host, name, creation_ms) VALUES (1, 'algo-1', 'old/algo-1-0', 0)")
    db.executemany("INSERT INTO points VALUES (1, ?, ?, ?, 'algo-1', 1, ?)",
                   [("loss", 1000, 2.0, 0), ("loss", 2000, None, 1), ("loss", 3000, 1.5, 2), ("acc", 3000, 0.5, 2)])
    db.execute("INSERT INTO metrics VALUES (1, 'Custom', 'Requests', '[]', 5000)")
    db.execute("INSERT INTO datapoints VALUES (1, 5000, 60, 3, 6, 1, 3, NULL, 'Count')")
    db.execute("PRAGMA user_version=2")
    db.commit()
    db.close()
    store = SqliteStore(path)
    try:
        assert [(p.name, p.timestamp_ms, p.seq) for p in store.points(1)] == [
            ("loss", 1000, 0), ("loss", 2000, 1), ("acc", 3000, 2), ("loss", 3000, 2)]
        assert math.isnan(store.points(1)[1].value)
        assert store.final_metrics(1) == [("acc", 0.5, 3000), ("loss", 1.5, 3000)]
        assert store.metric_summaries(1) == {"loss": (3, 1.5, 2.0), "acc": (1, 0.5, 0.5)}
        assert store.metric_samples(key("Requests", namespace="Custom"), 0, 10_000) == [
            Sample(5000, 3.0, 6.0, 1.0, 3.0, None, "Count")]
        tables = {row[0] for row in store._read("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"points", "datapoints", "metrics", "job_metrics"}.isdisjoint(tables)
    finally:
        store.close()


def test_log_chunks_of_an_older_store_read_as_they_were_and_new_ones_are_packed(tmp_path: Path) -> None:
    """Log text was stored as text; a store made before packing keeps those rows as they are, and
    new chunks are stored as the bytes read, compressed when that pays, invalid UTF-8 replaced on reading."""
    import sqlite3

    store = SqliteStore(tmp_path / "trainmon.db")
    job = new_job(store, "older")
    stream = store.add_stream(job.id, "algo-1", "older/algo-1-1", 0)
    store.close()
    db = sqlite3.connect(tmp_path / "trainmon.db")
    db.execute("ALTER TABLE log_chunks DROP COLUMN packing")  # the schema before packed chunks
    db.execute("PRAGMA user_version=7")
    db.execute("INSERT INTO log_chunks VALUES (?, 0, 2, 10, ?)", (stream.id, "époque 1\nloss=0.5"))
    db.commit()
    db.close()
    store = SqliteStore(tmp_path / "trainmon.db")
    try:
        flood = "\n".join(f"step {i} loss={i / 7:.5f}" for i in range(2, 2000)).encode()
        store.write_batch(Batch(job.id, chunks=[(stream.id, 2, 1998, 20, flood), (stream.id, 2000, 1, 30, b"bad \xff byte")],
                                stream_stats={stream.id: (1999, len(flood) + 10, 30)}))
        text, last = store.log_text(stream.id)
        assert last == 2000
        assert text == "époque 1\nloss=0.5\n" + flood.decode() + "\nbad \ufffd byte\n"
        stored = dict(store._read("SELECT first_seq, packing FROM log_chunks"))  # type: ignore[attr-defined]
        assert stored == {0: 0, 2: 1, 2000: 0}  # the flood compressed, the short chunk as it is
        size = store._read("SELECT length(text) FROM log_chunks WHERE first_seq = 2")[0][0]  # type: ignore[attr-defined]
        assert size < len(flood) / 3
        assert [e.message for e in store.events(stream.id, after_seq=1998, limit=2)] == ["step 1999 loss=285.57143",
                                                                                        "bad \ufffd byte"]
    finally:
        store.close()


def _flood_text(lines: int, seed: int = 0) -> bytes:
    """Lines that pack to more than the chunk size kept beside the database (hex digits: about 2x)."""
    import random

    rng = random.Random(seed)
    return "\n".join(f"step {i} {rng.getrandbits(256):064x}" for i in range(lines)).encode()


def test_a_floods_log_chunks_are_kept_beside_the_database_and_read_back(tmp_path: Path) -> None:
    """A chunk whose packed text is large (a flood's) is appended to its stream's file beside the
    database, the row holding where; a short one stays in the database; both read back as written,
    from the store that wrote them and from one opened later."""
    from trainmon.store.codec import TEXT_BESIDE
    from trainmon.store.sqlite.beside import BESIDE_BYTES

    store = SqliteStore(tmp_path / "trainmon.db")
    job = new_job(store, "flood")
    stream = store.add_stream(job.id, "algo-1", "flood/algo-1-1", 0)
    first, second = _flood_text(3000, 1), _flood_text(2500, 2)
    try:
        store.write_batch(Batch(job.id, chunks=[(stream.id, 0, 3000, 10, first), (stream.id, 3000, 1, 20, b"short")],
                                stream_stats={stream.id: (3001, len(first) + 5, 20)}))
        store.write_batch(Batch(job.id, chunks=[(stream.id, 3001, 2500, 30, second)],
                                stream_stats={stream.id: (2500, len(second), 30)}))
        rows = store._read("SELECT first_seq, packing, length(text) FROM log_chunks ORDER BY first_seq")  # type: ignore[attr-defined]
        assert [(seq, bool(packing & TEXT_BESIDE), size) for seq, packing, size in rows] == [
            (0, True, 20), (3000, False, 5), (3001, True, 20)]
        kept = tmp_path / "trainmon.db-logs" / str(stream.id)
        assert kept.stat().st_size >= 2 * BESIDE_BYTES
        assert kept.stat().st_mode & 0o777 == 0o600 and kept.parent.stat().st_mode & 0o777 == 0o700
        expected = first.decode() + "\nshort\n" + second.decode() + "\n"
        assert store.log_text(stream.id) == (expected, 5500)
        assert [e.message for e in store.events(stream.id, after_seq=2998, limit=3)] == [
            first.decode().rsplit("\n", 1)[1], "short", second.decode().split("\n", 1)[0]]
    finally:
        store.close()
    again = SqliteStore(tmp_path / "trainmon.db")
    try:
        assert again.log_text(stream.id) == (expected, 5500)
    finally:
        again.close()


def test_a_deleted_jobs_files_beside_the_database_go_with_it(tmp_path: Path) -> None:
    """Deleting a job removes its streams' files; a stream given the number of one whose file was left
    (a crash between the two) starts a file of its own, holding only its own chunks."""
    store = SqliteStore(tmp_path / "trainmon.db")
    try:
        job = new_job(store, "gone")
        stream = store.add_stream(job.id, "algo-1", "gone/algo-1-1", 0)
        text = _flood_text(3000)
        store.write_batch(Batch(job.id, chunks=[(stream.id, 0, 3000, 10, text)],
                                stream_stats={stream.id: (3000, len(text), 10)}))
        kept = store.log_files.path(stream.id)
        assert kept.exists()
        store.delete_job("gone")
        assert not kept.exists()
        kept.write_bytes(b"left by a stream whose job's deletion did not finish")
        job = new_job(store, "next")
        reused = store.add_stream(job.id, "algo-1", "next/algo-1-1", 0)
        assert reused.id == stream.id  # (SQLite gives the number again)
        assert not kept.exists()
        other = _flood_text(2000, 3)
        store.write_batch(Batch(job.id, chunks=[(reused.id, 0, 2000, 10, other)],
                                stream_stats={reused.id: (2000, len(other), 10)}))
        assert store.log_text(reused.id) == (other.decode() + "\n", 1999)
    finally:
        store.close()


def test_a_chunk_whose_file_is_gone_reads_back_as_records_that_say_so(tmp_path: Path) -> None:
    """The database copied without the files beside it, or beside other files: every record of a chunk
    kept there still has its number and time, its text saying where it was; the chunks in the database
    read as they were."""
    store = SqliteStore(tmp_path / "trainmon.db")
    try:
        job = new_job(store, "moved")
        stream = store.add_stream(job.id, "algo-1", "moved/algo-1-1", 0)
        text = _flood_text(3000)
        store.write_batch(Batch(job.id, chunks=[(stream.id, 0, 3000, 10, text), (stream.id, 3000, 1, 20, b"last")],
                                stream_stats={stream.id: (3001, len(text) + 4, 20)}))
        kept = store.log_files.path(stream.id)
        held = kept.read_bytes()
        kept.write_bytes(held[:1] + bytes([held[1] ^ 1]) + held[2:])  # other bytes where the row says
        lost = {f"[trainmon: this record's text was kept in trainmon.db-logs/{stream.id}, which no longer holds it]"}
        for _ in ("other bytes", "no file"):
            events = store.events(stream.id, limit=5000)
            assert [e.seq for e in events] == list(range(3001))
            assert {e.message for e in events[:3000]} == lost
            assert events[-1].message == "last"
            kept.unlink(missing_ok=True)
    finally:
        store.close()


def test_what_a_failed_or_repeated_batch_wrote_beside_the_database_is_not_kept(tmp_path: Path) -> None:
    """A batch whose transaction fails after its texts were appended (here a chunk stored already) has
    them cut back off the files; a batch written again once stored appends nothing."""
    store = SqliteStore(tmp_path / "trainmon.db")
    try:
        job = new_job(store, "again")
        one, two = (store.add_stream(job.id, "algo-1", f"again/algo-{n}", 0) for n in (1, 2))
        first, second = _flood_text(3000, 4), _flood_text(3000, 5)
        batch = Batch(job.id, chunks=[(one.id, 0, 3000, 10, first), (two.id, 0, 3000, 10, second)],
                      stream_stats={one.id: (3000, len(first), 10), two.id: (3000, len(second), 10)})
        store.write_batch(batch)
        sizes = [store.log_files.path(s.id).stat().st_size for s in (one, two)]
        store.write_batch(batch)  # (its reply lost, say): stored once
        clashing = Batch(job.id, chunks=[(two.id, 3000, 3000, 20, first), (one.id, 0, 2999, 20, second)],
                         stream_stats={one.id: (2999, len(second), 20), two.id: (3000, len(first), 20)})
        with pytest.raises(StoreError):
            store.write_batch(clashing)  # its second chunk's number is taken: nothing of it stored
        assert [store.log_files.path(s.id).stat().st_size for s in (one, two)] == sizes
        assert store.log_text(one.id) == (first.decode() + "\n", 2999)
        assert store.log_text(two.id) == (second.decode() + "\n", 2999)
    finally:
        store.close()


def test_a_chunk_that_cannot_be_written_beside_the_database_stores_nothing_of_its_batch(tmp_path: Path) -> None:
    """A full disk (the stream's file is /dev/full) or a path that is not a directory: the batch is
    refused with the store's error, a full disk as such, and nothing of it is stored; once the disk
    has room, the same batch is stored whole."""
    from trainmon.errors import StoreFull

    store = SqliteStore(tmp_path / "trainmon.db")
    try:
        job = new_job(store, "full")
        stream = store.add_stream(job.id, "algo-1", "full/algo-1-1", 0)
        text = _flood_text(3000)
        batch = Batch(job.id, chunks=[(stream.id, 0, 1, 5, b"first"), (stream.id, 1, 3000, 10, text)],
                      stream_stats={stream.id: (3001, len(text) + 5, 10)})
        kept = store.log_files.path(stream.id)
        kept.parent.mkdir()
        kept.symlink_to("/dev/full")
        with pytest.raises(StoreFull, match="is full"):
            store.write_batch(batch)
        assert store._read("SELECT count(*) FROM log_chunks")[0][0] == 0  # type: ignore[attr-defined]
        assert store.streams(job.id)[0].records == 0
        kept.unlink()
        kept.parent.rmdir()
        kept.parent.write_text("not a directory")
        with pytest.raises(StoreError, match="trainmon.db-logs"):
            store.write_batch(batch)
        assert store._read("SELECT count(*) FROM log_chunks")[0][0] == 0  # type: ignore[attr-defined]
        kept.parent.unlink()
        store.write_batch(batch)
        assert store.log_text(stream.id) == ("first\n" + text.decode() + "\n", 3000)
    finally:
        store.close()


def test_log_chunks_of_a_store_keyed_without_rowids_are_kept_when_it_is_migrated(tmp_path: Path) -> None:
    """A store whose log chunks were a WITHOUT ROWID table (before the migration that gives them
    rowids) keeps every chunk, read as it was, and its chunks are then found by time as before; a chunk
    of no stream (left by an edit with foreign keys off) does not stop the migration."""
    import sqlite3

    from trainmon.store.sqlite import _MIGRATIONS as sqlite_migrations

    store = SqliteStore(tmp_path / "trainmon.db")
    job = new_job(store, "keyed")
    stream = store.add_stream(job.id, "algo-1", "keyed/algo-1-1", 0)
    store.close()
    db = sqlite3.connect(tmp_path / "trainmon.db")
    db.executescript(f"""
        DROP TABLE log_chunks;
        CREATE TABLE log_chunks (
            stream_id INTEGER NOT NULL REFERENCES log_streams (id) ON DELETE CASCADE,
            first_seq INTEGER NOT NULL, count INTEGER NOT NULL, timestamp_ms INTEGER NOT NULL, text TEXT NOT NULL,
            packing INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (stream_id, first_seq)) WITHOUT ROWID;
        CREATE INDEX log_chunks_by_time ON log_chunks (stream_id, timestamp_ms);
        PRAGMA user_version={len(sqlite_migrations) - 1};
    """)
    db.executemany("INSERT INTO log_chunks VALUES (?, ?, 2, ?, ?, 0)",
                   [(stream.id, 2 * n, 1000 * n, f"line {2 * n}\nline {2 * n + 1}") for n in range(50)])
    db.execute("INSERT INTO log_chunks VALUES (999, 0, 1, 0, 'of no stream', 0)")  # (foreign keys off, as here)
    db.commit()
    db.close()
    store = SqliteStore(tmp_path / "trainmon.db")
    try:
        assert [e.message for e in store.events(stream.id, limit=4)] == ["line 0", "line 1", "line 2", "line 3"]
        assert [e.seq for e in store.events(stream.id, start_ms=30_000, limit=2)] == [60, 61]
        assert store.log_text(stream.id)[0].count("\n") == 100
        (schema,) = store._read("SELECT sql FROM sqlite_master WHERE name = 'log_chunks'")[0]  # type: ignore[attr-defined]
        assert "WITHOUT ROWID" not in schema
        assert store._read("SELECT count(*) FROM log_chunks")[0][0] == 50  # type: ignore[attr-defined]
    finally:
        store.close()


def test_storing_log_chunks_reads_back_none_of_the_text_written_before(tmp_path: Path, monkeypatch) -> None:
    """A flood's writer inserts chunk after chunk of compressed text; finding each one's place must not
    read the texts already stored (the bytes this process reads stay a small part of what it writes)."""
    import os

    import trainmon.store.sqlite as sqlite_store

    monkeypatch.setattr(sqlite_store, "CHECKPOINT_BYTES", 1 << 40)  # (the checkpoint reads the log: not now)
    store = SqliteStore(tmp_path / "trainmon.db")
    try:
        job = new_job(store, "flood")
        stream = store.add_stream(job.id, "algo-1", "flood/algo-1-1", 0)

        def read_bytes() -> int:
            return int(dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())["rchar"])

        before = read_bytes()
        written = 0
        for batch in range(30):
            texts = [os.urandom(192 << 10) for _ in range(4)]  # (random: stored as they are, 192 KiB each)
            written += sum(map(len, texts))
            store.write_batch(Batch(job.id, chunks=[(stream.id, 4 * batch + n, 1, batch, text)
                                                    for n, text in enumerate(texts)],
                                    stream_stats={stream.id: (4, sum(map(len, texts)), batch)}))
        assert store.streams(job.id)[0].records == 120
        assert read_bytes() - before < written / 10
    finally:
        store.close()


def _into_the_log(noise: Any, size: int) -> list[bytes]:
    """Incompressible chunk texts of ``size`` bytes in all, each short enough to be kept in the database
    (a flood's larger ones go beside it): what is written is what the write-ahead log holds."""
    from trainmon.store.sqlite.beside import BESIDE_BYTES

    piece = BESIDE_BYTES // 2
    return [noise.randbytes(min(piece, size - at)).replace(b"\n", b" ") for at in range(0, size, piece)]


def test_the_write_ahead_log_is_copied_into_the_file_by_the_stores_thread_and_starts_again(tmp_path: Path) -> None:
    """A commit never syncs: past CHECKPOINT_BYTES of log, a thread of the store copies it into the
    database file (the writer itself would only past 64 MB), the next commit starts the log again
    from nothing, and everything reads back; closing the store ends the thread."""
    import random

    from trainmon.store.sqlite import CHECKPOINT_BYTES

    store = SqliteStore(tmp_path / "trainmon.db")
    wal = tmp_path / "trainmon.db-wal"
    try:
        job = new_job(store, "flood")
        stream = store.add_stream(job.id, "algo-1", "flood/algo-1-1", 0)
        assert store.checkpointer is not None and store.checkpointer.passes == 0
        empty_file = store.path.stat().st_size
        noise = random.Random(7)
        batches = [_into_the_log(noise, CHECKPOINT_BYTES // 2 + 4096) for _ in range(2)]
        number = 0
        for texts in batches:
            store.write_batch(Batch(job.id, chunks=[(stream.id, number + i, 1, 10, text) for i, text in enumerate(texts)],
                                    stream_stats={stream.id: (len(texts), sum(map(len, texts)), 10)}))
            number += len(texts)
        assert store.checkpointer.wait_for_pass(1, 60.0)
        assert store.path.stat().st_size - empty_file >= CHECKPOINT_BYTES  # copied, by the thread
        store.write_batch(Batch(job.id, chunks=[(stream.id, number, 1, 20, b"done")],
                                stream_stats={stream.id: (1, 4, 20)}))
        assert wal.stat().st_size < CHECKPOINT_BYTES  # the log started again
        assert store.checkpointer.passes == 1
        text, last = store.log_text(stream.id)
        assert last == number
        assert text == "\n".join(t.decode("utf-8", "replace") for t in [*batches[0], *batches[1], b"done"]) + "\n"
    finally:
        store.close()
    assert store.checkpointer._thread is not None and not store.checkpointer._thread.is_alive()


def test_the_stores_of_one_file_in_a_process_share_its_checkpointing_thread(tmp_path: Path) -> None:
    """A supervisor opens the file several times (its own store, the maintainer's, the rules'): one
    thread copies the log, whichever store committed, and it ends with the last store closed."""
    import random

    from trainmon.store.sqlite import CHECKPOINT_BYTES

    first = SqliteStore(tmp_path / "trainmon.db")
    second = SqliteStore(tmp_path / "." / "trainmon.db")
    assert first.checkpointer is not None and first.checkpointer is second.checkpointer
    job = new_job(first, "shared")
    stream = first.add_stream(job.id, "algo-1", "shared/algo-1-1", 0)
    texts = _into_the_log(random.Random(3), CHECKPOINT_BYTES + 4096)
    second.write_batch(Batch(job.id, chunks=[(stream.id, i, 1, 10, text) for i, text in enumerate(texts)],
                             stream_stats={stream.id: (len(texts), sum(map(len, texts)), 10)}))
    assert first.checkpointer.wait_for_pass(1, 60.0)
    thread = first.checkpointer._thread
    assert thread is not None
    second.close()
    second.close()  # (twice: given back once)
    assert thread.is_alive()  # the first store still writes
    first.close()
    assert not thread.is_alive()
    third = SqliteStore(tmp_path / "trainmon.db")
    try:
        assert third.checkpointer is not first.checkpointer and third.checkpointer is not None
        assert third.checkpointer.passes == 0
    finally:
        third.close()


def test_a_store_without_overviews_gains_the_column_and_keeps_its_chunks(tmp_path: Path) -> None:
    """A store of the schema before overviews: its chunks are read as they are (every point) until
    maintenance gives them overviews; new sealed chunks get theirs at once."""
    import sqlite3

    import numpy as np

    store = SqliteStore(tmp_path / "trainmon.db")
    job = new_job(store, "older")
    stream = store.add_stream(job.id, "algo-1", "older/algo-1-1", 0)
    store.write_batch(Batch(job.id, points=[("loss", 1000 + i, float(i), "algo-1", stream.id, i) for i in range(9000)]))
    store.close()
    db = sqlite3.connect(tmp_path / "trainmon.db")
    db.execute("DROP INDEX chunks_without_overview")  # the schema before overviews (and packed log chunks)
    db.execute("ALTER TABLE chunks DROP COLUMN overview")
    db.execute("ALTER TABLE log_chunks DROP COLUMN packing")
    db.execute("PRAGMA user_version=6")
    db.commit()
    db.close()
    store = SqliteStore(tmp_path / "trainmon.db")
    try:
        columns, held = store.chart_points(job.id, "loss", width=10)  # dense, but no chunk has an overview yet
        assert held == 9000 and np.array_equal(columns.values, np.arange(9000.0))
        store.write_batch(Batch(job.id, points=[("loss", 20_000 + i, 1.0, "algo-1", stream.id, 9000 + i)
                                                for i in range(9000)]))
        columns, held = store.chart_points(job.id, "loss", width=10)
        # the new full chunk gives at most 4 points a block (its last 808 points wait for maintenance)
        assert held == 18_000 and len(columns.stamps) <= 9000 + 4 * (8192 // 128) + 808
        assert store.maintain().overviews == 1  # the old full chunk gets its own; the two remainders merge
        columns, held = store.chart_points(job.id, "loss", width=10)
        assert held == 18_000 and len(columns.stamps) <= 4 * (2 * 8192 // 128) + 4 * -(-1616 // 128)
        assert np.array_equal(columns.values[columns.seqs < 8192], np.arange(9000.0)[columns.seqs[columns.seqs < 8192]])
    finally:
        store.close()


def test_postgres_store_needs_only_data_rights_once_migrated(tmp_path: Path, postgres_url: str,
                                                              postgres_server: PostgresServer) -> None:
    import psycopg

    from trainmon.store.postgres import PostgresStore

    PostgresStore(postgres_url, tmp_path).close()  # the owner creates the schema
    database = postgres_url.rsplit("/", 1)[1]
    role = f"writer_{database}"
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute(f"CREATE ROLE {role} LOGIN")
        db.execute(f"REVOKE CREATE ON SCHEMA public FROM PUBLIC, {role}")
        db.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}")
        db.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}")
    try:
        store = PostgresStore(postgres_url.replace("postgres@", f"{role}@"), tmp_path)
        job = new_job(store, "by-writer")
        store.write_batch(Batch(job.id, points=[("loss", 1, 1.0, "algo-1", 0, 0)]))
        assert store.final_metrics(job.id) == [("loss", 1.0, 1)]
        store.close()
    finally:
        postgres_server.drop_database(database)
        postgres_server.admin(f"DROP ROLE {role}")


def test_postgres_store_reconnects_after_the_connection_drops(tmp_path: Path, postgres_url: str) -> None:
    import psycopg

    from trainmon.store.postgres import PostgresStore

    store = PostgresStore(postgres_url, tmp_path)
    new_job(store, "before")

    def terminate() -> None:  # as a server restart would
        with psycopg.connect(postgres_url, autocommit=True) as db:
            db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE application_name = 'trainmon' AND datname = current_database()")

    before = store.get_job("before")
    assert before is not None
    store.write_batch(Batch(before.id, points=[("loss", 1, 0.5, "algo-1", 0, 0)]))
    terminate()
    assert store.get_job("before") is not None  # a read reconnects and runs again
    terminate()
    assert [p.value for p in store.points(before.id)] == [0.5]  # so does a read of several queries
    terminate()
    with pytest.raises(StoreError, match="cannot reach the store"):
        new_job(store, "lost")  # a write fails: whether it was committed is unknown, so the caller decides
    new_job(store, "after")  # and the next one reconnects
    assert [job.name for job in store.list_jobs()] == ["after", "before"]
    store.close()


def test_the_core_imports_and_explains_without_psycopg(tmp_path: Path) -> None:
    code = """
import sys
class NoPsycopg:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "psycopg":
            raise ImportError("No module named 'psycopg'")
sys.meta_path.insert(0, NoPsycopg())
from pathlib import Path
import trainmon, trainmon.cli, trainmon.sdk.clients, trainmon.store
from trainmon.errors import StoreError
trainmon.store.open_store(Path(sys.argv[1])).close()
try:
    trainmon.store.open_store(Path(sys.argv[1]), database_url="postgresql://localhost/x")
except StoreError as exc:
    print(exc)
"""
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "pip install 'trainmon[postgres]'" in result.stdout



def _open_and_close(url: str, home: str) -> str:
    try:
        open_store(Path(home), database_url=url).close()
        return "ok"
    except StoreError as exc:
        return str(exc)


def test_processes_opening_a_new_postgres_database_at_once_migrate_it_once(tmp_path: Path, postgres_url: str) -> None:
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        assert pool.starmap(_open_and_close, [(postgres_url, str(tmp_path))] * 4) == ["ok"] * 4


def test_a_metrics_points_as_columns_read_by_many_threads_at_once(any_store: Store) -> None:
    """point_columns: every point, in time order and then by stream and record, however many
    threads read at once (the server's chart requests decode outside the store's lock)."""
    import numpy as np

    job = new_job(any_store, "columns")
    streams = [any_store.add_stream(job.id, host, f"columns/{host}-1", 1000) for host in ("algo-1", "algo-2")]
    for first in range(0, 6000, 1000):  # two hosts, interleaved in time, in several batches
        any_store.write_batch(Batch(job.id, points=[
            ("loss", 10_000 + i // 2, float(i), f"algo-{1 + i % 2}", streams[i % 2].id, i // 2)
            for i in range(first, first + 1000)]))
    expected = sorted((10_000 + i // 2, streams[i % 2].id, i // 2, float(i)) for i in range(6000))
    results: list[Any] = []

    def read() -> None:
        columns = any_store.point_columns(job.id, "loss")
        results.append(list(zip(columns.stamps.tolist(), columns.streams.tolist(), columns.seqs.tolist(),
                                columns.values.tolist(), strict=True)))

    threads = [threading.Thread(target=read) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected] * 6
    window = any_store.point_columns(job.id, "loss", host="algo-2", start_ms=10_100, end_ms=10_200)
    assert window.stamps.tolist() == list(range(10_100, 10_200)) and np.all(window.streams == streams[1].id)


def test_a_chart_of_many_points_reads_overviews_that_hide_no_extreme(any_store: Store) -> None:
    """chart_points: where a range holds DENSE points a pixel or more, each sealed chunk in it gives
    the representatives of its blocks (real points: each block's first, last, lowest, highest and
    first non-finite ones); its edges and its count stay exact; a sparser chart reads every point."""
    import numpy as np

    from trainmon.read import downsample
    from trainmon.store.series import overview

    job = new_job(any_store, "dense")
    stream = any_store.add_stream(job.id, "algo-1", "dense/algo-1-1", 0)
    total = 100_000
    rng = np.random.default_rng(3)
    values = rng.normal(size=total)
    values[12_345], values[54_321], values[70_000], values[80_000] = 50.0, -50.0, math.inf, -math.inf
    values[33_333] = math.nan
    any_store.write_batch(Batch(job.id, points=[  # one write: sealed at once, in chunks of consecutive points
        ("loss", 1_000_000 + i * 10, None if i == 33_333 else float(values[i]), "algo-1", stream.id, i)
        for i in range(total)]))
    everything = any_store.point_columns(job.id, "loss")
    assert len(everything.stamps) == total

    width = total // overview.DENSE  # dense: each pixel spans 4 blocks
    columns, held = any_store.chart_points(job.id, "loss", width=width)
    assert held == total and len(columns.stamps) < total / 10
    # exactly each chunk's blocks' representatives (a chunk of one block or less has no overview:
    # all its points), which are real points: their times, values and records
    expected = []
    for first_ms, count, summed in any_store._read(
            "SELECT first_ms, count, overview IS NOT NULL FROM chunks WHERE kind = 0 ORDER BY first_ms"):
        begin = (first_ms - 1_000_000) // 10
        expected.append(begin + (overview.representatives(values[begin:begin + count],
                                                          np.arange(0, count, overview.BLOCK))
                                 if summed else np.arange(count)))
    assert np.array_equal(columns.seqs, np.concatenate(expected))
    assert np.array_equal(columns.stamps, 1_000_000 + columns.seqs * 10)
    assert np.array_equal(columns.values, values[columns.seqs], equal_nan=True)
    kept, shown = downsample.chart(columns.stamps, columns.values, width, count=held)
    assert shown["Count"] == total
    drawn = [v for v in shown["Values"] if v is not None]
    assert max(drawn) == 50.0 and min(drawn) == -50.0
    assert sorted(shown["NonFinite"].values()) == ["-Infinity", "Infinity", "NaN"]

    # a range: the chunks at its edges are read whole and cut, the count is the range's own
    start, end = 1_000_000 + 10_007 * 10, 1_000_000 + 90_003 * 10
    ranged, held = any_store.chart_points(job.id, "loss", width=80_000 // overview.DENSE - 1, start_ms=start,
                                          end_ms=end)
    assert held == 90_003 - 10_007
    assert ranged.stamps.min() == start and ranged.stamps.max() == end - 10
    assert len(ranged.stamps) < held / 3  # the two edge chunks whole, the rest as overviews
    assert {50.0, -50.0, math.inf, -math.inf} <= set(ranged.values.tolist())

    # sparser than DENSE a pixel (zoomed in): every point, as point_columns gives them
    detail, held = any_store.chart_points(job.id, "loss", width=total // overview.DENSE + 1)
    assert held == total and np.array_equal(detail.values, everything.values, equal_nan=True)


def test_a_chart_of_points_written_in_many_batches_and_merged_by_maintenance(any_store: Store) -> None:
    """Maintenance merges what each write left over into chunks whose points lie far apart in
    time: their overviews still hold every spike and count every point."""
    import numpy as np

    from trainmon.store.series import overview

    job = new_job(any_store, "merged")
    stream = any_store.add_stream(job.id, "algo-1", "merged/algo-1-1", 0)
    total = 60_000
    values = np.sin(np.arange(total) / 500.0)
    spikes = {8_500: 9.0, 19_990: -9.0, 45_000: 7.0}  # two of them in the writes' leftovers
    for at, spike in spikes.items():
        values[at] = spike
    for first in range(0, total, 10_000):
        any_store.write_batch(Batch(job.id, points=[("loss", 1_000_000 + i * 10, float(values[i]), "algo-1",
                                                     stream.id, i) for i in range(first, first + 10_000)]))
    any_store.maintain()
    columns, held = any_store.chart_points(job.id, "loss", width=total // overview.DENSE)
    assert held == total and len(columns.stamps) < total / 10
    assert np.array_equal(columns.values, values[columns.seqs]) and set(spikes) <= set(columns.seqs.tolist())
    assert np.array_equal(columns.stamps, np.sort(columns.stamps))


def test_an_overviews_blocks_never_join_points_apart_in_time() -> None:
    import numpy as np

    from trainmon.store.series import overview

    stamps = np.concatenate([np.arange(200) * 10, 1_000_000 + np.arange(200) * 10])  # a pause after 200 points
    assert overview.blocks(stamps).tolist() == [0, 128, 200, 256, 384]


def test_reads_go_on_while_another_thread_holds_the_sqlite_stores_connection(store: Store) -> None:
    """A thread inside a write transaction holds the store's connection (a server's maintenance
    pass, say): the reads of other threads meanwhile are answered on readers of their own, from what
    is committed, and see the write once it is; the writing thread reads its own write."""
    job = new_job(store, "held")
    store.write_batch(Batch(job.id, points=[("loss", 1000, 0.5, "algo-1", 1, 0)]))
    entered, release = threading.Event(), threading.Event()
    inside: list[str] = []

    def hold() -> None:
        with store._transaction() as sql:  # type: ignore[attr-defined]
            sql.rows("UPDATE jobs SET status = 'Stopping' WHERE id = ?", (job.id,))
            found = store.get_job("held")
            inside.append(found.status if found else "")
            entered.set()
            release.wait(60)  # (a read that waited for this transaction would be answered only then)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert entered.wait(60)
        during = store.get_job("held")
        summaries = store.metric_summaries(job.id)
        listed = [row.name for row in store.list_jobs(statuses=("InProgress",))]
    finally:
        release.set()
        holder.join()
    assert inside == ["Stopping"]
    assert during is not None and during.status == "InProgress" and listed == ["held"]
    assert summaries == {"loss": (1, 0.5, 0.5)}
    again = store.get_job("held")
    assert again is not None and again.status == "Stopping"


def test_a_sqlite_store_keeps_a_few_idle_readers_however_many_threads_read_at_once(store: Store) -> None:
    """Readers are opened as threads need them while the store's connection is held, and at most
    KEPT_READERS stay open once those threads are done."""
    from trainmon.store.sqlite import KEPT_READERS

    threads = KEPT_READERS + 4
    all_in = threading.Barrier(threads + 1)
    entered, release = threading.Event(), threading.Event()
    opened: list[object] = []

    def hold() -> None:
        with store._transaction():  # type: ignore[attr-defined]
            entered.set()
            release.wait(60)

    def read() -> None:
        with store._reader() as db:  # type: ignore[attr-defined]
            opened.append(db)
            assert db.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
            all_in.wait(60)  # every thread holds a reader at once

    holder = threading.Thread(target=hold)
    holder.start()
    assert entered.wait(60)
    readers = [threading.Thread(target=read) for _ in range(threads)]
    try:
        for thread in readers:
            thread.start()
        all_in.wait(60)
        for thread in readers:
            thread.join()
    finally:
        release.set()
        holder.join()
    assert len({id(db) for db in opened}) == threads  # a connection each, none waited for another's
    assert len(store._readers) == KEPT_READERS  # type: ignore[attr-defined]
