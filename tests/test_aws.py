"""The AWS endpoint: real boto3 clients and the real AWS CLI against a real ``trainmon server`` on
a loopback port, with nothing but ``AWS_ENDPOINT_URL`` (and a key) pointing them at it."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import botocore
import botocore.exceptions
import pytest
from botocore.config import Config

from trainmon import access_keys
from trainmon.server.aws import sigv4

from .conftest import PY, ServerProcess, signed_post, start_server

REGION = "us-east-1"
GROUP = "/aws/sagemaker/TrainingJobs"
FAST_WAITER = {"Delay": 1, "MaxAttempts": 300}


@pytest.fixture
def aws_env(server: ServerProcess, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ServerProcess:
    """What a user sets: the endpoint and a key, and no configuration of their own."""
    for variable, value in server.aws_env().items():  # what `trainmon credentials env` prints
        monkeypatch.setenv(variable, value)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # (whose credentials are another test's server's)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    return server


def _client(service: str, **kwargs: Any) -> Any:
    return boto3.client(service, config=Config(retries={"max_attempts": 1}), **kwargs)


def _job_request(name: str, script: Path, **extra: Any) -> dict[str, Any]:
    return {
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::123456789012:role/local",
        "AlgorithmSpecification": {
            "TrainingInputMode": "File",
            "TrainingImage": "local",
            "ContainerEntrypoint": [PY, str(script)],
            "MetricDefinitions": [{"Name": "train:loss", "Regex": r"loss=(\S+);"},
                                  {"Name": "train:acc", "Regex": r"acc=(\S+);"}],
        },
        "OutputDataConfig": {"S3OutputPath": str(script.parent / "out")},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        **extra,
    }


TRAIN = """
for epoch in range(5):
    print(f"epoch {epoch} loss={1 / (epoch + 1):.4f}; acc={epoch / 5:.2f};")
