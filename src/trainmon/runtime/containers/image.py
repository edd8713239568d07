"""What a ``TrainingImage`` names: a container image, or (trainmon's own extension) a command line
or a directory holding an executable ``train``.

An image reference follows the engines' grammar: ``[registry[:port]/]path[:tag][@digest]``, path
components of lower-case letters, digits and separators. A string is taken for an image when it
could not be anything else: it holds no whitespace, names no existing file, and says it is an
image by a tag, a digest, a registry host (``localhost``, a name with a dot or a port: ECR's
``123456789012.dkr.ecr.<region>.amazonaws.com/repo`` among them) or nothing but a valid
reference with a ``/`` in it. A bare word (``python3``, ``train``) stays a command, as before
images ran: give it a tag (``my-algo:latest``) to mean the image.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_HOST = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::[0-9]+)?")
_TAG = re.compile(r"\w[\w.-]{0,127}")
_DIGEST = re.compile(r"[a-z0-9]+(?:[+._-][a-z0-9]+)*:[0-9a-fA-F]{32,}")
_ECR = re.compile(r"[0-9]{12}\.dkr\.ecr(?:-fips)?\.[a-z0-9-]+\.amazonaws\.com(?:\.cn)?")


@dataclass(frozen=True)
class ImageReference:
    registry: str | None
    path: str
    tag: str | None = None
    digest: str | None = None

    @property
    def name(self) -> str:
        """The reference as an engine takes it, ``:latest`` when it names neither tag nor digest."""
        where = f"{self.registry}/{self.path}" if self.registry else self.path
        tag = f":{self.tag}" if self.tag else "" if self.digest else ":latest"
        return f"{where}{tag}@{self.digest}" if self.digest else f"{where}{tag}"

    @property
    def in_ecr(self) -> bool:
        return self.registry is not None and _ECR.fullmatch(self.registry) is not None


def parse(text: str) -> ImageReference | None:
    """The image ``text`` names, or None when it is not a valid reference."""
    if len(text) > 255:
        return None
    rest, _, digest = text.partition("@")
    if digest and not _DIGEST.fullmatch(digest):
        return None
    head, _, last = rest.rpartition("/")
    last, _, tag = last.partition(":")
    if tag and not _TAG.fullmatch(tag):
        return None
    components = [*head.split("/"), last] if head else [last]
    registry = None
    if len(components) > 1 and _is_registry(components[0]):
        registry = components.pop(0)
        if not _HOST.fullmatch(registry):
            return None
    if not all(_COMPONENT.fullmatch(component) for component in components):
        return None
    return ImageReference(registry, "/".join(components), tag or None, digest or None)


def named_image(training_image: str) -> ImageReference | None:
    """The container image a ``TrainingImage`` names, or None when it names a command or a directory."""
    text = training_image.strip()
    if not text or text == "local" or any(c.isspace() for c in text) or Path(text).expanduser().exists():
        return None
    reference = parse(text)
    if reference is None:
        return None
    if reference.tag or reference.digest or reference.registry or "/" in reference.path:
        return reference if not text.startswith((".", "/", "~")) else None
    return None  # a bare word: a command on PATH, as a TrainingImage has always been able to be


def _is_registry(component: str) -> bool:
    return component == "localhost" or "." in component or ":" in component or component != component.lower()
