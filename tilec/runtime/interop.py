"""PyTorch tensors in the NumPy call path, without importing PyTorch.

In: an argument that is a ``torch.Tensor`` (recognised only when the caller has imported
torch: ``sys.modules``), on the CPU.  Out: a NumPy view of its memory (bfloat16 read as
``int16`` through DLPack, which NumPy cannot read as bfloat16, then viewed as
``ml_dtypes.bfloat16``; a tensor that requires grad is read through ``detach()``), and results
handed back as tensors sharing the NumPy arrays' memory.
"""
from __future__ import annotations

import sys
from typing import Any

import ml_dtypes
import numpy as np

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


def torch_tensor(value: Any) -> bool:
    """Whether ``value`` is a ``torch.Tensor`` (False when torch was never imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def from_torch(value: Any) -> np.ndarray:
    """A NumPy view of the CPU tensor ``value``'s memory."""
    torch = sys.modules["torch"]
    value = value.detach()
    if value.dtype == torch.bfloat16:
        return np.from_dlpack(value.view(torch.int16)).view(BFLOAT16)
    return np.from_dlpack(value)


def to_torch(array: np.ndarray) -> Any:
    """A tensor sharing ``array``'s memory."""
    torch = sys.modules["torch"]
    if array.dtype == BFLOAT16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)
