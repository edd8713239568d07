"""trainmon.client(...) speaks boto3's shapes: checked against botocore's own service models."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import botocore.session
import pytest

import trainmon
from trainmon.errors import ValidationException

from .conftest import PY

_MODELS: dict[str, Any] = {}


def _shape(service: str, operation: str):
    if service not in _MODELS:
        _MODELS[service] = botocore.session.get_session().get_service_model(service)
    return _MODELS[service].operation_model(operation).output_shape


def conforms(value: Any, shape, path: str = "$") -> list[str]:
    """Problems with ``value`` as botocore's ``shape`` (types, required members, unknown members)."""
    kind = shape.type_name
    if kind == "structure":
        if not isinstance(value, dict):
            return [f"{path}: expected a structure"]
        problems = [f"{path}.{m}: required" for m in shape.required_members if m not in value]
        for key, item in value.items():
            if key == "ResponseMetadata":
                continue
            if key not in shape.members:
                problems.append(f"{path}.{key}: not in the model")
            else:
                problems += conforms(item, shape.members[key], f"{path}.{key}")
        return problems
    if kind == "list":
        return [p for i, item in enumerate(value) for p in conforms(item, shape.member, f"{path}[{i}]")]
    if kind == "map":
        return [p for k, v in value.items() for p in conforms(v, shape.value, f"{path}[{k}]")]
    expected = {"string": str, "integer": int, "long": int, "boolean": bool, "timestamp": dt.datetime,
                "double": float, "float": float}[kind]
    ok = isinstance(value, expected) and not (expected is int and isinstance(value, bool))
    if ok and kind == "string" and shape.enum and value not in shape.enum:
        return [f"{path}: {value!r} not in enum"]
    if ok and kind == "timestamp" and value.tzinfo is None:
        return [f"{path}: naive datetime"]
    return [] if ok else [f"{path}: {type(value).__name__} is not {kind}"]


def _request(name: str, script: Path, **extra: Any) -> dict[str, Any]:
    return {
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::123456789012:role/local",
        "AlgorithmSpecification": {
            "TrainingInputMode": "File",
            "ContainerEntrypoint": [PY, str(script)],
            "MetricDefinitions": [{"Name": "loss", "Regex": r"loss=(\S+)"}],
        },
        "OutputDataConfig": {"S3OutputPath": str(script.parent / "out")},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        **extra,
    }


def test_create_describe_list_with_boto3_shapes(home: Path, script) -> None:
    train = script(
        """
        for i in range(3):
            print(f"loss={1 / (i + 1):.3f}")
        """
    )
    sm = trainmon.client("sagemaker")
    created = sm.create_training_job(**_request("client-job", train, HyperParameters={"epochs": "3"}))
    assert created == {"TrainingJobArn": "arn:aws:sagemaker:local:000000000000:training-job/client-job"}
    assert conforms(created, _shape("sagemaker", "CreateTrainingJob")) == []
    sm.get_waiter("training_job_completed_or_stopped").wait(
        TrainingJobName="client-job", WaiterConfig={"Delay": 0.2, "MaxAttempts": 200})
    doc = sm.describe_training_job(TrainingJobName="client-job")
    assert conforms(doc, _shape("sagemaker", "DescribeTrainingJob")) == []
    assert doc["TrainingJobStatus"] == "Completed"
    assert doc["FinalMetricDataList"][0]["MetricName"] == "loss"
    assert doc["FinalMetricDataList"][0]["Value"] == pytest.approx(0.333)
    assert doc["ModelArtifacts"]["S3ModelArtifacts"].endswith("/out/client-job/output/model.tar.gz")
    assert doc["HyperParameters"] == {"epochs": "3"}

    listed = sm.list_training_jobs(SortOrder="Descending", StatusEquals="Completed")
    assert conforms(listed, _shape("sagemaker", "ListTrainingJobs")) == []
    assert [s["TrainingJobName"] for s in listed["TrainingJobSummaries"]] == ["client-job"]

    logs = trainmon.client("logs")
    streams = logs.describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix="client-job/")
    assert conforms(streams, _shape("logs", "DescribeLogStreams")) == []
    assert "nextToken" not in streams  # the SageMaker SDK loops forever on a token that does not advance
    (stream,) = streams["logStreams"]
    page = logs.get_log_events(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=stream["logStreamName"],
                               startFromHead=True, limit=2)
    assert conforms(page, _shape("logs", "GetLogEvents")) == []
    assert [e["message"] for e in page["events"]] == ["loss=1.000", "loss=0.500"]
    rest = logs.get_log_events(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=stream["logStreamName"],
                               startFromHead=True, nextToken=page["nextForwardToken"])
    assert [e["message"] for e in rest["events"]] == ["loss=0.333"]
    end = logs.get_log_events(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=stream["logStreamName"],
                              startFromHead=True, nextToken=rest["nextForwardToken"])
    assert end["events"] == [] and end["nextForwardToken"] == rest["nextForwardToken"]
    newest = logs.get_log_events(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=stream["logStreamName"],
                                 limit=1)
    assert [e["message"] for e in newest["events"]] == ["loss=0.333"]