print("done\\twith\\ttabs")
"""


@pytest.fixture
def finished_job(aws_env: ServerProcess, script: Callable[[str], Path]) -> str:
    sm = _client("sagemaker")
    sm.create_training_job(**_job_request("wire-job", script(TRAIN), Tags=[{"Key": "team", "Value": "vision"}]))
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="wire-job", WaiterConfig=FAST_WAITER)
    return "wire-job"


# -- SageMaker ------------------------------------------------------------------------------------


def test_a_job_created_with_boto3_runs_and_reports_its_final_metrics(finished_job: str) -> None:
    sm = _client("sagemaker")
    job = sm.describe_training_job(TrainingJobName=finished_job)
    assert job["TrainingJobStatus"] == "Completed"
    finals = {m["MetricName"]: m["Value"] for m in job["FinalMetricDataList"]}
    assert finals == {"train:loss": pytest.approx(0.2), "train:acc": pytest.approx(0.8)}
    assert isinstance(job["CreationTime"], dt.datetime) and job["CreationTime"].tzinfo is not None
    assert job["AlgorithmSpecification"]["MetricDefinitions"][0] == {"Name": "train:loss", "Regex": r"loss=(\S+);"}
    assert [t["Status"] for t in job["SecondaryStatusTransitions"]][-1] == "Completed"
    assert job["ResponseMetadata"]["RequestId"]


def test_list_filters_sorts_and_pages(aws_env: ServerProcess, script: Callable[[str], Path]) -> None:
    sm = _client("sagemaker")
    train = script("print('loss=1;')")
    for name in ("list-b", "list-a", "list-c"):
        sm.create_training_job(**_job_request(name, train))
    for name in ("list-b", "list-a", "list-c"):
        sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName=name, WaiterConfig=FAST_WAITER)
    pages = sm.get_paginator("list_training_jobs").paginate(SortBy="Name", SortOrder="Descending",
                                                            NameContains="list-", PaginationConfig={"PageSize": 2})
    names = [s["TrainingJobName"] for page in pages for s in page["TrainingJobSummaries"]]
    assert names == ["list-c", "list-b", "list-a"]
    first = sm.list_training_jobs(MaxResults=2, SortBy="Name")
    assert "NextToken" in first and len(first["TrainingJobSummaries"]) == 2
    assert sm.list_training_jobs(StatusEquals="Failed")["TrainingJobSummaries"] == []


def test_search_finds_runs_by_hyperparameter_metric_and_tag(aws_env: ServerProcess,
                                                           script: Callable[[str], Path]) -> None:
    """boto3's search() and its paginator, and the AWS CLI's, as SageMaker's Search answers them."""
    sm = _client("sagemaker")
    train = script("""
        import json
        lr = float(json.load(open("/opt/ml/input/config/hyperparameters.json"))["lr"])
        print(f"loss={abs(lr - 0.1) * 10:.3f};")
        """)
    runs = {"lr-big": ("0.5", "vision"), "lr-right": ("0.1", "vision"), "lr-small": ("0.001", "speech"),
            "lr-none": ("0.25", None)}
    for name, (lr, team) in runs.items():
        sm.create_training_job(**_job_request(name, train, HyperParameters={"lr": lr},
                                              Tags=[{"Key": "team", "Value": team}] if team else []))
    for name in runs:
        sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName=name, WaiterConfig=FAST_WAITER)

    def names(answer: dict[str, Any]) -> list[str]:
        return [result["TrainingJob"]["TrainingJobName"] for result in answer["Results"]]

    best = sm.search(Resource="TrainingJob", SearchExpression={"Filters": [
        {"Name": "HyperParameters.lr", "Operator": "LessThanOrEqualTo", "Value": "0.3"}]},
        SortBy="Metrics.train:loss", SortOrder="Ascending")
    assert names(best) == ["lr-right", "lr-small", "lr-none"]
    assert best["TotalHits"] == {"Value": 3, "Relation": "EqualTo"}
    job = best["Results"][0]["TrainingJob"]
    assert job["HyperParameters"] == {"lr": "0.1"} and job["Tags"] == [{"Key": "team", "Value": "vision"}]
    assert job["FinalMetricDataList"][0]["MetricName"] == "train:loss" and job["FinalMetricDataList"][0]["Value"] == 0
    assert isinstance(job["CreationTime"], dt.datetime)
    either = sm.search(Resource="TrainingJob", SearchExpression={"Operator": "Or", "SubExpressions": [
        {"Filters": [{"Name": "Tags.team", "Operator": "Equals", "Value": "speech"}]},
        {"Filters": [{"Name": "Tags.team", "Operator": "NotExists"},
                     {"Name": "TrainingJobStatus", "Operator": "In", "Value": "Completed,Stopped"}]}]},
        SortBy="TrainingJobName", SortOrder="Ascending")
    assert names(either) == ["lr-none", "lr-small"]
    nested = sm.search(Resource="TrainingJob", SearchExpression={"NestedFilters": [
        {"NestedPropertyName": "FinalMetricDataList", "Filters": [
            {"Name": "FinalMetricDataList.MetricName", "Operator": "Equals", "Value": "train:loss"},
            {"Name": "FinalMetricDataList.Value", "Operator": "GreaterThan", "Value": "3"}]}]})
    assert names(nested) == ["lr-big"]
    pages = sm.get_paginator("search").paginate(Resource="TrainingJob", SortBy="HyperParameters.lr",
                                                SortOrder="Descending", PaginationConfig={"PageSize": 1})
    assert [name for page in pages for name in names(page)] == ["lr-big", "lr-none", "lr-right", "lr-small"]
    with pytest.raises(botocore.exceptions.ClientError) as bad:
        sm.search(Resource="TrainingJob", SearchExpression={"Filters": [
            {"Name": "Metrics.train:loss", "Operator": "LessThan", "Value": "small"}]})
    assert bad.value.response["Error"]["Code"] == "ValidationException"
    assert "must be an integer or floating-point decimal" in bad.value.response["Error"]["Message"]
    cli = _aws("sagemaker", "search", "--resource", "TrainingJob", "--search-expression",
               json.dumps({"Filters": [{"Name": "Tags.team", "Operator": "Equals", "Value": "vision"}]}),
               "--sort-by", "TrainingJobName", "--sort-order", "Ascending")
    assert cli.returncode == 0, cli.stderr
    assert [r["TrainingJob"]["TrainingJobName"] for r in json.loads(cli.stdout)["Results"]] == ["lr-big", "lr-right"]


