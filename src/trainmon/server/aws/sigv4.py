"""AWS Signature Version 4, checked on the server: the request's canonical form rebuilt from what
arrived, signed again with the secret of the key it names, compared with the signature it carries.

The canonical request is AWS's: method, the path (encoded once more for every service but S3),
the query's pairs encoded and sorted, the signed headers (names lowercased, values trimmed), their
names, and the payload's SHA-256 (``x-amz-content-sha256`` when the client sent one, as S3's
clients do; presigned URLs sign ``UNSIGNED-PAYLOAD``). A signature's date must be within 15
minutes of the server's clock, as AWS requires.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote, unquote

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_SKEW_S = 15 * 60
MAX_PRESIGNED_S = 7 * 86_400  # a presigned URL lives a week at most, as on AWS
UNSIGNED = "UNSIGNED-PAYLOAD"
SIGNED_CHUNKS = ("STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER")
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()

_AUTHORIZATION = re.compile(
    r"AWS4-HMAC-SHA256\s+Credential=(?P<credential>[^,\s]+),\s*SignedHeaders=(?P<headers>[^,\s]+),"
    r"\s*Signature=(?P<signature>[0-9a-f]{64})\s*$")


class SignatureError(Exception):
    """Why a request's signature is not good: ``reason`` is one of ``missing``, ``malformed``,
    ``unknown-key``, ``mismatch``, ``expired`` and ``query-parameters`` (a presigned URL's that
    cannot be); each protocol words it as AWS does."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Signed:
    """What a request's signature claims: who, where and when."""

    access_key: str
    date: str  # YYYYMMDD
    region: str
    service: str
    amz_date: str  # YYYYMMDDTHHMMSSZ
    signed_headers: tuple[str, ...]
    signature: str
    presigned: bool = False
    expires_s: int | None = None

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/aws4_request"


