"""Which kernels take the ``gemm`` schedule, and how they read their operands.

In: the body of a kernel that tile-kernel has rewritten to rows (``tile.load_row`` of each
argument, the group's ops on rows, ``tile.store_row`` of each result).  Out: a
:class:`~.tiler.GemmOperands` when the kernel is one matmul ``A @ B`` with an element-wise
epilogue, where A is an argument ``[.., M, K]`` read where it is and B an argument
``[.., K, N]``, a transpose of one ``[.., N, K]`` (a Linear weight, read in place) or a
broadcast of one ``[K, N]`` over the batch; else None, and the kernel keeps the ``rows``
schedule.  The kernel's grid must be every dimension of its outputs but the last, which the
matmul's columns fill.
"""
from __future__ import annotations

from typing import Any, Optional

from ..dialect import ops as t
from ..dialect.types import tensor_info
from ..dims import ELLIPSIS
from ..mlir import ir
from .tiler import GemmOperands

# the ops that may stand around the matmul: its epilogue is computed element by element from
# the accumulator where its tile is stored, so anything that can be read lazily at an index
EPILOGUE_OPS = frozenset(f"tile.{n}" for n in t.OP_KINDS
                         if t.OP_KINDS[n] in (t.OpKind.ELEMENTWISE, t.OpKind.MOVEMENT)
                         and n != "concat") | {"tile.load_row", "tile.store_row"}


def _argument(value: Any) -> Optional[int]:
    """The number of the kernel argument whose row ``value`` is (a ``tile.load_row``)."""
    owner = value.owner
    if not isinstance(owner, ir.OpView) and not isinstance(owner, ir.Operation):
        return None
    if owner.operation.name != "tile.load_row":
        return None
    source = owner.operands[0]
    return source.arg_number if isinstance(source, ir.BlockArgument) else None


def _swaps_last_two(op: Any) -> bool:
    perm = [int(p) for p in ir.DenseI64ArrayAttr(op.attributes["perm"])]
    n = len(perm)
    return n >= 2 and perm == list(range(n - 2)) + [n - 1, n - 2]


def _rhs(value: Any, args: list[Any], result_batch: tuple) -> Optional[tuple[int, bool, bool]]:
    """(argument, transpose_b, broadcast_b) of B, or None."""
    owner = value.owner.operation
    if owner.name == "tile.load_row":
        k = _argument(value)
        if k is None:
            return None
        batch = tensor_info(args[k].type).shape[:-2]
        return (k, False, False) if batch == result_batch or batch == () else None
    if owner.name == "tile.transpose" and _swaps_last_two(owner):
        inner = _argument(owner.operands[0])
        if inner is not None and tensor_info(args[inner].type).shape[:-2] in (result_batch, ()):
            return inner, True, not tensor_info(args[inner].type).shape[:-2] and \
                bool(result_batch)
        return None
    if owner.name == "tile.broadcast":
        inner = _argument(owner.operands[0])
        if inner is not None and len(tensor_info(args[inner].type).shape) == 2:
            return inner, False, True
    return None


ELEMENTWISE = frozenset(f"tile.{n}" for n in t.ops_of_kind(t.OpKind.ELEMENTWISE))


def _element_wise_after(value: Any) -> bool:
    """Whether everything computed from ``value`` is element-wise up to the stores: the
    epilogue reads the accumulator at the index it stores (no transpose, slice or reshape of
    the product, which would read it elsewhere)."""
    for use in value.uses:
        user = use.owner.operation
        if user.name == "tile.store_row":
            continue
        if user.name not in ELEMENTWISE or not _element_wise_after(user.results[0]):
            return False
    return True


def gemm_operands(fn: Any, grid: tuple) -> Optional[GemmOperands]:
    """The operands of kernel ``fn`` if it takes the ``gemm`` schedule (module docstring)."""
    block = fn.regions[0].blocks[0]
    ops = [op for op in block.operations if op.operation.name != "func.return"]
    matmuls = [op for op in ops if op.operation.name == "tile.matmul"]
    others = {op.operation.name for op in ops} - EPILOGUE_OPS - {"tile.matmul"}
    if len(matmuls) != 1 or others:
        return None
    mm = matmuls[0]
    if not _element_wise_after(mm.results[0]):
        return None
    results = list(fn.type.results)
    if not results:
        return None
    out = tensor_info(results[0]).shape
    if any(tensor_info(r).shape != out for r in results) or ELLIPSIS in out or len(out) < 2:
        return None
    if tuple(str(d) for d in out[:-1]) != tuple(str(g) for g in grid):
        return None
    args = list(block.arguments)
    lhs = _argument(mm.operands[0])
    if lhs is None or tensor_info(args[lhs].type).shape[:-1] != out[:-1]:
        return None
    rhs = _rhs(mm.operands[1], args, out[:-2])
    if rhs is None:
        return None
    k, transpose_b, broadcast = rhs
    broadcast = broadcast or (len(out) > 2 and len(tensor_info(args[k].type).shape) == 2)
    return GemmOperands(lhs, k, transpose_b, broadcast)
