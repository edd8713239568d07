"""The object store: S3's buckets and objects as plain files under ``<home>/s3``.

An object's bytes sit at the path its key names, ``<home>/s3/<bucket>/<key>``, so ``aws s3 cp``
uploads and job channels read plain files. What S3 keeps beside the bytes (ETag, Content-Type,
``x-amz-meta-*``) is a JSON sidecar under ``<home>/s3/.meta/<bucket>/``, named by the SHA-256 of
the key: no key's sidecar can collide with another's or outgrow a file name, whatever the key
holds. A sidecar records the size, mtime and inode of the file it describes; a file changed by
hand (or put there without the store) no longer matches, and its ETag is then its MD5, read again.

    <home>/s3/<bucket>/<key>                       the bytes
    <home>/s3/.meta/<bucket>/bucket.json           creation time, region
    <home>/s3/.meta/<bucket>/<hh>/<sha256>.json    an object's sidecar
    <home>/s3/.meta/<bucket>/<hh>/<sha256>.body    the bytes of a folder marker (a key ending in '/')
    <home>/s3/.uploads/<upload id>/                a multipart upload: upload.json, one file per part
    <home>/s3/.tmp/                                bytes on their way in

Bucket names cannot start with a dot, so the store's own folders never meet a bucket. Every write
goes to a temp file first and is renamed into place, so a reader sees a whole object or none.
Keys that cannot be a path (a ``.`` or ``..`` segment, an empty segment other than a trailing
``/``, NUL, a segment over 255 bytes, over 1024 bytes in all, or a file where a folder is, and
the reverse) are refused. Listings are in UTF-8 byte order, as S3's, which is code point order,
Python's order of strings.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, BinaryIO

from .. import config
from ..errors import (
    BucketAlreadyOwnedByYou,
    BucketNotEmpty,
    InvalidBucketName,
    InvalidObjectKey,
    InvalidPart,
    NoSuchBucket,
    NoSuchKey,
    NoSuchUpload,
    S3Error,
    ValidationException,
)

__all__ = ["BucketInfo", "Listing", "ObjectInfo", "ObjectStore", "S3Error", "StagedFile", "UploadInfo",
           "check_bucket_name", "check_key", "parse_uri", "resolve"]  # S3Error: the base of what the store raises

KEY_MOST_BYTES = 1024
SEGMENT_MOST_BYTES = 255  # a file name (NAME_MAX)
LIST_MOST_KEYS = 1000
PART_LEAST_BYTES = 5 * 1024 * 1024  # every part but the last
PART_NUMBER_MOST = 10000
DEFAULT_CONTENT_TYPE = "binary/octet-stream"  # what S3 answers for an object stored without one
COPY_CHUNK_BYTES = 1024 * 1024
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_IP_ADDRESS = re.compile(r"\d+\.\d+\.\d+\.\d+")
_UPLOAD_ID = re.compile(r"[A-Za-z0-9_-]{16,128}")
_PUT_TRIES = 5  # a concurrent delete may remove a folder between making it and renaming into it


@dataclass(frozen=True)
class BucketInfo:
    name: str
    created: datetime
    region: str | None  # the LocationConstraint it was created with (None: us-east-1)


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    path: Path  # where the bytes are
    size_bytes: int
    etag: str  # quoted, as S3 writes it: "<md5 hex>" or, for a multipart upload, "<md5 of md5s>-N"
    last_modified: datetime
    content_type: str = DEFAULT_CONTENT_TYPE
    metadata: Mapping[str, str] = field(default_factory=dict)  # x-amz-meta-*, names without the prefix
    headers: Mapping[str, str] = field(default_factory=dict)  # Content-Encoding, Cache-Control, ...
    checksums: Mapping[str, str] = field(default_factory=dict)  # e.g. {"CRC32": "base64"}, when the put sent one


@dataclass(frozen=True)
class Listing:
    contents: list[ObjectInfo]
    common_prefixes: list[str]
    is_truncated: bool
    last: str | None  # the last key or common prefix of this page: where the next page starts after


@dataclass(frozen=True)
class UploadInfo:
    upload_id: str
    bucket: str
    key: str
    initiated: datetime


@dataclass(frozen=True)
class _Stored:
    """What one write puts in a sidecar."""

    content_type: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    checksums: Mapping[str, str] = field(default_factory=dict)


class StagedFile:
    """Bytes on their way into the store: a temp file beside the buckets, its MD5 taken as it is written.
    Use it as a context manager: what is not committed (or is) leaves no temp file behind."""

    def __init__(self, directory: Path) -> None:
        descriptor, name = tempfile.mkstemp(dir=directory, prefix="put-")
        self.path = Path(name)
        self._file: IO[bytes] | None = os.fdopen(descriptor, "wb")
        self._md5 = hashlib.md5()
        self.size_bytes = 0
        self.committed = False  # renamed into the store: nothing left to remove

    def write(self, data: bytes) -> None:
        assert self._file is not None, "the staged file was closed"
        self._file.write(data)
        self._md5.update(data)
        self.size_bytes += len(data)

    def write_from(self, source: BinaryIO) -> None:
        while chunk := source.read(COPY_CHUNK_BYTES):
            self.write(chunk)

    @property
    def md5_hex(self) -> str:
        return self._md5.hexdigest()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def discard(self) -> None:
        self.close()
        if self.committed:
            return
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def __enter__(self) -> StagedFile:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.discard()


def check_bucket_name(bucket: str) -> None:
    """S3's rules for a bucket name: 3 to 63 lowercase letters, digits, dots and hyphens, starting
    and ending with a letter or digit, no two dots in a row, not an IP address."""
    if not _BUCKET_NAME.fullmatch(bucket) or ".." in bucket or _IP_ADDRESS.fullmatch(bucket):
        raise InvalidBucketName(
            f"The specified bucket is not valid: {bucket!r}. A bucket name has 3 to 63 characters: lowercase "
            "letters, digits, dots and hyphens, starting and ending with a letter or digit.", bucket=bucket)


def check_key(key: str) -> None:
    """Refuse a key that cannot be a path under its bucket (see the module docstring)."""
    if _too_long(key):
        raise InvalidObjectKey(f"Your key is too long: over {KEY_MOST_BYTES} bytes in UTF-8.",
                               code="KeyTooLongError", key=key)
    problem = _key_problem(key)
    if problem:
        raise InvalidObjectKey(f"Object key {key!r} cannot be stored as a file: {problem}.", key=key)


def _too_long(key: str) -> bool:
    return len(key.encode("utf-8", "surrogatepass")) > KEY_MOST_BYTES


def _key_problem(key: str) -> str | None:
    if not key:
        return "it is empty"
    if _too_long(key):
        return f"it is over {KEY_MOST_BYTES} bytes"
    if "\0" in key:
        return "it holds a NUL character"
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return "it is not valid UTF-8"
    segments = key.split("/")
    if key.endswith("/"):
        segments.pop()
    for segment in segments:
        if segment in ("", ".", ".."):
            shown = "an empty segment ('//' or a leading '/')" if not segment else f"a {segment!r} segment"
            return f"it has {shown}"
        if len(segment.encode()) > SEGMENT_MOST_BYTES:
            return f"a segment between slashes is over {SEGMENT_MOST_BYTES} bytes"
    return None


def parse_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/key`` as (bucket, key); the key may be empty or a prefix."""
    if not uri.startswith("s3://"):
        raise ValidationException(f"{uri!r} is not an S3 URI: write s3://BUCKET/KEY.")
    bucket, _, key = uri[len("s3://"):].partition("/")
    return bucket, key


