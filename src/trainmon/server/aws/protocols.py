"""AWS's wire protocols for the operations layer: how a request's parameters arrive and how an
answer or an error goes back, in each protocol boto3 and the AWS CLI speak.

- **JSON** (awsJson1_0, awsJson1_1): ``POST /`` with ``X-Amz-Target: <prefix>.<Operation>``;
  SageMaker, CloudWatch Logs and CloudWatch.
- **RPC v2 CBOR** (smithy-rpc-v2-cbor): ``POST /service/<service>/operation/<Operation>``, what
  current botocore uses for CloudWatch; times are CBOR tag 1 (epoch seconds).
- **Query**: a form-encoded ``POST /`` with ``Action``; STS, IAM, and CloudWatch for older SDKs. Its
  nested parameters (``MetricData.member.1.Dimensions.member.1.Name``) and its XML answers follow
  the operation's shapes in botocore's service model.

Errors carry AWS's codes where botocore looks for them: ``__type`` and ``message`` in a JSON or
CBOR body (plus ``x-amzn-query-error: <Code>;Sender`` for CloudWatch, a query service at heart, so
boto3 raises its named exception classes), an ``<ErrorResponse>`` for the query protocol; the
request id in ``x-amzn-RequestId``.
"""

from __future__ import annotations

import base64
import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape

from starlette.responses import Response

from ...errors import TrainmonError, ValidationException
from ..jsonio import json_object
from ..typecheck import service_model


@dataclass(frozen=True)
class Service:
    """One AWS service as trainmon serves it: its name in botocore and in :data:`trainmon.api.SERVICES`."""

    model_name: str  # botocore's: sagemaker, cloudwatch, logs, sts, iam
    api_name: str  # the operations layer's
    signing_name: str  # the service in a signature's credential scope

    @property
    def model(self) -> Any:
        return service_model(self.model_name)

    @property
    def query_compatible(self) -> bool:
        return "awsQueryCompatible" in self.model.metadata


SERVICES = (
    Service("sagemaker", "sagemaker", "sagemaker"),
    Service("cloudwatch", "cloudwatch", "monitoring"),
    Service("logs", "logs", "logs"),
    Service("sts", "sts", "sts"),
    Service("iam", "iam", "iam"),
)
BY_TARGET = {"SageMaker": SERVICES[0], "GraniteServiceVersion20100801": SERVICES[1], "Logs_20140328": SERVICES[2]}
BY_SIGNING_NAME = {service.signing_name: service for service in SERVICES}
QUERY_SERVICES = {"monitoring": SERVICES[1], "sts": SERVICES[3], "iam": SERVICES[4]}


# -- the answers -----------------------------------------------------------------------------------


class Protocol:
    name = ""

    def parameters(self, service: Service, operation: str, body: bytes) -> dict[str, Any]:
        raise NotImplementedError

    def answer(self, service: Service, operation: str, result: Mapping[str, Any], request_id: str) -> Response:
        raise NotImplementedError

    def error(self, service: Service, code: str, message: str, status: int, request_id: str,
              sender: bool = True) -> Response:
        raise NotImplementedError

    def failure(self, service: Service, exc: TrainmonError, request_id: str) -> Response:
        """An operation's error, with the code and status AWS gives it in this service."""
        code, status = exc.code, exc.http_status
        shape = _error_shapes(service.model_name).get(code)
        if shape is not None and shape[1] is not None:
            status = shape[1]
        return self.error(service, code, exc.message, status, request_id, sender=status < 500)


@functools.cache
def _error_shapes(model_name: str) -> dict[str, tuple[str, int | None]]:
    """Each error code of the service: its shape's name (what ``__type`` holds) and HTTP status."""
    found = {}
    for shape in service_model(model_name).error_shapes:
        error = shape.metadata.get("error") or {}
        found[error.get("code", shape.name)] = (shape.name, error.get("httpStatusCode"))
    return found


def _wire_type(service: Service, code: str) -> str:
    shape = _error_shapes(service.model_name).get(code)
    return shape[0] if shape is not None else code


def _request_headers(request_id: str) -> dict[str, str]:
    return {"x-amzn-RequestId": request_id}


