"""The tensor hook's file: where it is, and its lines (pure, no numpy: the reader side imports it too).

Each host of a trainmon job gets ``TRAINMON_TENSOR_DIR`` (``<job dir>/algo-N/output/tensors``,
SageMaker's ``/opt/ml/output/tensors``) and the hook's configuration at
``$SM_INPUT_CONFIG_DIR/debughookconfig.json`` (SageMaker's
``/opt/ml/input/config/debughookconfig.json``: the job's ``DebugHookConfig``). The hook appends to
``<tensor dir>/<host>.jsonl`` one JSON object a line, written in whole lines:

    {"hook": "trainmon.debug", "version": 1, "pid": 4242, "save_interval": 500, "time": 1733067913.2}
    {"step": 500, "name": "fc1.weight", "collections": ["weights"], "time": 1733067913.206, "size": 4096,
     "mean": 0.001, "mean_abs": 0.2, "l2": 12.5, "min": -0.5, "max": 0.5, "nan": 0, "inf": 0,
     "zero_fraction": 0.0, "update_l2": 0.0125}
    {"step": 500, "name": "loss", "collections": ["losses"], "time": 1733067913.207, "value": 0.25}

(one line each), the times the steps ended (:func:`step_ends`: steps 1234, 1235, ... ended at
those times, written with the next saved step's lines), and, when the hook's writer fell behind and dropped records, a line that counts
them (:func:`dropped`), which the rules' statuses report. Floats that are not finite are the strings ``"NaN"``, ``"Infinity"`` and
``"-Infinity"`` (strict JSON); a reduction that is not defined (the mean of an empty tensor) is
``null``. :func:`parse` reads a line back as a :class:`~trainmon.rules.tensor.TensorRecord`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from ..rules.tensor import TensorRecord

ENV_TENSOR_DIR = "TRAINMON_TENSOR_DIR"
CONFIG_FILE = "debughookconfig.json"
VERSION = 1
REDUCTIONS = ("mean", "mean_abs", "l2", "min", "max")
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def file_name(host: str) -> str:
    """The tensor file of a host, in its tensor directory."""
    return f"{host}.jsonl"


def number(value: float | None) -> str:
    """A float as the file writes it: shortest repr, non-finite values as strings, None as null."""
    if value is None:
        return "null"
    if math.isfinite(value):
        return repr(float(value))
    return '"NaN"' if math.isnan(value) else ('"Infinity"' if value > 0 else '"-Infinity"')


def header(pid: int, save_interval: int, timestamp_s: float) -> str:
    """The line a hook writes first."""
    return (f'{{"hook": "trainmon.debug", "version": {VERSION}, "pid": {pid}, "save_interval": {save_interval}, '
            f'"time": {number(timestamp_s)}}}\n')


def dropped(count: int, timestamp_s: float) -> str:
    """The line that says the hook's writer fell behind and dropped ``count`` records: the rules
    that read the file saw only part of the tensors, and say so."""
    return f'{{"hook": "trainmon.debug", "dropped": {count}, "time": {number(timestamp_s)}}}\n'


MAX_STEP_ENDS = 10_000  # step ends in one line: a hook with more waiting writes them early


def step_ends(first: int, ends: Iterable[float]) -> str:
    """The line that says step ``first``, ``first + 1``, ... ended at ``ends`` (seconds since the
    epoch): the profiler rules' steps where no step metric gives them."""
    return f'{{"hook": "trainmon.debug", "steps": {{"first": {first}, "ends": [{", ".join(map(repr, ends))}]}}}}\n'


def read_step_ends(line: dict[str, Any]) -> tuple[int, list[float]]:
    """The first step and the end times a :func:`step_ends` line gives (ValueError: malformed)."""
    steps = line.get("steps")
    first = steps.get("first") if isinstance(steps, dict) else None
    ends = steps.get("ends") if isinstance(steps, dict) else None
    if not isinstance(first, int) or isinstance(first, bool) or not isinstance(ends, list):
        raise ValueError("a malformed steps line")
    if not all(isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) for t in ends):
        raise ValueError("a steps line with a time that is not a finite number")
    return first, [float(t) for t in ends]


