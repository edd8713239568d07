"""Where a host's tensor hook writes, under the container contract.

The training script records tensors with :mod:`trainmon.debug`, inside the job's processes; the
supervisor is outside. :func:`prepare_host` (called by the container contract for every host)
makes the host's tensor directory, ``<job dir>/algo-N/output/tensors`` (SageMaker's
``/opt/ml/output/tensors``), names it in ``TRAINMON_TENSOR_DIR``, and writes the job's
``DebugHookConfig`` to ``input/config/debughookconfig.json``, where SageMaker puts it.

The files are read by :mod:`trainmon.runtime.watch.tensorfeed`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...config import job_dir
from ...debug import records

HOW_TO_RECORD = ("record them with trainmon.debug in the training script (Hook, or "
                 "trainmon.debug.torch.TorchHook for PyTorch; see docs/rules.md#tensor-rules-and-the-hook)")


def tensor_dir(host_root: Path) -> Path:
    return host_root / "output" / "tensors"


def tensor_file(home: Path, job: str, host: str) -> Path:
    """Where host ``host`` of job ``job`` writes its tensors, in data directory ``home``."""
    return tensor_dir(job_dir(home, job) / host) / records.file_name(host)


def prepare_host(host_root: Path, config_dir: Path, hook_config: Mapping[str, Any] | None,
                 seen: Callable[[Path], str] = str) -> dict[str, str]:
    """A host's tensor directory and hook configuration, made; the environment that names them, as
    the job sees it (``seen``: a container's path for a path of this machine)."""
    directory = tensor_dir(host_root)
    directory.mkdir(parents=True, exist_ok=True)
    written = {**(hook_config or {}), "LocalPath": seen(directory)}
    temporary = config_dir / (records.CONFIG_FILE + ".tmp")
    temporary.write_text(json.dumps(written, indent=2), encoding="utf-8")
    temporary.replace(config_dir / records.CONFIG_FILE)
    return {records.ENV_TENSOR_DIR: seen(directory)}


def copy_file(home: Path, job: str, host: str) -> Path:
    """Where the supervisor of a Ray job keeps its copy of host ``host``'s tensor file: apart from
    the hosts' own directories, since a host may run on the supervisor's machine too."""
    return job_dir(home, job) / "tensor-copies" / records.file_name(host)
