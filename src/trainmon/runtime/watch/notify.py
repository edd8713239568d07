"""Notifications: a finding or an alarm's change of state, sent as JSON to a target the user configured.

A target is one of:

- ``exec:<command line>``: the command line is split as a shell would (:func:`shlex.split`) but
  run without a shell; the payload's JSON arrives on its standard input. A non-zero exit, a
  command that cannot start, or one still running after :data:`TIMEOUT_S` (then killed) is a
  failed delivery.
- ``http://…`` or ``https://…``: the payload's JSON is POSTed (``Content-Type:
  application/json``); anything but a 2xx answer within :data:`TIMEOUT_S` is a failed delivery.

:func:`deliver` never raises into its caller and never makes it wait: the delivery runs on a
worker thread (at most :data:`MAX_IN_FLIGHT` at once; past that deliveries wait their turn in a
queue, none is dropped). A command runs in a session of its own, and a job's supervisor never takes
it for one of the job's processes (:func:`commands_running`). A failed delivery is logged (logger ``trainmon.runtime.watch.notify``)
and kept: :func:`recent_failures` returns the last :data:`FAILURES_KEPT`, oldest first, and
:func:`last_failure` the newest for a target. A process about to exit calls :func:`flush` so that
deliveries under way get their chance to finish. :func:`attempt` is the same delivery on the
calling thread, returning the error instead of recording it, and :func:`check_target` says what
is wrong with a target before anything is sent (for validating a configuration). A caller that
records outcomes (an alarm's history) passes ``on_done`` to :func:`deliver`.

The payload is made strict JSON: NaN and the infinities become the strings ``"NaN"``,
``"Infinity"`` and ``"-Infinity"``, datetimes ISO 8601 strings, anything else unknown ``str()``.
"""

from __future__ import annotations

import collections
import json
import logging
import shlex
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...plainjson import finite

TIMEOUT_S = 10.0
MAX_IN_FLIGHT = 16
FAILURES_KEPT = 100
EXEC_PREFIX = "exec:"
_ERROR_CHARS = 500  # of a command's stderr or an HTTP answer, in a failure's text

log = logging.getLogger(__name__)

Done = Callable[[str | None], None]  # told a delivery's outcome: None once delivered, else the error


@dataclass(frozen=True)
class DeliveryFailure:
    """A delivery that did not succeed: where to, why, and when (seconds since the epoch)."""

    target: str
    error: str
    timestamp_s: float


_lock = threading.Lock()
_failures: collections.deque[DeliveryFailure] = collections.deque(maxlen=FAILURES_KEPT)
_queue: collections.deque[tuple[str, bytes, Done | None]] = collections.deque()
_workers: set[threading.Thread] = set()
_commands: set[int] = set()  # the notification commands running now


def deliver(target: str, payload: dict[str, Any], on_done: Done | None = None) -> None:
    """Sends ``payload`` to ``target`` on a worker thread; failures are logged and recorded, never raised.
    ``on_done``, if given, is told the outcome on that thread once it is known (None: delivered, else
    what went wrong); what it raises is logged."""
    try:
        body = encode(payload)
        with _lock:
            _queue.append((target, body, on_done))
            if len(_workers) >= MAX_IN_FLIGHT:
                return  # a worker takes it when it is done with what it sends
            worker = threading.Thread(target=_work, name="trainmon-notify", daemon=True)
            _workers.add(worker)
        worker.start()
    except Exception as error:  # a notification must never break its caller
        _finished(target, f"not sent: {error}", on_done)


def commands_running() -> frozenset[int]:
    """The process ids of the notification commands running now: children of this process that
    are not a job's (the launcher leaves them alone)."""
    with _lock:
        return frozenset(_commands)


def attempt(target: str, payload: dict[str, Any], timeout_s: float = TIMEOUT_S) -> str | None:
    """Sends ``payload`` to ``target`` on this thread: None once delivered, else what went wrong."""
    try:
        return _send(target, encode(payload), timeout_s)
    except Exception as error:
        return f"not sent: {error}"


