"""`trainmon metrics --math`: metric math from the command line through GetMetricData, checked
against values computed here with numpy from the points the test put into the real store."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

import trainmon
from trainmon.cli.metric_math import Metric, automatic_id, plan, split_math
from trainmon.cloudwatch.model import JOB_NAMESPACE, MetricKey

from .conftest import PY, run_cli

Minutes = dict[int, list[float]]  # minute index -> the values put in that minute


@pytest.fixture
def cw(home):
    return trainmon.client("cloudwatch")


def minute_start(minutes_ago: int) -> int:
    return int(datetime.now(UTC).timestamp() // 60 * 60) - minutes_ago * 60


def run_job(name: str, *definitions: str, instance_count: int = 1) -> None:
    """A real job with these metric definitions, whose output matches none of them."""
    flags = [arg for definition in definitions for arg in ("--metric", f"{definition}=never-printed=(\\S+)")]
    run_cli("run", "--name", name, "--instance-count", str(instance_count), *flags, "--", PY, "-c", "print('hi')",
            check=True)


def put(cw, name: str, dimension: tuple[str, str], start: int, minutes: Minutes, resolution: int = 1) -> None:
    """Put each minute's values, spread over the minute, for the metric with this one dimension."""
    items = [{"MetricName": name, "Dimensions": [{"Name": dimension[0], "Value": dimension[1]}], "Value": value,
              "Timestamp": start + 60 * minute + 50 * k / len(values), "StorageResolution": resolution}
             for minute, values in minutes.items() for k, value in enumerate(values)]
    for offset in range(0, len(items), 1000):
        cw.put_metric_data(Namespace=JOB_NAMESPACE, MetricData=items[offset:offset + 1000])
    cw.store.flush_samples()  # stored now, for the CLI's own process (else within a fraction of a second)


def math_json(*args: str) -> list[dict[str, Any]]:
    return json.loads(run_cli("metrics", *args, "--json", check=True).stdout)


def by_label(rows: list[dict[str, Any]]) -> dict[str, dict[float, float]]:
    """Values by result label and epoch second."""
    found: dict[str, dict[float, float]] = {}
    for row in rows:
        found.setdefault(row["Label"], {})[datetime.fromisoformat(row["Timestamp"]).timestamp()] = row["Value"]
    return found


def per_minute(start: int, minutes: Minutes, statistic=np.mean) -> dict[float, float]:
    return {float(start + 60 * minute): float(statistic(values)) for minute, values in minutes.items()}


def random_minutes(rng: np.random.Generator, count: int, keep: float) -> Minutes:
    return {m: list(rng.uniform(0.1, 3.0, size=int(rng.integers(1, 4)))) for m in range(count) if rng.random() < keep}


# -- metric math over a job's metrics --------------------------------------------------------------


