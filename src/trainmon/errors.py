"""Every error trainmon raises on purpose.

    TrainmonError                       code                     HTTP
    ├── ValidationException             ValidationException      400
    ├── ResourceNotFound                ResourceNotFound         400*
    ├── ResourceInUse                   ResourceInUse            400
    ├── ConflictException               ConflictException        409
    ├── StoreError                      InternalFailure          500
    │   ├── StoreFull                   InternalFailure          500
    │   └── DuplicateKey                InternalFailure          500
    ├── WaiterError                     WaiterError
    ├── CloudWatchError                 (CloudWatch query codes) 400
    │   ├── InvalidParameterValue       InvalidParameterValue
    │   ├── MissingParameter            MissingParameter
    │   ├── InvalidParameterCombination InvalidParameterCombination
    │   ├── InvalidFormat               InvalidFormat
    │   ├── Throttling                  Throttling
    │   └── AlarmNotFound               ResourceNotFound         404
    ├── LogsError                       (CloudWatch Logs codes)  400
    │   ├── LogResourceNotFound         ResourceNotFoundException
    │   └── InvalidParameterException   InvalidParameterException
    ├── S3Error                         (S3's codes)             its own
    │   ├── NoSuchBucket                NoSuchBucket             404
    │   ├── NoSuchKey                   NoSuchKey                404
    │   ├── NoSuchUpload                NoSuchUpload             404
    │   ├── BucketAlreadyOwnedByYou     BucketAlreadyOwnedByYou  409
    │   ├── BucketNotEmpty              BucketNotEmpty           409
    │   ├── InvalidBucketName           InvalidBucketName        400
    │   ├── InvalidObjectKey            InvalidArgument, KeyTooLongError 400
    │   ├── InvalidRange                InvalidRange             416
    │   ├── InvalidPart                 InvalidPart, InvalidPartOrder, EntityTooSmall 400
    │   └── BadDigest                   BadDigest                400
    └── HttpError                       (the server's own)
        ├── Unauthorized                Unauthorized             401
        ├── Forbidden                   Forbidden                403
        ├── NotFound                    NotFound                 404
        ├── MethodNotAllowed            MethodNotAllowed         405
        └── PayloadTooLarge             PayloadTooLarge          413

* SageMaker answers a missing training job with ``ValidationException`` "Requested resource
  not found." and boto3's waiter relies on it; :meth:`ResourceNotFound.for_job` builds that form.

Each error carries a stable ``code`` (SageMaker's own where the API has one) and a message that
says what went wrong and, where it helps, what to do next. ``response`` mirrors botocore's
``ClientError.response`` so code written against boto3 can read ``err.response["Error"]["Code"]``.
"""

from __future__ import annotations

from typing import Any


class TrainmonError(Exception):
    code = "InternalFailure"
    http_status = 500

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    @property
    def brief(self) -> dict[str, str]:
        """The error as the server's JSON API answers it (``code``, ``message``)."""
        return {"code": self.code, "message": self.message}

    @property
    def response(self) -> dict[str, Any]:
        return {
            "Error": {"Code": self.code, "Message": self.message},
            "ResponseMetadata": {"HTTPStatusCode": self.http_status},
        }

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class ValidationException(TrainmonError):
    code = "ValidationException"
    http_status = 400


class ResourceNotFound(TrainmonError):
    code = "ResourceNotFound"
    http_status = 400

    @classmethod
    def for_job(cls, name: str) -> ValidationException:
        """SageMaker's actual answer for a missing training job (see module docstring)."""
        return ValidationException(f"Requested resource not found. No training job named {name!r}.")


class ResourceInUse(TrainmonError):
    code = "ResourceInUse"
    http_status = 400


class ConflictException(TrainmonError):
    code = "ConflictException"
    http_status = 409


class StoreError(TrainmonError):
    code = "InternalFailure"
    http_status = 500


class StoreFull(StoreError):
    """The disk holding the store is full: what is written next fails until space is freed."""


class DuplicateKey(StoreError):
    """A row's unique key is taken; the store turns it into the API's error (ResourceInUse for a job)."""


