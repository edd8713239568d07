"""trainmon: watch machine-learning training jobs the way SageMaker and CloudWatch do, on your own machines.

    import trainmon
    sm = trainmon.client("sagemaker")          # boto3's shapes, on the embedded store
    sm.describe_training_job(TrainingJobName="my-job")["FinalMetricDataList"]
"""

from __future__ import annotations

from .errors import ClientError, ResourceInUse, ResourceNotFound, TrainmonError, ValidationException
from .sdk.analytics import TrainingJobAnalytics
from .sdk.analytics import TrainingJobAnalytics as analytics
from .sdk.clients import client
from .sdk.estimator import Estimator, Session, UnexpectedStatusException
from .store.profiles import profile

__version__ = "0.1.0"

__all__ = [
    "ClientError",
    "Estimator",
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
