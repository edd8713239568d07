"""The server: the JSON API over the operations layer, live updates as Server-Sent Events, the
Prometheus exposition and the console's pages, as one ASGI application.

Every route is a door onto :mod:`trainmon.api` (or a read the CLI makes too); the routes and their
parameters are listed once, in :data:`ROUTES`, which also makes the OpenAPI document."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .. import api
from ..api import artifacts, sagemaker, trainmon
from ..cloudwatch.model import job_metric_key
from ..errors import MethodNotAllowed, NotFound, TrainmonError, ValidationException
from ..jobs import searchtext
from ..read import charts, downsample
from ..shapes import snake_case
from ..store import Store, codec
from . import auth, live, prometheus, typecheck
from .jsonio import body, error_reply, parse, reply
from .openapi import Endpoint, Param, document

CONSOLE = Path(__file__).resolve().parent.parent / "console"
RECORD_CONTEXT_MOST = 200
# zlib's own default: Starlette's 9 spent 65 ms of a comparison's 80 kB of points (level 6: 18 ms,
# 1.6% more bytes), as much as reading them, on a core that jobs' supervisors share
GZIP_LEVEL = 6
DECODED_BYTES = 64 << 20  # metric chunks kept decoded by their bytes (store.codec.Decoded), for requests that read them again
log = logging.getLogger(__name__)


# -- parameters -----------------------------------------------------------------------------------


def _int(request: Request, name: str, default: int | None, low: int, high: int) -> int | None:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValidationException(f"{name} must be a whole number from {low} to {high}, not {text!r}.") from None
    if not low <= value <= high:
        raise ValidationException(f"{name} must be from {low} to {high}, not {value}.")
    return value


MANY_JOBS = 50  # jobs one request of several jobs' descriptions or points may name


def _job_names(request: Request) -> list[str]:
    """The jobs a request of several jobs names (``jobs``: comma-separated)."""
    names = [n for n in (request.query_params.get("jobs") or "").split(",") if n]
    if not 1 <= len(names) <= MANY_JOBS:
        raise ValidationException(f"jobs must name 1 to {MANY_JOBS} jobs, comma-separated.")
    return names


def _width(request: Request) -> int:
    """A chart's width in pixels: the buckets its points are kept by."""
    width = _int(request, "width", 1000, 1, downsample.MAX_WIDTH)
    assert width is not None
    return width


def _json_param(request: Request, name: str) -> Any:
    text = request.query_params.get(name)
    if not text:
        return None
    return parse(text, name)


async def _call(work: Callable[[], Any]) -> Any:
    """Store work on a worker thread, so the event loop serves others meanwhile."""
    return await anyio.to_thread.run_sync(work)


# -- jobs -----------------------------------------------------------------------------------------


async def list_jobs(request: Request, store: Store) -> Any:
    """ListTrainingJobs' page; with ``where`` (Search's text form) or a sort by any other property,
    Search's, with TotalHits."""
    q = request.query_params
    sort = q.get("sort", "CreationTime")
    searching = bool(q.get("where")) or sort not in ("Name", "CreationTime", "Status")
    request_ = {"MaxResults": _int(request, "limit", 50, 1, 100), "SortBy": sort,
                "SortOrder": q.get("order", "Descending")}
    for param, member in (("status", "StatusEquals"), ("name", "NameContains"), ("token", "NextToken")):
        if q.get(param):
            request_[member] = q[param]

    def work() -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if searching:
            expression = searchtext.parse(q.get("where", ""))
            for name, operator, value in (("TrainingJobStatus", "Equals", q.get("status")),
                                          ("TrainingJobName", "Contains", q.get("name"))):
                if value:
                    expression = {"Filters": [{"Name": name, "Operator": operator, "Value": value}],
                                  **({"SubExpressions": [expression]} if expression else {})}
            rows, total, token = sagemaker.search_rows(
                store, SearchExpression=expression, SortBy={"Name": "TrainingJobName"}.get(sort, sort),
                SortOrder=request_["SortOrder"], NextToken=request_.get("NextToken"), MaxResults=request_["MaxResults"])
            extra["TotalHits"] = sagemaker.total_hits(total)
        else:
            rows, token = sagemaker.list_training_job_rows(store, **request_)
        ids = [row.id for row in rows]
        finals, ranges = store.final_metrics_of(ids), store.metric_ranges_of(ids)  # a read each for the page
        summaries = [{**sagemaker.summary(row), "TrainingStartTime": row.doc.get("TrainingStartTime"),
                      "HyperParameters": row.doc.get("HyperParameters", {}),
                      "Tags": {tag["Key"]: tag["Value"] for tag in row.doc.get("Tags", [])},
                      "FinalMetrics": {name: value for name, value, _ in finals.get(row.id, [])},
                      "MetricRanges": {name: list(pair) for name, pair in ranges.get(row.id, {}).items()},
                      **({"TuningJobArn": row.doc["TuningJobArn"]} if "TuningJobArn" in row.doc else {})}
                     for row in rows]
        return {"TrainingJobSummaries": summaries, **extra, **({"NextToken": token} if token is not None else {})}

    return await _call(work)


