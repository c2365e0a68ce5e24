"""irgen: typed value graphs (sema) -> tile IR in a ``builtin.module``.

One ``func.func`` per ``.tile`` function, one tile op per sema :class:`Value`, each built under
the ``FileLineColLoc`` of its source.  Function metadata follows the conventions documented in
:mod:`tilec.dialect`.
"""
from __future__ import annotations

from ..diagnostics import Span
from ..dialect import (ARG_DEFAULT_ATTR, ARG_NAME_ATTR, ARG_SCALAR_ATTR, BACKWARD_ATTR,
                       BINDING_ATTR, BUILTIN_ATTR, DTYPE_TEMPLATE_ATTR, LEAD_ATTR, STRETCH_ATTR,
                       SYMBOLS_ATTR, TEMPLATES_ATTR, VARIANT_OF_ATTR)
from ..dialect import ops as t
from ..mlir import func, ir
from .sema import TypedFunction, Value



def loc(span: Span) -> ir.Location:
    """The one place where source spans become MLIR locations: a file location, or for code
    inlined from a call a call-site location whose frames are the calls, innermost first."""
    here = ir.Location.file(span.file, span.line, span.col)
    if not span.inlined_at:
        return here
    return ir.Location.callsite(here, [ir.Location.file(s.file, s.line, s.col)
                                       for s in span.inlined_at])


def _attr(value) -> ir.Attribute:
    if isinstance(value, bool):
        return ir.BoolAttr.get(value)
    if isinstance(value, int):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)
    if isinstance(value, float):
        return ir.FloatAttr.get(ir.F64Type.get(), value)
    raise TypeError(value)


def _op_attrs(v: Value) -> dict[str, ir.Attribute]:
    a = v.attrs
    if v.op == "constant":
        return {"value": _attr(a["value"])}
    if v.op == "cmp":
        return {"predicate": ir.StringAttr.get(a["predicate"])}
    if v.op == "slice":
        return {"starts": t.str_array(a["starts"]), "ends": t.str_array(a["ends"])}
    if v.op in ("concat", "softmax"):
        return {"axis": t.i64(a["axis"])}
    if v.op == "transpose":
        return {"perm": ir.DenseI64ArrayAttr.get(a["perm"])}
    if v.op == "iota":
        return {"axis": t.i64(a["axis"]), "start": ir.StringAttr.get(str(a["start"]))}
    if v.op == "dim":
        return {"expr": ir.StringAttr.get(str(a["expr"]))}
    if v.op == "arg_reduce":
        return {"kind": ir.StringAttr.get(a["kind"]), "axis": t.i64(a["axis"]),
                "keepdims": ir.BoolAttr.get(a["keepdims"])}
    if v.op == "reduce":
        return {"kind": ir.StringAttr.get(a["kind"]),
                "axes": ir.DenseI64ArrayAttr.get(a["axes"]),
                "keepdims": ir.BoolAttr.get(a["keepdims"])}
    return {}


_SIMPLE = {"cast": t.CastOp, "broadcast": t.BroadcastOp, "reshape": t.ReshapeOp,
           "select": t.SelectOp, "matmul": t.MatmulOp, "concat": t.ConcatOp, "cmp": t.CmpOp, "slice": t.SliceOp,
           "transpose": t.TransposeOp, "reduce": t.ReduceOp, "softmax": t.SoftmaxOp,
           "constant": t.ConstantOp, "iota": t.IotaOp, "dim": t.DimOp,
           "arg_reduce": t.ArgReduceOp, **t.UNARY, **t.BINARY}


def _build(v: Value, operands: list[ir.Value]) -> ir.Value:
    res = v.type.to_mlir()
    attrs = _op_attrs(v)
    if "builtin" in v.attrs:
        attrs[BUILTIN_ATTR] = ir.StringAttr.get(v.attrs["builtin"])
    with loc(v.span):
        # Created generically: the dialects.ext builders take a falsy attribute (``false``, an
        # empty array) for a missing one and refuse it.
        return ir.Operation.create(_SIMPLE[v.op].OPERATION_NAME, results=[res],
                                   operands=operands, attributes=attrs).result


def build_function(fn: TypedFunction) -> func.FuncOp:
    arg_types = [p.type.to_mlir() for p in fn.params]
    res_types = [r.to_mlir() for r in fn.result_types]
    with loc(fn.span):
        f = func.FuncOp(fn.name, ir.FunctionType.get(arg_types, res_types))
    f.attributes[SYMBOLS_ATTR] = t.str_array(fn.symbols)
    if fn.rank_generic:
        f.attributes[LEAD_ATTR] = t.str_array(fn.lead)
    if fn.backward is not None:
        f.attributes[BACKWARD_ATTR] = ir.StringAttr.get(fn.backward)
    if fn.dtype_template:
        f.attributes[DTYPE_TEMPLATE_ATTR] = ir.DictAttr.get(
            {k: ir.StringAttr.get(v) for k, v in fn.dtype_template.items()})
    if fn.variant_of is not None:
        name, binding = fn.variant_of
        f.attributes[VARIANT_OF_ATTR] = ir.StringAttr.get(name)
        f.attributes[BINDING_ATTR] = ir.DictAttr.get({s: t.i64(v) for s, v in binding.items()})
    if fn.templates:
        f.attributes[TEMPLATES_ATTR] = ir.DictAttr.get(
            {k: ir.DenseI64ArrayAttr.get(v) for k, v in fn.templates.items()})
    if fn.stretch:
        f.attributes[STRETCH_ATTR] = t.str_array(fn.stretch)
    arg_attrs = []
    for p in fn.params:
        d = {ARG_NAME_ATTR: ir.StringAttr.get(p.name)}
        if p.scalar:
            d[ARG_SCALAR_ATTR] = ir.UnitAttr.get()
            if p.default is not None:
                d[ARG_DEFAULT_ATTR] = _attr(p.default)
        arg_attrs.append(ir.DictAttr.get(d))
    f.arg_attrs = ir.ArrayAttr.get(arg_attrs)
    with loc(fn.span):
        block = f.add_entry_block()
    values: dict[int, ir.Value] = {}
    with ir.InsertionPoint(block):
        for c in fn.checks:
            with loc(c.span):
                t.CheckOp(ir.StringAttr.get(str(c.lhs)), ir.StringAttr.get(c.rel),
                          ir.StringAttr.get(str(c.rhs)), ir.StringAttr.get(c.message))
        for v in fn.values:
            if v.op == "param":
                values[id(v)] = block.arguments[v.index]
                continue
            values[id(v)] = _build(v, [values[id(o)] for o in v.operands])
        for h in fn.hints:
            with loc(h.span):
                t.HintOp(values[id(h.value)], ir.StringAttr.get(h.name),
                         ir.StringAttr.get(h.level))
        with loc(fn.span):
            func.ReturnOp([values[id(r)] for r in fn.results])
    return f


def build_module(functions: list[TypedFunction], file: str) -> ir.Module:
    """Must be called inside a context that has the tile dialect loaded."""
    with ir.Location.file(file, 1, 1):
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            for fn in functions:
                build_function(fn)
    return module
