"""The operations layer: one function per operation, the request's members as keyword arguments in
boto3's shape, the response as a dict in boto3's shape. Validation, paging and errors (with AWS's
codes) live here, once; the Python clients, the CLI, the Estimator and the server are doors onto it.

``SERVICES`` maps each service to its operations by their API names (``CreateTrainingJob``): the
SageMaker training-job operations and Search, CloudWatch's metric and alarm operations, CloudWatch Logs' log-stream
operations, STS's GetCallerIdentity, IAM's GetRole and SimulatePrincipalPolicy, and the operations only trainmon has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import alarms, artifacts, cloudwatch, identity, logs, sagemaker, trainmon, tuning

Operation = Callable[..., dict[str, Any]]

SERVICES: dict[str, dict[str, Operation]] = {
    "sagemaker": {**sagemaker.OPERATIONS, **tuning.OPERATIONS},
    "cloudwatch": {**cloudwatch.OPERATIONS, **alarms.OPERATIONS},
    "logs": logs.OPERATIONS,
    "sts": identity.STS,
    "iam": identity.IAM,
    "trainmon": {**trainmon.OPERATIONS, **artifacts.OPERATIONS},
}
