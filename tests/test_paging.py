"""ListTrainingJobs and DescribeLogStreams page by keyset, on every backend (``any_store``).

A page's NextToken holds the last row's sort key and id and is bound to its request's filters and
order; the next page is read from the index at that place. So paging gives every row once, in the
order of one unpaged answer, whatever is created between pages, and a late page reads about a page
of rows however many come before it.
"""

from __future__ import annotations

import base64
import json
import random
from typing import Any

import pytest

from trainmon.api.logs import LOG_GROUP, describe_log_streams
from trainmon.api.sagemaker import list_training_job_rows
from trainmon.errors import InvalidParameterException, ValidationException
from trainmon.store import Batch, SqliteStore, Store
from trainmon.store.base import SqlStore, prefix_end

ORDERS = [(by, order) for by in ("Name", "CreationTime", "Status") for order in ("Ascending", "Descending")]
STATUSES = ("Completed", "Failed", "Stopped")


def add_jobs(store: Store, count: int, *, seed: int = 0) -> None:
    """``count`` jobs in one transaction, made fast (the store's own insert, many at once): times and
    statuses that tie often, names in no order of their ids."""
    rng = random.Random(seed)
    rows = []
    for n in rng.sample(range(count), count):
        name = f"job-{n:05d}"
        status = rng.choice(STATUSES)
        doc = {"TrainingJobName": name, "TrainingJobStatus": status, "SecondaryStatus": status,
               "TrainingJobArn": f"arn:aws:sagemaker:local:000000000000:training-job/{name}"}
        created = 1_700_000_000.0 + rng.randrange(count // 3 + 1) + rng.choice((0.0, 0.25))
        rows.append((name, status, created, created, json.dumps(doc)))
    with store._transaction() as sql:  # type: ignore[attr-defined]
        sql.many("INSERT INTO jobs (name, status, creation_time, last_modified_time, doc) VALUES (?, ?, ?, ?, ?)",
                 rows)


def expected_jobs(store: Store, by: str, order: str, keep: Any = lambda job: True) -> list[str]:
    """The jobs' names in the order ListTrainingJobs gives them, sorted here (not by the store)."""
    key = {"Name": lambda job: job.name, "CreationTime": lambda job: job.creation_time,
           "Status": lambda job: job.status}[by]
    jobs = sorted((job for job in store.list_jobs() if keep(job)), key=lambda job: (key(job), job.id),
                  reverse=order == "Descending")
    return [job.name for job in jobs]


def job_pages(store: Store, size: int, **request: Any) -> list[list[str]]:
    pages, token = [], None
    while True:
        rows, token = list_training_job_rows(store, MaxResults=size, **request,
                                             **({"NextToken": token} if token else {}))
        pages.append([row.name for row in rows])
        if token is None:
            return pages


@pytest.mark.parametrize(("by", "order"), ORDERS)
def test_job_pages_give_every_job_once_in_the_unpaged_order(any_store: Store, by: str, order: str) -> None:
    add_jobs(any_store, 57)
    filters: list[tuple[dict[str, Any], Any]] = [
        ({}, lambda job: True),
        ({"StatusEquals": "Failed"}, lambda job: job.status == "Failed"),
        ({"NameContains": "JOB-000"}, lambda job: "job-000" in job.name),
        ({"CreationTimeAfter": 1_700_000_004.0, "CreationTimeBefore": 1_700_000_015.0},
         lambda job: 1_700_000_004.0 < job.creation_time < 1_700_000_015.0),
    ]
    for request, keep in filters:
        wanted = expected_jobs(any_store, by, order, keep)
        assert job_pages(any_store, 100, SortBy=by, SortOrder=order, **request) == [wanted]  # one unpaged answer
        assert len(wanted) > 10, request
        for size in (1, 4, 10):
            pages = job_pages(any_store, size, SortBy=by, SortOrder=order, **request)
            assert [name for page in pages for name in page] == wanted, (request, size)
            assert [len(page) for page in pages[:-1]] == [size] * (len(pages) - 1) and 0 < len(pages[-1]) <= size


@pytest.mark.parametrize(("by", "order"), ORDERS)
def test_jobs_created_between_pages_neither_repeat_nor_skip_earlier_ones(any_store: Store, by: str,
                                                                         order: str) -> None:
    add_jobs(any_store, 20)
    before = expected_jobs(any_store, by, order)
    first, token = list_training_job_rows(any_store, MaxResults=7, SortBy=by, SortOrder=order)
    for n, status in enumerate(STATUSES):  # sorting before and after the page's end, by name, time and status
        for name, created in ((f"aaa-{n}", 1_600_000_000.0), (f"zzz-{n}", 1_800_000_000.0)):
            any_store.create_job(name, {"TrainingJobName": name, "TrainingJobStatus": status}, created)
    any_store.delete_job(first[0].name)
    seen = [row.name for row in first]
    while token is not None:
        rows, token = list_training_job_rows(any_store, MaxResults=7, SortBy=by, SortOrder=order, NextToken=token)
        seen += [row.name for row in rows]
    assert len(seen) == len(set(seen))  # offset paging would give a row again after a job is added before it
    assert [name for name in seen if name in before] == before  # and would skip one after one is deleted
    after = expected_jobs(any_store, by, order)
    assert [name for name in seen if name not in before] == [  # new jobs placed after the first page come too
        name for name in after[after.index(seen[6]) + 1:] if name not in before]


def test_a_late_page_of_20000_jobs_reads_a_page_of_rows(any_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """20,000 jobs, paged 100 at a time in every order: every one once, in order, and each page asks
    the store for 101 rows (a page and whether more remain) and gets at most that; in SQLite, a late
    page costs the database no more work (its virtual machine's steps) than the first."""
    add_jobs(any_store, 20_000, seed=1)
    asked: list[tuple[int, int]] = []
    original = SqlStore.jobs_after

    def counted(self: SqlStore, after: Any, limit: int, **query: Any) -> Any:
        rows = original(self, after, limit, **query)
        asked.append((limit, len(rows)))
        return rows

    monkeypatch.setattr(SqlStore, "jobs_after", counted)
    steps = [0]
    if isinstance(any_store, SqliteStore):
        def step() -> int:
            steps[0] += 1
            return 0

        any_store._db.set_progress_handler(step, 100)
    for by, order in ORDERS:
        seen: list[str] = []
        costs: list[int] = []
        token = None
        while True:
            asked.clear()
            steps[0] = 0
            rows, token = list_training_job_rows(any_store, MaxResults=100, SortBy=by, SortOrder=order,
                                                 **({"NextToken": token} if token else {}))
            costs.append(steps[0])
            assert asked == [(101, min(101, 20_000 - len(seen)))], (by, order, len(seen))
            seen += [row.name for row in rows]
            if token is None:
                break
        assert seen == expected_jobs(any_store, by, order), (by, order)
        if isinstance(any_store, SqliteStore):  # (reading the jobs before a page would cost hundreds of times more)
            assert max(costs[-20:]) <= 2 * costs[0] + 10, (by, order, costs[0], costs[-20:])


def add_streams(store: Store, count: int, *, seed: int = 0) -> None:
    """``count`` streams of a few jobs; last events that tie often, and some streams with none yet."""
    rng = random.Random(seed)
    jobs = [store.create_job(f"s{n}", {"TrainingJobName": f"s{n}", "TrainingJobStatus": "Completed"}, 1.0)
            for n in range(3)]
    for n in rng.sample(range(count), count):
        job = jobs[n % 3]
        stream = store.add_stream(job.id, f"algo-{n % 4 + 1}", f"{job.name}/algo-{n % 4 + 1}-{n:04d}", 1000 + n)
        if n % 5:
            store.write_batch(Batch(job.id, stream_stats={stream.id: (1, 1, 5_000 + rng.randrange(count // 4))}))


def expected_streams(store: Store, by: str, descending: bool, prefix: str = "") -> list[str]:
    streams = [s for s in store.streams() if s.name.startswith(prefix)]  # (by name: the ties' order below)
    if by == "LastEventTime":
        streams.sort(key=lambda s: s.last_event_ms or 0)
    return [s.name for s in (streams[::-1] if descending else streams)]


def stream_pages(store: Store, limit: int, **request: Any) -> list[list[str]]:
    pages, token = [], None
    while True:
        page = describe_log_streams(store, logGroupName=LOG_GROUP, limit=limit, **request,
                                    **({"nextToken": token} if token else {}))
        pages.append([s["logStreamName"] for s in page["logStreams"]])
        token = page.get("nextToken")
        if token is None:
            return pages


@pytest.mark.parametrize("descending", [False, True])
def test_stream_pages_give_every_stream_once_in_the_unpaged_order(any_store: Store, descending: bool) -> None:
    add_streams(any_store, 60)
    for by, prefix in (("LogStreamName", ""), ("LogStreamName", "s1/"), ("LogStreamName", "s2/algo-3"),
                       ("LastEventTime", "")):
        wanted = expected_streams(any_store, by, descending, prefix)  # (as DescribeLogStreams sorted them before)
        assert len(wanted) > 3, prefix
        request = {"orderBy": by, "descending": descending, **({"logStreamNamePrefix": prefix} if prefix else {})}
        for limit in (1, 3, 50):
            pages = stream_pages(any_store, limit, **request)
            assert [name for page in pages for name in page] == wanted, (by, prefix, limit)
            assert [len(page) for page in pages[:-1]] == [limit] * (len(pages) - 1) and 0 < len(pages[-1]) <= limit


def test_a_late_page_of_streams_asks_the_store_for_a_page(any_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    add_streams(any_store, 2_000, seed=2)
    asked: list[int] = []
    original = SqlStore.streams_after

    def counted(self: SqlStore, after: Any, limit: int, **query: Any) -> Any:
        rows = original(self, after, limit, **query)
        asked.append(len(rows))
        return rows

    monkeypatch.setattr(SqlStore, "streams_after", counted)
    for by in ("LogStreamName", "LastEventTime"):
        names = [name for page in stream_pages(any_store, 50, orderBy=by) for name in page]
        assert names == expected_streams(any_store, by, False)
        assert asked[:-1] == [51] * (len(asked) - 1) and asked[-1] <= 51
        asked.clear()


def _forged(token: str, place: list[Any]) -> str:
    """A token of the right request with another place in it (what a client could send)."""
    data = json.loads(base64.urlsafe_b64decode(token))
    return base64.urlsafe_b64encode(json.dumps({**data, "p": place}).encode()).decode()


def test_a_job_page_token_of_another_request_or_none_at_all_is_refused(any_store: Store) -> None:
    add_jobs(any_store, 30)
    _, token = list_training_job_rows(any_store, MaxResults=5, SortBy="Name", StatusEquals="Failed")
    assert token is not None
    for other in ({"SortBy": "CreationTime"}, {"SortBy": "Name", "SortOrder": "Descending"},
                  {"SortBy": "Name", "StatusEquals": "Completed"}, {"SortBy": "Name"},
                  {"SortBy": "Name", "StatusEquals": "Failed", "NameContains": "1"}):
        with pytest.raises(ValidationException, match="is not one this service gave"):
            list_training_job_rows(any_store, MaxResults=5, NextToken=token, **other)
    for junk in ("junk", "5", "9" * 5000, _forged(token, ["job-00003"]), _forged(token, [3, 4]),
                 _forged(token, ["job-00003", True]), _forged(token, ["job-00003", 2**70]), "W10=",
                 base64.urlsafe_b64encode(b"[" * 3000).decode()):
        with pytest.raises(ValidationException, match="is not one this service gave"):
            list_training_job_rows(any_store, MaxResults=5, SortBy="Name", StatusEquals="Failed", NextToken=junk)
    _, by_time = list_training_job_rows(any_store, MaxResults=5)
    assert by_time is not None
    with pytest.raises(ValidationException):
        list_training_job_rows(any_store, MaxResults=5, NextToken=_forged(by_time, [float("nan"), 1]))
    rows, _ = list_training_job_rows(any_store, MaxResults=1, SortBy="Name", StatusEquals="Failed", NextToken=token)
    assert len(rows) == 1  # the page size may change between pages; the request's filters and order may not
    rows, _ = list_training_job_rows(any_store, MaxResults=50, NextToken="")
    assert len(rows) == 30  # an empty token is none


def test_a_stream_page_token_of_another_request_or_none_at_all_is_refused(any_store: Store) -> None:
    add_streams(any_store, 12)
    token = describe_log_streams(any_store, logGroupName=LOG_GROUP, limit=2, logStreamNamePrefix="s1/")["nextToken"]
    for other in ({}, {"logStreamNamePrefix": "s2/"}, {"logStreamNamePrefix": "s1/", "descending": True},
                  {"orderBy": "LastEventTime"}):
        with pytest.raises(InvalidParameterException, match="nextToken .* is not one this service gave"):
            describe_log_streams(any_store, logGroupName=LOG_GROUP, nextToken=token, **other)
    for junk in ("junk", "2", _forged(token, [5, "s1/algo-1-0001"]), _forged(token, [None])):
        with pytest.raises(InvalidParameterException, match="nextToken"):
            describe_log_streams(any_store, logGroupName=LOG_GROUP, logStreamNamePrefix="s1/", nextToken=junk)


@pytest.mark.parametrize(("prefix", "end"), [
    ("job/", "job0"),
    ("a", "b"),
    ("é", "ê"),
    ("x\U0010FFFF", "y"),
    ("\U0010FFFF\U0010FFFF", None),
    ("a\ud7ff", "a\ue000"),
])
def test_prefix_end_is_the_least_string_after_the_prefix_s_strings(prefix: str, end: str | None) -> None:
    assert prefix_end(prefix) == end


def test_a_stream_prefix_is_matched_exactly_as_a_prefix(any_store: Store) -> None:
    job = any_store.create_job("p", {"TrainingJobName": "p", "TrainingJobStatus": "Completed"}, 1.0)
    names = ["p/a", "p/a\U0010FFFF", "p/a\U0010FFFFz", "p/b", "p/\ud7ff", "p/\ue000", "p/é", "p0", "p", "q/a"]
    for n, name in enumerate(names):
        any_store.add_stream(job.id, "algo-1", name, n)
    for prefix in ("p/", "p/a", "p/a\U0010FFFF", "p/\ud7ff", "p", "p/é", "%", "p/_"):
        found = [s.name for s in any_store.streams(prefix=prefix)]
        assert found == sorted(name for name in names if name.startswith(prefix)), prefix
        paged = [s.name for s in any_store.streams_after(None, 100, prefix=prefix)]
        assert paged == found
