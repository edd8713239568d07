from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from trainmon.cloudwatch.retention import Retention
from trainmon.store import Store, open_store

POSTGRES_BIN = Path(os.environ.get("TRAINMON_TEST_POSTGRES_BIN", "/usr/lib/postgresql/15/bin"))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh data directory; subprocesses inherit it through TRAINMON_HOME."""
    root = tmp_path / "home"
    root.mkdir()
    monkeypatch.setenv("TRAINMON_HOME", str(root))
    return root


TEST_MARK = "TRAINMON_TEST_MARK"


@pytest.fixture(autouse=True)
def _jobs_end_with_their_test(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every process a test's jobs started ends with the test, whether it passed, failed or timed
    out: each inherits the test's mark, and those that are a job's processes, its spooler or a
    tuning job's tuner (each carries a tag of its own) are killed once the test's own fixtures are done."""
    mark = uuid.uuid4().hex
    monkeypatch.setenv(TEST_MARK, mark)
    yield
    marked = f"{TEST_MARK}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone, or not ours
            continue
        if marked in environ and any(v.startswith((b"TRAINMON_PROCESS_TAG=", b"TRAINMON_SPOOLER_OF=",
                                                   b"TRAINMON_TUNER_OF=")) for v in environ):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)


@pytest.fixture(autouse=True)
def _no_database_url(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests use SQLite unless they ask for PostgreSQL: a URL in the shell must not reach them."""
    monkeypatch.delenv("TRAINMON_DATABASE_URL", raising=False)


@pytest.fixture
def store(home: Path) -> Iterator[Store]:
    s = open_store(home)
    yield s
    s.close()


# -- PostgreSQL ----------------------------------------------------------------------------


@dataclass
class PostgresServer:
    """A PostgreSQL cluster this test run started: trust authentication, 127.0.0.1 only."""

    port: int
    control: Callable[[str], subprocess.CompletedProcess[str]] | None = None  # runs pg_ctl ACTION
    names = itertools.count()

    def stop(self) -> None:
        """Shut the server down (an outage: clients' connections drop, new ones are refused)."""
        assert self.control is not None
        result = self.control("stop")
        assert result.returncode == 0, result.stdout + result.stderr

    def start(self) -> None:
        assert self.control is not None
        result = self.control("start")
        assert result.returncode == 0, result.stdout + result.stderr

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as db:
            db.execute(sql)

    def create_database(self) -> str:
        name = f"test_{os.getpid()}_{next(self.names)}"
        self.admin(f"CREATE DATABASE {name} TEMPLATE template0")  # much faster than template1 here
        return name

    def drop_database(self, name: str) -> None:
        self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _as_server_user(root: Path) -> list[str]:
    """The prefix that runs PostgreSQL's programs: as the ``postgres`` user when we are root
    (initdb refuses root; ``root`` is then in /tmp, which that user can enter), as ourselves otherwise."""
    if os.geteuid() != 0:
        return []
    shutil.chown(root, "postgres", "postgres")
    return ["runuser", "-u", "postgres", "--"]


def pytest_configure(config: pytest.Config) -> None:
    """A test run ended by SIGTERM (a CI timeout, a kill) tears down as an interrupted one does: the
    session's fixtures end what they started (PostgreSQL servers, Ray clusters), which would otherwise
    be left running without a parent."""

    def interrupted(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    def in_a_forked_child() -> None:
        """A forked child (a process pool's worker) ends at SIGTERM at once, as it would without this:
        its pool ends it so, and a handler run between two steps of Python can come too late for a
        worker about to wait on its queue, which then never ends (a test of scan_file hung so)."""
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupted)
        os.register_at_fork(after_in_child=in_a_forked_child)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL 15 server for the whole test run, in a temp dir, on a free port."""
    pytest.importorskip("psycopg", reason="the PostgreSQL tests need psycopg: pip install -e '.[test]'")
    if not (POSTGRES_BIN / "initdb").exists():
        pytest.skip(f"PostgreSQL is not installed at {POSTGRES_BIN} (set TRAINMON_TEST_POSTGRES_BIN)")
    with postgres_cluster() as server:
        yield server


@contextmanager
def postgres_cluster() -> Iterator[PostgresServer]:
    """Start a PostgreSQL server from POSTGRES_BIN in a temp dir, on a free port; stop and remove it
    afterwards (the tests' server, and the benchmarks')."""
    root = Path(tempfile.mkdtemp(prefix="trainmon-pg-", dir="/tmp" if os.geteuid() == 0 else None))
    user = _as_server_user(root)
    data = root / "data"

    def run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*user, *map(str, argv)], cwd=root, capture_output=True, text=True, timeout=120)

    initdb = run(POSTGRES_BIN / "initdb", "-D", data, "-U", "postgres", "--auth=trust", "--encoding=UTF8",
                 "--locale=C", "--no-sync")
    assert initdb.returncode == 0, initdb.stdout + initdb.stderr
    def control(action: str, port: int) -> subprocess.CompletedProcess[str]:
        if action == "stop":
            return run(POSTGRES_BIN / "pg_ctl", "-D", data, "-m", "fast", "-w", "stop")
        options = (f"-p {port} -c listen_addresses=127.0.0.1 -k {root} -c fsync=off -c synchronous_commit=off "
                   "-c full_page_writes=off -c max_connections=200")
        return run(POSTGRES_BIN / "pg_ctl", "-D", data, "-l", root / "server.log", "-o", options, "-w", "-t", "60",
                   "start")

    for _attempt in range(3):  # another process may take the free port before the server binds it
        port = free_port()
        started = control("start", port)
        if started.returncode == 0:
            break
    else:
        log = (root / "server.log").read_text(errors="replace") if (root / "server.log").exists() else ""
        raise AssertionError(f"PostgreSQL did not start:\n{started.stdout}{started.stderr}\n{log}")
    try:
        yield PostgresServer(port, lambda action: control(action, port))
    finally:
        control("stop", port)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of a fresh, empty database in the session's server, dropped after the test."""
    name = postgres_server.create_database()
    yield postgres_server.url(name)
    postgres_server.drop_database(name)


@dataclass(frozen=True)
class StoreTarget:
    """Where a test's store lives: what ``open_store`` needs to open it again (in another process too)."""

    backend: str
    home: Path
    database_url: str  # "" for SQLite in ``home``

    def open(self, retention: Retention | None = None) -> Store:
        return open_store(self.home, database_url=self.database_url, retention=retention)


@pytest.fixture(params=["sqlite", "postgres"])
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> StoreTarget:
    """Each backend in turn: SQLite in a temp dir, or a fresh database in the session's server."""
    home = tmp_path / "store-home"
    home.mkdir()
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else ""
    return StoreTarget(request.param, home, url)


@pytest.fixture
def any_store(store_target: StoreTarget) -> Iterator[Store]:
    """The store of each backend in turn, for the one contract suite (tests/test_store.py)."""
    s = store_target.open()
    yield s
    s.close()


@pytest.fixture
def script(tmp_path: Path) -> Callable[[str], Path]:
    """Write a small Python training script and return its path."""
    counter = iter(range(1000))

    def write(body: str) -> Path:
        path = tmp_path / f"job_{next(counter)}.py"
        path.write_text(textwrap.dedent(body), encoding="utf-8")
        return path

    return write


@contextmanager
def sqlite_locked(home: Path) -> Iterator[None]:
    """The SQLite store in ``home`` held by a write transaction: every writer waits until the block ends."""
    db = sqlite3.connect(home / "trainmon.db", isolation_level=None, timeout=60)
    try:
        db.execute("BEGIN IMMEDIATE")
        yield
    finally:
        if db.in_transaction:
            db.execute("ROLLBACK")
        db.close()


def echo_watch(process: subprocess.Popen[str], line: str) -> tuple[threading.Event, threading.Thread]:
    """A thread that reads ``process``'s standard output to its end (``trainmon run``'s echo of the
    job's output: never left to fill its pipe), and the event it sets once ``line`` has come."""
    seen = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        with process.stdout:
            for got in process.stdout:
                if got == line:
                    seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return seen, reader


def run_cli(*args: str, input: bytes | None = None, timeout: float = 120, check: bool = False,
            env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m trainmon ARGS`` as a user would, in a real process (in ``cwd``, when given)."""
    result = subprocess.run(
        [sys.executable, "-m", "trainmon", *args],
        cwd=cwd,
        input=input.decode() if input is not None else None,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    if check and result.returncode != 0:
        raise AssertionError(f"trainmon {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture
def cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_cli


PY = sys.executable


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 120, poll_s: float = 0.05) -> None:
    """Until ``condition()`` holds (an event in another thread or process: a file written, a status
    stored); an AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(poll_s)


def process_ends(pid: int, timeout: float = 60.0) -> bool:
    """Whether process ``pid`` ends (or is left a zombie) within ``timeout``."""
    import time

    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


@dataclass
class ServerProcess:
    """A real ``trainmon server`` on a free loopback port, in a process of its own."""

    url: str
    home: Path
    process: subprocess.Popen[str]
    output: list[str]
    _reader: Any = None

    @property
    def token(self) -> str:
        """The access token the server made in its data directory."""
        from trainmon.server import auth

        token = auth.read_token(self.home)
        assert token is not None, "the server made no token"
        return token

    @property
    def headers(self) -> dict[str, str]:
        """What a script sends to be let in: the token, as a bearer token."""
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def key(self) -> Any:
        """The access key the server issued on its first start."""
        from trainmon import access_keys

        return access_keys.oldest(self.home)

    def aws_env(self) -> dict[str, str]:
        """The environment ``trainmon credentials env`` gives an AWS client."""
        return {"AWS_ENDPOINT_URL": self.url, "AWS_ACCESS_KEY_ID": self.key.AccessKeyId,
                "AWS_SECRET_ACCESS_KEY": self.key.SecretAccessKey, "AWS_DEFAULT_REGION": "us-east-1"}

    def sign_in_url(self) -> str:
        """A one-time sign-in link, as ``trainmon console`` prints it."""
        from trainmon.server import auth

        return f"{self.url}/login?code={auth.sign_in_code(self.token)}"

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(2)  # SIGINT, as Ctrl-C
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        status = self.process.wait()
        if self._reader is not None:
            self._reader.join(10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return status


def signed_post(server: ServerProcess, service: str, body: bytes, headers: dict[str, str], path: str = "/") -> Any:
    """A POST signed by botocore's own signer with the server's key, sent by httpx as it is (for
    what boto3 would not send)."""
    import botocore.auth
    import botocore.awsrequest
    import botocore.credentials
    import httpx

    request = botocore.awsrequest.AWSRequest("POST", server.url + path, data=body, headers=headers)
    credentials = botocore.credentials.Credentials(server.key.AccessKeyId, server.key.SecretAccessKey)
    botocore.auth.SigV4Auth(credentials, service, "us-east-1").add_auth(request)
    return httpx.post(server.url + path, content=body, headers=dict(request.headers.items()), timeout=60)


def start_server(home: Path, *args: str, database_url: str = "", env: dict[str, str] | None = None) -> ServerProcess:
    """Start ``trainmon server --port 0`` and wait for the line that says where it listens."""
    import re
    import threading

    environment = {**os.environ, "TRAINMON_HOME": str(home), "TRAINMON_DATABASE_URL": database_url, **(env or {})}
    process = subprocess.Popen([sys.executable, "-m", "trainmon", "server", "--port", "0", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment)
    assert process.stdout is not None
    output: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line)
            if re.search(r"https?://\S+/ ", line):
                ready.set()
        ready.set()  # it ended

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    ready.wait(60)
    found = next((re.search(r"(https?://\S+)/ ", line) for line in output if "://" in line), None)
    started = ServerProcess(found.group(1) if found else "", home, process, output, reader)
    if found is None:
        started.process.kill()
        started.stop()
        raise AssertionError("the server did not start:\n" + "".join(output))
    return started


@pytest.fixture
def server(home: Path) -> Iterator[ServerProcess]:
    """``trainmon server`` over the test's data directory (SQLite)."""
    started = start_server(home)
    yield started
    started.stop()


# -- a job with artifacts (test_artifacts.py, test_console.py) ---------------------------------------


ARTIFACTS_TRAIN = """
import os
from pathlib import Path
(Path(os.environ["SM_MODEL_DIR"]) / "weights.bin").write_bytes(bytes(range(256)) * 40)
(Path(os.environ["SM_MODEL_DIR"]) / "config.json").write_text('{"layers": 3}')
(Path(os.environ["SM_MODEL_DIR"]) / "extra").mkdir()
(Path(os.environ["SM_MODEL_DIR"]) / "extra" / "note.txt").write_text("n")
(Path(os.environ["SM_OUTPUT_DATA_DIR"]) / "predictions.csv").write_text("id,p\\n1,0.5\\n")
(Path(os.environ["CHECKPOINTS"]) / "epoch-1.ckpt").write_text("one")
print("read", len(os.listdir(os.environ["SM_CHANNEL_TRAIN"])), "training files")
"""


@pytest.fixture
def job_with_artifacts(home: Path, tmp_path: Path) -> tuple[str, Path, Path, Path]:
    """A completed job with a model, output data, a checkpoint, and a channel of two files."""
    data, kept, out = tmp_path / "data", tmp_path / "kept", tmp_path / "out"
    for folder in (data / "sub", kept, out):
        folder.mkdir(parents=True)
    (data / "a.csv").write_text("x\n1\n")
    (data / "sub" / "b.csv").write_text("x\n2\n")
    (tmp_path / "secret").write_text("not the job's")
    os.symlink(tmp_path / "secret", data / "link-out")  # a link out of the channel: never listed nor sent
    script = tmp_path / "train.py"
    script.write_text(ARTIFACTS_TRAIN)
    work = tmp_path / "work"
    import trainmon

    sm = trainmon.client("sagemaker")
    sm.create_training_job(
        TrainingJobName="arts", RoleArn="arn:aws:iam::000000000000:role/any",
        AlgorithmSpecification={"TrainingInputMode": "File", "ContainerEntrypoint": [sys.executable, str(script)]},
        InputDataConfig=[{"ChannelName": "train", "DataSource": {"S3DataSource": {
            "S3DataType": "S3Prefix", "S3Uri": str(data), "S3DataDistributionType": "FullyReplicated"}}}],
        OutputDataConfig={"S3OutputPath": str(out)},
        ResourceConfig={"InstanceType": "local", "InstanceCount": 1, "VolumeSizeInGB": 1},
        StoppingCondition={"MaxRuntimeInSeconds": 600},
        CheckpointConfig={"S3Uri": str(kept), "LocalPath": str(work)},
        Environment={"CHECKPOINTS": str(work)},
    )
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="arts", WaiterConfig={"Delay": 0.2})
    assert sm.describe_training_job(TrainingJobName="arts")["TrainingJobStatus"] == "Completed"
    return "arts", data, kept, out