def test_job_metrics_are_bound_to_ids_and_computed_as_numpy_does(home, cw) -> None:
    rng = np.random.default_rng(3)
    run_job("mathjob", "train:loss", "validation:loss")
    start = minute_start(60)
    train, validation = random_minutes(rng, 20, 1.0), random_minutes(rng, 20, 0.6)
    put(cw, "train:loss", ("TrainingJobName", "mathjob"), start, train)
    put(cw, "validation:loss", ("TrainingJobName", "mathjob"), start, validation)
    window = ["--start", str(start), "--end", str(start + 2400)]  # 40 periods of a minute by default

    rows = math_json("mathjob", "--math", "validation_loss - train_loss", *window)
    means_t, means_v = per_minute(start, train), per_minute(start, validation)
    gap = {t: means_v[t] - means_t[t] for t in means_v}  # only the minutes both have
    assert by_label(rows) == {"validation_loss - train_loss": pytest.approx(gap)}
    assert {(r["Expression"], r["Period"]) for r in rows} == {("validation_loss - train_loss", 60)}

    rows = math_json("mathjob", "--id", "l=train:loss", "--math", "RATE(l)", "--math", "FILL(validation_loss, REPEAT)",
                     "--period", "60", "--statistic", "Maximum", *window)
    maxima_t, maxima_v = per_minute(start, train, np.max), per_minute(start, validation, np.max)
    times = sorted(maxima_t)
    rate = {t: (maxima_t[t] - maxima_t[p]) / (t - p) for p, t in zip(times, times[1:], strict=False)}
    first = min(maxima_v)
    repeated = {float(t): maxima_v[max(k for k in maxima_v if k <= t)] for t in range(start, start + 2400, 60)
                if t >= first}
    assert by_label(rows) == {"RATE(l)": pytest.approx(rate), "FILL(validation_loss, REPEAT)": pytest.approx(repeated)}

    # a named expression is used by a later one; results show its name
    rows = math_json("mathjob", "--math", "gap = validation_loss - train_loss", "--math", "gap / AVG(gap)", *window)
    mean_gap = float(np.mean(list(gap.values())))
    assert by_label(rows) == {"gap": pytest.approx(gap),
                              "gap / AVG(gap)": pytest.approx({t: v / mean_gap for t, v in gap.items()})}

    text = run_cli("metrics", "mathjob", "--math", "train_loss * 2", *window, check=True).stdout.splitlines()
    assert text[0] == "Job mathjob, period 60 s, metrics as Average"
    assert text[1].split() == ["RESULT", "PERIOD", "START", "VALUE"]
    clock = datetime.fromtimestamp(start, tz=UTC).strftime("%H:%M:%S.000")
    assert text[2].split() == ["train_loss", "*", "2", clock, f"{2 * means_t[start]:.6g}"]
    assert len(text) == 2 + len(train)


def test_arrays_give_one_result_per_metric_labelled_by_it(home, cw) -> None:
    run_job("arrays", "train:loss", "validation:loss")
    start = minute_start(30)
    put(cw, "train:loss", ("TrainingJobName", "arrays"), start, {0: [1.0, 3.0]})
    put(cw, "validation:loss", ("TrainingJobName", "arrays"), start, {0: [5.0]})
    window = ["--start", str(start), "--end", str(start + 60), "--period", "60"]
    rows = math_json("arrays", "--math", "METRICS() * 10", *window)
    assert by_label(rows) == {"METRICS() * 10 train:loss": {start: 20.0}, "METRICS() * 10 validation:loss": {start: 50.0}}
    only = math_json("arrays", "--metric", "validation:loss", "--math", "SUM(METRICS())", *window)
    assert by_label(only) == {"SUM(METRICS())": {start: 5.0}}  # --metric binds only that metric


def test_the_default_period_is_one_that_cloudwatch_serves_old_data_in(home, cw) -> None:
    """A two-minute range five hours back would get 5 s periods, which CloudWatch answers empty for data
    older than 3 hours: the period chosen is a minute."""
    run_job("oldjob", "loss")
    start = minute_start(5 * 60)
    minutes = {0: [1.0, 2.0, 6.0], 1: [4.0]}
    put(cw, "loss", ("TrainingJobName", "oldjob"), start, minutes)
    window = ["--start", str(start), "--end", str(start + 120)]
    rows = math_json("oldjob", "--math", "loss + 0", *window)
    assert by_label(rows) == {"loss + 0": {float(start): 3.0, float(start + 60): 4.0}}
    assert {r["Period"] for r in rows} == {60}
    statistics = math_json("oldjob", "--statistic", "Average", *window)
    assert [r["Average"] for r in statistics] == [3.0, 4.0]


