"""The server's JSON API, live events, /metrics and access rules, against a real ``trainmon server``
on a free loopback port, with real training jobs."""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainmon.read.downsample import chart_payload, keep
from trainmon.store import Batch, Store

from .conftest import ServerProcess, StoreTarget, start_server

PY = sys.executable

JOB_SCRIPT = """
import os, sys, time
stop = sys.argv[1]
for step in range(int(sys.argv[2])):
    print(f"step={step} loss={1 / (step + 1):.4f} <b>bold</b>", flush=True)
    if step == 3:
        print("loss=nan", flush=True)
    time.sleep(0.02)
deadline = time.monotonic() + 600  # a test that failed before making the stop file leaves no job behind
while not os.path.exists(stop) and time.monotonic() < deadline:
    time.sleep(0.05)
"""


_STOP_FILES: list[Path] = []  # of the jobs the running test started


def job_request(name: str, script: Path, stop: Path, steps: int = 20, **extra: Any) -> dict[str, Any]:
    _STOP_FILES.append(stop)
    return {"TrainingJobName": name,
            "AlgorithmSpecification": {"TrainingInputMode": "File",
                                       "ContainerEntrypoint": [PY, str(script), str(stop), str(steps)],
                                       "MetricDefinitions": [{"Name": "loss", "Regex": r"loss=(\S+)"},
                                                             {"Name": "step", "Regex": r"step=(\d+)"}]},
            "HyperParameters": {"lr": "0.1"}, "ProfilerConfig": {"DisableProfiler": True}, **extra}


@pytest.fixture(autouse=True)
def _stop_every_job() -> Iterator[None]:
    """The jobs of a test end with it, passed or failed: every stop file is made at teardown."""
    yield
    while _STOP_FILES:
        _STOP_FILES.pop().touch()


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as client:
        yield client


def wait_for(client: httpx.Client, name: str, done: Any) -> dict[str, Any]:
    """Follow the job's event stream until ``done(event, data)`` holds; the events seen so far."""
    seen: dict[str, Any] = {"status": [], "points": {}, "log": []}
    for event, data in events(client, f"/api/jobs/{name}/events?since=0"):
        if event == "status":
            seen["status"].append(data["SecondaryStatus"])
        elif event == "points":
            for metric, points in data.items():
                seen["points"].setdefault(metric, []).extend(zip(points["Timestamps"], points["Values"], strict=True))
        elif event == "log":
            seen["log"].extend(data["Records"])
        if done(event, data, seen):
            return seen
    raise AssertionError(f"the stream ended first: {seen}")


def events(client: httpx.Client, path: str) -> Iterator[tuple[str, Any]]:
    with client.stream("GET", path) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        event = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                yield str(event), json.loads(line[6:])


def start_job(client: httpx.Client, script: Any, tmp_path: Path, name: str, steps: int = 20) -> Path:
    stop = tmp_path / f"{name}.stop"
    path = script(JOB_SCRIPT)
    answer = client.post("/api/jobs", json=job_request(name, path, stop, steps))
    assert answer.status_code == 200, answer.text
    assert answer.json()["TrainingJobArn"].endswith(f"training-job/{name}")
    return stop


def test_the_live_stream_sends_the_definitions_counts_and_the_rules_statuses(http: httpx.Client, script: Any,
                                                                              tmp_path: Path) -> None:
    stop = tmp_path / "live.stop"
    rule = {"RuleConfigurationName": "nan", "RuleEvaluatorImage": "any",
            "RuleParameters": {"rule_to_invoke": "ExplodingTensor", "tensor_regex": "loss"}}
    answer = http.post("/api/jobs", json=job_request("live", script(JOB_SCRIPT), stop, 20,
                                                     DebugRuleConfigurations=[rule]))
    assert answer.status_code == 200, answer.text

    def counted(event: str, data: Any, seen: Any) -> bool:
        if event == "definitions":
            seen["definitions"] = data["Definitions"]
        if event == "rules":
            seen["rules"], seen["counts"] = data["DebugRuleEvaluationStatuses"], data["RuleFindingCounts"]
        return (seen.get("definitions") or [{}])[0].get("Matches", 0) >= 21 and any(
            r["RuleEvaluationStatus"] == "IssuesFound" for r in seen.get("rules", []))

    seen = wait_for(http, "live", counted)  # while the job still runs: it waits for its stop file
    (status,) = seen["rules"]
    assert status["RuleConfigurationName"] == "nan" and "loss is nan" in status["StatusDetails"]
    assert isinstance(status["LastModifiedTime"], float) and seen["counts"] == {"nan": 1}
    assert http.get("/api/jobs/live").json()["Job"]["TrainingJobStatus"] == "InProgress"


