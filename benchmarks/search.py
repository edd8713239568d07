"""Search over many jobs: SageMaker's Search with a hyperparameter filter and a metric sort, through
``trainmon.client("sagemaker")``, against a SQLite query written by hand over the same data.

A SQLite store of 100,000 jobs, each with four hyperparameters, a tag, its resources and channels
(the properties Search keeps, written by the same code as a created job's), and a final
``validation:error`` for 90% of them. Asked 60 times, with thresholds that keep from 5% to 90% of
the jobs: ``HyperParameters.learning_rate < T``, sorted by ``Metrics.validation:error``
ascending, 10 a page, TotalHits counted. The baseline is one query written for exactly that
question, as one who knows the schema writes it (the final values read in order from their index,
each job's learning rate probed until ten are found, the page's documents read, and the jobs
counted from the index on the property up to 10,001, as TotalHits counts: exactly up to 10,000,
"at least 10,000" beyond, as SageMaker's does) on its own connection to the same file, asked the
same 60 times. Informational: the bytes the properties take (their table and indexes) per job,
against those of the jobs' own rows.

Targets: p99 <= 100 ms, and at most 2x the hand-written query's p99. Checks: both give the same
jobs in the same order and the same total.
"""

from __future__ import annotations

import json
import random
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from .common import Report, checkpointed_bytes, heading, percentile, scratch_dir, table

JOBS = 100_000
ASKS = 60
P99_TARGET_S = 0.100
HAND_TARGET = 2.0
BY_HAND = """
SELECT j.name, j.doc FROM series s INDEXED BY series_by_final_value JOIN jobs j ON j.id = s.job_id
WHERE s.name = 'validation:error' AND s.job_id IS NOT NULL AND EXISTS (
    SELECT 1 FROM job_properties h INDEXED BY job_properties_of_job
    WHERE h.job_id = s.job_id AND h.name = 'HyperParameters.learning_rate' AND h.num < ?)
ORDER BY s.final_value, s.job_id LIMIT 10
"""
COUNT_BY_HAND = """
SELECT count(*) FROM (SELECT 1 FROM job_properties WHERE name = 'HyperParameters.learning_rate' AND num < ? LIMIT 10001)
"""


def _filled(home: Path, count: int) -> Any:
    """A store of ``count`` jobs written a few thousand to a transaction with the rows
    ``create_job`` writes (the job, its properties) and the series row a final metric leaves."""
    from trainmon.cloudwatch.model import job_metric_key
    from trainmon.jobs.search import properties
    from trainmon.store import open_store, search
    from trainmon.store.series.writes import digest

    store = open_store(home)
    rng = random.Random(5)
    for start in range(0, count, 5_000):
        jobs, docs = [], []
        for n in range(start, min(count, start + 5_000)):
            name = f"sweep-{n:06d}"
            created = 1_700_000_000.0 + n
            doc = {"TrainingJobName": name, "TrainingJobStatus": "Completed", "SecondaryStatus": "Completed",
                   "TrainingJobArn": f"arn:aws:sagemaker:local:000000000000:training-job/{name}",
                   "HyperParameters": {"learning_rate": f"{10 ** rng.uniform(-5, -1):.6g}",
                                       "batch_size": str(rng.choice((32, 64, 128, 256))),
                                       "optimizer": rng.choice(("adam", "sgd", "adamw")), "epochs": "10"},
                   "Tags": [{"Key": "team", "Value": rng.choice(("vision", "speech", "nlp"))}],
                   "AlgorithmSpecification": {"TrainingImage": "local", "TrainingInputMode": "File",
                                              "MetricDefinitions": [{"Name": "validation:error",
                                                                     "Regex": "val_err=(\\S+)"}]},
                   "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
                   "InputDataConfig": [{"ChannelName": "train"}, {"ChannelName": "validation"}],
                   "StoppingCondition": {"MaxRuntimeInSeconds": 3600}, "ProfilerConfig": {"DisableProfiler": True},
                   "CreationTime": created, "LastModifiedTime": created + 60, "TrainingStartTime": created + 5,
                   "TrainingEndTime": created + 55}
            jobs.append((name, "Completed", created, created + 60, json.dumps(doc)))
            docs.append(doc)
        with store._transaction() as sql:
            sql.many("INSERT INTO jobs (name, status, creation_time, last_modified_time, doc) VALUES (?, ?, ?, ?, ?)",
                     jobs)
            ids = dict(sql.rows("SELECT name, id FROM jobs WHERE id > (SELECT coalesce(max(id), 0) - ? FROM jobs)",
                                (len(jobs),)))
            sql.many(search.INSERT, [(ids[doc["TrainingJobName"]], *row) for doc in docs for row in properties(doc)])
            series = []
            for doc in docs:
                if rng.random() < 0.9:
                    key = job_metric_key(doc["TrainingJobName"], "validation:error")
                    value = rng.uniform(0.01, 0.5)
                    series.append((key.namespace, key.name, key.dimensions_json, digest(key),
                                   ids[doc["TrainingJobName"]], 1000, 10, value, value, value, 1000))
            sql.many("INSERT INTO series (namespace, name, dimensions, digest, job_id, last_ms, points, minimum, "
                     "maximum, final_value, final_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", series)
    checkpointed_bytes(home)  # the store at rest, as a search later meets it
    return store