def test_system_metrics_of_several_hosts_have_ids_naming_the_host(home, cw) -> None:
    run_job("hosts", instance_count=2)
    start = minute_start(40)
    cpu = {"algo-1": {0: [10.0, 30.0], 1: [50.0]}, "algo-2": {0: [70.0], 2: [90.0]}}
    for host, minutes in cpu.items():
        put(cw, "CPUUtilization", ("Host", f"hosts/{host}"), start, minutes, resolution=60)
    window = ["--start", str(start), "--end", str(start + 180)]
    rows = math_json("hosts", "--system", "--metric", "CPUUtilization", "--math", "AVG(METRICS())",
                     "--math", "cpu_utilization_algo_2 - cpu_utilization_algo_1", *window)
    assert by_label(rows) == {
        "AVG(METRICS())": {float(start): 45.0, float(start + 60): 50.0, float(start + 120): 90.0},
        "cpu_utilization_algo_2 - cpu_utilization_algo_1": {float(start): 50.0},
    }
    one_host = math_json("hosts", "--system", "--host", "algo-2", "--math", "cpu_utilization * 2", *window)
    assert by_label(one_host) == {"cpu_utilization * 2": {float(start): 140.0, float(start + 120): 180.0}}
    bound = math_json("hosts", "--system", "--host", "algo-1", "--id", "c=CPUUtilization", "--math", "c", *window)
    assert by_label(bound) == {"c": {float(start): 20.0, float(start + 60): 50.0}}
    either = run_cli("metrics", "hosts", "--system", "--id", "c=CPUUtilization", "--math", "c", *window)
    assert either.returncode == 2
    assert ("CPUUtilization is measured on 2 hosts (algo-1, algo-2): add --host HOST to choose one."
            in either.stderr)


def test_every_page_of_a_long_answer_is_read(store, cw) -> None:
    from trainmon.api.cloudwatch import all_metric_data
    from trainmon.sdk.clients import CloudWatchClient

    start = minute_start(90)
    put(cw, "loss", ("Run", "r"), start, {m: [float(m)] for m in range(40)})
    metric = {"Namespace": JOB_NAMESPACE, "MetricName": "loss", "Dimensions": [{"Name": "Run", "Value": "r"}]}
    request = {"MetricDataQueries": [{"Id": "m", "MetricStat": {"Metric": metric, "Period": 60, "Stat": "Sum"}},
                                     {"Id": "e", "Expression": "m * 2"}],
               "StartTime": start, "EndTime": start + 2400, "ScanBy": "TimestampAscending"}
    client = CloudWatchClient(store)
    whole = client.get_metric_data(**request)["MetricDataResults"]
    paged = all_metric_data(store, **request, MaxDatapoints=7)
    assert [r["Values"] for r in paged] == [r["Values"] for r in whole] == [[float(m) for m in range(40)],
                                                                             [2.0 * m for m in range(40)]]
    assert [r["Timestamps"] for r in paged] == [r["Timestamps"] for r in whole]


def test_a_long_answer_is_computed_once_and_then_paged(store, cw, monkeypatch) -> None:
    from trainmon.api.cloudwatch import all_metric_data, get_metric_data

    start = minute_start(90)
    put(cw, "loss", ("Run", "r"), start, {m: [float(m)] for m in range(40)})
    metric = {"Namespace": JOB_NAMESPACE, "MetricName": "loss", "Dimensions": [{"Name": "Run", "Value": "r"}]}
    request = {"MetricDataQueries": [{"Id": "m", "MetricStat": {"Metric": metric, "Period": 60, "Stat": "Sum"}}],
               "StartTime": start, "EndTime": start + 2400, "ScanBy": "TimestampAscending"}
    reads: list[str] = []

    def counted(name: str):
        read = getattr(store, name)

        def wrapper(*args, **kwargs):
            found = read(*args, **kwargs)
            reads.append(name if name != "metric_data" else "roll-ups" if found[0] is not None else "datapoints")
            return found
        return wrapper

    for method in ("metric_data", "metric_columns"):
        monkeypatch.setattr(store, method, counted(method))
    assert "NextToken" in get_metric_data(store, **request, MaxDatapoints=7)
    one_page = sorted(reads)
    reads.clear()
    paged = all_metric_data(store, **request, MaxDatapoints=7)  # six pages
    assert sorted(reads) == one_page == ["roll-ups"]  # one read, of the roll-ups the writes made
    assert paged[0]["Values"] == [float(m) for m in range(40)]


# -- errors: CloudWatch's codes and columns, worded with the flags the user typed ---------------------