# -- a job through the API, on each backend ---------------------------------------------------------


def test_a_job_through_the_api_from_start_to_end(store_target: StoreTarget, script: Any, tmp_path: Path) -> None:
    server = start_server(store_target.home, database_url=store_target.database_url)
    try:
        with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as client:
            stop = start_job(client, script, tmp_path, "api-job")
            seen = wait_for(client, "api-job", lambda e, d, s: len(s["points"].get("loss", [])) >= 21
                            and len(s["log"]) >= 21)  # a poll sends its points before its records
            assert "Training" in seen["status"]
            losses = seen["points"]["loss"]
            assert [v for _, v in losses][:5] == [1.0, 0.5, 0.3333, 0.25, None]  # NaN is null in Values
            assert any(r["Message"] == "step=0 loss=1.0000 <b>bold</b>" for r in seen["log"])

            page = client.get("/api/jobs/api-job/metrics/loss/points", params={"width": 2}).json()
            assert page["Count"] == 21 and page["NonFinite"]  # 21 points: 4 per bucket at most, the NaN kept
            assert len(page["Timestamps"]) < 21 and "NaN" in page["NonFinite"].values()
            deltas = client.get("/api/jobs/api-job/metrics/loss/points", params={"width": 2, "times": "delta"}).json()
            assert "Timestamps" not in deltas and deltas["Values"] == page["Values"]
            assert list(itertools.accumulate(deltas["TimestampDeltas"])) == page["Timestamps"]
            wrong = client.get("/api/jobs/api-job/metrics/loss/points", params={"times": "relative"})
            assert wrong.status_code == 400 and "times must be delta" in wrong.json()["error"]["message"]
            record = client.get("/api/jobs/api-job/record", params={
                "stream": page["Stream"][0], "record": page["Record"][0], "context": 1}).json()
            assert record["Host"] == "algo-1" and record["Records"][0]["Message"].startswith("step=0 loss=1.0000")
            by_host = client.get("/api/jobs/api-job/record", params={"host": "algo-1", "record": 5, "context": 1})
            assert [r["Message"] for r in by_host.json()["Records"]][1] == "loss=nan"  # as a log line names it

            found = client.get("/api/jobs/api-job/logs", params={"regex": r"step=1\d "}).json()
            assert [r["Message"].split()[0] for r in found["Records"]] == [f"step=1{n}" for n in range(10)]
            found = client.get("/api/jobs/api-job/logs", params={"text": "loss=nan"}).json()
            assert [r["Record"] for r in found["Records"]] == [5]

            described = client.get("/api/jobs/api-job").json()
            assert described["Job"]["HyperParameters"] == {"lr": "0.1"}
            assert {m["MetricName"]: m["Points"] for m in described["Metrics"]["Metrics"]}["loss"] == 21

            assert client.post("/api/jobs/api-job/stop").json() == {}
            wait_for(client, "api-job", lambda e, d, s: e == "end")
            stop.touch()
            listed = client.get("/api/jobs", params={"status": "Stopped"}).json()["TrainingJobSummaries"]
            assert [j["TrainingJobName"] for j in listed] == ["api-job"]
            assert listed[0]["FinalMetrics"]["step"] == 19.0
            statistics = client.get("/api/jobs/api-job/metrics/step/statistics",
                                    params={"period": 3600, "stat": "Maximum"}).json()
            assert [d["Maximum"] for d in statistics["Datapoints"]] == [19.0]

            assert client.delete("/api/jobs/api-job").json() == {}
            assert client.get("/api/jobs").json()["TrainingJobSummaries"] == []
    finally:
        assert server.stop() == 0, "".join(server.output)


