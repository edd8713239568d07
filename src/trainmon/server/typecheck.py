"""Every member of a request has the type its operation's model gives it, at every door, before
the operation sees it: AWS's own model of the operation (botocore's, as the AWS doors read it) for
the operations AWS has, and the operation's own keyword arguments for trainmon's.

The operations check values (ranges, patterns, enums) with AWS's words; what they must not meet
is a list where a string belongs, or an object where a number does, which no client AWS makes would
send. A member the model does not name is left to the operation, which refuses it by name."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ..errors import TrainmonError, ValidationException
from ..shapes import Problems, member_path

# The botocore model of each service of the operations layer that AWS has.
MODELS = {"sagemaker": "sagemaker", "cloudwatch": "cloudwatch", "logs": "logs", "sts": "sts", "iam": "iam"}

_PYTHON_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "string": ((str,), "a string"),
    "integer": ((int,), "a whole number"),
    "long": ((int,), "a whole number"),
    "float": ((int, float), "a number"),
    "double": ((int, float), "a number"),
    "boolean": ((bool,), "true or false"),
    "timestamp": ((int, float, str, datetime), "a time"),
    "blob": ((str, bytes), "a string"),
    "list": ((list,), "a list"),
    "map": ((dict,), "an object"),
    "structure": ((dict,), "an object"),
}


def given(request: dict[str, Any]) -> dict[str, Any]:
    """A request's members less those given as null, which AWS's protocols take as absent: the
    operation then answers as if they were not sent (its defaults), at every door alike."""
    return {name: value for name, value in request.items() if value is not None}


def check(service: str, operation: str, function: Callable[..., Any], request: dict[str, Any],
          error: type[TrainmonError] = ValidationException) -> None:
    """``error`` listing every member of ``request`` that is not of its type, or that ``function``
    (the operation) does not take."""
    problems = Problems()
    model = MODELS.get(service)
    shape = _input_shape(model, operation) if model is not None else None
    if shape is not None:
        _walk(shape, request, "", problems, 0)
    problems.raise_if_any(error)
    try:
        inspect.signature(function).bind(None, **request)
    except TypeError as exc:
        raise error(f"the request does not fit {operation}: {exc}.") from None


@functools.cache
def service_model(name: str) -> Any:
    """botocore's model of the service, as shipped with the installed botocore (read once)."""
    import botocore.session

    return botocore.session.get_session().get_service_model(name)


@functools.cache
def _input_shape(model: str, operation: str) -> Any:
    try:
        return service_model(model).operation_model(operation).input_shape
    except Exception:  # an operation only trainmon has, under an AWS service's name
        return None


def _walk(shape: Any, value: Any, path: str, problems: Problems, depth: int) -> None:
    if value is None or depth > 32:  # null: the operation says whether it may be; deeper: no AWS shape is
        return
    kind = shape.type_name
    types, said = _PYTHON_TYPES.get(kind, ((object,), ""))
    if not isinstance(value, types) or (isinstance(value, bool) and kind in ("integer", "long", "float", "double")):
        problems.add(value, path, f"Member must be {said}")
        return
    if kind == "structure" and isinstance(value, dict):
        for name, member in value.items():
            if name in shape.members:
                _walk(shape.members[name], member, member_path(path, name), problems, depth + 1)
    elif kind == "list" and isinstance(value, list):
        for index, item in enumerate(value):
            _walk(shape.member, item, f"{path}.{index + 1}" if path else str(index + 1), problems, depth + 1)
    elif kind == "map" and isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                problems.add(key, path, "Member must have keys that are strings")
            _walk(shape.value, item, f"{path}.{key}", problems, depth + 1)
