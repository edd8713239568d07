"""Extraction throughput: ``trainmon parse`` against a naive per-line regex loop and a hand-tuned one.

A 1,000,000-line training log is generated (once, cached in benchmarks/.data/): about 10% metric
lines in three formats (``epoch N Train_error=..; Valid_error=..;``, XGBoost's tab-separated
``[N]\\ttrain-rmse:..\\tvalidation-rmse:..``, Keras' ``- loss: .. - acc: ..``) and, for the rest,
info logs, tqdm progress bars that redraw themselves with ``\\r``, and Python tracebacks.

Timed over the same file, with 10 metric definitions:

- fast: ``trainmon.parsing.extract.scan_blocks`` with an ``Extractor`` in terminal mode, the points
  as columns (what ``trainmon parse`` formats), on one core; and ``scan_file_blocks`` on every core;
- naive: for each record (split as terminal mode splits, control characters escaped as ``#ooo``),
  for each compiled regex: ``search``, then ``float(group(1))``;
- prefilter: the same literal-prefilter design written as a plain loop over 8 MB blocks: each
  required literal found with ``bytes.find``, the lines that hold one decoded, split at ``\r`` and
  matched, record numbers counted between candidates;
- ceiling: the same Python loop over the records doing nothing, the best any per-record Python
  loop can do;
- cli: ``python -m trainmon parse --json --metric-definitions defs.json LOG > /dev/null``, end to
  end (interpreter start, JSON output and the per-definition summary included).

Both extractors must find the same points (same records, names and values), in the same order.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .common import Report, best_of, child_env, data_dir, heading, mb_per_s, rate, ratio_text, table, timed

LINES = 1_000_000
SEED = 20240501
FORMAT_VERSION = 2  # bump when the generator changes, so a cached log is regenerated
PARALLEL_TARGET, CLI_TARGET, PREFILTER_TARGET = 30.0, 25.0, 1.0

NUMBER = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
DEFINITIONS = [
    {"Name": "train:error", "Regex": r"Train_error=(.*?);"},
    {"Name": "validation:error", "Regex": r"Valid_error=(.*?);"},
    {"Name": "epoch", "Regex": r"^epoch ([0-9]+) "},
    {"Name": "train:rmse", "Regex": r".*\[[0-9]+\].*#011train-rmse:" + NUMBER + r".*"},
    {"Name": "validation:rmse", "Regex": r".*\[[0-9]+\].*#011validation-rmse:" + NUMBER + r".*"},
    {"Name": "loss", "Regex": r" - loss: ([0-9.]+)"},
    {"Name": "accuracy", "Regex": r" - acc: ([0-9.]+)"},
    {"Name": "val_loss", "Regex": r" - val_loss: ([0-9.]+)"},
    {"Name": "val_acc", "Regex": r" - val_acc: ([0-9.]+)"},
    {"Name": "learning_rate", "Regex": r"learning_rate=" + NUMBER},
]
# SageMaker's own definition for its built-in XGBoost algorithm, verbatim.
assert DEFINITIONS[4]["Regex"] == r".*\[[0-9]+\].*#011validation-rmse:([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?).*"


# -- the log ---------------------------------------------------------------------------------

_MODULES = ["trainer", "data.loader", "model.checkpoint", "torch.distributed", "optim.scheduler", "utils.io"]
_INFO = [
    "Loading checkpoint shard {a}/8 from /opt/ml/input/data/model/shard-{a:05d}.bin",
    "Worker {a} started, prefetch_factor=2, pin_memory=True",
    "Saving model checkpoint to /opt/ml/checkpoints/step-{b}",
    "Gradient norm {f:.4f} after clipping (max_norm=1.0)",
    "Using loss function CrossEntropyLoss(label_smoothing=0.1)",
    "starting epoch {a} of 40, {b} batches per epoch",
    "validation set has {b} samples in {a} shards",
    "GPU {a}: memory allocated {b} MiB, reserved {c} MiB",
    "step {b}: throughput {f:.1f} samples/s, data wait {g:.2f} ms",
    "NCCL INFO Channel {a:02d}/32 : 0[{c}] -> 1[{b}] via P2P/IPC",
    "Evaluating on 'validation' split: {b} examples",
    "early stopping patience {a}/10, best score {f:.5f}",
]
_WARNINGS = [
    "UserWarning: The given NumPy array is not writable, and PyTorch does not support non-writable tensors.",
    "DeprecationWarning: `np.float` is a deprecated alias for the builtin `float`.",
    "torch.distributed: barrier took {g:.1f} ms on rank {a}",
]
_TRACE_ERRORS = [
    "RuntimeError: CUDA out of memory. Tried to allocate {c} MiB (GPU 0; 15.78 GiB total capacity)",
    "ValueError: Expected input batch_size ({b}) to match target batch_size ({c}).",
    "KeyError: 'validation'",
    "ConnectionResetError: [Errno 104] Connection reset by peer",
]


def _fields(rng: random.Random) -> dict[str, float | int]:
    return {"a": rng.randint(1, 64), "b": rng.randint(100, 99999), "c": rng.randint(1, 16000),
            "f": rng.random() * 100, "g": rng.random() * 50}


def _stamp(rng: random.Random, line: int) -> str:
    seconds = line // 50
    return f"2024-05-01 {seconds // 3600 % 24:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d},{rng.randint(0, 999):03d}"


def _progress_bar(rng: random.Random) -> str:
    """One terminal line of a tqdm bar: several in-place redraws separated by carriage returns."""
    total = rng.choice([100, 391, 1000, 1563])
    done = rng.randint(0, total // 2)
    redraws = []
    for _ in range(rng.randint(3, 12)):
        done = min(total, done + rng.randint(1, max(1, total // 20)))
        percent = 100 * done // total
        filled = percent // 10
        bar = "\u2588" * filled + ("\u258c" if percent % 10 >= 5 and filled < 10 else "")
        speed = rng.random() * 40 + 1
        redraws.append(f"Epoch {rng.randint(1, 40)}: {percent:3d}%|{bar:<10}| {done}/{total} "
                       f"[00:{rng.randint(0, 59):02d}<00:{rng.randint(0, 59):02d}, {speed:.2f}it/s]")
    return "\r" + "\r".join(redraws)


def _metric_line(rng: random.Random, step: int) -> str:
    kind = rng.random()
    if kind < 0.35:
        return (f"epoch {step} Train_error={rng.random() / 3:.6f}; Valid_error={rng.random() / 2:.6f}; "
                f"Train_loss={rng.random():.4f};")
    if kind < 0.65:
        return f"[{step}]\ttrain-rmse:{rng.random() * 5:.5f}\tvalidation-rmse:{rng.random() * 6:.5f}"
    if kind < 0.92:
        total = rng.choice([469, 1875])
        return (f"{total}/{total} [==============================] - {rng.randint(2, 60)}s {rng.randint(1, 9)}ms/step"
                f" - loss: {rng.random():.4f} - acc: {rng.random():.4f}"
                f" - val_loss: {rng.random():.4f} - val_acc: {rng.random():.4f}")
    return f"{_stamp(rng, step)} INFO optim.scheduler: step {step * 100}, learning_rate={rng.random() / 1000:.3e}"


def generate(path: Path, lines: int, seed: int = SEED) -> None:
    """Write a log of exactly ``lines`` newline-terminated lines."""
    rng = random.Random(seed)
    written = 0
    step = 0
    out: list[str] = []
    with path.open("w", encoding="utf-8", newline="") as handle:
        while written < lines:
            roll = rng.random()
            # Chunk odds chosen so that, counted in lines, about 10% are metric lines, 55% info logs,
            # 5% warnings, 20% progress bars and 10% tracebacks (a traceback is ~10 lines).
            if roll < 0.110:
                step += 1
                chunk = [_metric_line(rng, step)]
            elif roll < 0.714:
                level = "INFO" if rng.random() < 0.9 else "DEBUG"
                message = rng.choice(_INFO).format(**_fields(rng))
                chunk = [f"{_stamp(rng, written)} {level} {rng.choice(_MODULES)}: {message}"]
            elif roll < 0.769:
                message = rng.choice(_WARNINGS).format(**_fields(rng))
                chunk = [f"/usr/lib/python3.10/site-packages/torch/utils/data.py:{rng.randint(10, 900)}: {message}"]
            elif roll < 0.989:
                chunk = [_progress_bar(rng)]
            else:
                chunk = ["Traceback (most recent call last):"]
                for _ in range(rng.randint(2, 6)):
                    chunk.append(f'  File "/opt/ml/code/{rng.choice(["train", "model", "data"])}.py", '
                                 f"line {rng.randint(1, 800)}, in {rng.choice(['<module>', 'forward', 'step', 'main'])}")
                    chunk.append(f"    {rng.choice(['loss = criterion(out, y)', 'out = self.net(x)', 'batch = next(it)'])}")
                chunk.append(rng.choice(_TRACE_ERRORS).format(**_fields(rng)))
            chunk = chunk[: lines - written]
            written += len(chunk)
            out.extend(chunk)
            if len(out) >= 10_000:
                handle.write("\n".join(out) + "\n")
                out.clear()
        if out:
            handle.write("\n".join(out) + "\n")


def log_path(lines: int) -> Path:
    path = data_dir() / f"train-{lines}-v{FORMAT_VERSION}.log"
    if not path.exists():
        print(f"  generating {path.name} ({lines:,} lines) ...", flush=True)
        temporary = path.with_suffix(".part")
        elapsed, _ = timed(lambda: generate(temporary, lines))
        temporary.replace(path)
        print(f"  generated {path.stat().st_size / 1e6:.1f} MB in {elapsed:.1f} s", flush=True)
    return path


# -- the three extractors --------------------------------------------------------------------

# Control characters as '#' plus three octal digits, as SageMaker's log pipeline shows them.
_ESCAPES = {code: f"#{code:03o}" for code in range(32)}


def _records(path: Path):
    """Records as terminal mode cuts them: text mode with newline='' ends a line at \\r\\n, \\r or \\n."""
    with path.open("r", encoding="utf-8", errors="replace", newline="") as handle:
        for line in handle:
            yield line.rstrip("\r\n")


def naive(path: Path, definitions: list[dict[str, str]]) -> tuple[int, list[tuple[int, str, float]]]:
    """Every regex on every record; returns (records, points as (record number, name, value))."""
    compiled = [(d["Name"], re.compile(d["Regex"])) for d in definitions]
    points = []
    number = 0
    for number, record in enumerate(_records(path), start=1):
        text = record.translate(_ESCAPES)
        for name, regex in compiled:
            found = regex.search(text)
            if found is None:
                continue
            captured = found.group(1)
            if captured is None:
                continue
            captured = captured.strip()
            if not captured:
                continue
            try:
                points.append((number, name, float(captured)))
            except ValueError:
                pass
    return number, points


def ceiling(path: Path) -> int:
    """The same record loop, doing nothing with the records."""
    number = 0
    for _record in _records(path):
        number += 1
    return number


def prefilter(path: Path, definitions: list[dict[str, str]], block_bytes: int = 8 << 20) -> list[tuple[int, str, float]]:
    """The literal prefilter as a plain loop: per block, every line holding a definition's required
    literal (the literal trainmon would use), its records (split at "\\r") escaped and matched."""
    from trainmon.parsing.extract import required_literal
    from trainmon.parsing.framing import Mode

    compiled = [(d["Name"], re.compile(d["Regex"])) for d in definitions]
    by_literal: dict[bytes, list[int]] = {}
    for index, definition in enumerate(definitions):
        literal = required_literal(definition["Regex"], Mode.TERMINAL)
        assert literal, "every definition here has a literal"
        by_literal.setdefault(literal.encode(), []).append(index)
    points: list[tuple[int, str, float]] = []
    records_before, pending = 0, b""
    with path.open("rb") as handle:
        while True:
            data = handle.read(block_bytes)
            block = pending + data
            if data:
                cut = block.rfind(b"\n") + 1
                block, pending = block[:cut], block[cut:]
            lines: dict[int, set[int]] = {}  # where a candidate line starts -> its definitions
            for literal, indexes in by_literal.items():
                at = block.find(literal)
                while at != -1:
                    lines.setdefault(block.rfind(b"\n", 0, at) + 1, set()).update(indexes)
                    end = block.find(b"\n", at)
                    at = -1 if end == -1 else block.find(literal, end)
            records, counted_to = records_before, 0
            for start in sorted(lines):
                records += (block.count(b"\n", counted_to, start) + block.count(b"\r", counted_to, start)
                            - block.count(b"\r\n", counted_to, start))
                counted_to = start
                end = block.find(b"\n", start)
                line = block[start:len(block) if end == -1 else end].decode("utf-8", "replace")
                pieces = line.split("\r")
                if len(pieces) > 1 and pieces[-1] == "":
                    pieces.pop()  # "\r\n": one break
                for number, piece in enumerate(pieces, start=records + 1):
                    text = piece.translate(_ESCAPES)
                    for index in sorted(lines[start]):
                        name, regex = compiled[index]
                        found = regex.search(text)
                        if found is None or found.group(1) is None or not found.group(1).strip():
                            continue
                        try:
                            points.append((number, name, float(found.group(1))))
                        except ValueError:
                            pass
            records_before += block.count(b"\n") + block.count(b"\r") - block.count(b"\r\n")
            if not data:
                return points


def fast(path: Path, definitions: list[dict[str, str]], engine: str = "numpy") -> list[Any]:
    """The points as ``trainmon parse`` takes them: a block's columns at a time (one core), the
    literals found by ``engine`` (NumPy's: the default install's)."""
    from trainmon.parsing.definitions import validate_definitions
    from trainmon.parsing.extract import Extractor, scan_blocks
    from trainmon.parsing.framing import Mode

    extractor = Extractor(validate_definitions(definitions), Mode.TERMINAL, engine)
    with path.open("rb") as stream:
        return list(scan_blocks(stream, extractor))


def fast_all_cores(path: Path, definitions: list[dict[str, str]], engine: str = "numpy") -> list[Any]:
    """What ``trainmon parse`` runs on a file: ``scan_file_blocks``, ranges scanned on every core."""
    from trainmon.parsing.definitions import validate_definitions
    from trainmon.parsing.extract import Extractor, scan_file_blocks
    from trainmon.parsing.framing import Mode

    extractor = Extractor(validate_definitions(definitions), Mode.TERMINAL, engine)
    return list(scan_file_blocks(str(path), extractor))


def as_points(blocks: list[Any], definitions: list[dict[str, str]]) -> list[tuple[int, str, float]]:
    """Columns of points as (record number, name, value), for the checks (untimed)."""
    names = [d["Name"] for d in definitions]
    return [(line, names[definition], value) for block in blocks
            for line, definition, value in zip(block.lines.tolist(), block.definitions.tolist(),
                                               block.values.tolist(), strict=True)]


def cli(path: Path, definitions_file: Path, count: bool = False, engine: str = "numpy") -> tuple[float, int]:
    """Seconds for ``trainmon parse --json`` with stdout to /dev/null, or (``count``) to a pipe this
    process reads, counting the JSON lines."""
    command = [sys.executable, "-m", "trainmon", "parse", "--json", "--metric-definitions", str(definitions_file),
               str(path)]
    env = child_env(TRAINMON_LITERAL_ENGINE=engine)
    start = time.perf_counter()
    if not count:
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
        return time.perf_counter() - start, -1
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert process.stdout is not None
    lines = 0
    while chunk := process.stdout.read(1 << 20):
        lines += chunk.count(b"\n")
    if process.wait() != 0:
        raise RuntimeError(f"trainmon parse exited {process.returncode}")
    return time.perf_counter() - start, lines


def _same(a: list[tuple[int, str, float]], b: list[tuple[int, str, float]]) -> bool:
    return len(a) == len(b) and all(
        x[0] == y[0] and x[1] == y[1] and (x[2] == y[2] or (math.isnan(x[2]) and math.isnan(y[2])))
        for x, y in zip(a, b, strict=True)
    )


def run(scale: float = 1.0) -> Report:
    report = Report("extraction")
    lines = max(1000, int(LINES * scale))
    heading(f"Extraction throughput: {lines:,}-line log, {len(DEFINITIONS)} metric definitions, terminal mode")
    path = log_path(lines)
    size = path.stat().st_size
    definitions_file = data_dir() / "extraction-definitions.json"
    definitions_file.write_text(json.dumps(DEFINITIONS, indent=2) + "\n", encoding="utf-8")

    fast_s, fast_blocks = best_of(2, lambda: fast(path, DEFINITIONS))
    parallel_s, parallel_blocks = best_of(2, lambda: fast_all_cores(path, DEFINITIONS))
    prefilter_s, prefilter_points = best_of(2, lambda: prefilter(path, DEFINITIONS))
    ceiling_s, records = best_of(2, lambda: ceiling(path))
    naive_s, (naive_records, naive_points) = timed(lambda: naive(path, DEFINITIONS))
    cli_s, _ = best_of(2, lambda: cli(path, definitions_file))
    cli_pipe_s, cli_points = cli(path, definitions_file, count=True)
    fast_points, parallel_points = as_points(fast_blocks, DEFINITIONS), as_points(parallel_blocks, DEFINITIONS)

    rows = []
    for label, seconds in (("fast: scan_blocks + Extractor (1 core)", fast_s),
                           (f"fast: scan_file_blocks ({os.cpu_count()} cores)", parallel_s),
                           ("prefilter: the same design as a plain loop", prefilter_s),
                           ("naive: every regex on every record", naive_s),
                           ("ceiling: empty per-record loop", ceiling_s),
                           ("cli: trainmon parse --json > /dev/null", cli_s),
                           ("cli: the same, into a pipe (counted)", cli_pipe_s)):
        rows.append([label, f"{seconds:.3f}", rate(lines, seconds), rate(records, seconds), mb_per_s(size, seconds)])
    print(f"  log: {path.name}, {size / 1e6:.1f} MB, {lines:,} lines, {records:,} records (\\r, \\n, \\r\\n)")
    table(["extractor", "seconds", "lines/s", "records/s", "MB/s"], rows)
    print(f"  points: fast {len(fast_points):,}, naive {len(naive_points):,} "
          f"({len(fast_points) / lines:.2f} points per line)")

    report.check(records == naive_records, f"naive loop saw every record ({naive_records:,} of {records:,})")
    report.check(len(fast_points) == len(naive_points),
                 f"same number of points ({len(fast_points):,} fast, {len(naive_points):,} naive)")
    report.check(_same(fast_points, naive_points), "same points (record, name, value), same order")
    report.check(_same(parallel_points, naive_points), "all-cores scan: same points, same order")
    report.check(_same(prefilter_points, naive_points), "prefilter loop: same points, same order")
    report.check(cli_points == len(fast_points), f"trainmon parse printed every point ({cli_points:,})")
    report.ratio("one core against the prefilter loop (prefilter time / fast time)", prefilter_s / fast_s,
                 f">= {PREFILTER_TARGET:g}x", prefilter_s / fast_s >= PREFILTER_TARGET,
                 f"(naive / fast: {naive_s / fast_s:.1f}x; naive / prefilter: {naive_s / prefilter_s:.1f}x)")
    report.ratio("parse speed-up (naive time / scan_file_blocks time, every core)", naive_s / parallel_s,
                 f">= {PARALLEL_TARGET:g}x", naive_s / parallel_s >= PARALLEL_TARGET)
    report.ratio("CLI end to end speed-up (naive time / trainmon parse time)", naive_s / cli_s,
                 f">= {CLI_TARGET:g}x", naive_s / cli_s >= CLI_TARGET,
                 "(the CLI's time includes interpreter start and JSON output; the naive loop's does not)")
    report.ratio("fast path against the ceiling (empty-loop time / fast time)", ceiling_s / fast_s,
                 detail="(above 1: faster than any per-record Python loop could be)")
    hyperscan(report, path, definitions_file, lines, size, naive_points,
              {"one": fast_s, "every": parallel_s, "cli": cli_s})
    dense(report, scale)
    return report


def hyperscan(report: Report, path: Path, definitions_file: Path, lines: int, size: int,
              naive_points: list[tuple[int, str, float]], numpy_s: dict[str, float]) -> None:
    """The same three runs with Hyperscan's literal search (the ``trainmon[hyperscan]`` extra), against
    NumPy's above: informational, the targets are the default install's."""
    from trainmon.parsing.literals import hyperscan_available

    heading("The same log with Hyperscan's literal search (optional: pip install 'trainmon[hyperscan]')")
    if not hyperscan_available():
        print("  Hyperscan is not installed here: skipped")
        return
    one_s, one_blocks = best_of(2, lambda: fast(path, DEFINITIONS, "hyperscan"))
    every_s, every_blocks = best_of(2, lambda: fast_all_cores(path, DEFINITIONS, "hyperscan"))
    cli_s, _ = best_of(2, lambda: cli(path, definitions_file, engine="hyperscan"))
    mine = {"one": one_s, "every": every_s, "cli": cli_s}
    labels = {"one": "scan_blocks + Extractor (1 core)", "every": f"scan_file_blocks ({os.cpu_count()} cores)",
              "cli": "cli: trainmon parse --json > /dev/null"}
    table(["run", "NumPy s", "Hyperscan s", "Hyperscan MB/s", "NumPy / Hyperscan"],
          [[labels[key], f"{numpy_s[key]:.3f}", f"{mine[key]:.3f}", mb_per_s(size, mine[key]),
            ratio_text(numpy_s[key] / mine[key])] for key in mine])
    report.check(_same(as_points(one_blocks, DEFINITIONS), naive_points), "Hyperscan, one core: same points")
    report.check(_same(as_points(every_blocks, DEFINITIONS), naive_points), "Hyperscan, every core: same points")
    report.ratio("Hyperscan's literal search, one core (NumPy's time / Hyperscan's)", numpy_s["one"] / one_s,
                 detail=f"(every core {numpy_s['every'] / every_s:.2f}x, the CLI {numpy_s['cli'] / cli_s:.2f}x; "
                        f"{lines:,} lines)")


DENSE_LINES = 300_000
DENSE_DEFINITIONS = [{"Name": "loss", "Regex": r"loss=(\S+)"}]


def dense(report: Report, scale: float) -> None:
    """The other end of the mix: every line a metric line (what a job printing one loss per step
    writes), one definition. The literal prefilter cannot skip anything here."""
    lines = max(1000, int(DENSE_LINES * scale))
    heading(f"Extraction on a dense log: {lines:,} lines, every one 'step N loss=0.123', 1 definition")
    path = data_dir() / f"dense-{lines}-v1.log"
    if not path.exists():
        path.write_text("".join(f"step {i} loss={i * 7919 % 1000 / 1000:.3f}\n" for i in range(lines)),
                        encoding="utf-8")
    size = path.stat().st_size
    fast_s, fast_blocks = best_of(2, lambda: fast(path, DENSE_DEFINITIONS))
    fast_points = as_points(fast_blocks, DENSE_DEFINITIONS)
    naive_s, (_records, naive_points) = best_of(2, lambda: naive(path, DENSE_DEFINITIONS))
    ceiling_s, _ = best_of(2, lambda: ceiling(path))
    table(["extractor", "seconds", "lines/s", "MB/s"],
          [[label, f"{seconds:.3f}", rate(lines, seconds), mb_per_s(size, seconds)]
           for label, seconds in (("fast: scan_blocks + Extractor", fast_s),
                                  ("naive: every regex on every record", naive_s),
                                  ("ceiling: empty per-record loop", ceiling_s))])
    report.check(_same(fast_points, naive_points), f"dense log: same points ({len(fast_points):,} fast, "
                 f"{len(naive_points):,} naive)")
    report.ratio("dense log speed-up (naive time / fast time)", naive_s / fast_s,
                 detail="(below 1: the fast path is slower than the naive loop on this log)")


if __name__ == "__main__":
    sys.exit(1 if run().failures else 0)