def test_lists_filter_sort_and_page(http: httpx.Client, script: Any, tmp_path: Path) -> None:
    stops = [start_job(http, script, tmp_path, name, steps=1) for name in ("beta", "alpha", "gamma")]
    for stop in stops:
        stop.touch()
    names = [j["TrainingJobName"] for j in http.get("/api/jobs", params={"sort": "Name", "order": "Ascending"})
             .json()["TrainingJobSummaries"]]
    assert names == ["alpha", "beta", "gamma"]
    first = http.get("/api/jobs", params={"sort": "Name", "order": "Ascending", "limit": 2}).json()
    rest = http.get("/api/jobs", params={"sort": "Name", "order": "Ascending", "token": first["NextToken"]}).json()
    assert [j["TrainingJobName"] for j in first["TrainingJobSummaries"] + rest["TrainingJobSummaries"]] == names
    assert [j["TrainingJobName"] for j in http.get("/api/jobs", params={"name": "amm"}).json()[
        "TrainingJobSummaries"]] == ["gamma"]


def test_every_operation_is_reachable_by_its_api_name(http: httpx.Client) -> None:
    answer = http.post("/api/cloudwatch/PutMetricData", json={
        "Namespace": "Custom", "MetricData": [{"MetricName": "m", "Value": 1.5, "Timestamp": time.time()}]})
    assert answer.status_code == 200, answer.text
    listed = http.post("/api/cloudwatch/ListMetrics", json={"Namespace": "Custom"}).json()
    assert [m["MetricName"] for m in listed["Metrics"]] == ["m"]
    missing = http.post("/api/cloudwatch/NoSuchThing", json={})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NotFound"


def test_the_definitions_dry_run(http: httpx.Client) -> None:
    answer = http.post("/api/definitions/test", json={
        "MetricDefinitions": [{"Name": "loss", "Regex": r"loss=(\S+)"}], "LogText": "loss=1\nloss=x\nloss=0.5\n"})
    assert [(p["Line"], p["Value"]) for p in answer.json()["Points"]] == [(1, 1.0), (3, 0.5)]
    assert answer.json()["Warnings"] == []
    shared = http.post("/api/definitions/test", json={"LogText": "loss=1\n", "MetricDefinitions": [
        {"Name": "loss", "Regex": r"loss=(\S+)"}, {"Name": "loss", "Regex": r"(\d+)$"}]}).json()
    assert [(p["Definition"], p["Value"]) for p in shared["Points"]] == [(1, 1.0), (2, 1.0)]
    assert [w.split(":")[0] for w in shared["Warnings"]] == [
        "MetricDefinitions[1] and MetricDefinitions[2] share the name 'loss'"]
    # an invalid definition is named in Problems, and the others are tested still
    bad = http.post("/api/definitions/test", json={"MetricDefinitions": [
        {"Name": "loss", "Regex": "loss=("}, {"Name": "acc", "Regex": r"acc=(\S+)"}], "LogText": "acc=0.5 Loss=1"})
    assert bad.status_code == 200, bad.text
    assert bad.json()["Problems"] == [{"Definition": 1, "Message": "MetricDefinitions[1] ('loss'): regex does not "
                                       "compile: missing ), unterminated subpattern at position 5."}]
    assert [(p["Definition"], p["MetricName"], p["Value"]) for p in bad.json()["Points"]] == [(2, "acc", 0.5)]
    assert bad.json()["Definitions"][0] == {"Name": "loss", "Problems": [bad.json()["Problems"][0]["Message"]]}
    near = http.post("/api/definitions/test", json={"MetricDefinitions": [{"Name": "loss", "Regex": r"loss=(\S+)"}],
                                                    "LogText": "Loss=1"}).json()
    assert near["Definitions"][0]["NearMiss"].startswith("the text holds 'Loss=', 'loss=' in another case")
    unreadable = http.post("/api/definitions/test", json={"MetricDefinitions": "loss", "LogText": "x"})
    assert unreadable.status_code == 400 and unreadable.json()["error"]["code"] == "ValidationException"


# -- errors: one shape everywhere -----------------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "kwargs", "status", "code"), [
    ("GET", "/api/jobs/nope", {}, 400, "ValidationException"),
    ("GET", "/nothing/here", {}, 404, "NotFound"),
    ("GET", "/api/jobs/a/b/c", {}, 404, "NotFound"),
    ("PUT", "/api/jobs", {}, 405, "MethodNotAllowed"),
    ("POST", "/api/jobs", {"content": b"{not json"}, 400, "ValidationException"),
    ("POST", "/api/jobs", {"json": [1, 2]}, 400, "ValidationException"),
    ("POST", "/api/jobs", {"json": {"TrainingJobName": "x"}}, 400, "ValidationException"),
    ("GET", "/api/jobs", {"params": {"limit": "many"}}, 400, "ValidationException"),
    ("GET", "/api/jobs", {"params": {"status": "Sleeping"}}, 400, "ValidationException"),
    ("POST", "/api/definitions/test", {"content": b"x" * (21 << 20)}, 413, "PayloadTooLarge"),
])
def test_errors_have_one_shape(http: httpx.Client, method: str, path: str, kwargs: dict[str, Any], status: int,
                               code: str) -> None:
    answer = http.request(method, path, **kwargs)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["code"] == code and error["message"]


