"""A job's artifacts: ``model.tar.gz`` and ``output.tar.gz``, its checkpoints and its channels'
inputs, listed with their sizes; an archive's members listed; any of them opened to be read
(ListJobArtifacts, ListArchiveMembers, and :func:`open_artifact` for the server's downloads).

An artifact is named by an id the listing gives: ``model.tar.gz``, ``output.tar.gz``,
``checkpoints/<file>``, ``channels/<channel>/<file>``. Each resolves inside the place the job
names for it (its output path, CheckpointConfig.S3Uri, a channel's S3Uri: a local path or an object
of trainmon's store): a path that leads out of that place (``..``, a link) names nothing.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Protocol

from ..errors import ResourceNotFound, TrainmonError, ValidationException
from ..shapes import refuse_unknown
from ..store import JobRow, Store, objects
from .sagemaker import job

MAX_FILES = 1_000  # files listed per place (checkpoints, a channel)
MAX_MEMBERS = 10_000  # an archive's members listed
ARCHIVES = ("model.tar.gz", "output.tar.gz")


def list_job_artifacts(store: Store, *, TrainingJobName: Any = None, **unsupported: Any) -> dict[str, Any]:
    """``Artifacts``: each with ``Id``, ``Kind`` (Model, Output, Checkpoint, Channel), ``Name``,
    ``Size`` (bytes), ``Location`` (where the job keeps it) and, for a channel's file, ``Channel``;
    an archive the job has not written (yet) has ``Available`` false; ``Truncated`` names the places
    of more than 1,000 files, listed in part."""
    refuse_unknown(unsupported, where="input")
    row = job(store, TrainingJobName)
    found: list[dict[str, Any]] = []
    truncated: list[str] = []
    for name, kind in zip(ARCHIVES, ("Model", "Output"), strict=True):
        location, path = _archive(store, row, name)
        entry: dict[str, Any] = {"Id": name, "Kind": kind, "Name": name, "Location": location}
        if path is not None and path.is_file():
            entry["Size"] = path.stat().st_size
        else:
            entry["Available"] = False
        if kind == "Model" or entry.get("Available", True):
            found.append(entry)
    for prefix, kind, channel, location, root in _places(store, row):
        files = list(_files(root, MAX_FILES + 1))
        if len(files) > MAX_FILES:
            truncated.append(location)
        for relative, size in files[:MAX_FILES]:
            entry = {"Id": f"{prefix}/{relative}", "Kind": kind, "Name": relative, "Size": size,
                     "Location": location}
            if channel is not None:
                entry["Channel"] = channel
            found.append(entry)
    return {"Artifacts": found, **({"Truncated": truncated} if truncated else {})}


def list_archive_members(store: Store, *, TrainingJobName: Any = None, Artifact: Any = None,
                         **unsupported: Any) -> dict[str, Any]:
    """``Members`` of a tar archive among the job's artifacts: ``Name``, ``Size``, ``Type`` (file,
    directory, link); ``Truncated`` when it has more than 10,000."""
    refuse_unknown(unsupported, where="input")
    row = job(store, TrainingJobName)
    path = _path(store, row, Artifact)
    members: list[dict[str, Any]] = []
    try:
        with tarfile.open(path, "r:*") as archive:
            for member in archive:
                if len(members) == MAX_MEMBERS:
                    return {"Members": members, "Truncated": True}
                kind = "directory" if member.isdir() else "link" if member.issym() or member.islnk() else "file"
                members.append({"Name": member.name, "Size": member.size, "Type": kind})
    except (tarfile.TarError, OSError) as exc:
        raise ValidationException(f"{Artifact} is not a tar archive that can be read: {exc}") from None
    return {"Members": members}


def open_artifact(store: Store, name: Any, artifact: Any, member: Any = None) -> tuple[Reader, int, str]:
    """An artifact's bytes to read (or those of one member of it, an archive), their size and the
    file name a download takes."""
    row = job(store, name)
    path = _path(store, row, artifact)
    if member is None:
        return path.open("rb"), path.stat().st_size, path.name
    if not isinstance(member, str) or not member:
        raise ValidationException("member must name a file of the archive.")
    try:
        archive = tarfile.open(path, "r:*")
        found = archive.getmember(member)
        data = archive.extractfile(found) if found.isfile() else None
    except KeyError:
        raise ResourceNotFound(f"{artifact} holds no member {member!r}.") from None
    except (tarfile.TarError, OSError) as exc:
        raise ValidationException(f"{artifact} is not a tar archive that can be read: {exc}") from None
    if data is None:
        archive.close()
        raise ValidationException(f"{member!r} in {artifact} is not a file.")
    return _Closing(data, archive.close), found.size, os.path.basename(member)


class Reader(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


class _Closing:
    """A member's reader that closes its archive with it."""

    def __init__(self, data: IO[bytes], close: Callable[[], None]) -> None:
        self._data, self._close = data, close

    def read(self, size: int = -1) -> bytes:
        return self._data.read(size)

    def close(self) -> None:
        self._data.close()
        self._close()


