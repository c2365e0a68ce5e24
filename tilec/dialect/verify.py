"""The semantic verifier of tile IR: the contract of ``ops.py`` that IRDL cannot state.

In: a module of tensor-level tile IR.  Out: nothing, or a :class:`TilecError` located at the
first op that breaks the contract (shapes compared as :class:`tilec.dims.Dim` polynomials).
Run after every pass by ``--verify-each`` (the default of ``tilec-opt``); a failure after a
pass is a bug of that pass, a failure on ``tilec-opt``'s input a mistake in the input.
"""
from __future__ import annotations

from typing import Callable

from ..diagnostics import TilecError
from ..dims import Dim, Shape, parse_dim, shape_str
from ..mlir import func, ir
from . import ops
from .locations import span_of
from .types import TensorInfo, tensor_info

Infos = list[TensorInfo]
Rule = Callable[[ir.Operation, Infos, TensorInfo], "str | None"]


def verify_module(module: ir.Module) -> None:
    """Raise TilecError at the first op of ``module`` that breaks the tile op contract."""
    try:
        module.operation.verify()
    except ir.MLIRError as e:  # what MLIR's own verifiers and IRDL's constraints refuse
        first = e.error_diagnostics[0]
        location = ir.Location.from_attr(first.location.attr, module.context)  # typed
        raise TilecError(first.message, span_of(location)) from None

    failures: list[TilecError] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        problem = _problem(op)
        if problem is None:
            return ir.WalkResult.ADVANCE
        failures.append(TilecError(f"'{op.name}' {problem}", span_of(op.location)))
        return ir.WalkResult.INTERRUPT

    module.operation.walk(visit)  # an exception cannot cross the walk: it is raised after
    if failures:
        raise failures[0]


def _problem(op: ir.Operation) -> str | None:
    if isinstance(op.opview, func.FuncOp):
        return _signature(op)
    if not op.name.startswith("tile."):
        return None
    try:
        if op.name == "tile.fused":
            return _fused(op)
        if op.name == "tile.yield":
            return None if op.parent.name == "tile.fused" else "outside a 'tile.fused'"
        if op.name == "tile.check":
            return _check(op)
        if op.name == "tile.hint":
            return None
        kind = op.name.removeprefix("tile.")
        rule = _unary if kind in ops.UNARY else _binary if kind in ops.BINARY \
            else _RULES.get(kind)
        if rule is None:  # an op of the kernel level, verified there
            return None
        results = [tensor_info(r.type) for r in op.results]
        if len(results) != 1:
            return f"has {len(results)} results instead of one"
        return rule(op, [tensor_info(x.type) for x in op.operands], results[0])
    except (KeyError, ValueError) as e:  # a missing attribute, a type or dimension not ours
        return f"is malformed: {e}"


def _signature(f: ir.Operation) -> str | None:
    signature = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
    for t in list(signature.inputs) + list(signature.results):
        try:
            tensor_info(t)
        except ValueError as e:
            return f"has a type that is no tile tensor: {e}"
    return None


# ---------------------------------------------------------------------------------------------
# Element-wise


def _common_shape(xs: Infos) -> Shape | str:
    """The shape shared by the operands that are not rank 0 (element-wise ops broadcast only
    scalars); a message when they disagree."""
    shapes = list(dict.fromkeys(x.shape for x in xs if x.shape != ()))
    if len(shapes) > 1:
        return "has operands of shapes " + " and ".join(map(shape_str, shapes)) + \
            ", which are neither equal nor rank 0"
    return shapes[0] if shapes else ()


def _expect(res: TensorInfo, want: TensorInfo) -> str | None:
    return None if res == want else f"gives {res} where its operands make {want}"


def _same_dtype(xs: Infos) -> str | None:
    dtypes = list(dict.fromkeys(x.dtype for x in xs))
    return None if len(dtypes) == 1 else "mixes element types " + " and ".join(dtypes)


def _elementwise(xs: Infos, res: TensorInfo, dtype: str) -> str | None:
    """Operands of one shape or rank 0; the result of that shape and ``dtype``."""
    shape = _common_shape(xs)
    return shape if isinstance(shape, str) else _expect(res, TensorInfo(dtype, shape))


def _unary(op: ir.Operation, xs: Infos, res: TensorInfo) -> str | None:
    return _expect(res, xs[0])


def _binary(op: ir.Operation, xs: Infos, res: TensorInfo) -> str | None:
    return _same_dtype(xs) or _elementwise(xs, res, xs[0].dtype)