def test_stop_and_delete_through_the_client(home: Path, script) -> None:
    train = script("import time\nprint('up', flush=True)\ntime.sleep(600)\n")
    sm = trainmon.client("sagemaker")
    sm.create_training_job(**_request("client-stop", train))
    with pytest.raises(sm.exceptions.ResourceInUse):
        sm.delete_training_job(TrainingJobName="client-stop")
    sm.stop_training_job(TrainingJobName="client-stop")
    assert sm.describe_training_job(TrainingJobName="client-stop")["TrainingJobStatus"] in ("Stopping", "Stopped")
    sm.get_waiter("training_job_completed_or_stopped").wait(
        TrainingJobName="client-stop", WaiterConfig={"Delay": 0.2, "MaxAttempts": 300})
    assert sm.describe_training_job(TrainingJobName="client-stop")["SecondaryStatus"] == "Stopped"
    sm.delete_training_job(TrainingJobName="client-stop")
    with pytest.raises(ValidationException) as info:
        sm.describe_training_job(TrainingJobName="client-stop")
    assert info.value.response["Error"]["Code"] == "ValidationException"
    assert "Requested resource not found" in info.value.response["Error"]["Message"]


def test_duplicate_and_invalid_requests(home: Path, script) -> None:
    train = script("print('x')\n")
    sm = trainmon.client("sagemaker")
    sm.create_training_job(**_request("client-dup", train))
    with pytest.raises(sm.exceptions.ResourceInUse) as info:
        sm.create_training_job(**_request("client-dup", train))
    assert info.value.response["Error"]["Code"] == "ResourceInUse"
    bad = _request("client-bad", train)
    bad["AlgorithmSpecification"]["MetricDefinitions"] = [{"Name": "x", "Regex": "("}]
    with pytest.raises(sm.exceptions.ClientError) as info:
        sm.create_training_job(**bad)
    assert info.value.response["Error"]["Code"] == "ValidationException"
    with pytest.raises(ValidationException, match="MaxRuntimeInSeconds must be an integer from 1 to 2419200"):
        sm.create_training_job(**_request("client-bad", train, StoppingCondition={"MaxRuntimeInSeconds": 0}))
    with pytest.raises(ValidationException, match="Unknown parameter"):
        sm.create_training_job(**_request("client-bad", train, Bogus=1))
    with pytest.raises(ValidationException, match="HyperParameters"):
        sm.create_training_job(**_request("client-bad", train, HyperParameters={"lr": 0.1}))
    with pytest.raises(ValidationException, match="only local paths, file:// URIs and s3:// URIs"):
        sm.create_training_job(**_request("client-bad", train, OutputDataConfig={"S3OutputPath": "https://bucket/x"}))
    with pytest.raises(ValidationException, match="The specified bucket does not exist"):
        sm.create_training_job(**_request("client-bad", train, OutputDataConfig={"S3OutputPath": "s3://bucket/x"}))
    with pytest.raises(ValueError, match="Unknown service"):
        trainmon.client("ec2")
    sm.get_waiter("training_job_completed_or_stopped").wait(
        TrainingJobName="client-dup", WaiterConfig={"Delay": 0.2, "MaxAttempts": 200})


LATENCY = [{"Name": "latency", "Regex": r"latency=([0-9.]+)ms/step"},
           {"Name": "latency", "Regex": r"latency=([0-9.]+)s/step"}]


