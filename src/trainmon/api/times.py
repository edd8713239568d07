"""Times across the operations layer: requests may give a datetime, epoch seconds or ISO 8601
text (what boto3 accepts); responses give timezone-aware datetimes (what boto3 returns), which
each protocol then writes in its own form."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ..cloudwatch.model import epoch_seconds
from ..errors import InvalidParameterValue, ValidationException

_DOC_TIMES = ("CreationTime", "TrainingStartTime", "TrainingEndTime", "LastModifiedTime", "HyperParameterTuningEndTime",
              "ConvergenceDetectedTime")


def as_datetime(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, tz=UTC)


def epoch_s(value: Any, field: str) -> float:
    """A request's time as epoch seconds (CloudWatch's reading of it, with SageMaker's error)."""
    try:
        return epoch_seconds(value, field)
    except InvalidParameterValue:
        raise ValidationException(f"{field} must be a timestamp: a datetime, epoch seconds or ISO 8601 text.") from None


def as_datetimes(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A job document's (or summary's) epoch-second fields as datetimes."""
    out = dict(doc)
    for field in _DOC_TIMES:
        if out.get(field) is not None:
            out[field] = as_datetime(out[field])
    if "SecondaryStatusTransitions" in doc:
        out["SecondaryStatusTransitions"] = [
            {k: as_datetime(v) if k in ("StartTime", "EndTime") else v for k, v in t.items()}
            for t in doc["SecondaryStatusTransitions"]
        ]
    for field in ("DebugRuleEvaluationStatuses", "ProfilerRuleEvaluationStatuses"):
        if field in doc:
            out[field] = [{**s, "LastModifiedTime": as_datetime(s["LastModifiedTime"])} for s in doc[field]]
    if "FinalMetricDataList" in doc:
        out["FinalMetricDataList"] = [{**m, "Timestamp": as_datetime(m["Timestamp"])}
                                      for m in doc["FinalMetricDataList"]]
    return out
