"""A job's metrics as a pandas DataFrame, like the SageMaker SDK's ``TrainingJobAnalytics``.

SageMaker's version asks CloudWatch for one Average per minute, so it collapses every point
of a minute into one and fails past 1,440 minutes. Here ``dataframe()`` returns every raw point;
ask for ``period=60, statistic="Average"`` to get SageMaker's per-minute view.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..api import sagemaker, trainmon
from ..cloudwatch.statistics import Point, period_table
from ..jobs.document import defined_metrics
from ..store import Store, open_store

STATISTICS = ("Average", "Sum", "Minimum", "Maximum", "SampleCount")


class TrainingJobAnalytics:
    def __init__(
        self,
        training_job_name: str,
        metric_names: list[str] | None = None,
        *,
        period: int | None = None,
        statistic: str = "Average",
        store: Store | None = None,
    ) -> None:
        if statistic not in STATISTICS:
            raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, not {statistic!r}")
        if period is not None and period < 1:
            raise ValueError("period must be a positive number of seconds")
        self.name = training_job_name
        self.metric_names = metric_names
        self.period = period
        self.statistic = statistic
        self._store = store or open_store()
        self._frame: Any = None

    def dataframe(self, force_refresh: bool = False) -> Any:
        """Columns ``timestamp`` (seconds since the metric's first point), ``metric_name``, ``value``."""
        if self._frame is None or force_refresh:
            self._frame = self._fetch()
        return self._frame

    def export_csv(self, filename: str | Path) -> None:
        self.dataframe().to_csv(filename, index=False)

    def _fetch(self) -> Any:
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("analytics needs pandas: pip install 'trainmon[sdk]'") from None
        job = sagemaker.describe_training_job(self._store, TrainingJobName=self.name)
        names = self.metric_names or defined_metrics(job)
        found = trainmon.get_job_metric_points(self._store, TrainingJobName=self.name, MetricNames=names or None)
        points = [Point(p["MetricName"], p["Timestamp"], p["Value"]) for p in found["Points"]]
        rows: list[tuple[float, str, float]] = []
        if self.period is None:
            first: dict[str, int] = {}
            for point in points:
                start = first.setdefault(point.name, point.timestamp_ms)
                rows.append(((point.timestamp_ms - start) / 1000.0, point.name, point.value))
        else:
            table = period_table(points, self.period)
            first_period: dict[str, int] = {}
            for row in table:
                value = {
                    "Average": row.average,
                    "Sum": row.average * row.finite if row.average is not None else None,
                    "Minimum": row.minimum,
                    "Maximum": row.maximum,
                    "SampleCount": float(row.finite),
                }[self.statistic]
                if value is None:
                    continue
                start = first_period.setdefault(row.name, row.start_ms)
                rows.append(((row.start_ms - start) / 1000.0, row.name, value))
        frame = pd.DataFrame(rows, columns=["timestamp", "metric_name", "value"])
        return frame.sort_values(["metric_name", "timestamp"], kind="stable").reset_index(drop=True)

    def __repr__(self) -> str:
        return f"<TrainingJobAnalytics for {self.name}>"
