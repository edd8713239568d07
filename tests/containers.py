"""The container tests' images, built offline on first use and kept by the engine between runs:

- the base, a Debian system with Python and pip (``mmdebstrap --variant=apt --include=python3,python3-pip``,
  packages from Debian's mirror, then ``podman import``): no container registry is reached;
- the training image, ``tests/images/algo`` built FROM it (a real ``podman build``), and a stand-in
  for a framework image, ``tests/images/framework``, each tagged with a digest of its files so that
  a change to them builds it again.

Several test workers may ask at once: the first builds, under a lock, the others wait for it.
"""

from __future__ import annotations

import fcntl
import hashlib
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from trainmon.runtime.containers import engine as engines

BASE = "localhost/trainmon-test-base:3"
ALGO_DIR = Path(__file__).parent / "images" / "algo"
FRAMEWORK_DIR = Path(__file__).parent / "images" / "framework"
FRAMEWORK_REPOSITORY = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training"
MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"


def engine() -> engines.Engine:
    return engines.find()


@contextmanager
def _lock(name: str) -> Iterator[None]:
    with open(Path(tempfile.gettempdir()) / f"trainmon-test-{name}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def base_image() -> str:
    found = engine()
    with _lock("base-image"):
        if not found.present(BASE):
            with tempfile.TemporaryDirectory() as scratch:
                archive = Path(scratch) / "base.tar"
                subprocess.run(["mmdebstrap", "--quiet", "--variant=apt", "--include=python3,python3-pip", SUITE,
                                str(archive), MIRROR], check=True, stdin=subprocess.DEVNULL)
                found.call(["import", str(archive), BASE], timeout_s=600)
    return BASE


def algo_image() -> str:
    """The training image of tests/images/algo, built if its files changed since it last was."""
    return _built(ALGO_DIR, "localhost/trainmon-test-algo")


def framework_image() -> str:
    """tests/images/framework, a stand-in for a SageMaker framework image, named as PyTorch's is in
    ECR (with a tag of its own: a job naming PyTorch's real tags finds no such image here)."""
    return _built(FRAMEWORK_DIR, f"{FRAMEWORK_REPOSITORY}", tag_prefix="trainmon-test-")


def _built(directory: Path, repository: str, tag_prefix: str = "") -> str:
    base = base_image()
    digest = hashlib.sha256()
    for path in sorted(directory.iterdir()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    name = f"{repository}:{tag_prefix}{digest.hexdigest()[:12]}"
    found = engine()
    with _lock(directory.name + "-image"):
        if not found.present(name):
            assert found.present(base)
            found.call(["build", "--pull=never", "--tag", name, str(directory)], timeout_s=600)
    return name


def left_by(tag: str) -> list[str]:
    """The containers of the job with this process tag that still exist."""
    return engine().tagged(tag)
