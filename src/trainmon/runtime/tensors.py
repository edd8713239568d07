"""The tensor hook's files, from outside the job: the contract that places them, the reader, the feed.

The training script records tensors with :mod:`trainmon.debug`, inside the job's processes; the
supervisor is outside. :func:`prepare_host` (called by the container contract for every host)
makes the host's tensor directory, ``<job dir>/algo-N/output/tensors`` (SageMaker's
``/opt/ml/output/tensors``), names it in ``TRAINMON_TENSOR_DIR``, and writes the job's
``DebugHookConfig`` to ``input/config/debughookconfig.json``, where SageMaker puts it.

A :class:`TensorFile` reads what a host's hook appended since the last read, by offset: whole
lines only (a partial last line waits for the next read), at most :data:`MAX_READ_BYTES` a read
but for the last pass. A :class:`TensorFeed` (one per job, on the rules' thread:
:class:`trainmon.runtime.rulewatch.RuleWatcher`) reads every host's file each pass, groups the
records by step and feeds each tensor rule's state machine for that host
(:mod:`trainmon.rules.tensor`), and says, for a rule that found nothing, what it saw: no tensors
at all, none it selects, no weight update.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any

from ..config import job_dir
from ..debug import records
from ..rules import catalog, tensor
from ..rules.metric import Finding
from ..rules.tensor import TensorRecord

MAX_READ_BYTES = 8 << 20  # a pass reads at most this much of a file (the last pass reads it all)
MAX_LINE_BYTES = 1 << 20  # a partial line longer than this is no line of the hook's: skipped
HOW_TO_RECORD = ("record them with trainmon.debug in the training script (Hook, or "
                 "trainmon.debug.torch.TorchHook for PyTorch; see docs/rules.md#tensor-rules-and-the-hook)")


def tensor_dir(host_root: Path) -> Path:
    return host_root / "output" / "tensors"


def prepare_host(host_root: Path, config_dir: Path, hook_config: Mapping[str, Any] | None) -> dict[str, str]:
    """A host's tensor directory and hook configuration, made; the environment that names them."""
    directory = tensor_dir(host_root)
    directory.mkdir(parents=True, exist_ok=True)
    written = {**(hook_config or {}), "LocalPath": str(directory)}
    temporary = config_dir / (records.CONFIG_FILE + ".tmp")
    temporary.write_text(json.dumps(written, indent=2), encoding="utf-8")
    temporary.replace(config_dir / records.CONFIG_FILE)
    return {records.ENV_TENSOR_DIR: str(directory)}


class TensorFile:
    """One host's tensor file, read from where the last read stopped, in whole lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.bad_lines = 0
        self.hooked = False  # a hook opened it (its header line was read)
        self._partial = b""
        self._skipping = False  # inside a line too long to be one of the hook's

    def read(self, *, to_end: bool = False) -> list[TensorRecord]:
        """The records appended since the last read (none if the file is not there yet)."""
        found: list[TensorRecord] = []
        try:
            with open(self.path, "rb") as file:
                if os.fstat(file.fileno()).st_size < self.offset:  # made anew: from its start
                    self.offset, self._partial, self._skipping = 0, b"", False
                file.seek(self.offset)
                while True:
                    chunk = file.read(MAX_READ_BYTES)
                    if not chunk:
                        break
                    self.offset += len(chunk)
                    found.extend(self._lines(chunk))
                    if not to_end:
                        break
        except FileNotFoundError:
            pass
        return found

    def _lines(self, chunk: bytes) -> Iterable[TensorRecord]:
        lines = chunk.split(b"\n")
        lines[0] = self._partial + lines[0]
        self._partial = lines.pop()
        if len(self._partial) > MAX_LINE_BYTES:
            self._partial, self._skipping = b"", True
        for line in lines:
            if self._skipping:  # the end of an over-long line
                self._skipping = False
                self.bad_lines += 1
                continue
            if not line.strip():
                continue
            try:
                parsed = records.parse(line)
            except ValueError:
                self.bad_lines += 1
                continue
            if isinstance(parsed, TensorRecord):
                yield parsed
            elif parsed is not None:
                self.hooked = True


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

    def __init__(self, files: Mapping[str, Path], setups: Iterable[catalog.RuleSetup]) -> None:
        self.files = {host: TensorFile(path) for host, path in files.items()}
        self.rules = [_TensorRule(setup) for setup in setups if setup.rule in tensor.RULES]
        self.records = 0  # every tensor record read, of every host

    @classmethod
    def for_job(cls, home: Path, doc: Mapping[str, Any], setups: Iterable[catalog.RuleSetup]) -> TensorFeed:
        from .contract import host_names

        root = job_dir(home, str(doc["TrainingJobName"]))
        hosts = host_names(int(doc.get("ResourceConfig", {}).get("InstanceCount", 1)))
        return cls({host: tensor_dir(root / host) / records.file_name(host) for host in hosts}, setups)

    def evaluate(self, *, final: bool = False, failed: Iterable[str] = ()
                 ) -> tuple[list[tuple[str, str, Finding]], list[tuple[str, str]]]:
        """One pass: (RuleConfigurationName, host, finding) for each finding, and (RuleConfigurationName,
        why) for each rule whose evaluation failed (it is not fed again)."""
        for name in failed:
            for rule in self.rules:
                rule.failed = rule.failed or rule.setup.name == name
        found: list[tuple[str, str, Finding]] = []
        errors: list[tuple[str, str]] = []
        if not self.rules:
            return found, errors
        for host, file in self.files.items():
            read = file.read(to_end=final)
            self.records += len(read)
            for step, group in groupby(read, key=lambda record: record.step):
                self._feed(host, step, list(group), found, errors)
        return found, errors

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
        unreadable = f" ({bad} line{'s' if bad != 1 else ''} of the tensor files could not be read)" if bad else ""
        for rule in self.rules:
            reads_metrics = bool(rule.setup.metrics)
            if rule.failed or (reads_metrics and not rule.seen.selected):
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
        return answer
