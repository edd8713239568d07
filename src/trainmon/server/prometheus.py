"""``/metrics``: every running job's latest metric values and its hosts' latest system metrics, in
Prometheus' text format, so a Prometheus or Grafana already running can scrape trainmon.

``trainmon_job_metric{job, metric}`` is a job's last finite value of each metric its definitions
extract; ``trainmon_system_metric{job, host, metric, unit}`` a host's newest system datapoint;
``trainmon_jobs{status}`` counts jobs by status."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ..api.trainmon import metric_host, system_metric_keys
from ..store import Store

CONTENT_TYPE = CONTENT_TYPE_LATEST
SYSTEM_LOOKBACK_MS = 300_000  # a host's newest datapoint within this long


class _Jobs:
    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Any:
        rows = self.store.list_jobs()
        statuses = GaugeMetricFamily("trainmon_jobs", "Jobs by status.", labels=["status"])
        for status, count in sorted(Counter(row.status for row in rows).items()):
            statuses.add_metric([status], count)
        yield statuses
        metrics = GaugeMetricFamily("trainmon_job_metric", "A running job's last value of each metric.",
                                    labels=["job", "metric"])
        system = GaugeMetricFamily("trainmon_system_metric", "A running job's hosts' newest system datapoints.",
                                   labels=["job", "host", "metric", "unit"])
        now_ms = int(time.time() * 1000)
        for row in rows:
            if row.status != "InProgress":
                continue
            for name, value, _ in self.store.final_metrics(row.id):
                metrics.add_metric([row.name, name], value)
            for key in system_metric_keys(self.store, row.name):
                newest = self.store.metric_samples(key, now_ms - SYSTEM_LOOKBACK_MS, now_ms + 60_000)
                if newest:
                    sample = newest[-1]
                    system.add_metric([row.name, metric_host(key), key.name, sample.unit], sample.sum / sample.count)
        yield metrics
        yield system


def exposition(store: Store) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Jobs(store))
    return generate_latest(registry)
