"""S3's REST-XML protocol over the object store (:mod:`trainmon.store.objects`): the subset that
boto3, the AWS CLI and the SageMaker Python SDK use, path-style (``/bucket/key``).

The gateway (:mod:`trainmon.server.aws`) calls :func:`handle` for every request signed for S3,
once the signature is checked. A request is matched to an operation by its method, whether its
path names the service, a bucket or an object, and the subresource in its query (``?uploads``,
``?list-type=2``), as botocore's model of S3 lays them out; an operation trainmon does not serve
is answered ``NotImplemented`` with its name. Bodies stream both ways: a put is written to a temp
file as it arrives (``aws-chunked`` framing taken off, its checksum checked), a get is read from
the open file a megabyte at a time. Errors are S3's XML (none for HEAD, as S3 answers).
"""

from __future__ import annotations

import base64
import binascii
import functools
import logging
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime
from pathlib import Path
from typing import Any, BinaryIO, TypeVar
from urllib.parse import parse_qsl, quote, unquote
from xml.etree import ElementTree
from xml.sax.saxutils import escape

import anyio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from ...errors import InvalidRange, S3Error, TrainmonError
from ...store.objects import LIST_MOST_KEYS, Listing, ObjectInfo, ObjectStore, StagedFile, check_key
from .bodies import AwsChunked, Checksum, Payload, check_md5, incomplete

log = logging.getLogger(__name__)
T = TypeVar("T")

NAMESPACE = "http://s3.amazonaws.com/doc/2006-03-01/"
REGION = "us-east-1"
READ_CHUNK_BYTES = 1024 * 1024
XML_BODY_MOST_BYTES = 10 * 1024 * 1024
OWNER_ID = "trainmon"
# Query parameters that are an operation's members, not a subresource naming another operation.
_MEMBERS = frozenset({"prefix", "delimiter", "marker", "max-keys", "encoding-type", "list-type", "continuation-token",
                      "start-after", "fetch-owner", "versionId", "partNumber", "uploadId", "x-id", "max-uploads",
                      "key-marker", "upload-id-marker", "max-parts", "part-number-marker", "bucket-region",
                      "max-buckets"})
_SIGNATURE_V2 = frozenset({"AWSAccessKeyId", "Signature", "Expires"})
_STORED_HEADERS = ("cache-control", "content-disposition", "content-encoding", "content-language", "expires")
_RESPONSE_OVERRIDES = {"response-content-type": "content-type", "response-content-language": "content-language",
                       "response-expires": "expires", "response-cache-control": "cache-control",
                       "response-content-disposition": "content-disposition",
                       "response-content-encoding": "content-encoding"}


@dataclass(frozen=True)
class _Target:
    """What a request's path and query name."""

    bucket: str  # "" for the service (GET /)
    key: str  # "" for a bucket
    query: Mapping[str, str]

    @property
    def level(self) -> str:
        return "object" if self.key else "bucket" if self.bucket else "service"


class _Unserved(Exception):
    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


Handler = Callable[[Request, ObjectStore, _Target], Awaitable[Response]]


async def handle(request: Request, home: Path, payload: Payload) -> Response:
    """Serve one S3 request on the object store under ``home``; its body must be what ``payload``
    says its signature covers."""
    request.state.payload = payload
    request_id = secrets.token_hex(8).upper()
    target = _target(request)
    head = request.method == "HEAD"
    try:
        response = await _handler(request.method, target)(request, ObjectStore(home), target)
    except S3Error as exc:
        response = _error(exc.code, exc.message, exc.http_status, request_id, head, bucket=exc.bucket, key=exc.key,
                          upload_id=exc.upload_id, details=exc.details)
    except _Unserved as exc:
        response = _error(exc.code, exc.message, exc.status, request_id, head)
    except TrainmonError as exc:
        response = _error("InvalidArgument" if exc.http_status < 500 else "InternalError", exc.message,
                          400 if exc.http_status < 500 else 500, request_id, head)
    except Exception:  # the server's own fault: its text (files, settings) stays in the log
        log.exception("request %s: S3 %s %s failed", request_id, request.method, request.scope["path"])
        response = _error("InternalError", f"trainmon failed on this request (request {request_id} in its log)",
                          500, request_id, head)
    response.headers["x-amz-request-id"] = request_id
    response.headers["x-amz-id-2"] = request_id
    if response.status_code >= 300 and _has_body(request):
        # Answered before the body was read (botocore sends Expect: 100-continue and then no body): what is left of
        # it on the connection would be read as the next request, so the connection ends here.
        response.headers["connection"] = "close"
    return response


