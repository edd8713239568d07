"""Script mode: what the SageMaker training toolkit does inside a framework container.

The SageMaker Python SDK's framework estimators (``PyTorch``, ``TensorFlow``, ``HuggingFace``,
``SKLearn``, ...) send a framework image and hyperparameters that say what to run:
``sagemaker_program`` (the entry point) and ``sagemaker_submit_directory`` (the uploaded
``sourcedir.tar.gz``), JSON-encoded like every value they send. In the image, the training
toolkit unpacks the source into ``/opt/ml/code`` and runs ``python <program> --name value ...``
there, the user's hyperparameters (not the ``sagemaker_*`` ones) decoded from JSON and turned into
arguments by :func:`to_cmd_args`. trainmon does the same with a local interpreter: no image is
pulled, and each host's ``code/`` directory plays ``/opt/ml/code``.
"""

from __future__ import annotations

import json
import posixpath
import re
import shutil
import tarfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

PROGRAM = "sagemaker_program"
SUBMIT_DIRECTORY = "sagemaker_submit_directory"
LOG_LEVEL = "sagemaker_container_log_level"
REGION = "sagemaker_region"
JOB_NAME = "sagemaker_job_name"
PREFIX = "sagemaker_"
TOOLKIT_HYPERPARAMETERS = frozenset({  # the toolkit's own: neither the user's nor framework parameters
    PROGRAM, SUBMIT_DIRECTORY, "sagemaker_enable_cloudwatch_metrics", REGION, LOG_LEVEL, JOB_NAME,
    "default_user_module_name", "_tuning_objective_metric", "sagemaker_s3_output",
})
REQUIREMENTS = "requirements.txt"

# The repositories of SageMaker's framework images for training, as the SDK's image_uris.retrieve names them.
FRAMEWORK_REPOSITORIES = frozenset({
    "pytorch-training", "tensorflow-training", "mxnet-training", "pytorch-training-neuronx",
    "huggingface-pytorch-training", "huggingface-tensorflow-training", "huggingface-pytorch-training-neuronx",
    "huggingface-pytorch-trcomp-training", "huggingface-tensorflow-trcomp-training", "autogluon-training",
    "sagemaker-scikit-learn", "sagemaker-xgboost", "sagemaker-chainer", "sagemaker-base-python",
    "sagemaker-distribution-prod",
})
# An image in Amazon ECR, as the SDK's image_uris.retrieve gives them: the framework images
# (763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.1.0-cpu-py310, .../sagemaker-scikit-learn:1.2-1)
# in every partition (amazonaws.com, amazonaws.com.cn, ...) and FIPS endpoints.
_ECR_IMAGE = re.compile(
    r"\d{12}\.dkr\.ecr(-fips)?\.[a-z0-9-]+\.[a-z0-9.-]+/[a-z0-9][a-z0-9._/-]*(:[\w][\w.-]{0,127}|@sha256:[0-9a-f]{64})?")


class SourceError(Exception):
    """The submitted source cannot become the code directory; the message says why."""


class MissingProgram(SourceError):
    """The submitted source does not hold the entry point."""


def is_framework_image(image: str) -> bool:
    """Whether an image is one of SageMaker's framework images for training (an image in Amazon ECR
    whose repository is one of :data:`FRAMEWORK_REPOSITORIES`), whose work a local Python can do when
    the image is not here. An image of one's own, whatever its name, is not."""
    if not is_ecr_image(image):
        return False
    return image.split("/", 1)[1].split("@")[0].split(":")[0] in FRAMEWORK_REPOSITORIES


def is_ecr_image(image: str) -> bool:
    """Whether a TrainingImage names a container image in Amazon ECR (framework images among them)."""
    return _ECR_IMAGE.fullmatch(image.strip()) is not None


def decode(text: str) -> Any:
    """A hyperparameter as the toolkit reads it: decoded when it is JSON, else the string itself."""
    try:
        return json.loads(text)
    except (ValueError, TypeError):
        return text


