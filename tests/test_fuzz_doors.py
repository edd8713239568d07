"""Malformed requests at every door of a real server, generated: whatever arrives, the answer is a
4xx that names no file of the server's, never a 500. Bodies are made of the operation's own member
names (so they reach past the first check) holding any JSON; query strings of each route's own
parameters holding any text; and the shapes attackers reach for: JSON nested 100,000 deep, a
NextToken of 5,000 digits, members of the wrong type."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainmon import api
from trainmon.server.app import ROUTES
from trainmon.server.aws.protocols import BY_TARGET

from .conftest import ServerProcess, signed_post, start_server

# Operations that would start something real if a generated request happened to be valid.
STARTS_WORK = {"CreateTrainingJob", "PutMetricAlarm", "SetAlarmState", "MaintainStore"}
OPERATIONS = sorted((service, name) for service, operations in api.SERVICES.items() for name in operations
                    if name not in STARTS_WORK)
TARGETS = {service.api_name: prefix for prefix, service in BY_TARGET.items()}
SIGNING = {service.api_name: service.signing_name for service in BY_TARGET.values()}
DEEP = b"[" * 100_000 + b"]" * 100_000
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)


def _members(service: str, operation: str) -> list[str]:
    function = api.SERVICES[service][operation]
    return [name for name, p in inspect.signature(function).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY] or ["Name"]


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    service, operation = draw(st.sampled_from(OPERATIONS))
    names = _members(service, operation)
    body = draw(st.dictionaries(st.sampled_from(names) | st.text(max_size=6), json_values, max_size=4))
    return service, operation, body


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("fuzz-home")
    started = start_server(home)
    yield started
    started.stop()


def _sound(answer: httpx.Response, server: ServerProcess, what: Any) -> bool:
    assert answer.status_code < 500, (what, answer.status_code, answer.text[:400], "".join(server.output)[-3000:])
    assert str(server.home) not in answer.text, (what, answer.text[:400])  # no file of the server's is named
    return True


@FUZZ
@given(requests())
def test_the_native_operations_door(server: ServerProcess, request: tuple[str, str, dict[str, Any]]) -> None:
    service, operation, body = request
    answer = httpx.post(f"{server.url}/api/{service}/{operation}", json=body, headers=server.headers, timeout=60)
    assert _sound(answer, server, request)


@FUZZ
@given(requests())
def test_the_aws_json_door(server: ServerProcess, request: tuple[str, str, dict[str, Any]]) -> None:
    service, operation, body = request
    if service not in TARGETS:
        return
    headers = {"X-Amz-Target": f"{TARGETS[service]}.{operation}", "Content-Type": "application/x-amz-json-1.1"}
    answer = signed_post(server, SIGNING[service], json.dumps(body).encode(), headers)
    assert _sound(answer, server, request)


GET_ROUTES = [endpoint for endpoint in ROUTES if endpoint.method == "GET" and not endpoint.stream]


@FUZZ
@given(st.sampled_from(GET_ROUTES), st.data())
def test_the_read_routes_query_strings(server: ServerProcess, endpoint: Any, data: st.DataObject) -> None:
    path = endpoint.path.replace("{metric:path}", "loss")
    for param in endpoint.params:
        if param.where == "path":
            path = path.replace("{" + param.name + "}", data.draw(st.sampled_from(["job", "algo-1", "loss", "x y"])))
    query = {param.name: data.draw(st.text(max_size=12) | json_values.map(json.dumps))
             for param in endpoint.params if param.where == "query" and data.draw(st.booleans())}
    answer = httpx.get(server.url + path, params=query, headers=server.headers, timeout=60)
    assert _sound(answer, server, (path, query))


def test_the_shapes_attackers_reach_for(server: ServerProcess) -> None:
    native = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}
    for path in ("/api/jobs", "/api/definitions/test", "/api/sagemaker/ListTrainingJobs",
                 "/api/cloudwatch/GetMetricData", "/api/trainmon/GetJobLogRecords"):
        answer = httpx.post(server.url + path, content=DEEP, headers=native, timeout=60)
        _sound(answer, server, path)
        assert answer.status_code == 400 and "64 deep" in answer.json()["error"]["message"], path
    for prefix, operation in (("SageMaker", "ListTrainingJobs"), ("Logs_20140328", "DescribeLogStreams"),
                              ("GraniteServiceVersion20100801", "ListMetrics")):
        signing = {"SageMaker": "sagemaker", "Logs_20140328": "logs"}.get(prefix, "monitoring")
        answer = signed_post(server, signing, DEEP, {"X-Amz-Target": f"{prefix}.{operation}",
                                                     "Content-Type": "application/x-amz-json-1.1"})
        _sound(answer, server, operation)
        assert answer.status_code == 400, operation
    deep_after = httpx.get(server.url + "/api/jobs/x/logs", params={"after": "[" * 5000 + "]" * 5000}, headers=server.headers,
                           timeout=60)
    assert deep_after.status_code == 400 and "64 deep" in deep_after.json()["error"]["message"]
    digits = "9" * 5000
    for service, operation, member in (("sagemaker", "ListTrainingJobs", "NextToken"),
                                       ("cloudwatch", "ListMetrics", "NextToken"),
                                       ("logs", "DescribeLogStreams", "nextToken"),
                                       ("cloudwatch", "DescribeAlarms", "NextToken")):
        for token in (digits, "junk", "-1", "١٢"):  # (the last: digits, but not ASCII ones)
            body = {member: token, **({"logGroupName": "/aws/sagemaker/TrainingJobs"} if service == "logs" else {})}
            answer = httpx.post(f"{server.url}/api/{service}/{operation}", json=body, headers=server.headers,
                                timeout=60)
            _sound(answer, server, (operation, token[:10]))
            assert answer.status_code == 400, (operation, token[:10], answer.text)  # never a silent first page
    for body in ({"RecordMode": [], "MetricDefinitions": [{"Name": "a", "Regex": "a=(.*)"}], "LogText": "a=1"},
                 {"TrainingJobName": "x", "Host": [1]}, {"TrainingJobName": ["x"]}, {"MaxResults": "5"},
                 {"StatusEquals": {"a": 1}}):
        for operation in ("TestMetricDefinitions", "GetJobLogRecords", "GetJobMetricPoints"):
            answer = httpx.post(f"{server.url}/api/trainmon/{operation}", json=body, headers=server.headers,
                                timeout=60)
            _sound(answer, server, (operation, body))
        answer = httpx.post(f"{server.url}/api/sagemaker/ListTrainingJobs", json=body, headers=server.headers,
                            timeout=60)
        _sound(answer, server, body)
    wrong = httpx.post(f"{server.url}/api/jobs", headers=server.headers, timeout=60,
                       json={"TrainingJobName": "typed", "AlgorithmSpecification": {"TrainingInputMode": ["File"]}})
    assert wrong.status_code == 400 and "algorithmSpecification.trainingInputMode" in wrong.json()["error"]["message"]
