"""The Python SDK: boto3-shaped clients (:mod:`.clients`), the SageMaker SDK's ``Estimator``
(:mod:`.estimator`) and ``TrainingJobAnalytics`` (:mod:`.analytics`), all over :mod:`trainmon.api`."""