def _has_body(request: Request) -> bool:
    return request.headers.get("content-length", "0") != "0" or "transfer-encoding" in request.headers


# -- routing ----------------------------------------------------------------------------------


def _target(request: Request) -> _Target:
    bucket, _, key = str(request.scope["path"]).lstrip("/").partition("/")  # decoded: a key may hold '?' or '#'
    pairs = parse_qsl(request.scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    query: dict[str, str] = {}
    for name, value in pairs:
        if not name.lower().startswith("x-amz-") and name not in _SIGNATURE_V2:  # a presigned URL's signature
            query.setdefault(name, value)
    return _Target(bucket, key, query)


def _handler(method: str, target: _Target) -> Handler:
    subresources = [name for name in target.query if name not in _MEMBERS and not name.startswith("response-")]
    marker = subresources[0] if subresources else "uploadId" if "uploadId" in target.query else \
        "list-type" if target.query.get("list-type") == "2" else ""
    found = _SERVED.get((method, target.level, marker))
    if found is not None:
        return found
    name = _UNSERVED.get((method, target.level, marker))
    if name is None and subresources:
        name = _model_operation(method, target.level, set(subresources))
    if name is None:
        raise _Unserved("MethodNotAllowed", "The specified method is not allowed against this resource.", 405)
    raise _Unserved("NotImplemented", f"trainmon's S3 does not implement {name}: it serves "
                    f"{', '.join(sorted(_SERVED_NAMES))}.", 501)


@functools.cache
def _model_routes() -> tuple[tuple[str, str, frozenset[str], str], ...]:
    """(method, level, subresources, operation) for every operation in botocore's model of S3."""
    try:
        import botocore.session
    except ImportError:
        return ()
    model = botocore.session.get_session().get_service_model("s3")
    routes = []
    for name in model.operation_names:
        http = model.operation_model(name).http
        path, _, query = str(http["requestUri"]).partition("?")
        level = "service" if path == "/" else "object" if "{Key+}" in path else "bucket"
        keys = frozenset(part.partition("=")[0] for part in query.split("&") if part)
        routes.append((str(http["method"]), level, keys, name))
    return tuple(routes)


def _model_operation(method: str, level: str, subresources: set[str]) -> str:
    """The name of the operation a request with these subresources would be, in botocore's model."""
    fits = [(len(keys), name) for route_method, route_level, keys, name in _model_routes()
            if route_method == method and route_level == level and keys and keys <= subresources]
    if fits:
        return max(fits, key=lambda fit: fit[0])[1]
    return f"{method} ?{'&'.join(sorted(subresources))}"


# -- buckets ----------------------------------------------------------------------------------


async def _list_buckets(request: Request, store: ObjectStore, target: _Target) -> Response:
    buckets = await _run(store.list_buckets)
    items = "".join(_element("Bucket", _text("Name", bucket.name), _text("CreationDate", _iso(bucket.created)),
                             _text("BucketRegion", bucket.region or REGION)) for bucket in buckets)
    return _xml("ListAllMyBucketsResult", _owner(), _element("Buckets", items))


async def _create_bucket(request: Request, store: ObjectStore, target: _Target) -> Response:
    body = await _small_body(request)
    region = None
    if body.strip():
        found = _parse_xml(body).find("LocationConstraint")
        region = (found.text or "").strip() or None if found is not None else None
    await _run(store.create_bucket, target.bucket, region=region)
    return Response(b"", 200, {"location": f"/{target.bucket}"})


async def _head_bucket(request: Request, store: ObjectStore, target: _Target) -> Response:
    bucket = await _run(store.head_bucket, target.bucket)
    return Response(b"", 200, {"x-amz-bucket-region": bucket.region or REGION})


async def _delete_bucket(request: Request, store: ObjectStore, target: _Target) -> Response:
    await _run(store.delete_bucket, target.bucket)
    return Response(b"", 204)


async def _get_bucket_location(request: Request, store: ObjectStore, target: _Target) -> Response:
    bucket = await _run(store.head_bucket, target.bucket)
    return _xml("LocationConstraint", escape(bucket.region or ""))


async def _list_objects_v2(request: Request, store: ObjectStore, target: _Target) -> Response:
    query = target.query
    token = query.get("continuation-token")
    after = _token_key(token) if token is not None else query.get("start-after", "")
    listing, encode = await _listing(store, target, after)
    items = [_text("Name", target.bucket), _text("Prefix", encode(query.get("prefix", "")))]
    if token is not None:
        items.append(_text("ContinuationToken", token))
    if listing.is_truncated and listing.last is not None:
        items.append(_text("NextContinuationToken", _token(listing.last)))
    items += [_text("KeyCount", str(len(listing.contents) + len(listing.common_prefixes))),
              _text("MaxKeys", str(_max_keys(query))), _text("IsTruncated", _bool(listing.is_truncated))]
    if "start-after" in query:
        items.append(_text("StartAfter", encode(query["start-after"])))
    return _xml("ListBucketResult", *items, *_listing_items(listing, query, encode, query.get("fetch-owner") == "true"))


async def _list_objects(request: Request, store: ObjectStore, target: _Target) -> Response:
    query = target.query
    listing, encode = await _listing(store, target, query.get("marker", ""))
    items = [_text("Name", target.bucket), _text("Prefix", encode(query.get("prefix", ""))),
             _text("Marker", encode(query.get("marker", ""))), _text("MaxKeys", str(_max_keys(query))),
             _text("IsTruncated", _bool(listing.is_truncated))]
    if listing.is_truncated and listing.last is not None and query.get("delimiter"):
        items.append(_text("NextMarker", encode(listing.last)))  # without a delimiter, the last key is the marker
    return _xml("ListBucketResult", *items, *_listing_items(listing, query, encode, True))


async def _listing(store: ObjectStore, target: _Target, after: str) -> tuple[Listing, Callable[[str], str]]:
    query = target.query
    encoding = query.get("encoding-type")
    if encoding not in (None, "url"):
        raise S3Error("Invalid Encoding Method specified in Request", code="InvalidArgument")
    listing = await _run(lambda: store.list_objects(target.bucket, prefix=query.get("prefix", ""),
                                                    delimiter=query.get("delimiter", ""), after=after,
                                                    max_keys=_max_keys(query)))
    return listing, (lambda value: quote(value, safe="/")) if encoding == "url" else (lambda value: value)


def _listing_items(listing: Listing, query: Mapping[str, str], encode: Callable[[str], str],
                   owner: bool) -> list[str]:
    items = []
    if query.get("delimiter"):
        items.append(_text("Delimiter", encode(query["delimiter"])))
    if query.get("encoding-type") == "url":
        items.append(_text("EncodingType", "url"))
    for info in listing.contents:
        items.append(_element("Contents", _text("Key", encode(info.key)), _text("LastModified", _iso(info.last_modified)),
                              _text("ETag", info.etag), _text("Size", str(info.size_bytes)),
                              _owner() if owner else "", _text("StorageClass", "STANDARD")))
    items += [_element("CommonPrefixes", _text("Prefix", encode(prefix))) for prefix in listing.common_prefixes]
    return items


def _max_keys(query: Mapping[str, str]) -> int:
    raw = query.get("max-keys", str(LIST_MOST_KEYS))
    if not raw.isdigit():
        raise S3Error(f"Provided max-keys not an integer or within integer range: {raw!r}", code="InvalidArgument")
    return min(int(raw), LIST_MOST_KEYS)


def _token(last: str) -> str:
    return base64.urlsafe_b64encode(last.encode()).decode()


def _token_key(token: str) -> str:
    try:
        return base64.urlsafe_b64decode(token.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise S3Error("The continuation token provided is incorrect", code="InvalidArgument") from None


async def _delete_objects(request: Request, store: ObjectStore, target: _Target) -> Response:
    document = _parse_xml(await _small_body(request))
    quiet = (document.findtext("Quiet") or "").strip().lower() == "true"
    keys = [element.findtext("Key") or "" for element in document.findall("Object")]
    if len(keys) > 1000:
        raise S3Error("The XML you provided was not well-formed or did not validate against our published schema: "
                      "at most 1000 keys a request.", code="MalformedXML")
    await _run(store.head_bucket, target.bucket)

    def delete_each() -> list[str]:
        results = []
        for key in keys:
            try:
                store.delete_object(target.bucket, key)
            except S3Error as exc:
                results.append(_element("Error", _text("Key", key), _text("Code", exc.code),
                                        _text("Message", exc.message)))
                continue
            if not quiet:
                results.append(_element("Deleted", _text("Key", key)))
        return results

    return _xml("DeleteResult", *await _run(delete_each))


# -- objects ----------------------------------------------------------------------------------


async def _put_object(request: Request, store: ObjectStore, target: _Target) -> Response:
    if "x-amz-copy-source" in request.headers:
        return await _copy_object(request, store, target)
    await _run(store.head_bucket, target.bucket)
    check_key(target.key)
    staged, checksum = await _receive(request, store)
    with staged:
        headers = _stored_headers(request)
        info = await _run(lambda: store.commit(staged, target.bucket, target.key, content_type=headers.pop(
            "content-type", None), metadata=_metadata(request), headers=headers, checksums=checksum.stored()))
    return Response(b"", 200, {"etag": info.etag, **checksum.reply()})


async def _copy_object(request: Request, store: ObjectStore, target: _Target) -> Response:
    source = unquote(request.headers["x-amz-copy-source"].split("?", 1)[0]).lstrip("/")  # ?versionId=...
    source_bucket, _, source_key = source.partition("/")
    await _run(store.head_bucket, target.bucket)
    check_key(target.key)
    replace = request.headers.get("x-amz-metadata-directive", "COPY").upper() == "REPLACE"

    def copy() -> ObjectInfo:
        handle, info = store.open_object(source_bucket, source_key)
        with handle, store.staging() as staged:
            staged.write_from(handle)
            headers = _stored_headers(request) if replace else dict(info.headers)
            content_type = headers.pop("content-type", None) if replace else info.content_type
            metadata = _metadata(request) if replace else info.metadata
            return store.commit(staged, target.bucket, target.key, content_type=content_type, metadata=metadata,
                                headers=headers)

    info = await _run(copy)
    return _xml("CopyObjectResult", _text("LastModified", _iso(info.last_modified)), _text("ETag", info.etag))


async def _get_object(request: Request, store: ObjectStore, target: _Target) -> Response:
    handle, info = await _run(store.open_object, target.bucket, target.key)
    try:
        reply = _conditional(request, info)
        if reply is not None:
            handle.close()
            return reply
        span = _range(request.headers.get("range"), info.size_bytes, target.key)
        headers = _object_headers(request, info, target.query, span)
        start, length = span or (0, info.size_bytes)
        return _ObjectBody(handle, start, length, 206 if span else 200, headers)
    except BaseException:
        handle.close()
        raise


async def _head_object(request: Request, store: ObjectStore, target: _Target) -> Response:
    info = await _run(store.head_object, target.bucket, target.key)
    reply = _conditional(request, info)
    if reply is not None:
        return reply
    span = _range(request.headers.get("range"), info.size_bytes, target.key)
    return Response(b"", 206 if span else 200, _object_headers(request, info, target.query, span))


async def _delete_object(request: Request, store: ObjectStore, target: _Target) -> Response:
    await _run(store.delete_object, target.bucket, target.key)
    return Response(b"", 204)


def _object_headers(request: Request, info: ObjectInfo, query: Mapping[str, str],
                    span: tuple[int, int] | None) -> dict[str, str]:
    headers = {"etag": info.etag, "last-modified": _http_date(info.last_modified), "accept-ranges": "bytes",
               "content-type": info.content_type, **info.headers}
    headers.update({f"x-amz-meta-{name}": value for name, value in info.metadata.items()})
    if "-" in info.etag:
        headers["x-amz-mp-parts-count"] = info.etag.strip('"').rsplit("-", 1)[1]
    if span is None:
        headers["content-length"] = str(info.size_bytes)
        if request.headers.get("x-amz-checksum-mode", "").upper() == "ENABLED":
            headers.update({f"x-amz-checksum-{name.lower()}": value for name, value in info.checksums.items()})
            if info.checksums:
                headers["x-amz-checksum-type"] = "FULL_OBJECT"
    else:
        start, length = span
        headers["content-length"] = str(length)
        headers["content-range"] = f"bytes {start}-{start + length - 1}/{info.size_bytes}"
    for name, header in _RESPONSE_OVERRIDES.items():
        if name in query:
            headers[header] = query[name]
    return _inert(headers)


# What a browser would run or render as a document of the console's origin (HTML, SVG, XML, scripts,
# PDF): such an object is always a download, however it was stored or asked for.
_ACTIVE = re.compile(r"html|xml|svg|javascript|ecmascript|pdf|x-mixed-replace|^\s*$", re.IGNORECASE)


def _inert(headers: dict[str, str]) -> dict[str, str]:
    """An object's answer made harmless to the console, whose origin it shares: a sandbox that runs
    nothing and loads nothing (with nosniff, on every answer of the server), and a download for the
    types a browser would show as a page."""
    headers["content-security-policy"] = "default-src 'none'; sandbox"
    disposition = headers.get("content-disposition", "")
    if _ACTIVE.search(headers.get("content-type", "")) and not disposition.lower().startswith("attachment"):
        headers["content-disposition"] = "attachment"
    return headers


def _range(header: str | None, size_bytes: int, key: str) -> tuple[int, int] | None:
    """(start, length) of a ``Range: bytes=a-b`` header; None for the whole object (no header, or one
    S3 ignores: not bytes, several ranges, not numbers)."""
    if header is None or not header.startswith("bytes=") or "," in header:
        return None
    first, dash, last = header[len("bytes="):].strip().partition("-")
    if not dash or not (first.isdigit() or last.isdigit()) or (first and not first.isdigit()) or \
            (last and not last.isdigit()):
        return None
    if not first:  # the last N bytes
        length = min(int(last), size_bytes)
        if length == 0:
            raise _invalid_range(header, size_bytes, key)
        return size_bytes - length, length
    start = int(first)
    end = min(int(last), size_bytes - 1) if last else size_bytes - 1
    if start >= size_bytes or (last and int(last) < start):
        raise _invalid_range(header, size_bytes, key)
    return start, end - start + 1


def _invalid_range(header: str, size_bytes: int, key: str) -> InvalidRange:
    return InvalidRange("The requested range is not satisfiable", key=key,
                        details={"RangeRequested": header, "ActualObjectSize": str(size_bytes)})


def _conditional(request: Request, info: ObjectInfo) -> Response | None:
    """304 or 412 when the request's If-* headers say so (S3's order of precedence), else None."""
    headers = request.headers
    etag = info.etag.strip('"')
    modified = info.last_modified.replace(microsecond=0)
    match = headers.get("if-match")
    since = _parse_http_date(headers.get("if-unmodified-since"))
    if (match is not None and not {etag, "*"} & _etags(match)) or (match is None and since is not None and
                                                                  modified > since):
        raise S3Error("At least one of the pre-conditions you specified did not hold", code="PreconditionFailed",
                      http_status=412)
    none_match = headers.get("if-none-match")
    modified_since = _parse_http_date(headers.get("if-modified-since"))
    if (none_match is not None and {etag, "*"} & _etags(none_match)) or (none_match is None and modified_since is not
                                                                        None and modified <= modified_since):
        return Response(b"", 304, {"etag": info.etag, "last-modified": _http_date(info.last_modified)})
    return None


def _etags(header: str) -> set[str]:
    return {tag.strip().removeprefix("W/").strip('"') for tag in header.split(",")}


class _ObjectBody(StreamingResponse):
    """An open object's bytes from ``start``, ``length`` of them, read a megabyte at a time; the file is
    closed when the reply ends, however it ends."""

    def __init__(self, handle: BinaryIO, start: int, length: int, status: int, headers: Mapping[str, str]) -> None:
        self._handle = handle
        super().__init__(self._chunks(start, length), status, headers)

    async def _chunks(self, start: int, length: int) -> AsyncIterator[bytes]:
        await _run(self._handle.seek, start)
        left = length
        while left > 0:
            chunk = await _run(self._handle.read, min(left, READ_CHUNK_BYTES))
            if not chunk:
                return  # the file was cut short underneath (by hand): the client sees the length is wrong
            left -= len(chunk)
            yield chunk

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._handle.close()


# -- multipart uploads ------------------------------------------------------------------------


async def _create_multipart_upload(request: Request, store: ObjectStore, target: _Target) -> Response:
    headers = _stored_headers(request)
    upload_id = await _run(lambda: store.create_multipart_upload(
        target.bucket, target.key, content_type=headers.pop("content-type", None), metadata=_metadata(request),
        headers=headers))
    reply = {name: request.headers[name] for name in ("x-amz-checksum-algorithm", "x-amz-checksum-type")
             if name in request.headers}
    body = _xml("InitiateMultipartUploadResult", _text("Bucket", target.bucket), _text("Key", target.key),
                _text("UploadId", upload_id))
    body.headers.update(reply)
    return body


async def _upload_part(request: Request, store: ObjectStore, target: _Target) -> Response:
    if "x-amz-copy-source" in request.headers:
        raise _Unserved("NotImplemented", "trainmon's S3 does not implement UploadPartCopy.", 501)
    raw = target.query.get("partNumber", "")
    if not raw.isdigit():
        raise S3Error(f"Part number must be an integer between 1 and 10000, inclusive: {raw!r}.",
                      code="InvalidArgument")
    upload_id = target.query["uploadId"]
    await _run(store.head_upload, target.bucket, target.key, upload_id)  # before a body that would go nowhere
    staged, checksum = await _receive(request, store)
    with staged:
        etag = await _run(store.upload_part, target.bucket, target.key, upload_id, int(raw), staged)
    return Response(b"", 200, {"etag": etag, **checksum.reply()})


async def _complete_multipart_upload(request: Request, store: ObjectStore, target: _Target) -> Response:
    document = _parse_xml(await _small_body(request))
    parts = []
    for part in document.findall("Part"):
        number = (part.findtext("PartNumber") or "").strip()
        if not number.isdigit():
            raise S3Error("The XML you provided was not well-formed or did not validate against our published "
                          f"schema: PartNumber {number!r}.", code="MalformedXML")
        parts.append((int(number), (part.findtext("ETag") or "").strip()))
    info = await _run(store.complete_multipart_upload, target.bucket, target.key, target.query["uploadId"], parts)
    location = f"{request.base_url}{quote(target.bucket)}/{quote(target.key)}"
    return _xml("CompleteMultipartUploadResult", _text("Location", location), _text("Bucket", target.bucket),
                _text("Key", target.key), _text("ETag", info.etag))


async def _abort_multipart_upload(request: Request, store: ObjectStore, target: _Target) -> Response:
    await _run(store.abort_multipart_upload, target.bucket, target.key, target.query["uploadId"])
    return Response(b"", 204)


async def _list_multipart_uploads(request: Request, store: ObjectStore, target: _Target) -> Response:
    uploads = await _run(store.list_uploads, target.bucket)
    prefix = target.query.get("prefix", "")
    items = [_element("Upload", _text("Key", upload.key), _text("UploadId", upload.upload_id),
                      _text("Initiated", _iso(upload.initiated)), _text("StorageClass", "STANDARD"))
             for upload in uploads if upload.key.startswith(prefix)]
    return _xml("ListMultipartUploadsResult", _text("Bucket", target.bucket), _text("Prefix", prefix),
                _text("MaxUploads", "1000"), _text("IsTruncated", "false"), *items)


# -- request bodies ---------------------------------------------------------------------------


async def _receive(request: Request, store: ObjectStore) -> tuple[StagedFile, Checksum]:
    """The request's body in a staged file, its framing off and its digests checked."""
    headers = request.headers
    payload: Payload = request.state.payload
    chunked = payload.chunked or "aws-chunked" in headers.get("content-encoding", "")
    decoder = AwsChunked(payload.signatures) if chunked else None
    checksum = Checksum.of(request)
    staged = await _run(store.staging)
    try:
        async for piece in request.stream():
            payload.update(piece)
            for data in decoder.feed(piece) if decoder is not None else [piece]:
                staged.write(data)
                checksum.update(data)
        payload.verify()
        checksum.verify(decoder.finish() if decoder is not None else {})
        declared = headers.get("x-amz-decoded-content-length") if chunked else headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) != staged.size_bytes:
            raise incomplete(f"{staged.size_bytes} bytes came, {declared} were declared")
        check_md5(headers.get("content-md5"), staged)
    except BaseException:
        staged.discard()
        raise
    return staged, checksum


async def _small_body(request: Request) -> bytes:
    payload: Payload = request.state.payload
    data = bytearray()
    async for piece in request.stream():
        data += piece
        payload.update(piece)
        if len(data) > XML_BODY_MOST_BYTES:
            raise S3Error("Your request was too big.", code="MaxMessageLengthExceeded")
    payload.verify()
    if payload.chunked or "aws-chunked" in request.headers.get("content-encoding", ""):
        decoder = AwsChunked(payload.signatures)
        decoded = b"".join(decoder.feed(bytes(data)))
        decoder.finish()
        return decoded
    return bytes(data)


def _parse_xml(body: bytes) -> ElementTree.Element:
    """An XML request body, namespaces taken off its tags. Documents with a DTD are refused (no entity
    can expand)."""
    if b"<!DOCTYPE" in body or b"<!ENTITY" in body:
        raise _malformed()
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError:
        raise _malformed() from None
    for element in root.iter():
        element.tag = element.tag.rsplit("}", 1)[-1]
    return root


def _malformed() -> S3Error:
    return S3Error("The XML you provided was not well-formed or did not validate against our published schema.",
                   code="MalformedXML")


def _stored_headers(request: Request) -> dict[str, str]:
    """The headers S3 keeps with an object (Content-Type among them), aws-chunked taken off Content-Encoding."""
    headers = {name: request.headers[name] for name in _STORED_HEADERS if name in request.headers}
    if "content-encoding" in headers:
        kept = [part.strip() for part in headers["content-encoding"].split(",") if part.strip() != "aws-chunked"]
        headers["content-encoding"] = ", ".join(kept)
        if not kept:
            del headers["content-encoding"]
    if "content-type" in request.headers:
        headers["content-type"] = request.headers["content-type"]
    return headers


def _metadata(request: Request) -> dict[str, str]:
    return {name.removeprefix("x-amz-meta-"): value for name, value in request.headers.items()
            if name.startswith("x-amz-meta-")}


# -- replies ----------------------------------------------------------------------------------


def _xml(root: str, *children: str) -> Response:
    body = f'<?xml version="1.0" encoding="UTF-8"?>\n<{root} xmlns="{NAMESPACE}">{"".join(children)}</{root}>'
    return Response(body.encode(), 200, media_type="application/xml")


def _element(name: str, *children: str) -> str:
    return f"<{name}>{''.join(children)}</{name}>"


def _text(name: str, value: str) -> str:
    return f"<{name}>{escape(value)}</{name}>"


def _owner() -> str:
    return _element("Owner", _text("ID", OWNER_ID), _text("DisplayName", OWNER_ID))


def _error(code: str, message: str, status: int, request_id: str, head: bool, *, bucket: str | None = None,
           key: str | None = None, upload_id: str | None = None, details: Mapping[str, str] | None = None) -> Response:
    if head:
        return Response(b"", status)
    named = [("BucketName", bucket), ("Key", key), ("UploadId", upload_id), *(details or {}).items()]
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error>{_text("Code", code)}{_text("Message", message)}'
            + "".join(_text(name, value) for name, value in named if value is not None)
            + f"{_text('RequestId', request_id)}{_text('HostId', request_id)}</Error>")
    return Response(body.encode(), status, media_type="application/xml")