async def list_images(request: Request, store: Store) -> Any:
    return await _call(lambda: trainmon.list_images(store))


async def create_job(request: Request, store: Store) -> Any:
    request_ = await body(request)
    typecheck.check("sagemaker", "CreateTrainingJob", sagemaker.create_training_job, request_)
    return await _call(lambda: sagemaker.create_training_job(store, **request_))


async def describe_job(request: Request, store: Store) -> Any:
    name = request.path_params["name"]

    def work() -> dict[str, Any]:
        description, metrics = trainmon.describe_with_metrics(store, name)
        return {"Job": description, "Metrics": metrics}

    return await _call(work)


async def describe_jobs(request: Request, store: Store) -> Any:
    """Several jobs' descriptions (``jobs``: names, comma-separated), as :func:`describe_job` gives
    each: what Compare shows, in one request rather than one a job. A job that is not there answers
    its error in its place."""
    names = _job_names(request)
    return await _call(lambda: {"Jobs": trainmon.describe_several(store, names)})


async def stop_job(request: Request, store: Store) -> Any:
    return await _call(lambda: sagemaker.stop_training_job(store, TrainingJobName=request.path_params["name"]))


async def delete_job(request: Request, store: Store) -> Any:
    return await _call(lambda: sagemaker.delete_training_job(store, TrainingJobName=request.path_params["name"]))


async def test_definitions(request: Request, store: Store) -> Any:
    request_ = await body(request)
    typecheck.check("trainmon", "TestMetricDefinitions", trainmon.dry_run_definitions, request_)
    return await _call(lambda: trainmon.dry_run_definitions(store, **request_))


# -- metrics --------------------------------------------------------------------------------------


def _range(request: Request) -> tuple[int | None, int | None]:
    return _int(request, "start", None, 0, 2**62), _int(request, "end", None, 0, 2**62)


def _deltas(request: Request) -> bool:
    """Whether the chart's times are asked as differences (``times=delta``: downsample.chart_payload)."""
    asked = request.query_params.get("times")
    if asked not in (None, "delta"):
        raise ValidationException(f"times must be delta (or left out), not {asked!r}.")
    return asked == "delta"


async def metric_points(request: Request, store: Store) -> Any:
    name, metric = request.path_params["name"], request.path_params["metric"]
    width, deltas = _width(request), _deltas(request)
    start, end = _range(request)
    host = request.query_params.get("host") or None
    records = request.query_params.get("records") != "0"

    def work() -> dict[str, Any]:
        row = sagemaker.job(store, name)
        return {"MetricName": metric, **charts.metric_chart(store, row.id, metric, width, host=host, start_ms=start,
                                                            end_ms=end, deltas=deltas, records=records)}

    return await _call(work)


async def jobs_metric_points(request: Request, store: Store) -> Any:
    """One metric's points for a chart, of each of several jobs (``jobs``: names, comma-separated):
    what Compare draws, in one request rather than one a job. A job that is not there answers its
    error in its place; one without the metric, no points."""
    metric = request.path_params["metric"]
    names = _job_names(request)
    width, deltas = _width(request), _deltas(request)
    start, end = _range(request)
    records = request.query_params.get("records") != "0"

    def work() -> dict[str, Any]:
        return {"MetricName": metric, "Series": sagemaker.each_job(store, names, lambda row: charts.metric_chart(
            store, row.id, metric, width, start_ms=start, end_ms=end, deltas=deltas, records=records))}

    return await _call(work)