@dataclass(frozen=True)
class Hyperparameters:
    """A job's hyperparameters split as the toolkit splits them, each value decoded."""

    user: dict[str, Any]  # the entry point's arguments, SM_HPS and SM_HP_*
    sagemaker: dict[str, Any]  # sagemaker_* and the toolkit's own

    @property
    def framework(self) -> dict[str, Any]:
        """The ``sagemaker_*`` ones that are not the toolkit's (``sagemaker_distributed_dataparallel_enabled``, ...)."""
        return {key: value for key, value in self.sagemaker.items() if key not in TOOLKIT_HYPERPARAMETERS}


def split(hyperparameters: Mapping[str, str]) -> Hyperparameters:
    decoded = {key: decode(value) for key, value in hyperparameters.items()}
    ours = {key for key in decoded if key in TOOLKIT_HYPERPARAMETERS or key.startswith(PREFIX)}
    return Hyperparameters({k: v for k, v in decoded.items() if k not in ours},
                           {k: v for k, v in decoded.items() if k in ours})


def to_cmd_args(mapping: Mapping[str, Any]) -> list[str]:
    """The toolkit's arguments for decoded hyperparameters: by name in sorted order, ``--name``
    (``-n`` for a one-character name), then the value as Python's ``str`` writes it (``3``,
    ``0.1``, ``True``, ``[1, 2]``), a dict as ``k=v,k2=v2`` in key order, null as an empty string."""
    arguments = []
    for key in sorted(mapping):
        name = str(key)
        arguments.append("" if not name else f"--{name}" if len(name) > 1 else f"-{name}")
        arguments.append(_argument(mapping[key]))
    return arguments


def _argument(value: Any) -> str:
    if isinstance(value, Mapping):
        return ",".join(f"{k}={v}" for k, v in sorted(value.items()))
    return "" if value is None else str(value)