def test_definitions_sharing_a_name_through_the_client_and_the_dry_run(home: Path, script) -> None:
    train = script('print("latency=250ms/step")\nprint("latency=5ms/step latency=0.1s/step")\n')
    sm, tm = trainmon.client("sagemaker"), trainmon.client("trainmon")
    request = _request("client-latency", train)
    request["AlgorithmSpecification"]["MetricDefinitions"] = LATENCY
    sm.create_training_job(**request)  # accepted: SageMaker's answer has no room for a warning; the job keeps it
    sm.get_waiter("training_job_completed_or_stopped").wait(
        TrainingJobName="client-latency", WaiterConfig={"Delay": 0.2, "MaxAttempts": 200})
    metrics = tm.describe_job_metrics(TrainingJobName="client-latency")
    (warning,) = metrics["Warnings"]
    assert warning.startswith("MetricDefinitions[1] and MetricDefinitions[2] share the name 'latency'")
    assert [d["Matches"] for d in metrics["Definitions"]] == [2, 1]
    found = tm.get_job_metric_points(TrainingJobName="client-latency")["Points"]
    assert [(p["Record"], p["Value"]) for p in found] == [(1, 250.0), (2, 5.0), (2, 0.1)]
    assert found[1]["Timestamp"] == found[2]["Timestamp"]

    dry = tm.test_metric_definitions(MetricDefinitions=LATENCY, LogText="latency=250ms/step\nlatency=0.3s/step\n")
    assert dry["Warnings"] == [warning]
    assert [(p["Line"], p["MetricName"], p["Definition"], p["Value"]) for p in dry["Points"]] == [
        (1, "latency", 1, 250.0), (2, "latency", 2, 0.3)]
    assert [(d["Name"], d["Matches"], d["UnmatchedExamples"]) for d in dry["Definitions"]] == [
        ("latency", 1, ["latency=0.3s/step"]), ("latency", 1, ["latency=250ms/step"])]


def test_an_exact_repeat_in_the_dry_run_gives_every_point_twice_and_a_warning(home: Path) -> None:
    loss = {"Name": "loss", "Regex": r"loss=(\S+)"}
    dry = trainmon.client("trainmon").test_metric_definitions(MetricDefinitions=[loss, loss], LogText="loss=0.5\n")
    assert [(p["Definition"], p["Value"]) for p in dry["Points"]] == [(1, 0.5), (2, 0.5)]
    assert dry["Warnings"] == [
        "MetricDefinitions[2] ('loss') repeats MetricDefinitions[1] exactly (same Name and Regex): both are kept, so "
        "each record they match gives 'loss' two equal points; remove one of them."]
    assert trainmon.client("trainmon").test_metric_definitions(MetricDefinitions=[loss], LogText="")["Warnings"] == []


def test_training_image_directory_with_train_executable(home: Path, tmp_path: Path) -> None:
    image = tmp_path / "image"
    image.mkdir()
    train = image / "train"
    train.write_text(f"#!{PY}\nprint('loss=0.125')\n")
    train.chmod(0o755)
    sm = trainmon.client("sagemaker")
    request = _request("client-image", train)
    request["AlgorithmSpecification"] = {"TrainingInputMode": "File", "TrainingImage": str(image),
                                         "MetricDefinitions": [{"Name": "loss", "Regex": r"loss=(\S+)"}]}
    sm.create_training_job(**request)
    sm.get_waiter("training_job_completed_or_stopped").wait(
        TrainingJobName="client-image", WaiterConfig={"Delay": 0.2, "MaxAttempts": 200})
    assert sm.describe_training_job(TrainingJobName="client-image")["FinalMetricDataList"][0]["Value"] == 0.125
    (tmp_path / "empty").mkdir()
    request["TrainingJobName"] = "client-image2"
    request["AlgorithmSpecification"]["TrainingImage"] = str(tmp_path / "empty")
    with pytest.raises(ValidationException, match="without an executable 'train'"):
        sm.create_training_job(**request)


