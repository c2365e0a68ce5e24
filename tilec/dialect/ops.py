"""The ``tile`` dialect: tensor-level operations with value semantics.

Every op works on tile tensors (see ``types.py``).  The contract below is what the reference
interpreter implements and what every backend must agree with.

Conventions shared by all ops:
- Element-wise ops take operands of equal shape, or of rank 0 (a scalar broadcasts); any other
  broadcast is an explicit ``tile.broadcast``.  Operands share one element type.
- Axes (``tile.reduce``, ``tile.concat``, ``tile.softmax``) are negative: counted from the last
  dimension, so they mean the same thing for a rank-generic tensor, whose leading ``...``
  dimensions are never touched by an axis.
- Dimension attributes are strings in the :mod:`tilec.dims` syntax (``"2*hidden"``).
- Reductions, matmul and the arithmetic of float16/bfloat16 may be computed in float32 by a
  kernel; the reference computes everything in float64 and rounds at ``tile.cast`` and at the
  function's return (the numerical contract of language.md).
"""

import enum
from collections.abc import Sequence
from typing import Any

from ..mlir import Dialect, Operand, Result, ext, ir, result


class Tile(Dialect, name="tile"):
    """Tensor-level operations of tilec."""


Tensor = ir.RankedTensorType

# ---------------------------------------------------------------------------------------------
# Leaves


class ConstantOp(Tile.Operation, name="constant", traits=[ext.Pure]):
    """A rank-0 tensor holding ``value`` (an f64 FloatAttr or an i64 IntegerAttr)."""

    value: Any
    res: Result[Tensor] = result()


class IotaOp(Tile.Operation, name="iota", traits=[ext.Pure]):
    """An int32 tensor of the result's shape whose element is ``start`` (a dimension
    expression) plus its index along ``axis`` (non-negative).  In a kernel row, ``shape`` gives
    the whole tensor's dimensions and ``grid`` the axis each grid dimension indexes (-1: none),
    as ``axes`` of ``tile.load_row`` does."""

    axis: ir.IntegerAttr
    start: ir.StringAttr
    res: Result[Tensor] = result()


class DimOp(Tile.Operation, name="dim", traits=[ext.Pure]):
    """The value of the dimension expression ``expr`` as a rank-0 int32 tensor."""

    expr: ir.StringAttr
    res: Result[Tensor] = result()


class CheckOp(Tile.Operation, name="check"):
    """A run-time condition on shape symbols: ``lhs REL rhs`` with ``rel`` in ``le``/``eq``,
    or ``bcast``: ``lhs == rhs`` or ``lhs == 1`` (``lhs`` broadcasts to ``rhs`` at run time),
    or ``int``: ``lhs`` is an integer (a slice bound ``d/2``; ``rhs`` is ``0`` and unused),
    or ``i32``: ``lhs`` is an integer that fits int32 (an iota's values, a ``dim``).

    The front end emits it where a slice bound or a reshape's element count cannot be decided
    at compile time, and where two different symbols meet in a broadcast; ``message`` is what
    the user sees, at this op's location, if it fails.
    """

    lhs: ir.StringAttr
    rel: ir.StringAttr
    rhs: ir.StringAttr
    message: ir.StringAttr


# ---------------------------------------------------------------------------------------------
# Element-wise

UNARY_OPS = ("exp", "log", "sqrt", "rsqrt", "abs", "neg", "reciprocal", "sigmoid", "tanh",
             "relu", "silu", "gelu", "gelu_tanh", "sin", "cos", "erf", "round")
BINARY_OPS = ("add", "sub", "mul", "div", "max", "min", "pow")
COMPARE_PREDICATES = ("lt", "le", "gt", "ge", "eq", "ne")


def _unary(name: str) -> type:
    class Op(Tile.Operation, name=name, traits=[ext.Pure]):
        x: Operand[Tensor]
        res: Result[Tensor] = result()

    Op.__name__ = Op.__qualname__ = "".join(p.title() for p in name.split("_")) + "Op"
    Op.__doc__ = f"Element-wise ``{name}``."
    return Op


