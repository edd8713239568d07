"""What a host of each SageMaker instance type has: its vCPUs, GPUs and memory.

A Ray job places each host on a node with these resources free (``ResourceConfig.InstanceType``),
unless the request names them itself (``TrainmonConfig.HostResources``); a host run as a container
gets the type's CPUs and memory as its limits (:func:`container_limits`). The figures are the
instance types' published vCPU and accelerator counts and memory; ``local`` (trainmon's default
type) asks for one CPU, and limits nothing. A type not listed here needs HostResources.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# type: (vCPUs, GPUs, memory GiB)
INSTANCE_TYPES: dict[str, tuple[int, int, int]] = {
    "local": (1, 0, 0),
    "ml.t3.medium": (2, 0, 4), "ml.t3.large": (2, 0, 8), "ml.t3.xlarge": (4, 0, 16), "ml.t3.2xlarge": (8, 0, 32),
    "ml.m5.large": (2, 0, 8), "ml.m5.xlarge": (4, 0, 16), "ml.m5.2xlarge": (8, 0, 32), "ml.m5.4xlarge": (16, 0, 64),
    "ml.m5.12xlarge": (48, 0, 192), "ml.m5.24xlarge": (96, 0, 384),
    "ml.m6i.large": (2, 0, 8), "ml.m6i.xlarge": (4, 0, 16), "ml.m6i.2xlarge": (8, 0, 32), "ml.m6i.4xlarge": (16, 0, 64),
    "ml.m6i.8xlarge": (32, 0, 128), "ml.m6i.16xlarge": (64, 0, 256), "ml.m6i.32xlarge": (128, 0, 512),
    "ml.c5.large": (2, 0, 4), "ml.c5.xlarge": (4, 0, 8), "ml.c5.2xlarge": (8, 0, 16), "ml.c5.4xlarge": (16, 0, 32),
    "ml.c5.9xlarge": (36, 0, 72), "ml.c5.18xlarge": (72, 0, 144),
    "ml.r5.large": (2, 0, 16), "ml.r5.xlarge": (4, 0, 32), "ml.r5.2xlarge": (8, 0, 64), "ml.r5.4xlarge": (16, 0, 128),
    "ml.r5.12xlarge": (48, 0, 384), "ml.r5.24xlarge": (96, 0, 768),
    "ml.p3.2xlarge": (8, 1, 61), "ml.p3.8xlarge": (32, 4, 244), "ml.p3.16xlarge": (64, 8, 488), "ml.p3dn.24xlarge": (96, 8, 768),
    "ml.p4d.24xlarge": (96, 8, 1152), "ml.p4de.24xlarge": (96, 8, 1152), "ml.p5.48xlarge": (192, 8, 2048),
    "ml.g4dn.xlarge": (4, 1, 16), "ml.g4dn.2xlarge": (8, 1, 32), "ml.g4dn.4xlarge": (16, 1, 64), "ml.g4dn.8xlarge": (32, 1, 128),
    "ml.g4dn.12xlarge": (48, 4, 192), "ml.g4dn.16xlarge": (64, 1, 256),
    "ml.g5.xlarge": (4, 1, 16), "ml.g5.2xlarge": (8, 1, 32), "ml.g5.4xlarge": (16, 1, 64), "ml.g5.8xlarge": (32, 1, 128),
    "ml.g5.12xlarge": (48, 4, 192), "ml.g5.16xlarge": (64, 1, 256), "ml.g5.24xlarge": (96, 4, 384), "ml.g5.48xlarge": (192, 8, 768),
    "ml.g6.xlarge": (4, 1, 16), "ml.g6.2xlarge": (8, 1, 32), "ml.g6.12xlarge": (48, 4, 192), "ml.g6.48xlarge": (192, 8, 768),
}


def host_resources(instance_type: str) -> dict[str, float] | None:
    """The Ray resources one host of ``instance_type`` takes; None for a type not in the table."""
    known = INSTANCE_TYPES.get(instance_type)
    if known is None:
        return None
    cpus, gpus, _ = known
    return {"CPU": float(cpus), **({"GPU": float(gpus)} if gpus else {})}


@dataclass(frozen=True)
class Limits:
    cpus: int
    memory_bytes: int


def container_limits(instance_type: str, machine_cpus: int, machine_memory_bytes: int) -> Limits | None:
    """What a container of a host of ``instance_type`` may use on this machine: the type's vCPUs and
    memory, at most the machine's; None for ``local`` and types not in the table (no limits)."""
    known = INSTANCE_TYPES.get(instance_type)
    if known is None or instance_type == "local":
        return None
    cpus, _, memory_gib = known
    return Limits(min(cpus, machine_cpus), min(memory_gib << 30, machine_memory_bytes))


def instance_gpus(instance_type: str) -> int:
    """How many GPUs a host of ``instance_type`` has (0 for ``local`` and types not in the table)."""
    known = INSTANCE_TYPES.get(instance_type)
    return known[1] if known is not None else 0


def host_gpus(instance_type: str, host_index: int, machine: Sequence[str]) -> list[str]:
    """The GPUs (the machine's ids) a container host of ``instance_type`` gets: as many as the type
    has, taken in turn by the hosts, so that hosts share GPUs only when the machine has too few for
    all of them; every GPU of the machine for ``local`` and types not in the table (as a process sees
    them all)."""
    known = INSTANCE_TYPES.get(instance_type)
    if known is None or instance_type == "local":
        return list(machine)
    count = min(known[1], len(machine))
    return [machine[(host_index * count + offset) % len(machine)] for offset in range(count)]
