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
UNSIGNED = "UNSIGNED-PAYLOAD"

_AUTHORIZATION = re.compile(
    r"AWS4-HMAC-SHA256\s+Credential=(?P<credential>[^,\s]+),\s*SignedHeaders=(?P<headers>[^,\s]+),"
    r"\s*Signature=(?P<signature>[0-9a-f]{64})\s*$")


class SignatureError(Exception):
    """Why a request's signature is not good: ``reason`` is one of ``missing``, ``malformed``,
    ``unknown-key``, ``mismatch`` and ``expired``; each protocol words it as AWS does."""

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
            expires = int(fields.get("X-Amz-Expires", "604800"))
        except (KeyError, ValueError):
            raise SignatureError("malformed", "a presigned URL needs X-Amz-Credential, X-Amz-SignedHeaders, "
                                              "X-Amz-Signature, X-Amz-Date and a whole X-Amz-Expires") from None
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
    try:
        expires = int(fields["Expires"])
    except (KeyError, ValueError):
        raise SignatureError("malformed", "a presigned URL needs a whole Expires") from None
    if (time.time() if now is None else now) > expires:
        raise SignatureError("expired", "Request has expired")
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
    scope = f"{signed.date}/{signed.region}/{signed.service}/aws4_request"
    to_sign = "\n".join((ALGORITHM, signed.amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()))
    key = f"AWS4{secret}".encode()
    for part in (signed.date, signed.region, signed.service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
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
