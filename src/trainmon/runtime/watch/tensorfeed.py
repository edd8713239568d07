"""The tensor hook's files read from outside the job, and fed to the tensor rules.

A :class:`TensorFile` reads what a host's hook appended since the last read, by offset: whole
lines only (a partial last line waits for the next read) and whole steps (the last step read waits
for the next read), at most :data:`MAX_READ_BYTES` a pass; the last pass reads on, a chunk at a
time fed as it is read, for at most :data:`FINAL_READ_S`. It reads only a regular file, opened
without blocking, and counts a line it cannot read. A :class:`TensorFeed` (one per job, on the rules' thread:
:class:`trainmon.runtime.watch.rulewatch.RuleWatcher`) reads every host's file each pass, groups the
records by step and feeds each tensor rule's state machine for that host
(:mod:`trainmon.rules.tensor`), and says, for a rule that found nothing, what it saw: no tensors
at all, none it selects, no weight update, or part of them only (records the hook dropped, a
file it could not read). A feed made with ``steps`` also keeps the step ends the hook writes
(:func:`trainmon.debug.records.step_ends`), which the watcher hands to the profiler rules
(:meth:`TensorFeed.take_steps`), and reads the files for them even for a job without tensor rules.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any

from ...debug import records
from ...rules import catalog, tensor
from ...rules.metric import Finding
from ...rules.tensor import TensorRecord
from ..contract.tensors import HOW_TO_RECORD, tensor_file

MAX_READ_BYTES = 8 << 20  # a pass reads at most this much of a file (the last pass reads on, chunk by chunk)


FINAL_READ_S = 60.0  # what the last pass spends reading the backlog of the tensor files, at most


MAX_LINE_BYTES = 1 << 20  # a partial line longer than this is no line of the hook's: skipped


class TensorFile:
    """One host's tensor file, read from where the last read stopped, in whole lines and whole steps.

    The job owns the file and may make it anything: it is opened without blocking and read only
    if it is a regular file (a FIFO would block the rules' thread), and a line that cannot be read
    is counted, never raised. A read returns whole steps: the records of the last step it read
    are held back until the next read, which may bring more of that step (a step is fed to the
    rules once), or finds the file unchanged, or is the final one. With ``keep_steps``, the step
    ends its lines give are kept for :meth:`take_steps` (they need no holding back: a line is whole)."""

    def __init__(self, path: Path, *, keep_steps: bool = False) -> None:
        self.path = path
        self.keep_steps = keep_steps
        self._step_ends: list[tuple[int, float]] = []  # (step, when it ended), in the file's order
        self.offset = 0
        self.bad_lines = 0
        self.dropped = 0  # records the hook says its writer dropped
        self.hooked = False  # a hook opened it (its header line was read)
        self.problem: str | None = None  # why (some of) the file was not read, for the rules' details
        self._partial = b""
        self._skipping = False  # inside a line too long to be one of the hook's
        self._held: list[TensorRecord] = []  # the last step read: more of it may come

    def take_steps(self) -> list[tuple[int, float]]:
        """The step ends read since the last call, in the file's order (the hook's: step order)."""
        taken, self._step_ends = self._step_ends, []
        return taken

    def read(self, *, to_end: bool = False) -> list[TensorRecord]:
        """The records of the whole steps appended since the last read (none if the file is not there yet)."""
        return [record for chunk in self.chunks(to_end=to_end) for record in chunk]

    def chunks(self, *, to_end: bool = False, deadline: float | None = None,
               monotonic: Callable[[], float] = time.monotonic) -> Iterator[list[TensorRecord]]:
        """The records appended since the last read, one list of whole steps per chunk read: one chunk
        of at most :data:`MAX_READ_BYTES`, or with ``to_end`` every chunk to the end of the file, until
        ``deadline`` (by ``monotonic``) passes; the last chunk of a ``to_end`` read releases every record."""
        fd = self._open()
        if fd is None:
            if to_end or self._held:
                yield self._steps([], last=True)
            return
        try:
            grew = False
            while True:
                chunk = os.pread(fd, MAX_READ_BYTES, self.offset)
                if not chunk:
                    break
                grew = True
                self.offset += len(chunk)
                yield self._steps(list(self._lines(chunk)), last=False)
                if not to_end:
                    break
                if deadline is not None and monotonic() >= deadline:
                    left = os.fstat(fd).st_size - self.offset
                    if left > 0:
                        self._note(f"the final pass stopped reading {self.path.name} with {left} bytes unread "
                                   "(its time was up)")
                    break
            if to_end or not grew:
                yield self._steps([], last=True)  # the end, or nothing new since: the last step is whole
        except OSError as exc:
            self._note(f"{self.path.name} could not be read: {exc.strerror or exc}")
            yield self._steps([], last=True)
        finally:
            os.close(fd)

    def _open(self) -> int | None:
        """The file opened without blocking, or None: not there yet, or not a regular file (noted)."""
        fd, size, problem = open_regular(self.path)
        if problem is not None:
            self._note(problem)
        if fd is not None and size < self.offset:  # made anew: from its start
            self.offset, self._partial, self._skipping = 0, b"", False
        return fd

    def _note(self, problem: str) -> None:
        if self.problem is None:  # the first one says it; the rules' details have room for little
            self.problem = problem

    def _steps(self, found: list[TensorRecord], *, last: bool) -> list[TensorRecord]:
        """The held records and ``found``, less the last step's unless ``last`` (held for the next read)."""
        found = self._held + found
        self._held = []
        if not last and found:
            cut = len(found)
            while cut and found[cut - 1].step == found[-1].step:
                cut -= 1
            found, self._held = found[:cut], found[cut:]
        return found

    def _lines(self, chunk: bytes) -> Iterable[TensorRecord]:
        lines = chunk.split(b"\n")
        lines[0] = self._partial + lines[0]
        self._partial = lines.pop()
        for line in lines:
            if self._skipping:  # the end of an over-long line
                self._skipping = False
                self.bad_lines += 1
                continue
            if not line.strip():
                continue
            try:
                parsed = records.parse(line)
            except Exception:  # whatever the job wrote: one bad line, never the rules' failure
                self.bad_lines += 1
                continue
            if isinstance(parsed, TensorRecord):
                yield parsed
            elif parsed is not None:
                if "steps" in parsed:
                    try:
                        first, ends = records.read_step_ends(parsed)
                    except ValueError:
                        self.bad_lines += 1
                        continue
                    if self.keep_steps:
                        self._step_ends.extend(zip(range(first, first + len(ends)), ends, strict=True))
                self.hooked = True
                self.dropped += records.dropped_count(parsed)
        if len(self._partial) > MAX_LINE_BYTES:  # after this chunk's whole lines, which are good
            self._partial, self._skipping = b"", True


