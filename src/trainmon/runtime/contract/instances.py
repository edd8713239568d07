"""What a host of each SageMaker instance type asks of a Ray node: its vCPUs and GPUs.

A Ray job places each host on a node with these resources free (``ResourceConfig.InstanceType``),
unless the request names them itself (``TrainmonConfig.HostResources``). The figures are the
instance types' published vCPU and accelerator counts; ``local`` (trainmon's default type) asks
for one CPU. A type not listed here needs HostResources.
"""

from __future__ import annotations

# type: (vCPUs, GPUs)
INSTANCE_TYPES: dict[str, tuple[int, int]] = {
    "local": (1, 0),
    "ml.t3.medium": (2, 0), "ml.t3.large": (2, 0), "ml.t3.xlarge": (4, 0), "ml.t3.2xlarge": (8, 0),
    "ml.m5.large": (2, 0), "ml.m5.xlarge": (4, 0), "ml.m5.2xlarge": (8, 0), "ml.m5.4xlarge": (16, 0),
    "ml.m5.12xlarge": (48, 0), "ml.m5.24xlarge": (96, 0),
    "ml.m6i.large": (2, 0), "ml.m6i.xlarge": (4, 0), "ml.m6i.2xlarge": (8, 0), "ml.m6i.4xlarge": (16, 0),
    "ml.m6i.8xlarge": (32, 0), "ml.m6i.16xlarge": (64, 0), "ml.m6i.32xlarge": (128, 0),
    "ml.c5.large": (2, 0), "ml.c5.xlarge": (4, 0), "ml.c5.2xlarge": (8, 0), "ml.c5.4xlarge": (16, 0),
    "ml.c5.9xlarge": (36, 0), "ml.c5.18xlarge": (72, 0),
    "ml.r5.large": (2, 0), "ml.r5.xlarge": (4, 0), "ml.r5.2xlarge": (8, 0), "ml.r5.4xlarge": (16, 0),
    "ml.r5.12xlarge": (48, 0), "ml.r5.24xlarge": (96, 0),
    "ml.p3.2xlarge": (8, 1), "ml.p3.8xlarge": (32, 4), "ml.p3.16xlarge": (64, 8), "ml.p3dn.24xlarge": (96, 8),
    "ml.p4d.24xlarge": (96, 8), "ml.p4de.24xlarge": (96, 8), "ml.p5.48xlarge": (192, 8),
    "ml.g4dn.xlarge": (4, 1), "ml.g4dn.2xlarge": (8, 1), "ml.g4dn.4xlarge": (16, 1), "ml.g4dn.8xlarge": (32, 1),
    "ml.g4dn.12xlarge": (48, 4), "ml.g4dn.16xlarge": (64, 1),
    "ml.g5.xlarge": (4, 1), "ml.g5.2xlarge": (8, 1), "ml.g5.4xlarge": (16, 1), "ml.g5.8xlarge": (32, 1),
    "ml.g5.12xlarge": (48, 4), "ml.g5.16xlarge": (64, 1), "ml.g5.24xlarge": (96, 4), "ml.g5.48xlarge": (192, 8),
    "ml.g6.xlarge": (4, 1), "ml.g6.2xlarge": (8, 1), "ml.g6.12xlarge": (48, 4), "ml.g6.48xlarge": (192, 8),
}


def host_resources(instance_type: str) -> dict[str, float] | None:
    """The Ray resources one host of ``instance_type`` takes; None for a type not in the table."""
    known = INSTANCE_TYPES.get(instance_type)
    if known is None:
        return None
    cpus, gpus = known
    return {"CPU": float(cpus), **({"GPU": float(gpus)} if gpus else {})}