async def metric_statistics(request: Request, store: Store) -> Any:
    name, metric = request.path_params["name"], request.path_params["metric"]
    period = _int(request, "period", 60, 1, 86_400 * 30)
    statistic = request.query_params.get("stat", "Average")
    start, end = _range(request)

    def work() -> dict[str, Any]:
        row = sagemaker.job(store, name)
        key = job_metric_key(row.name, metric)
        begin = start if start is not None else int(row.creation_time * 1000)
        finish = end if end is not None else int(time.time() * 1000) + 60_000
        request_: dict[str, Any] = {"Namespace": key.namespace, "MetricName": metric,
                                    "Dimensions": [{"Name": k, "Value": v} for k, v in key.dimensions],
                                    "StartTime": begin / 1000, "EndTime": finish / 1000, "Period": period}
        if re.fullmatch(r"p\d+(\.\d+)?", statistic):
            request_["ExtendedStatistics"] = [statistic]
        else:
            request_["Statistics"] = [statistic]
        return api.cloudwatch.get_metric_statistics(store, **request_)

    return await _call(work)


async def system_metrics(request: Request, store: Store) -> Any:
    name = request.path_params["name"]
    return await _call(lambda: trainmon.list_job_system_metrics(store, TrainingJobName=name))


async def system_points(request: Request, store: Store) -> Any:
    name, host, metric = (request.path_params[k] for k in ("name", "host", "metric"))
    width, deltas = _width(request), _deltas(request)
    start, end = _range(request)

    def work() -> dict[str, Any]:
        row = sagemaker.job(store, name)
        keys = trainmon.system_metric_keys(store, row.name, host, [metric])
        if not keys:
            raise NotFound(f"job {row.name} has no system metric {metric} on host {host}.")
        return {"MetricName": metric, "Host": host, **charts.system_chart(store, keys[0], width, start, end,
                                                                           deltas=deltas)}

    return await _call(work)


async def profile_summary(request: Request, store: Store) -> Any:
    name = request.path_params["name"]
    return await _call(lambda: trainmon.get_profile_summary(store, TrainingJobName=name))


async def profile_points(request: Request, store: Store) -> Any:
    name, host, metric = (request.path_params[k] for k in ("name", "host", "metric"))
    width, deltas = _width(request), _deltas(request)
    start, end = _range(request)

    def work() -> dict[str, Any]:
        from ..jobs.status import profiler_settings

        row = sagemaker.job(store, name)
        settings = profiler_settings(row.doc)
        if settings is None:
            raise NotFound(f"job {row.name} ran without the profiler.")
        try:
            shown = charts.profile_chart(settings["S3OutputPath"], row.name, host, metric, width, start, end,
                                         deltas=deltas)
        except ImportError:
            raise ValidationException("reading profiles needs pyarrow: pip install 'trainmon[profiler]'") from None
        return {"MetricName": metric, "Host": host, **shown}

    return await _call(work)


async def job_report(request: Request, store: Store) -> Any:
    """The job's profiling report, made now from what the store and the profile hold (a running
    job's too), as the self-contained page ``trainmon report`` writes."""
    name = request.path_params["name"]

    def work() -> str:
        from ..report import render

        return render(store, sagemaker.job(store, name).name)

    return HTMLResponse(await _call(work), headers=_REPORT_HEADERS)


# -- artifacts ------------------------------------------------------------------------------------

_DOWNLOAD_HEADERS = {  # a job's file is data, never a page of this origin: no sniffing, no scripts
    "X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox", "Cache-Control": "no-store"}


async def job_artifacts(request: Request, store: Store) -> Any:
    return await _call(lambda: artifacts.list_job_artifacts(store, TrainingJobName=request.path_params["name"]))


async def archive_members(request: Request, store: Store) -> Any:
    return await _call(lambda: artifacts.list_archive_members(
        store, TrainingJobName=request.path_params["name"], Artifact=request.query_params.get("artifact")))


