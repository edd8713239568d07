"""Profiler data: one row per (host, metric, time), written as Parquet while the job runs, kept forever.

Files rotate every minute (a file is whole once closed, so a crash loses at most the open
minute) under ``<location>/<job>/<host>/<epoch seconds>.parquet``. The location is a local
directory (default ``<home>/profiles``) or any URL fsspec can write (``s3://...`` with s3fs).
Columns are sorted by host, metric and time and encoded for size: timestamps delta-encoded,
metric names dictionary-encoded, values plain, all zstd-compressed.
"""

from __future__ import annotations

import importlib.util
import io
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .. import config
from ..clock import REAL_CLOCK, Clock
from ..errors import ValidationException

ROTATE_S = 60.0
ALLOWED_INTERVALS_MS = (100, 200, 500, 1000, 5000, 60000)
DEFAULT_INTERVAL_MS = 500


def check_interval(interval_ms: Any) -> int:
    if interval_ms not in ALLOWED_INTERVALS_MS or isinstance(interval_ms, bool):
        raise ValidationException(
            f"ProfilingIntervalInMilliseconds {interval_ms!r} is not allowed: use one of "
            f"{', '.join(map(str, ALLOWED_INTERVALS_MS))} (default {DEFAULT_INTERVAL_MS})."
        )
    return int(interval_ms)


def available() -> bool:
    """Whether the profiler's packages are installed: looked up, not imported (pyarrow takes a few
    tenths of a second to import, which a job's start should not wait for; the profile writer
    imports it on its own thread)."""
    return all(importlib.util.find_spec(name) is not None for name in ("fsspec", "pyarrow"))


def default_location() -> str:
    return str(config.home() / "profiles")


def _filesystem(location: str) -> tuple[Any, str]:
    import fsspec

    if "://" not in location:
        return fsspec.filesystem("file"), str(Path(location).expanduser().resolve())
    local = in_own_bucket(location)
    if local is not None:
        return fsspec.filesystem("file"), str(local)
    fs, path = fsspec.core.url_to_fs(location)
    return fs, path


def in_own_bucket(location: str, home: Path | None = None) -> Path | None:
    """Where ``s3://bucket/prefix`` lies when the bucket is one of trainmon's own S3 subset (what a
    job created through the AWS endpoint names), in data directory ``home`` (default: TRAINMON_HOME);
    None for any other location, which fsspec reaches."""
    if not location.startswith("s3://"):
        return None
    from . import objects

    try:
        bucket, key = objects.parse_uri(location)
        store = objects.ObjectStore(home)
        store.head_bucket(bucket)
    except (objects.S3Error, ValidationException):
        return None
    return store.root / bucket / key.strip("/")


def check_location(location: str) -> None:
    """Fail before the job starts when the profile location cannot be written."""
    if importlib.util.find_spec("pyarrow") is None:
        raise ValidationException(
            "profiling needs pyarrow: pip install 'trainmon[profiler]', or disable the profiler "
            "(--disable-profiler / ProfilerConfig.DisableProfiler)."
        )
    try:
        fs, path = _filesystem(location)
        fs.makedirs(path, exist_ok=True)
        probe = f"{path.rstrip('/')}/.trainmon-write-test-{os.urandom(16).hex()}"
        with fs.open(probe, "wb") as handle:
            handle.write(b"ok")
        fs.rm(probe)
    except ImportError as exc:
        raise ValidationException(f"profile location {location!r} needs a package that is missing: {exc}.") from None
    except Exception as exc:  # fsspec raises many kinds; all mean "cannot write there"
        raise ValidationException(f"profile location {location!r} cannot be written: {exc}.") from None


