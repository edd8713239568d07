"""The launchers a job may name (``TrainmonConfig.Launcher``), each a folder of this package.

A launcher decides where a job's hosts run and how the supervisor drives them; its :class:`Kind`
says everything the rest of trainmon needs of it: the job's hosts, the members of
``TrainmonConfig`` it takes and how a request for it is checked and completed, ``trainmon run``'s
flags of its own, whether the hosts' files are on this machine, and whether its jobs are supervised
by the process that starts them or handed over (a Ray job's supervisor runs in the cluster). A new
launcher is one folder beside ``local/`` and ``ray/`` whose ``__init__`` defines its kind, and one
entry in :data:`KINDS`: nothing outside its folder names it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .kind import Kind

if TYPE_CHECKING:
    from ...jobs.document import JobDocument
    from ..job.hosts import HostsContext, JobHosts

DEFAULT = "local"


def _kinds() -> dict[str, Kind]:
    from . import local, ray

    return {kind.name: kind for kind in (local.KIND, ray.KIND)}


KINDS: dict[str, Kind] = _kinds()


def kind(name: str | None) -> Kind:
    return KINDS[name or DEFAULT]


def of(doc: JobDocument) -> Kind:
    """The launcher a job names."""
    return kind(doc["TrainmonConfig"].get("Launcher"))


def job_hosts(context: HostsContext) -> JobHosts:
    """The hosts of the job, made by the launcher it names: the supervisor's usual ``hosts``."""
    return of(context.job.doc).hosts(context)
