"""Listing pages: a late ListTrainingJobs page, and a late DescribeLogStreams page, against one of a
store ten times smaller.

1. ListTrainingJobs. A SQLite store holding 20,000 jobs (2,000 at least at smaller scales), made
   at once through the store's own insert, listed through ``trainmon.client("sagemaker")`` 100 a
   page in SageMaker's default order (CreationTime, Ascending) to the end, each page asked three
   times and the least time kept (its cost, not that of a first read of its rows from disk): the
   median time of a full page from the last tenth, against the same in a store of 2,000 jobs (the
   baseline). Target: at most 2x (a page costs the same however many jobs come before it, so the
   ratio stays near 1; paged by offset over every row, it grows with the total).
2. DescribeLogStreams (informational): the same over 20,000 log streams (2,000 in the baseline),
   50 a page by name.

Checks: every job and stream is listed once.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import Report, checkpointed_bytes, heading, scratch_dir, table

JOBS = 20_000
BASELINE = 2_000
LATE_TARGET = 2.0


def _filled(home: Path, count: int) -> Any:
    """A store of ``count`` jobs, each with a log stream, written in one transaction."""
    from trainmon.store import open_store

    store = open_store(home)
    jobs = []
    for n in range(count):
        name = f"job-{n:06d}"
        doc = {"TrainingJobName": name, "TrainingJobStatus": "Completed", "SecondaryStatus": "Completed",
               "TrainingJobArn": f"arn:aws:sagemaker:local:000000000000:training-job/{name}"}
        jobs.append((name, "Completed", 1_700_000_000.0 + n, 1_700_000_000.0 + n, json.dumps(doc)))
    with store._transaction() as sql:
        sql.many("INSERT INTO jobs (name, status, creation_time, last_modified_time, doc) VALUES (?, ?, ?, ?, ?)", jobs)
        sql.rows("INSERT INTO log_streams (job_id, host, name, creation_ms, last_event_ms) "
                 "SELECT id, 'algo-1', name || '/algo-1-1700000000', 0, 1 FROM jobs")
    checkpointed_bytes(home)  # the store at rest, its write-ahead log copied in (as a listing later meets it)
    return store


def _late_page_s(ask: Callable[[str | None], tuple[int, str | None]]) -> tuple[float, int, int]:
    """Median seconds of a full page from the last tenth of paging with ``ask`` (a token -> the
    page's items and the next token), the pages, and the items listed."""
    times, token, items = [], None, 0
    while True:
        took = []
        for _ in range(3):  # the least of three: the page's own cost, not a first read of its rows from disk
            began = time.perf_counter()
            listed, following = ask(token)
            took.append(time.perf_counter() - began)
        times.append(min(took))
        items += listed
        token = following
        if token is None:
            break
    full = times[:-1] or times  # (the last page is the rest)
    late = sorted(full[-max(1, len(full) // 10):])
    return late[len(late) // 2], len(times), items


def _pages(home: Path, count: int) -> tuple[tuple[float, int, int], tuple[float, int, int]]:
    """ListTrainingJobs' and DescribeLogStreams' late page in a store of ``count`` jobs and streams."""
    import trainmon

    store = _filled(home, count)
    try:
        sm, logs = trainmon.client("sagemaker", store=store), trainmon.client("logs", store=store)

        def jobs(token: str | None) -> tuple[int, str | None]:
            page = sm.list_training_jobs(MaxResults=100, **({"NextToken": token} if token else {}))
            return len(page["TrainingJobSummaries"]), page.get("NextToken")

        def streams(token: str | None) -> tuple[int, str | None]:
            page = logs.describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs", limit=50,
                                             **({"nextToken": token} if token else {}))
            return len(page["logStreams"]), page.get("nextToken")

        return _late_page_s(jobs), _late_page_s(streams)
    finally:
        store.close()


def run(scale: float) -> Report:
    report = Report("listing")
    total = max(BASELINE, int(JOBS * scale))
    heading(f"Listing: a late page of {total:,} jobs and streams against one of {BASELINE:,}")
    with scratch_dir("listing-") as work:
        few_jobs, few_streams = _pages(work / "few", BASELINE)
        many_jobs, many_streams = _pages(work / "many", total)
    rows = []
    for what, few, many in (("ListTrainingJobs", few_jobs, many_jobs), ("DescribeLogStreams", few_streams, many_streams)):
        for count, (late_s, pages, items) in ((BASELINE, few), (total, many)):
            rows.append([what, f"{count:,}", pages, f"{late_s * 1e3:.2f}"])
            if items != count:
                report.failures.append(f"{what} listed {items:,} of {count:,}")
    table(["operation", "rows", "pages", "late page ms"], rows)
    value = many_jobs[0] / few_jobs[0]
    report.ratio(f"a late ListTrainingJobs page of {total:,} jobs / of {BASELINE:,}", value, f"<= {LATE_TARGET:g}x",
                 value <= LATE_TARGET, detail=f"({many_jobs[0] * 1e3:.2f} ms / {few_jobs[0] * 1e3:.2f} ms)")
    streams = many_streams[0] / few_streams[0]
    report.ratio(f"a late DescribeLogStreams page of {total:,} streams / of {BASELINE:,}", streams,
                 detail=f"({many_streams[0] * 1e3:.2f} ms / {few_streams[0] * 1e3:.2f} ms)")
    return report


if __name__ == "__main__":
    sys.exit(1 if run(1.0).failures else 0)
