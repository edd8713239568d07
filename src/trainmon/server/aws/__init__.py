"""The AWS endpoint: SageMaker, CloudWatch, CloudWatch Logs, STS, IAM's questions about a role and
an S3 subset on the server's one port, so code written for boto3, the AWS CLI or the SageMaker Python SDK runs unchanged with
``AWS_ENDPOINT_URL`` pointing at trainmon.

:class:`Gateway` sits in front of the native application and takes the requests that speak an
AWS protocol (an ``X-Amz-Target`` header, RPC v2 CBOR's ``smithy-protocol`` header, a signed
form POST to ``/``, anything signed for S3); every other request goes on to the native API and the
console. Each operation is the operations layer's function of the same name
(:data:`trainmon.api.SERVICES`); this package only speaks the protocols (:mod:`.protocols`) and
checks signatures (:mod:`.sigv4`) against the keys ``trainmon credentials create`` issues.

Every request must be signed by an issued key, on loopback too (:mod:`trainmon.server.auth`
says why); only a server started with ``--no-credentials`` takes any signer, or none.
"""

from __future__ import annotations

import hashlib
import logging
import re
import uuid
import zlib
from xml.sax.saxutils import escape

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ... import access_keys, api
from ...errors import PayloadTooLarge, TrainmonError
from ...store import Store
from .. import typecheck
from ..jsonio import MAX_BODY_BYTES, read_body
from .bodies import Payload
from .protocols import BY_TARGET, PROTOCOLS, QUERY_SERVICES, Protocol, SerializationError, Service
from .sigv4 import (
    SIGNED_CHUNKS,
    UNSIGNED,
    ChunkSignatures,
    SignatureError,
    Signed,
    claimed,
    decoded_query,
    is_presigned_v2,
    verify,
    verify_presigned_v2,
)