class ProfileWriter:
    """Buffers the monitor's rows and writes a file per host every ``rotate_s`` seconds.

    ``add`` only keeps the row (one append); when a file is due, the rows are turned into
    columns sorted by metric and time, and written, on a background thread, so that the
    monitor is never held up by it. Failures (a full disk, a vanished bucket) are kept in
    ``failed`` and never raised. Files rotate on ``clock``'s monotonic time.
    """

    def __init__(self, location: str, job: str, rotate_s: float = ROTATE_S, *, clock: Clock = REAL_CLOCK) -> None:
        self.location = location
        self.job = job
        self.rotate_s = rotate_s
        self.clock = clock
        self.failed: Exception | None = None
        self.samples_written = 0
        self._rows: dict[str, list[tuple[int, dict[str, float]]]] = {}
        self._due = clock.monotonic() + rotate_s
        from concurrent.futures import ThreadPoolExecutor  # not at import: every command imports this module

        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"trainmon-profile-{job}")

    def add(self, host: str, timestamp_ms: int, values: dict[str, float]) -> None:
        """A row of ``host`` at ``timestamp_ms`` (rows arrive in time order); the writer keeps ``values``."""
        rows = self._rows.get(host)
        if rows is None:
            rows = self._rows[host] = []
        rows.append((timestamp_ms, values))
        if self.clock.monotonic() >= self._due:
            self.flush()

    def flush(self) -> None:
        rows, self._rows, self._due = self._rows, {}, self.clock.monotonic() + self.rotate_s
        if rows and self.failed is None:
            self._writer.submit(self.write_all, rows)

    def close(self) -> None:
        self.flush()
        self._writer.shutdown(wait=True)

    def write_all(self, rows: dict[str, list[tuple[int, dict[str, float]]]]) -> None:
        try:
            fs, root = _filesystem(self.location)
            for host, host_rows in rows.items():
                self._write(fs, f"{root.rstrip('/')}/{self.job}/{host}", _columns(host_rows))
        except Exception as exc:  # a full disk or a vanished bucket must not stop the job
            self.failed = exc

    def _write(self, fs: Any, directory: str, metrics: dict[str, tuple[list[int], list[float]]]) -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        names = sorted(metrics)
        stamps = [stamp for name in names for stamp in metrics[name][0]]
        if not stamps:
            return
        encoded = [name.encode("utf-8") for name in names]
        ends = np.cumsum([0, *map(len, encoded)], dtype=np.int32)
        table = pa.table({
            "timestamp_ms": _arrow(pa.int64(), len(stamps), np.array(stamps, np.int64)),
            "metric": pa.DictionaryArray.from_arrays(
                _arrow(pa.int32(), len(stamps), np.repeat(np.arange(len(names), dtype=np.int32),
                                                          [len(metrics[name][0]) for name in names])),
                _arrow(pa.string(), len(names), ends, b"".join(encoded))),
            "value": _arrow(pa.float64(), len(stamps),
                            np.array([value for name in names for value in metrics[name][1]], np.float64)),
        })
        buffer = io.BytesIO()
        pq.write_table(
            table, buffer, compression="zstd", compression_level=9, use_dictionary=["metric"],
            column_encoding={"timestamp_ms": "DELTA_BINARY_PACKED", "value": "PLAIN"},
            write_statistics=False, store_schema=False,
        )
        fs.makedirs(directory, exist_ok=True)
        name = f"{directory}/{min(stamps) // 1000}-{os.urandom(4).hex()}.parquet"
        with fs.open(name + ".part", "wb") as handle:
            handle.write(buffer.getvalue())
        fs.mv(name + ".part", name)
        self.samples_written += len(stamps)


def _arrow(kind: Any, length: int, *buffers: Any) -> Any:
    """An Arrow column of ``kind`` from its buffers (NumPy arrays or bytes; no validity bitmap), built
    without ``pyarrow.array``, which imports pandas (a quarter of a second of a job's supervisor) to
    ask whether the values are one of its objects."""
    import pyarrow as pa

    return pa.Array.from_buffers(kind, length, [None, *map(pa.py_buffer, buffers)])


def numpy_of(column: Any, dtype: Any) -> Any:
    """An Arrow array's or chunked array's values as a NumPy array of ``dtype``, viewed from their
    buffers where no value is null: Arrow's own ``to_numpy`` imports pandas (a quarter of a second)
    to ask about its types, in a job's supervisor reading its profile for the report."""
    import numpy as np

    chunks = getattr(column, "chunks", [column])
    if any(chunk.null_count for chunk in chunks):
        return column.to_numpy(zero_copy_only=False).astype(dtype)
    parts = [np.frombuffer(chunk.buffers()[1], chunk.type.to_pandas_dtype())[chunk.offset:chunk.offset + len(chunk)]
             for chunk in chunks]
    joined = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.empty(0, dtype)
    return joined.astype(dtype, copy=False)


def by_metric(table: Any) -> dict[str, tuple[Any, Any]]:
    """A profile file's rows (its columns ``timestamp_ms``, ``metric``, ``value``), per metric:
    (epoch ms as int64, values as float64), slices where the file is sorted by metric (as written)."""
    import numpy as np
    import pyarrow as pa

    stamps = numpy_of(table.column("timestamp_ms"), np.int64)
    values = numpy_of(table.column("value"), np.float64)
    metric = table.column("metric").combine_chunks()
    if not pa.types.is_dictionary(metric.type):
        metric = metric.dictionary_encode()
    codes = numpy_of(metric.indices, np.int64)
    names = metric.dictionary.to_pylist()
    if len(codes) > 1 and not bool((codes[1:] >= codes[:-1]).all()):
        order = np.argsort(codes, kind="stable")
        codes, stamps, values = codes[order], stamps[order], values[order]
    bounds = np.searchsorted(codes, np.arange(len(names) + 1)).tolist()  # each name's slice of the sorted codes
    return {str(names[code]): (stamps[bounds[code]:bounds[code + 1]], values[bounds[code]:bounds[code + 1]])
            for code in range(len(names)) if bounds[code + 1] > bounds[code]}


