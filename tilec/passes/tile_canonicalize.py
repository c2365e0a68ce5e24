"""tile-canonicalize: fold the no-ops of tile IR, then upstream ``canonicalize`` and ``cse``.

In and out: tensor-level tile IR.  Folded, each only where the result is bit-for-bit the
operand under the reference semantics (values held in float64, rounded at ``tile.cast`` and at
``return``) and the result type equals the operand's:

- ``x * 1``, ``1 * x``, ``x / 1`` (a rank-0 ``tile.constant`` 1);
- ``x + 0``, ``0 + x``, ``x - 0`` on int32; on floats only ``x + -0.0``, ``-0.0 + x`` and
  ``x - 0.0``, because ``-0.0 + 0.0`` is ``+0.0``;
- ``tile.cast`` to the operand's own type when the operand already holds values of that type
  (an argument, a cast, or data movement / sign / selection of such values): elsewhere the
  cast is a rounding point of the float64 evaluation and stays;
- ``tile.slice`` of the whole of every dimension, ``tile.reshape`` and ``tile.broadcast`` to the
  operand's own shape, and ``-(-x)``.

Then ``canonicalize`` (which erases what became dead) and ``cse``.
"""
from __future__ import annotations

import math
from typing import Callable

from ..dialect import ops as t
from ..dialect import tensor_info
from ..dims import parse_dim
from ..mlir import func, ir, passmanager, rewrite
from ..pipeline import PassContext, register

Pattern = Callable[[ir.OpView, rewrite.PatternRewriter], bool]

# ops whose results are exact copies, negations or selections of their tensor operands' values
_VALUE_PRESERVING = frozenset(f"tile.{n}" for n in (
    "slice", "reshape", "broadcast", "transpose", "concat", "neg", "abs", "relu", "max", "min",
    "select"))


@register("tile-canonicalize", "fold no-op tile ops, then canonicalize and cse")
def canonicalize(module: ir.Module, pc: PassContext) -> None:
    """Fold exact no-ops (module docstring) to a fixed point, then ``canonicalize,cse``."""
    patterns = rewrite.RewritePatternSet()
    for op_class, pattern in _PATTERNS:
        patterns.add(op_class, pattern)
    rewrite.apply_patterns_and_fold_greedily(module, patterns.freeze())
    passmanager.PassManager.parse("builtin.module(canonicalize,cse)").run(module.operation)


def _producer(value: ir.Value) -> ir.Operation | None:
    return value.owner.operation if isinstance(value, ir.OpResult) else None


def _scalar_constant(value: ir.Value) -> int | float | None:
    """The value of a rank-0 ``tile.constant``, else None."""
    op = _producer(value)
    if op is None or op.name != "tile.constant" or ir.RankedTensorType(value.type).rank != 0:
        return None
    return op.attributes["value"].value


def _is_int(value: ir.Value) -> bool:
    return tensor_info(value.type).dtype in ("int32", "bool")


def _is_one(value: ir.Value) -> bool:
    return _scalar_constant(value) == 1


def _adds_nothing(value: ir.Value, zero: float) -> bool:
    """A constant zero whose addition (``zero`` = -0.0) or subtraction (``zero`` = 0.0) leaves
    every value unchanged: any zero on int32; on floats only that signed zero."""
    c = _scalar_constant(value)
    if c != 0:
        return False
    return _is_int(value) or math.copysign(1.0, c) == math.copysign(1.0, zero)


def _replace_by(op: ir.OpView, rewriter: rewrite.PatternRewriter, x: ir.Value) -> bool:
    """Replace ``op`` by ``x`` when the types agree; the pattern's return value."""
    if x.type != op.results[0].type:
        return True
    rewriter.replace_op(op, [x])
    return False


def _mul(op: ir.OpView, rewriter: rewrite.PatternRewriter) -> bool:
    lhs, rhs = op.operands
    if _is_one(rhs):
        return _replace_by(op, rewriter, lhs)
    if _is_one(lhs):
        return _replace_by(op, rewriter, rhs)
    return True


def _div(op: ir.OpView, rewriter: rewrite.PatternRewriter) -> bool:
    lhs, rhs = op.operands
    return _replace_by(op, rewriter, lhs) if _is_one(rhs) else True


def _add(op: ir.OpView, rewriter: rewrite.PatternRewriter) -> bool:
    lhs, rhs = op.operands
    if _adds_nothing(rhs, -0.0):
        return _replace_by(op, rewriter, lhs)
    if _adds_nothing(lhs, -0.0):
        return _replace_by(op, rewriter, rhs)
    return True


def _sub(op: ir.OpView, rewriter: rewrite.PatternRewriter) -> bool:
    lhs, rhs = op.operands
    return _replace_by(op, rewriter, lhs) if _adds_nothing(rhs, 0.0) else True


def is_exact_in_own_type(value: ir.Value) -> bool:
    """Whether every element of ``value`` is representable in its element type, so that a cast
    to that type changes nothing."""
    if _is_int(value):
        return True
    if isinstance(value, ir.BlockArgument):
        owner = value.owner.owner
        if isinstance(owner, func.FuncOp):
            return True
        return owner.name == "tile.fused" and is_exact_in_own_type(
            owner.operands[value.arg_number])
    op = _producer(value)
    if op.name == "tile.cast":
        return True
    return op.name in _VALUE_PRESERVING and all(is_exact_in_own_type(x) for x in op.operands)


def _cast(op: ir.OpView, rewriter: rewrite.PatternRewriter) -> bool:
    x = op.operands[0]
    return _replace_by(op, rewriter, x) if is_exact_in_own_type(x) else True


def _slice(op: ir.OpView, rewriter: rewrite.PatternRewriter) -> bool:
    """From 0 and to the operand's own shape: every dimension whole."""
    from_zero = all(parse_dim(ir.StringAttr(a).value) == 0 for a in op.attributes["starts"])
    return _replace_by(op, rewriter, op.operands[0]) if from_zero else True


def _same_shape(op: ir.OpView, rewriter: rewrite.PatternRewriter) -> bool:
    return _replace_by(op, rewriter, op.operands[0])


def _double_neg(op: ir.OpView, rewriter: rewrite.PatternRewriter) -> bool:
    inner = _producer(op.operands[0])
    if inner is None or inner.name != "tile.neg":
        return True
    return _replace_by(op, rewriter, inner.operands[0])


_PATTERNS: list[tuple[type, Pattern]] = [
    (t.BINARY["mul"], _mul),
    (t.BINARY["div"], _div),
    (t.BINARY["add"], _add),
    (t.BINARY["sub"], _sub),
    (t.CastOp, _cast),
    (t.SliceOp, _slice),
    (t.ReshapeOp, _same_shape),
    (t.BroadcastOp, _same_shape),
    (t.UNARY["neg"], _double_neg),
]
