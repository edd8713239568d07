"""Jobs whose hosts run on the nodes of a Ray cluster (``TrainmonConfig.Launcher`` ``ray``).

Ray places and keeps processes; trainmon does the rest as it does locally:

- **Submission** (:mod:`trainmon.runtime.launchers.ray.rayjob`): the job's supervisor runs in the cluster, on a
  thread of the cluster's coordinator (a detached Ray actor), so the job does not depend on the
  machine it was submitted from.
- **Placement.** The supervisor asks for a placement group of one bundle per host, each what a
  host takes (``HostResources``, from the instance type by default), spread one per node
  (``STRICT_SPREAD``). A cluster with too few nodes that could ever hold a host fails the job at
  once with a CapacityError (unless ``WaitForNodes``); a busy one makes it wait, up to
  ``ResourceWaitSeconds``, with a status message that says what for.
- **Hosts.** Each bundle gets a host agent (:mod:`trainmon.runtime.launchers.ray.hostagent`), which runs and
  captures its host on that node and writes to the shared store. :class:`RayHosts` drives them
  through the same calls as local hosts, so stop requests, the time limit, rules and the final
  status work as for a local job. An agent lost with its node fails the job, naming the host and
  the node; the other hosts are ended.
"""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path
from typing import Any

from ....errors import StoreError
from ....jobs.document import HostPlacement, JobDocument
from ....rules.catalog import TENSOR_RULES
from ....store import JobRow, Store
from ...contract import layout as contract
from ...contract import tensors
from ...job.hosts import FAILURE_REASON_CHARS, HostsEnd
from ...job.jobstate import JobState
from ...processes import tags
from ...retry import Patience
from ...watch import tensorfeed
from ...watch.profilewatch import ProfileTap
from ...watch.rulewatch import evaluated_rules

NAMESPACE = "trainmon"
CONNECT_TIMEOUT_S = 5.0  # a TCP answer from the cluster's address, before Ray's own (much longer) wait
PLACE_POLL_S = 1.0  # a queued job looks for a stop request this often
RECOUNT_S = 10.0  # and counts the nodes that could hold a host this often
PULL_S = 1.0  # how often what the rules read of the hosts (profile rows, tensor files) is taken from the agents
CALL_TIMEOUT_S = 60.0  # an agent's answer to a short call (signal, running, where)
LOST = -int(signal.SIGKILL)  # the exit status recorded for a host whose agent was lost with its node


class ClusterError(Exception):
    """The Ray cluster cannot be reached or cannot run the job; the message says why."""


def connect(address: str) -> None:
    """Connect this process to the Ray cluster at ``address`` (once per process)."""
    import ray

    if ray.is_initialized():
        return
    _check_reachable(address)
    ray.init(address=address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)


def _check_reachable(address: str) -> None:
    """Fail in seconds when nothing answers at the address: Ray itself waits for minutes."""
    if "://" in address or ":" not in address:
        return  # ray://, auto: Ray's own forms, left to Ray
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except (OSError, ValueError) as exc:
        raise ClusterError(f"cannot reach the Ray cluster at {address}: {exc}. Check the address "
                           "(ray start --head prints it) and that this machine reaches it.") from None


