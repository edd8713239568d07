"""CreateTrainingJob requests generated from botocore's own model of the operation, valid and
broken: each ends in one of two ways, a ValidationException before anything runs, or a job that
runs to an end trainmon explains. Never a traceback, never a supervisor that dies."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
botocore_session = pytest.importorskip("botocore.session")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import trainmon  # noqa: E402
from trainmon.errors import ValidationException  # noqa: E402

MODEL = botocore_session.get_session().get_service_model("sagemaker").operation_model("CreateTrainingJob").input_shape
NAMES = (f"generated-{n}" for n in itertools.count())
BASE: dict[str, Any] = {
    "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["true"]},
    "ResourceConfig": {"InstanceType": "local", "InstanceCount": 1, "VolumeSizeInGB": 0},
    "ProfilerConfig": {"DisableProfiler": True},
}
OPTIONAL = sorted(set(MODEL.members) - {"TrainingJobName", "AlgorithmSpecification", "RoleArn", "OutputDataConfig"})
ANYTHING = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                     max_size=3), max_leaves=6)


def values(shape: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values of a botocore shape, mostly well-formed (its members, types and limits)."""
    kind = shape.type_name
    if kind == "structure":
        if depth > 3:
            return st.just({})
        members = {name: values(member, depth + 1) for name, member in shape.members.items()}
        required = {name: members.pop(name) for name in shape.required_members if name in members}
        return st.fixed_dictionaries(required, optional=members)
    if kind == "list":
        return st.lists(values(shape.member, depth + 1), max_size=2)
    if kind == "map":
        return st.dictionaries(values(shape.key, depth + 1), values(shape.value, depth + 1), max_size=2)
    if kind == "string":
        if shape.enum:
            return st.sampled_from(shape.enum)
        low = shape.metadata.get("min", 0)
        return st.text(min_size=low, max_size=max(low, min(shape.metadata.get("max", 12), 12)))
    if kind in ("integer", "long"):
        low = shape.metadata.get("min", -5)
        return st.integers(low, shape.metadata.get("max", low + 100))
    if kind == "boolean":
        return st.booleans()
    if kind in ("float", "double"):
        return st.floats(allow_nan=False)
    return ANYTHING


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    """A job that runs `true`, with a few of the model's other fields, and maybe one field broken."""
    request: dict[str, Any] = {"TrainingJobName": next(NAMES), **BASE}
    for name in draw(st.lists(st.sampled_from(OPTIONAL), max_size=3, unique=True)):
        request[name] = draw(values(MODEL.members[name]))
    if draw(st.booleans()):
        broken = draw(st.sampled_from(sorted(request)))
        if broken != "TrainingJobName":
            request[broken] = draw(ANYTHING)
    return request


@pytest.mark.timeout(900)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(request=requests())
def test_a_generated_request_is_refused_cleanly_or_runs_to_an_explained_end(home: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch,
                                                                            request: dict[str, Any]) -> None:
    monkeypatch.chdir(tmp_path)  # relative paths in a generated request land here
    sm = trainmon.client("sagemaker")
    try:
        created = sm.create_training_job(**request)
    except ValidationException as error:
        hypothesis.event("refused")
        assert error.response["Error"]["Code"] == "ValidationException"
        assert error.message
        assert sm.store.get_job(request["TrainingJobName"]) is None  # nothing stored, nothing started
        return
    hypothesis.event("accepted")
    assert created["TrainingJobArn"].endswith(request["TrainingJobName"])
    _wait(sm, request["TrainingJobName"])
    job = sm.describe_training_job(TrainingJobName=request["TrainingJobName"])
    log = (home / "jobs" / request["TrainingJobName"] / "supervisor.log").read_text(errors="replace")
    assert "Traceback" not in log, log
    if job["TrainingJobStatus"] == "Failed":  # the command could not run (a PATH of the request's, say): said so
        assert job["FailureReason"].startswith(("ClientError:", "AlgorithmError:")), job["FailureReason"]
    else:
        assert job["TrainingJobStatus"] == "Completed"


def _wait(sm: Any, name: str) -> None:
    deadline = time.monotonic() + 120
    while sm.describe_training_job(TrainingJobName=name)["TrainingJobStatus"] not in ("Completed", "Failed",
                                                                                       "Stopped"):
        assert time.monotonic() < deadline, f"job {name} did not end"
        time.sleep(0.05)
