"""A job's hosts, wherever they run, as the supervisor drives them (:class:`JobHosts`), and what a
launcher is given to make them (:class:`HostsContext`). Each launcher (``runtime/launchers/``)
has its implementation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..capture.loss import Loss

if TYPE_CHECKING:
    from ...jobs.document import JobDocument
    from ...store import JobRow, Store
    from ..retry import Patience
    from ..watch.profilewatch import ProfileTap
    from .jobstate import JobState

FAILURE_REASON_CHARS = 1024


@dataclass(frozen=True)
class HostsContext:
    """What the supervisor gives a launcher to make the job's hosts."""

    store: Store
    job: JobRow
    names: list[str]  # algo-1..algo-N
    state: JobState  # the job's statuses, written through outages; whether it is asked to stop
    echo: bool = False  # the output echoed to this process's terminal
    live_metrics: bool = False  # and the metrics as they come


HostsFactory = Callable[[HostsContext], "JobHosts"]


class JobHosts(Protocol):
    """Every host of one job, as the supervisor sees them."""

    names: list[str]
    tag: str  # every process of the job carries it (launcher.TAG_VARIABLE)

    def place(self) -> str | None:
        """Find the machines the hosts run on (waiting for room, with a status message); a
        FailureReason when there are none. It returns early when the job is asked to stop."""
        ...

    def prepare(self) -> str | None:
        """Each host's directories, inputs and code (the contract); a FailureReason when they cannot be put in place."""
        ...

    def start(self, profile_tap: ProfileTap | None) -> str | None:
        """Start every host, its capture and its system monitor; a FailureReason when one cannot be started."""
        ...

    def poll(self) -> dict[str, int | None]:
        """Each host's exit status (negative: killed by that signal), None while it runs."""
        ...

    def signal(self, sig: int) -> None:
        """``sig`` to every process of the job, on every host."""
        ...

    def running(self) -> bool:
        """Whether any process of the job is left on any host."""
        ...

    def wait(self) -> dict[str, int]:
        """Wait for every host's main process (after SIGKILL); their exit statuses."""
        ...

    def last_read(self) -> dict[str, float]:
        """When each host's output was last read (epoch seconds), for rules that judge activity."""
        ...

    def stored_through(self) -> int | None:
        """The time (epoch ms) every host's output read before it is stored by; None: not known."""
        ...

    def tensor_files(self) -> dict[str, Path]:
        """Where on this machine the rules read each host's tensor records (the tensor hook's file)."""
        ...

    def finish(self, patience: Patience | None = None) -> HostsEnd:
        """The monitors stopped and the output drained (bounded) and stored, for as long as
        ``patience`` lasts: what was lost, and why, and whether some was left in the spool."""
        ...

    def failure_reason(self, host: str, code: int) -> str:
        """Why a host failed, as FailureReason says it: its failure file, else its exit and last stderr."""
        ...

    def pack(self, doc: JobDocument) -> None:
        """model.tar.gz (and output.tar.gz) from the first host; OSError when it cannot be written."""
        ...

    def close(self) -> None: ...


@dataclass
class HostsEnd:
    loss: Loss = field(default_factory=Loss)
    ingest_failure: str | None = None  # the output could not be stored at all
    left: bool = False  # what was not stored waits in the job's spool (patience with the store was lost)
    warnings: list[str] = field(default_factory=list)  # what failed beside the job (the monitor, the checkpoints' copy)