async def artifact_file(request: Request, store: Store) -> Any:
    """An artifact's bytes (or one member's, of an archive), as a download."""
    name, q = request.path_params["name"], request.query_params
    reader, size, filename = await _call(lambda: artifacts.open_artifact(store, name, q.get("artifact"),
                                                                          q.get("member")))

    async def chunks() -> AsyncIterator[bytes]:
        try:
            while block := await anyio.to_thread.run_sync(reader.read, 1 << 20):
                yield block
        finally:
            reader.close()

    return StreamingResponse(chunks(), media_type="application/octet-stream", headers={
        **_DOWNLOAD_HEADERS, "Content-Length": str(size), "Content-Disposition": _attachment(filename)})


def _attachment(filename: str) -> str:
    plain = "".join(c if c.isascii() and c.isprintable() and c not in '"\\;' else "_" for c in filename) or "file"
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(filename)}"


async def log_download(request: Request, store: Store) -> Any:
    """Every record of the job's log as text, stream by stream (a header line before each when the
    job has several hosts), as a download."""
    name = request.path_params["name"]
    row = await _call(lambda: sagemaker.job(store, name))
    streams = await _call(lambda: sorted(store.streams(row.id), key=lambda s: (s.host, s.id)))

    async def text() -> AsyncIterator[bytes]:
        for stream in streams:
            if len(streams) > 1:
                yield f"==> {stream.name} <==\n".encode()
            after = -1
            while True:
                page, last = await _call(functools.partial(store.log_text, stream.id, after_seq=after, limit=20_000))
                if not page:
                    break
                yield page.encode("utf-8", "surrogateescape")
                after = last

    return StreamingResponse(text(), media_type="text/plain; charset=utf-8", headers={
        **_DOWNLOAD_HEADERS, "Content-Disposition": _attachment(f"{row.name}.log")})


# -- logs -----------------------------------------------------------------------------------------


async def job_logs(request: Request, store: Store) -> Any:
    """A page of records; with ``text`` or ``regex``, only those that hold it (reading on through
    at most ``scan`` records, so a search never stalls the server)."""
    name = request.path_params["name"]
    q = request.query_params
    limit = _int(request, "limit", 500, 1, 10_000)
    tail = _int(request, "tail", None, 0, 10_000_000)
    after = _json_param(request, "after")
    text, pattern = q.get("text") or None, q.get("regex") or None
    scan = _int(request, "scan", 200_000, 1, 10_000_000)
    matcher = None
    if pattern is not None:
        from ..parsing.engines import Matcher, unsafe_reason

        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValidationException(f"regex {pattern!r} is not a valid regular expression: {exc}.") from None
        reason = unsafe_reason(pattern)
        if reason:
            raise ValidationException(f"regex {pattern!r} cannot be searched in bounded time: {reason}.")
        matcher = Matcher(pattern)

    def work() -> dict[str, Any]:
        assert limit is not None and scan is not None
        request_: dict[str, Any] = {"TrainingJobName": name, "Limit": limit if matcher is None and text is None
                                    else min(10_000, max(limit, 1000))}
        for key, value in (("Host", q.get("host") or None), ("After", after), ("TailRecords", tail)):
            if value is not None:
                request_[key] = value
        if matcher is None and text is None:
            return trainmon.get_job_log_records(store, **request_)
        found: list[dict[str, Any]] = []
        scanned = 0
        while True:
            page = trainmon.get_job_log_records(store, **request_)
            for record in page["Records"]:
                message = record["Message"]
                if (text is None or text in message) and (matcher is None or matcher.search(message) is not None):
                    found.append(record)
            scanned += len(page["Records"])
            request_["After"] = page["After"]
            request_.pop("TailRecords", None)
            if len(found) >= limit or page["Complete"] or scanned >= scan:
                return {**page, "Records": found[:limit], "Scanned": scanned}

    return await _call(work)


