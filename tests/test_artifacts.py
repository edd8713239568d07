"""A job's artifacts: a real job writes its model, its output data and checkpoints, and reads a
channel; the operations layer lists them with their sizes and an archive's members, the server
sends any of them (or one member) as a download whose bytes are the file's, and nothing outside the
places the job names can be read through them."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import httpx
import pytest

import trainmon
from trainmon.api import artifacts
from trainmon.errors import ResourceNotFound, ValidationException

from .conftest import ServerProcess


def test_a_jobs_artifacts_are_listed_with_their_sizes(job_with_artifacts: tuple[str, Path, Path, Path]) -> None:
    name, data, kept, out = job_with_artifacts
    listed = trainmon.client("trainmon").list_job_artifacts(TrainingJobName=name)["Artifacts"]
    model = next(out.rglob("model.tar.gz"))
    assert [(a["Id"], a["Kind"], a["Size"]) for a in listed] == [
        ("model.tar.gz", "Model", model.stat().st_size),
        ("output.tar.gz", "Output", model.with_name("output.tar.gz").stat().st_size),
        ("checkpoints/epoch-1.ckpt", "Checkpoint", 3),
        ("channels/train/a.csv", "Channel", 4),
        ("channels/train/sub/b.csv", "Channel", 4),
    ]
    assert listed[3]["Channel"] == "train" and listed[3]["Location"] == str(data)
    members = trainmon.client("trainmon").list_archive_members(TrainingJobName=name, Artifact="model.tar.gz")
    assert sorted((m["Name"], m["Size"], m["Type"]) for m in members["Members"]) == [
        ("config.json", 13, "file"), ("extra", 0, "directory"), ("extra/note.txt", 1, "file"),
        ("weights.bin", 10240, "file")]


def test_the_server_sends_an_artifact_or_a_member_as_it_is(job_with_artifacts: tuple[str, Path, Path, Path],
                                                           server: ServerProcess) -> None:
    name, _data, _kept, out = job_with_artifacts
    model = next(out.rglob("model.tar.gz"))
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as http:
        whole = http.get(f"/api/jobs/{name}/artifacts/file", params={"artifact": "model.tar.gz"})
        assert whole.status_code == 200 and whole.content == model.read_bytes()
        assert whole.headers["content-disposition"].startswith('attachment; filename="model.tar.gz"')
        assert whole.headers["content-type"] == "application/octet-stream"
        assert whole.headers["x-content-type-options"] == "nosniff" and whole.headers["content-security-policy"] == "sandbox"
        member = http.get(f"/api/jobs/{name}/artifacts/file", params={"artifact": "model.tar.gz",
                                                                     "member": "weights.bin"})
        with tarfile.open(fileobj=io.BytesIO(model.read_bytes())) as archive:
            expected = archive.extractfile("weights.bin").read()  # type: ignore[union-attr]
        assert member.content == expected == bytes(range(256)) * 40
        listed = http.get(f"/api/jobs/{name}/artifacts").json()["Artifacts"]
        assert "channels/train/sub/b.csv" in [a["Id"] for a in listed]
        assert http.get(f"/api/jobs/{name}/artifacts/file", params={"artifact": "channels/train/sub/b.csv"}
                        ).text == "x\n2\n"
        log = http.get(f"/api/jobs/{name}/log.txt")
        assert log.status_code == 200 and log.text == "read 3 training files\n"
        assert log.headers["content-disposition"].startswith('attachment; filename="arts.log"')
        for artifact in ("channels/train/link-out", "channels/train/../secret", "checkpoints/../data/a.csv",
                         "channels/train/", "model.tar.gz/../x", "/etc/passwd"):
            refused = http.get(f"/api/jobs/{name}/artifacts/file", params={"artifact": artifact})
            assert refused.status_code == 400 and refused.json()["error"]["code"] == "ResourceNotFound", artifact
        missing = http.get(f"/api/jobs/{name}/artifacts/file", params={"artifact": "model.tar.gz", "member": "nope"})
        assert missing.status_code == 400 and "holds no member 'nope'" in missing.json()["error"]["message"]


def test_nothing_outside_the_jobs_places_is_read(job_with_artifacts: tuple[str, Path, Path, Path], store: Any) -> None:
    name = job_with_artifacts[0]
    listed = [a["Id"] for a in artifacts.list_job_artifacts(store, TrainingJobName=name)["Artifacts"]]
    assert "channels/train/link-out" not in listed  # a link is not followed
    with pytest.raises(ResourceNotFound):
        artifacts.open_artifact(store, name, "channels/train/link-out")
    with pytest.raises(ValidationException, match="is not a file"):
        artifacts.open_artifact(store, name, "model.tar.gz", "extra")
    with pytest.raises(ValidationException, match="not a tar archive"):
        artifacts.list_archive_members(store, TrainingJobName=name, Artifact="checkpoints/epoch-1.ckpt")