def open_regular(path: Path) -> tuple[int | None, int, str | None]:
    """``path`` opened without blocking if it is a regular file: (descriptor, size, None); (None, 0,
    None) when it is not there yet; (None, 0, why) when it is not a regular file or cannot be read."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # not even opened: a FIFO's writer would wake
            return None, 0, f"{path.name} is not a regular file: not read"
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, 0, None
    except OSError as exc:
        return None, 0, f"{path.name} could not be read: {exc.strerror or exc}"
    try:
        status = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        return None, 0, f"{path.name} could not be read: {exc.strerror or exc}"
    if not stat.S_ISREG(status.st_mode):  # replaced since the stat
        os.close(fd)
        return None, 0, f"{path.name} is not a regular file: not read"
    return fd, status.st_size, None


def read_from(path: Path, offset: int, limit: int = MAX_READ_BYTES) -> tuple[int, bytes]:
    """At most ``limit`` bytes of a host's tensor file from ``offset`` (what its supervisor's copy
    holds): (where they start, the bytes). They start at 0 when the file is shorter than the copy,
    made anew; nothing when it is not there, or not a regular file (the copy stays empty, and the
    rules say they saw no tensors)."""
    fd, size, _problem = open_regular(path)
    if fd is None:
        return offset, b""
    try:
        start = offset if size >= offset else 0
        return start, os.pread(fd, limit, start)
    except OSError:
        return offset, b""
    finally:
        os.close(fd)


def add_to_copy(path: Path, start: int, chunk: bytes) -> None:
    """Bytes :func:`read_from` read, onto the copy at ``path``: appended, or, from 0, a new copy in its
    place (its reader, a :class:`TensorFile`, then starts again from the beginning)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if start == 0:
        temporary = path.with_name(path.name + ".new")
        temporary.write_bytes(chunk)
        temporary.replace(path)
        return
    with open(path, "ab") as copy:
        copy.write(chunk)


def copied_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


@dataclass
class _Seen:
    """What a rule was fed, for what its conclusion says."""

    selected: int = 0
    updates: int = 0


@dataclass
class _TensorRule:
    setup: catalog.RuleSetup
    per_host: dict[str, tensor.TensorRule] = field(default_factory=dict)
    seen: _Seen = field(default_factory=_Seen)
    failed: bool = False

    def evaluator(self, host: str) -> tensor.TensorRule:
        if host not in self.per_host:
            self.per_host[host] = tensor.evaluator(self.setup.rule, self.setup.parameters)
        return self.per_host[host]


