"""A real multi-node Ray cluster on this machine, for the Ray launcher's tests.

Every node is a plain ``ray start --block`` process in a session of its own, with its own short ``--temp-dir``
and its own environment (its own TRAINMON_HOME), so that a test can kill one node for real (SIGKILL of its
whole session) without touching the other nodes or other tests' clusters. ``ray stop`` is never used: it
kills every Ray process of the machine. The pytest process itself never calls ``ray.init``: whatever needs a
driver runs one in a subprocess (:meth:`RayCluster.run_driver`).
"""

from __future__ import annotations

import ctypes
import fcntl
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

START_LOCK = Path("/tmp/trainmon-raycluster.lock")  # see RayCluster._start_nodes
_STACK_FRAME = re.compile(r"/\S+\(\+0x[0-9a-f]+\)|\*\*\* ")  # a raylet stack trace's lines

OBJECT_STORE_BYTES = 78_643_200  # Ray's minimum; its default (30 % of memory, per node) would not fit

# The environment of every node, over os.environ (a caller's `env` goes over these).
NODE_ENV = {
    # 2.60 switches token authentication on by itself once ~/.ray/auth_token exists (any local ray.init()
    # writes one), and a driver without the token is then refused: say it explicitly.
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    # The GCS health-checks each raylet: a killed node is marked dead after `threshold` failed checks,
    # ~1.5 s here instead of ~15-30 s; a live node has to stall for ~4 s (3 timeouts) to be taken for dead.
    "RAY_health_check_initial_delay_ms": "500",
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    # On SIGTERM `ray start --block` first drains its node, for up to 30 s by default.
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
}

# The environment of a driver or client, over os.environ: it must agree with the nodes on authentication.
CLIENT_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}

# How a driver prints its result: every driver also prints, to stdout and at any moment, the cluster's error
# messages ("(raylet) The node ... has been marked dead ..."), log_to_driver or not.
RESULT = "@@result "

# A driver that waits until exactly the named nodes are alive (each name a custom resource that one node
# has) and prints ray.nodes() as JSON; exit status 3 (after printing them) when the deadline passes first.
_WAIT_NODES = """
import json, os, sys, time
import ray
names = json.loads(sys.argv[1])
deadline = time.monotonic() + float(sys.argv[2])
ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR", log_to_driver=False)
while True:
    nodes = ray.nodes()
    alive = [n for n in nodes if n["Alive"]]
    if len(alive) == len(names) and all(sum(name in n["Resources"] for n in alive) == 1 for name in names):
        break
    if time.monotonic() > deadline:
        print("@@result " + json.dumps(nodes, default=str))
        sys.exit(3)
    time.sleep(0.1)
print("@@result " + json.dumps(nodes, default=str))
"""

_libc = ctypes.CDLL(None, use_errno=True)


def driver_result(stdout: str) -> Any:
    """The JSON that a driver printed after RESULT (the last such line of its output)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT) :])
    raise ValueError(f"no {RESULT.strip()} line in the driver's output: {stdout[-3000:]}")


def _die_with_parent() -> None:
    """Run in the node's process before exec: SIGTERM it when the pytest process dies, so that not even a
    killed test run leaves a cluster behind (``ray start`` then ends its node in ~2 s; with SIGKILL its
    agents would linger for about a minute)."""
    _libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def ray_cli() -> str:
    """The ``ray`` command of the Python running the tests (not a shim that might pick another Python)."""
    beside = Path(sys.executable).parent / "ray"
    if beside.exists():
        return str(beside)
    found = shutil.which("ray")
    if found is None:
        raise RuntimeError("no ray command beside sys.executable nor on PATH")
    return found


def session_pids(sid: int) -> list[int]:
    """The live (not zombie) processes of session `sid`: a node's Ray workers, unlike its raylet and GCS,
    are in process groups of their own, but none leaves the session."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state ppid pgrp session ...; comm may hold spaces
        if fields[0] != "Z" and int(fields[3]) == sid:
            pids.append(int(entry))
    return pids


def _kill_session(sid: int, timeout: float = 15.0) -> None:
    """SIGKILL every process of session `sid`, again until none is left (a raylet may fork while dying)."""
    deadline = time.monotonic() + timeout
    while pids := session_pids(sid):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {pids} of session {sid} survive SIGKILL")
        time.sleep(0.02)


class _NodeExited(RuntimeError):
    """A node's ``ray start`` exited (its logs in the message)."""


