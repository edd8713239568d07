"""Debug hook: what recording tensors with trainmon.debug costs a training step, against the same step without it.

Two small models, each trained in this process on random data:

- **numpy**: a two-layer perceptron (64 inputs, 256 hidden units with ReLU, 10 outputs, batches
  of 64), forward, backward and an SGD update written in numpy: 19,210 parameters in 4 arrays. With
  the hook, the script records each weight (``weights``) and its gradient (``gradients``) and the
  loss at every step, as docs/rules.md shows: ``Hook.record`` decides what is saved.
- **torch**: the same perceptron as a ``torch.nn.Sequential`` on the CPU, with ``torch.optim.SGD``;
  with the hook, a ``TorchHook(model, optimizer)`` (the step ends after each ``optimizer.step()``)
  and ``record_scalar("loss", loss)``.

Each model runs without the hook (the baseline), with it at ``save_interval`` 500 (Debugger's
default) and at 1 (every step saved: the worst case), in interleaved blocks of steps so that all
three see the same machine; the figure per configuration is the median time of a step over the
blocks. Figures: **step time with the hook / without**, target **at most 1.05** at
``save_interval`` 500, informational at 1. Checks: each hooked run's file holds every saved
step's records, nothing else, and parses back.

Run alone: ``python3 -m benchmarks.debug_hook``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .common import ROOT, Report, best_of, child_env, heading, median, ratio_text, scratch_dir, table

STEPS_PER_BLOCK = 500
BLOCKS = 12
INTERVALS = (500, 1)
TARGET_RATIO = 1.05
SIZES = (64, 256, 10)
BATCH = 64
PER_STEP = 9  # records of a saved step: 4 weights, 4 gradients, the loss
_ONE_THREAD = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


class NumpyModel:
    """A two-layer perceptron trained by hand: one step is forward, backward and an SGD update."""

    def __init__(self, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        n_in, hidden, n_out = SIZES
        self.params = {"fc1.weight": rng.normal(0, n_in ** -0.5, (n_in, hidden)), "fc1.bias": np.zeros(hidden),
                       "fc2.weight": rng.normal(0, hidden ** -0.5, (hidden, n_out)), "fc2.bias": np.zeros(n_out)}
        self.x = rng.normal(size=(BATCH, n_in))
        self.y = rng.normal(size=(BATCH, n_out))

    def step(self, hook: Any | None) -> None:
        p = self.params
        hidden = np.maximum(self.x @ p["fc1.weight"] + p["fc1.bias"], 0.0)
        error = hidden @ p["fc2.weight"] + p["fc2.bias"] - self.y
        loss = float(np.mean(error ** 2))
        d_out = 2 * error / error.size
        d_hidden = (d_out @ p["fc2.weight"].T) * (hidden > 0)
        grads = {"fc1.weight": self.x.T @ d_hidden, "fc1.bias": d_hidden.sum(0),
                 "fc2.weight": hidden.T @ d_out, "fc2.bias": d_out.sum(0)}
        if hook is not None:
            for name, value in p.items():
                hook.record(name, value, "biases" if name.endswith("bias") else "weights")
                hook.record(f"gradient/{name}", grads[name], "gradients")
            hook.record_scalar("loss", loss)
        for name, grad in grads.items():
            p[name] -= 0.01 * grad
        if hook is not None:
            hook.end_step()


def _torch_model() -> tuple[Any, Any, Any, Any, Any] | None:
    try:
        import torch
    except ImportError:
        return None
    torch.manual_seed(0)
    n_in, hidden, n_out = SIZES
    model = torch.nn.Sequential(torch.nn.Linear(n_in, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, n_out))
    return torch, model, torch.optim.SGD(model.parameters(), lr=0.01), torch.randn(BATCH, n_in), torch.randn(BATCH, n_out)


def _torch_step(torch: Any, model: Any, optimizer: Any, x: Any, y: Any, hook: Any | None) -> None:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    if hook is not None:
        hook.record_scalar("loss", loss)
    optimizer.step()  # a TorchHook ends its step here


def _cpu_per_step(step: Callable[[], None], steps: int) -> float:
    """CPU seconds per step (this process's: the hook's writer thread counts), not wall time, so that
    the other processes of a busy machine do not count."""
    start = time.process_time()
    for _ in range(steps):
        step()
    return (time.process_time() - start) / steps


def _paired(runs: dict[str, Callable[[], None]], blocks: int, steps: int) -> dict[str, list[tuple[float, float]]]:
    """For each hooked run, ``blocks`` pairs of (its CPU per step, the baseline's), each pair a block
    of each measured back to back, the order swapped every other round (A B, B A) so that neither
    side always runs first."""
    baseline = runs["without the hook"]
    pairs: dict[str, list[tuple[float, float]]] = {name: [] for name in runs if name != "without the hook"}
    for round_ in range(blocks):
        for name in pairs:
            if round_ % 2:
                hooked = _cpu_per_step(runs[name], steps)
                plain = _cpu_per_step(baseline, steps)
            else:
                plain = _cpu_per_step(baseline, steps)
                hooked = _cpu_per_step(runs[name], steps)
            pairs[name].append((hooked, plain))
    return pairs


def _check(path: Path, interval: int, steps: int, per_step: int, model: str) -> tuple[bool, str]:
    from trainmon.debug import records
    from trainmon.rules.tensor import TensorRecord

    parsed = [records.parse(line) for line in path.read_bytes().splitlines()]
    found = [r for r in parsed if isinstance(r, TensorRecord)]
    ends = [records.read_step_ends(r) for r in parsed if isinstance(r, dict) and "steps" in r]
    ended = sum(len(times) for _, times in ends)
    saved = len(range(0, steps, interval))
    return (len(found) == saved * per_step and len(parsed) == len(found) + len(ends) + 1 and ended == steps,
            f"{model}, save_interval {interval}: {len(found)} records for {saved} saved steps "
            f"({saved * per_step} expected), {ended} step ends ({steps} expected)")


def _models(work: Path) -> list[tuple[str, dict[str, Callable[[], None]], dict[int, Any]]]:
    """Each model's runs (without the hook, then at each save_interval) and its hooks."""
    from trainmon.debug import Hook

    numpy_hooks = {i: Hook(i, tensor_dir=work, host=f"numpy-{i}") for i in INTERVALS}
    plain, hooked = NumpyModel(), {i: NumpyModel() for i in INTERVALS}
    numpy_runs: dict[str, Callable[[], None]] = {"without the hook": lambda: plain.step(None)}
    for i in INTERVALS:
        numpy_runs[f"save_interval {i}"] = lambda i=i: hooked[i].step(numpy_hooks[i])  # type: ignore[misc]
    models = [("numpy", numpy_runs, numpy_hooks)]
    made = _torch_model()
    if made is None:
        return models
    from trainmon.debug.torch import TorchHook

    torch, model, optimizer, x, y = made
    torch.set_num_threads(1)
    torch_runs: dict[str, Callable[[], None]] = {"without the hook": lambda: _torch_step(torch, model, optimizer, x, y,
                                                                                         None)}
    torch_hooks = {}
    for i in INTERVALS:
        copy = _torch_model()
        assert copy is not None
        _, m, opt, _, _ = copy
        torch_hooks[i] = TorchHook(m, opt, i, tensor_dir=work, host=f"torch-{i}")
        torch_runs[f"save_interval {i}"] = (lambda m=m, opt=opt, h=torch_hooks[i]:  # type: ignore[misc]
                                            _torch_step(torch, m, opt, x, y, h))
    models.append(("torch", torch_runs, torch_hooks))
    return models


def _calls_alone(work: Path) -> dict[str, float]:
    """Seconds per step of the hook's own calls at steps that are not saved, without the training
    (the best of 5 blocks of 20,000 steps: the least disturbed by the rest of the machine)."""
    from trainmon.debug import Hook

    hook = Hook(10 ** 9, tensor_dir=work, host="alone")
    hook.set_step(1)
    arrays = {name: np.ones(4) for name in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")}

    def numpy_calls() -> None:
        for name, value in arrays.items():
            hook.record(name, value, "biases" if name.endswith("bias") else "weights")
            hook.record(f"gradient/{name}", value, "gradients")
        hook.record_scalar("loss", 0.5)
        hook.end_step()

    answer = {"numpy": best_of(5, lambda: [numpy_calls() for _ in range(20_000)])[0] / 20_000}
    made = _torch_model()
    if made is not None:
        from trainmon.debug.torch import TorchHook

        torch, model, _, _, _ = made
        torch_hook = TorchHook(model, None, 10 ** 9, tensor_dir=work, host="alone-torch")
        torch_hook.set_step(1)
        loss = torch.tensor(0.5)

        def torch_calls() -> None:
            torch_hook.record_scalar("loss", loss)
            torch_hook.end_step()  # what the optimizer's step hook calls

        answer["torch"] = best_of(5, lambda: [torch_calls() for _ in range(20_000)])[0] / 20_000
    return answer


def child(work: Path, blocks: int, steps: int) -> dict[str, Any]:
    """The measurements, in a process of their own (one BLAS and torch thread: steady figures on a busy machine)."""
    answer: dict[str, Any] = {"models": {}, "checks": []}
    for name, runs, hooks in _models(work):
        for step in runs.values():  # warm up (torch's first steps allocate)
            for _ in range(20):
                step()
        answer["models"][name] = _paired(runs, blocks, steps)
        for interval, hook in hooks.items():
            total = hook.step
            hook.close()
            answer["checks"].append(_check(hook.path, interval, total, PER_STEP, name))
    answer["alone"] = _calls_alone(work)
    return answer


def run(scale: float = 1.0) -> Report:
    report = Report("debug_hook")
    blocks = max(3, int(BLOCKS * min(1.0, scale)))
    steps = max(100, int(STEPS_PER_BLOCK * scale))
    heading(f"Debug hook: a {SIZES[0]}-{SIZES[1]}-{SIZES[2]} perceptron's training step, {blocks} rounds of "
            f"{steps} steps per configuration")
    with scratch_dir("debug-hook-") as work:
        done = subprocess.run([sys.executable, "-m", "benchmarks.debug_hook", "--child", str(work), str(blocks),
                               str(steps)], cwd=ROOT, capture_output=True, text=True, timeout=1800,
                              env=child_env(**dict.fromkeys(_ONE_THREAD, "1")))
        if done.returncode != 0:
            report.failures.append(f"the child exited {done.returncode}: {done.stderr[-2000:]}")
            return report
        result = json.loads(done.stdout.strip().splitlines()[-1])
    if "torch" not in result["models"]:
        print("  torch is not installed: the numpy model only")
    for name, pairs in result["models"].items():
        rows = [[name, "without the hook", f"{1e6 * median([b for p in pairs.values() for _, b in p]):.1f}", "1.00x"]]
        for config, values in pairs.items():
            ratio = median([hooked / plain for hooked, plain in values])
            hooked_s, plain_s = median([h for h, _ in values]), median([b for _, b in values])
            rows.append([name, config, f"{1e6 * hooked_s:.1f}", ratio_text(ratio)])
            interval = int(config.split()[-1])
            met = ratio <= TARGET_RATIO if interval == 500 else None
            report.ratio(f"{name} step with the hook at save_interval {interval} / without", ratio,
                         f"<= {TARGET_RATIO:g}" if met is not None else None, met,
                         f"{1e6 * (hooked_s - plain_s):.1f} CPU µs more per step, of {1e6 * plain_s:.1f}")
        table(["model", "configuration", "CPU µs per step", "ratio"], rows)
    for name, seconds in result["alone"].items():
        calls = "9 calls and end_step()" if name == "numpy" else "record_scalar and the step's end"
        report.ratio(f"{name}: the hook's own calls at a step not saved / the step without the hook",
                     seconds / median([b for p in result["models"][name].values() for _, b in p]), None, None,
                     f"{1e6 * seconds:.2f} µs a step ({calls}, without the training, best of 5)")
    for ok, message in result["checks"]:
        report.check(ok, message)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.debug_hook")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--child", nargs=3, metavar=("WORK", "BLOCKS", "STEPS"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child[0]), int(args.child[1]), int(args.child[2]))))
        return 0
    report = run(args.scale)
    for failure in report.failures:
        print(f"  FAILED check: {failure}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
