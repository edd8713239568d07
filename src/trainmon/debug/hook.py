"""The tensor hook: a training script records named tensors, every ``save_interval`` steps, as reductions.

    from trainmon.debug import Hook
    hook = Hook()                                    # save_interval from the job, else 500
    for step in range(steps):
        ...
        hook.record("fc1.weight", w1, "weights")     # cheap at the steps that are not saved
        hook.record("fc1.weight", g1, "gradients")
        hook.record_scalar("loss", loss)
        hook.end_step()

A step is saved when ``step % save_interval == 0`` for one of the record's collections (the
first step is 0). A saved tensor becomes one line of the host's tensor file
(:mod:`.records`): its reductions (:mod:`.reductions`), never its values; a weight (collections
``weights`` and ``biases``) recorded at the step before a saved one is copied, for the norm of its
update at the saved step (numpy's copy is kept and reused; a torch tensor's lives for that step). :meth:`Hook.end_step` hands the step's lines to a writer thread, so the
training thread never waits on the disk; a writer that falls 8 MiB behind drops lines, says so
once, and counts them in the file, so that the rules report that they read part of the tensors.
What the hook keeps is bounded: a step's lines go to the writer past 1 MiB, and state by name
(weights' copies, warnings) stops growing at a cap.

Each :meth:`Hook.end_step` (TorchHook's: each ``optimizer.step()``) also notes when the step ended,
in memory, and the times go to the file as one line (:func:`records.step_ends`) with the next saved
step's lines, at the first step, past :data:`records.MAX_STEP_ENDS` of them, and at
:meth:`Hook.close`: StepOutlier and MaxInitializationTime read them where no step metric gives steps.

The hook never raises into the training script and never stops it. Outside a trainmon job (no
``TRAINMON_TENSOR_DIR``, no ``tensor_dir``) it records nothing, after one warning; a problem
writing is one warning, then recording stops; a value that cannot be reduced is one warning for
its name, then skipped. In a process whose ``LOCAL_RANK`` is set and not 0 (a worker that
torchrun started), it records nothing: rank 0 records for its host.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from . import records

if TYPE_CHECKING:
    from .reductions import Reduced

DEFAULT_SAVE_INTERVAL = 500  # Debugger's
MAX_PENDING_BYTES = 8 << 20  # what the writer may fall behind by before lines are dropped
FLUSH_BYTES = 1 << 20  # a step's lines handed to the writer before the step ends, past this (a loop without end_step)
MAX_NAMES = 100_000  # distinct tensor names a hook keeps state for (weights' copies, warnings)
MAX_WARNINGS = 1000  # distinct warnings a process remembers; past them, the rest are not shown
CLOSE_TIMEOUT_S = 5.0  # what close() (and the interpreter's exit) waits for the writer
WEIGHT_COLLECTIONS = frozenset({"weights", "biases"})

Collections = str | Sequence[str]

_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(key: str, message: str) -> None:
    """``trainmon: warning: ...`` on stderr, once per process for ``key``; never raises (a warning
    must not become an exception in a script run with ``-W error``)."""
    with _warned_lock:
        if key in _warned:
            return
        if len(_warned) >= MAX_WARNINGS:  # a warning per name, for names without end: no more are shown
            if "" in _warned:
                return
            key, message = "", f"more than {MAX_WARNINGS} warnings: no more are shown"
        _warned.add(key)
    try:
        print(f"trainmon: warning: tensor hook: {message}", file=sys.stderr, flush=True)
    except Exception:
        pass


class _Writer:
    """Appends the hook's lines to its file on a thread of its own, a batch of whole lines per write.

    It holds at most MAX_PENDING_BYTES it has not written, or one batch of any size when it holds
    nothing else (a step bigger than that is written, not dropped); lines it drops are counted in
    the file (:func:`records.dropped`) once it takes lines again, or as it closes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.failed: str | None = None
        self.dropped = 0  # lines dropped, all told
        self._unsaid = 0  # lines dropped that no line of the file counts yet
        self._queue: deque[bytes] = deque()
        self._pending = 0
        self._closed = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="trainmon-debug-writer", daemon=True)
        self._thread.start()

    def put(self, data: bytes, lines: int) -> bool:
        """Queue ``lines`` whole lines; False when they were dropped (the writer failed, or is too far behind)."""
        with self._changed:
            if self.failed is not None or self._closed:
                return False
            if self._queue and self._pending + len(data) > MAX_PENDING_BYTES:
                self.dropped += lines
                self._unsaid += lines
                warn_once(f"behind:{self.path}", f"writing {self.path} is {MAX_PENDING_BYTES >> 20} MiB behind; "
                          "records are dropped until it catches up (the training goes on)")
                return False
            self._say_dropped()
            self._queue.append(data)
            self._pending += len(data)
            self._changed.notify()
        return True

    def _say_dropped(self) -> None:
        """The line that counts the lines dropped since the last such line, queued (under the lock)."""
        if self._unsaid:
            line = records.dropped(self._unsaid, time.time()).encode()
            self._queue.append(line)
            self._pending += len(line)
            self._unsaid = 0

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        with self._changed:
            if self.failed is None:
                self._say_dropped()
            self._closed = True
            self._changed.notify()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            self._fail(exc)
            return
        try:
            while True:
                with self._changed:
                    while not self._queue and not self._closed:
                        self._changed.wait()
                    if not self._queue:
                        return
                    batch = b"".join(self._queue)
                    self._queue.clear()
                    self._pending = 0
                view = memoryview(batch)
                while view:  # a regular file takes it all at once but for a signal or an error
                    view = view[os.write(fd, view):]
        except OSError as exc:
            self._fail(exc)
        finally:
            os.close(fd)

    def _fail(self, exc: OSError) -> None:
        with self._changed:
            self.failed = f"{exc.strerror or exc}"
            self._queue.clear()
        warn_once(f"write:{self.path}", f"cannot write {self.path}: {self.failed}; recording stops (the training "
                  "goes on)")