async def log_record(request: Request, store: Store) -> Any:
    """A record (``stream``, ``record``: 1-based, as a chart point names it) and ``context``
    records on each side."""
    name = request.path_params["name"]
    stream_id = _int(request, "stream", None, 0, 2**62)
    host = request.query_params.get("host") or None
    record = _int(request, "record", None, 1, 2**62)
    context = _int(request, "context", 10, 0, RECORD_CONTEXT_MOST)
    if (stream_id is None and host is None) or record is None:
        raise ValidationException("record and a stream (its id) or a host (its newest stream) are required.")

    def work() -> dict[str, Any]:
        assert context is not None and record is not None
        row = sagemaker.job(store, name)
        streams = [s for s in store.streams(row.id) if s.id == stream_id or (stream_id is None and s.host == host)]
        stream = max(streams, key=lambda s: s.id, default=None)
        if stream is None:
            raise NotFound(f"job {row.name} has no log stream {stream_id if stream_id is not None else host}.")
        events = store.events(stream.id, after_seq=max(-1, record - 2 - context), limit=2 * context + 1)
        return {"LogStreamName": stream.name, "Host": stream.host, "Record": record,
                "Records": [{"Record": e.seq + 1, "Timestamp": e.timestamp_ms, "Message": e.message}
                            for e in events]}

    return await _call(work)


# -- live -----------------------------------------------------------------------------------------


async def job_events(request: Request, store: Store) -> Any:
    name = request.path_params["name"]
    await _call(lambda: sagemaker.job(store, name))  # an unknown job is an error, not an empty stream
    follow = live.JobFollower(store, name, since_ms=_int(request, "since", None, 0, 2**62),
                              log_after=_json_param(request, "after"), log_tail=request.query_params.get("logs") != "0")
    return live.stream(request, follow, request.app.state.settings.poll_s)


async def jobs_events(request: Request, store: Store) -> Any:
    return live.stream(request, live.JobsFollower(store), request.app.state.settings.poll_s)


# -- every operation, as it is --------------------------------------------------------------------


async def operation(request: Request, store: Store) -> Any:
    service, name = request.path_params["service"], request.path_params["operation"]
    found = api.SERVICES.get(service, {}).get(name)
    if found is None:
        known = ", ".join(f"{s}/{o}" for s, ops in api.SERVICES.items() for o in ops)
        raise NotFound(f"there is no operation {service}/{name}; the operations are {known}.")
    request_ = typecheck.given(await body(request))
    typecheck.check(service, name, found, request_)
    return await _call(lambda: found(store, **request_))


_TIMES = Param("times", help="delta: the times as TimestampDeltas (the first, then each one's difference from the "
                             "one before) instead of Timestamps")

