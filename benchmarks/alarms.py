"""Alarm evaluation: a minute's pass over 1,000 alarms against 1,000 GetMetricStatistics calls.

1,000 alarms (at scale 1), each on a metric of its own (a namespace, a name and a ``Run``
dimension) that holds a datapoint every 10 s for the last 20 minutes, put through
``trainmon.client("cloudwatch").put_metric_data`` into a fresh SQLite store. The alarms are CloudWatch's
everyday kind: a period of 60 s, 5 evaluation periods, 3 datapoints to alarm, the statistic
Average, Maximum, Sum or p99 in turn, the threshold in the middle of the metric's values, so
that about half of them go to ALARM.

Timed, over the same alarms and the same minutes:

- GetMetricStatistics (baseline): one call per alarm through the client, of the alarm's metric,
  statistic and period over its evaluation range (N + 2 = 7 periods): what fetching the data costs
  by the API a user has;
- first pass: ``evaluate_alarms`` with every alarm due and none evaluated yet: each one's data, its
  evaluation, and 1,000 state changes written with their history;
- steady pass: the next minute's pass, where states mostly stay (what every later minute costs).

Each is the best of 3 (the first pass over alarms made afresh each time, the steady pass over
the 3 minutes after it). Figures: the first and the steady pass, each as a ratio against the
GetMetricStatistics calls' time (targets: at most 2x for the first, at most 1.5x for the steady pass), and the steady pass
as the share of the minute it takes (target: under 10%). Checks: each pass evaluated every alarm
once, and each alarm's state is what :func:`trainmon.cloudwatch.alarms.evaluate` gives for the
datapoints GetMetricStatistics returned.
"""

from __future__ import annotations

import math
import time
from typing import Any

from .common import Report, best_of, heading, ms, scratch_dir, table, timed

ALARMS = 1_000
HISTORY_MIN = 20
EVERY_S = 10
PERIOD = 60
EVALUATION_PERIODS, DATAPOINTS_TO_ALARM = 5, 3
STATISTICS = ("Average", "Maximum", "Sum", "p99")
FIRST_TARGET, STEADY_TARGET, SHARE_TARGET = 2.0, 1.5, 0.10
REPEATS = 3  # best of: the baseline, the first pass (alarms made afresh) and the steady pass


def _values(index: int, count: int) -> list[float]:
    """A metric that wanders around 50, its phase its own, so that alarms differ."""
    return [50 + 30 * math.sin(index * 0.7 + step / 9) + (index * 7 + step * 13) % 11 for step in range(count)]


def _put(cw: Any, alarms: int, start_s: int) -> int:
    count = HISTORY_MIN * 60 // EVERY_S
    items = [{"MetricName": "throughput", "Dimensions": [{"Name": "Run", "Value": f"run-{index:04d}"}],
              "Value": value, "Timestamp": start_s + step * EVERY_S, "StorageResolution": 1}
             for index in range(alarms) for step, value in enumerate(_values(index, count))]
    for first in range(0, len(items), 1000):
        cw.put_metric_data(Namespace="Bench", MetricData=items[first:first + 1000])
    return len(items)


def _alarm(index: int) -> dict[str, Any]:
    stat = STATISTICS[index % len(STATISTICS)]
    request: dict[str, Any] = {
        "AlarmName": f"alarm-{index:04d}", "Namespace": "Bench", "MetricName": "throughput",
        "Dimensions": [{"Name": "Run", "Value": f"run-{index:04d}"}], "Period": PERIOD,
        "EvaluationPeriods": EVALUATION_PERIODS, "DatapointsToAlarm": DATAPOINTS_TO_ALARM,
        "Threshold": 800.0 if stat == "Sum" else 55.0, "ComparisonOperator": "GreaterThanThreshold"}
    request["ExtendedStatistic" if stat.startswith("p") else "Statistic"] = stat
    return request


def _baseline(cw: Any, requests: list[dict[str, Any]], slot_s: int) -> list[list[dict[str, Any]]]:
    """GetMetricStatistics over each alarm's evaluation range."""
    from trainmon.cloudwatch.alarms import evaluation_range

    start = slot_s - evaluation_range(EVALUATION_PERIODS) * PERIOD
    answers = []
    for request in requests:
        stat = request.get("Statistic") or request["ExtendedStatistic"]
        kind = {"ExtendedStatistics": [stat]} if stat.startswith("p") else {"Statistics": [stat]}
        answers.append(cw.get_metric_statistics(Namespace="Bench", MetricName="throughput",
                                                Dimensions=request["Dimensions"], StartTime=start, EndTime=slot_s,
                                                Period=PERIOD, **kind)["Datapoints"])
    return answers