ERRORS = [
    (["--math", "validation_los - train_loss"],
     "InvalidParameterValue: Error in --math \"validation_los - train_loss\" at column 1: unknown Id "
     "'validation_los'. Did you mean validation_loss? The Ids here: train_loss=train:loss, "
     "validation_loss=validation:loss; bind another metric with --id ID=METRIC."),
    (["--math", "validation_loss -* train_loss"],
     "InvalidParameterValue: Syntax error in --math \"validation_loss -* train_loss\" at column 18: unexpected '*'; "
     "expected a number, an Id, a function, a string, '(', '[', '+' or '-'."),
    (["--math", "train:loss * 2"],
     "InvalidParameterValue: Syntax error in --math \"train:loss * 2\" at column 6: unexpected ':'; expected '+', "
     "'-', '*', '/', '^' or the end of the expression. Expressions use metrics by Id: write train_loss for train:loss."),
    (["--math", "FOO(train_loss)"],
     "InvalidParameterValue: Error in --math \"FOO(train_loss)\" at column 1: unknown function FOO; the functions "
     "are AVG, DIFF, FILL, MAX, METRICS, MIN, RATE, SUM."),
    (["--math", "AVG(train_loss)"],
     "InvalidParameterValue: Error in --math \"AVG(train_loss)\": its result is a number, and a returned result must "
     "be a time series or an array of time series (e.g. m1 - AVG(m1))."),
    (["--math", "a=b+1", "--math", "b = a + 1"],
     "InvalidParameterValue: Circular reference in --math: a -> b -> a. An expression cannot use its own result, "
     "directly or through other expressions."),
    (["--math", "train_loss", "--statistic", "Median"],
     "InvalidParameterValue: The value Median for parameter --statistic is not a valid statistic: use SampleCount, "
     "Average, Sum, Minimum, Maximum or a percentile from p0.0 to p100 (e.g. p99.9)."),
    (["--math", "train_loss", "--period", "7"],
     "InvalidParameterValue: The parameter --period must be 1, 5, 10, 20, 30 (high-resolution metrics only), 60 or "
     "a multiple of 60."),
    (["--math", "train_loss", "--start", "2026-01-02T00:00:00Z", "--end", "2026-01-01T00:00:00Z"],
     "InvalidParameterValue: The parameter --start must be before --end."),
    (["--id", "L=train:loss", "--math", "L"],
     "InvalidParameterValue: The value L for parameter --id L=train:loss is not valid: an Id is 1 to 255 letters, "
     "digits and underscores, and starts with a lowercase letter."),
    (["--id", "x=train:loss", "--id", "x=validation:loss", "--math", "x"],
     "InvalidParameterValue: The value x for parameter --id x=validation:loss is a duplicate: each query of a "
     "request needs its own Id."),
    (["--id", "l=train:los", "--math", "l"],
     "ValidationException: --id l=train:los: job errs has no metric 'train:los'; its metrics: train:loss, "
     "validation:loss."),
    (["--id", "l", "--math", "l"], "ValidationException: --id 'l' must look like ID=METRIC, e.g. --id loss=train:loss."),
    (["--id", "l=train:loss"],
     "ValidationException: --id binds a metric to an Id for --math expressions: add --math, e.g. --id l=train:loss "
     "--math 'RATE(l)'."),
    (["--math", "train_loss", "--statistic", "Average", "--statistic", "p99"],
     "ValidationException: --math takes one --statistic: the statistic of every metric the expressions use "
     "(default Average)."),
    (["--math", "train_loss", "--host", "algo-1"],
     "ValidationException: --host chooses a host's --system metrics; a job's own metrics are per job, not per host: "
     "drop --host, or add --system."),
]


@pytest.mark.timeout(600)  # heavy by design: room for a machine busy with other tests
def test_errors_are_one_line_with_the_code_the_column_and_what_to_do(home) -> None:
    run_job("errs", "train:loss", "validation:loss")
    for args, message in ERRORS:
        result = run_cli("metrics", "errs", *args)
        assert (result.returncode, result.stderr) == (2, f"trainmon: {message}\n"), args
        assert result.stdout == ""