class TensorFeed:
    """The tensor rules of one job, fed from its hosts' tensor files."""

    def __init__(self, files: Mapping[str, Path], setups: Iterable[catalog.RuleSetup], *, steps: bool = False,
                 monotonic: Callable[[], float] = time.monotonic, final_read_s: float = FINAL_READ_S) -> None:
        self.files = {host: TensorFile(path, keep_steps=steps) for host, path in files.items()}
        self.rules = [_TensorRule(setup) for setup in setups if setup.rule in tensor.RULES]
        self.steps = steps  # the hook's step ends are wanted (the profiler rules read them)
        self.records = 0  # every tensor record read, of every host
        self.monotonic, self.final_read_s = monotonic, final_read_s
        self.trouble: str | None = None  # the first failure of a pass (RuleWatcher: trouble_in)

    @classmethod
    def for_job(cls, home: Path, doc: Mapping[str, Any], setups: Iterable[catalog.RuleSetup], *,
                steps: bool = False, files: Mapping[str, Path] | None = None) -> TensorFeed:
        """The feed of a job's rules from ``files``, each host's (default: where the hook writes on
        this machine; the job's hosts say where else, :meth:`JobHosts.tensor_files`)."""
        from ..contract.layout import host_names

        if files is None:
            job = str(doc["TrainingJobName"])
            hosts = host_names(int(doc.get("ResourceConfig", {}).get("InstanceCount", 1)))
            files = {host: tensor_file(home, job, host) for host in hosts}
        return cls(dict(files), setups, steps=steps)

    def evaluate(self, *, final: bool = False, failed: Iterable[str] = ()
                 ) -> tuple[list[tuple[str, str, Finding]], list[tuple[str, str]]]:
        """One pass: (RuleConfigurationName, host, finding) for each finding, and (RuleConfigurationName,
        why) for each rule whose evaluation failed (it is not fed again)."""
        for name in failed:
            for rule in self.rules:
                rule.failed = rule.failed or rule.setup.name == name
        found: list[tuple[str, str, Finding]] = []
        errors: list[tuple[str, str]] = []
        if not self.rules and not self.steps:
            return found, errors
        deadline = self.monotonic() + self.final_read_s if final else None
        for host, file in self.files.items():
            for read in file.chunks(to_end=final, deadline=deadline, monotonic=self.monotonic):
                self.records += len(read)  # each chunk fed as it is read: the backlog is never held whole
                for step, group in groupby(read, key=lambda record: record.step):
                    self._feed(host, step, list(group), found, errors)
        return found, errors

    def take_steps(self) -> list[tuple[str, int, float]]:
        """(host, step, when it ended) for every step end read since the last call, each host's in step order."""
        return [(host, step, at) for host, file in self.files.items() for step, at in file.take_steps()]

    def trouble_in(self, exc: Exception) -> None:
        """A pass that failed on something unforeseen: one warning, and a word in the rules' details;
        the metric rules' findings of the pass stand (RuleWatcher calls this)."""
        if self.trouble is None:
            self.trouble = f"reading the tensor files failed: {exc!r}"
            print(f"trainmon: warning: rules: {self.trouble}; the other rules go on", file=sys.stderr)

    def _feed(self, host: str, step: int, group: Sequence[TensorRecord], found: list[tuple[str, str, Finding]],
              errors: list[tuple[str, str]]) -> None:
        for rule in self.rules:
            if rule.failed:
                continue
            evaluator = rule.evaluator(host)
            selected = tensor.selected(evaluator, group)
            if not selected:
                continue
            rule.seen.selected += len(selected)
            rule.seen.updates += sum(r.update_l2 is not None for r in selected)
            try:
                findings = evaluator.observe(step, selected)
            except Exception as exc:  # a rule that breaks is reported Error; the others go on
                rule.failed = True
                errors.append((rule.setup.name, f"the evaluation of {rule.setup.rule} failed: {exc!r}"))
                continue
            found.extend((rule.setup.name, host, finding) for finding in findings)

    def details(self) -> dict[str, str]:
        """StatusDetails for the tensor rules that conclude NoIssuesFound having had nothing to evaluate:
        no tensors, none they select, no weight update (the others conclude without details)."""
        answer: dict[str, str] = {}
        bad = sum(file.bad_lines for file in self.files.values())
        dropped = sum(file.dropped for file in self.files.values())
        partial = [problem for problem in [file.problem for file in self.files.values()] + [self.trouble] if problem]
        if dropped:
            partial.insert(0, f"the hook dropped {dropped} record{'s' if dropped != 1 else ''}, its writer having "
                           "fallen behind")
        if bad:
            partial.append(f"{bad} line{'s' if bad != 1 else ''} of the tensor files could not be read")
        unreadable = f" ({'; '.join(partial)})" if partial else ""
        for rule in self.rules:
            reads_metrics = bool(rule.setup.metrics)
            if rule.failed or (reads_metrics and not rule.seen.selected and not partial):
                continue  # ExplodingTensor on the job's metrics says nothing of tensors it never had
            selection = tensor.selection(rule.setup.rule, rule.setup.parameters)
            if self.records == 0:
                hooked = any(file.hooked for file in self.files.values())
                answer[rule.setup.name] = ("No tensors were recorded" + (" (the hook ran, but no step it saves came)"
                                           if hooked else "") + f": {HOW_TO_RECORD}.{unreadable}")
            elif not rule.seen.selected:
                answer[rule.setup.name] = (f"None of the {self.records} tensor records is in {selection.describe()}: "
                                           "record them, or select others with collection_names or tensor_regex."
                                           f"{unreadable}")
            elif rule.setup.rule == "WeightUpdateRatio" and not rule.seen.updates:
                answer[rule.setup.name] = ("No weight update was recorded: the hook computes one for a weight "
                                           "recorded at the step before a saved step too (record the weights at "
                                           f"every step; the hook keeps only what it needs).{unreadable}")
            elif partial:  # no issue found, but in part of the tensors only
                answer[rule.setup.name] = f"Evaluated on part of the tensors only: {'; '.join(partial)}."
        return answer