def env_value(value: Any) -> str:
    """A decoded value as the toolkit writes it into a variable: strings as they are, the rest as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def module_name(program: str) -> str:
    return program[:-3] if program.endswith(".py") else program


def program_problem(program: Any) -> str | None:
    """Why a decoded ``sagemaker_program`` cannot name an entry point in the code directory, if it cannot."""
    if not isinstance(program, str) or not program.strip():
        return "Member must be the entry point's file name, a JSON string (the SageMaker SDK sends \"\\\"train.py\\\"\")"
    if not _inside(program) or posixpath.normpath(program) == ".":
        return "Member must name a file inside the submitted source, by a relative path"
    return None


def command(program: str, interpreter: str, arguments: list[str]) -> list[str]:
    """What a host runs, in its code directory: a Python program with the interpreter, anything else itself."""
    if program.endswith(".py"):  # as the toolkit runs it (a name like "-c.py" is not an option to Python)
        return [interpreter, posixpath.join(".", program) if program.startswith("-") else program, *arguments]
    return [posixpath.join(".", program), *arguments]


# -- the submitted source --------------------------------------------------------------------


def check_source(source: Path, program: str) -> None:
    """SourceError unless ``source`` (a directory, or a tar archive such as ``sourcedir.tar.gz``)
    can be installed safely and holds ``program``."""
    if source.is_dir():
        if not (source / program).is_file():
            raise MissingProgram(f"holds no {program!r}")
        return
    if not source.is_file():
        raise SourceError("names no file or directory")
    with _open_archive(source) as archive:
        members = _checked_members(archive)
    files = {posixpath.normpath(m.name) for m in members if m.isreg() or m.islnk() or m.issym()}
    if posixpath.normpath(program) not in files:
        raise MissingProgram(f"holds no {program!r}")


def install_source(source: Path, code_dir: Path, program: str) -> None:
    """The source as ``code_dir``'s contents: a directory copied, a tar archive unpacked (refusing
    members outside it, links that lead out of it and device files); a program that is not Python
    made executable, as the toolkit does."""
    code_dir.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, code_dir, dirs_exist_ok=True, symlinks=True)  # links as links: not what they lead to
    else:
        with _open_archive(source) as archive:
            members = _checked_members(archive)
            try:
                if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later check again as they extract
                    archive.extractall(code_dir, members, filter="data")
                else:
                    archive.extractall(code_dir, members)  # every member was checked above
            except (tarfile.TarError, EOFError, zlib.error) as exc:
                raise SourceError(f"could not be unpacked ({exc})") from None
    entry = code_dir / program
    if not program.endswith(".py") and entry.is_file():
        entry.chmod(entry.stat().st_mode | 0o111)
    if not entry.is_file():
        raise MissingProgram(f"holds no {program!r}")


def notes(code_dir: Path, interpreter: str | None, absent_image: str | None, script: bool) -> bytes:
    """What the job's log says before the job's own output about how it runs: that its framework
    image is not on this machine (what runs in its place), and that a script's requirements.txt is
    not installed (a local ``interpreter`` runs the entry point; an image's toolkit installs it)."""
    lines = []
    if absent_image is not None:
        instead = f"the entry point runs with {interpreter}" if script else (
            "its entry point runs as a process of this machine, which sees /opt/ml as the container would, with "
            f"{interpreter} first on its PATH")
        lines.append(f"trainmon: the image {absent_image} is not on this machine: {instead}; pull or build it to "
                     "run the job in it")
    if script and interpreter and (code_dir / REQUIREMENTS).is_file():
        lines.append(f"trainmon: {REQUIREMENTS} is not installed: the entry point runs with the packages of "
                     f"{interpreter}; install what it needs there")
    return "".join(f"{line}\n" for line in lines).encode("utf-8", "replace")


def _open_archive(source: Path) -> tarfile.TarFile:
    try:
        archive = tarfile.open(source, "r:*")
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise SourceError(f"is not a tar archive ({exc})") from None
    try:
        archive.getmembers()  # a truncated or corrupt archive fails here, not halfway through unpacking
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        archive.close()
        raise SourceError(f"is not a whole tar archive ({exc})") from None
    return archive


def _checked_members(archive: tarfile.TarFile) -> list[tarfile.TarInfo]:
    members = archive.getmembers()
    links = {posixpath.normpath(m.name) for m in members if m.issym() or m.islnk()}
    for member in members:
        problem = _member_problem(member, links)
        if problem is not None:
            raise SourceError(f"is not a safe archive: member {member.name!r} {problem}")
    return members


def _member_problem(member: tarfile.TarInfo, links: set[str]) -> str | None:
    if not _inside(member.name):
        return "would be written outside the code directory"
    if _through_link(member.name, links):
        return "would be written through a link"
    if member.isreg() or member.isdir():
        return None
    if member.issym():
        target = posixpath.join(posixpath.dirname(member.name), member.linkname)
        if member.linkname.startswith("/") or not _inside(target) or _through_link(target, links):
            return f"links outside the code directory (to {member.linkname!r})"
        return None
    if member.islnk():
        if not _inside(member.linkname) or _through_link(member.linkname, links):
            return f"links outside the code directory (to {member.linkname!r})"
        return None
    return "is a device, FIFO or other special file"


def _inside(relative: str) -> bool:
    """Whether a relative path stays inside the directory it is relative to (by its text)."""
    if not relative or PurePosixPath(relative).is_absolute() or relative.startswith("\\"):
        return False
    normal = posixpath.normpath(relative)
    return normal != ".." and not normal.startswith("../")


def _through_link(path: str, links: set[str]) -> bool:
    """Whether one of a path's parent directories is a link of the archive (a path that a link
    could send elsewhere)."""
    parts = PurePosixPath(path).parts  # as written: "d/link/.." passes through "d/link"
    return any(posixpath.normpath(posixpath.join(*parts[:end])) in links for end in range(1, len(parts)))