def _thresholds() -> list[float]:
    rng = random.Random(9)
    return [10 ** rng.uniform(-4.3, -1.05) for _ in range(ASKS)]  # from about 5% to 90% of the jobs


def run(scale: float) -> Report:
    import trainmon
    from trainmon.store.search import COUNTED

    report = Report("search")
    total = max(10_000, int(JOBS * scale))
    heading(f"Search: {total:,} jobs, a hyperparameter filter and a metric sort, against a query by hand")
    with scratch_dir("search-") as work:
        began = time.perf_counter()
        store = _filled(work, total)
        print(f"  (filled in {time.perf_counter() - began:.0f} s)")
        hand = sqlite3.connect(work / "trainmon.db")
        sm = trainmon.client("sagemaker", store=store)
        ours_s, hand_s, same = [], [], True
        try:
            for threshold in _thresholds():
                began = time.perf_counter()
                answer = sm.search(Resource="TrainingJob", SortBy="Metrics.validation:error", SortOrder="Ascending",
                                   SearchExpression={"Filters": [{"Name": "HyperParameters.learning_rate",
                                                                  "Operator": "LessThan", "Value": repr(threshold)}]})
                ours_s.append(time.perf_counter() - began)
                began = time.perf_counter()
                found = [(name, json.loads(doc)) for name, doc in hand.execute(BY_HAND, (threshold,))]
                counted = hand.execute(COUNT_BY_HAND, (threshold,)).fetchone()[0]
                hand_s.append(time.perf_counter() - began)
                same &= [r["TrainingJob"]["TrainingJobName"] for r in answer["Results"]] == [n for n, _ in found]
                same &= answer["TotalHits"]["Value"] == min(counted, COUNTED)
        finally:
            hand.close()
            store.close()
        sizes = dict(sqlite3.connect(work / "trainmon.db").execute(
            "SELECT name, sum(pgsize) FROM dbstat WHERE name IN ('jobs', 'job_properties', 'job_properties_of_job', "
            "'job_properties_by_text', 'job_properties_by_number') GROUP BY name").fetchall())
    report.check(same, "Search gives the hand-written query's jobs, in its order, and its total")
    ours, by_hand = percentile(ours_s, 0.99), percentile(hand_s, 0.99)
    table(["query", "median ms", "p99 ms"],
          [["Search (client)", f"{percentile(ours_s, 0.5) * 1e3:.1f}", f"{ours * 1e3:.1f}"],
           ["by hand (sqlite3)", f"{percentile(hand_s, 0.5) * 1e3:.1f}", f"{by_hand * 1e3:.1f}"]])
    report.absolute(f"Search p99 over {total:,} jobs", f"{ours * 1e3:.1f} ms", f"<= {P99_TARGET_S * 1e3:g} ms",
                    ours <= P99_TARGET_S)
    properties = sum(size for name, size in sizes.items() if name != "jobs")
    report.ratio("the properties' bytes / the jobs' rows' bytes", properties / sizes["jobs"],
                 detail=f"({properties / total:,.0f} B / {sizes['jobs'] / total:,.0f} B a job)")
    report.ratio("Search p99 / the hand-written query's p99", ours / by_hand, f"<= {HAND_TARGET:g}x",
                 ours / by_hand <= HAND_TARGET, detail=f"({ours * 1e3:.1f} ms / {by_hand * 1e3:.1f} ms)")
    return report


if __name__ == "__main__":
    sys.exit(1 if run(1.0).failures else 0)
