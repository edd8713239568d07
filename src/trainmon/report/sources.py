"""Where a host's system readings come from: the job's profile, else its CloudWatch system metrics.

The profile is read file by file, each file once, with pyarrow alone (no pandas, no per-row
objects), a few files at a time on threads: a file's rows are sorted by metric and then time
(:mod:`trainmon.store.profiles`), so a metric's rows are one slice of it; the slices of every file
are joined per host and metric. A 10-hour job profiled every 100 ms (9 million rows) is read in
about the time ``pyarrow.parquet.read_table`` takes to read its files (``python3 -m benchmarks report``).

A job that ran without the profiler still has the CloudWatch metrics the system monitor sent
(namespace ``/aws/sagemaker/TrainingJobs``, dimension ``Host=<job>/algo-N``): one datapoint per
period (1 to 60 s), per host, summed over cores and GPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..api.trainmon import metric_host, system_metric_keys
from ..cloudwatch.statistics import concat_columns
from ..store import Store, profiles
from .analysis import Columns, profile_unit

PROFILE, CLOUDWATCH = "profile", "cloudwatch"
READERS = 4  # threads reading profile files at once


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


def read_profile(location: str, job: str) -> tuple[dict[str, HostReadings], list[str]]:
    """Every host's profile, per metric in time order (empty when none was written yet), and the
    files that could not be read (left out: one damaged file must not hide the rest). Files are
    read on a few threads at once (pyarrow decodes without the GIL), in their order."""
    fs, root = profiles._filesystem(location)  # the one resolution of a location (own bucket, fsspec URL)
    names = sorted(fs.glob(f"{root.rstrip('/')}/{job}/*/*.parquet"))
    parts: dict[str, dict[str, list[Columns]]] = {}
    unreadable: list[str] = []
    with ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="trainmon-report") as pool:
        for name, table in zip(names, pool.map(lambda name: _read_file(fs, name), names), strict=True):
            if table is None:
                unreadable.append(name)
                continue
            per_metric = parts.setdefault(name.rsplit("/", 2)[-2], {})
            for metric, columns in _split(table).items():
                per_metric.setdefault(metric, []).append(columns)
    found: dict[str, HostReadings] = {}
    for host, per_metric in parts.items():
        readings = found[host] = HostReadings(host, PROFILE)
        for metric, pieces in per_metric.items():
            readings.metrics[metric] = _joined(pieces)
            readings.units[metric] = profile_unit(metric)
    return found, unreadable


def _read_file(fs: Any, name: str) -> Any:
    """A profile file as a table, its metric names as the file's dictionary (no hashing); None when
    it cannot be read."""
    import pyarrow.parquet as pq

    try:
        with fs.open(name, "rb") as handle:
            return pq.ParquetFile(handle, read_dictionary=["metric"]).read()
    except Exception:  # pyarrow and fsspec raise many kinds for a damaged or vanished file
        return None


def _split(table: Any) -> dict[str, Columns]:
    """A profile file's rows, per metric: slices where the file is sorted by metric (as written)."""
    import pyarrow as pa

    stamps = table.column("timestamp_ms").to_numpy().astype(np.int64, copy=False)
    values = table.column("value").to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    metric = table.column("metric").combine_chunks()
    if not pa.types.is_dictionary(metric.type):
        metric = metric.dictionary_encode()
    codes = metric.indices.to_numpy(zero_copy_only=False)
    names = metric.dictionary.to_pylist()
    if len(codes) > 1 and not bool((codes[1:] >= codes[:-1]).all()):
        order = np.argsort(codes, kind="stable")
        codes, stamps, values = codes[order], stamps[order], values[order]
    bounds = np.searchsorted(codes, np.arange(len(names) + 1)).tolist()  # each name's slice of the sorted codes
    return {str(names[code]): (stamps[bounds[code]:bounds[code + 1]], values[bounds[code]:bounds[code + 1]])
            for code in range(len(names)) if bounds[code + 1] > bounds[code]}


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
        by_unit = store.metric_columns(key, 0, 2**62)
        if not by_unit:
            continue
        columns = concat_columns(list(by_unit.values()))
        host = metric_host(key)
        readings = found.setdefault(host, HostReadings(host, CLOUDWATCH))
        with np.errstate(invalid="ignore", divide="ignore"):
            readings.metrics[key.name] = (columns.timestamp_ms.astype(np.int64),
                                          columns.total / columns.sample_count)
        readings.units[key.name] = next(iter(by_unit))
    return found