def test_stop_tags_and_delete(aws_env: ServerProcess, script: Callable[[str], Path], tmp_path: Path) -> None:
    sm = _client("sagemaker")
    stop_file = tmp_path / "never"
    train = script(f"""
        import pathlib, time
        print("loss=1;", flush=True)
        while not pathlib.Path({str(stop_file)!r}).exists():
            time.sleep(0.05)
        """)
    arn = sm.create_training_job(**_job_request("stop-me", train))["TrainingJobArn"]
    with pytest.raises(sm.exceptions.ResourceInUse):
        sm.delete_training_job(TrainingJobName="stop-me")
    sm.add_tags(ResourceArn=arn, Tags=[{"Key": "a", "Value": "1"}, {"Key": "b", "Value": "2"}])
    sm.add_tags(ResourceArn=arn, Tags=[{"Key": "a", "Value": "3"}])
    assert sm.list_tags(ResourceArn=arn)["Tags"] == [{"Key": "a", "Value": "3"}, {"Key": "b", "Value": "2"}]
    sm.delete_tags(ResourceArn=arn, TagKeys=["b"])
    assert sm.list_tags(ResourceArn=arn)["Tags"] == [{"Key": "a", "Value": "3"}]
    sm.stop_training_job(TrainingJobName="stop-me")
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="stop-me", WaiterConfig=FAST_WAITER)
    assert sm.describe_training_job(TrainingJobName="stop-me")["TrainingJobStatus"] == "Stopped"
    sm.delete_training_job(TrainingJobName="stop-me")
    with pytest.raises(botocore.exceptions.ClientError) as missing:
        sm.describe_training_job(TrainingJobName="stop-me")
    assert missing.value.response["Error"]["Code"] == "ValidationException"
    assert "Requested resource not found" in missing.value.response["Error"]["Message"]
    with pytest.raises(sm.exceptions.ResourceNotFound):
        sm.list_tags(ResourceArn=arn)


def test_the_waiter_fails_on_a_missing_job_as_on_sagemaker(aws_env: ServerProcess) -> None:
    sm = _client("sagemaker")
    with pytest.raises(botocore.exceptions.WaiterError) as failed:
        sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="no-such-job",
                                                                WaiterConfig=FAST_WAITER)
    assert "ValidationException" in str(failed.value)
    assert "Requested resource not found" in failed.value.last_response["Error"]["Message"]


def test_invalid_requests_get_aws_validation_messages(aws_env: ServerProcess, script: Callable[[str], Path]) -> None:
    sm = _client("sagemaker")
    request = _job_request("bad_name!", script("print(1)"), StoppingCondition={"MaxRuntimeInSeconds": 10**9})
    with pytest.raises(botocore.exceptions.ClientError) as bad:
        sm.create_training_job(**request)
    error = bad.value.response["Error"]
    assert error["Code"] == "ValidationException"
    assert error["Message"].startswith("2 validation errors detected: Value 'bad_name!' at 'trainingJobName' failed "
                                       "to satisfy constraint: Member must satisfy regular expression pattern")
    assert "at 'stoppingCondition.maxRuntimeInSeconds'" in error["Message"]
    with pytest.raises(botocore.exceptions.ClientError) as duplicate:
        sm.create_training_job(**_job_request("dup", script("print(1)")))
        sm.create_training_job(**_job_request("dup", script("print(1)")))
    assert duplicate.value.response["Error"]["Code"] == "ResourceInUse"
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="dup", WaiterConfig=FAST_WAITER)