def _binary(name: str) -> type:
    class Op(Tile.Operation, name=name, traits=[ext.Pure]):
        lhs: Operand[Tensor]
        rhs: Operand[Tensor]
        res: Result[Tensor] = result()

    Op.__name__ = Op.__qualname__ = name.title() + "Op"
    Op.__doc__ = f"Element-wise ``{name}``."
    return Op


UNARY: dict[str, type] = {n: _unary(n) for n in UNARY_OPS}
BINARY: dict[str, type] = {n: _binary(n) for n in BINARY_OPS}


class CmpOp(Tile.Operation, name="cmp", traits=[ext.Pure]):
    """Element-wise comparison ``lhs PREDICATE rhs`` giving an i1 mask."""

    lhs: Operand[Tensor]
    rhs: Operand[Tensor]
    predicate: ir.StringAttr
    res: Result[Tensor] = result()


class SelectOp(Tile.Operation, name="select", traits=[ext.Pure]):
    """``where(cond, a, b)``: element-wise choice by an i1 mask."""

    cond: Operand[Tensor]
    lhs: Operand[Tensor]
    rhs: Operand[Tensor]
    res: Result[Tensor] = result()


class CastOp(Tile.Operation, name="cast", traits=[ext.Pure]):
    """Conversion to the result's element type (round to nearest even; float -> int32
    truncates toward zero)."""

    x: Operand[Tensor]
    res: Result[Tensor] = result()


# ---------------------------------------------------------------------------------------------
# Data movement


class BroadcastOp(Tile.Operation, name="broadcast", traits=[ext.Pure]):
    """NumPy broadcast of ``x`` to the result's shape (trailing dimensions aligned).  A symbol
    of ``x`` may stand where the result has another symbol: a run-time broadcast, which the
    function's ``bcast`` check makes equal to it or 1 (``tile-shape-template`` gives the case 1
    its own variant, where the broadcast is static)."""

    x: Operand[Tensor]
    res: Result[Tensor] = result()


class SliceOp(Tile.Operation, name="slice", traits=[ext.Pure]):
    """``x[starts[i]:ends[i]]`` on each dimension after the ``...`` group (unit stride)."""

    x: Operand[Tensor]
    starts: ir.ArrayAttr
    ends: ir.ArrayAttr
    res: Result[Tensor] = result()


class ConcatOp(Tile.Operation, name="concat", traits=[ext.Pure]):
    """Concatenation of ``lhs`` and ``rhs`` along ``axis`` (negative).  Binary because IRDL
    binds every element of a variadic operand to one type; ``concat(a, b, c)`` is a chain."""

    lhs: Operand[Tensor]
    rhs: Operand[Tensor]
    axis: ir.IntegerAttr
    res: Result[Tensor] = result()


class ReshapeOp(Tile.Operation, name="reshape", traits=[ext.Pure]):
    """Row-major reshape to the result's shape (equal element counts)."""

    x: Operand[Tensor]
    res: Result[Tensor] = result()


class TransposeOp(Tile.Operation, name="transpose", traits=[ext.Pure]):
    """``numpy.transpose(x, perm)``."""

    x: Operand[Tensor]
    perm: Any  # DenseI64ArrayAttr (no IRDL name in the bindings)
    res: Result[Tensor] = result()


# ---------------------------------------------------------------------------------------------
# Reductions and contractions

REDUCE_KINDS = ("sum", "mean", "max", "min", "var")
ARG_REDUCE_KINDS = ("max", "min")


class ReduceOp(Tile.Operation, name="reduce", traits=[ext.Pure]):
    """Reduction ``kind`` over ``axes`` (negative, sorted); ``var`` is the population
    variance; ``keepdims`` keeps reduced dimensions as 1."""

    x: Operand[Tensor]
    kind: ir.StringAttr
    axes: Any  # DenseI64ArrayAttr
    keepdims: Any  # BoolAttr
    res: Result[Tensor] = result()


