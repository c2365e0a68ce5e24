"""Reductions over a leading axis split across tiles.

In: the body of a kernel at kernel level whose grid is empty (its one row is the whole
tensors: a reduction over the leading axis of its input, such as a column sum).  Out: the
extent of that axis and the elements of one partial result, when the kernel can be split:
tile ``t`` reduces its own rows of the axis to partial results, and one more step combines
the tiles' partial results in tile order, then computes what follows the reduction.  The
tiles are a fixed count (:data:`~.tiler.SPLIT_TILES`), so the result does not depend on
how many threads compute them.

A kernel splits when it has one reduction (sum, mean, max or min) over axes that include
the first, and what it reduces is computed element-wise from input rows of its own shape
(so that a tile's rows of it are the same rows of each input).
"""
from __future__ import annotations

from typing import Any, Optional

from ..dialect.types import tensor_info
from ..dims import ELLIPSIS, Dim
from ..mlir import ir
from .rows import ELEMENTWISE

SPLIT_KINDS = frozenset({"sum", "mean", "max", "min"})
ROW_WIDE = frozenset({"tile.reduce", "tile.softmax", "tile.matmul"})


def _cone(value: Any, shape: tuple) -> bool:
    """Whether ``value`` is computed element-wise from rows of ``shape`` (and scalars)."""
    op = value.owner
    if isinstance(op, ir.Block):
        return False
    name = op.name
    if name == "tile.constant":
        return True
    if name == "tile.load_row":
        return tensor_info(value.type).shape == shape
    if name not in ELEMENTWISE:
        return False
    return all(tensor_info(x.type).shape == () or _cone(x, shape) for x in op.operands)


def split_reduction(block: Any) -> Optional[tuple[Dim, Dim]]:
    """(the reduced leading extent, elements of a partial result) of the kernel body
    ``block`` if it splits (module docstring), else None."""
    ops = [op for op in block.operations if op.operation.name in ROW_WIDE]
    if len(ops) != 1 or ops[0].operation.name != "tile.reduce":
        return None
    reduce = ops[0]
    x = reduce.operands[0]
    shape = tensor_info(x.type).shape
    axes = {len(shape) + int(a) if int(a) < 0 else int(a) for a in reduce.attributes["axes"]}
    kind = ir.StringAttr(reduce.attributes["kind"]).value
    if not shape or ELLIPSIS in shape or 0 not in axes or kind not in SPLIT_KINDS:
        return None
    if not _cone(x, shape):
        return None
    width = Dim.const(1)
    for a, d in enumerate(shape):
        if a not in axes:
            width = width * d
    return shape[0], width
