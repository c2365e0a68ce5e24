"""Which kernels take the ``attention`` schedule, and the scores function they call.

In: a kernel outlined from a group that tile-attention marked (its ``tile.fused`` record holds
``tile.attention``), rewritten to rows: ``S = q_row @ transpose(k)``, an element-wise chain, a
softmax, casts, ``@ v``, casts, the store.  Out, on a target whose description has
``attention`` (the CPU): an :class:`AttentionTile` (which arguments q, k and v are, the causal
diagonal, the block sizes, the name of the scores function) and that function,
``NAME__scores``: a copy of the kernel that stores the softmax's operand ``[.., s, t]``
(float32) and takes the ``gemm`` schedule, so that the backend builds its epilogue: the chain
over one block of scores.  The runtime (``cpu_attention.c``) computes the raw scores, calls
that epilogue on them in place, and does the online softmax and the product with v itself.
A kernel whose operands it cannot read (an ``...`` shape, q not laid out as the output's rows,
a key or value of another batch shape than a broadcast of the output's) keeps the ``rows``
schedule: one query row at a time, correct, slow.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..dialect import FUSED_ATTR
from ..dialect.types import TensorInfo, tensor_info
from ..dims import ELLIPSIS
from ..mlir import func, ir

ATTENTION = "attention"
DTYPES = ("float32", "float16", "bfloat16")
BLOCK_M, BLOCK_N = 64, 128     # the runtime's blocks (cpu_attention.c: BM, BN)
SCORES = "__scores"


@dataclass(frozen=True)
class AttentionTile:
    """The ``attention`` schedule of a kernel (module docstring)."""

    q: int
    k: int
    v: int
    causal: bool
    diagonal: str            # a dimension expression: key j > query i + diagonal is masked
    block_m: int
    block_n: int
    scores: str              # the scores function

    def attributes(self) -> ir.DictAttr:
        i64 = ir.IntegerType.get_signless(64)
        ints = {k: ir.IntegerAttr.get(i64, getattr(self, k))
                for k in ("q", "k", "v", "block_m", "block_n")}
        return ir.DictAttr.get({**ints, "causal": ir.BoolAttr.get(self.causal),
                                "diagonal": ir.StringAttr.get(self.diagonal),
                                "scores": ir.StringAttr.get(self.scores)})

    @staticmethod
    def of(attr: Any) -> "AttentionTile":
        d = ir.DictAttr(attr)
        n = {k: ir.IntegerAttr(d[k]).value for k in ("q", "k", "v", "block_m", "block_n")}
        return AttentionTile(n["q"], n["k"], n["v"], ir.BoolAttr(d["causal"]).value,
                             ir.StringAttr(d["diagonal"]).value, n["block_m"], n["block_n"],
                             ir.StringAttr(d["scores"]).value)


def marked(fn: Any) -> Optional[ir.DictAttr]:
    """tile-attention's description of the group kernel ``fn`` was outlined from."""
    if FUSED_ATTR not in fn.attributes:
        return None
    fused = ir.DictAttr(fn.attributes[FUSED_ATTR])
    return ir.DictAttr(fused["tile.attention"]) if "tile.attention" in fused else None


def _owner(value: Any) -> Optional[Any]:
    return None if isinstance(value, ir.BlockArgument) else value.owner.operation


def _argument(value: Any, through: tuple[str, ...] = ()) -> Optional[int]:
    """The kernel argument whose row ``value`` is, through the ops named ``through``."""
    op = _owner(value)
    while op is not None and op.name in through:
        op = _owner(op.operands[0])
    if op is None or op.name != "tile.load_row" or \
            not isinstance(op.operands[0], ir.BlockArgument):
        return None
    return op.operands[0].arg_number