def signing_key(secret: str, signed: Signed) -> bytes:
    key = f"AWS4{secret}".encode()
    for part in (signed.date, signed.region, signed.service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


@dataclass
class ChunkSignatures:
    """The signatures of a ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD`` body's chunks, each chaining the one
    before it (the first, the request's own): each signs the SHA-256 of its chunk's bytes; with
    ``-TRAILER``, a last one (``x-amz-trailer-signature``) signs the trailer lines."""

    key: bytes
    amz_date: str
    scope: str
    previous: str  # the request's signature, then each chunk's in turn
    trailer_expected: bool = False

    @classmethod
    def of(cls, signed: Signed, secret: str, payload: str) -> ChunkSignatures:
        return cls(signing_key(secret, signed), signed.amz_date, signed.scope, signed.signature,
                   payload.endswith("-TRAILER"))

    def check_chunk(self, given: str, data_sha256: str) -> None:
        self._check(given, "AWS4-HMAC-SHA256-PAYLOAD", EMPTY_SHA256, data_sha256)

    def check_trailer(self, given: str, trailer_lines: str) -> None:
        self._check(given, "AWS4-HMAC-SHA256-TRAILER", hashlib.sha256(trailer_lines.encode()).hexdigest())

    def _check(self, given: str, algorithm: str, *hashes: str) -> None:
        to_sign = "\n".join((algorithm, self.amz_date, self.scope, self.previous, *hashes))
        expected = hmac.new(self.key, to_sign.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, given):
            raise SignatureError("mismatch", "The request signature we calculated does not match the signature you "
                                             "provided: a chunk of the body is not the one that was signed.")
        self.previous = expected


def claimed(headers: dict[str, str], query: list[tuple[str, str]]) -> Signed | None:
    """The signature a request carries (in its Authorization header or, presigned, in its query),
    or None when it carries none. ``headers`` are lowercased names."""
    authorization = headers.get("authorization", "")
    if authorization.startswith(ALGORITHM):
        found = _AUTHORIZATION.match(authorization)
        if found is None:
            raise SignatureError("malformed", "the Authorization header is not a Signature Version 4 one")
        return _signed(found["credential"], found["headers"], found["signature"], headers.get("x-amz-date", ""))
    fields = dict(query)
    if fields.get("X-Amz-Algorithm") == ALGORITHM:
        try:
            signed = _signed(fields["X-Amz-Credential"], fields["X-Amz-SignedHeaders"], fields["X-Amz-Signature"],
                             fields["X-Amz-Date"])
            expires_text = fields.get("X-Amz-Expires", str(MAX_PRESIGNED_S))
            expires = int(expires_text) if expires_text.isdigit() and len(expires_text) <= 7 else -1
        except KeyError:
            raise SignatureError("malformed", "a presigned URL needs X-Amz-Credential, X-Amz-SignedHeaders, "
                                              "X-Amz-Signature and X-Amz-Date") from None
        if not 1 <= expires <= MAX_PRESIGNED_S:
            raise SignatureError("query-parameters", "X-Amz-Expires must be a whole number of seconds from 1 to "
                                 f"{MAX_PRESIGNED_S} (a week)")
        return Signed(**{**signed.__dict__, "presigned": True, "expires_s": expires})
    return None


def verify_presigned_v2(method: str, raw_path: str, query: list[tuple[str, str]], headers: dict[str, str],
                        secret_for: Callable[[str], str | None], now: float | None = None) -> None:
    """An S3 URL presigned with Signature Version 2 (``AWSAccessKeyId``, ``Expires``,
    ``Signature``: what boto3's ``generate_presigned_url`` gives for S3 by default): the HMAC-SHA1
    of the method, Content-MD5, Content-Type, the expiry and the resource (the path as sent, with
    the subresources it names)."""
    fields = dict(query)
    secret = secret_for(fields.get("AWSAccessKeyId", ""))
    if secret is None:
        raise SignatureError("unknown-key", "the access key is not one this server issued")
    text = fields.get("Expires", "")
    if not text.isdigit() or len(text) > 12:
        raise SignatureError("malformed", "a presigned URL needs a whole Expires")
    expires, moment = int(text), time.time() if now is None else now
    if moment > expires:
        raise SignatureError("expired", "Request has expired")
    if expires - moment > MAX_PRESIGNED_S:  # (AWS sets no bound on version 2's; version 4's is a week)
        raise SignatureError("query-parameters", f"Expires must be at most {MAX_PRESIGNED_S} seconds (a week) "
                                                 "from now")
    named = sorted((key, value) for key, value in query if key in _SUBRESOURCES)
    resource = raw_path + ("?" + "&".join(f"{k}={v}" if v else k for k, v in named) if named else "")
    amz = sorted((name, value.strip()) for name, value in headers.items() if name.startswith("x-amz-"))
    text = "\n".join([method.upper(), headers.get("content-md5", ""), headers.get("content-type", ""), str(expires),
                      *(f"{name}:{value}" for name, value in amz), resource])
    expected = base64.b64encode(hmac.new(secret.encode(), text.encode(), hashlib.sha1).digest()).decode()
    if not hmac.compare_digest(expected, fields.get("Signature", "")):
        raise SignatureError("mismatch", "The request signature we calculated does not match the signature you "
                                         "provided. Check your key and signing method.")


_SUBRESOURCES = frozenset({"acl", "lifecycle", "location", "logging", "notification", "partNumber", "policy",
                           "requestPayment", "torrent", "uploadId", "uploads", "versionId", "versioning", "versions",
                           "website", "response-content-type", "response-content-language", "response-expires",
                           "response-cache-control", "response-content-disposition", "response-content-encoding"})


def is_presigned_v2(query: list[tuple[str, str]]) -> bool:
    names = {key for key, _ in query}
    return {"AWSAccessKeyId", "Signature", "Expires"} <= names


def _signed(credential: str, signed_headers: str, signature: str, amz_date: str) -> Signed:
    parts = credential.split("/")
    if len(parts) != 5 or parts[4] != "aws4_request":
        raise SignatureError("malformed", f"the credential {credential!r} is not KEY/DATE/REGION/SERVICE/aws4_request")
    if not re.fullmatch(r"\d{8}T\d{6}Z", amz_date):
        raise SignatureError("malformed", "the request has no X-Amz-Date of the form YYYYMMDDTHHMMSSZ")
    return Signed(parts[0], parts[1], parts[2], parts[3], amz_date, tuple(signed_headers.split(";")), signature)


def verify(signed: Signed, method: str, raw_path: str, query: list[tuple[str, str]], headers: dict[str, str],
           payload_hash: str, secret_for: Callable[[str], str | None], now: float | None = None) -> None:
    """Raise :class:`SignatureError` unless ``signed`` is a good signature of this request.
    ``raw_path`` is the path as sent (percent-encoded), ``query`` its decoded pairs in order."""
    secret = secret_for(signed.access_key)
    if secret is None:
        raise SignatureError("unknown-key", f"the access key {signed.access_key!r} is not one this server issued")
    moment = time.time() if now is None else now
    sent = datetime.strptime(signed.amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()
    if signed.presigned:
        if moment > sent + (signed.expires_s or 0):
            raise SignatureError("expired", "Request has expired")
    elif abs(moment - sent) > MAX_SKEW_S:
        server = datetime.fromtimestamp(moment, UTC)
        bound = datetime.fromtimestamp(moment - MAX_SKEW_S if sent < moment else moment + MAX_SKEW_S, UTC)
        side = "earlier" if sent < moment else "later"
        sign = "-" if sent < moment else "+"
        raise SignatureError("expired", f"Signature expired: {signed.amz_date} is now {side} than "
                                        f"{bound:%Y%m%dT%H%M%SZ} ({server:%Y%m%dT%H%M%SZ} {sign} 15 min.)")
    if signed.date != signed.amz_date[:8]:
        raise SignatureError("mismatch", "the credential's date is not the date the request was signed")
    canonical = canonical_request(signed, method, raw_path, query, headers, payload_hash)
    to_sign = "\n".join((ALGORITHM, signed.amz_date, signed.scope, hashlib.sha256(canonical.encode()).hexdigest()))
    expected = hmac.new(signing_key(secret, signed), to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signed.signature):
        raise SignatureError("mismatch", "The request signature we calculated does not match the signature you "
                                         "provided. Check your AWS Secret Access Key and signing method. Consult the "
                                         "service documentation for details.")


def canonical_request(signed: Signed, method: str, raw_path: str, query: list[tuple[str, str]],
                      headers: dict[str, str], payload_hash: str) -> str:
    if signed.service == "s3":
        path = raw_path or "/"
    else:  # every other service signs the normalised path, encoded once more
        path = quote(_without_dot_segments(raw_path), safe="/~")
    pairs = sorted((_encode(key), _encode(value)) for key, value in query if key != "X-Amz-Signature")
    query_text = "&".join(f"{key}={value}" for key, value in pairs)
    lines = [f"{name}:{' '.join(headers.get(name, '').split())}" for name in signed.signed_headers]
    return "\n".join((method.upper(), path, query_text, "\n".join(lines) + "\n", ";".join(signed.signed_headers),
                      UNSIGNED if signed.presigned else payload_hash))


def _encode(text: str) -> str:
    return quote(text, safe="-_.~")


def _without_dot_segments(path: str) -> str:
    """RFC 3986's dot segments removed and repeated slashes joined, as AWS's signers do."""
    if not path:
        return "/"
    kept: list[str] = []
    for part in path.split("/"):
        if part == "..":
            if kept:
                kept.pop()
        elif part and part != ".":
            kept.append(part)
    text = ("/" if path.startswith("/") else "") + "/".join(kept)
    return text + "/" if path.endswith("/") and kept else text or "/"


def decoded_query(raw: str) -> list[tuple[str, str]]:
    """A query string's pairs, decoded, in order (a bare name has the empty value, as in ``?uploads``)."""
    pairs = []
    for piece in raw.split("&"):
        if piece:
            key, _, value = piece.partition("=")
            pairs.append((unquote(key), unquote(value)))
    return pairs