def brief(exc: BaseException) -> str:
    """An error of Ray's in a line: its last one (a remote traceback ends with the error itself)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:400]


# -- the supervisor's view of the hosts ------------------------------------------------------------


def agent_class() -> Any:
    import ray

    from .hostagent import HostAgent

    return ray.remote(max_restarts=0, max_concurrency=4)(HostAgent)


class RayHosts:
    """A job's hosts, each on its own node of the Ray cluster, driven from the job's supervisor."""

    def __init__(self, store: Store, job: JobRow, names: list[str], state: JobState) -> None:
        self.store = store
        self.job = job
        self.names = names
        self.state = state
        self.tag = tags.new_tag()
        self.settings = job.doc["TrainmonConfig"]
        self.resources: dict[str, float] = self.settings["HostResources"]  # filled in when the job was created
        self.group: Any = None
        self.agents: dict[str, Any] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.exits: dict[str, Any] = {}  # host -> the ObjectRef of its exit status
        self.codes: dict[str, int] = {}
        self.lost: dict[str, str] = {}  # host -> why its agent is gone
        self.profile_tap: ProfileTap | None = None  # the supervisor's, for the profiler rules
        self.pulls = False  # the job's rules read what the agents take (profile rows, tensor files)
        self._dropped: dict[str, int] = {}  # profile rows each agent's tap dropped so far
        self._copy_trouble: str | None = None  # why a tensor file could not be copied here, the first time
        self._next_pull = 0.0

    # -- placement and start ----------------------------------------------------------------

    def place(self) -> str | None:
        import ray
        from ray.util.placement_group import placement_group

        connect(self.settings["RayAddress"])
        bundles = [dict(self.resources) for _ in self.names]
        self.group = placement_group(bundles, strategy="STRICT_SPREAD", name=f"trainmon-{self.job.name}")
        ready = self.group.ready()
        wait_s = self.settings["ResourceWaitSeconds"]
        deadline = time.monotonic() + wait_s
        waiting = False
        need = f"{len(self.names)} hosts, one per node, each taking {_shown(self.resources)}"
        fit, recount = 0, 0.0
        while not ray.wait([ready], timeout=PLACE_POLL_S)[0]:
            if time.monotonic() >= recount:
                fit, recount = _nodes_that_fit(self.resources), time.monotonic() + RECOUNT_S
            if fit < len(self.names) and not self.settings["WaitForNodes"]:
                return (f"CapacityError: the Ray cluster at {self.settings['RayAddress']} has {fit} node"
                        f"{'' if fit == 1 else 's'} that can hold a host of this job, and the job needs {need}. "
                        "Add nodes, ask for less (TrainmonConfig.HostResources, or a smaller instance type), or "
                        "let the job wait for nodes to join (TrainmonConfig.WaitForNodes).")
            if self.state.stop_requested():
                return None
            if time.monotonic() >= deadline:
                return (f"CapacityError: the Ray cluster at {self.settings['RayAddress']} had no room for {need} "
                        f"within {wait_s} s (TrainmonConfig.ResourceWaitSeconds).")
            if not waiting:
                waiting = True
                self.state.enter("Starting", f"Waiting for the Ray cluster to place {need}: {fit} of its nodes "
                                 "can hold one")
        return None

    def prepare(self) -> str | None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        agent = agent_class()
        custom = {k: v for k, v in self.resources.items() if k not in ("CPU", "GPU", "memory")}
        for index, host in enumerate(self.names):
            self.agents[host] = agent.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=index),
                num_cpus=self.resources.get("CPU", 0), num_gpus=self.resources.get("GPU", 0),
                memory=self.resources.get("memory"), resources=custom,
            ).remote(self.store.database_url, self.job.name, host, self.tag)
        try:
            where = dict(zip(self.names, ray.get([a.where.remote() for a in self.agents.values()],
                                                 timeout=CALL_TIMEOUT_S), strict=True))
        except Exception as exc:
            return f"InternalServerError: could not start the job's host agents on the Ray cluster: {brief(exc)}"
        self.nodes = where
        self._record_placement()
        peers = contract.Peers.on_nodes({host: str(w["address"]) for host, w in where.items()},
                                        int(where[self.names[0]]["port"]),
                                        containers="Image" in self.job.doc["TrainmonConfig"])
        try:
            failures = ray.get([a.prepare.remote(peers) for a in self.agents.values()])
        except Exception as exc:
            return f"InternalServerError: a host agent failed while preparing its host: {brief(exc)}"
        return next((f for f in failures if f is not None), None)

    def _record_placement(self) -> None:
        placements: list[HostPlacement] = [{"Host": host, "NodeId": str(w["node_id"]), "Address": str(w["address"]),
                       "Hostname": str(w["hostname"])} for host, w in self.nodes.items()]

        def record(row: JobRow) -> None:
            row.doc["HostPlacements"] = placements

        try:
            self.store.update_job(self.job.name, record)
        except StoreError:
            pass  # where the hosts run is for people to read; the job goes on without it

    def start(self, profile_tap: ProfileTap | None) -> str | None:
        import ray

        self.profile_tap = profile_tap
        self.pulls = profile_tap is not None or any(rule.rule in TENSOR_RULES for rule in evaluated_rules(self.job.doc))
        try:
            failures = ray.get([a.start.remote(profile_tap is not None) for a in self.agents.values()])
        except Exception as exc:
            return f"InternalServerError: a host agent failed while starting its host: {brief(exc)}"
        self.exits = {host: agent.wait_exit.remote() for host, agent in self.agents.items()}
        return next((f for f in failures if f is not None), None)

    # -- while it runs ----------------------------------------------------------------------

    def poll(self) -> dict[str, int | None]:
        import ray

        pending = {ref: host for host, ref in self.exits.items() if host not in self.codes}
        if pending:
            done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
            for ref in done:
                self._collect(pending[ref], ref)
        if self.pulls and time.monotonic() >= self._next_pull:
            self._next_pull = time.monotonic() + PULL_S
            self._pull()
        return {host: self.codes.get(host) for host in self.names}

    def _pull(self) -> int:
        """What the agents took since the last pull, to where the rules read it on this machine: the
        profile rows into the supervisor's tap, the tensor files' new bytes onto this machine's copies
        of them (tensors.TensorFeed reads those as a local job's own); how many tensor bytes came.
        Each agent reads its file from where its copy ends, so a pull that fails loses nothing."""
        copies = {host: tensors.copy_file(self.store.home, self.job.name, host) for host in self.names}
        came = 0
        for host, taken in self._each("take", {h: tensorfeed.copied_size(p) for h, p in copies.items()}).items():
            if self.profile_tap is not None:
                for row in taken.profile_rows:
                    self.profile_tap.put(*row)
                self._dropped[host] = taken.dropped
            if taken.tensors:
                try:
                    tensorfeed.add_to_copy(copies[host], taken.tensor_start, taken.tensors)
                except OSError as exc:  # this machine's disk: read again at the next pull
                    self._copy_trouble = self._copy_trouble or f"{host}'s tensor file could not be copied here: {exc}"
                    continue
                came += len(taken.tensors)
        if self.profile_tap is not None:
            self.profile_tap.dropped = sum(self._dropped.values())
        return came

    def _collect(self, host: str, ref: Any, timeout: float | None = None) -> None:
        import ray

        try:
            self.codes[host] = int(ray.get(ref, timeout=timeout))
        except ray.exceptions.GetTimeoutError:
            pass  # still running
        except ray.exceptions.ActorUnavailableError:  # unreachable for now (Ray says when it is dead): ask again
            self.exits[host] = self.agents[host].wait_exit.remote()
        except Exception as exc:  # the agent died: its node went, or its worker was killed
            self._lose(host, exc)

    def _lose(self, host: str, exc: BaseException) -> None:
        node = self.nodes.get(host, {})
        where = f"Ray node {node.get('node_id', '?')} ({node.get('address', '?')}, {node.get('hostname', '?')})"
        self.lost[host] = (f"InternalServerError: {host} was lost with its {where}: {brief(exc)}. "
                           "What trainmon had stored of its output stays; the other hosts were stopped.")
        self.codes[host] = LOST

    def _live(self) -> dict[str, Any]:
        return {host: agent for host, agent in self.agents.items() if host not in self.lost}

    def _each(self, method: str, *args: Any, timeout: float | None = CALL_TIMEOUT_S) -> dict[str, Any]:
        """Call ``method`` on every live agent at once; each one's answer (an agent that fails is lost)."""
        import ray

        calls = {host: getattr(agent, method).remote(*args) for host, agent in self._live().items()}
        answers: dict[str, Any] = {}
        for host, ref in calls.items():
            try:
                answers[host] = ray.get(ref, timeout=timeout)
            except (ray.exceptions.GetTimeoutError, ray.exceptions.ActorUnavailableError):
                continue  # busy or unreachable for now, not lost: asked again at the next call
            except Exception as exc:
                self._lose(host, exc)
        return answers

    def signal(self, sig: int) -> None:
        self._each("signal", sig)

    def running(self) -> bool:
        return any(self._each("running").values())

    def wait(self) -> dict[str, int]:
        """Every started host's exit status (each agent answers when its process has ended)."""
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while (waiting := [host for host in self.exits if host not in self.codes]) and time.monotonic() < deadline:
            for host in waiting:
                self._collect(host, self.exits[host], timeout=max(0.0, deadline - time.monotonic()))
        for host in self.exits:
            if host not in self.codes:  # no answer in a minute after SIGKILL
                self._lose(host, TimeoutError("its agent gave no exit status"))
        return dict(self.codes)

    def tensor_files(self) -> dict[str, Path]:
        """The copies this machine keeps of the hosts' files, taken from their agents as they grow."""
        return {host: tensors.copy_file(self.store.home, self.job.name, host) for host in self.names}

    def stored_through(self) -> int | None:
        return None  # each node stores its own host's output; the rules here judge what they have

    def last_read(self) -> dict[str, float]:
        found: dict[str, float] = {}
        for answer in self._each("last_read", timeout=5.0).values():
            found.update(answer)
        return found

    # -- the end ----------------------------------------------------------------------------

    def finish(self, patience: Patience | None = None) -> HostsEnd:
        """(Each node's host agent drains its own host's output, waiting for the store as long as it takes.)"""
        end = HostsEnd()
        answers = self._each("finish", timeout=None)
        if self.pulls:  # the rows of the monitors' last ticks, and the rest of the tensor files
            deadline = time.monotonic() + tensorfeed.FINAL_READ_S
            while self._pull() and time.monotonic() < deadline:
                pass
        for host, answer in answers.items():
            end.loss.add(answer.loss)
            end.ingest_failure = end.ingest_failure or answer.ingest_failure
            end.warnings.extend(f"{host}: {warning}" for warning in answer.warnings)
        for host in self.lost:  # its spool, and what its pipes held, went with the node: not even counted
            end.warnings.append(f"{host}: lost with its node; its output and system metrics end there")
        if self._copy_trouble is not None:
            end.warnings.append(self._copy_trouble)
        return end

    def failure_reason(self, host: str, code: int) -> str:
        if host in self.lost:
            return self.lost[host][:FAILURE_REASON_CHARS]
        answer = self._each("failure_reason", code).get(host)
        return str(answer) if answer is not None else self.lost.get(host, f"AlgorithmError: {host} failed")

    def pack(self, doc: JobDocument) -> None:
        first = self.names[0]
        if first in self.lost:
            raise OSError(f"{first} was lost with its node, and its model directory with it")
        import ray

        try:
            ray.get(self.agents[first].pack.remote(doc))
        except OSError:
            raise
        except Exception as exc:
            raise OSError(brief(exc)) from None

    def close(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        self._each("close", timeout=10.0)
        for agent in self.agents.values():
            ray.kill(agent, no_restart=True)
        if self.group is not None:
            remove_placement_group(self.group)


def _nodes_that_fit(resources: dict[str, float]) -> int:
    """How many live nodes of the cluster could hold one host, counting everything they have."""
    import ray

    nodes: list[dict[str, Any]] = ray.nodes()
    return sum(1 for node in nodes if node.get("Alive")
               and all(node.get("Resources", {}).get(key, 0.0) >= amount for key, amount in resources.items()))


def _shown(resources: dict[str, float]) -> str:
    return ", ".join(f"{amount:g} {key}" for key, amount in sorted(resources.items()))
