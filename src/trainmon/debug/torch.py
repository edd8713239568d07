"""The tensor hook for PyTorch: a module's weights and gradients, recorded as each step ends.

    from trainmon.debug.torch import TorchHook
    hook = TorchHook(model, optimizer)       # the step ends after each optimizer.step()
    for x, y in batches:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        hook.record_scalar("loss", loss)     # before optimizer.step(): it belongs to this step
        optimizer.step()

Given the optimizer, the hook ends a step after each of its ``step()`` calls (a hook registered
with ``register_step_post_hook``): the gradients that step used are still there, and the weights
are the updated ones. Without it, the loop calls :meth:`TorchHook.end_step` after
``optimizer.step()`` (and before ``zero_grad()``). The step is the number of optimizer steps
before it, from 0, so ``save_interval`` counts updates, not forward passes (which evaluation,
gradient accumulation and several forward passes per step would make ambiguous).

At a saved step every parameter is recorded as ``<name>`` in ``weights`` (``biases`` for a name
ending in ``bias``) and its gradient, where it has one, as ``gradient/<name>`` in ``gradients``.
The reductions are computed on the tensors' device, under ``torch.no_grad()``, and come back
to the host in one transfer per device. This module imports torch; ``trainmon.debug`` does not.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from .hook import Hook, warn_once
from .reductions import Reduced

_RECORDED = ("weights", "biases", "gradients")
_WEIGHTS = ("weights", "biases")


def _accumulator(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor in a type fit to sum over: float32 unless it is float64."""
    if tensor.dtype in (torch.float32, torch.float64):
        return tensor
    if tensor.is_complex():
        raise TypeError(f"a tensor of real numbers is needed, not one of {tensor.dtype}")
    return tensor.to(torch.float32)


def _parts(x: torch.Tensor, previous: torch.Tensor | None) -> list[torch.Tensor]:
    """A tensor's reductions as 0-d tensors on its device, in five kernels (six with the update):
    mean, mean |x|, L2, min, max, the non-zero count, and the update's norm where it is known."""
    low, high = torch.aminmax(x)
    parts = [x.mean(), torch.linalg.vector_norm(x, 1) / x.numel(), torch.linalg.vector_norm(x), low, high,
             torch.count_nonzero(x).to(x.dtype)]
    if previous is not None and previous.shape == x.shape:
        parts.append(torch.linalg.vector_norm(x - _accumulator(previous.to(x.device))))
    return parts


def _counts(x: torch.Tensor) -> tuple[int, int]:
    """NaN and infinities, counted only for a tensor whose norm says it has some (a second transfer)."""
    return int(torch.isnan(x).sum()), int(torch.isinf(x).sum())


def reduce_all(tensors: Sequence[torch.Tensor], previous: Sequence[torch.Tensor | None]) -> list[Reduced]:
    """Every tensor's reductions, with one transfer to the host per device and dtype."""
    answers: list[Reduced] = []
    with torch.no_grad():
        xs = [_accumulator(tensor.detach()) for tensor in tensors]
        groups: dict[tuple[torch.device, torch.dtype], list[tuple[int, int, int]]] = {}  # index, first part, parts
        parts: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
        for index, (x, before) in enumerate(zip(xs, previous, strict=True)):
            if x.numel() == 0:
                continue
            key = (x.device, x.dtype)
            found = _parts(x, before)
            listed = parts.setdefault(key, [])
            groups.setdefault(key, []).append((index, len(listed), len(found)))
            listed.extend(found)
        values: dict[int, list[float]] = {}
        for key, entries in groups.items():
            flat = torch.stack(parts[key]).to(torch.float64).cpu().tolist()
            for index, first, count in entries:
                values[index] = flat[first:first + count]
        for index, x in enumerate(xs):
            size = x.numel()
            if size == 0:
                answers.append(Reduced(0, (None, None, None, None, None), 0, 0, None))
                continue
            mean, mean_abs, l2, low, high, nonzero, *update = values[index]
            nan, inf = _counts(x) if not math.isfinite(l2) else (0, 0)
            answers.append(Reduced(size, (mean, mean_abs, l2, low, high), nan, inf, (size - nonzero) / size,
                                   update[0] if update else None))
    return answers


def reduce(value: Any, previous: Any = None) -> Reduced:
    """One tensor's reductions (what :meth:`Hook.record` uses for a torch tensor)."""
    return reduce_all([value], [previous])[0]


REUSES_COPIES = False
"""A weight's copy lives for one step: a copy of every weight kept on a GPU would double the model's memory."""


def snapshot(value: Any, into: Any = None) -> torch.Tensor:
    """A copy of a tensor, on its device, for the next step's update (made anew: see REUSES_COPIES)."""
    with torch.no_grad():
        copy: torch.Tensor = value.detach().clone()
    return copy


class TorchHook(Hook):
    """A :class:`~trainmon.debug.Hook` that records ``module``'s parameters and gradients as each step
    ends; given ``optimizer``, the step ends after each ``optimizer.step()``. ``weights`` and
    ``gradients`` say whether each is recorded."""

    def __init__(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
                 save_interval: int | None = None, *, save_intervals: Mapping[str, int] | None = None,
                 tensor_dir: str | os.PathLike[str] | None = None, host: str | None = None,
                 weights: bool = True, gradients: bool = True) -> None:
        super().__init__(save_interval, save_intervals=save_intervals, tensor_dir=tensor_dir, host=host)
        self.module = module
        self.weights, self.gradients = weights, gradients
        self._removal: Any = None
        if optimizer is not None:
            try:
                self._removal = optimizer.register_step_post_hook(self._after_optimizer_step)
            except Exception as exc:  # not a torch optimizer: the loop can still end its steps
                warn_once(f"optimizer:{id(self)}", f"cannot follow the optimizer's steps ({exc!r}): call "
                          "hook.end_step() after each optimizer.step()")

    def _after_optimizer_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.end_step()

    def end_step(self) -> None:
        """The module's parameters and gradients recorded (if the step is saved), then the next step."""
        if self.active and (self._is_due(_RECORDED) or self._is_due_next(_WEIGHTS)):  # else: nothing to do
            try:
                self._record_module()
            except Exception as exc:  # never into the training loop
                self._skip(type(self.module).__name__, exc)
        super().end_step()

    def close(self) -> None:
        if self._removal is not None:
            self._removal.remove()
            self._removal = None
        super().close()

    def _record_module(self) -> None:
        names: list[str] = []
        collections: list[tuple[str, ...]] = []
        tensors: list[torch.Tensor] = []
        previous: list[torch.Tensor | None] = []
        for name, parameter in self.module.named_parameters():
            collection: tuple[str, ...] = ("biases",) if name.endswith("bias") else ("weights",)
            if self.weights:
                if self._is_due(collection):
                    kept = self._kept.pop(name, None)
                    names.append(name)
                    collections.append(collection)
                    tensors.append(parameter)
                    previous.append(kept[1] if kept is not None and kept[0] == self._step - 1 else None)
                if self._is_due_next(collection):
                    self._kept[name] = (self._step, snapshot(parameter))
            if self.gradients and parameter.grad is not None and self._is_due(("gradients",)):
                names.append(f"gradient/{name}")
                collections.append(("gradients",))
                tensors.append(parameter.grad)
                previous.append(None)
        if tensors:
            self._record_reduced(names, collections, reduce_all(tensors, previous))
