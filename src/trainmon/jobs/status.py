"""SageMaker's job statuses: the secondary status a job enters, the primary status it implies, the
transitions DescribeTrainingJob lists and the times they set (pure: documents in, documents out)."""

from __future__ import annotations

from .document import Description, FinalMetric, JobDocument, ProfilerConfig, Transition
from .rulestatus import KINDS, as_described

TERMINAL = ("Completed", "Failed", "Stopped")
ACTIVE = ("InProgress", "Stopping")
PRIMARY = {
    "Starting": "InProgress",
    "Downloading": "InProgress",
    "Training": "InProgress",
    "Uploading": "InProgress",
    "Stopping": "Stopping",
    "Completed": "Completed",
    "Failed": "Failed",
    "Stopped": "Stopped",
    "MaxRuntimeExceeded": "Stopped",
}
MESSAGES = {
    "Starting": "Preparing the instances for training",
    "Downloading": "Preparing the input data channels",
    "Training": "Training in progress.",
    "Uploading": "Uploading generated training model",
    "Completed": "Training job completed",
    "Failed": "Training job failed",
    "Stopping": "Stopping the training job",
    "Stopped": "Training job stopped",
    "MaxRuntimeExceeded": "Training job stopped: it ran longer than MaxRuntimeInSeconds",
}


TRAINMON_FIELDS = ("TrainmonConfig", "UnstoredOutput", "RuleFindings", "HostPlacements")  # none of SageMaker's


def transition(doc: JobDocument, status: str, now: float, message: str | None = None,
               *, ended_at: float | None = None) -> None:
    """Enter a secondary status: close the open transition, open the new one, set the primary.

    A status that ends the job sets the training end time to ``ended_at`` when given (when the
    job's processes ended, if that was earlier than now), else to ``now``.
    """
    transitions = doc["SecondaryStatusTransitions"]
    if transitions and "EndTime" not in transitions[-1]:
        transitions[-1]["EndTime"] = now
    entry: Transition = {"Status": status, "StartTime": now, "StatusMessage": message or MESSAGES[status]}
    primary = PRIMARY[status]
    if primary in TERMINAL:
        end = min(now, ended_at) if ended_at is not None else now
        entry["EndTime"] = now
        doc["TrainingEndTime"] = end
        start = doc.get("TrainingStartTime")
        if start is not None:
            seconds = max(1, int(end - start))
            doc["TrainingTimeInSeconds"] = seconds
            doc["BillableTimeInSeconds"] = seconds
    if status == "Downloading":
        doc["TrainingStartTime"] = now
    transitions.append(entry)
    doc["SecondaryStatus"] = status
    doc["TrainingJobStatus"] = primary
    doc["LastModifiedTime"] = now


def may_enter(doc: JobDocument, status: str) -> bool:
    """Whether ``status`` may follow the job's status: nothing follows an end, and a stop request
    is never undone by a later InProgress status."""
    current = doc["TrainingJobStatus"]
    return current not in TERMINAL and not (current == "Stopping" and PRIMARY[status] == "InProgress")


def profiler_settings(doc: JobDocument | Description) -> ProfilerConfig | None:
    """The job's ProfilerConfig when it profiles (interval and location filled in), else None."""
    settings = doc["ProfilerConfig"]
    return None if settings.get("DisableProfiler", True) else settings


def description(doc: JobDocument, finals: list[FinalMetric]) -> Description:
    """The DescribeTrainingJob answer of a document (times as epoch seconds): SageMaker's fields only,
    so trainmon's own (how it runs the job, what it could not store, its rules' findings) are left out;
a rule a job left InProgress when it ended is reported Stopped."""
    answer: dict[str, object] = {k: v for k, v in doc.items() if k not in TRAINMON_FIELDS}
    answer["FinalMetricDataList"] = finals
    answer["ProfilingStatus"] = "Enabled" if profiler_settings(doc) else "Disabled"
    ended = doc["TrainingJobStatus"] in TERMINAL
    for field in KINDS.values():
        if field in doc:
            answer[field] = as_described(doc[field], ended, doc.get("TrainingEndTime"))  # type: ignore[literal-required]
    return answer  # type: ignore[return-value]  # the document's fields and the two added ones
