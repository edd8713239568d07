"""boto3-shaped clients over the store: ``trainmon.client("sagemaker")``, ``("cloudwatch")``, ``("logs")``,
and ``("trainmon")`` for the operations only trainmon has.

Method names, parameters and response shapes are boto3's, so code written for boto3 changes the
one line that makes the client. Each method is one operation of :mod:`trainmon.api`, called with
the keyword arguments it was given; validation, paging and errors are the operation's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import api
from ..errors import ResourceInUse, ResourceNotFound, TrainmonError, ValidationException, WaiterError
from ..shapes import snake_case
from ..store import Store, open_store


class _Exceptions:
    ClientError = TrainmonError
    ValidationException = ValidationException
    ResourceInUse = ResourceInUse
    ResourceNotFound = ResourceNotFound


def _method(operation: api.Operation) -> Callable[..., dict[str, Any]]:
    def call(self: Client, **request: Any) -> dict[str, Any]:
        return operation(self.store, **request)

    call.__name__ = operation.__name__
    call.__doc__ = operation.__doc__
    return call


_CLIENTS: dict[str, type[Client]] = {}  # service -> its client class, each added as it is made


class Client:
    """A service's operations as methods (``DescribeTrainingJob`` -> ``describe_training_job``); a
    subclass names its service and is the client :func:`client` makes for it."""

    exceptions = _Exceptions
    service = ""

    def __init__(self, store: Store | None = None, home: Path | None = None) -> None:
        self.store = store if store is not None else open_store(home)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, operation in api.SERVICES[cls.service].items():
            setattr(cls, snake_case(name), _method(operation))
        _CLIENTS[cls.service] = cls

    def can_paginate(self, operation_name: str) -> bool:
        """boto3's: whether ``get_paginator`` serves the operation. No operation has a paginator
        here (responses carry their tokens), so code that asks first pages by hand."""
        return False


class SageMakerClient(Client):
    service = "sagemaker"

    def get_waiter(self, name: str) -> _Waiter:
        if name != "training_job_completed_or_stopped":
            raise ValueError(f"Waiter {name} does not exist")
        return _Waiter(self)


class CloudWatchClient(Client):
    service = "cloudwatch"


class LogsClient(Client):
    service = "logs"


class TrainmonClient(Client):
    """The operations only trainmon has (see :mod:`trainmon.api.trainmon`)."""

    service = "trainmon"


class _Waiter:
    """``TrainingJobCompletedOrStopped``: success on Completed/Stopped, failure on Failed."""

    def __init__(self, client: SageMakerClient) -> None:
        self.client = client

    def wait(self, TrainingJobName: str, WaiterConfig: dict[str, Any] | None = None) -> None:
        settings = WaiterConfig or {}
        delay, attempts = float(settings.get("Delay", 120)), int(settings.get("MaxAttempts", 180))
        for _ in range(attempts):
            status = api.sagemaker.describe_training_job(self.client.store, TrainingJobName=TrainingJobName)[
                "TrainingJobStatus"]
            if status in ("Completed", "Stopped"):
                return
            if status == "Failed":
                raise WaiterError(f"Waiter TrainingJobCompletedOrStopped failed: job {TrainingJobName} Failed")
            time.sleep(delay)
        raise WaiterError("Waiter TrainingJobCompletedOrStopped failed: Max attempts exceeded")


def client(service: str, *, home: str | Path | None = None, store: Store | None = None) -> Any:
    """``trainmon.client("sagemaker")``, ``("cloudwatch")``, ``("logs")`` or ``("trainmon")``, like ``boto3.client``."""
    if service not in _CLIENTS:
        raise ValueError(f"Unknown service: {service!r}. Valid service names are: {', '.join(_CLIENTS)}")
    root = Path(home).expanduser().resolve() if home is not None else None
    return _CLIENTS[service](store, root)