def check_target(target: str) -> str | None:
    """None if ``target`` is a target :func:`deliver` can send to, else why not (in words for a user)."""
    if target.startswith(EXEC_PREFIX):
        try:
            argv = shlex.split(target[len(EXEC_PREFIX):])
        except ValueError as error:
            return f"the command line of {target!r} cannot be split: {error}"
        return None if argv else f"{target!r} names no command"
    if target.startswith(("http://", "https://")):
        host = target.split("://", 1)[1].split("/", 1)[0]
        return None if host else f"{target!r} names no host"
    return f"{target!r} is not a notification target: use exec:<command line>, http://… or https://…"


def flush(timeout_s: float = TIMEOUT_S) -> bool:
    """Waits up to ``timeout_s`` for the deliveries queued or under way to end: True if none is left."""
    deadline = time.monotonic() + timeout_s
    while True:
        with _lock:
            workers = list(_workers)
        if not workers:
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        workers[0].join(remaining)


def recent_failures() -> list[DeliveryFailure]:
    """The last failed deliveries of this process, oldest first."""
    with _lock:
        return list(_failures)


def last_failure(target: str) -> DeliveryFailure | None:
    """The newest failed delivery to ``target`` still kept, if any."""
    with _lock:
        return next((failure for failure in reversed(_failures) if failure.target == target), None)


def encode(payload: dict[str, Any]) -> bytes:
    """The payload as strict JSON (UTF-8)."""
    return json.dumps(finite(payload), default=_default, allow_nan=False).encode()


def _default(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _work() -> None:
    """Send what is queued, one delivery after another, until nothing is."""
    while True:
        with _lock:
            if not _queue:
                _workers.discard(threading.current_thread())
                return
            target, body, on_done = _queue.popleft()
        try:
            error = _send(target, body, TIMEOUT_S)
        except Exception as unexpected:
            error = f"not sent: {unexpected}"
        _finished(target, error, on_done)


def _finished(target: str, error: str | None, on_done: Done | None) -> None:
    if error is not None:
        _record(target, error)
    if on_done is not None:
        try:
            on_done(error)
        except Exception:
            log.exception("what follows the delivery to %s failed", target)


def _send(target: str, body: bytes, timeout_s: float) -> str | None:
    problem = check_target(target)
    if problem is not None:
        return problem
    if target.startswith(EXEC_PREFIX):
        return _run_command(shlex.split(target[len(EXEC_PREFIX):]), body, timeout_s)
    return _post(target, body, timeout_s)


def _run_command(argv: list[str], body: bytes, timeout_s: float) -> str | None:
    try:  # a session of its own: a job's signals are not for it, nor is it one of the job's processes
        with _lock:  # started and known at once: a launcher never sees it unknown
            process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, start_new_session=True)
            _commands.add(process.pid)
    except OSError as error:
        return f"{argv[0]} could not start: {error}"
    try:
        _, stderr_bytes = process.communicate(body, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return f"{argv[0]} still running after {timeout_s:g} s: killed"
    finally:
        with _lock:
            _commands.discard(process.pid)
    if process.returncode != 0:
        stderr = stderr_bytes.decode(errors="replace").strip()[-_ERROR_CHARS:]
        return f"{argv[0]} exited with status {process.returncode}" + (f": {stderr}" if stderr else "")
    return None


def _post(url: str, body: bytes, timeout_s: float) -> str | None:
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json", "User-Agent": "trainmon"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:  # the user's own URL
            status = answer.status
    except urllib.error.HTTPError as error:
        text = error.read(_ERROR_CHARS).decode(errors="replace").strip()
        return f"POST {url} answered {error.code}" + (f": {text}" if text else "")
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = error.reason if isinstance(error, urllib.error.URLError) else error
        return f"POST {url} failed: {reason}"
    return None if 200 <= status < 300 else f"POST {url} answered {status}"


def _record(target: str, error: str) -> None:
    log.warning("notification to %s failed: %s", target, error)
    with _lock:
        _failures.append(DeliveryFailure(target, error, time.time()))