def _read_config(path: Path) -> dict[str, Any]:
    """The job's DebugHookConfig, as the container contract wrote it (empty when there is none)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        warn_once(f"config:{path}", f"cannot read {path}: {exc}; using the defaults")
        return {}
    return data if isinstance(data, dict) else {}


def _interval(value: Any, where: str) -> int | None:
    if value is None:
        return None
    try:
        interval = int(str(value).strip())
    except ValueError:
        interval = 0
    if interval < 1:
        warn_once(f"interval:{where}", f"{where} must be an integer of at least 1, not {value!r}; ignored")
        return None
    return interval


def _names(collections: Collections) -> tuple[str, ...]:
    return (collections,) if isinstance(collections, str) else tuple(collections)


class Hook:
    """Records tensors' reductions into the job's tensor file; see the module's docstring.

    ``save_interval`` and ``save_intervals`` (per collection) win over the job's DebugHookConfig
    (``HookParameters.save_interval``, ``CollectionConfigurations``), which wins over Debugger's
    default of 500. ``tensor_dir`` writes somewhere other than the job's tensor directory (outside
    a job, say), as ``host`` (by default ``SM_CURRENT_HOST``, else this machine's name)."""

    def __init__(self, save_interval: int | None = None, *, save_intervals: Mapping[str, int] | None = None,
                 tensor_dir: str | os.PathLike[str] | None = None, host: str | None = None) -> None:
        self._step = 0
        self._lines: list[str] = []
        self._line_bytes = 0  # what _lines hold, about (characters)
        self._ends: list[float] = []  # when steps _ends_first, _ends_first + 1, ... ended: not written yet
        self._ends_first = 0
        self._runs: list[tuple[int, list[float]]] = []  # earlier runs of ends not written (set_step moved)
        self._run_ends = 0  # the ends _runs hold
        self._ends_due = True  # the ends go out at the next flush, saved step or not (the first step's, say)
        self._kept: dict[str, tuple[int, Any]] = {}  # weights copied at the step before a saved one
        self._plans: dict[Any, tuple[tuple[str, ...], int, int, bool, int]] = {}  # _plan's, by collections
        self._writer: _Writer | None = None
        self._encoder = records.Encoder()
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._closed = False
        self.path: Path | None = None
        config = _read_config(Path(os.environ["SM_INPUT_CONFIG_DIR"]) / records.CONFIG_FILE) \
            if "SM_INPUT_CONFIG_DIR" in os.environ and tensor_dir is None else {}
        self.save_interval, self.save_intervals = self._intervals(config, save_interval, save_intervals)
        directory = tensor_dir if tensor_dir is not None else os.environ.get(records.ENV_TENSOR_DIR)
        if os.environ.get("LOCAL_RANK", "0").strip() not in ("", "0"):
            return  # another rank of this host: rank 0 records for it
        if not directory:
            warn_once("outside", f"not in a trainmon job ({records.ENV_TENSOR_DIR} is not set): nothing is recorded; "
                      "run the script with `trainmon run`, or give Hook(tensor_dir=...)")
            return
        name = host or os.environ.get("SM_CURRENT_HOST") or socket.gethostname() or "algo-1"
        self.path = Path(directory) / records.file_name(name)
        atexit.register(self.close)  # unregistered by close(): a closed hook is not kept alive

    @staticmethod
    def _intervals(config: Mapping[str, Any], given: int | None, per_collection: Mapping[str, int] | None
                   ) -> tuple[int, dict[str, int]]:
        parameters = config.get("HookParameters") or {}
        interval = _interval(given, "save_interval") or (
            _interval(parameters.get("save_interval"), "HookParameters.save_interval")
            if isinstance(parameters, dict) else None) or DEFAULT_SAVE_INTERVAL
        intervals: dict[str, int] = {}
        for entry in config.get("CollectionConfigurations") or []:
            if isinstance(entry, dict) and isinstance(entry.get("CollectionParameters"), dict):
                found = _interval(entry["CollectionParameters"].get("save_interval"),
                                  f"CollectionConfigurations {entry.get('CollectionName')} save_interval")
                if found is not None:
                    intervals[str(entry.get("CollectionName"))] = found
        for collection, value in (per_collection or {}).items():
            found = _interval(value, f"save_intervals[{collection!r}]")
            if found is not None:
                intervals[collection] = found
        return interval, intervals

    # -- what a script calls ---------------------------------------------------------------------

    @property
    def step(self) -> int:
        """The step being recorded (0 first; :meth:`end_step` moves it on)."""
        return self._step

    @property
    def active(self) -> bool:
        """Whether this hook records (in a job, on rank 0, and no write has failed)."""
        return (self.path is not None and not self._closed and os.getpid() == self._pid
                and (self._writer is None or self._writer.failed is None))

    def is_due(self, collections: Collections = "default", step: int | None = None) -> bool:
        """Whether a tensor of these collections is saved at ``step`` (the current one by default):
        a script can skip computing what it would record."""
        at = self._step if step is None else step
        return any(at % self.save_intervals.get(c, self.save_interval) == 0 for c in _names(collections))

    def record(self, name: str, value: Any, collections: Collections = "default") -> None:
        """Record ``value`` (a numpy array, a list, a torch tensor: anything array-like) as ``name``
        in ``collections`` at the current step, if it is saved; never raises."""
        try:
            plan = self._plans.get(collections) if isinstance(collections, str) else None
            if plan is not None and self._step < plan[4]:
                return
            names, due, due_next, weight = self._plan(collections)
            keep = weight and due_next
            if not (due or keep) or not self.active:
                return
            reducer = _reducer(value)
            kept = self._kept.get(name)
            if due:
                previous = kept[1] if kept is not None and kept[0] == self._step - 1 else None
                self._record_reduced([name], [names], [reducer.reduce(value, previous)])
                if not reducer.REUSES_COPIES:
                    self._kept.pop(name, None)
            if keep and self._may_keep(name):
                self._kept[name] = (self._step, reducer.snapshot(value, kept[1] if kept is not None else None))
        except Exception as exc:
            self._skip(name, exc)

    def record_scalar(self, name: str, value: Any, collections: Collections | None = None) -> None:
        """Record a number (a float, a 0-d array, a one-element tensor) as ``name``: in ``losses`` if
        its name holds "loss", else in ``scalars``, unless ``collections`` says; never raises."""
        try:
            if collections is None:
                collections = "losses" if "loss" in name.lower() else "scalars"
            plan = self._plans.get(collections) if isinstance(collections, str) else None
            if plan is not None and self._step < plan[4]:
                return
            names, due, _, _ = self._plan(collections)
            if not due or not self.active:
                return
            number = float(value.item() if hasattr(value, "item") else value)
            self._add([self._encoder.scalar(self._step, name, names, time.time(), number)])
        except Exception as exc:
            self._skip(name, exc)

    def end_step(self) -> None:
        """The current step is done: when it ended is noted, its records go to the file, and the next step begins."""
        if self.path is not None:  # the end time kept (a float appended, no I/O), for a flush to write
            try:  # the ends are the stepping thread's (end_step, set_step, close): no lock
                ends = self._ends
                if ends and self._ends_first + len(ends) != self._step:  # set_step moved: a run of its own
                    self._runs.append((self._ends_first, ends))
                    self._run_ends += len(ends)
                    self._ends = ends = []
                if not ends:
                    self._ends_first = self._step
                ends.append(time.time())
                if len(ends) + self._run_ends >= records.MAX_STEP_ENDS:
                    self._ends_due = True
            except Exception as exc:  # never into the training loop
                warn_once(f"ends:{id(self)}", f"the steps' end times are not recorded: {exc!r}")
        self.set_step(self._step + 1)

    def set_step(self, step: int) -> None:
        """Go to ``step`` (a loop with a counter of its own); the current step's records go to the file."""
        try:
            if self._lines or self._ends_due:  # a step not saved has nothing to hand over: no lock taken
                self._flush(step_end=True)
        except Exception as exc:  # a thread that cannot start, say: never into the training loop
            warn_once(f"flush:{id(self)}", f"the records of step {self._step} are lost: {exc!r}")
        try:
            new = int(step)
        except (TypeError, ValueError):
            warn_once(f"step:{id(self)}", f"set_step needs an integer, not {step!r}: the step stays {self._step}")
            return
        if new < self._step:
            self._plans.clear()  # back in time: the next saved steps are to be found again
        self._step = new

    def close(self) -> None:
        """The last records to the file, waiting for the writer at most CLOSE_TIMEOUT_S; then recording stops."""
        if self._closed:
            return
        try:
            atexit.unregister(self.close)
        except Exception:
            pass
        try:
            self._ends_due = True
            self._flush(step_end=True)
            self._closed = True
            if self._writer is not None and os.getpid() == self._pid:
                self._writer.close()
        except Exception as exc:  # the interpreter is exiting, say
            warn_once("close", f"could not finish writing: {exc!r}")
        finally:
            self._closed = True

    def __enter__(self) -> Hook:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- inside ----------------------------------------------------------------------------------

    def _plan(self, collections: Collections) -> tuple[tuple[str, ...], bool, bool, bool]:
        """For a record in ``collections`` at this step: the collections, whether this step and the
        next are saved, and whether it is a weight (kept before a saved step, for the update). The
        next saved steps are kept, with the first step at which a record has something to do (the
        saved one, or the one before it for a weight): before it, :meth:`record` and
        :meth:`record_scalar` return after a lookup and a comparison, which at most steps is all
        the hook costs a training step."""
        key = collections if isinstance(collections, str) else tuple(collections)
        plan = self._plans.get(key)
        step = self._step
        if plan is None or plan[1] < step:
            names = _names(collections)
            first = self._next_saved(names, step)
            weight = not WEIGHT_COLLECTIONS.isdisjoint(names)
            plan = self._plans[key] = (names, first, self._next_saved(names, first + 1), weight,
                                       first - 1 if weight else first)
        names, saved, after, weight, _ = plan
        return names, saved == step, (after if saved == step else saved) == step + 1, weight

    def _next_saved(self, names: tuple[str, ...], step: int) -> int:
        """The first step from ``step`` on at which one of these collections is saved."""
        return min(-(-step // interval) * interval for interval in
                   (self.save_intervals.get(c, self.save_interval) for c in names))

    def _is_due(self, names: tuple[str, ...]) -> bool:
        return self._plan(names)[1]

    def _is_due_next(self, names: tuple[str, ...]) -> bool:
        return self._plan(names)[2]

    def _record_reduced(self, names: Sequence[str], collections: Sequence[tuple[str, ...]],
                        reduced: Sequence[Reduced]) -> None:
        now = time.time()
        lines = [self._encoder.tensor(self._step, name, names_of, now, r.size, r.reductions, r.nan, r.inf,
                                      r.zero_fraction, r.update_l2)
                 for name, names_of, r in zip(names, collections, reduced, strict=True)]
        self._add(lines)

    def _add(self, lines: list[str]) -> None:
        """Lines of the current step, handed to the writer before the step ends once they pass
        FLUSH_BYTES (a script that never ends its steps must not keep them all)."""
        with self._lock:
            self._lines.extend(lines)
            self._line_bytes += sum(map(len, lines))
            full = self._line_bytes > FLUSH_BYTES
        if full:
            self._flush()

    def _may_keep(self, name: str) -> bool:
        """Whether a copy of weight ``name`` may be kept: at most MAX_NAMES of them (then one warning)."""
        if name in self._kept or len(self._kept) < MAX_NAMES:
            return True
        warn_once(f"names:{id(self)}", f"more than {MAX_NAMES} weights recorded: the update of the others is not "
                  "computed")
        return False

    def _flush(self, *, step_end: bool = False) -> None:
        """The lines held to the writer; at a step's end (``step_end``: on the stepping thread), the
        step ends too, with the lines, or alone when due."""
        with self._lock:
            lines, self._lines, self._line_bytes = self._lines, [], 0
        count = len(lines)  # records, as the writer counts what it drops (not the steps lines)
        if step_end and self._ends and (lines or self._ends_due):
            runs = [*self._runs, (self._ends_first, self._ends)]
            self._runs, self._run_ends, self._ends, self._ends_due = [], 0, [], False
            lines.extend([records.step_ends(first, taken) for first, taken in runs])
        if not lines or not self.active:
            return
        assert self.path is not None
        data = "".join(lines).encode("utf-8", "backslashreplace")
        if self._writer is None:
            self._writer = _Writer(self.path)
            data = records.header(self._pid, self.save_interval, time.time()).encode() + data
            self._writer.put(data, count + 1)
            return
        self._writer.put(data, count)

    def _skip(self, name: str, exc: Exception) -> None:
        warn_once(f"skip:{id(self)}:{name[:200]}", f"{name[:200]!r} is not recorded: {exc}")


def _reducer(value: Any) -> ModuleType:
    """The module that reduces ``value``: torch's for a torch tensor (on its device), numpy's otherwise."""
    if type(value).__module__.startswith("torch"):
        from . import torch_reductions

        return torch_reductions
    from . import reductions

    return reductions
