"""Where a host's system readings come from: the job's profile, else its CloudWatch system metrics.

The profile is read file by file, each file once, with pyarrow alone (no pandas, no per-row
objects), a few files at a time on threads: a file's rows are sorted by metric and then time
(:mod:`trainmon.store.profiles`), so a metric's rows are one slice of it; the slices of every file
are joined per host and metric. A 10-hour job profiled every 100 ms (9 million rows) is read in
about the time ``pyarrow.parquet.read_table`` takes to read its files (``python3 -m benchmarks report``).

The report runs inside the job's supervisor at its end, so what it reads is bounded: files are
read in time order (every host's minute at once) until ``max_rows`` rows (:data:`MAX_PROFILE_ROWS`)
or :data:`MAX_PROFILE_FILES` files; the rest is left out, and :class:`ProfileRead` says from when.
A host keeps its first :data:`MAX_HOST_METRICS` metrics, and a metric name longer than
:data:`MAX_NAME_CHARS` is left out (the profiler writes neither; a file from elsewhere might).

A job that ran without the profiler still has the CloudWatch metrics the system monitor sent
(namespace ``/aws/sagemaker/TrainingJobs``, dimension ``Host=<job>/algo-N``): one datapoint per
period (1 to 60 s), per host, summed over cores and GPUs, read by the read layer
(:func:`trainmon.read.series.system_series`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..api.trainmon import metric_host, system_metric_keys
from ..read.series import system_series
from ..store import Store, profiles
from .analysis import Columns, profile_unit

PROFILE, CLOUDWATCH = "profile", "cloudwatch"
READERS = 4  # threads reading profile files at once
AHEAD = 2 * READERS  # files read ahead of the one being joined: what is in memory beyond the budget
MAX_PROFILE_ROWS = 12_000_000  # a 10-hour job of one host with 8 cores and 2 GPUs at 100 ms is 9 million
MAX_PROFILE_FILES = 20_000  # a file a host a minute: two weeks of one host
MAX_HOST_METRICS = 1_000
MAX_NAME_CHARS = 256


@dataclass
class HostReadings:
    """One host's system readings: metric -> columns, with each metric's unit."""

    host: str
    source: str  # PROFILE or CLOUDWATCH
    metrics: dict[str, Columns] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    _derived: dict[str, Columns | None] = field(default_factory=dict, repr=False)

    def derived(self, name: str, make: Callable[[Mapping[str, Columns]], Columns | None]) -> Columns | None:
        """A series made from the readings (the mean of the cores, the busiest GPU), made once:
        several sections draw it, and a 10-hour profile makes it in a tenth of a second."""
        if name not in self._derived:
            self._derived[name] = make(self.metrics)
        return self._derived[name]


@dataclass
class ProfileRead:
    """What :func:`read_profile` read of a profile, and what it left out."""

    readings: dict[str, HostReadings] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)  # files that could not be read (damaged, vanished)
    rows: int = 0  # rows read
    files: int = 0  # files in the profile
    left_out: int = 0  # files not read: beyond the budget
    cut_s: float | None = None  # when the first file left out begins (epoch s), if its name says
    crowded: list[str] = field(default_factory=list)  # hosts with more than MAX_HOST_METRICS metrics
    long_names: int = 0  # metric names longer than MAX_NAME_CHARS, left out (counted once a file)


def read_profile(location: str, job: str, max_rows: int = MAX_PROFILE_ROWS) -> ProfileRead:
    """Every host's profile, per metric in time order (empty when none was written yet), within
    the budget (``max_rows`` rows and :data:`MAX_PROFILE_FILES` files, the earliest first), with
    the files that could not be read (left out: one damaged file must not hide the rest). Files
    are read on a few threads at once (pyarrow decodes without the GIL), at most :data:`AHEAD`
    ahead of the one being joined."""
    fs, root = profiles._filesystem(location)  # the one resolution of a location (own bucket, fsspec URL)
    names = sorted(fs.glob(f"{root.rstrip('/')}/{job}/*/*.parquet"), key=_file_order)
    read = ProfileRead(files=len(names))
    parts: dict[str, dict[str, list[Columns]]] = {}
    allowed = names[:MAX_PROFILE_FILES]
    stop = len(allowed)  # the first file not read
    accepted: list[tuple[str, int, dict[str, Columns], int]] = []  # (file, rows, its metrics, long names)
    with ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="trainmon-report") as pool:
        pending: deque[Future[Any]] = deque()
        submitted = 0
        for position, name in enumerate(allowed):
            while submitted < len(allowed) and len(pending) < AHEAD:
                pending.append(pool.submit(_read_file, fs, allowed[submitted], max_rows - read.rows))
                submitted += 1
            found = pending.popleft().result()
            if found is None:
                read.unreadable.append(name)
                continue
            rows, columns, long_names = found
            if columns is None or read.rows + rows > max_rows:
                stop = position
                break
            read.rows += rows
            accepted.append((name, rows, columns, long_names))
        for future in pending:  # read ahead of where the budget ran out: not needed
            future.cancel()
    read.left_out = len(names) - stop
    if read.left_out:
        moment = _file_order(names[stop])[0]
        read.cut_s = float(moment) if moment < _NO_TIME else None
    for name, _, columns, long_names in accepted:
        read.long_names += long_names
        host = name.rsplit("/", 2)[-2]
        per_metric = parts.setdefault(host, {})
        for metric, pair in columns.items():
            if metric not in per_metric and len(per_metric) >= MAX_HOST_METRICS:
                if host not in read.crowded:
                    read.crowded.append(host)
                continue
            per_metric.setdefault(metric, []).append(pair)
    cut_ms = None if read.cut_s is None else int(read.cut_s) * 1000
    for host, per_metric in parts.items():
        readings = HostReadings(host, PROFILE)
        for metric, pieces in per_metric.items():
            stamps, values = _joined(pieces)
            if cut_ms is not None:  # a file holds up to a minute after its name's time: every host ends at the cut
                kept = int(np.searchsorted(stamps, cut_ms, side="left"))
                stamps, values = stamps[:kept], values[:kept]
            if len(stamps):
                readings.metrics[metric], readings.units[metric] = (stamps, values), profile_unit(metric)
        if readings.metrics:
            read.readings[host] = readings
    return read


_NO_TIME = 2**62


def _file_order(name: str) -> tuple[int, str]:
    """Files by the time their name begins with (``<epoch seconds>-<random>.parquet``), every host's
    minute together, so a budget that runs out cuts every host at the same moment."""
    stamp = name.rsplit("/", 1)[-1].split("-", 1)[0]
    return (int(stamp) if stamp.isdigit() and len(stamp) < 16 else _NO_TIME, name)


def _read_file(fs: Any, name: str, room: int) -> tuple[int, dict[str, Columns] | None, int] | None:
    """A profile file's rows per metric, its metric names as the file's dictionary (no hashing),
    with its row count and how many of its names were too long; only the count when it holds more
    than ``room`` rows (it is not read); None when it cannot be read."""
    import pyarrow.parquet as pq

    try:
        with fs.open(name, "rb") as handle:
            file = pq.ParquetFile(handle, read_dictionary=["metric"])
            rows = int(file.metadata.num_rows)
            if rows > room:
                return rows, None, 0
            columns = profiles.by_metric(file.read())
    except Exception:  # pyarrow and fsspec raise many kinds for a damaged or vanished file (or other columns)
        return None
    long_names = [metric for metric in columns if len(metric) > MAX_NAME_CHARS]
    for metric in long_names:
        del columns[metric]
    return rows, columns, len(long_names)


def _joined(pieces: list[Columns]) -> Columns:
    stamps = pieces[0][0] if len(pieces) == 1 else np.concatenate([p[0] for p in pieces])
    values = pieces[0][1] if len(pieces) == 1 else np.concatenate([p[1] for p in pieces])
    if len(stamps) > 1 and not bool((stamps[1:] >= stamps[:-1]).all()):
        order = np.argsort(stamps, kind="stable")
        stamps, values = stamps[order], values[order]
    return stamps, values


def read_system_metrics(store: Store, job: str) -> dict[str, HostReadings]:
    """Every host's CloudWatch system metrics: per metric each datapoint's average, in time order."""
    found: dict[str, HostReadings] = {}
    for key in system_metric_keys(store, job):
        series = system_series(store, key)
        if series is None:
            continue
        host = metric_host(key)
        readings = found.setdefault(host, HostReadings(host, CLOUDWATCH))
        readings.metrics[key.name], readings.units[key.name] = series
    return found