def test_a_hostile_search_regex_is_refused_or_bounded(http: httpx.Client, script: Any, tmp_path: Path) -> None:
    start_job(http, script, tmp_path, "hostile", steps=2).touch()
    refused = http.get("/api/jobs/hostile/logs", params={"regex": "(a+)+$"})
    assert refused.status_code in (200, 400)
    if refused.status_code == 400:
        assert "bounded time" in refused.json()["error"]["message"]
    invalid = http.get("/api/jobs/hostile/logs", params={"regex": "("})
    assert invalid.status_code == 400 and "not a valid regular expression" in invalid.json()["error"]["message"]


# -- the OpenAPI document and /metrics ------------------------------------------------------------


def test_the_openapi_document_describes_every_route(http: httpx.Client) -> None:
    from trainmon.server.app import ROUTES

    document = http.get("/api/openapi.json").json()
    assert document["openapi"].startswith("3.")
    for endpoint in ROUTES:
        assert endpoint.method.lower() in document["paths"][endpoint.path]
    assert document["components"]["schemas"]["Error"]["required"] == ["error"]


def test_prometheus_scrapes_running_jobs(http: httpx.Client, script: Any, tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    stop = start_job(http, script, tmp_path, "scraped", steps=6)
    wait_for(http, "scraped", lambda e, d, s: len(s["points"].get("step", [])) >= 6)
    answer = http.get("/metrics")
    assert answer.headers["content-type"].startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(answer.text) for s in family.samples}
    assert samples[("trainmon_job_metric", (("job", "scraped"), ("metric", "step")))] == 5.0
    assert samples[("trainmon_jobs", (("status", "InProgress"),))] == 1.0
    stop.touch()


# -- who may talk to the server -------------------------------------------------------------------


@pytest.mark.parametrize("problem", ["missing", "readable by others", "empty"])
def test_a_server_without_a_usable_token_refuses_to_start(home: Path, tmp_path: Path, problem: str) -> None:
    token_file = tmp_path / "token"
    if problem != "missing":
        token_file.write_text("" if problem == "empty" else "a-token-of-enough-length-here")
        token_file.chmod(0o644 if problem == "readable by others" else 0o600)
    with pytest.raises(AssertionError, match="did not start") as info:
        start_server(home, "--token-file", str(token_file))
    assert {"missing": "No such file", "readable by others": "chmod 600", "empty": "empty"}[problem] in str(info.value)


# -- processes: several servers, restarts ---------------------------------------------------------


def test_servers_over_one_store_see_the_same_jobs_and_jobs_outlive_them(home: Path, script: Any,
                                                                        tmp_path: Path) -> None:
    first, second = start_server(home), start_server(home)
    try:
        with httpx.Client(base_url=first.url, headers=first.headers, timeout=60) as one, \
                httpx.Client(base_url=second.url, headers=second.headers, timeout=60) as two:
            stop = start_job(one, script, tmp_path, "shared", steps=3)
            assert [j["TrainingJobName"] for j in two.get("/api/jobs").json()["TrainingJobSummaries"]] == ["shared"]
            wait_for(two, "shared", lambda e, d, s: len(s["points"].get("step", [])) >= 3)
    finally:
        assert first.stop() == 0
    try:  # the job's supervisor is its own process: it goes on without the server that started it
        with httpx.Client(base_url=second.url, headers=second.headers, timeout=60) as two:
            assert two.get("/api/jobs/shared").json()["Job"]["TrainingJobStatus"] == "InProgress"
            stop.touch()
            wait_for(two, "shared", lambda e, d, s: e == "end")
            assert two.get("/api/jobs/shared").json()["Job"]["TrainingJobStatus"] == "Completed"
    finally:
        second.stop()


# -- downsampling ---------------------------------------------------------------------------------