@contextmanager
def _machine_lock(deadline: float) -> Iterator[None]:
    """Hold the lock that one cluster at a time holds while its nodes start (all clusters, all processes)."""
    with open(START_LOCK, "a") as file:
        while True:
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"other nodes kept {START_LOCK} until the deadline") from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def _tail(path: Path, limit: int = 3000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(line for line in text.splitlines() if not _STACK_FRAME.match(line))[-limit:]


@dataclass
class _Node:
    index: int  # 0 the head, 1..N the workers
    dir: Path
    process: subprocess.Popen[bytes] | None = None
    generation: int = 0  # how many times started: a restarted node gets a fresh temp dir (stale sockets)

    @property
    def home(self) -> Path:
        return self.dir / "home"

    @property
    def temp_dir(self) -> Path:
        return self.dir / f"ray{self.generation}"

    @property
    def log(self) -> Path:
        return self.dir / f"start{self.generation}.log"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class RayCluster:
    """A head and `workers` worker nodes, each a ``ray start --block`` process of this machine.

    The head has the custom resource ``head``, worker i (1..N) ``node-i``: a task or actor pinned with
    ``resources={"node-2": 0.01}`` runs on worker 2. Every node runs with os.environ, NODE_ENV, `env`, and
    TRAINMON_HOME set to its own directory (:meth:`node_home`); Ray workers inherit it, with `cwd`.
    Start it from the thread that outlives it (the nodes die with the thread that started them).
    """

    def __init__(
        self,
        workers: int = 3,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        head_cpus: int = 1,
        worker_cpus: int = 1,
        start_timeout: float = 180.0,
    ) -> None:
        self.workers = workers
        self.env = dict(env or {})
        self.cwd = cwd
        self.head_cpus = head_cpus
        self.worker_cpus = worker_cpus
        self.start_timeout = start_timeout
        self.root: Path | None = None
        self._nodes: list[_Node] = []
        self._address: str | None = None

    # -- the cluster ---------------------------------------------------------------------------

    def __enter__(self) -> RayCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> RayCluster:
        """Start the head, then all workers at once, and return once a driver sees every node alive. Only one
        cluster at a time starts on the machine (see _start_nodes)."""
        deadline = time.monotonic() + self.start_timeout
        self.root = Path(tempfile.mkdtemp(prefix="tmray", dir="/tmp"))  # Unix socket paths: 107 bytes at most
        self._nodes = [_Node(i, self.root / f"n{i}") for i in range(self.workers + 1)]
        try:
            for node in self._nodes:
                node.home.mkdir(parents=True)
            with _machine_lock(deadline):
                self._start_nodes(self._nodes[:1], deadline)  # the workers need the head's address
                self._start_nodes(self._nodes[1:], deadline)
            self.wait_nodes(timeout=max(deadline - time.monotonic(), 1.0))
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """End every node: SIGTERM to each ``ray start``, SIGKILL to whatever of their sessions is left after a
        bounded wait, then remove the directories. Safe to call twice, and after a failed start.

        ``ray start`` takes its processes down in order on SIGTERM (~3 s; SIGTERM to the whole process group
        at once is slower, ~4 s, and without RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=0 it drains for 30 s)."""
        started = [node.process for node in self._nodes if node.process is not None]
        for process in started:
            if process.poll() is None:  # not reaped yet, so the pid is still its own
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10.0
        while any(p.poll() is None for p in started) and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            for process in started:
                _kill_session(process.pid)
                process.wait(timeout=10)
        finally:
            if self.root is not None:
                shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
            self._nodes = []
            self._address = None

    @property
    def address(self) -> str:
        """The GCS address (``ip:port``): what a client passes as ``--ray-address`` or RAY_ADDRESS."""
        if self._address is None:
            raise RuntimeError("the cluster is not started")
        return self._address

    def resource(self, i: int) -> str:
        """The custom resource that only node i has: ``head`` for 0, ``node-i`` for worker i."""
        return "head" if i == 0 else f"node-{i}"

    def node_home(self, i: int) -> Path:
        """The TRAINMON_HOME of node i (0 the head, 1..N the workers): the directory its processes see."""
        return self._nodes[i].home

    @property
    def aws_config(self) -> Path:
        """The AWS configuration file every node reads (AWS_CONFIG_FILE), absent until a test writes it; no
        node reads this machine's own ~/.aws."""
        if self.root is None:
            raise RuntimeError("the cluster is not started")
        return self.root / "aws-config"

    def node_env(self, i: int) -> dict[str, str]:
        """The environment node i's processes run with (the launcher's agents read TRAINMON_HOME from it)."""
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS" and not k.startswith("AWS_")}
        aws = {"AWS_CONFIG_FILE": str(self.aws_config), "AWS_SHARED_CREDENTIALS_FILE": str(self.aws_config)}
        return env | NODE_ENV | aws | self.env | {"TRAINMON_HOME": str(self.node_home(i))}

    def node_pids(self, i: int) -> list[int]:
        """The live processes of node i: ``ray start``, raylet (and GCS on the head), agents, Ray workers."""
        process = self._nodes[i].process
        return session_pids(process.pid) if process is not None else []

    def client_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment for a driver or client of this cluster: RAY_ADDRESS set, authentication agreed."""
        return dict(os.environ) | CLIENT_ENV | {"RAY_ADDRESS": self.address} | dict(extra or {})

    def run_driver(
        self,
        code: str,
        *args: str,
        timeout: float = 120.0,
        env: Mapping[str, str] | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``python -c code args`` as a driver of this cluster (RAY_ADDRESS in its environment), so that
        the pytest process never calls ray.init itself; with `check`, a non-zero exit raises. A driver prints its
        result as a line RESULT + JSON, read back with driver_result(stdout)."""
        done = subprocess.run(
            [sys.executable, "-c", code, *args],
            env=self.client_env(env),
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"driver exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done

    def nodes(self) -> list[dict[str, Any]]:
        """ray.nodes() as a driver sees it now: dead nodes stay listed (Alive false, Resources empty)."""
        code = (
            "import json, ray; ray.init(logging_level='ERROR', log_to_driver=False);"
            f" print({RESULT!r} + json.dumps(ray.nodes(), default=str))"
        )
        return list(driver_result(self.run_driver(code).stdout))

    def wait_nodes(self, alive: Iterable[int] | None = None, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Wait until exactly the nodes `alive` (indexes; by default all but those killed) are alive as the GCS
        sees them, and return ray.nodes(). After kill_node(i), this is how long Ray takes to notice. Fails
        early, with the node's logs, when one of the nodes waited for exits."""
        if alive is None:
            alive = [node.index for node in self._nodes if node.process is not None]
        waited = [self._nodes[i] for i in alive]
        names = [self.resource(node.index) for node in waited]
        deadline = time.monotonic() + timeout + 120.0  # the driver's own deadline is `timeout`, after ray.init
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            probe = subprocess.Popen(
                [sys.executable, "-c", _WAIT_NODES, json.dumps(names), str(timeout)],
                stdout=out,
                stderr=err,
                env=self.client_env(),
                cwd=self.root,
            )
            try:
                while probe.poll() is None:
                    for node in waited:
                        self._check_running(node)
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"the driver waiting for nodes {names} hangs")
                    time.sleep(0.1)
            finally:
                if probe.poll() is None:
                    probe.kill()
                    probe.wait()
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        if probe.returncode == 3:
            raise TimeoutError(f"nodes {names} not (only they) alive after {timeout} s: {stdout[-3000:]}")
        if probe.returncode != 0:
            raise RuntimeError(f"driver exited {probe.returncode}\n{stdout[-3000:]}\n{stderr[-3000:]}")
        return list(driver_result(stdout))

    # -- one node ------------------------------------------------------------------------------

    def kill_node(self, i: int) -> None:
        """Kill node i for real: SIGKILL to every process of its session (raylet, agents, its Ray workers, which
        are in process groups of their own). Returns once they are gone; Ray notices ~1.5 s later."""
        node = self._nodes[i]
        if node.process is None:
            return
        _kill_session(node.process.pid)
        node.process.wait(timeout=10)
        node.process = None  # its pid, free now, may become another process's: never signal it again

    def restart_node(self, *indexes: int, timeout: float = 120.0) -> None:
        """Start these workers afresh (after kill_node, or after they died) and wait until every node started is
        alive. Each is a new Ray node (a new node id) with the same resources and the same TRAINMON_HOME."""
        if 0 in indexes:
            raise ValueError("the head cannot be restarted: start a new cluster")
        deadline = time.monotonic() + timeout
        for i in indexes:
            self.kill_node(i)  # whatever is left of it
        with _machine_lock(deadline):
            self._start_nodes([self._nodes[i] for i in indexes], deadline)
        self.wait_nodes(timeout=max(deadline - time.monotonic(), 1.0))

    def heal(self) -> None:
        """Bring the cluster back to all its nodes, alive: restart the workers that are gone (a whole new cluster
        if the head is gone). Cheap when nothing is wrong: it looks only at the node processes."""
        if self.root is None or not self._nodes[0].running():
            self.close()
            self.start()
        elif gone := [node.index for node in self._nodes[1:] if not node.running()]:
            self.restart_node(*gone)

    def clear_homes(self) -> None:
        """Empty every node's TRAINMON_HOME, and remove the nodes' AWS configuration (a test's data must not
        reach the next one)."""
        for node in self._nodes:
            shutil.rmtree(node.home, ignore_errors=True)
            node.home.mkdir(parents=True)
        if self.root is not None:
            self.aws_config.unlink(missing_ok=True)

    # -- internals -----------------------------------------------------------------------------

    def _spawn(self, node: _Node) -> None:
        node.generation += 1
        node.temp_dir.mkdir(parents=True)
        args = [
            ray_cli(),
            "start",
            "--block",
            f"--temp-dir={node.temp_dir}",
            f"--num-cpus={self.head_cpus if node.index == 0 else self.worker_cpus}",
            f"--resources={json.dumps({self.resource(node.index): 1})}",
            f"--object-store-memory={OBJECT_STORE_BYTES}",
            "--min-worker-port=0",  # ports the OS picks, not 10002-19999 shared by every node of the machine
            "--max-worker-port=0",
            "--disable-usage-stats",
            "--log-style=record",
        ]
        if node.index == 0:
            args += ["--head", "--port=0", "--include-dashboard=false"]
            if importlib.util.find_spec("grpc") is not None:  # the Ray client server would take port 10001
                args.append(f"--ray-client-server-port={_free_port()}")
        else:
            args.append(f"--address={self.address}")
        with node.log.open("wb") as log:
            node.process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.node_env(node.index),
                cwd=self.cwd or node.dir,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    def _start_nodes(self, nodes: list[_Node], deadline: float, attempts: int = 3) -> None:
        """Start these nodes at once and wait until each ``ray start`` is past starting up, starting a node again
        (up to `attempts` times) when it fails.

        Why the machine lock around this and the retries: the raylet gives its dashboard agent (Python) 15 s
        to report its ports and aborts (``Check failed`` in raylet.out) when the agent is slower, which it is on
        a loaded 2-core machine when many nodes start at once (several clusters under xdist, ~9 s for 3 nodes
        of one). That wait is fixed: no RAY_ knob changes it, and choosing the agents' ports does not skip it."""
        tries = dict.fromkeys((node.index for node in nodes), 1)
        for node in nodes:
            self._spawn(node)
        waiting = list(nodes)
        while waiting:
            for node in list(waiting):
                try:
                    if self._is_up(node):
                        waiting.remove(node)
                except _NodeExited:
                    if tries[node.index] == attempts:
                        raise
                    tries[node.index] += 1
                    self.kill_node(node.index)  # whatever is left of the failed attempt
                    self._spawn(node)
            if waiting and time.monotonic() > deadline:
                raise TimeoutError(f"node {waiting[0].index} is not up\n{self._logs(waiting[0])}")
            time.sleep(0.1)

    def _is_up(self, node: _Node) -> bool:
        """Whether ``ray start`` wrote the file it writes into its temp dir once its node is registered with the
        GCS (on the head, the cluster's address, which it then takes); _NodeExited if it exited."""
        self._check_running(node)
        file = node.temp_dir / "ray_current_cluster"
        text = file.read_text().strip() if file.exists() else ""
        if not re.fullmatch(r"\S+:\d+", text):
            return False
        if node.index == 0:
            self._address = text
        return True

    def _check_running(self, node: _Node) -> None:
        if not node.running():
            raise _NodeExited(f"ray start of node {node.index} exited\n{self._logs(node)}")

    def _logs(self, node: _Node) -> str:
        """The end of the node's logs, less the raylet's stack traces (its ``Check failed`` line comes before)."""
        parts = [f"== {node.log}\n{_tail(node.log)}"]
        for name in ("raylet.out", "raylet.err", "gcs_server.err"):
            for path in sorted(node.temp_dir.glob(f"session_2*/logs/{name}")):  # not session_latest, a link
                parts.append(f"== {path}\n{_tail(path)}")
        return "\n".join(parts)


# -- the fixture ---------------------------------------------------------------------------------

_shared: dict[str, Any] = {}  # this pytest process's cluster (one per xdist worker), or why it failed


@pytest.fixture
def ray_cluster(request: pytest.FixtureRequest) -> Iterator[RayCluster]:
    """A 1+3-node cluster, shared by the tests of this pytest process (starting one takes ~20 s) and closed
    when the session ends; every test gets it whole (nodes an earlier test killed are restarted) and with
    empty node homes. Its head has no CPU, so a job's hosts go to the workers and its supervisor (which
    takes none) to the head, where the cluster's coordinator ends after 3 s without a job. A test that
    needs other settings uses ``with RayCluster(...) as cluster:``."""
    if "error" in _shared:
        raise RuntimeError("the shared Ray cluster failed to start earlier") from _shared["error"]
    cluster: RayCluster | None = _shared.get("cluster")
    if cluster is None:
        # a coordinator idle for 3 s ends (300 s by default): the tests see it come and go
        cluster = RayCluster(head_cpus=0, env={"TRAINMON_COORDINATOR_IDLE_SECONDS": "3"})
        request.session.addfinalizer(cluster.close)
        try:
            cluster.start()
        except Exception as error:
            _shared["error"] = error
            raise
        _shared["cluster"] = cluster
    else:
        cluster.heal()
    cluster.clear_homes()
    yield cluster