ROUTES: tuple[Endpoint, ...] = (
    Endpoint("GET", "/api/jobs", "List jobs, newest first, with their final metrics, or search them", list_jobs, (
        Param("status", help="InProgress, Completed, Failed, Stopping or Stopped"),
        Param("name", help="part of the job's name"),
        Param("where", help="a Search in its text form: HyperParameters.lr < 0.01 and Tags.team = vision"),
        Param("sort", help="CreationTime, Name, Status, or any property Search sorts by (Metrics.loss, "
                           "HyperParameters.lr)"),
        Param("order", help="Ascending or Descending"), Param("limit", "integer", "1 to 100 (50)"),
        Param("token", help="the NextToken of the page before"))),
    Endpoint("POST", "/api/jobs", "Create and start a job", create_job, body="a CreateTrainingJob request"),
    Endpoint("GET", "/api/jobs/{name}", "A job's description and what its metric definitions did", describe_job,
             (Param("name", where="path"),)),
    Endpoint("GET", "/api/descriptions", "Several jobs' descriptions (Compare's, in one request)", describe_jobs,
             (Param("jobs", help=f"job names, comma-separated (1 to {MANY_JOBS})"),)),
    Endpoint("POST", "/api/jobs/{name}/stop", "Stop a job", stop_job, (Param("name", where="path"),)),
    Endpoint("DELETE", "/api/jobs/{name}", "Delete a finished job and its data", delete_job,
             (Param("name", where="path"),)),
    Endpoint("GET", "/api/jobs/{name}/metrics/{metric:path}/points",
             "A metric's points for a chart: per pixel the first, last, lowest and highest point and any non-finite "
             "one", metric_points, (
                 Param("name", where="path"), Param("metric", where="path"),
                 Param("width", "integer", "buckets (pixels), 1 to 10000 (1000)"),
                 Param("start", "integer", "epoch ms"), Param("end", "integer", "epoch ms (excluded)"),
                 Param("host", help="one host's points (algo-N)"),
                 Param("records", help="0: without each point's log record"), _TIMES), tags=("metrics",)),
    Endpoint("GET", "/api/metrics/{metric:path}/points", "One metric's points for a chart, of each of several jobs "
             "(Compare's, in one request)", jobs_metric_points, (
                 Param("metric", where="path"), Param("jobs", help=f"job names, comma-separated (1 to {MANY_JOBS})"),
                 Param("width", "integer", "buckets (pixels), 1 to 10000 (1000)"),
                 Param("start", "integer", "epoch ms"), Param("end", "integer", "epoch ms (excluded)"),
                 Param("records", help="0: without each point's log record"), _TIMES), tags=("metrics",)),
    Endpoint("GET", "/api/jobs/{name}/metrics/{metric:path}/statistics", "A statistic of a metric per period",
             metric_statistics, (
                 Param("name", where="path"), Param("metric", where="path"),
                 Param("period", "integer", "seconds (60)"),
                 Param("stat", help="Average, Sum, Minimum, Maximum, SampleCount or a percentile such as p99"),
                 Param("start", "integer", "epoch ms"), Param("end", "integer", "epoch ms")), tags=("metrics",)),
    Endpoint("GET", "/api/jobs/{name}/system", "The system metrics of a job's hosts", system_metrics,
             (Param("name", where="path"),), tags=("metrics",)),
    Endpoint("GET", "/api/jobs/{name}/system/{host}/{metric}/points", "A host's system metric for a chart",
             system_points, (Param("name", where="path"), Param("host", where="path"),
                             Param("metric", where="path"), Param("width", "integer"), Param("start", "integer"),
                             Param("end", "integer"), _TIMES), tags=("metrics",)),
    Endpoint("GET", "/api/jobs/{name}/profile", "The profiler's data per host and metric", profile_summary,
             (Param("name", where="path"),), tags=("metrics",)),
    Endpoint("GET", "/api/jobs/{name}/profile/{host}/{metric:path}/points",
             "A host's profiler metric at full resolution, for a chart", profile_points,
             (Param("name", where="path"), Param("host", where="path"), Param("metric", where="path"),
              Param("width", "integer"), Param("start", "integer"), Param("end", "integer"), _TIMES), tags=("metrics",)),
    Endpoint("GET", "/api/jobs/{name}/report", "The job's profiling report (an HTML page)", job_report,
             (Param("name", where="path"),), tags=("rules",)),
    Endpoint("GET", "/api/jobs/{name}/artifacts", "The job's model.tar.gz, output.tar.gz, checkpoints and "
             "channel inputs, with their sizes", job_artifacts, (Param("name", where="path"),)),
    Endpoint("GET", "/api/jobs/{name}/artifacts/members", "The members of an archive among the job's artifacts",
             archive_members, (Param("name", where="path"), Param("artifact", help="an artifact's Id"))),
    Endpoint("GET", "/api/jobs/{name}/artifacts/file", "An artifact's bytes, or one member's of an archive, as a "
             "download", artifact_file, (Param("name", where="path"), Param("artifact", help="an artifact's Id"),
                                         Param("member", help="a member of the archive"))),
    Endpoint("GET", "/api/jobs/{name}/log.txt", "The job's whole log as text, as a download", log_download,
             (Param("name", where="path"),), tags=("logs",)),
    Endpoint("GET", "/api/jobs/{name}/logs", "A page of a job's log records, or those that hold a text or match a "
             "regex", job_logs, (
                 Param("name", where="path"), Param("host"), Param("limit", "integer", "1 to 10000 (500)"),
                 Param("tail", "integer", "start each stream at its last N records"),
                 Param("after", help="JSON: the After of the page before"), Param("text", help="plain text to find"),
                 Param("regex", help="a regular expression to match, in bounded time"),
                 Param("scan", "integer", "records to read through at most (200000)")), tags=("logs",)),
    Endpoint("GET", "/api/jobs/{name}/record", "A log record and the records around it", log_record, (
        Param("name", where="path"), Param("stream", "integer", "a log stream's id"),
        Param("host", help="or a host: its newest log stream"),
        Param("record", "integer", "1-based"), Param("context", "integer", "records each side (10)")),
        tags=("logs",)),
    Endpoint("GET", "/api/jobs/{name}/events", "Live: status, new points and new log records (Server-Sent Events)",
             job_events, (Param("name", where="path"), Param("since", "integer", "points after this epoch ms"),
                          Param("after", help="JSON: log positions to go on from"),
                          Param("logs", help="0: no log records")), stream=True, tags=("live",)),
    Endpoint("GET", "/api/events", "Live: every job's status (Server-Sent Events)", jobs_events, stream=True,
             tags=("live",)),
    Endpoint("GET", "/api/images", "The container images a job can run in", list_images),
    Endpoint("POST", "/api/definitions/test", "Metric definitions applied to sample log text", test_definitions,
             body="MetricDefinitions and LogText (TestMetricDefinitions)", tags=("definitions",)),
    Endpoint("POST", "/api/{service}/{operation}", "Any operation of the operations layer, by its API name",
             operation, (Param("service", where="path", help="sagemaker, cloudwatch, logs, sts or trainmon"),
                         Param("operation", where="path", help="CreateTrainingJob, GetMetricData, ...")),
             body="the operation's request, as boto3 takes it", tags=("operations",)),
)


