"""tile-expand: write the built-ins that have no kernel lowering of their own in tile ops that do.

In and out: tensor-level tile IR.  ``tile.arg_reduce`` (``argmax``/``argmin``) becomes, with
``x`` cast to float32, ``m`` its max (min) along the axis and ``i`` the index along it as
float32:

    key = where(x != x, i - 2**24, where(x == m, i, inf))    # a NaN before every number
    r   = reduce_min(key)                                     # the first NaN, else first m
    out = cast(where(r < 0, r + 2**24, r), int32)

Indices are exact in float32 up to 2**24 elements along the axis; a longer axis is an error
(at compile time, or a ``tile.check`` at run time for a symbolic extent).
Every new op takes the location of the ``tile.arg_reduce`` it replaces.
"""
from __future__ import annotations

from typing import Any

from ..diagnostics import TilecError
from ..dialect import tensor_info
from ..dialect import ops as t
from ..dialect.locations import span_of
from ..dialect.types import TensorInfo
from ..dims import Dim
from ..mlir import ir
from ..pipeline import PassContext, register

EXACT = 2**24
"""Every integer up to this one is exact in float32."""


@register("tile-expand", "write argmax/argmin as reductions, iota and where")
def expand(module: ir.Module, pc: PassContext) -> None:
    """Replace every ``tile.arg_reduce`` (module docstring)."""
    targets: list[Any] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "tile.arg_reduce":
            targets.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for op in targets:
        with ir.InsertionPoint(op), op.location:
            out = _arg_reduce(op)
        op.results[0].replace_all_uses_with(out)
        op.erase()


def _make(name: str, operands: list[Any], info: TensorInfo, **attrs: ir.Attribute) -> Any:
    return ir.Operation.create(f"tile.{name}", results=[info.to_mlir()], operands=operands,
                               attributes=attrs).result


def _scalar(value: float) -> Any:
    f64 = ir.FloatAttr.get(ir.F64Type.get(), value)
    return _make("constant", [], TensorInfo("float32", ()), value=f64)


def _arg_reduce(op: Any) -> Any:
    x = op.operands[0]
    info = tensor_info(x.type)
    kind = ir.StringAttr(op.attributes["kind"]).value
    axis = int(ir.IntegerAttr(op.attributes["axis"]).value)
    keep = op.attributes["keepdims"]
    extent = info.dims[axis]
    too_long = f"arg{kind} along an axis of {extent} elements: at most {EXACT}"
    if extent.value is not None and extent.value > EXACT:
        raise TilecError(too_long, span_of(op.location))
    if extent.value is None:
        t.CheckOp(ir.StringAttr.get(str(extent)), ir.StringAttr.get("le"),
                  ir.StringAttr.get(str(EXACT)), ir.StringAttr.get(too_long))
    if info.dtype != "float32":
        # compared in float32 with its max: a max kept in a narrower buffer between two
        # kernels would equal no element computed in float32 registers
        info = info.with_dtype("float32")
        x = _make("cast", [x], info)
    axes = ir.DenseI64ArrayAttr.get([axis])
    kept = info.with_dims(tuple(Dim.const(1) if i - len(info.dims) == axis else d
                                for i, d in enumerate(info.dims)))
    m = _make("reduce", [x], kept, kind=ir.StringAttr.get(kind), axes=axes,
              keepdims=ir.BoolAttr.get(True))
    m = _make("broadcast", [m], info)
    hit = _make("cmp", [x, m], info.with_dtype("bool"), predicate=ir.StringAttr.get("eq"))
    nan = _make("cmp", [x, x], info.with_dtype("bool"), predicate=ir.StringAttr.get("ne"))
    index = _index(info, axis)
    big = _scalar(float(EXACT))
    first = _make("select", [hit, index, _scalar(float("inf"))], index_info(info))
    key = _make("select", [nan, _make("sub", [index, big], index_info(info)), first],
                index_info(info))
    res = tensor_info(op.results[0].type)
    r = _make("reduce", [key], res.with_dtype("float32"), kind=ir.StringAttr.get("min"),
              axes=axes, keepdims=keep)
    negative = _make("cmp", [r, _scalar(0.0)], res.with_dtype("bool"),
                     predicate=ir.StringAttr.get("lt"))
    r = _make("select", [negative, _make("add", [r, big], res.with_dtype("float32")), r],
              res.with_dtype("float32"))
    return _make("cast", [r], res)


def index_info(info: TensorInfo) -> TensorInfo:
    return info.with_dtype("float32")


def _index(info: TensorInfo, axis: int) -> Any:
    """The index along negative ``axis`` as float32, broadcast to the shape of ``info``."""
    trailing = -axis - 1
    column = TensorInfo("int32", (info.dims[axis],) + (Dim.const(1),) * trailing)
    iota = _make("iota", [], column, axis=t.i64(0), start=ir.StringAttr.get("0"))
    as_float = _make("cast", [iota], column.with_dtype("float32"))
    return _make("broadcast", [as_float], index_info(info))