def test_list_pagination_and_filters(home: Path, script) -> None:
    train = script("print('x')\n")
    sm = trainmon.client("sagemaker")
    for n in range(3):
        sm.create_training_job(**_request(f"page-{n}", train))
        time.sleep(0.01)
    first = sm.list_training_jobs(MaxResults=2, SortOrder="Ascending", NameContains="page")
    assert [s["TrainingJobName"] for s in first["TrainingJobSummaries"]] == ["page-0", "page-1"]
    second = sm.list_training_jobs(MaxResults=2, SortOrder="Ascending", NameContains="page", NextToken=first["NextToken"])
    assert [s["TrainingJobName"] for s in second["TrainingJobSummaries"]] == ["page-2"]
    assert "NextToken" not in second
    for n in range(3):
        sm.get_waiter("training_job_completed_or_stopped").wait(
            TrainingJobName=f"page-{n}", WaiterConfig={"Delay": 0.2, "MaxAttempts": 200})


@pytest.mark.parametrize("operation", ["describe_job_metrics", "get_job_metric_points", "list_job_system_metrics",
                                       "get_job_log_records", "test_metric_definitions", "get_profile_summary",
                                       "maintain_store"])
def test_trainmon_operations_refuse_unknown_parameters_as_sagemaker_does(home: Path, operation: str) -> None:
    tm = trainmon.client("trainmon")
    with pytest.raises(ValidationException) as info:
        getattr(tm, operation)(Foo=1, Bar=2)
    assert info.value.message == "Unknown parameter(s) in input: Bar, Foo."
    if operation == "describe_job_metrics":  # before the job is looked up
        with pytest.raises(ValidationException, match=r"Unknown parameter\(s\) in input: Foo\."):
            tm.describe_job_metrics(TrainingJobName="x", Foo=1)


@pytest.mark.parametrize(("service", "operation", "request_", "error"), [
    ("cloudwatch", "list_metrics", {"NextToken": 5}, "InvalidParameterValue"),
    ("sagemaker", "list_training_jobs", {"NextToken": 5}, "ValidationException"),
    ("logs", "describe_log_streams", {"logGroupName": "/aws/sagemaker/TrainingJobs", "nextToken": 5},
     "InvalidParameterException"),
])
def test_a_page_token_that_is_not_a_string_is_refused_in_the_services_words(home: Path, service: str, operation: str,
                                                                            request_: dict[str, Any], error: str) -> None:
    with pytest.raises(trainmon.TrainmonError) as info:
        getattr(trainmon.client(service), operation)(**request_)
    assert info.value.response["Error"] == {
        "Code": error,
        "Message": "1 validation error detected: Value 5 at 'nextToken' failed to satisfy constraint: Member must be "
                   "a string"}
    for junk in ("garbage", "9" * 5000):  # a token no page gave: refused, never the first page again
        again = {**request_, ("nextToken" if service == "logs" else "NextToken"): junk}
        with pytest.raises(trainmon.TrainmonError) as refused:
            getattr(trainmon.client(service), operation)(**again)
        assert refused.value.response["Error"]["Code"] == error and "is not one" in refused.value.message


def test_clients_answer_can_paginate_as_boto3_clients_do(home: Path) -> None:
    """boto3's clients have can_paginate (code asks it before get_paginator); no operation here has a
    paginator, so each answers False and code pages with the tokens."""
    import botocore.client

    assert hasattr(botocore.client.BaseClient, "can_paginate")
    for service, operation in [("sagemaker", "list_training_jobs"), ("cloudwatch", "list_metrics"),
                               ("logs", "describe_log_streams"), ("trainmon", "get_job_log_records")]:
        assert trainmon.client(service).can_paginate(operation) is False


def test_list_status_filter_takes_every_primary_status() -> None:
    from trainmon.api.sagemaker import STATUSES
    from trainmon.jobs.status import ACTIVE, TERMINAL

    assert sorted(STATUSES) == sorted((*ACTIVE, *TERMINAL))


