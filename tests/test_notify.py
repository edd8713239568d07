"""Notifications (runtime/watch/notify.py): a real command and a real local HTTP server receive the payload."""

from __future__ import annotations

import json
import shlex
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from trainmon.runtime.watch import notify

from .conftest import free_port

PAYLOAD: dict[str, Any] = {"Rule": "LossNotDecreasing", "Value": float("nan"), "Limit": float("inf"),
                           "At": datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), "Hosts": ("algo-1",)}
STRICT = {"Rule": "LossNotDecreasing", "Value": "NaN", "Limit": "Infinity", "At": "2024-01-02T03:04:05+00:00",
          "Hosts": ["algo-1"]}


class _Receiver(ThreadingHTTPServer):
    def __init__(self, status: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.status = status
        self.bodies: list[tuple[str, str, bytes]] = []
        self.arrived = threading.Event()


class _Handler(BaseHTTPRequestHandler):
    server: _Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.bodies.append((self.path, self.headers["Content-Type"], body))
        self.send_response(self.server.status)
        self.end_headers()
        self.wfile.write(b"no thanks" if self.server.status >= 400 else b"")
        self.server.arrived.set()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def receiver(request: pytest.FixtureRequest) -> Iterator[_Receiver]:
    server = _Receiver(getattr(request, "param", 200))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _url(server: _Receiver, path: str = "/hook") -> str:
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


def _copier(tmp_path: Path, name: str = "got.json", status: int = 0) -> tuple[str, Path]:
    """An exec: target running a real Python process that copies stdin to a file, then exits ``status``."""
    out = tmp_path / name
    code = f"import sys; open({str(out)!r}, 'wb').write(sys.stdin.buffer.read()); sys.exit({status})"
    return f"exec:{shlex.quote(sys.executable)} -c {shlex.quote(code)}", out


def _wait_for_failure(target: str, deadline_s: float = 30.0) -> notify.DeliveryFailure:
    assert notify.flush(deadline_s)
    failure = notify.last_failure(target)
    assert failure is not None, notify.recent_failures()
    return failure


def test_exec_target_gets_the_payload_as_strict_json_on_stdin(tmp_path: Path) -> None:
    target, out = _copier(tmp_path)
    notify.deliver(target, PAYLOAD)
    assert notify.flush(30)
    assert json.loads(out.read_bytes()) == STRICT
    assert notify.last_failure(target) is None


def test_exec_target_failing_is_recorded_with_its_stderr(tmp_path: Path) -> None:
    code = "import sys; sys.stdin.read(); sys.stderr.write('disk full'); sys.exit(3)"
    target = f"exec:{shlex.quote(sys.executable)} -c {shlex.quote(code)}"
    notify.deliver(target, {"a": 1})
    failure = _wait_for_failure(target)
    assert "exited with status 3" in failure.error and "disk full" in failure.error
    assert failure in notify.recent_failures()


def test_exec_target_that_cannot_start_is_recorded(tmp_path: Path) -> None:
    target = f"exec:{tmp_path / 'no-such-program'} --flag"
    notify.deliver(target, {"a": 1})
    assert "could not start" in _wait_for_failure(target).error


def test_exec_target_is_killed_at_its_timeout(tmp_path: Path) -> None:
    target = f"exec:{shlex.quote(sys.executable)} -c 'import time; time.sleep(60)'"
    started = time.monotonic()
    error = notify.attempt(target, {"a": 1}, timeout_s=0.5)
    assert error is not None and "still running after 0.5 s" in error
    assert time.monotonic() - started < 30


def test_deliver_does_not_wait_for_the_command(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    code = f"import os, sys, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.01)"
    target = f"exec:{shlex.quote(sys.executable)} -c {shlex.quote(code)}"
    notify.deliver(target, {"a": 1})  # returns while the command still waits for the gate
    assert not notify.flush(0)
    gate.touch()
    assert notify.flush(30)
    assert notify.last_failure(target) is None


def test_http_target_gets_a_json_post(receiver: _Receiver) -> None:
    notify.deliver(_url(receiver), PAYLOAD)
    assert receiver.arrived.wait(30)
    assert notify.flush(30)
    path, content_type, body = receiver.bodies[0]
    assert (path, content_type) == ("/hook", "application/json")
    assert json.loads(body) == STRICT
    assert notify.last_failure(_url(receiver)) is None


@pytest.mark.parametrize("receiver", [500], indirect=True)
def test_http_error_answer_is_recorded(receiver: _Receiver) -> None:
    target = _url(receiver, "/broken")
    notify.deliver(target, {"a": 1})
    failure = _wait_for_failure(target)
    assert "answered 500" in failure.error and "no thanks" in failure.error


def test_unreachable_url_is_recorded_not_raised() -> None:
    target = f"http://127.0.0.1:{free_port()}/nobody"
    notify.deliver(target, {"a": 1})
    assert "failed" in _wait_for_failure(target).error


@pytest.mark.parametrize(
    ("target", "words"),
    [("mailto:me@example.com", "not a notification target"), ("exec:", "names no command"),
     ("exec:'unclosed", "cannot be split"), ("http:///path", "names no host")],
)
def test_bad_targets_are_explained_and_recorded(target: str, words: str) -> None:
    problem = notify.check_target(target)
    assert problem is not None and words in problem
    notify.deliver(target, {"a": 1})
    assert words in _wait_for_failure(target).error


def test_good_targets_pass_the_check(tmp_path: Path) -> None:
    assert notify.check_target("exec:/bin/true --x") is None
    assert notify.check_target("https://hooks.example.com/a?b=c") is None


def test_unencodable_payload_is_recorded_not_raised() -> None:
    target = "exec:/bin/true"
    notify.deliver(target, {"loop": float("nan"), "bad": {1: object()}})  # str() takes anything: still sent
    assert notify.flush(30)
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    notify.deliver("exec:/bin/cat", cyclic)
    assert "not sent" in _wait_for_failure("exec:/bin/cat").error