class ArgReduceOp(Tile.Operation, name="arg_reduce", traits=[ext.Pure]):
    """``argmax`` (``kind`` = max) or ``argmin`` of ``x`` along ``axis`` (negative): the int32
    index of the first greatest (least) element; a NaN counts as greater (less) than every
    number, as in ``torch.argmax``.  ``tile-expand`` rewrites it into reductions before
    fusion, so no backend lowers it."""

    x: Operand[Tensor]
    kind: ir.StringAttr
    axis: ir.IntegerAttr
    keepdims: Any  # BoolAttr
    res: Result[Tensor] = result()


class SoftmaxOp(Tile.Operation, name="softmax", traits=[ext.Pure]):
    """Numerically stable softmax along ``axis`` (negative)."""

    x: Operand[Tensor]
    axis: ir.IntegerAttr
    res: Result[Tensor] = result()


class MatmulOp(Tile.Operation, name="matmul", traits=[ext.Pure]):
    """Matrix product over the last two dimensions, batch dimensions already broadcast to
    the result's (the front end inserts ``tile.broadcast``).  In a kernel row, ``lhs`` may be
    one row ``[K]`` of the M dimension: ``[K] @ [K, N] -> [N]``."""

    lhs: Operand[Tensor]
    rhs: Operand[Tensor]
    res: Result[Tensor] = result()


# ---------------------------------------------------------------------------------------------
# Op facts: what the passes and backends ask of an op, stated once.  Every list of ops by kind
# (fusion's, the tiler's, each backend's) is derived from these.


class OpKind(enum.Enum):
    ELEMENTWISE = "element-wise"   # each result element from the operands' elements at its index
    MOVEMENT = "movement"          # moves, repeats or makes elements (constant), no arithmetic
    REDUCTION = "reduction"        # combines elements along axes (softmax normalises along one)
    MATMUL = "matmul"              # a contraction over the last two dimensions


OP_KINDS: dict[str, OpKind] = {
    **{n: OpKind.ELEMENTWISE for n in (*UNARY_OPS, *BINARY_OPS, "cmp", "select", "cast")},
    **{n: OpKind.MOVEMENT for n in ("constant", "iota", "dim", "broadcast", "slice", "concat",
                                    "reshape", "transpose")},
    "reduce": OpKind.REDUCTION,
    "arg_reduce": OpKind.REDUCTION,
    "softmax": OpKind.REDUCTION,
    "matmul": OpKind.MATMUL,
}
"""The kind of each tensor-level op, by name without ``tile.``."""

TRANSCENDENTAL_OPS = frozenset({"exp", "log", "sigmoid", "tanh", "silu", "gelu", "gelu_tanh",
                                "sin", "cos", "pow", "erf"})
"""The element-wise ops that cost a polynomial or a library call per element: a value of one
that is read twice is worth keeping rather than computing twice."""


def ops_of_kind(kind: OpKind) -> frozenset[str]:
    """The names (without ``tile.``) of the ops of ``kind``."""
    return frozenset(n for n, k in OP_KINDS.items() if k is kind)


ELEMENTWISE_OPS = ops_of_kind(OpKind.ELEMENTWISE)


# ---------------------------------------------------------------------------------------------
# Structure (made by tile-fuse)


TYPE_RUNS = 8
"""IRDL binds every element of one variadic operand (or result) to a single type, so the
operands and results of ``tile.fused`` and the operands of ``tile.yield`` are each declared as
this many variadic segments, one per run of equal consecutive types (``operandSegmentSizes``).
Readers see flat lists (``op.operands``, ``op.results``); :func:`fused` and :func:`yield_`
build the segments."""


def _runs(prefix: str, kind: Any) -> dict[str, Any]:
    return {f"{prefix}{i}": Sequence[kind[Tensor]] for i in range(TYPE_RUNS)}