def test_filter_log_events_reads_each_stream_a_stored_chunk_at_a_time(store, monkeypatch) -> None:
    """A first page of one event reads one stored chunk of each stream, not every record; a filter
    that passes over many records reads on, chunk by chunk, and still finds its match."""
    from trainmon.api.logs import LOG_GROUP, filter_log_events
    from trainmon.api.sagemaker import register_job
    from trainmon.store import Batch

    job = register_job(store, {"TrainingJobName": "many", "ProfilerConfig": {"DisableProfiler": True},
                               "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["true"]}})
    ids = {}
    for host in ("algo-1", "algo-2"):
        stream = ids[host] = store.add_stream(job.id, host, f"many/{host}-1", 1000)
        for first in range(0, 1000, 100):  # ten chunks of a hundred records
            text = "\n".join(f"{host} record {i}" for i in range(first, first + 100))
            store.write_batch(Batch(job.id, chunks=[(stream.id, first, 100, 1000 + first + (host == "algo-2"), text)],
                                    stream_stats={stream.id: (100, len(text) + 1, 1000 + first)}))
    taken: dict[int, int] = {}
    chunks = store.log_chunks

    def counted(stream_id: int, **kwargs: Any) -> Any:
        for row in chunks(stream_id, **kwargs):
            taken[stream_id] = taken.get(stream_id, 0) + 1
            yield row

    monkeypatch.setattr(store, "log_chunks", counted)
    first = filter_log_events(store, logGroupName=LOG_GROUP, limit=1)
    assert [e["message"] for e in first["events"]] == ["algo-1 record 0"] and "nextToken" in first
    assert taken == {ids["algo-1"].id: 1, ids["algo-2"].id: 1}
    taken.clear()
    late = filter_log_events(store, logGroupName=LOG_GROUP, logStreamNames=["many/algo-2-1"],
                             filterPattern='"record 999"', limit=1)
    assert [e["message"] for e in late["events"]] == ["algo-2 record 999"]
    assert taken == {ids["algo-2"].id: 10}
    taken.clear()
    again = filter_log_events(store, logGroupName=LOG_GROUP, limit=150, nextToken=first["nextToken"])
    messages = [e["message"] for e in again["events"]]  # algo-1's first chunk is a millisecond earlier
    assert messages[:100] == [f"algo-1 record {i}" for i in range(1, 100)] + ["algo-2 record 0"]
    assert len(messages) == 150 and messages[-1] == "algo-2 record 50"
    assert taken == {ids["algo-1"].id: 2, ids["algo-2"].id: 1}


@pytest.mark.parametrize("seed", range(6))
def test_filter_log_events_finds_what_its_pattern_matches_in_every_record_page_by_page(store, seed: int) -> None:
    """Each record's escaped message against the pattern, one by one, is the reference; the filter
    looks for a pattern's terms in a page's text at once, and pages by its tokens."""
    import random

    from trainmon.api.logs import LOG_GROUP, compile_filter, filter_log_events
    from trainmon.api.sagemaker import register_job
    from trainmon.parsing.framing import escape
    from trainmon.store import Batch

    rng = random.Random(seed)
    words = ["loss", "loss=0.2", "step", "checkpoint", "\t", "#011", "error", "\x1b[31merror", "val", "é"]
    job = register_job(store, {"TrainingJobName": "filtered", "ProfilerConfig": {"DisableProfiler": True},
                               "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["true"]}})
    everything = []
    for host in ("algo-1", "algo-2"):
        stream = store.add_stream(job.id, host, f"filtered/{host}-1", 1000)
        first = 0
        for chunk in range(3):
            messages = ["".join(rng.choice(words + [" "] * 4) for _ in range(rng.randint(0, 8)))
                        for _ in range(rng.randint(1, 300))]
            stamp = 1000 + chunk * 2 + (host == "algo-2")
            text = "\n".join(messages)
            store.write_batch(Batch(job.id, chunks=[(stream.id, first, len(messages), stamp, text)],
                                    stream_stats={stream.id: (len(messages), len(text) + 1, stamp)}))
            everything += [(stamp, stream.name, first + i, escape(m)) for i, m in enumerate(messages)]
            first += len(messages)
    everything.sort()
    for pattern in ["loss", '"loss=0.2"', "loss step", "?checkpoint ?#011", "-loss", "loss -val", "#011error",
                    "?é ?#033[31m", '"error step"', "%lo+s%"]:
        expected = [m for _, _, _, m in everything if compile_filter(pattern).matches(m)]
        found, token = [], None
        while True:
            page = filter_log_events(store, logGroupName=LOG_GROUP, filterPattern=pattern, limit=rng.randint(1, 40),
                                     **({"nextToken": token} if token else {}))
            found += [event["message"] for event in page["events"]]
            token = page.get("nextToken")
            if not token:
                break
        assert found == expected, pattern
    assert any(compile_filter("#011").matches(m) for _, _, _, m in everything)  # escaped tabs are in the data


@pytest.mark.parametrize("seed", range(4))
def test_get_log_events_pages_every_record_once_in_order_escaped_where_it_holds_a_control_character(
        store, seed: int) -> None:
    """Each record escaped on its own is the reference; GetLogEvents makes a stored chunk's events at
    once, from any record in it, and pages forward by its tokens (with a time range too), and back."""
    import random

    from trainmon.api.logs import LOG_GROUP, get_log_events
    from trainmon.api.sagemaker import register_job
    from trainmon.parsing.framing import escape
    from trainmon.store import Batch

    rng = random.Random(seed)
    words = ["loss=0.2", "step", "\t", "\x1b[31m", "é", "\r", " "]
    job = register_job(store, {"TrainingJobName": "paged", "ProfilerConfig": {"DisableProfiler": True},
                               "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["true"]}})
    stream = store.add_stream(job.id, "algo-1", "paged/algo-1-1", 1000)
    everything: list[tuple[int, str]] = []
    for chunk in range(6):
        plain = rng.random() < 0.5  # some chunks hold no control character at all
        messages = ["".join(rng.choice(words[:1] + words[4:] if plain else words) for _ in range(rng.randint(0, 6)))
                    for _ in range(rng.randint(1, 120))]
        stamp = 1000 + chunk * 10
        text = "\n".join(messages)
        store.write_batch(Batch(job.id, chunks=[(stream.id, len(everything), len(messages), stamp, text)],
                                stream_stats={stream.id: (len(messages), len(text) + 1, stamp)}))
        everything += [(stamp, escape(m)) for m in messages]
    for start, end in [(None, None), (1010, 1041), (1025, None)]:
        expected = [(t, m) for t, m in everything if (start is None or t >= start) and (end is None or t < end)]
        times = {"startTime": start} if start is not None else {}
        times.update({"endTime": end} if end is not None else {})
        found, token = [], None
        while True:
            page = get_log_events(store, logGroupName=LOG_GROUP, logStreamName=stream.name, startFromHead=True,
                                  limit=rng.randint(1, 50), **times, **({"nextToken": token} if token else {}))
            found += [(event["timestamp"], event["message"]) for event in page["events"]]
            if page["nextForwardToken"] == token:
                break
            token = page["nextForwardToken"]
        assert found == expected, (start, end)
    found, token = [], None
    while True:  # from the end, back
        page = get_log_events(store, logGroupName=LOG_GROUP, logStreamName=stream.name, limit=rng.randint(1, 50),
                              **({"nextToken": token} if token else {}))
        found = [(event["timestamp"], event["message"]) for event in page["events"]] + found
        if page["nextBackwardToken"] == token:
            break
        token = page["nextBackwardToken"]
    assert found == everything
    assert any(m != m.replace("#033", "") for _, m in everything)  # escaped control characters are in the data


def test_a_host_that_never_ran_has_no_records_and_a_host_the_job_lacks_is_an_error(home: Path) -> None:
    """A job can end before any host starts (a Ray job with no room, an input gone): asking for a host of it
    is no error; asking for a host it never had is."""
    from trainmon.api.training_request import job_document
    from trainmon.runtime.job.jobstate import set_status
    from trainmon.store import open_store

    store = open_store(home)
    request = {"TrainingJobName": "unstarted", "AlgorithmSpecification": {
        "TrainingInputMode": "File", "ContainerEntrypoint": [PY, "-c", "pass"]}}
    store.create_job("unstarted", job_document(request, time.time(), home=home), time.time())
    set_status(store, "unstarted", "Failed", FailureReason="CapacityError: no room")
    store.close()
    tm = trainmon.client("trainmon")
    assert tm.get_job_log_records(TrainingJobName="unstarted", Host="algo-1")["Records"] == []
    with pytest.raises(ValidationException, match="job unstarted has no host 'algo-2'; its hosts are algo-1 to algo-1"):
        tm.get_job_log_records(TrainingJobName="unstarted", Host="algo-2")