def test_an_operation_trainmon_does_not_serve_says_so(aws_env: ServerProcess) -> None:
    with pytest.raises(botocore.exceptions.ClientError) as unknown:
        _client("sagemaker").list_endpoints()
    assert unknown.value.response["Error"]["Code"] == "InvalidAction"
    assert "does not serve sagemaker ListEndpoints" in unknown.value.response["Error"]["Message"]
    assert "CreateTrainingJob" in unknown.value.response["Error"]["Message"]


# -- CloudWatch -----------------------------------------------------------------------------------


def test_statistics_and_metric_data_of_a_job(finished_job: str) -> None:
    cw = _client("cloudwatch")
    job = _client("sagemaker").describe_training_job(TrainingJobName=finished_job)
    start = job["TrainingStartTime"] - dt.timedelta(minutes=2)
    end = job["TrainingEndTime"] + dt.timedelta(minutes=2)
    dimensions = [{"Name": "TrainingJobName", "Value": finished_job}]
    stats = cw.get_metric_statistics(Namespace=GROUP, MetricName="train:loss", Dimensions=dimensions,
                                     StartTime=start, EndTime=end, Period=60, Statistics=["Average", "SampleCount"])
    assert sum(p["SampleCount"] for p in stats["Datapoints"]) == 5
    assert all(isinstance(p["Timestamp"], dt.datetime) for p in stats["Datapoints"])
    stat = {"Metric": {"Namespace": GROUP, "MetricName": "train:loss", "Dimensions": dimensions},
            "Period": 1, "Stat": "Maximum"}
    data = cw.get_metric_data(StartTime=start, EndTime=end, ScanBy="TimestampAscending", MetricDataQueries=[
        {"Id": "loss", "MetricStat": stat, "ReturnData": False},
        {"Id": "double", "Expression": "loss * 2", "Label": "twice"}])
    (double,) = data["MetricDataResults"]
    assert double["Label"] == "twice" and double["StatusCode"] == "Complete"
    assert max(double["Values"]) == pytest.approx(2.0)


def test_put_list_and_errors_of_cloudwatch(aws_env: ServerProcess) -> None:
    cw = _client("cloudwatch")
    cw.put_metric_data(Namespace="Wire/Test", MetricData=[
        {"MetricName": f"m{index:03d}", "Value": float(index), "Unit": "Count",
         "Dimensions": [{"Name": "Host", "Value": "a"}]} for index in range(600)])
    pages = list(cw.get_paginator("list_metrics").paginate(Namespace="Wire/Test"))
    assert [len(page["Metrics"]) for page in pages] == [500, 100]  # CloudWatch's page of 500
    assert "NextToken" in pages[0] and "NextToken" not in pages[1]
    assert sorted(m["MetricName"] for page in pages for m in page["Metrics"]) == [f"m{i:03d}" for i in range(600)]
    now = dt.datetime.now(dt.UTC)
    with pytest.raises(cw.exceptions.InvalidParameterValueException) as bad_period:
        cw.get_metric_statistics(Namespace="Wire/Test", MetricName="m001", StartTime=now - dt.timedelta(hours=1),
                                 EndTime=now, Period=7, Statistics=["Average"])
    assert bad_period.value.response["Error"]["Code"] == "InvalidParameterValue"
    with pytest.raises(cw.exceptions.MissingRequiredParameterException):
        cw.get_metric_statistics(Namespace="Wire/Test", MetricName="m001", StartTime=now - dt.timedelta(hours=1),
                                 EndTime=now, Period=60)
    with pytest.raises(cw.exceptions.InvalidParameterCombinationException):
        cw.put_metric_data(Namespace="Wire/Test", MetricData=[
            {"MetricName": "m", "Value": 1.0, "StatisticValues": {"SampleCount": 1, "Sum": 1, "Minimum": 1,
                                                                  "Maximum": 1}}])


# -- CloudWatch Logs ------------------------------------------------------------------------------