def _cmp(op: ir.Operation, xs: Infos, res: TensorInfo) -> str | None:
    predicate = op.attributes["predicate"].value
    if predicate not in ops.COMPARE_PREDICATES:
        return f"has unknown predicate '{predicate}'"
    return _same_dtype(xs) or _elementwise(xs, res, "bool")


def _select(op: ir.Operation, xs: Infos, res: TensorInfo) -> str | None:
    if xs[0].dtype != "bool":
        return f"has a condition of element type {xs[0].dtype}, not bool"
    return _same_dtype(xs[1:]) or _elementwise(xs, res, xs[1].dtype)


def _cast(op: ir.Operation, xs: Infos, res: TensorInfo) -> str | None:
    return _expect(res, xs[0].with_dtype(res.dtype))


def _constant(op: ir.Operation, xs: Infos, res: TensorInfo) -> str | None:
    value = op.attributes["value"]
    if not isinstance(value, (ir.FloatAttr, ir.IntegerAttr)):
        return f"holds {value}, not a number"
    if res.shape != ():
        return f"gives {res}, not a rank-0 tensor"
    if res.dtype == "int32" and not float(value.value).is_integer():
        return f"holds {value.value} for an int32"
    return None


# ---------------------------------------------------------------------------------------------
# Data movement


def _broadcast(op: ir.Operation, xs: Infos, res: TensorInfo) -> str | None:
    x = xs[0]
    bad = f"cannot broadcast {x} to {res}"
    if x.dtype != res.dtype:
        return bad
    if x.rank_generic and not (res.rank_generic and len(x.dims) == len(res.dims)):
        return bad + ": the '...' dimensions must line up"
    if len(x.dims) > len(res.dims):
        return bad
    for d, r in zip(reversed(x.dims), reversed(res.dims)):
        if d != r and d != Dim.const(1) and not (_symbol(d) and (_symbol(r) or r.is_const())):
            return bad + f": dimension {d} is neither {r} nor 1"
    return None


def _symbol(d: Dim) -> bool:
    """One symbol: it may broadcast to another one, or to a constant, at run time (a
    ``bcast`` check)."""
    names = d.symbols()
    return len(names) == 1 and d == Dim.sym(min(names))


def _strings(attr: ir.Attribute) -> list[str]:
    return [ir.StringAttr(a).value for a in attr]


def _slice(op: ir.Operation, xs: Infos, res: TensorInfo) -> str | None:
    x = xs[0]
    starts = [parse_dim(s) for s in _strings(op.attributes["starts"])]
    ends = [parse_dim(s) for s in _strings(op.attributes["ends"])]
    if not len(starts) == len(ends) == len(x.dims):
        return (f"has {len(starts)} starts and {len(ends)} ends for the {len(x.dims)} "
                f"dimensions of {x}")
    return _expect(res, x.with_dims(tuple(e - s for s, e in zip(starts, ends))))


def _negative_axis(axis: int, x: TensorInfo) -> str | None:
    if -len(x.dims) <= axis < 0:
        return None
    return f"has axis {axis}, which is not a negative axis of {x}"


def _concat(op: ir.Operation, xs: Infos, res: TensorInfo) -> str | None:
    axis = op.attributes["axis"].value
    first = xs[0]
    problem = _negative_axis(axis, first)
    if problem:
        return problem
    total = Dim()
    for x in xs:
        same_rank = x.rank_generic == first.rank_generic and len(x.dims) == len(first.dims)
        if x.dtype != first.dtype or not same_rank:
            return f"joins {first} and {x}"
        for i, (d0, d1) in enumerate(zip(first.dims, x.dims)):
            if i - len(first.dims) != axis and d0 != d1:
                return f"joins {first} and {x}, which differ outside axis {axis}"
        total = total + x.dims[axis]
    dims = list(first.dims)
    dims[axis] = total
    return _expect(res, first.with_dims(tuple(dims)))


def _product(dims: tuple[Dim, ...]) -> Dim:
    out = Dim.const(1)
    for d in dims:
        out = out * d
    return out


def _reshape(op: ir.Operation, xs: Infos, res: TensorInfo) -> str | None:
    x = xs[0]
    if x.dtype != res.dtype or x.rank_generic or res.rank_generic:
        return f"cannot reshape {x} to {res}"
    gap = _product(x.dims) - _product(res.dims)
    if gap.is_const() and gap != Dim.const(0):
        return f"changes the number of elements: {_product(x.dims)} to {_product(res.dims)}"
    return None


