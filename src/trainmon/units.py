"""CloudWatch units as people read them, shared by the CLI's tables and the profiling report (pure)."""

from __future__ import annotations

_BINARY = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))

SYSTEM_UNITS = {  # the system metrics a job's hosts are sampled for, and their CloudWatch units
    "CPUUtilization": "Percent", "MemoryUtilization": "Percent", "HostCPUUtilization": "Percent",
    "HostMemoryUtilization": "Percent", "ProcessCount": "Count", "ThreadCount": "Count", "ResidentMemory": "Bytes",
    "ProcessReadThroughput": "Bytes/Second", "ProcessWriteThroughput": "Bytes/Second", "DiskUtilization": "Percent",
    "GPUUtilization": "Percent", "GPUMemoryUtilization": "Percent",
}


def byte_text(value: float, unit: str) -> str:
    """A finite value of ``Bytes`` or ``Bytes/Second`` in binary multiples: ``1.5 GiB``, ``3.2 MiB/s``."""
    suffix = "/s" if unit == "Bytes/Second" else ""
    for name, size in _BINARY:
        if abs(value) >= size:
            return f"{value / size:.3g} {name}{suffix}"
    return f"{value:.4g} B{suffix}"


def profile_unit(metric: str) -> str | None:
    """The unit of a profiler metric, from its name (``job_resident_bytes``, ``cpu0_utilization_pct``);
    None for a count."""
    if metric.endswith("_bytes_per_s"):
        return "Bytes/Second"
    if metric.endswith("_bytes"):
        return "Bytes"
    if metric.endswith("_pct"):
        return "Percent"
    return None