def attention_tile(fn: Any, grid: tuple, types: frozenset[str] = frozenset()
                   ) -> Optional[AttentionTile]:
    """The schedule of kernel ``fn`` (rows form) if the runtime can run it, else None; where
    the target names ``types``, q, k and v must all have one of them (its matrix unit
    multiplies operands of one type)."""
    description = marked(fn)
    if description is None:
        return None
    ops = [op.operation for op in fn.regions[0].blocks[0].operations]
    matmuls = [op for op in ops if op.name == "tile.matmul"]
    softmax = [op for op in ops if op.name == "tile.softmax"]
    results = list(fn.type.results)
    if len(matmuls) != 2 or len(softmax) != 1 or len(results) != 1:
        return None
    out = tensor_info(results[0])
    args = [tensor_info(a.type) for a in fn.regions[0].blocks[0].arguments]
    q = _argument(matmuls[0].operands[0])
    k = _argument(matmuls[0].operands[1], ("tile.transpose", "tile.broadcast"))
    v = _argument(matmuls[1].operands[1], ("tile.broadcast",))
    if None in (q, k, v) or ELLIPSIS in out.shape or out.dtype not in DTYPES:
        return None
    if any(args[i].dtype not in DTYPES or ELLIPSIS in args[i].shape for i in (q, k, v)):
        return None
    if types and (len({args[i].dtype for i in (q, k, v)}) != 1 or args[q].dtype not in types):
        return None
    if args[q].shape[:-1] != out.shape[:-1] or \
            tuple(str(d) for d in out.shape[:-1]) != tuple(str(g) for g in grid):
        return None
    if not all(_batch_broadcasts(args[i].shape[:-2], out.shape[:-2]) for i in (k, v)):
        return None
    if not _casts_after(matmuls[1]):
        return None
    name = ir.StringAttr(fn.attributes["sym_name"]).value
    causal = ir.BoolAttr(description["causal"]).value
    diagonal = ir.StringAttr(description["diagonal"]).value if causal else "0"
    return AttentionTile(q, k, v, causal, diagonal, BLOCK_M, BLOCK_N, name + SCORES)


def _batch_broadcasts(batch: tuple, out: tuple) -> bool:
    """Whether a key's batch shape broadcasts to the output's (the same rank, each axis
    equal or 1)."""
    return len(batch) == len(out) and all(str(b) == str(o) or str(b) == "1"
                                          for b, o in zip(batch, out))


def _casts_after(matmul: Any) -> bool:
    """Whether only casts stand between ``matmul`` and the store."""
    value = matmul.results[0]
    while True:
        users = [u.owner.operation for u in value.uses]
        if len(users) != 1:
            return False
        if users[0].name == "tile.store_row":
            return True
        if users[0].name != "tile.cast":
            return False
        value = users[0].results[0]


def scores_function(fn: Any, tile: AttentionTile) -> Any:
    """``NAME__scores``: a copy of kernel ``fn`` that stores the softmax's operand (a row of
    t float32 scores per query row) as its one result, ``[.., s, t]``."""
    clone = fn.operation.clone(ir.InsertionPoint.after(fn))
    clone.attributes["sym_name"] = ir.StringAttr.get(tile.scores)
    block = clone.regions[0].blocks[0]
    ops = [op.operation for op in block.operations]
    softmax = next(op for op in ops if op.name == "tile.softmax")
    store = next(op for op in ops if op.name == "tile.store_row")
    scores = softmax.operands[0]
    out = tensor_info(fn.type.results[0])
    whole = TensorInfo("float32", out.shape[:-1] + (tensor_info(scores.type).shape[-1],))
    with clone.location, ir.InsertionPoint(ops[-1]):
        kept = ir.Operation.create("tile.store_row", results=[whole.to_mlir()],
                                   operands=[scores], attributes=dict(store.attributes))
        func.ReturnOp([kept.result])
    ops[-1].erase()
    for op in reversed(ops[ops.index(softmax):-1]):
        op.erase()
    for op in reversed(list(block.operations)):
        op = op.operation
        if op.results and not any(list(r.uses) for r in op.results):
            op.erase()
    inputs = [a.type for a in block.arguments]
    clone.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get(inputs, [whole.to_mlir()]))
    return clone