def test_logs_of_a_job_page_until_caught_up(finished_job: str) -> None:
    logs = _client("logs")
    streams = logs.describe_log_streams(logGroupName=GROUP, logStreamNamePrefix=finished_job)["logStreams"]
    assert [s["logStreamName"] for s in streams] == [f"{finished_job}/algo-1-" + s["logStreamName"].split("-")[-1]
                                                     for s in streams]
    name = streams[0]["logStreamName"]
    messages, token = [], None
    while True:  # as SDK tailers do: follow nextForwardToken until it comes back unchanged
        page = logs.get_log_events(logGroupName=GROUP, logStreamName=name, startFromHead=True, limit=2,
                                   **({"nextToken": token} if token else {}))
        messages += [event["message"] for event in page["events"]]
        if page["nextForwardToken"] == token:
            break
        token = page["nextForwardToken"]
    assert messages[0].startswith("epoch 0 loss=1.0000;")
    assert messages[-1] == "done#011with#011tabs"
    assert len(messages) == 6
    found = logs.filter_log_events(logGroupName=GROUP, logStreamNamePrefix=finished_job,
                                   filterPattern='?"loss=0.2" ?nothing')
    assert [e["message"] for e in found["events"]] == [m for m in messages if "loss=0.2" in m]
    with pytest.raises(logs.exceptions.ResourceNotFoundException):
        logs.get_log_events(logGroupName=GROUP, logStreamName="nope/algo-1")
    with pytest.raises(logs.exceptions.InvalidParameterException):
        logs.get_log_events(logGroupName=GROUP, logStreamName=name, limit=0 + 20000)


# -- STS, IAM and the AWS CLI --------------------------------------------------------------------------


def test_caller_identity(aws_env: ServerProcess) -> None:
    identity = _client("sts").get_caller_identity()
    assert identity["Account"] == "000000000000" and identity["Arn"].startswith("arn:aws:iam::000000000000:")


def test_iam_answers_what_the_sagemaker_sdk_asks_of_a_role(aws_env: ServerProcess) -> None:
    """GetRole (does it trust SageMaker?) and SimulatePrincipalPolicy (may it do what a job does?), as
    the SageMaker SDK v3 asks them: trainmon keeps no IAM, so every role trusts SageMaker and every
    action is allowed; a malformed question gets IAM's own error."""
    iam = _client("iam")
    role = iam.get_role(RoleName="SageMakerRole")["Role"]
    assert role["Arn"] == "arn:aws:iam::000000000000:role/SageMakerRole" and role["RoleName"] == "SageMakerRole"
    trust = role["AssumeRolePolicyDocument"]  # sent URL-encoded, as IAM does: botocore decodes it
    assert trust["Statement"] == [{"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"},
                                   "Action": "sts:AssumeRole"}]
    actions = ["ecr:GetAuthorizationToken", "cloudwatch:PutMetricData", "s3:PutObject"]
    pages = iam.get_paginator("simulate_principal_policy").paginate(
        PolicySourceArn=role["Arn"], ActionNames=actions, ResourceArns=["arn:aws:s3:::sagemaker-trainmon/*"])
    results = [result for page in pages for result in page["EvaluationResults"]]
    assert [(r["EvalActionName"], r["EvalResourceName"], r["EvalDecision"]) for r in results] == [
        (action, "arn:aws:s3:::sagemaker-trainmon/*", "allowed") for action in actions]
    with pytest.raises(iam.exceptions.InvalidInputException, match="is not the ARN of a user, group or role"):
        iam.simulate_principal_policy(PolicySourceArn="arn:aws:s3:::a-bucket-not-a-role", ActionNames=["s3:PutObject"])
    with pytest.raises(iam.exceptions.InvalidInputException, match="roleName"):
        iam.get_role(RoleName="no spaces allowed")


def _aws(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "awscli", *args, "--output", "json"], capture_output=True,
                          text=True, timeout=120, env=os.environ.copy())