class WaiterError(TrainmonError):
    """A waiter saw a failure state or ran out of attempts (botocore's ``WaiterError``)."""

    code = "WaiterError"


class CloudWatchError(TrainmonError):
    """CloudWatch's errors carry the query-protocol codes boto3 reports as ``Error.Code``."""

    http_status = 400


class InvalidParameterValue(CloudWatchError):
    code = "InvalidParameterValue"


class MissingParameter(CloudWatchError):
    code = "MissingParameter"


class InvalidParameterCombination(CloudWatchError):
    code = "InvalidParameterCombination"


class InvalidFormat(CloudWatchError):
    """CloudWatch's answer to text that must be JSON and is not (SetAlarmState's StateReasonData)."""

    code = "InvalidFormat"


class Throttling(CloudWatchError):
    """CloudWatch's answer to more PutMetricData than it takes (``Throttling``, HTTP 400): here, the
    datapoints waiting to be stored reached their bound. boto3 tries such a call again, later."""

    code = "Throttling"


class AlarmNotFound(CloudWatchError):
    """No alarm of that name: CloudWatch's ``ResourceNotFound`` (HTTP 404), not SageMaker's."""

    code = "ResourceNotFound"
    http_status = 404


class LogsError(TrainmonError):
    """CloudWatch Logs' errors, with its own codes."""

    http_status = 400


class LogResourceNotFound(LogsError):
    code = "ResourceNotFoundException"


class InvalidParameterException(LogsError):
    code = "InvalidParameterException"


# boto3 code catches ``botocore.exceptions.ClientError``; ours is the same base under that name.
ClientError = TrainmonError


class HttpError(TrainmonError):
    """What only the server answers: a request it cannot take, whatever operation it names."""


class Unauthorized(HttpError):
    code = "Unauthorized"
    http_status = 401


class Forbidden(HttpError):
    code = "Forbidden"
    http_status = 403


class NotFound(HttpError):
    code = "NotFound"
    http_status = 404


class MethodNotAllowed(HttpError):
    code = "MethodNotAllowed"
    http_status = 405


class PayloadTooLarge(HttpError):
    code = "PayloadTooLarge"
    http_status = 413


class S3Error(TrainmonError):
    """The object store's errors (``store/objects.py``), with S3's codes and statuses; S3's XML error
    also names the bucket, key or upload it is about."""

    code = "InvalidArgument"
    http_status = 400

    def __init__(self, message: str, *, code: str | None = None, bucket: str | None = None,
                 key: str | None = None, upload_id: str | None = None, http_status: int | None = None,
                 details: dict[str, str] | None = None) -> None:
        super().__init__(message, code=code)
        self.bucket, self.key, self.upload_id = bucket, key, upload_id
        self.details = details or {}  # more elements of S3's XML error (InvalidRange's ActualObjectSize)
        if http_status is not None:
            self.http_status = http_status


class NoSuchBucket(S3Error):
    code = "NoSuchBucket"
    http_status = 404


class NoSuchKey(S3Error):
    code = "NoSuchKey"
    http_status = 404


class NoSuchUpload(S3Error):
    code = "NoSuchUpload"
    http_status = 404


class BucketAlreadyOwnedByYou(S3Error):
    code = "BucketAlreadyOwnedByYou"
    http_status = 409


class BucketNotEmpty(S3Error):
    code = "BucketNotEmpty"
    http_status = 409


class InvalidBucketName(S3Error):
    code = "InvalidBucketName"


class InvalidObjectKey(S3Error):
    """A key that names no file: too long (``KeyTooLongError``), or a segment a path cannot hold."""


class InvalidRange(S3Error):
    code = "InvalidRange"
    http_status = 416


class InvalidPart(S3Error):
    """A CompleteMultipartUpload list S3 would refuse (``InvalidPart``, ``InvalidPartOrder``, ``EntityTooSmall``)."""

    code = "InvalidPart"


class BadDigest(S3Error):
    """The bytes do not match the digest the client sent (Content-MD5 or an x-amz-checksum-*)."""

    code = "BadDigest"