def resolve(home: Path, uri: str) -> Path:
    """The local path of ``s3://bucket/key-or-prefix``: the object's file, or for a prefix the
    folder under which its objects sit. A ValidationException says why there is none."""
    return ObjectStore(home).resolve(uri)


class ObjectStore:
    """The buckets and objects under ``<home>/s3``; every method is safe to call from many threads
    and processes at once."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = home or config.home()
        self.root = self.home / "s3"
        self._meta = self.root / ".meta"
        self._uploads = self.root / ".uploads"
        self._tmp = self.root / ".tmp"

    # -- buckets ---------------------------------------------------------------------------

    def create_bucket(self, bucket: str, *, region: str | None = None) -> None:
        check_bucket_name(bucket)
        self._ready()
        owned = BucketAlreadyOwnedByYou(
            "Your previous request to create the named bucket succeeded and you already own it.", bucket=bucket)
        if self._bucket_dir(bucket).exists():
            raise owned
        shutil.rmtree(self._meta / bucket, ignore_errors=True)  # sidecars left by a bucket removed by hand
        try:
            self._bucket_dir(bucket).mkdir(mode=0o700)
        except FileExistsError:
            raise owned from None
        (self._meta / bucket).mkdir(mode=0o700, parents=True, exist_ok=True)
        created = datetime.now(UTC).timestamp()
        self._write_json(self._meta / bucket / "bucket.json", {"created": created, "region": region})

    def head_bucket(self, bucket: str) -> BucketInfo:
        check_bucket_name(bucket)
        directory = self._bucket_dir(bucket)
        try:
            status = directory.stat()
        except FileNotFoundError:
            raise self._no_bucket(bucket) from None
        if not directory.is_dir():
            raise self._no_bucket(bucket)
        record = self._read_json(self._meta / bucket / "bucket.json") or {}
        created = record.get("created", status.st_ctime)
        return BucketInfo(bucket, datetime.fromtimestamp(float(created), UTC), record.get("region"))

    def list_buckets(self) -> list[BucketInfo]:
        if not self.root.is_dir():
            return []
        names = sorted(entry.name for entry in os.scandir(self.root)
                       if entry.is_dir(follow_symlinks=False) and _BUCKET_NAME.fullmatch(entry.name))
        found = []
        for name in names:
            with contextlib.suppress(NoSuchBucket, InvalidBucketName):
                found.append(self.head_bucket(name))
        return found

    def delete_bucket(self, bucket: str) -> None:
        """Remove an empty bucket (its unfinished multipart uploads go with it)."""
        self.head_bucket(bucket)
        try:
            self._bucket_dir(bucket).rmdir()
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise BucketNotEmpty("The bucket you tried to delete is not empty.", bucket=bucket) from None
            raise
        shutil.rmtree(self._meta / bucket, ignore_errors=True)
        for upload in self._list_upload_records():
            if upload.get("bucket") == bucket:
                shutil.rmtree(self._uploads / str(upload["id"]), ignore_errors=True)

    # -- objects ---------------------------------------------------------------------------

    def staging(self) -> StagedFile:
        """A temp file to write an object's bytes into, then :meth:`commit` (or :meth:`upload_part`)."""
        self._ready()
        return StagedFile(self._tmp)

    def put_object(self, bucket: str, key: str, body: bytes | BinaryIO, *, content_type: str | None = None,
                   metadata: Mapping[str, str] | None = None, headers: Mapping[str, str] | None = None) -> ObjectInfo:
        self._check(bucket, key)
        with self.staging() as staged:
            if isinstance(body, bytes | bytearray | memoryview):
                staged.write(bytes(body))
            else:
                staged.write_from(body)
            return self.commit(staged, bucket, key, content_type=content_type, metadata=metadata, headers=headers)

    def commit(self, staged: StagedFile, bucket: str, key: str, *, content_type: str | None = None,
               metadata: Mapping[str, str] | None = None, headers: Mapping[str, str] | None = None,
               checksums: Mapping[str, str] | None = None, etag: str | None = None) -> ObjectInfo:
        """Put the staged bytes at ``key``, replacing what was there, in one rename."""
        self._check(bucket, key)
        staged.close()
        stored = _Stored(content_type, dict(metadata or {}), dict(headers or {}), dict(checksums or {}))
        final_etag = etag or f'"{staged.md5_hex}"'
        target = self._body_path(bucket, key)
        for attempt in range(_PUT_TRIES):
            self._make_parents(bucket, key)
            self._write_sidecar(bucket, key, staged.path, final_etag, stored)
            try:
                os.replace(staged.path, target)
                staged.committed = True
                break
            except FileNotFoundError:  # a delete took the folder away in between: make it again
                if attempt == _PUT_TRIES - 1 or not staged.path.exists():
                    raise
            except IsADirectoryError:
                raise self._conflict(key, "a folder of that name holds other objects") from None
            except NotADirectoryError:
                raise self._conflict(key, "a part of its path is an object") from None
        return self.head_object(bucket, key)

    def head_object(self, bucket: str, key: str) -> ObjectInfo:
        self._check(bucket, key)
        path = self._body_path(bucket, key)
        try:
            status = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            raise self._no_key(bucket, key) from None
        if not os.path.isfile(path):
            raise self._no_key(bucket, key)
        return self._info(bucket, key, path, status)

    def open_object(self, bucket: str, key: str) -> tuple[BinaryIO, ObjectInfo]:
        """The object's bytes, open, and what is known of those very bytes (a put that replaces the
        object after this returns does not change what the handle reads)."""
        self._check(bucket, key)
        path = self._body_path(bucket, key)
        try:
            handle = open(path, "rb")  # noqa: SIM115 -- returned to the caller, who closes it
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise self._no_key(bucket, key) from None
        try:
            return handle, self._info(bucket, key, path, os.fstat(handle.fileno()))
        except BaseException:
            handle.close()
            raise

    def delete_object(self, bucket: str, key: str) -> None:
        """Remove the object if it is there (S3 answers the same either way), and the folders it leaves empty."""
        self._check(bucket, key)
        self.head_bucket(bucket)
        path = self._body_path(bucket, key)
        if key.endswith("/"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            with contextlib.suppress(FileNotFoundError):
                self._sidecar_path(bucket, key).unlink()
            self._prune(bucket, self._data_path(bucket, key))
            return
        try:
            if not os.path.isfile(path):
                return
            path.unlink()
        except (FileNotFoundError, NotADirectoryError):
            return
        with contextlib.suppress(FileNotFoundError):
            self._sidecar_path(bucket, key).unlink()
        self._prune(bucket, path.parent)

    def list_objects(self, bucket: str, *, prefix: str = "", delimiter: str = "", after: str = "",
                     max_keys: int = LIST_MOST_KEYS) -> Listing:
        """One page of the keys that start with ``prefix`` and sort after ``after``, in S3's order; with
        a ``delimiter``, keys that hold it past the prefix are rolled up into common prefixes. At most
        ``max_keys`` (1000 at most) keys and prefixes together; ``Listing.last`` is where the next page
        starts after."""
        self.head_bucket(bucket)
        limit = max(0, min(max_keys, LIST_MOST_KEYS))
        contents: list[ObjectInfo] = []
        prefixes: list[str] = []
        last: str | None = None
        for kind, name in self._entries(bucket, prefix, delimiter, after):
            if len(contents) + len(prefixes) == limit:
                return Listing(contents, prefixes, True, last)
            if kind == "prefix":
                prefixes.append(name)
            else:
                info = self._info_or_none(bucket, name)
                if info is None:
                    continue
                contents.append(info)
            last = name
        return Listing(contents, prefixes, False, last)

    def iter_objects(self, bucket: str, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in S3's order."""
        self.head_bucket(bucket)
        for _kind, key in self._entries(bucket, prefix, "", ""):
            info = self._info_or_none(bucket, key)
            if info is not None:
                yield info

    def resolve(self, uri: str) -> Path:
        """See :func:`resolve`."""
        bucket, key = parse_uri(uri)
        try:
            check_bucket_name(bucket)
            self.head_bucket(bucket)
        except S3Error:
            raise ValidationException(f"No S3 bucket {bucket!r} for {uri}: create it (aws s3 mb s3://{bucket}) "
                                      "and upload the data first.") from None
        if not key:
            return self._bucket_dir(bucket)
        problem = _key_problem(key)
        if problem:
            raise ValidationException(f"{uri} cannot name a local file: {problem}.")
        exact = self._data_path(bucket, key)
        if exact.is_file() or (key.endswith("/") and exact.is_dir()):
            return exact
        folder = self._data_path(bucket, key.rstrip("/"))
        if folder.is_dir():
            return folder
        if any(True for _ in self._entries(bucket, key, "", "")):
            raise ValidationException(f"{uri} is a prefix of keys but not a folder of them: end the prefix at a '/' "
                                      "(s3://BUCKET/FOLDER/) so its objects sit under one folder.")
        raise ValidationException(f"No S3 object or prefix at {uri}: upload the data first (aws s3 cp ... {uri}).")

    # -- multipart uploads -----------------------------------------------------------------

    def create_multipart_upload(self, bucket: str, key: str, *, content_type: str | None = None,
                                metadata: Mapping[str, str] | None = None,
                                headers: Mapping[str, str] | None = None) -> str:
        self._check(bucket, key)
        self.head_bucket(bucket)
        self._ready()
        upload_id = secrets.token_urlsafe(32)
        directory = self._uploads / upload_id
        directory.mkdir(mode=0o700)
        self._write_json(directory / "upload.json", {
            "id": upload_id, "bucket": bucket, "key": key, "initiated": datetime.now(UTC).timestamp(),
            "content_type": content_type, "metadata": dict(metadata or {}), "headers": dict(headers or {}),
        })
        return upload_id

    def upload_part(self, bucket: str, key: str, upload_id: str, part_number: int, staged: StagedFile) -> str:
        """Keep the staged bytes as part ``part_number`` (1 to 10000; a part sent again replaces the
        first); its ETag, the MD5 of its bytes, quoted."""
        self._upload(bucket, key, upload_id)
        if not 1 <= part_number <= PART_NUMBER_MOST:
            raise S3Error(f"Part number must be an integer between 1 and {PART_NUMBER_MOST}, inclusive.",
                          code="InvalidArgument", key=key)
        staged.close()
        try:
            os.replace(staged.path, self._uploads / upload_id / f"part-{part_number:05d}")
            staged.committed = True
        except FileNotFoundError:
            raise self._no_upload(upload_id, key) from None  # aborted meanwhile
        return f'"{staged.md5_hex}"'

    def complete_multipart_upload(self, bucket: str, key: str, upload_id: str,
                                  parts: Sequence[tuple[int, str]]) -> ObjectInfo:
        """Join the listed parts (number, ETag) into the object; the upload is then gone. The ETag
        is S3's for a multipart upload: the MD5 of the parts' MD5 digests, then ``-`` and their count."""
        record = self._upload(bucket, key, upload_id)
        _check_part_list(parts, key)
        claimed = self._uploads / f"{upload_id}.completing"
        try:
            os.rename(self._uploads / upload_id, claimed)  # one completion wins
        except FileNotFoundError:
            raise self._no_upload(upload_id, key) from None
        try:
            with self.staging() as staged:
                digests = self._join_parts(claimed, parts, staged, key)
                etag = f'"{hashlib.md5(b"".join(digests)).hexdigest()}-{len(parts)}"'
                info = self.commit(staged, bucket, key, content_type=record.get("content_type"),
                                   metadata=record.get("metadata"), headers=record.get("headers"), etag=etag)
        except BaseException:
            os.rename(claimed, self._uploads / upload_id)  # the client may fix its list and complete again
            raise
        shutil.rmtree(claimed, ignore_errors=True)
        return info

    def abort_multipart_upload(self, bucket: str, key: str, upload_id: str) -> None:
        self._upload(bucket, key, upload_id)
        try:
            shutil.rmtree(self._uploads / upload_id)
        except FileNotFoundError:
            raise self._no_upload(upload_id, key) from None

    def head_upload(self, bucket: str, key: str, upload_id: str) -> UploadInfo:
        """The multipart upload ``upload_id`` of ``key``; NoSuchUpload when it is not (or no longer) there."""
        record = self._upload(bucket, key, upload_id)
        return UploadInfo(upload_id, bucket, key, datetime.fromtimestamp(float(record["initiated"]), UTC))

    def list_uploads(self, bucket: str) -> list[UploadInfo]:
        self.head_bucket(bucket)
        found = [UploadInfo(str(r["id"]), bucket, str(r["key"]), datetime.fromtimestamp(float(r["initiated"]), UTC))
                 for r in self._list_upload_records() if r.get("bucket") == bucket]
        return sorted(found, key=lambda upload: (upload.key, upload.initiated))

    def _join_parts(self, directory: Path, parts: Sequence[tuple[int, str]], staged: StagedFile,
                    key: str) -> list[bytes]:
        digests = []
        for index, (number, etag) in enumerate(parts):
            part = directory / f"part-{number:05d}"
            md5 = hashlib.md5()
            try:
                with open(part, "rb") as source:
                    while chunk := source.read(COPY_CHUNK_BYTES):
                        md5.update(chunk)
                        staged.write(chunk)
                    size = source.tell()
            except FileNotFoundError:
                raise self._invalid_part(number, key) from None
            if md5.hexdigest() != etag.strip('"').lower():
                raise self._invalid_part(number, key)
            if size < PART_LEAST_BYTES and index < len(parts) - 1:
                raise InvalidPart(f"Your proposed upload is smaller than the minimum allowed size: part {number} "
                                  f"has {size} bytes, and every part but the last needs {PART_LEAST_BYTES}.",
                                  code="EntityTooSmall", key=key)
            digests.append(md5.digest())
        return digests

    def _upload(self, bucket: str, key: str, upload_id: str) -> dict[str, Any]:
        self._check(bucket, key)
        self.head_bucket(bucket)
        record = self._read_json(self._uploads / upload_id / "upload.json") if _UPLOAD_ID.fullmatch(upload_id) else None
        if record is None or record.get("bucket") != bucket or record.get("key") != key:
            raise self._no_upload(upload_id, key)
        return record

    def _list_upload_records(self) -> list[dict[str, Any]]:
        if not self._uploads.is_dir():
            return []
        records = (self._read_json(self._uploads / entry.name / "upload.json") for entry in os.scandir(self._uploads)
                   if _UPLOAD_ID.fullmatch(entry.name))
        return [record for record in records if record is not None]

    # -- listing ---------------------------------------------------------------------------

    def _entries(self, bucket: str, prefix: str, delimiter: str, after: str) -> Iterator[tuple[str, str]]:
        """("key", key) and ("prefix", common prefix) in order, each once, all after ``after``."""
        skip = _rolled_up(after, prefix, delimiter)  # resuming after a common prefix: none of its keys again
        folders_roll_up = delimiter == "/"
        last_prefix = None
        for kind, name in self._walk(bucket, self._bucket_dir(bucket), "", prefix, after, skip, folders_roll_up):
            rolled = name if kind == "prefix" else _common_prefix(name, prefix, delimiter)
            if rolled is None:
                yield "key", name
            elif rolled != last_prefix and rolled != after:
                last_prefix = rolled
                yield "prefix", rolled

    def _walk(self, bucket: str, directory: Path, base: str, prefix: str, after: str, skip: str | None,
              folders_roll_up: bool) -> Iterator[tuple[str, str]]:
        """The keys under ``directory`` (whose keys start with ``base``) in order. A folder is sorted
        as its name and a slash, which puts every key under it where S3's order has it."""
        try:
            with os.scandir(directory) as scan:
                entries = []
                for entry in scan:
                    if entry.is_dir(follow_symlinks=False):
                        entries.append((base + entry.name + "/", True))
                    elif entry.is_file(follow_symlinks=False):
                        entries.append((base + entry.name, False))
        except (FileNotFoundError, NotADirectoryError):
            return
        for name, is_folder in sorted(entries):
            if _key_problem(name) or (skip is not None and name.startswith(skip)):
                continue
            if not is_folder:
                if name > after and name.startswith(prefix):
                    yield "key", name
                continue
            if not (name.startswith(prefix) or prefix.startswith(name)):
                continue
            if name <= after and not after.startswith(name):
                continue  # every key under it sorts before ``after``
            if folders_roll_up and name.startswith(prefix) and len(name) > len(prefix) and not after.startswith(name):
                yield "prefix", name
                continue
            if name > after and name.startswith(prefix) and self._sidecar_path(bucket, name).exists():
                yield "key", name  # a folder marker object
            yield from self._walk(bucket, directory / name[len(base):-1], name, prefix, after, skip, folders_roll_up)

    # -- paths and sidecars ----------------------------------------------------------------

    def _ready(self) -> None:
        config.make_private_dir(self.home)
        for directory in (self.root, self._meta, self._uploads, self._tmp):
            directory.mkdir(mode=0o700, exist_ok=True)

    def _check(self, bucket: str, key: str) -> None:
        check_bucket_name(bucket)
        check_key(key)

    def _bucket_dir(self, bucket: str) -> Path:
        return self.root / bucket

    def _data_path(self, bucket: str, key: str) -> Path:
        return self._bucket_dir(bucket).joinpath(*key.rstrip("/").split("/")) if key.rstrip("/") else \
            self._bucket_dir(bucket)

    def _sidecar_path(self, bucket: str, key: str) -> Path:
        digest = hashlib.sha256(key.encode()).hexdigest()
        return self._meta / bucket / digest[:2] / f"{digest}.json"

    def _body_path(self, bucket: str, key: str) -> Path:
        """Where an object's bytes are: the file its key names, or for a folder marker (a key that
        ends in '/', whose folder holds other keys) a file beside its sidecar."""
        return self._sidecar_path(bucket, key).with_suffix(".body") if key.endswith("/") else \
            self._data_path(bucket, key)

    def _make_parents(self, bucket: str, key: str) -> None:
        """Make the folders the key's file goes in, one level at a time under the bucket's folder (which
        this never makes: a bucket deleted meanwhile stays deleted)."""
        folder = self._bucket_dir(bucket)
        if not folder.is_dir():
            raise self._no_bucket(bucket)
        segments = key.split("/")[:-1]
        for segment in segments:
            folder = folder / segment
            try:
                folder.mkdir(mode=0o700)
            except FileExistsError:
                if not folder.is_dir():
                    raise self._conflict(key, f"{str(folder.relative_to(self._bucket_dir(bucket)))!r} is an object") \
                        from None
            except FileNotFoundError:
                raise self._no_bucket(bucket) from None
            except NotADirectoryError:
                raise self._conflict(key, "a part of its path is an object") from None
        if key.endswith("/"):
            self._sidecar_path(bucket, key).parent.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _write_sidecar(self, bucket: str, key: str, body: Path, etag: str, stored: _Stored) -> None:
        status = body.stat()
        sidecar = self._sidecar_path(bucket, key)
        sidecar.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._write_json(sidecar, {
            "key": key, "etag": etag, "size": status.st_size, "mtime_ns": status.st_mtime_ns, "inode": status.st_ino,
            "content_type": stored.content_type, "metadata": dict(stored.metadata), "headers": dict(stored.headers),
            "checksums": dict(stored.checksums),
        })

    def _info(self, bucket: str, key: str, path: Path, status: os.stat_result) -> ObjectInfo:
        modified = datetime.fromtimestamp(status.st_mtime_ns / 1e9, UTC)
        record = self._read_json(self._sidecar_path(bucket, key))
        if record is None or (record.get("size"), record.get("mtime_ns"), record.get("inode")) != \
                (status.st_size, status.st_mtime_ns, status.st_ino):
            return ObjectInfo(key, path, status.st_size, f'"{_file_md5(path)}"', modified)  # put there by hand
        return ObjectInfo(key, path, status.st_size, str(record["etag"]), modified,
                          record.get("content_type") or DEFAULT_CONTENT_TYPE, record.get("metadata") or {},
                          record.get("headers") or {}, record.get("checksums") or {})

    def _info_or_none(self, bucket: str, key: str) -> ObjectInfo | None:
        try:
            return self.head_object(bucket, key)
        except NoSuchKey:
            return None  # deleted since the folder was read

    def _prune(self, bucket: str, folder: Path) -> None:
        """Remove the folders a delete left empty, up to the bucket's (a folder marker's folder stays)."""
        top = self._bucket_dir(bucket)
        while folder != top and top in folder.parents:
            relative = folder.relative_to(top).as_posix() + "/"
            if self._sidecar_path(bucket, relative).exists():
                return
            try:
                folder.rmdir()
            except OSError:
                return
            folder = folder.parent

    def _write_json(self, path: Path, value: Mapping[str, Any]) -> None:
        descriptor, name = tempfile.mkstemp(dir=self._tmp if self._tmp.is_dir() else path.parent, prefix="meta-")
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                json.dump(value, handle)
            os.replace(name, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
            raise

    @staticmethod
    def _read_json(path: Path) -> dict[str, Any] | None:
        try:
            with open(path, encoding="utf-8") as handle:
                value = json.load(handle)
        except (FileNotFoundError, NotADirectoryError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    # -- errors ----------------------------------------------------------------------------

    @staticmethod
    def _no_bucket(bucket: str) -> NoSuchBucket:
        return NoSuchBucket("The specified bucket does not exist.", bucket=bucket)

    def _no_key(self, bucket: str, key: str) -> S3Error:
        self.head_bucket(bucket)  # NoSuchBucket first, as S3 answers
        return NoSuchKey("The specified key does not exist.", key=key)

    @staticmethod
    def _no_upload(upload_id: str, key: str) -> NoSuchUpload:
        return NoSuchUpload("The specified upload does not exist. The upload ID may be invalid, or the upload may "
                            "have been aborted or completed.", key=key, upload_id=upload_id)

    @staticmethod
    def _invalid_part(number: int, key: str) -> InvalidPart:
        return InvalidPart(f"One or more of the specified parts could not be found (part {number}). The part may "
                           "not have been uploaded, or the specified entity tag may not match the part's entity tag.",
                           key=key)

    @staticmethod
    def _conflict(key: str, why: str) -> InvalidObjectKey:
        return InvalidObjectKey(f"Object key {key!r} cannot be stored as a file here: {why}. The store keeps each "
                                "object at the path its key names, so a key cannot be both an object and a folder.",
                                key=key)


def _check_part_list(parts: Sequence[tuple[int, str]], key: str) -> None:
    if not parts:
        raise S3Error("The XML you provided was not well-formed or did not validate against our published schema: "
                      "a CompleteMultipartUpload lists at least one part.", code="MalformedXML", key=key)
    numbers = [number for number, _etag in parts]
    if any(later <= earlier for earlier, later in zip(numbers, numbers[1:], strict=False)):
        raise InvalidPart("The list of parts was not in ascending order. Parts must be ordered by part number.",
                          code="InvalidPartOrder", key=key)


def _common_prefix(key: str, prefix: str, delimiter: str) -> str | None:
    """The common prefix ``key`` is rolled up into: the prefix and what follows it up to the first delimiter."""
    if not delimiter:
        return None
    at = key.find(delimiter, len(prefix))
    return key[:at + len(delimiter)] if at >= 0 else None


def _rolled_up(after: str, prefix: str, delimiter: str) -> str | None:
    """``after`` when it is itself a common prefix (a page ended on it), so its keys are skipped."""
    if delimiter and after.startswith(prefix) and _common_prefix(after, prefix, delimiter) == after:
        return after
    return None


def _file_md5(path: Path) -> str:
    md5 = hashlib.md5()
    with open(path, "rb") as source:
        while chunk := source.read(COPY_CHUNK_BYTES):
            md5.update(chunk)
    return md5.hexdigest()
