"""A host's GPUs, as the sampler reads them: through NVML where the machine has GPUs
(:class:`NvmlSource`, only those ``CUDA_VISIBLE_DEVICES`` leaves the job), none otherwise
(:class:`NoGpu`), or from a file for tests and demos (:class:`FakeGpuSource`; never for real
measurements).

``TRAINMON_FAKE_GPUS=<path of a JSON file>`` in a job's environment (the shell's, or ``trainmon run
--environment``) makes :func:`default_gpu_source` read the job's GPUs from
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class GpuReading:
    index: int
    utilization_pct: float
    memory_used_pct: float
    process_memory_bytes: dict[int, int] = field(default_factory=dict)  # pid -> bytes, where the driver says


class GpuSource(Protocol):
    def read(self) -> list[GpuReading]: ...

    def close(self) -> None: ...


class NoGpu:
    def read(self) -> list[GpuReading]:
        return []

    def close(self) -> None:
        pass


class NvmlSource:
    """NVIDIA's NVML (``nvidia-ml-py``); only the GPUs in ``visible`` (CUDA_VISIBLE_DEVICES)."""

    def __init__(self, visible: Sequence[int] | None = None) -> None:
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        indexes = [i for i in range(count) if visible is None or i in visible]
        self._handles = [(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in indexes]

    def read(self) -> list[GpuReading]:
        nvml = self._nvml
        readings = []
        for index, handle in self._handles:
            rates = nvml.nvmlDeviceGetUtilizationRates(handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            per_process: dict[int, int] = {}
            try:
                for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if proc.usedGpuMemory is not None:
                        per_process[int(proc.pid)] = int(proc.usedGpuMemory)
            except nvml.NVMLError:
                pass
            readings.append(GpuReading(index, float(rates.gpu), 100.0 * memory.used / memory.total, per_process))
        return readings

    def close(self) -> None:
        self._nvml.nvmlShutdown()


def visible_gpus(environ: dict[str, str] | None = None) -> list[int] | None:
    """The GPU indexes CUDA_VISIBLE_DEVICES allows (None: all). UUIDs are not resolved here."""
    value = (environ if environ is not None else os.environ).get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return [int(part) for part in value.split(",") if part.strip().isdigit()]


def default_gpu_source(environ: dict[str, str] | None = None) -> GpuSource:
    """NVML when the library and a driver are there; otherwise no GPU metrics at all (never zeros).
    ``TRAINMON_FAKE_GPUS`` names a file of readings to show instead, for tests and demos
    (this module's docstring)."""
    fake = (environ if environ is not None else os.environ).get("TRAINMON_FAKE_GPUS")
    if fake:
        from .gpu import FakeGpuSource

        return FakeGpuSource(fake)
    try:
        return NvmlSource(visible_gpus(environ))
    except Exception:
        return NoGpu()


ENVIRONMENT_VARIABLE = "TRAINMON_FAKE_GPUS"


class FakeGpuSource:
    """A :class:`~trainmon.runtime.watch.gpu.GpuSource` whose readings are the contents of a JSON file."""

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
