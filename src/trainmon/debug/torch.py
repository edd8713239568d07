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
The reductions are computed on the tensors' device, under ``torch.no_grad()``, one tensor at a
time (the sums of a half-precision tensor accumulate in float32 without a float32 copy of it),
and come back to the host in one transfer per device (:mod:`.torch_reductions`). This module imports
torch; ``trainmon.debug`` does not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

from .hook import Hook, warn_once
from .torch_reductions import reduce_all, snapshot

_RECORDED = ("weights", "biases", "gradients")
_WEIGHTS = ("weights", "biases")


class TorchHook(Hook):
    """A :class:`~trainmon.debug.Hook` that records ``module``'s parameters and gradients as each step
    ends; given ``optimizer``, the step ends after each ``optimizer.step()``. ``weights`` and
    ``gradients`` say whether each is recorded.

    The norm of a weight's update needs the weight before it. Given the optimizer, the weights of a
    saved step are copied on their device just before its ``optimizer.step()`` and the copies freed
    as soon as the update is reduced after it: they never live through a forward or backward pass,
    where a job's memory peaks. Without it, they are copied to host memory at the end of the step
    before (and moved back one at a time to be compared)."""

    def __init__(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
                 save_interval: int | None = None, *, save_intervals: Mapping[str, int] | None = None,
                 tensor_dir: str | os.PathLike[str] | None = None, host: str | None = None,
                 weights: bool = True, gradients: bool = True) -> None:
        super().__init__(save_interval, save_intervals=save_intervals, tensor_dir=tensor_dir, host=host)
        self.module = module
        self.weights, self.gradients = weights, gradients
        self._removals: list[Any] = []
        self._before: dict[str, tuple[int, torch.Tensor]] = {}  # the weights of this step before optimizer.step()
        if optimizer is not None:
            try:
                self._removals.append(optimizer.register_step_pre_hook(self._before_optimizer_step))
                self._removals.append(optimizer.register_step_post_hook(self._after_optimizer_step))
            except Exception as exc:  # not a torch optimizer: the loop can still end its steps
                for removal in self._removals:
                    removal.remove()
                self._removals = []
                warn_once(f"optimizer:{id(self)}", f"cannot follow the optimizer's steps ({exc!r}): call "
                          "hook.end_step() after each optimizer.step()")

    def _before_optimizer_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """At a saved step, the weights as they are before the update, copied on their device. At
        another, one look at the plan: walking the module's parameters at every step cost 11 µs of
        the benchmark's perceptron's 0.46 ms step, more than all the rest of the hook."""
        try:
            self._before.clear()
            if not (self.weights and self._is_due(_WEIGHTS) and self.active):
                return
            with torch.no_grad():
                for name, parameter in self.module.named_parameters():
                    if self._is_due(_collection(name)):
                        self._before[name] = (self._step, parameter.detach().clone())
        except Exception as exc:  # never into the training loop (a copy that does not fit, say)
            self._before.clear()
            self._skip(type(self.module).__name__, exc)

    def _after_optimizer_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.end_step()

    def end_step(self) -> None:
        """The module's parameters and gradients recorded (if the step is saved), then the next step."""
        try:
            if (self._is_due(_RECORDED) or (not self._removals and self._is_due_next(_WEIGHTS))) and self.active:
                self._record_module()
        except Exception as exc:  # never into the training loop
            self._skip(type(self.module).__name__, exc)
        finally:
            self._before.clear()  # the copies live across optimizer.step() only
        super().end_step()

    def close(self) -> None:
        for removal in self._removals:
            removal.remove()
        self._removals = []
        self._before.clear()
        super().close()

    def _record_module(self) -> None:
        names: list[str] = []
        collections: list[tuple[str, ...]] = []
        tensors: list[torch.Tensor] = []
        previous: list[torch.Tensor | None] = []
        follows = bool(self._removals)  # the optimizer's hooks copy the weights before its step
        for name, parameter in self.module.named_parameters():
            collection = _collection(name)
            if self.weights:
                if self._is_due(collection):
                    kept = self._before.pop(name, None) if follows else self._kept.pop(name, None)
                    names.append(name)
                    collections.append(collection)
                    tensors.append(parameter)
                    previous.append(kept[1] if kept is not None and kept[0] == self._step - (0 if follows else 1)
                                    else None)
                if not follows and self._is_due_next(collection) and self._may_keep(name):
                    self._kept[name] = (self._step, snapshot(parameter))
            if self.gradients and parameter.grad is not None and self._is_due(("gradients",)):
                names.append(f"gradient/{name}")
                collections.append(("gradients",))
                tensors.append(parameter.grad)
                previous.append(None)
        if tensors:
            self._record_reduced(names, collections, reduce_all(tensors, previous))


def _collection(name: str) -> tuple[str, ...]:
    return ("biases",) if name.endswith("bias") else ("weights",)