def dropped_count(line: dict[str, Any]) -> int:
    """The records a hook's line says were dropped (0 for its other lines)."""
    value = line.get("dropped")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


MAX_CACHED = 10_000  # names (and collection lists) whose JSON an Encoder keeps: a script may make names without end


class Encoder:
    """Lines of the file, with each name's and collection list's JSON made once (a step's lines
    repeat the same names)."""

    def __init__(self) -> None:
        self._names: dict[str, str] = {}
        self._collections: dict[tuple[str, ...], str] = {}

    def _prefix(self, step: int, name: str, collections: tuple[str, ...], timestamp_s: float) -> str:
        quoted = self._names.get(name)
        if quoted is None:
            quoted = json.dumps(name)
            if len(self._names) < MAX_CACHED:
                self._names[name] = quoted
        listed = self._collections.get(collections)
        if listed is None:
            listed = json.dumps(list(collections))
            if len(self._collections) < MAX_CACHED:
                self._collections[collections] = listed
        return f'{{"step": {step}, "name": {quoted}, "collections": {listed}, "time": {number(timestamp_s)}'

    def tensor(self, step: int, name: str, collections: tuple[str, ...], timestamp_s: float, size: int,
               reductions: Iterable[float | None], nan: int, inf: int, zero_fraction: float | None,
               update_l2: float | None) -> str:
        mean, mean_abs, l2, low, high = reductions
        line = (f'{self._prefix(step, name, collections, timestamp_s)}, "size": {size}, "mean": {number(mean)}, '
                f'"mean_abs": {number(mean_abs)}, "l2": {number(l2)}, "min": {number(low)}, "max": {number(high)}, '
                f'"nan": {nan}, "inf": {inf}, "zero_fraction": {number(zero_fraction)}')
        if update_l2 is not None:
            line += f', "update_l2": {number(update_l2)}'
        return line + "}\n"

    def scalar(self, step: int, name: str, collections: tuple[str, ...], timestamp_s: float, value: float) -> str:
        return f'{self._prefix(step, name, collections, timestamp_s)}, "value": {number(value)}}}\n'


def _float(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        return _NON_FINITE[value]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"not a number: {value!r}")
    return float(value)


def parse(line: bytes | str) -> TensorRecord | dict[str, Any] | None:
    """A line read back: a tensor or scalar record, the header (a dict), or None for a line that is
    not one of the file's (ValueError: a record that is malformed)."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, or nested too deep to read
        raise ValueError(f"not a JSON line: {exc!r}") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if "step" not in data or "name" not in data:
        return data if data.get("hook") == "trainmon.debug" else None
    try:
        step, name = int(data["step"]), str(data["name"])
        collections = frozenset(str(c) for c in data.get("collections") or ())
        timestamp_s = _float(data.get("time")) or 0.0
        if "value" in data:
            return _scalar(step, name, collections, timestamp_s, _float(data["value"]))
        mean, mean_abs, l2, low, high = (_float(data.get(key)) for key in REDUCTIONS)
        return TensorRecord(step, name, collections, timestamp_s, int(data["size"]), mean, mean_abs, l2, low, high,
                            nan=int(data.get("nan", 0)), inf=int(data.get("inf", 0)),
                            zero_fraction=_float(data.get("zero_fraction")), update_l2=_float(data.get("update_l2")))
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # OverflowError: a step of 1e400
        raise ValueError(f"a malformed record: {exc!r}") from None


def _scalar(step: int, name: str, collections: frozenset[str], timestamp_s: float, value: float | None
            ) -> TensorRecord:
    """A scalar as a tensor of one value, so that every tensor rule reads it the same way."""
    if value is None:
        return TensorRecord(step, name, collections, timestamp_s, 1)
    nan, inf = int(math.isnan(value)), int(math.isinf(value))
    return TensorRecord(step, name, collections, timestamp_s, 1, value, abs(value), abs(value), value, value,
                        nan, inf, float(value == 0), None)
