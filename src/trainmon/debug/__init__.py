"""trainmon's tensor hook: a training script records tensors' reductions for the tensor rules.

``Hook`` (numpy arrays, anything array-like, scalars) and, for PyTorch,
``trainmon.debug.torch.TorchHook`` (a module's weights and gradients; importing it imports
torch, importing this package does not). In a
``trainmon run`` job the records go to the host's tensor file, which the job's rules read as it
runs (VanishingGradient, ExplodingTensor, WeightUpdateRatio, AllZero, UnchangedTensor); outside
one, the hook records nothing. See docs/rules.md, "Tensor rules and the hook".
"""

from __future__ import annotations

from .hook import DEFAULT_SAVE_INTERVAL, Hook

__all__ = ["DEFAULT_SAVE_INTERVAL", "Hook"]
