"""One host of a Ray job, on the node Ray placed it on: a Ray actor that runs and captures it there.

The agent opens the shared store itself and holds a :class:`~trainmon.runtime.launchers.local.hosts.LocalHosts`
of one host: the container contract in the node's own data directory (its ``TRAINMON_HOME``), the
command in a session of its own, its pipes read into a spool and written to the store as records
and points, the node's system metrics and profile. Everything that happens locally happens here
the same way, so monitoring never blocks the command on this node either. The host's processes
carry a tag of their own, and a lifeline (:mod:`trainmon.runtime.launchers.ray.lifeline`) ends them if the
agent ends before they do, however it ends. The job's supervisor
(:mod:`trainmon.runtime.launchers.ray.cluster`) drives the agents: it tells them where their peers are, starts,
signals and ends them, and reads their exit statuses.

The class is plain Python; :mod:`trainmon.runtime.launchers.ray.cluster` makes it a Ray actor, so this module
imports Ray only for what the node says about itself.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from ....jobs.document import JobDocument
from ....store import open_store
from ...contract import layout as contract
from ...contract import tensors
from ...job.hosts import HostsEnd
from ...watch import tensorfeed
from ...watch.profilewatch import ProfileTap
from ..local.hosts import LocalHosts
from . import lifeline

NODE_ID_VARIABLE = "TRAINMON_RAY_NODE_ID"  # the node a host runs on, for its command to read


@dataclass
class Taken:
    """What the job's rules, with its supervisor, read of one host since the last take."""

    profile_rows: list[tuple[str, int, dict[str, float]]]  # the monitor's, for the profiler rules
    dropped: int  # profile rows the tap dropped so far
    tensor_start: int  # where in the host's tensor file these bytes start (0: the file was made anew)
    tensors: bytes  # of the tensor file (at most tensors.MAX_READ_BYTES)


class HostAgent:
    """One host of a job on this node (a Ray actor: see :func:`trainmon.runtime.launchers.ray.cluster.agent_class`)."""

    def __init__(self, database_url: str, job: str, host: str, tag: str) -> None:
        import ray

        self.store = open_store(database_url=database_url)  # the node's own data directory, the shared store
        row = self.store.get_job(job)
        if row is None:
            raise LookupError(f"no job named {job!r} in the store")
        self.row = row
        self.host = host
        self.tag = f"{tag}-{host}"  # this host's alone: nodes may share a machine
        self.lifeline = lifeline.start(self.tag)  # before the launcher makes this process a subreaper
        self.node_id = ray.get_runtime_context().get_node_id()
        self.address = ray.util.get_node_ip_address()
        self.hosts: LocalHosts | None = None
        self.tap: ProfileTap | None = None

    def where(self) -> dict[str, str | int]:
        """The node this host runs on: Ray's node id, its address and name, and a free port there."""
        return {"node_id": self.node_id, "address": self.address, "hostname": socket.gethostname(),
                "port": contract.free_port(self.address)}

    def prepare(self, peers: contract.Peers) -> str | None:
        self.hosts = LocalHosts(self.store, self.row, [self.host], peers, tag=self.tag,
                                environment={NODE_ID_VARIABLE: self.node_id})
        return self.hosts.prepare()

    def start(self, profile: bool) -> str | None:
        """Start the host; with ``profile``, keep the monitor's profile rows for the profiler rules,
        which run with the job's supervisor and get them with :meth:`take`."""
        self.tap = ProfileTap() if profile else None
        return self._hosts().start(self.tap)

    def take(self, copied: dict[str, int]) -> Taken:
        """What the job's rules read of this host: the profile rows since the last call, and the
        tensor file from ``copied[host]``, the size of the supervisor's copy of it."""
        rows, dropped = (self.tap.take(), self.tap.dropped) if self.tap is not None else ([], 0)
        start, chunk = tensorfeed.read_from(tensors.tensor_file(self.store.home, self.row.name, self.host),
                                         copied.get(self.host, 0))
        return Taken(rows, dropped, start, chunk)

    def wait_exit(self) -> int:
        """The host's exit status, once its main process has ended (the actor answers other calls
        meanwhile, on other threads)."""
        return self._hosts().wait()[self.host]

    def signal(self, sig: int) -> None:
        self._hosts().signal(sig)

    def running(self) -> bool:
        return self._hosts().running()

    def last_read(self) -> dict[str, float]:
        return self._hosts().last_read()

    def finish(self) -> HostsEnd:
        return self._hosts().finish()

    def failure_reason(self, code: int) -> str:
        return self._hosts().failure_reason(self.host, code)

    def pack(self, doc: JobDocument) -> None:
        self._hosts().pack(doc)

    def close(self) -> None:
        if self.hosts is not None:
            self.hosts.close()
        if self.lifeline >= 0:
            os.close(self.lifeline)  # the lifeline ends whatever of the host is left, and exits
            self.lifeline = -1

    def _hosts(self) -> LocalHosts:
        if self.hosts is None:
            raise RuntimeError("the host agent was not prepared")
        return self.hosts