def _route(endpoint: Endpoint) -> Route:
    async def handle(request: Request) -> Response:
        store: Store = request.app.state.store
        try:
            answer = await endpoint.handler(request, store)
        except TrainmonError as exc:
            return error_reply(exc)
        return answer if isinstance(answer, Response) else reply(answer)

    handle.__name__ = snake_case(endpoint.handler.__name__)
    return Route(endpoint.path, handle, methods=[endpoint.method])


# -- pages ----------------------------------------------------------------------------------------


async def page(request: Request) -> Response:
    index = CONSOLE / "index.html"
    if not index.exists():
        return HTMLResponse("<p>The console's files are missing from this installation.</p>", 500)
    return FileResponse(index, headers=_PAGE_HEADERS)


_PAGE_HEADERS = {
    # only this server's scripts run: a job that prints <script> shows those characters
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # (no-referrer would send a form's Origin as null, refused as another site's)
}

_REPORT_HEADERS = {
    # the report draws with its own inline styles and SVG, runs no script and loads nothing
    "Content-Security-Policy": "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

_LOGIN = """<!doctype html><meta charset="utf-8"><title>trainmon: sign in</title>
<style>body{font:15px system-ui,sans-serif;margin:15vh auto;max-width:26rem;color:#222}
input{font:inherit;width:100%;box-sizing:border-box;padding:.4rem;margin:.5rem 0}
button{font:inherit;padding:.4rem 1rem}.error{color:#b00}code{background:#f3f3f3;padding:0 .2rem}</style>
<h1>trainmon</h1>{error}<p>To sign this browser in, run <code>trainmon console</code> on the server's machine, as
the user who runs the server: it prints a link that signs in once.</p>
<p>Or paste the server's access token (the data directory's <code>server-token</code>):</p>
<form method="post" action="/login"><input name="token" type="password" autocomplete="current-password"
placeholder="access token" aria-label="access token" autofocus><button>Sign in</button></form>"""


def _login_page(error: str = "", status: int = 200) -> Response:
    shown = f'<p class="error" role="alert">{error}</p>' if error else ""
    return HTMLResponse(_LOGIN.replace("{error}", shown), status, headers=_PAGE_HEADERS)


def _signed_in(request: Request, access: auth.Access) -> Response:
    response: Response = RedirectResponse("/", 303)
    assert access.token is not None
    response.set_cookie(access.cookie, auth.session_value(access.token), max_age=auth.SESSION_S, httponly=True,
                        samesite="strict", secure=request.url.scheme == "https")
    return response


async def login(request: Request) -> Response:
    """The sign-in page: a one-time link's code (``?code=``) or the token in the form sets the
    session cookie."""
    access: auth.Access = request.app.state.settings.access
    if access.token is None:
        return RedirectResponse("/", 303)
    if request.method == "GET":
        code = request.query_params.get("code")
        if code is None:
            return _login_page()
        if access.sign_ins.take(access.token, code):
            return _signed_in(request, access)
        return _login_page("That sign-in link has expired or was used already: run <code>trainmon console</code> "
                           "for another.", 401)
    form = parse_qs((await request.body())[:4096].decode("utf-8", "replace"))  # one field: no form parser needed
    given = (form.get("token") or [""])[0].strip()
    if hmac.compare_digest(given.encode(), access.token.encode()):
        return _signed_in(request, access)
    return _login_page("That is not the access token.", 401)


async def logout(request: Request) -> Response:
    access: auth.Access = request.app.state.settings.access
    response: Response = RedirectResponse("/login", 303)
    response.delete_cookie(access.cookie, httponly=True, samesite="strict")
    return response


async def openapi(request: Request) -> Response:
    return reply(document(ROUTES))


async def metrics(request: Request) -> Response:
    store: Store = request.app.state.store
    text = await _call(lambda: prometheus.exposition(store))
    return Response(text, media_type=prometheus.CONTENT_TYPE)


async def not_found(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 404
    if status == 405:
        return error_reply(MethodNotAllowed(f"{request.method} is not a method of {request.url.path}."))
    return error_reply(NotFound(f"there is nothing at {request.url.path}; the API is described at /api/openapi.json."))



async def internal_error(request: Request, exc: Exception) -> Response:
    """A fault of the server's own: logged here in full, answered with an id to find it by (never
    the exception's text, which may name files and settings)."""
    incident = secrets.token_hex(6)
    log.error("incident %s: %s %s failed", incident, request.method, request.url.path, exc_info=exc)
    return error_reply(TrainmonError(f"the server failed on this request (incident {incident} in its log)"))


# -- the application ------------------------------------------------------------------------------


@dataclass
class Settings:
    access: auth.Access  # who may talk to the server (auth.py)
    poll_s: float = 0.25  # how often live streams look for news
    maintain: bool = True  # run the store's maintainer


def create_app(store: Store, settings: Settings) -> Any:
    """The server's ASGI application over ``store`` (which it closes when it stops)."""
    codec.decoded.budget = max(codec.decoded.budget, DECODED_BYTES)
    routes: list[Any] = [_route(endpoint) for endpoint in ROUTES]
    routes += [
        Route("/api/openapi.json", openapi, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/", page, methods=["GET"]),
        Route("/jobs/{rest:path}", page, methods=["GET"]),
        Route("/compare", page, methods=["GET"]),
        Route("/new", page, methods=["GET"]),
        Route("/alarms", page, methods=["GET"]),
        Route("/alarms/{rest:path}", page, methods=["GET"]),
        Route("/tuning", page, methods=["GET"]),
        Route("/tuning/{rest:path}", page, methods=["GET"]),
    ]
    uplot = CONSOLE / "node_modules" / "uplot" / "dist"
    if uplot.is_dir():
        routes.append(Mount("/static/uplot", StaticFiles(directory=uplot)))
    routes.append(Mount("/static", StaticFiles(directory=CONSOLE / "static", check_dir=False)))
    maintainer = None

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        nonlocal maintainer
        if settings.maintain:
            from ..runtime.watch.maintenance import Maintainer

            maintainer = Maintainer(store, alarm_pass=api.alarms.evaluate_alarms)  # alarms are evaluated by servers
            maintainer.start()
        try:
            yield
        finally:
            if maintainer is not None:
                await asyncio.to_thread(maintainer.stop)
            store.close()

    app = Starlette(routes=routes, lifespan=lifespan,
                    middleware=[Middleware(GZipMiddleware, minimum_size=1024, compresslevel=GZIP_LEVEL)],  # never on event streams
                    exception_handlers={404: not_found, 405: not_found, Exception: internal_error})
    app.state.store = store
    app.state.settings = settings
    from .aws import Gateway

    return auth.Guard(app, Gateway(store, require_signatures=settings.access.credentials_required), settings.access)