class FusedOp(Tile.Operation, name="fused"):
    """A group of ops that becomes one kernel.  The region's block arguments are the group's
    inputs (one per operand, same types); ``tile.yield`` gives its results."""

    __annotations__ = {**_runs("in", Operand), **_runs("out", Result), "body": ext.Region}


class YieldOp(Tile.Operation, name="yield", traits=[ir.IsTerminatorTrait]):
    """Terminator of ``tile.fused``."""

    __annotations__ = _runs("values", Operand)


def type_runs(types: Sequence[ir.Type]) -> list[int]:
    """The ``TYPE_RUNS`` segment sizes of a list of types: the lengths of its runs of equal
    consecutive types, then zeros; ValueError when there are more runs than segments."""
    runs: list[int] = []
    for i, t in enumerate(types):
        if i and t == types[i - 1]:
            runs[-1] += 1
        else:
            runs.append(1)
    if len(runs) > TYPE_RUNS:
        raise ValueError(f"{len(runs)} runs of types; tile.fused has {TYPE_RUNS} segments")
    return runs + [0] * (TYPE_RUNS - len(runs))


def _segments(types: Sequence[ir.Type]) -> ir.Attribute:
    return ir.DenseI32ArrayAttr.get(type_runs(types))


def fused(inputs: Sequence[ir.Value], result_types: Sequence[ir.Type],
          loc: ir.Location) -> ir.Operation:
    """A ``tile.fused`` op at the current insertion point, its region still empty."""
    return ir.Operation.create(
        FusedOp.OPERATION_NAME, results=list(result_types), operands=list(inputs), regions=1,
        attributes={"operandSegmentSizes": _segments([x.type for x in inputs]),
                    "resultSegmentSizes": _segments(result_types)}, loc=loc)


def yield_(values: Sequence[ir.Value], loc: ir.Location) -> ir.Operation:
    """A ``tile.yield`` of ``values`` at the current insertion point."""
    return ir.Operation.create(
        YieldOp.OPERATION_NAME, operands=list(values),
        attributes={"operandSegmentSizes": _segments([v.type for v in values])}, loc=loc)


def i64(value: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)


def str_array(items) -> ir.ArrayAttr:
    return ir.ArrayAttr.get([ir.StringAttr.get(str(x)) for x in items])


class HintOp(Tile.Operation, name="hint"):
    """``#pragma cache_hint(name, level)`` attached to the value it names; the
    ``tile-cache-hint`` pass turns it into an attribute on that value and erases it."""

    x: Operand[Tensor]
    name: ir.StringAttr
    level: ir.StringAttr


# ---------------------------------------------------------------------------------------------
# Kernel level (made by tile-kernel): a kernel function's body describes ONE row of its grid.


class LoadRowOp(Tile.Operation, name="load_row", traits=[ext.Pure]):
    """Copy-in: the row of global tensor ``x`` at the current grid point.  ``axes[j]`` is the
    axis of ``x`` indexed by grid dimension j (index 0 when that axis has extent 1), or -1 when
    ``x`` does not vary along it; the result keeps the other axes in order.  A float32 ``x``
    may give a float16/bfloat16 row: the value another kernel stored wider, not rounded."""

    x: Operand[Tensor]
    axes: Any  # DenseI64ArrayAttr
    res: Result[Tensor] = result()


class StoreRowOp(Tile.Operation, name="store_row", traits=[ext.Pure]):
    """Copy-out: the global result tensor whose row at the current grid point (``axes`` as in
    ``tile.load_row``, never -1) is ``row``; over the whole grid every element is written.
    A float16/bfloat16 row may be stored to a float32 tensor (for another kernel: kept wider,
    not rounded to the row's type)."""

    row: Operand[Tensor]
    axes: Any  # DenseI64ArrayAttr
    res: Result[Tensor] = result()
