"""What a launcher is to the rest of trainmon (:class:`Kind`): its folder's ``__init__`` defines one,
and :mod:`.registry` lists them."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...shapes import Shape

if TYPE_CHECKING:
    from ...store import Store
    from ..job.hosts import HostsFactory
    from ..watch.profilewatch import ReportWriter


def _nothing(*_: Any) -> None:
    return None


def _none_given(_: argparse.Namespace) -> list[str]:
    return []


def _no_settings(_: argparse.Namespace) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class Kind:
    """A launcher, as the supervisor, the API and ``trainmon run`` use it."""

    name: str
    about: str  # where the hosts run, in a few words: for --launcher's help and the API's hint
    hosts: HostsFactory
    where: str = ""  # a job of this kind, as an error message names it ("a job on a Ray cluster")
    members: Mapping[str, Shape] = field(default_factory=dict)  # TrainmonConfig's members of its own
    # what a request needs to run on it (the request, the store's URL, the data directory), before all else
    check: Callable[[Mapping[str, Any], str | None, Path], None] = _nothing
    # its members completed into TrainmonConfig (the settings, the members given, the instance type)
    complete: Callable[[dict[str, Any], Mapping[str, Any], str], None] = _nothing
    files_here: bool = True  # the hosts write their files (the model, the tensor records) on this machine
    # None: the process that starts the job supervises it; else the job handed over to a supervisor elsewhere
    submit: Callable[[Store, str, ReportWriter | None], None] | None = None
    elsewhere: str = ""  # where a job handed over is supervised ("the Ray cluster")
    options: Callable[[argparse.ArgumentParser], None] = _nothing  # trainmon run's flags of its own
    given: Callable[[argparse.Namespace], list[str]] = _none_given  # those flags given, as typed
    from_options: Callable[[argparse.Namespace], dict[str, Any]] = _no_settings  # the members they make
