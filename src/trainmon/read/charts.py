"""The reads behind a chart: a job's metric, a host's system metric or profiler metric, as a chart
``width`` pixels wide shows them (:mod:`.downsample`), and a live chart's new points.

Each answer holds ``Count`` (the points the range holds), the times (``Timestamps``, or
``TimestampDeltas`` with ``deltas``), ``Values`` and ``NonFinite``, as
:func:`~trainmon.read.downsample.chart` gives them; the doors add the names they were asked by.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..cloudwatch.model import MetricKey
from ..store import PointColumns, Store, profiles
from . import downsample
from .series import system_series


def metric_chart(store: Store, job_id: int, metric: str, width: int, *, host: str | None = None,
                 start_ms: int | None = None, end_ms: int | None = None, deltas: bool = False,
                 records: bool = False) -> dict[str, Any]:
    """A job's metric (all hosts, or ``host``'s) for a chart: from the sealed chunks' overviews where
    the range holds many points a pixel (``Store.chart_points``). With ``records``, each point's log
    stream (``Stream``) and record (``Record``, 1-based) and the job's streams by id (``Streams``)."""
    columns, held = store.chart_points(job_id, metric, width=width, host=host, start_ms=start_ms, end_ms=end_ms)
    kept, shown = downsample.chart(columns.stamps, columns.values, width, start_ms, end_ms, count=held,
                                   deltas=deltas)
    if records:
        streams = {s.id: {"Name": s.name, "Host": s.host} for s in store.streams(job_id)}
        shown |= {"Stream": columns.streams[kept].tolist(), "Record": (columns.seqs[kept] + 1).tolist(),
                  "Streams": {str(k): v for k, v in streams.items()}}
    return shown


def system_chart(store: Store, key: MetricKey, width: int, start_ms: int | None = None,
                 end_ms: int | None = None, *, deltas: bool = False) -> dict[str, Any]:
    """A host's system metric for a chart (each datapoint's average), with the ``Unit`` it was put
    with (None: it has no datapoints in the range)."""
    found = system_series(store, key, start_ms or 0, end_ms or 2**62)
    (stamps, values), unit = found if found is not None else ((np.empty(0, np.int64), np.empty(0)), None)
    _, shown = downsample.chart(stamps, values, width, start_ms, end_ms, deltas=deltas)
    return {"Unit": unit, **shown}


def profile_chart(location: str, job_name: str, host: str, metric: str, width: int, start_ms: int | None = None,
                  end_ms: int | None = None, *, deltas: bool = False) -> dict[str, Any]:
    """A host's profiler metric for a chart, read from the job's profile at ``location`` (its
    ProfilerConfig's S3OutputPath); reading it needs pyarrow (ImportError without)."""
    stamps, values = profiles.Profile(job_name, location).columns(host, metric)
    if start_ms is not None or end_ms is not None:
        inside = (stamps >= (start_ms or 0)) & (stamps < (end_ms or 2**62))
        stamps, values = stamps[inside], values[inside]
    _, shown = downsample.chart(stamps, values, width, start_ms, end_ms, deltas=deltas)
    return shown


def points_after(store: Store, job_id: int, metric: str, after: tuple[int, int, int] | None,
                 since_ms: int) -> tuple[PointColumns, np.ndarray]:
    """A job's metric's points that come after ``after`` (the last point a live chart has: its time
    in epoch ms, log stream and record) in (time, stream, record) order, or without one, those
    after ``since_ms``: the columns read, and the positions in them of the points that are new."""
    start = after[0] if after is not None else since_ms + 1
    columns = store.point_columns(job_id, metric, start_ms=start)
    stamps, streams, seqs = columns.stamps, columns.streams, columns.seqs
    fresh = np.ones(len(stamps), bool)
    if after is not None:
        ms, stream, seq = after
        fresh = (stamps > ms) | ((stamps == ms) & ((streams > stream) | ((streams == stream) & (seqs > seq))))
    return columns, np.flatnonzero(fresh)