def test_downsampling_keeps_every_pixels_extremes_and_non_finite_points() -> None:
    stamps = np.arange(100_000, dtype=np.int64)
    values = np.sin(stamps / 500.0)
    values[[123, 45_678]] = [50.0, -50.0]
    values[[7, 99_998]] = [np.nan, np.inf]
    kept = keep(stamps, values, 100)
    assert len(kept) <= 7 * 100
    assert {0, 7, 123, 45_678, 99_998, 99_999} <= set(kept.tolist())
    payload = chart_payload(stamps[kept], values[kept])
    assert payload["NonFinite"] == {str(kept.tolist().index(7)): "NaN", str(kept.tolist().index(99_998)): "Infinity"}
    assert keep(stamps[:50], values[:50], 100).tolist() == list(range(50))  # few points: all of them
    # times as far apart as the API lets them be (0 to 2**62 ms): buckets in floats, not an overflow
    far = np.concatenate([np.arange(5000, dtype=np.int64), np.arange(5000, dtype=np.int64) + 2**62 - 5000])
    kept = keep(far, np.ones(len(far)), 10_000 // 4 - 1)
    assert {0, 4999, 5000, 9999} <= set(kept.tolist()) and len(kept) < len(far)
    assert np.all(np.diff(kept) > 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32), st.just(float("nan"))),
                min_size=1, max_size=400), st.integers(1, 30))
