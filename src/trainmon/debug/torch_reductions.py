"""A torch tensor's reductions, computed on its device: what :meth:`trainmon.debug.Hook.record`
uses for a torch tensor, and :class:`trainmon.debug.torch.TorchHook` for a module's parameters. The
sums of a half-precision tensor accumulate in float32 without a float32 copy of it, and a device's
reductions come back to the host in one transfer. This module imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from .reductions import Reduced


def _summable(tensor: torch.Tensor) -> tuple[torch.Tensor, torch.dtype]:
    """The tensor to reduce and the type its sums are taken in (float64 for float64, else float32):
    a floating tensor as it is (its sums take ``dtype=``, no copy is made); another, as float32."""
    if tensor.is_complex():
        raise TypeError(f"a tensor of real numbers is needed, not one of {tensor.dtype}")
    if not tensor.is_floating_point():
        return tensor.to(torch.float32), torch.float32
    return tensor, torch.float64 if tensor.dtype == torch.float64 else torch.float32


def _parts(x: torch.Tensor, into: torch.dtype, previous: torch.Tensor | None) -> list[torch.Tensor]:
    """A tensor's reductions as 0-d tensors of ``into`` on its device, in six kernels (seven with
    the update): mean, mean |x|, L2, min, max, the non-zero count, and the update's norm where the
    tensor before it is known. The sums accumulate in ``into``; only the update of a tensor of
    half precision makes a temporary of ``into`` (of that one tensor)."""
    low, high = torch.aminmax(x)
    parts = [x.mean(dtype=into), torch.linalg.vector_norm(x, 1, dtype=into) / x.numel(),
             torch.linalg.vector_norm(x, dtype=into), low.to(into), high.to(into), torch.count_nonzero(x).to(into)]
    if previous is not None and previous.shape == x.shape:
        before = previous.to(x.device)
        difference = x - before if x.dtype == into else x.to(into) - before.to(into)
        parts.append(torch.linalg.vector_norm(difference))
        del difference, before
    return parts


def _counts(x: torch.Tensor) -> tuple[int, int]:
    """NaN and infinities, counted only for a tensor whose norm says it has some (a second transfer)."""
    return int(torch.isnan(x).sum()), int(torch.isinf(x).sum())


def reduce_all(tensors: Sequence[torch.Tensor], previous: Sequence[torch.Tensor | None]) -> list[Reduced]:
    """Every tensor's reductions, one tensor at a time (no copy of them all is ever made), with one
    transfer to the host per device and type."""
    answers: list[Reduced] = []
    with torch.no_grad():
        groups: dict[tuple[torch.device, torch.dtype], list[tuple[int, int, int]]] = {}  # index, first part, parts
        parts: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
        for index, (tensor, before) in enumerate(zip(tensors, previous, strict=True)):
            x, into = _summable(tensor.detach())
            if x.numel() == 0:
                continue
            key = (x.device, into)
            found = _parts(x, into, before)
            listed = parts.setdefault(key, [])
            groups.setdefault(key, []).append((index, len(listed), len(found)))
            listed.extend(found)
            del x
        values: dict[int, list[float]] = {}
        for key, entries in groups.items():
            flat = torch.stack(parts[key]).cpu().tolist()
            for index, first, count in entries:
                values[index] = flat[first:first + count]
        for index, tensor in enumerate(tensors):
            size = tensor.numel()
            if size == 0:
                answers.append(Reduced(0, (None, None, None, None, None), 0, 0, None))
                continue
            mean, mean_abs, l2, low, high, nonzero, *update = values[index]
            nan, inf = _counts(tensor.detach()) if not math.isfinite(l2) else (0, 0)
            answers.append(Reduced(size, (mean, mean_abs, l2, low, high), nan, inf, (size - round(nonzero)) / size,
                                   update[0] if update else None))
    return answers


def reduce(value: Any, previous: Any = None) -> Reduced:
    """One tensor's reductions (what :meth:`Hook.record` uses for a torch tensor)."""
    return reduce_all([value], [previous])[0]


REUSES_COPIES = False
"""A weight's copy lives for one step (in host memory: see :func:`snapshot`), made anew each time."""


def snapshot(value: Any, into: Any = None) -> torch.Tensor:
    """A copy of a tensor in host memory, for the next step's update: a copy kept on a GPU through
    the next forward and backward pass would add the weights' size to the training's peak."""
    with torch.no_grad():
        copy: torch.Tensor = value.detach().to("cpu", copy=True)
    return copy