def test_an_id_that_several_metrics_would_get_names_none_of_them(home) -> None:
    run_job("twins", "train:loss", "train-loss", "Loss")
    result = run_cli("metrics", "twins", "--math", "train_loss")
    assert result.returncode == 2
    assert ("unknown Id 'train_loss'. train_loss would name train:loss and train-loss: bind one with --id ID=METRIC. "
            "The Ids here: loss=Loss; bind another metric with --id ID=METRIC.") in result.stderr
    bound = run_cli("metrics", "twins", "--id", "a=train:loss", "--math", "a + loss", check=True)
    assert bound.stdout.startswith("no datapoints for job twins from ")  # bound, though none were put


# -- automatic Ids and the plan (pure) -----------------------------------------------------------------


@pytest.mark.parametrize(("name", "expected"), [
    ("loss", "loss"),
    ("valLoss", "valLoss"),  # already a valid Id: kept as it is
    ("train_loss_2", "train_loss_2"),
    ("train:loss", "train_loss"),
    ("validation:rmse", "validation_rmse"),
    ("Loss", "loss"),
    ("CPUUtilization", "cpu_utilization"),
    ("GPUMemoryUtilization", "gpu_memory_utilization"),
    ("HostCPUUtilization algo-2", "host_cpu_utilization_algo_2"),
    ("loss (smoothed)", "loss_smoothed"),
    ("train::loss", "train_loss"),
    ("5xx", "m_5xx"),
    ("_private", "private"),
    ("%", "m_"),
    ("épreuve", "preuve"),
    ("x" * 300 + ":", "x" * 255),
])
def test_automatic_ids(name: str, expected: str) -> None:
    assert automatic_id(name) == expected


@pytest.mark.parametrize(("argument", "expected"), [
    ("a - b", (None, "a - b")),
    ("gap=a - b", ("gap", "a - b")),
    ("  gap =  a - b ", ("gap", "a - b")),
    ("Gap=a", ("Gap", "a")),  # CloudWatch then refuses the Id, naming it
    ("a==b", (None, "a==b")),
    ("a >= b", (None, "a >= b")),
    ("FILL(a, 0)", (None, "FILL(a, 0)")),
])
def test_named_expressions(argument: str, expected: tuple[str | None, str]) -> None:
    assert split_math(argument) == expected


def job_metric(name: str) -> Metric:
    return Metric(MetricKey(JOB_NAMESPACE, name, (("TrainingJobName", "j"),)), name, name)


def test_plan_binds_each_metric_once() -> None:
    metrics = [job_metric(n) for n in ("train_loss", "train:loss", "train:acc", "Acc", "acc:", "lr")]
    request = plan(metrics, [("rate", job_metric("lr"), "rate=lr")], ["x = 1", "train_acc + lr", "rate"])
    assert [(b.id, b.metric.label, b.origin) for b in request.bindings] == [
        ("rate", "lr", "--id rate=lr"),  # --id replaces the automatic Id
        ("train_loss", "train_loss", "train_loss"),  # the metric named exactly so wins the Id
        ("train_acc", "train:acc", "train:acc"),
    ]
    assert request.unbound == {"acc": ["Acc", "acc:"]}
    assert [(m.id, m.label) for m in request.maths] == [("x", "x"), ("math_2", "train_acc + lr"), ("math_3", "rate")]
    queries = request.queries(60, "p90")
    assert queries[0] == {"Id": "rate", "Label": "lr", "ReturnData": False, "MetricStat": {
        "Metric": {"Namespace": JOB_NAMESPACE, "MetricName": "lr", "Dimensions": [{"Name": "TrainingJobName",
                                                                                   "Value": "j"}]},
        "Period": 60, "Stat": "p90"}}
    assert queries[-1] == {"Id": "math_3", "Expression": "rate", "Label": "rate", "Period": 60}


def test_a_math_name_takes_the_id_from_a_metric() -> None:
    request = plan([job_metric("loss"), job_metric("math_1")], [], ["loss * 2", "loss=1"])
    assert [b.id for b in request.bindings] == ["math_1"]
    assert [m.id for m in request.maths] == ["math_1_", "loss"]
