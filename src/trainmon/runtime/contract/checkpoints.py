"""A job's checkpoints (``CheckpointConfig``), kept where ``S3Uri`` says and given back to the next
job that names the same place, as SageMaker does for spot training and resumed jobs.

Before a host starts, what ``S3Uri`` holds is copied into the host's checkpoint directory; when
the job ends (completed, failed or stopped), what the directory holds is copied back, file by
file, over what was there. ``S3Uri`` is an ``s3://`` prefix of trainmon's object store, or (trainmon's
own) a local directory or ``file://`` URI. A container sees its host's directory at ``LocalPath``
(default ``/opt/ml/checkpoints``); a process, at ``LocalPath`` itself when the request gives one,
else at the host's ``checkpoints/`` directory. Unlike SageMaker, which uploads as files appear,
the copy back is made once, at the job's end.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ... import config
from ...errors import S3Error, TrainmonError, ValidationException
from ...store import objects

DEFAULT_LOCAL_PATH = "/opt/ml/checkpoints"


def check(settings: Mapping[str, Any] | None, home: Path) -> None:
    """ValidationException when checkpoints could not be kept where ``settings`` (CheckpointConfig) say."""
    if not settings:
        return
    uri = settings["S3Uri"]
    field = "CheckpointConfig.S3Uri"
    if uri.startswith("s3://"):
        bucket, key = objects.parse_uri(uri)
        try:
            objects.check_bucket_name(bucket)
            if key:
                objects.check_key(key)
            objects.ObjectStore(home).head_bucket(bucket)
        except S3Error as exc:
            raise ValidationException(f"{field} {uri!r}: {exc.message}") from None
    elif "://" in uri and not uri.startswith("file://"):
        raise ValidationException(f"{field} {uri!r}: give an s3:// URI of trainmon's object store, a file:// URI or "
                                  "a local directory.")
    else:
        _check_directory(uri, field, home)
        local_path = settings.get("LocalPath")
        if local_path and _overlap(_local(uri), Path(local_path)):
            raise ValidationException(f"CheckpointConfig.LocalPath {local_path!r} and S3Uri {uri!r} hold one another: "
                                      "checkpoints would be copied into themselves; give places apart.")
    local = settings.get("LocalPath", DEFAULT_LOCAL_PATH)
    if not local.startswith("/"):
        raise ValidationException(f"CheckpointConfig.LocalPath {local!r} must be an absolute path.")


def _check_directory(uri: str, field: str, home: Path) -> None:
    """A local place for checkpoints: an absolute path, that does not hold trainmon's data directory
    (the hosts' checkpoint directories are in it: a copy would go into itself)."""
    path = _local(uri)
    if not path.is_absolute():
        raise ValidationException(f"{field} {uri!r}: a local directory must be given by its absolute path (or a "
                                  "file:// URI), as the job's hosts do not run where it was created.")
    jobs = config.jobs_dir(home).resolve()
    if jobs.is_relative_to(path.resolve()) or path.resolve().is_relative_to(jobs):
        where = "is in" if path.resolve().is_relative_to(jobs) else "holds"
        raise ValidationException(f"{field} {uri!r} {where} trainmon's directory of jobs ({jobs}), where the hosts' "
                                  "checkpoints are: give a directory of their own.")


def _overlap(first: Path, second: Path) -> bool:
    one, other = first.resolve(), second.expanduser().resolve()
    return one.is_relative_to(other) or other.is_relative_to(one)


def restore(settings: Mapping[str, Any], home: Path, directory: Path) -> None:
    """What ``S3Uri`` holds, copied into ``directory`` (made if need be); OSError when it cannot be."""
    directory.mkdir(parents=True, exist_ok=True)
    uri = settings["S3Uri"]
    if not uri.startswith("s3://"):
        source = _local(uri)
        if source.is_dir():
            shutil.copytree(source, directory, dirs_exist_ok=True, symlinks=True)
        return
    bucket, prefix = objects.parse_uri(uri)
    prefix = f"{prefix.rstrip('/')}/" if prefix else ""
    store = objects.ObjectStore(home)
    try:
        for info in store.iter_objects(bucket, prefix):
            target = directory / info.key[len(prefix):]
            if not target.resolve().is_relative_to(directory.resolve()):
                continue  # a key with ".." in it: not a file of this directory
            target.parent.mkdir(parents=True, exist_ok=True)
            body, _ = store.open_object(bucket, info.key)
            with body, open(target, "wb") as written:
                shutil.copyfileobj(body, written)
    except TrainmonError as exc:
        raise OSError(f"{uri}: {exc.message}") from None


def save(settings: Mapping[str, Any], home: Path, directory: Path) -> None:
    """Every file of ``directory`` copied to ``S3Uri``, over what was there; OSError when it cannot be."""
    if not directory.is_dir():
        return
    uri = settings["S3Uri"]
    files = sorted(path for path in directory.rglob("*") if path.is_file() and not path.is_symlink())
    if not uri.startswith("s3://"):
        target = _local(uri)
        for path in files:
            copy = target / path.relative_to(directory)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, copy)
        return
    bucket, prefix = objects.parse_uri(uri)
    prefix = f"{prefix.rstrip('/')}/" if prefix else ""
    store = objects.ObjectStore(home)
    try:
        for path in files:
            with open(path, "rb") as body:
                store.put_object(bucket, prefix + path.relative_to(directory).as_posix(), body)
    except TrainmonError as exc:
        raise OSError(f"{uri}: {exc.message}") from None


def _local(uri: str) -> Path:
    return Path(uri.removeprefix("file://")).expanduser()
