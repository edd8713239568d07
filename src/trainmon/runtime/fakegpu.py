"""GPUs that a file describes, for tests and demos on hosts without GPUs: never for real measurements.

``TRAINMON_FAKE_GPUS=<path of a JSON file>`` in a job's environment (the shell's, or ``trainmon run
--environment``) makes :func:`trainmon.runtime.sampler.default_gpu_source` read the job's GPUs from
that file instead of NVML. The file holds a list with one object per GPU::

    [{"index": 0, "utilization_pct": 5, "memory_used_pct": 12.5},
     {"index": 1, "utilization_pct": 95, "memory_used_pct": 60, "process_memory_bytes": {"1234": 1073741824}}]

(``index`` defaults to the position in the list, ``memory_used_pct`` to 0). Whoever wants the
GPUs to show other readings, the test or the training script itself, rewrites the file; write a
temporary file and rename it over the old one, so that a reading never sees half a file. The file
is read again when its modification time or size changes; a file that is missing shows no GPU
(no GPU metrics at all, never zeros), and one that cannot be parsed keeps the last readings.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from .sampler import GpuReading

ENVIRONMENT_VARIABLE = "TRAINMON_FAKE_GPUS"


class FakeGpuSource:
    """A :class:`~trainmon.runtime.sampler.GpuSource` whose readings are the contents of a JSON file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._seen: tuple[int, int] | None = None  # (mtime_ns, size) of the file last read
        self._readings: list[GpuReading] = []

    def read(self) -> list[GpuReading]:
        try:
            stat = os.stat(self.path)
        except OSError:
            self._seen, self._readings = None, []
            return []
        seen = (stat.st_mtime_ns, stat.st_size)
        if seen != self._seen:
            try:
                self._readings = parse(json.loads(self.path.read_bytes()))
                self._seen = seen
            except Exception:  # half written, or not as documented: the last readings stand, and it is read again
                pass
        return list(self._readings)

    def close(self) -> None:
        pass


def parse(data: Any) -> list[GpuReading]:
    """GPU readings from the file's JSON (ValueError when it is not a list of GPUs as documented)."""
    if not isinstance(data, list):
        raise ValueError("a list of GPUs")
    readings = []
    for position, gpu in enumerate(data):
        if not isinstance(gpu, dict):
            raise ValueError("each GPU an object")
        utilization = _percent(gpu.get("utilization_pct"))
        memory = _percent(gpu.get("memory_used_pct", 0.0))
        per_process = {int(pid): int(used) for pid, used in (gpu.get("process_memory_bytes") or {}).items()}
        readings.append(GpuReading(int(gpu.get("index", position)), utilization, memory, per_process))
    return readings


def _percent(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError("a percentage")
    return min(100.0, max(0.0, float(value)))