def _archive(store: Store, row: JobRow, name: str) -> tuple[str, Path | None]:
    """Where one of the job's archives is kept, and its local path (None: not on this machine)."""
    doc = row.doc
    model = doc.get("ModelArtifacts", {}).get("S3ModelArtifacts", "")
    location = f"{model.rsplit('/', 1)[0]}/{name}" if model else ""
    if not model or doc["TrainmonConfig"].get("ArtifactsToS3"):
        return location, None  # (a Ray job's archives went to S3)
    if model.startswith("s3://"):
        try:
            return location, objects.resolve(store.home, location)
        except TrainmonError:
            return location, None
    local = Path(doc["TrainmonConfig"].get("ModelArtifactsPath") or model.removeprefix("file://"))
    return location, local.with_name(name)


def _places(store: Store, row: JobRow) -> Iterator[tuple[str, str, str | None, str, Path]]:
    """The job's places of files: (id prefix, kind, channel, location, local directory or file)."""
    doc = row.doc
    checkpoints = (doc.get("CheckpointConfig") or {}).get("S3Uri")
    if checkpoints:
        root = _local(store, checkpoints)
        if root is not None:
            yield "checkpoints", "Checkpoint", None, checkpoints, root
    for channel in doc.get("InputDataConfig", []):
        uri = channel.get("DataSource", {}).get("S3DataSource", {}).get("S3Uri")
        root = _local(store, uri) if uri else None
        if root is not None:
            yield f"channels/{channel['ChannelName']}", "Channel", channel["ChannelName"], uri, root


def _local(store: Store, uri: str) -> Path | None:
    if uri.startswith("s3://"):
        try:
            return objects.resolve(store.home, uri)
        except TrainmonError:
            return None
    if "://" in uri and not uri.startswith("file://"):
        return None
    return Path(uri.removeprefix("file://"))


def _files(root: Path, most: int) -> Iterator[tuple[str, int]]:
    """The regular files under ``root`` (or ``root`` itself, a file), by path relative to it, in
    order; links are not followed."""
    if root.is_file():
        yield root.name, root.stat().st_size
        return
    count = 0
    for folder, directories, files in os.walk(root):
        directories.sort()
        for file in sorted(files):
            path = Path(folder, file)
            if path.is_symlink() or not path.is_file():
                continue
            yield path.relative_to(root).as_posix(), path.stat().st_size
            count += 1
            if count >= most:
                return


def _path(store: Store, row: JobRow, artifact: Any) -> Path:
    """The local file an artifact's id names, inside the place the job keeps it; ResourceNotFound
    for anything else."""
    if not isinstance(artifact, str) or not artifact:
        raise ValidationException("Artifact must be an artifact's Id, as ListJobArtifacts gives it.")
    missing = ResourceNotFound(f"job {row.name} has no artifact {artifact!r} on this machine: ListJobArtifacts "
                               "names those it has.")
    if artifact in ARCHIVES:
        _, path = _archive(store, row, artifact)
        if path is None or not path.is_file():
            raise missing
        return path
    for prefix, _kind, _channel, _location, root in _places(store, row):
        if not artifact.startswith(prefix + "/"):
            continue
        relative = artifact[len(prefix) + 1:]
        if root.is_file():
            if relative == root.name:
                return root
            continue
        base = root.resolve()
        target = (base / relative).resolve()
        if target.is_relative_to(base) and target != base and target.is_file() and not (root / relative).is_symlink():
            return target
    raise missing


OPERATIONS: dict[str, Callable[..., dict[str, Any]]] = {
    "ListJobArtifacts": list_job_artifacts,
    "ListArchiveMembers": list_archive_members,
}