def test_downsampling_matches_the_plain_rule(values: list[float], width: int) -> None:
    """Per bucket: its first and last point, a lowest and a highest finite one, the first of each
    non-finite kind, and nothing else."""
    column = np.array(values, dtype=np.float64)
    stamps = np.arange(len(column), dtype=np.int64) * 3
    kept = set(keep(stamps, column, width).tolist())
    if len(column) <= 4 * width:
        assert kept == set(range(len(column)))
        return
    span = int(stamps[-1]) + 1
    buckets: dict[int, list[int]] = {}
    for index, ts in enumerate(stamps.tolist()):
        buckets.setdefault(min(ts * width // span, width - 1), []).append(index)
    for members in buckets.values():
        mine = kept & set(members)
        assert {members[0], members[-1]} <= mine
        finite = [i for i in members if math.isfinite(column[i])]
        if finite:
            assert min(column[i] for i in mine if math.isfinite(column[i])) == min(column[i] for i in finite)
            assert max(column[i] for i in mine if math.isfinite(column[i])) == max(column[i] for i in finite)
        for kind in (math.isnan, lambda v: v == math.inf, lambda v: v == -math.inf):
            of_kind = [i for i in members if kind(column[i])]
            if of_kind:
                assert of_kind[0] in mine
        assert len(mine) <= 7


def test_the_server_says_what_to_install_when_its_packages_are_missing(home: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "uvicorn.py").write_text("raise ImportError('no uvicorn here', name='uvicorn')\n")
    import subprocess

    result = subprocess.run([PY, "-m", "trainmon", "server", "--port", "0"], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(blocker)}, timeout=60)
    assert result.returncode == 1 and "pip install 'trainmon[server]'" in result.stderr


def test_a_metric_named_with_a_slash_is_charted_and_a_running_jobs_statistics_reach_now(
        http: httpx.Client, script: Any, tmp_path: Path) -> None:
    stop = tmp_path / "slash.stop"
    path = script(JOB_SCRIPT)
    request = job_request("slash", path, stop, steps=5)
    request["AlgorithmSpecification"]["MetricDefinitions"] = [{"Name": "train/loss", "Regex": r"loss=(\S+)"}]
    assert http.post("/api/jobs", json=request).status_code == 200
    wait_for(http, "slash", lambda e, d, s: len(s["points"].get("train/loss", [])) >= 6)  # five and a NaN
    points = http.get("/api/jobs/slash/metrics/train%2Floss/points").json()
    assert points["MetricName"] == "train/loss" and points["Count"] == 6
    statistics = http.get("/api/jobs/slash/metrics/train%2Floss/statistics",  # a running job: up to now
                          params={"period": 3600, "stat": "SampleCount"}).json()
    assert sum(d["SampleCount"] for d in statistics["Datapoints"]) == 5  # the NaN is not a datapoint
    stop.touch()


def test_values_for_display_keep_a_millionth_of_their_span() -> None:
    from trainmon.read.downsample import DISPLAY_STEPS, for_display

    rng = np.random.default_rng(3)
    for values in (rng.normal(0.5, 0.02, 1000), 1e6 + rng.normal(0, 1e-3, 1000), rng.normal(0, 1e9, 1000),
                   np.full(10, 0.123456789123), np.array([np.nan, np.inf, 2.5, -np.inf])):
        shown = for_display(values)
        finite = np.isfinite(values)
        span = np.ptp(values[finite]) or abs(values[finite]).max()
        assert np.array_equal(np.isnan(shown), np.isnan(values)) and np.array_equal(shown[~finite & ~np.isnan(values)],
                                                                                    values[~finite & ~np.isnan(values)])
        assert np.all(np.abs(shown[finite] - values[finite]) <= span / DISPLAY_STEPS)
        assert len(json.dumps(shown[finite].tolist())) <= len(json.dumps(values[finite].tolist()))
    assert for_display(np.array([0.0, 0.0])).tolist() == [0.0, 0.0]


def test_profile_data_at_full_resolution(http: httpx.Client, script: Any, tmp_path: Path) -> None:
    """Every profiler sample of a host's metric, as the profile archive holds it."""
    import trainmon

    request = job_request("profiled", script(JOB_SCRIPT), tmp_path / "never", steps=30)
    request["AlgorithmSpecification"]["ContainerEntrypoint"] = [PY, "-c", "import time; time.sleep(1.5)"]
    request["ProfilerConfig"] = {"ProfilingIntervalInMilliseconds": 100}
    assert http.post("/api/jobs", json=request).status_code == 200
    wait_for(http, "profiled", lambda e, d, s: e == "end")
    summary = http.get("/api/jobs/profiled/profile").json()["Metrics"]
    cpu = next(row for row in summary if row["metric"] == "job_cpu_pct")
    points = http.get("/api/jobs/profiled/profile/algo-1/job_cpu_pct/points", params={"width": 5000}).json()
    frame = trainmon.profile("profiled").dataframe()
    expected = frame[(frame.metric == "job_cpu_pct") & (frame.host == "algo-1")]
    assert points["Count"] == cpu["samples"] == len(expected) > 5
    assert points["Timestamps"] == [int(t.timestamp() * 1000) for t in expected["timestamp"]]
    missing = http.get("/api/jobs/profiled/profile/algo-1/no_such_metric/points").json()
    assert missing["Count"] == 0


def test_the_console_preloads_every_module_it_has() -> None:
    """index.html names each module for the browser to fetch at once (not one import level after
    another): a module added to static/ must be named there too."""
    from trainmon.server.app import CONSOLE

    index = (CONSOLE / "index.html").read_text(encoding="utf-8")
    preloaded = set(re.findall(r'<link rel="modulepreload" href="/static/([\w.-]+\.js)"', index))
    modules = {path.name for path in (CONSOLE / "static").glob("*.js")} - {"app.js"}
    assert preloaded == modules
    assert '<script type="module" src="/static/app.js">' in index


def test_a_live_event_never_cuts_between_the_points_of_one_record(store: Store,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Two definitions of one name give a record two points; the follower goes on after the last
    record it sent, so an event that stopped between them would lose the second."""
    from trainmon.api.sagemaker import register_job
    from trainmon.server import live

    monkeypatch.setattr(live, "POINTS_PER_EVENT", 3)
    job = register_job(store, {"TrainingJobName": "pairs", "AlgorithmSpecification": {
        "TrainingInputMode": "File", "ContainerEntrypoint": ["true"]}})
    stream = store.add_stream(job.id, "algo-1", "pairs/algo-1-1", 1)
    points = [("latency", 1000 + seq, float(seq * 10 + twin), "algo-1", stream.id, seq)
              for seq in range(4) for twin in range(2)]  # two points for every record
    store.write_batch(Batch(job.id, chunks=[(stream.id, 0, 4, 1003, "a\nb\nc\nd")], points=points,
                            stream_stats={stream.id: (4, 7, 1003)}))
    follower = live.JobFollower(store, "pairs", since_ms=0, log_after=None, log_tail=False)
    sent = []
    for _ in range(5):
        for kind, data in follower.poll():
            if kind == "points":
                sent.append(data["latency"]["Record"])
    assert [len(event) for event in sent] == [4, 4]  # 3 asked for, 4 so as not to split record 2
    assert sorted(record for event in sent for record in event) == [1, 1, 2, 2, 3, 3, 4, 4]


def test_a_followed_job_whose_supervisor_exits_is_reaped_and_its_stream_ends(store: Store) -> None:
    """An open page follows a running job; its supervisor dies with no one else reading jobs: the
    follower's next poll reaps the job, so the page sees it fail and its stream end."""
    import subprocess

    from trainmon.api.sagemaker import register_job
    from trainmon.runtime.job import orphans
    from trainmon.server import live

    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        register_job(store, {"TrainingJobName": "followed", "ProfilerConfig": {"DisableProfiler": True},
                             "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["true"]}},
                     supervisor=orphans.identity(stand_in.pid))
        follower = live.JobFollower(store, "followed", since_ms=0, log_after=None, log_tail=False)
        assert [data["TrainingJobStatus"] for kind, data in follower.poll() if kind == "status"] == ["InProgress"]
        assert follower.poll() == [] and not follower.finished
        stand_in.kill()
        stand_in.wait()
        events = follower.poll()
        assert [data["TrainingJobStatus"] for kind, data in events if kind == "status"] == ["Failed"]
        assert ("end", {"TrainingJobStatus": "Failed"}) in events and follower.finished
    finally:
        stand_in.kill()
        stand_in.wait()


def test_an_open_list_of_jobs_sees_a_job_whose_supervisor_exits_fail(store: Store) -> None:
    """The jobs page's stream reaps as a list of jobs does: a job whose supervisor dies while the page
    is open turns Failed there, with no other read of jobs."""
    import subprocess

    from trainmon.api.sagemaker import register_job
    from trainmon.runtime.job import orphans
    from trainmon.server import live

    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        register_job(store, {"TrainingJobName": "listed", "ProfilerConfig": {"DisableProfiler": True},
                             "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["true"]}},
                     supervisor=orphans.identity(stand_in.pid))
        follower = live.JobsFollower(store)
        assert follower.poll() == [] and follower.poll() == []  # (the first poll sees the jobs as they are)
        stand_in.kill()
        stand_in.wait()
        changed = [data for kind, data in follower.poll() if kind == "job"]
        assert [(data["TrainingJobName"], data["TrainingJobStatus"]) for data in changed] == [("listed", "Failed")]
    finally:
        stand_in.kill()
        stand_in.wait()


def test_one_request_gives_several_jobs_points_of_a_metric(http: httpx.Client, store: Any) -> None:
    from .test_search import add_jobs

    jobs = add_jobs(store, 6)
    names = list(jobs)
    answer = http.get("/api/metrics/loss/points", params={"jobs": ",".join([*names, "no-such-job"]), "width": 50,
                                                          "times": "delta", "records": "0"})
    assert answer.status_code == 200, answer.text
    series = {s["TrainingJobName"]: s for s in answer.json()["Series"]}
    assert list(series) == [*names, "no-such-job"]
    for name in names:
        one = http.get(f"/api/jobs/{name}/metrics/loss/points", params={"width": 50, "times": "delta",
                                                                         "records": "0"}).json()
        assert {k: v for k, v in series[name].items() if k != "TrainingJobName"} == {
            k: v for k, v in one.items() if k != "MetricName"}
    assert series["no-such-job"]["Error"]["code"] == "ValidationException"
    too_many = http.get("/api/metrics/loss/points", params={"jobs": ",".join(["a"] * 51)})
    assert too_many.status_code == 400 and "1 to 50 jobs" in too_many.json()["error"]["message"]


def test_one_request_describes_several_jobs(http: httpx.Client, store: Any) -> None:
    from trainmon.api.sagemaker import register_job
    from trainmon.runtime.job.jobstate import set_status

    names = [f"described-{n}" for n in range(3)]
    for n, name in enumerate(names):
        job = register_job(store, {"TrainingJobName": name, "ProfilerConfig": {"DisableProfiler": True},
                                   "HyperParameters": {"lr": str(0.1 * (n + 1))},
                                   "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["true"],
                                                              "MetricDefinitions": [{"Name": "loss", "Regex": r"loss=(\S+)"}]}})
        stream = store.add_stream(job.id, "algo-1", f"{name}/algo-1-1", 1000)
        store.write_batch(Batch(job.id, points=[("loss", 1000 + i, 1.0 / (i + n + 1), "algo-1", stream.id, i)
                                                for i in range(10 * n + 1)]))
        set_status(store, name, "Completed")
    answer = http.get("/api/descriptions", params={"jobs": ",".join([names[2], "no-such-job", *names[:2], "bad name"])})
    assert answer.status_code == 200, answer.text
    jobs = answer.json()["Jobs"]
    assert [j["TrainingJobName"] for j in jobs] == [names[2], "no-such-job", names[0], names[1], "bad name"]
    for described in (jobs[0], jobs[2], jobs[3]):
        one = http.get(f"/api/jobs/{described['TrainingJobName']}").json()
        assert {k: v for k, v in described.items() if k != "TrainingJobName"} == one
    assert [j["Metrics"]["Metrics"][0]["Points"] for j in jobs[2:4]] == [1, 11]
    missing = http.get("/api/jobs/no-such-job").json()["error"]
    assert jobs[1] == {"TrainingJobName": "no-such-job", "Error": missing}
    assert jobs[4]["Error"]["code"] == "ValidationException" and "'bad name'" in jobs[4]["Error"]["message"]
    for wrong in ({}, {"jobs": ","}, {"jobs": ",".join(["a"] * 51)}):
        refused = http.get("/api/descriptions", params=wrong)
        assert refused.status_code == 400 and "1 to 50 jobs" in refused.json()["error"]["message"]


def test_describe_and_statistics_follow_every_write_a_reader_could_have_seen(http: httpx.Client, store: Any) -> None:
    """What the server reads again and again (a job while it writes: its description, a metric's
    statistics) is never an earlier answer kept: a status written is described at once, points added
    in a new chunk are counted at once, and sealing and rolling them up into other forms changes no
    figure."""
    from trainmon.api.sagemaker import register_job
    from trainmon.runtime.job.jobstate import set_status

    job = register_job(store, {"TrainingJobName": "followed", "ProfilerConfig": {"DisableProfiler": True},
                               "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["true"],
                                                          "MetricDefinitions": [{"Name": "loss", "Regex": r"loss=(\S+)"}]}})
    stream = store.add_stream(job.id, "algo-1", "followed/algo-1-1", 1000)
    # an hour before (sealed by the next maintenance pass), at a minute's start: the 150 points, 1.5 s
    # of them, are in one minute's period (periods are whole minutes of the clock, whatever the start)
    start_ms = (int(job.creation_time * 1000) - 3_600_000) // 60_000 * 60_000
    statistics = {"period": 60, "stat": "Maximum", "start": start_ms}

    def write(first: int, count: int) -> None:
        store.write_batch(Batch(job.id, points=[("loss", start_ms + 10 * i, float(i), "algo-1", stream.id, i)
                                                for i in range(first, first + count)]))

    def summary() -> tuple[Any, ...]:
        described = http.get("/api/jobs/followed").json()
        (metric,) = described["Metrics"]["Metrics"]
        datapoints = http.get("/api/jobs/followed/metrics/loss/statistics", params=statistics).json()["Datapoints"]
        return (described["Job"]["TrainingJobStatus"], metric["Points"], metric["Maximum"],
                [(point["Timestamp"], point["Maximum"]) for point in datapoints])

    for round_ in range(3):  # each write a chunk of its own, read between them
        write(round_ * 50, 50)
        status, points, high, datapoints = summary()
        assert (status, points, high) == ("InProgress", 50 * (round_ + 1), 50 * (round_ + 1) - 1)
        assert [highest for _, highest in datapoints] == [50 * (round_ + 1) - 1]
    before = summary()
    assert store.maintain().sealed_chunks  # the three chunks are one sealed chunk now (and rolled up)
    assert summary() == before
    set_status(store, "followed", "Completed")
    assert summary()[0] == "Completed"


def test_a_member_given_as_null_is_absent_at_every_operation(http: httpx.Client, store: Any) -> None:
    """AWS's protocols take a null member as one not sent: the operation's defaults, not a refusal or
    a failure (ListTrainingJobs refused MaxResults null; the tuning lists failed on it)."""
    from .test_search import add_jobs

    names = sorted(add_jobs(store, 3))
    for operation, nulls in (("ListTrainingJobs", {"MaxResults": None, "SortBy": None, "NameContains": None}),
                             ("ListHyperParameterTuningJobs", {"MaxResults": None, "SortBy": None,
                                                               "SortOrder": None})):
        answer = http.post(f"/api/sagemaker/{operation}", json=nulls)
        assert answer.status_code == 200, answer.text
        assert answer.json() == http.post(f"/api/sagemaker/{operation}", json={}).json()
    listed = http.post("/api/sagemaker/ListTrainingJobs", json={"MaxResults": None}).json()["TrainingJobSummaries"]
    assert sorted(job["TrainingJobName"] for job in listed) == names