class Json(Protocol):
    name = "json"

    def parameters(self, service: Service, operation: str, body: bytes) -> dict[str, Any]:
        return json_object(body, SerializationError)

    def _content_type(self, service: Service) -> str:
        return f"application/x-amz-json-{service.model.metadata.get('jsonVersion', '1.1')}"

    def answer(self, service: Service, operation: str, result: Mapping[str, Any], request_id: str) -> Response:
        payload = json.dumps(_without_metadata(result), default=_json_value, separators=(",", ":"))
        return Response(payload, 200, _request_headers(request_id), self._content_type(service))

    def error(self, service: Service, code: str, message: str, status: int, request_id: str,
              sender: bool = True) -> Response:
        headers = _request_headers(request_id)
        if service.query_compatible:
            headers["x-amzn-query-error"] = f"{code};{'Sender' if sender else 'Receiver'}"
        payload = json.dumps({"__type": _wire_type(service, code), "message": message})
        return Response(payload, status, headers, self._content_type(service))


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if hasattr(value, "item"):  # a numpy scalar
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _without_metadata(result: Mapping[str, Any]) -> Mapping[str, Any]:
    return {k: v for k, v in result.items() if k != "ResponseMetadata"} if "ResponseMetadata" in result else result


class Cbor(Protocol):
    name = "cbor"
    CONTENT_TYPE = "application/cbor"

    def parameters(self, service: Service, operation: str, body: bytes) -> dict[str, Any]:
        import cbor2

        if not body:
            return {}
        try:
            value = cbor2.loads(body)
        except (cbor2.CBORDecodeError, ValueError) as exc:
            raise SerializationError(f"the request body is not CBOR: {exc}") from None
        if not isinstance(value, dict):
            raise SerializationError("the request body must be a CBOR map")
        return value

    def _reply(self, value: Any, status: int, headers: dict[str, str]) -> Response:
        import cbor2

        payload = cbor2.dumps(value, datetime_as_timestamp=True, timezone=UTC, default=_cbor_value)
        return Response(payload, status, {**headers, "smithy-protocol": "rpc-v2-cbor"}, self.CONTENT_TYPE)

    def answer(self, service: Service, operation: str, result: Mapping[str, Any], request_id: str) -> Response:
        return self._reply(_without_metadata(result), 200, _request_headers(request_id))

    def error(self, service: Service, code: str, message: str, status: int, request_id: str,
              sender: bool = True) -> Response:
        headers = _request_headers(request_id)
        if service.query_compatible:
            headers["x-amzn-query-error"] = f"{code};{'Sender' if sender else 'Receiver'}"
        return self._reply({"__type": _wire_type(service, code), "message": message}, status, headers)


def _cbor_value(encoder: Any, value: Any) -> None:
    if hasattr(value, "item"):  # a numpy scalar
        encoder.encode(value.item())
    else:
        raise TypeError(f"{type(value).__name__} is not CBOR")


class Query(Protocol):
    """Form-encoded parameters in, XML out, both by the operation's shapes."""

    name = "query"

    def parameters(self, service: Service, operation: str, body: bytes) -> dict[str, Any]:
        try:
            flat = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False))
        except UnicodeDecodeError:
            raise SerializationError("the request body is not UTF-8 form data") from None
        flat.pop("Action", None)
        flat.pop("Version", None)
        shape = service.model.operation_model(operation).input_shape
        if shape is None:
            return {}
        prefixes: set[str] = set()
        for key in flat:
            parts = key.split(".")
            prefixes.update(".".join(parts[:n]) for n in range(1, len(parts) + 1))
        value = _from_query(shape, "", flat, prefixes)
        return value if isinstance(value, dict) else {}

    def _namespace(self, service: Service) -> str:
        return str(service.model.metadata.get("xmlNamespace", ""))

    def answer(self, service: Service, operation: str, result: Mapping[str, Any], request_id: str) -> Response:
        model = service.model.operation_model(operation)
        wrapper = model._operation_model.get("output", {}).get("resultWrapper", f"{operation}Result")
        parts = [f'<{operation}Response xmlns="{self._namespace(service)}"><{wrapper}>']
        if model.output_shape is not None:
            _to_xml(model.output_shape, _without_metadata(result), parts)
        parts.append(f"</{wrapper}><ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata>"
                     f"</{operation}Response>")
        return Response("".join(parts), 200, _request_headers(request_id), "text/xml")

    def error(self, service: Service, code: str, message: str, status: int, request_id: str,
              sender: bool = True) -> Response:
        payload = (f'<ErrorResponse xmlns="{self._namespace(service)}"><Error><Type>'
                   f"{'Sender' if sender else 'Receiver'}</Type><Code>{escape(code)}</Code><Message>"
                   f"{escape(message)}</Message></Error><RequestId>{request_id}</RequestId></ErrorResponse>")
        return Response(payload, status, _request_headers(request_id), "text/xml")


