"""A job's archives: ``model/`` packed as ``model.tar.gz`` (and ``output/data`` as
``output.tar.gz``) from the first host, as SageMaker packs them, to where the output path says.

- a local path (or ``file://``): files beside each other, each written whole and then renamed;
- ``s3://`` of trainmon's object store: objects of this machine's data directory;
- ``s3://`` of a Ray job (``TrainmonConfig.ArtifactsToS3``): objects of S3 or of an S3-compatible
  service, written with boto3 from algo-1's node, whose AWS configuration (credentials, region,
  ``AWS_ENDPOINT_URL_S3`` or ``endpoint_url``) says where. Its bucket is checked there before the
  job starts (:func:`check`), so that a wrong bucket or key fails the job before it trains.
"""

from __future__ import annotations

import tarfile
import tempfile
from pathlib import Path
from typing import IO, Any, cast

from ...errors import TrainmonError
from ...jobs.document import JobDocument
from ...store import objects


def check(doc: JobDocument) -> str | None:
    """Why the first host cannot write the job's archives where they go, or None (this is that
    host's machine). Only S3 is checked here: the rest was checked when the job was created."""
    if not doc["TrainmonConfig"].get("ArtifactsToS3"):
        return None
    uri = doc["ModelArtifacts"]["S3ModelArtifacts"]
    bucket, _key = objects.parse_uri(uri)
    try:
        _s3(quick=True).head_bucket(Bucket=bucket)
    except Exception as exc:
        if _status(exc) == 403:
            return None  # there, but credentials that may write without listing: the upload will tell
        return (f"ClientError: OutputDataConfig.S3OutputPath: algo-1's node cannot reach bucket {bucket!r}: {exc}. "
                "Check the AWS configuration of the nodes (credentials, region, AWS_ENDPOINT_URL_S3 for an "
                "S3-compatible service) and that the bucket exists.")
    return None


def _status(exc: Exception) -> int | None:
    """The HTTP status of a botocore ClientError, if it is one."""
    response = getattr(exc, "response", None)
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode") if isinstance(response, dict) else None
    return status if isinstance(status, int) else None


def pack(doc: JobDocument, home: Path, model_dir: Path, output_data_dir: Path) -> None:
    """The first host's archives, written where the job's output path says; OSError when they cannot be."""
    artifacts = doc["ModelArtifacts"]["S3ModelArtifacts"]
    archives = [(model_dir, "model.tar.gz")]
    if output_data_dir.is_dir() and any(output_data_dir.iterdir()):
        archives.append((output_data_dir, "output.tar.gz"))
    if artifacts.startswith("s3://"):
        put = _put_s3 if doc["TrainmonConfig"].get("ArtifactsToS3") else _put_object
        for source, name in archives:
            put(home, source, f"{artifacts.rsplit('/', 1)[0]}/{name}")
        return
    target = Path(doc["TrainmonConfig"].get("ModelArtifactsPath") or artifacts.removeprefix("file://"))
    target.parent.mkdir(parents=True, exist_ok=True)
    for source, name in archives:
        temporary = target.with_name(name + ".part")
        with tarfile.open(temporary, "w:gz") as archive:
            _add(archive, source)
        temporary.replace(target.with_name(name))


def _add(archive: tarfile.TarFile, source: Path) -> None:
    for entry in sorted(source.iterdir()):
        archive.add(entry, arcname=entry.name)


def _put_object(home: Path, source: Path, uri: str) -> None:
    """A directory packed straight into an object of the object store."""
    store = objects.ObjectStore(home)
    bucket, key = objects.parse_uri(uri)
    try:
        with store.staging() as staged:
            with tarfile.open(fileobj=cast(IO[bytes], staged), mode="w|gz") as archive:
                _add(archive, source)
            store.commit(staged, bucket, key)
    except TrainmonError as exc:  # the bucket went, say
        raise OSError(f"{uri}: {exc.message}") from None


def _put_s3(home: Path, source: Path, uri: str) -> None:
    """A directory packed into a temporary file of this node, then uploaded to S3 (in parts when large)."""
    bucket, key = objects.parse_uri(uri)
    with tempfile.NamedTemporaryFile(dir=home, prefix=".archive-", suffix=".tar.gz") as temporary:
        with tarfile.open(fileobj=temporary, mode="w:gz") as archive:
            _add(archive, source)
        temporary.flush()
        try:
            _s3().upload_file(temporary.name, bucket, key)
        except Exception as exc:
            raise OSError(f"{uri}: {exc}") from None


def _s3(*, quick: bool = False) -> Any:
    """An S3 client of this node's AWS configuration, read afresh; ``quick``: short timeouts, few retries."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise OSError("an s3:// output path of a Ray job needs boto3 on the nodes: pip install 'trainmon[ray]'") from None
    config = Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 2}) if quick else None
    return boto3.session.Session().client("s3", config=config)