def test_the_aws_cli_reads_a_job_its_metrics_and_its_log(finished_job: str) -> None:
    described = _aws("sagemaker", "describe-training-job", "--training-job-name", finished_job)
    assert described.returncode == 0, described.stderr
    finals = json.loads(described.stdout)["FinalMetricDataList"]
    assert {m["MetricName"] for m in finals} == {"train:loss", "train:acc"}
    now = dt.datetime.now(dt.UTC)
    stats = _aws("cloudwatch", "get-metric-statistics", "--namespace", GROUP, "--metric-name", "train:acc",
                 "--dimensions", f"Name=TrainingJobName,Value={finished_job}", "--statistics", "Maximum",
                 "--period", "60", "--start-time", f"{now - dt.timedelta(hours=1):%Y-%m-%dT%H:%M:%SZ}",
                 "--end-time", f"{now + dt.timedelta(minutes=5):%Y-%m-%dT%H:%M:%SZ}")
    assert stats.returncode == 0, stats.stderr
    assert max(p["Maximum"] for p in json.loads(stats.stdout)["Datapoints"]) == pytest.approx(0.8)
    streams = json.loads(_aws("logs", "describe-log-streams", "--log-group-name", GROUP).stdout)["logStreams"]
    events = _aws("logs", "get-log-events", "--log-group-name", GROUP, "--log-stream-name",
                  streams[0]["logStreamName"], "--start-from-head")
    assert json.loads(events.stdout)["events"][-1]["message"] == "done#011with#011tabs"
    missing = _aws("sagemaker", "describe-training-job", "--training-job-name", "nope")
    assert missing.returncode != 0 and "ValidationException" in missing.stderr


# -- other protocols: CBOR and query, with botocore's own serializers and parsers -------------------


def _model_with_protocol(tmp_path: Path, protocol: str) -> Path:
    """A data directory holding botocore's CloudWatch model, set to use ``protocol`` only, as a
    botocore version that speaks only it would."""
    source = Path(botocore.__file__).parent / "data" / "cloudwatch" / "2010-08-01"
    packed = source / "service-2.json.gz"
    model = json.loads(gzip.decompress(packed.read_bytes()) if packed.exists()
                       else (source / "service-2.json").read_bytes())
    model["metadata"]["protocol"] = protocol
    model["metadata"]["protocols"] = [protocol]
    target = tmp_path / f"models-{protocol}" / "cloudwatch" / "2010-08-01"
    target.mkdir(parents=True)
    (target / "service-2.json").write_text(json.dumps(model))
    return target.parent.parent


