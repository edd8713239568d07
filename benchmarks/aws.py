"""The AWS endpoint: what speaking AWS's protocols costs over the native JSON API, while jobs write.

While 10 jobs each print 200 metric lines a second into a ``trainmon server``, 4 client threads on
loopback call one operation for a few seconds, each with its own client:

- DescribeTrainingJob and GetMetricStatistics (Period 60, Average, as the SageMaker SDK's analytics
  ask) through boto3 (``AWS_ENDPOINT_URL`` at the server), against the same operation through the
  native API (``POST /api/<service>/<Operation>`` with httpx) in the same run;
- PutMetricData with 1,000 data items a call, samples/s, the same two ways.

Printed: requests/s (samples/s) and p99 of each, and the ratio of boto3's to the native API's.
"""

from __future__ import annotations

import datetime as dt
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import Report, Served, heading, percentile, running_server, scratch_dir, table
from .latency import JOBS
from .server import LOAD_JOBS, TIMEOUT_S, _create

THREADS = 4
SECONDS = 4.0
PUT_ITEMS = 1000
GROUP = "/aws/sagemaker/TrainingJobs"


def _start_jobs(server: Served, work: Path) -> None:
    import httpx

    with httpx.Client(base_url=server.url, headers=server.headers, timeout=TIMEOUT_S) as client:
        for n in range(LOAD_JOBS):
            command = [sys.executable, str(JOBS), "paced", "--report", str(work / f"aws-{n}.json"), "--rate", "200",
                       "--seconds", "120"]
            _create(client, f"aws-{n}", command, [{"Name": "loss", "Regex": r"loss=(\S+)"}])
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and sum(
                bool(j["FinalMetrics"]) for j in client.get("/api/jobs").json()["TrainingJobSummaries"]) < LOAD_JOBS:
            time.sleep(0.2)


def _stop_jobs(server: Served) -> None:
    import httpx

    with httpx.Client(base_url=server.url, headers=server.headers, timeout=TIMEOUT_S) as client:
        for n in range(LOAD_JOBS):
            client.post(f"/api/jobs/aws-{n}/stop")


def _hammer(make_call: Callable[[], Callable[[], None]]) -> tuple[float, float, list[str]]:
    """THREADS clients (each made by ``make_call`` and warmed by one call) calling for SECONDS
    together: (calls/s, p99 s, what failed)."""
    times: list[float] = []
    failures: list[str] = []
    ready = threading.Barrier(THREADS + 1)

    def loop() -> None:
        call = make_call()
        call()  # the client's models and connection, before the clock starts
        ready.wait()
        stop = time.monotonic() + SECONDS
        while time.monotonic() < stop:
            started = time.perf_counter()
            try:
                call()
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
            times.append(time.perf_counter() - started)

    threads = [threading.Thread(target=loop) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    ready.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    return len(times) / (time.perf_counter() - began), percentile(times, 0.99), failures


def _boto3(server: Served, service: str) -> Any:
    import boto3
    from botocore.config import Config

    key_id, secret = server.key
    return boto3.client(service, endpoint_url=server.url, region_name="us-east-1", aws_access_key_id=key_id,
                        aws_secret_access_key=secret, config=Config(retries={"max_attempts": 1}))


def _native(server: Served, service: str, operation: str, request: dict[str, Any]) -> Callable[[], None]:
    import httpx

    client = httpx.Client(base_url=server.url, headers=server.headers, timeout=TIMEOUT_S)

    def call() -> None:
        client.post(f"/api/{service}/{operation}", json=request).raise_for_status()

    return call


def _requests() -> dict[str, tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """Per label: service, operation, boto3's request, the native API's (times as epoch seconds)."""
    now = dt.datetime.now(dt.UTC)
    start, end = now - dt.timedelta(hours=1), now + dt.timedelta(minutes=5)
    stats = {"Namespace": GROUP, "MetricName": "loss", "Dimensions": [{"Name": "TrainingJobName", "Value": "aws-3"}],
             "Period": 60, "Statistics": ["Average"]}
    items = [{"MetricName": f"m{i % 10}", "Value": float(i), "Dimensions": [{"Name": "Host", "Value": "bench"}],
              "StorageResolution": 1} for i in range(PUT_ITEMS)]
    return {
        "DescribeTrainingJob": ("sagemaker", "DescribeTrainingJob", {"TrainingJobName": "aws-3"},
                                {"TrainingJobName": "aws-3"}),
        "GetMetricStatistics": ("cloudwatch", "GetMetricStatistics", {**stats, "StartTime": start, "EndTime": end},
                                {**stats, "StartTime": start.timestamp(), "EndTime": end.timestamp()}),
        "PutMetricData": ("cloudwatch", "PutMetricData", {"Namespace": "Bench/Put", "MetricData": items},
                          {"Namespace": "Bench/Put", "MetricData": items}),
    }


def run(scale: float = 1.0) -> Report:
    report = Report("aws")
    heading(f"AWS endpoint: boto3 against the native API, {THREADS} clients while {LOAD_JOBS} jobs write")
    rows = []
    with scratch_dir("aws-") as work, running_server(work / "home") as server:
        _start_jobs(server, work)
        try:
            for label, (service, operation, boto_request, native_request) in _requests().items():
                method = "".join("_" + c.lower() if c.isupper() else c for c in operation).lstrip("_")

                def through_boto3(service: str = service, method: str = method,
                                  request: dict[str, Any] = boto_request) -> Callable[[], None]:
                    client = _boto3(server, service)
                    return lambda: getattr(client, method)(**request)

                native = _hammer(lambda s=service, o=operation, r=native_request: _native(server, s, o, r))
                aws = _hammer(through_boto3)
                per_call = PUT_ITEMS if operation == "PutMetricData" else 1
                unit = "samples/s" if per_call > 1 else "requests/s"
                for way, (rate, p99, errors) in (("native API", native), ("boto3", aws)):
                    rows.append([label, way, f"{rate * per_call:,.0f} {unit}", f"{p99 * 1e3:.1f}", len(errors)])
                failed = native[2] + aws[2]
                report.check(not failed, f"every {label} call succeeded" + (f" ({failed[0]})" if failed else ""))
                report.ratio(f"{label} {unit} through boto3 / native API", aws[0] / native[0],
                             detail=f"({aws[0] * per_call:,.0f} / {native[0] * per_call:,.0f}; p99 "
                                    f"{aws[1] * 1e3:.1f} ms / {native[1] * 1e3:.1f} ms)")
        finally:
            _stop_jobs(server)
    table(["operation", "through", "rate", "p99 ms", "failed"], rows)
    return report