class SerializationError(ValidationException):
    """A body that is not the protocol's form at all."""

    code = "SerializationException"


_MISSING = object()


def _from_query(shape: Any, prefix: str, flat: dict[str, str], prefixes: set[str]) -> Any:
    """The value at ``prefix`` in a query request's flat parameters, typed by ``shape``."""
    kind = shape.type_name
    if kind == "structure":
        found = {}
        for name, member in shape.members.items():
            key = member.serialization.get("name", name)
            path = f"{prefix}.{key}" if prefix else key
            if path in prefixes:
                value = _from_query(member, path, flat, prefixes)
                if value is not _MISSING:
                    found[name] = value
        return found
    if kind in ("list", "map"):
        if flat.get(prefix) == "":  # an empty list is sent as the bare name
            return [] if kind == "list" else {}
        step = "" if shape.serialization.get("flattened") else (
            "." + (shape.member.serialization.get("name", "member") if kind == "list" else "entry"))
        items: list[Any] = []
        index = 1
        while f"{prefix}{step}.{index}" in prefixes:
            at = f"{prefix}{step}.{index}"
            if kind == "list":
                items.append(_from_query(shape.member, at, flat, prefixes))
            else:
                items.append((_from_query(shape.key, f"{at}.key", flat, prefixes),
                              _from_query(shape.value, f"{at}.value", flat, prefixes)))
            index += 1
        return items if kind == "list" else dict(items)
    text = flat.get(prefix)
    if text is None:
        return _MISSING
    try:
        if kind in ("integer", "long"):
            return int(text)
        if kind in ("float", "double"):
            return float(text)
        if kind == "boolean":
            return text.lower() == "true"
        if kind == "timestamp":
            try:
                return datetime.fromtimestamp(float(text), UTC)
            except ValueError:
                return datetime.fromisoformat(text)
        if kind == "blob":
            return base64.b64decode(text)
    except ValueError:
        raise ValidationException(f"1 validation error detected: Value '{text}' at '{prefix}' failed to satisfy "
                                  f"constraint: Member must be a {kind}") from None
    return text


def _to_xml(shape: Any, value: Any, out: list[str]) -> None:
    """``value`` (of ``shape``) as the query protocol's XML: a structure's members as elements."""
    kind = shape.type_name
    if kind == "structure":
        for name, member in shape.members.items():
            if name in value and value[name] is not None:
                _element(member, member.serialization.get("name", name), value[name], out)
    elif kind == "timestamp":
        moment = value if isinstance(value, datetime) else datetime.fromtimestamp(float(value), UTC)
        out.append(moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z")
    elif kind == "boolean":
        out.append("true" if value else "false")
    elif kind in ("float", "double"):
        number = float(value)
        out.append("NaN" if math.isnan(number) else "Infinity" if number == math.inf else
                   "-Infinity" if number == -math.inf else repr(number))
    elif kind == "blob":
        out.append(base64.b64encode(value).decode())
    else:
        out.append(escape(str(value)))


def _element(shape: Any, name: str, value: Any, out: list[str]) -> None:
    kind = shape.type_name
    if kind == "list":
        member = shape.member.serialization.get("name", "member")
        if shape.serialization.get("flattened"):
            for item in value:
                _element(shape.member, name, item, out)
            return
        out.append(f"<{name}>")
        for item in value:
            _element(shape.member, member, item, out)
        out.append(f"</{name}>")
    elif kind == "map":
        out.append(f"<{name}>")
        for key, item in value.items():
            out.append("<entry>")
            _element(shape.key, "key", key, out)
            _element(shape.value, "value", item, out)
            out.append("</entry>")
        out.append(f"</{name}>")
    else:
        out.append(f"<{name}>")
        _to_xml(shape, value, out)
        out.append(f"</{name}>")


PROTOCOLS = {protocol.name: protocol for protocol in (Json(), Cbor(), Query())}