def _transpose(op: ir.Operation, xs: Infos, res: TensorInfo) -> str | None:
    x = xs[0]
    perm = list(op.attributes["perm"])
    if sorted(perm) != list(range(len(x.dims))):
        return f"has perm {perm}, which is no permutation of the dimensions of {x}"
    return _expect(res, x.with_dims(tuple(x.dims[p] for p in perm)))


# ---------------------------------------------------------------------------------------------
# Reductions and contractions


def _reduce(op: ir.Operation, xs: Infos, res: TensorInfo) -> str | None:
    x = xs[0]
    kind = op.attributes["kind"].value
    if kind not in ops.REDUCE_KINDS:
        return f"has unknown kind '{kind}'"
    axes = list(op.attributes["axes"])
    if not axes or axes != sorted(set(axes)):
        return f"has axes {axes}, which are not sorted, distinct and non-empty"
    for axis in axes:
        problem = _negative_axis(axis, x)
        if problem:
            return problem
    n = len(x.dims)
    if op.attributes["keepdims"].value:
        dims = tuple(Dim.const(1) if i - n in axes else d for i, d in enumerate(x.dims))
    else:
        dims = tuple(d for i, d in enumerate(x.dims) if i - n not in axes)
    return _expect(res, x.with_dims(dims))


def _softmax(op: ir.Operation, xs: Infos, res: TensorInfo) -> str | None:
    return _negative_axis(op.attributes["axis"].value, xs[0]) or _expect(res, xs[0])


def _matmul(op: ir.Operation, xs: Infos, res: TensorInfo) -> str | None:
    lhs, rhs = xs
    problem = _same_dtype(xs)
    if problem:
        return problem
    if len(lhs.dims) < 2 or len(rhs.dims) < 2:
        return f"needs operands of rank 2 or more, got {lhs} and {rhs}"
    if lhs.shape[:-2] != rhs.shape[:-2]:
        return f"has batch dimensions that differ: {lhs} and {rhs}"
    (m, k1), (k2, n) = lhs.dims[-2:], rhs.dims[-2:]
    if k1 != k2:
        return f"contracts {k1} with {k2}"
    return _expect(res, TensorInfo(lhs.dtype, lhs.shape[:-2] + (m, n)))


def _iota(op: ir.Operation, xs: Infos, res: TensorInfo) -> str | None:
    parse_dim(op.attributes["start"].value)
    axis = op.attributes["axis"].value
    if res.dtype != "int32" or res.rank_generic or not res.shape:
        return f"gives {res}, not an int32 tensor of known rank"
    if not 0 <= axis < len(res.shape):
        return f"has axis {axis} outside the {len(res.shape)} dimensions of {res}"
    return None


def _dim(op: ir.Operation, xs: Infos, res: TensorInfo) -> str | None:
    parse_dim(op.attributes["expr"].value)
    return _expect(res, TensorInfo("int32", ()))


def _arg_reduce(op: ir.Operation, xs: Infos, res: TensorInfo) -> str | None:
    x = xs[0]
    kind = op.attributes["kind"].value
    if kind not in ops.ARG_REDUCE_KINDS:
        return f"has unknown kind '{kind}'"
    axis = op.attributes["axis"].value
    problem = _negative_axis(axis, x)
    if problem:
        return problem
    dims = list(x.dims)
    dims[axis] = Dim.const(1)
    if not op.attributes["keepdims"].value:
        del dims[axis]
    return _expect(res, TensorInfo("int32", x.with_dims(tuple(dims)).shape))


# ---------------------------------------------------------------------------------------------
# Structure


def _fused(op: ir.Operation) -> str | None:
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    if [a.type for a in args] != [x.type for x in op.operands]:
        return "has block arguments whose types are not those of its operands"
    terminator = list(block.operations)[-1]
    if terminator.name != "tile.yield":
        return "does not end in 'tile.yield'"
    if [v.type for v in terminator.operands] != [r.type for r in op.results]:
        return "yields values whose types are not those of its results"
    return None


def _check(op: ir.Operation) -> str | None:
    rel = op.attributes["rel"].value
    if rel not in ("le", "eq", "bcast", "int", "i32"):
        return f"has unknown relation '{rel}'"
    parse_dim(op.attributes["lhs"].value)
    parse_dim(op.attributes["rhs"].value)
    return None


_RULES: dict[str, Rule] = {
    "constant": _constant, "cmp": _cmp, "select": _select, "cast": _cast,
    "broadcast": _broadcast, "slice": _slice, "concat": _concat, "reshape": _reshape,
    "transpose": _transpose, "reduce": _reduce, "softmax": _softmax, "matmul": _matmul,
    "iota": _iota, "dim": _dim, "arg_reduce": _arg_reduce,
}
