"""PyTorch integration (``pip install tilec[torch]``): a tilec library's functions as
``torch.ops`` custom operators, and model modules swapped for tilec-backed ones.

``register(lib, namespace="tilec")`` (:mod:`.ops`): every function of ``lib`` becomes
``torch.ops.<namespace>.<function>`` (with ``.out``), callable eagerly, under
``torch.compile(dynamic=True)`` and ``torch.export``, with autograd where the ``.tile`` file
names a backward.  ``replace(model, {ModuleClass: factory})`` (:mod:`.replace`): swaps
modules and reports what it swapped.

Importing :mod:`tilec` or calling ``tilec.load`` never imports this module or PyTorch.
"""
from __future__ import annotations

from .ops import register
from .replace import Replaced, replace

__all__ = ["register", "replace", "Replaced"]
