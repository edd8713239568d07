"""trainmon: watch machine-learning training jobs the way SageMaker and CloudWatch do, on your own machines.

    import trainmon
    sm = trainmon.client("sagemaker")          # boto3's shapes, on the embedded store
    sm.describe_training_job(TrainingJobName="my-job")["FinalMetricDataList"]
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import ClientError, ResourceInUse, ResourceNotFound, TrainmonError, ValidationException

if TYPE_CHECKING:
    from .sdk.analytics import TrainingJobAnalytics
    from .sdk.analytics import TrainingJobAnalytics as analytics
    from .sdk.clients import client
    from .sdk.estimator import Estimator, Session, UnexpectedStatusException
    from .sdk.tuner import CategoricalParameter, ContinuousParameter, HyperparameterTuner, IntegerParameter
    from .store.profiles import profile

# Imported when first used, so that a training script's ``import trainmon.debug`` stays light.
_LAZY = {"TrainingJobAnalytics": ("sdk.analytics", "TrainingJobAnalytics"),
         "analytics": ("sdk.analytics", "TrainingJobAnalytics"), "client": ("sdk.clients", "client"),
         "Estimator": ("sdk.estimator", "Estimator"), "Session": ("sdk.estimator", "Session"),
         "UnexpectedStatusException": ("sdk.estimator", "UnexpectedStatusException"),
         "profile": ("store.profiles", "profile"),
         **{name: ("sdk.tuner", name) for name in ("HyperparameterTuner", "ContinuousParameter", "IntegerParameter",
                                                   "CategoricalParameter")}}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'trainmon' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = getattr(importlib.import_module(f".{module}", __name__), attribute)
    globals()[name] = value
    return value


__version__ = "0.1.0"

__all__ = [
    "CategoricalParameter",
    "ClientError",
    "ContinuousParameter",
    "Estimator",
    "HyperparameterTuner",
    "IntegerParameter",
    "ResourceInUse",
    "ResourceNotFound",
    "Session",
    "TrainingJobAnalytics",
    "TrainmonError",
    "UnexpectedStatusException",
    "ValidationException",
    "analytics",
    "client",
    "profile",
]
