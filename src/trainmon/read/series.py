"""A job's series as columns, for whoever draws or analyses them whole: the points of its metrics
per host, within a budget (the profiling report's), and a host's system metric.

A job's metric may hold millions of points, and the report runs inside the job's supervisor at its
end, so :func:`job_metrics` reads each metric's earliest points up to a share of a budget, window
by window of time, and says from when it left the rest out. A system metric (one the system
monitor put, namespace ``/aws/sagemaker/TrainingJobs``, dimension ``Host=<job>/algo-N``) is one
datapoint per period, per host: :func:`system_series` gives each datapoint's average.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cloudwatch.model import MetricKey
from ..cloudwatch.statistics import concat_columns
from ..store import PointColumns, Store

Columns = tuple[np.ndarray, np.ndarray]  # (epoch ms, int64, ascending; values, float64)


@dataclass(frozen=True)
class MetricRead:
    """What :func:`job_metrics` read of one metric."""

    hosts: dict[str, Columns]  # host -> its points, in time order (a host's streams as one series)
    read: int  # the points read, all hosts together
    count: int  # the points the metric holds
    cut_ms: int | None  # when the first point left out was (None: none was)


def job_metrics(store: Store, job_id: int, points: int, span_ms: tuple[int, int],
                windows: int) -> dict[str, MetricRead]:
    """Each of a job's metrics, its earliest points up to an even share of ``points`` (all metrics
    together), read in at most ``windows`` reads of a window of time each within ``span_ms`` (the
    job's training time, epoch ms)."""
    hosts = {stream.id: stream.host for stream in store.streams(job_id)}
    names = store.metric_names(job_id)
    counts = {name: summary[0] for name, summary in store.metric_summaries(job_id).items()}
    share = max(points // max(len(names), 1), 1)
    found: dict[str, MetricRead] = {}
    for name in names:
        columns, cut_ms = earliest_points(store, job_id, name, counts.get(name, 0), share, span_ms, windows)
        found[name] = MetricRead(_by_host(columns, hosts), len(columns.stamps), counts.get(name, 0), cut_ms)
    return found


def _by_host(columns: PointColumns, hosts: dict[int, str]) -> dict[str, Columns]:
    """Points per host (``hosts``: each log stream's), in time order: a host's second stream (a
    restart) joins its first as one series."""
    per_host: dict[str, Columns] = {}
    for stream in np.unique(columns.streams).tolist():
        mine = columns.streams == stream
        host = hosts.get(int(stream), "algo-1")
        stamps, values = columns.stamps[mine], columns.values[mine]
        if host in per_host:
            stamps = np.concatenate((per_host[host][0], stamps))
            values = np.concatenate((per_host[host][1], values))
            order = np.argsort(stamps, kind="stable")
            stamps, values = stamps[order], values[order]
        per_host[host] = (stamps.astype(np.int64), values.astype(np.float64))
    return per_host


def earliest_points(store: Store, job_id: int, name: str, count: int, cap: int, span_ms: tuple[int, int],
                    windows: int) -> tuple[PointColumns, int | None]:
    """A metric's earliest ``cap`` points (of its ``count``), and when the first point left out was
    (None: none was). One read when it holds no more; else window by window of time from the first
    point (each sized to hold about half the cap at the metric's mean rate over ``span_ms``, twice
    as wide after one that held little, read again half as wide when one held more than twice what
    is left of the cap: a flood of points in a second), at most ``windows`` reads: what is in
    memory is about the cap."""
    if count <= cap:
        return store.point_columns(job_id, name), None
    start, end = span_ms
    width = max((end - start) * cap // (2 * count), 1)
    pieces: list[PointColumns] = []
    held, lower, upper = 0, None, start + width
    read_until: int | None = None  # where the reads stopped (None: at the end)
    for _ in range(windows):
        read_until = None if upper >= end else upper
        piece = store.point_columns(job_id, name, start_ms=lower, end_ms=read_until)
        if len(piece.stamps) > 2 * (cap - held) and width > 1:
            width //= 2
            upper = (start if lower is None else lower) + width
            continue
        pieces.append(piece)
        held += len(piece.stamps)
        if held > cap or read_until is None:
            break
        if len(piece.stamps) < cap // 4:
            width *= 2
        lower, upper = upper, upper + width
    joined = PointColumns(*(np.concatenate(column) for column in zip(*pieces, strict=True)))
    if len(joined.stamps) > cap:
        return PointColumns(*(column[:cap] for column in joined)), int(joined.stamps[cap])
    return joined, read_until


def system_series(store: Store, key: MetricKey, start_ms: int = 0,
                  end_ms: int = 2**62) -> tuple[Columns, str] | None:
    """A system metric's datapoints from ``start_ms`` to ``end_ms``: each one's average, in time order
    (all units together), with the unit of the first unit's datapoints; None when it has none."""
    by_unit = store.metric_columns(key, start_ms, end_ms)
    if not by_unit:
        return None
    columns = concat_columns(list(by_unit.values()))
    with np.errstate(invalid="ignore", divide="ignore"):
        averages = columns.total / columns.sample_count
    return (columns.timestamp_ms.astype(np.int64, copy=False), averages), next(iter(by_unit))
