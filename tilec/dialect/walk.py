"""Collecting ops by walking IR: the list is made first, because an exception cannot cross an
MLIR walk and an op must not be erased while the walk is on it."""
from __future__ import annotations

from ..mlir import ir


def nested_ops(root: ir.Operation, name: str | None = None) -> list[ir.Operation]:
    """``root`` and every op nested in it, in walk order; only those named ``name`` if given."""
    found: list[ir.Operation] = []

    def collect(op: ir.Operation) -> ir.WalkResult:
        if name is None or op.name == name:
            found.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(collect)
    return found