log = logging.getLogger(__name__)
STREAMING_PAYLOADS = (*SIGNED_CHUNKS, "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class Gateway:
    """The AWS protocols' door: a request :func:`classify` gave a kind is checked and served here."""

    def __init__(self, store: Store, require_signatures: bool = True) -> None:
        self.store = store
        self.require_signatures = require_signatures
        self._keys: tuple[float, dict[str, access_keys.AccessKey]] = (-1.0, {})

    async def __call__(self, kind: str, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = await self.handle(kind, request)
        await response(scope, receive, send)

    async def handle(self, kind: str, request: Request) -> Response:
        request_id = str(uuid.uuid4())
        headers = {key.decode("latin-1"): value.decode("latin-1") for key, value in request.scope["headers"]}
        query = decoded_query(request.scope.get("query_string", b"").decode("latin-1"))
        if kind == "s3":
            return await self._s3(request, headers, query, request_id)
        protocol = PROTOCOLS[kind]
        try:
            service, operation = route(kind, request, headers)
        except _Unroutable as exc:
            return protocol.error(exc.service, exc.code, exc.message, 400, request_id)
        try:
            body = await read_body(request)
        except PayloadTooLarge as exc:
            return protocol.error(service, "RequestEntityTooLarge", exc.message, 413, request_id)
        if kind == "query":
            operation = _action(body) or operation
        refused = self._refusal(request, headers, query, hashlib.sha256(body).hexdigest(), service.signing_name)
        if isinstance(refused, SignatureError):
            return protocol.error(service, *_auth_error(kind, refused), 403, request_id)
        if headers.get("content-encoding", "").strip().lower() == "gzip":  # botocore compresses large bodies
            try:
                body = _gunzipped(body)
            except PayloadTooLarge as exc:
                return protocol.error(service, "RequestEntityTooLarge", exc.message, 413, request_id)
            except (OSError, EOFError, zlib.error) as exc:
                return protocol.error(service, "SerializationException", f"the gzip body is damaged: {exc}", 400,
                                      request_id)
        found = api.SERVICES[service.api_name].get(operation)
        if found is None:
            return _unknown_operation(protocol, service, operation, request_id)
        try:
            parameters = typecheck.given(protocol.parameters(service, operation, body))
            typecheck.check(service.api_name, operation, found, parameters)
            result = await anyio.to_thread.run_sync(lambda: found(self.store, **parameters))
        except TrainmonError as exc:
            return protocol.failure(service, exc, request_id)
        except Exception:  # the server's own fault: its text (files, settings) stays in the log
            log.exception("request %s: %s.%s failed", request_id, service.model_name, operation)
            return protocol.error(service, "InternalFailure", f"trainmon failed on this request (request {request_id} "
                                  "in its log)", 500, request_id, sender=False)
        return protocol.answer(service, operation, result, request_id)

    async def _s3(self, request: Request, headers: dict[str, str], query: list[tuple[str, str]],
                  request_id: str) -> Response:
        from . import s3

        head = request.method == "HEAD"
        presigned = "authorization" not in headers
        payload = headers.get("x-amz-content-sha256", UNSIGNED if presigned else "")
        if not payload:  # (the body is left unread, so the connection cannot go on after any of these)
            return _closing(_s3_error("InvalidRequest", "Missing required header for this request: "
                                      "x-amz-content-sha256", 400, request_id, head=head))
        if not presigned and payload != UNSIGNED and payload not in STREAMING_PAYLOADS and \
                not _SHA256_HEX.fullmatch(payload):
            return _closing(_s3_error("InvalidArgument", "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, "
                                      f"{', '.join(STREAMING_PAYLOADS)} or a SHA-256 in hex", 400, request_id,
                                      head=head))
        refused = self._refusal(request, headers, query, payload, "s3")
        if isinstance(refused, SignatureError):
            status = 400 if refused.reason == "query-parameters" else 403
            return _closing(_s3_error(*_auth_error("s3", refused), status, request_id, head=head))
        chunks = ChunkSignatures.of(*refused, payload) if refused is not None and payload in SIGNED_CHUNKS else None
        response: Response = await s3.handle(request, self.store.home, Payload(payload, chunks))
        return response

    def _refusal(self, request: Request, headers: dict[str, str], query: list[tuple[str, str]], payload_hash: str,
                 signing_name: str) -> SignatureError | tuple[Signed, str] | None:
        """Why the request may not be served (no signature, a bad one); or, when it may, the
        Signature Version 4 it carries and its key's secret (None for version 2, or a server that
        takes any signer)."""
        try:
            signed = claimed(headers, query)
        except SignatureError as exc:
            return exc
        if not self.require_signatures:
            return None  # --no-credentials: the operator chose to take any signer, or none
        keys = self._issued()
        if signed is None and signing_name == "s3" and is_presigned_v2(query):
            try:
                verify_presigned_v2(request.method, _raw_path(request), query, headers,
                                    lambda key: keys[key].SecretAccessKey if key in keys else None)
            except SignatureError as exc:
                return exc
            return None
        if signed is None:
            return SignatureError("missing", "Missing Authentication Token")
        refused = _checked(signed, request, query, headers, payload_hash, keys, signing_name)
        return refused or (signed, keys[signed.access_key].SecretAccessKey)

    def _issued(self) -> dict[str, access_keys.AccessKey]:
        """The issued keys, read again whenever their file changes."""
        path = access_keys.path(self.store.home)
        try:
            stamp = path.stat().st_mtime_ns
        except OSError:
            return {}
        if stamp != self._keys[0]:
            self._keys = (stamp, access_keys.load(self.store.home))
        return self._keys[1]


def _checked(signed: Signed, request: Request, query: list[tuple[str, str]], headers: dict[str, str],
             payload_hash: str, keys: dict[str, access_keys.AccessKey], signing_name: str) -> SignatureError | None:
    key = keys.get(signed.access_key)
    try:
        verify(signed, request.method, _raw_path(request), query, headers, payload_hash,
               lambda _: key.SecretAccessKey if key is not None else None)
    except SignatureError as exc:
        return exc
    if signed.service != signing_name:
        return SignatureError("mismatch", f"Credential should be scoped to correct service: '{signing_name}'.")
    return None


def _raw_path(request: Request) -> str:
    """The path as the client sent it, still percent-encoded (what it signed)."""
    raw: bytes = request.scope.get("raw_path") or request.url.path.encode()
    return raw.decode("latin-1").split("?", 1)[0]


def classify(scope: Scope) -> str | None:
    """Which AWS protocol a request speaks ("json", "cbor", "query", "s3"), or None for the native API."""
    headers = dict(scope.get("headers", ()))
    if b"x-amz-target" in headers:
        return "json"
    if headers.get(b"smithy-protocol") == b"rpc-v2-cbor":
        return "cbor"
    authorization = headers.get(b"authorization", b"")
    if authorization.startswith(b"AWS4-HMAC-SHA256"):
        if b"/s3/aws4_request" in authorization:
            return "s3"
        if scope["method"] == "POST" and scope["path"] == "/":
            return "query"
        return "s3" if b"/s3/" in authorization else None
    query = scope.get("query_string", b"")
    if b"X-Amz-Credential=" in query or (b"AWSAccessKeyId=" in query and b"Signature=" in query):
        return "s3"  # a presigned URL (Signature Version 4 or 2)
    content_type = headers.get(b"content-type", b"")
    if scope["method"] == "POST" and scope["path"] == "/" and content_type.startswith(b"application/x-www-form"):
        return "query"
    return None


class _Unroutable(Exception):
    def __init__(self, service: Service, code: str, message: str) -> None:
        super().__init__(message)
        self.service, self.code, self.message = service, code, message


def route(kind: str, request: Request, headers: dict[str, str]) -> tuple[Service, str]:
    """The service and the operation a request names."""
    if kind == "json":
        prefix, _, operation = headers.get("x-amz-target", "").partition(".")
        service = BY_TARGET.get(prefix)
        if service is None:
            raise _Unroutable(BY_TARGET["SageMaker"], "UnknownOperationException",
                              f"trainmon serves no service {prefix!r}; it serves {', '.join(BY_TARGET)}")
        return service, operation
    if kind == "cbor":
        parts = request.url.path.strip("/").split("/")
        if len(parts) != 4 or parts[0] != "service" or parts[2] != "operation" or parts[1] not in BY_TARGET:
            raise _Unroutable(BY_TARGET["GraniteServiceVersion20100801"], "UnknownOperationException",
                              f"{request.url.path} is not /service/<service>/operation/<Operation> of a service "
                              "trainmon serves")
        return BY_TARGET[parts[1]], parts[3]
    scope_service = _scope_service(headers.get("authorization", ""))
    return QUERY_SERVICES.get(scope_service or "", QUERY_SERVICES["monitoring"]), ""


def _scope_service(authorization: str) -> str | None:
    try:
        return authorization.split("Credential=", 1)[1].split(",", 1)[0].split("/")[3]
    except IndexError:
        return None


def _action(body: bytes) -> str:
    from urllib.parse import parse_qs

    return (parse_qs(body.decode("utf-8", "replace")).get("Action") or [""])[0]


def _gunzipped(body: bytes) -> bytes:
    """A gzip body inflated, refused past MAX_BODY_BYTES (a small body may inflate to a huge one)."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    data = inflater.decompress(body, MAX_BODY_BYTES + 1)
    if len(data) > MAX_BODY_BYTES or inflater.unconsumed_tail:
        raise PayloadTooLarge(f"the request body inflates to over {MAX_BODY_BYTES >> 20} MiB")
    if not inflater.eof:
        raise EOFError("it ends before its last block")
    return data


def _unknown_operation(protocol: Protocol, service: Service, operation: str, request_id: str) -> Response:
    served = ", ".join(api.SERVICES[service.api_name])
    known = operation in service.model.operation_names
    message = (f"trainmon does not serve {service.model_name} {operation or '(no operation named)'}"
               f"{'' if known else ', which is not an operation of this service'}; it serves {served}")
    return protocol.error(service, "UnknownOperationException" if not known else "InvalidAction", message, 400,
                          request_id)


_AUTH_CODES = {
    # reason: (JSON and CBOR services, query services, S3)
    "missing": ("MissingAuthenticationTokenException", "MissingAuthenticationToken", "AccessDenied"),
    "malformed": ("IncompleteSignatureException", "IncompleteSignature", "AuthorizationHeaderMalformed"),
    "unknown-key": ("UnrecognizedClientException", "InvalidClientTokenId", "InvalidAccessKeyId"),
    "mismatch": ("InvalidSignatureException", "SignatureDoesNotMatch", "SignatureDoesNotMatch"),
    "expired": ("InvalidSignatureException", "SignatureDoesNotMatch", "AccessDenied"),
    "query-parameters": ("IncompleteSignatureException", "IncompleteSignature", "AuthorizationQueryParametersError"),
}
_UNKNOWN_KEY = {"json": "The security token included in the request is invalid.",
                "s3": "The AWS Access Key Id you provided does not exist in our records."}


def _closing(response: Response) -> Response:
    response.headers["connection"] = "close"
    return response


def _s3_error(code: str, message: str, status: int, request_id: str, head: bool = False) -> Response:
    payload = "" if head else (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>"
                               f"{escape(message)}</Message><RequestId>{request_id}</RequestId></Error>")
    return Response(payload, status, {"x-amz-request-id": request_id}, "application/xml")


def _auth_error(kind: str, refused: SignatureError) -> tuple[str, str]:
    codes = _AUTH_CODES[refused.reason]
    code = codes[2] if kind == "s3" else codes[1] if kind == "query" else codes[0]
    message = refused.message
    if refused.reason == "unknown-key":
        message = _UNKNOWN_KEY.get(kind, _UNKNOWN_KEY["json"])
    if refused.reason == "expired" and kind == "s3" and not message.startswith("Request has expired"):
        code = "RequestTimeTooSkewed"
    return code, message


__all__ = ["Gateway", "SerializationError", "classify"]
