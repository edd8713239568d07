"""The seam between the supervisor's hosts and the machines they run on: a :class:`Launcher` starts
each host (its command, environment and directory, a :class:`HostSpec`) and hands back a
:class:`Host`: its output streams, its exit status, and nothing else. Signals go to the job as a
whole (every process of every host), because that is what a stop, a failure or the end of a job
needs. The local launcher's (:mod:`.local.launcher`) is the implementation; a Ray job's host agent
uses it on its node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class LaunchError(Exception):
    """A host could not be started; the message says why and what to check."""


@dataclass(frozen=True)
class HostSpec:
    name: str
    command: list[str]
    env: dict[str, str]  # the job's own variables: a process also gets this one's, a container its image's
    cwd: str
    opt_ml: str | None = None  # a process's: the directory it sees at /opt/ml (processes.optml)


class Host(Protocol):
    name: str

    def streams(self) -> tuple[int, int]:
        """Descriptors of the host's stdout and stderr, read ends; the caller owns and closes them."""
        ...

    def poll(self) -> int | None:
        """The exit status of the host's main process (negative: killed by that signal), or None."""
        ...

    def wait(self) -> int:
        """Wait for the host's main process to end; its exit status."""
        ...


class Launcher(Protocol):
    tag: str  # every process of the job carries it (TAG_VARIABLE): what is left of a job is found by it

    def start(self, spec: HostSpec) -> Host:
        """Start one host; LaunchError when its command cannot be started."""
        ...

    def signal(self, sig: int) -> None:
        """Send ``sig`` to every process of the job, on every host."""
        ...

    def running(self) -> bool:
        """Whether any process of the job is left (the hosts' main processes or any they started)."""
        ...

    def process_groups(self) -> dict[str, int]:
        """Each host's process group on this machine, for the system monitor (none for hosts elsewhere)."""
        ...

    def close(self) -> None: ...