def _expected(request: dict[str, Any], datapoints: list[dict[str, Any]], slot_s: int) -> str | None:
    """The state the pure evaluation gives for the datapoints GetMetricStatistics returned."""
    from trainmon.cloudwatch import alarms as model

    stat = request.get("Statistic") or request["ExtendedStatistic"]
    by_ms = {round(p["Timestamp"].timestamp() * 1000): p["ExtendedStatistics"][stat] if stat.startswith("p")
             else p[stat] for p in datapoints}
    count = model.evaluation_range(EVALUATION_PERIODS)
    starts = [(slot_s - (count - index) * PERIOD) * 1000 for index in range(count)]
    rule = model.Rule("GreaterThanThreshold", request["Threshold"], EVALUATION_PERIODS, DATAPOINTS_TO_ALARM)
    return model.evaluate(rule, [model.Datapoint(start, by_ms.get(start)) for start in starts]).state


def run(scale: float) -> Report:
    import trainmon
    from trainmon.api.alarms import evaluate_alarms
    from trainmon.store import open_store

    report = Report("alarms")
    alarms = max(50, int(ALARMS * scale))
    heading(f"Evaluating {alarms:,} alarms, each on a metric of its own, against GetMetricStatistics")
    with scratch_dir("alarms-") as home:
        store = open_store(home)
        try:
            cw = trainmon.client("cloudwatch", store=store)
            now_s = math.floor(time.time() / 60) * 60
            put_s, samples = timed(lambda: _put(cw, alarms, now_s - HISTORY_MIN * 60))
            requests = [_alarm(index) for index in range(alarms)]
            print(f"  put {samples:,} datapoints in {put_s:.1f} s")
            first_slot = now_s - (REPEATS + 3) * 60  # the minutes evaluated: their ranges hold data
            baseline_s, answers = best_of(REPEATS, lambda: _baseline(cw, requests, first_slot))
            firsts = []
            for _ in range(REPEATS):  # alarms made afresh each time: the first pass writes every state
                names = [request["AlarmName"] for request in requests]
                for first in range(0, len(names), 100):  # DeleteAlarms takes 100 names a call
                    cw.delete_alarms(AlarmNames=names[first:first + 100])
                for request in requests:
                    cw.put_metric_alarm(**request)
                firsts.append(timed(lambda: evaluate_alarms(store, first_slot + 1)))
            first_s, first = min(firsts, key=lambda run: run[0])
            states = {a["AlarmName"]: a["StateValue"] for a in _described(cw)}
            expected = {r["AlarmName"]: _expected(r, answer, first_slot) for r, answer in zip(requests, answers,
                                                                                              strict=True)}
            steadies = [timed(lambda minute=minute: evaluate_alarms(store, first_slot + 60 * minute + 1))
                        for minute in range(1, REPEATS + 1)]  # each the next minute's pass
            steady_s, steady = min(steadies, key=lambda run: run[0])
            report.check(all(run.evaluated == alarms for _, run in firsts + steadies),
                         f"each pass evaluated every alarm once ({first.evaluated:,}, {steady.evaluated:,})")
            report.check(states == expected, "every alarm's state is the pure evaluation's of GetMetricStatistics' "
                         f"datapoints ({sum(s == 'ALARM' for s in states.values()):,} in ALARM)")
        finally:
            store.close()
    table(["what", "seconds", "per alarm (ms)", "state changes"], [
        [f"GetMetricStatistics x {alarms:,} (baseline)", f"{baseline_s:.3f}", ms(baseline_s / alarms), "-"],
        ["first pass", f"{first_s:.3f}", ms(first_s / alarms), f"{first.changed:,}"],
        ["steady pass (the next minute)", f"{steady_s:.3f}", ms(steady_s / alarms), f"{steady.changed:,}"],
    ])
    report.ratio("first pass / GetMetricStatistics calls", first_s / baseline_s, f"<= {FIRST_TARGET:g}x",
                 first_s / baseline_s <= FIRST_TARGET, f"{first_s:.2f} s for {alarms:,} alarms")
    report.ratio("steady pass / GetMetricStatistics calls", steady_s / baseline_s, f"<= {STEADY_TARGET:g}x",
                 steady_s / baseline_s <= STEADY_TARGET, f"{steady_s:.2f} s for {alarms:,} alarms")
    share = steady_s / 60 * (ALARMS / alarms)
    report.absolute(f"steady pass over {ALARMS:,} alarms, share of the minute", f"{share * 100:.1f}%",
                    f"< {SHARE_TARGET * 100:.0f}%", share < SHARE_TARGET)
    return report


def _described(cw: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    token = None
    while True:
        page = cw.describe_alarms(MaxRecords=100, **({"NextToken": token} if token else {}))
        found += page["MetricAlarms"]
        token = page.get("NextToken")
        if not token:
            return found