@pytest.mark.parametrize("protocol", ["smithy-rpc-v2-cbor", "query"])
def test_cloudwatch_over_cbor_and_query(protocol: str, aws_env: ServerProcess, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DATA_PATH", str(_model_with_protocol(tmp_path, protocol)))
    session = boto3.session.Session()
    cw = session.client("cloudwatch", config=Config(retries={"max_attempts": 1}))
    assert cw.meta.service_model.protocol == protocol
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    cw.put_metric_data(Namespace="Wire/Proto", MetricData=[
        {"MetricName": "lat", "Value": value, "Timestamp": now, "Unit": "Milliseconds",  # one period, always
         "Dimensions": [{"Name": "Host", "Value": "h"}], "StorageResolution": 1}
        for value in (1.0, 2.0, 6.0)])
    listed = cw.list_metrics(Namespace="Wire/Proto")["Metrics"]
    assert listed == [{"Namespace": "Wire/Proto", "MetricName": "lat", "Dimensions": [{"Name": "Host", "Value": "h"}]}]
    stats = cw.get_metric_statistics(Namespace="Wire/Proto", MetricName="lat", Dimensions=[{"Name": "Host",
                                     "Value": "h"}], StartTime=now - dt.timedelta(minutes=5),
                                     EndTime=now + dt.timedelta(minutes=1), Period=300,
                                     Statistics=["Sum", "Maximum"])
    (point,) = stats["Datapoints"]
    assert point["Sum"] == 9.0 and point["Maximum"] == 6.0
    assert point["Unit"] == "Milliseconds" and point["Timestamp"].tzinfo is not None
    percentiles = cw.get_metric_statistics(Namespace="Wire/Proto", MetricName="lat", Dimensions=[
        {"Name": "Host", "Value": "h"}], StartTime=now - dt.timedelta(minutes=5), EndTime=now + dt.timedelta(minutes=1),
        Period=300, ExtendedStatistics=["p50"])
    assert percentiles["Datapoints"][0]["ExtendedStatistics"]["p50"] == pytest.approx(2.0, rel=0.02)
    data = cw.get_metric_data(StartTime=now - dt.timedelta(minutes=5), EndTime=now + dt.timedelta(minutes=1),
                              MetricDataQueries=[{"Id": "a", "MetricStat": {"Metric": {
                                  "Namespace": "Wire/Proto", "MetricName": "lat",
                                  "Dimensions": [{"Name": "Host", "Value": "h"}]}, "Period": 300, "Stat": "Average"}}])
    assert data["MetricDataResults"][0]["Values"] == [3.0]
    with pytest.raises(cw.exceptions.InvalidParameterValueException):
        cw.get_metric_statistics(Namespace="Wire/Proto", MetricName="lat", StartTime=now, EndTime=now,
                                 Period=7, Statistics=["Sum"])


# -- signatures -----------------------------------------------------------------------------------


@pytest.fixture
def issued(home: Path) -> access_keys.AccessKey:
    return access_keys.create(home, "tests")


def _signed_client(server: ServerProcess, service: str, key: str, secret: str) -> Any:
    return boto3.client(service, endpoint_url=server.url, region_name=REGION, aws_access_key_id=key,
                        aws_secret_access_key=secret, config=Config(retries={"max_attempts": 1}))


def test_once_a_key_is_issued_every_request_is_checked(issued: access_keys.AccessKey, server: ServerProcess) -> None:
    good = _signed_client(server, "sagemaker", issued.AccessKeyId, issued.SecretAccessKey)
    assert good.list_training_jobs()["TrainingJobSummaries"] == []
    assert _signed_client(server, "sts", issued.AccessKeyId, issued.SecretAccessKey).get_caller_identity()

    cases = [("sagemaker", issued.AccessKeyId, "wrong-secret", "InvalidSignatureException"),
             ("sagemaker", "AKIAUNKNOWN000000000", issued.SecretAccessKey, "UnrecognizedClientException"),
             ("cloudwatch", issued.AccessKeyId, "wrong-secret", "InvalidSignatureException"),
             ("logs", "AKIAUNKNOWN000000000", "x", "UnrecognizedClientException"),
             ("sts", issued.AccessKeyId, "wrong-secret", "SignatureDoesNotMatch"),
             ("sts", "AKIAUNKNOWN000000000", "x", "InvalidClientTokenId")]
    for service, key, secret, code in cases:
        client = _signed_client(server, service, key, secret)
        call = {"sagemaker": client.list_training_jobs if service == "sagemaker" else None,
                "cloudwatch": getattr(client, "list_metrics", None), "logs": getattr(client, "describe_log_streams", None),
                "sts": getattr(client, "get_caller_identity", None)}[service]
        args = {"logGroupName": GROUP} if service == "logs" else {}
        with pytest.raises(botocore.exceptions.ClientError) as refused:
            call(**args)
        assert refused.value.response["Error"]["Code"] == code, (service, key)
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_an_expired_signature_is_refused(issued: access_keys.AccessKey, server: ServerProcess,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import botocore.auth

    an_hour_ago = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(hours=1)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: an_hour_ago)
    client = _signed_client(server, "sagemaker", issued.AccessKeyId, issued.SecretAccessKey)
    with pytest.raises(botocore.exceptions.ClientError) as expired:
        client.list_training_jobs()
    assert expired.value.response["Error"]["Code"] == "InvalidSignatureException"
    assert expired.value.response["Error"]["Message"].startswith(f"Signature expired: {an_hour_ago:%Y%m%dT%H%M}")


def test_signature_expiry_is_fifteen_minutes_either_way() -> None:
    signed = sigv4.Signed("AKIA", "20261201", REGION, "sagemaker", "20261201T120000Z", ("host",), "0" * 64)
    at_noon = dt.datetime(2026, 12, 1, 12, tzinfo=dt.UTC).timestamp()

    def check(now: float) -> str:
        try:
            sigv4.verify(signed, "POST", "/", [], {"host": "h"}, sigv4.UNSIGNED, lambda _: "secret", now=now)
        except sigv4.SignatureError as exc:
            return exc.reason
        return "good"

    assert check(at_noon + 14 * 60) == "mismatch"  # in time: the (made-up) signature itself is what is wrong
    assert check(at_noon + 16 * 60) == "expired"
    assert check(at_noon - 16 * 60) == "expired"


def test_every_request_must_be_signed_with_an_issued_key_on_loopback_too(home: Path, tmp_path: Path) -> None:
    started = start_server(home)
    try:
        for key, secret in (("test", "test"), ("AKIAUNKNOWN000000000", started.key.SecretAccessKey)):
            client = boto3.client("sagemaker", endpoint_url=started.url, region_name=REGION, aws_access_key_id=key,
                                  aws_secret_access_key=secret, config=Config(retries={"max_attempts": 1}))
            with pytest.raises(botocore.exceptions.ClientError) as refused:
                client.list_training_jobs()
            assert refused.value.response["Error"]["Code"] == "UnrecognizedClientException"
        key = access_keys.create(home)  # a key issued while the server runs is taken at once
        signed = boto3.client("sagemaker", endpoint_url=started.url, region_name=REGION,
                              aws_access_key_id=key.AccessKeyId, aws_secret_access_key=key.SecretAccessKey)
        assert signed.list_training_jobs()["TrainingJobSummaries"] == []
    finally:
        started.stop()


def test_credentials_commands(home: Path, cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    created = cli("credentials", "create", "--description", "laptop", check=True)
    fields = dict(line.split("=", 1) for line in created.stdout.splitlines() if "=" in line and line[0] != "#")
    assert fields["AWS_ACCESS_KEY_ID"].startswith("AKIA") and len(fields["AWS_SECRET_ACCESS_KEY"]) == 40
    assert (home / "access-keys.json").stat().st_mode & 0o777 == 0o600
    listed = cli("credentials", "list", check=True).stdout
    assert fields["AWS_ACCESS_KEY_ID"] in listed and "laptop" in listed and fields["AWS_SECRET_ACCESS_KEY"] not in listed
    cli("credentials", "delete", fields["AWS_ACCESS_KEY_ID"], check=True)
    assert access_keys.load(home) == {}
    gone = cli("credentials", "delete", "AKIANOPE")
    assert gone.returncode == 2 and "no access key 'AKIANOPE'" in gone.stderr


def test_a_cross_site_form_post_is_refused(server: ServerProcess) -> None:
    import httpx

    answer = httpx.post(server.url + "/", data={"Action": "PutMetricData", "Namespace": "X",
                                                "MetricData.member.1.MetricName": "m",
                                                "MetricData.member.1.Value": "1"},
                        headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "Forbidden"



def test_compressed_bodies_are_inflated_within_bounds(server: ServerProcess) -> None:

    headers = {"X-Amz-Target": "GraniteServiceVersion20100801.ListMetrics", "Content-Type":
               "application/x-amz-json-1.0", "Content-Encoding": "gzip"}
    small = signed_post(server, "monitoring", gzip.compress(b'{"Namespace": "None/Here"}'), headers)
    assert small.status_code == 200 and small.json() == {"Metrics": []}
    bomb = gzip.compress(b"{" + b" " * (40 << 20) + b"}")  # 40 KB that would be 40 MB
    refused = signed_post(server, "monitoring", bomb, headers)
    assert refused.status_code == 413 and refused.json()["__type"] == "RequestEntityTooLarge"
    damaged = signed_post(server, "monitoring", gzip.compress(b"{}")[:-6], headers)
    assert damaged.status_code == 400 and damaged.json()["__type"] == "SerializationException"