def _iso(moment: datetime) -> str:
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _http_date(moment: datetime) -> str:
    return format_datetime(moment.astimezone(UTC).replace(microsecond=0), usegmt=True)


def _parse_http_date(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _bool(value: bool) -> str:
    return "true" if value else "false"


async def _run(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """A store call (files, hashing) off the event loop."""
    return await anyio.to_thread.run_sync(functools.partial(function, *args, **kwargs))


_SERVED: dict[tuple[str, str, str], Handler] = {
    ("GET", "service", ""): _list_buckets,
    ("PUT", "bucket", ""): _create_bucket,
    ("HEAD", "bucket", ""): _head_bucket,
    ("DELETE", "bucket", ""): _delete_bucket,
    ("GET", "bucket", "location"): _get_bucket_location,
    ("GET", "bucket", "list-type"): _list_objects_v2,
    ("GET", "bucket", ""): _list_objects,
    ("GET", "bucket", "uploads"): _list_multipart_uploads,
    ("POST", "bucket", "delete"): _delete_objects,
    ("PUT", "object", ""): _put_object,
    ("GET", "object", ""): _get_object,
    ("HEAD", "object", ""): _head_object,
    ("DELETE", "object", ""): _delete_object,
    ("POST", "object", "uploads"): _create_multipart_upload,
    ("PUT", "object", "uploadId"): _upload_part,
    ("POST", "object", "uploadId"): _complete_multipart_upload,
    ("DELETE", "object", "uploadId"): _abort_multipart_upload,
}
_SERVED_NAMES = ("ListBuckets", "CreateBucket", "HeadBucket", "DeleteBucket", "GetBucketLocation", "ListObjectsV2",
                 "ListObjects", "ListMultipartUploads", "DeleteObjects", "PutObject", "CopyObject", "GetObject",
                 "HeadObject", "DeleteObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload",
                 "AbortMultipartUpload")
_UNSERVED = {("GET", "object", "uploadId"): "ListParts", ("HEAD", "object", "uploadId"): "ListParts"}