def _columns(rows: list[tuple[int, dict[str, float]]]) -> dict[str, tuple[list[int], list[float]]]:
    """metric -> (timestamps, values), in the rows' (time) order; a row may lack some metrics."""
    names: set[str] = set()
    for _, row in rows:
        names.update(row)
    columns = {}
    for name in names:
        stamps = [stamp for stamp, row in rows if name in row]
        columns[name] = (stamps, [row[name] for _, row in rows if name in row])
    return columns


class Profile:
    """A job's profiler data: ``trainmon.profile(job).dataframe()``."""

    def __init__(self, job: str, location: str | None = None) -> None:
        self.job = job
        self.location = location or default_location()

    def files(self) -> list[str]:
        fs, root = _filesystem(self.location)
        return sorted(fs.glob(f"{root.rstrip('/')}/{self.job}/*/*.parquet"))

    def dataframe(self) -> Any:
        """Columns ``timestamp`` (UTC), ``host``, ``metric``, ``value``, in time order."""
        import pandas as pd
        import pyarrow as pa
        import pyarrow.parquet as pq

        fs, _ = _filesystem(self.location)
        tables = []
        for name in self.files():
            with fs.open(name, "rb") as handle:
                table = pq.read_table(handle)
            host = name.rsplit("/", 2)[-2]
            table = table.append_column("host", pa.array([host] * table.num_rows, pa.string()))
            tables.append(table.cast(pa.schema([("timestamp_ms", pa.int64()), ("metric", pa.string()),
                                                ("value", pa.float64()), ("host", pa.string())])))
        if not tables:
            return pd.DataFrame({"timestamp": pd.Series(dtype="datetime64[ms, UTC]"), "host": [], "metric": [],
                                 "value": pd.Series(dtype="float64")})
        frame = pa.concat_tables(tables).to_pandas()
        frame["timestamp"] = pd.to_datetime(frame.pop("timestamp_ms"), unit="ms", utc=True)
        frame = frame[["timestamp", "host", "metric", "value"]]
        return frame.sort_values(["timestamp", "host", "metric"], kind="stable").reset_index(drop=True)

    def columns(self, host: str, metric: str) -> tuple[Any, Any]:
        """One host's metric at full resolution: (timestamps in epoch ms, values), in time order."""
        import numpy as np
        import pyarrow.parquet as pq

        fs, _ = _filesystem(self.location)
        stamps, values = [], []
        for name in self.files():
            if name.rsplit("/", 2)[-2] != host:
                continue
            with fs.open(name, "rb") as handle:  # (read whole, then split: no dataset scan, no pandas)
                found = by_metric(pq.ParquetFile(handle, read_dictionary=["metric"]).read()).get(metric)
            if found is not None:
                stamps.append(found[0])
                values.append(found[1])
        if not stamps:
            return np.empty(0, np.int64), np.empty(0, np.float64)
        joined, order = np.concatenate(stamps), None
        if len(joined) > 1 and not bool((joined[1:] >= joined[:-1]).all()):
            order = np.argsort(joined, kind="stable")
        merged = np.concatenate(values)
        return (joined, merged) if order is None else (joined[order], merged[order])

    def summary(self) -> list[dict[str, Any]]:
        """Per host and metric: samples, min, p50, p95, p99, max (NaN left out; percentiles
        interpolated linearly between the closest ranks, as numpy's)."""
        frame = self.dataframe().dropna(subset=["value"])
        if frame.empty:
            return []
        values = frame.groupby(["host", "metric"], sort=True)["value"]
        table = values.agg(["size", "min", "max"])
        table[["p50", "p95", "p99"]] = values.quantile([0.5, 0.95, 0.99]).unstack().to_numpy()
        return [{"host": host, "metric": metric, "samples": int(row["size"]),
                 **{column: float(row[column]) for column in ("min", "p50", "p95", "p99", "max")}}
                for (host, metric), row in table.iterrows()]


def profile(job: str, location: str | None = None) -> Profile:
    return Profile(job, location)


def stored_bytes(files: Iterable[str], location: str) -> int:
    fs, _ = _filesystem(location)
    return sum(int(fs.size(name)) for name in files)
