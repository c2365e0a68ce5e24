"""Calls of built-in functions: their signatures, and the rules that type each one and build
its value (reductions, normalize, where, transpose, reshape, concat, matmul)."""
from __future__ import annotations

from typing import Iterable

from ...diagnostics import Span, TilecError
from ...dialect.ops import REDUCE_KINDS, UNARY_OPS
from ...dialect.types import FLOAT_DTYPES, TensorInfo
from ...dims import Dim, Shape
from .. import ast
from .indices import INDEX_BUILTINS
from .values import INT_LIMIT, Check, NeedLead, Operand, Value, Weak, keepdims

# --- built-in signatures ---------------------------------------------------------------------
# name -> (positional parameter names, defaults for keyword parameters)
BUILTINS: dict[str, tuple[tuple[str, ...], dict]] = {
    **{u: (("x",), {}) for u in UNARY_OPS},
    "max": (("a", "b"), {}), "min": (("a", "b"), {}), "pow": (("a", "b"), {}),
    "where": (("mask", "a", "b"), {}),
    "cast": (("x", "dtype"), {}),
    **{f"reduce_{k}": (("x", "axes", "keepdims"), {"keepdims": True})
       for k in REDUCE_KINDS},
    "normalize": (("x", "mean", "var", "eps"), {"eps": 1e-5}),
    "softmax": (("x", "axis"), {"axis": -1}),
    "transpose": (("x", "perm"), {}),
    "reshape": (("x", "shape"), {}),
    "matmul": (("a", "b"), {}),
    "concat": ((), {"axis": None}),   # variadic tensors, axis keyword required
    **INDEX_BUILTINS,
}


class BuiltinRules:
    """The part of :class:`~.program.FunctionAnalyzer` that analyses built-in calls."""

    # built-ins -----------------------------------------------------------------------------
    def _builtin(self, e: ast.Call) -> Operand:
        name = e.func
        if name == "concat":
            return self._concat(e)
        params, defaults = BUILTINS[name]
        bound = self._bind_args(e, params, defaults)
        arg = lambda p: bound[p]  # noqa: E731
        if name in INDEX_BUILTINS:
            return self.index_builtin(e, bound)
        if name in UNARY_OPS:
            return self.unary(name, self.expr(arg("x").value), e.span, arg("x").span)
        if name in ("max", "min", "pow"):
            a, b = arg("a"), arg("b")
            return self.binary(name, self.expr(a.value), self.expr(b.value), e.span,
                               e.func_span, (a.span, b.span))
        if name == "where":
            return self._where(e, arg("mask"), arg("a"), arg("b"))
        if name == "cast":
            x = self.value(arg("x").value)
            self._tensor(x, arg("x").span)
            d = arg("dtype").value
            if not isinstance(d, ast.Name):
                raise TilecError("cast expects a dtype name as its second argument, e.g. "
                                 "cast(x, float32)", d.span)
            dtype = self.dtype(d.id, d.span)
            # a cast is a rounding point even to the same type (x * y rounds to float32 here);
            # tile-canonicalize drops it where the value already has that type exactly
            return self.emit("cast", [x], {}, x.type.with_dtype(dtype), e.span)
        if name.startswith("reduce_"):
            return self._reduce(e, name[len("reduce_"):], bound)
        if name == "normalize":
            return self._normalize(e, bound)
        if name == "softmax":
            x = self._float(self.value(arg("x").value), e, arg("x").span)
            axis = self._int_arg(bound["axis"], "axis")
            (ax,) = self._axes(x, [axis], _span(bound["axis"], e.span))
            return self.emit("softmax", [x], {"axis": ax}, x.type, e.span)
        if name == "transpose":
            return self._transpose(e, bound)
        if name == "reshape":
            return self._reshape(e, bound)
        if name == "matmul":
            a, b = arg("a"), arg("b")
            return self.matmul(self._tensor(self.value(a.value), a.span),
                               self._tensor(self.value(b.value), b.span), e.span)
        raise AssertionError(name)

    def _float(self, x: Value, e: ast.Call, span: Span) -> Value:
        self._tensor(x, span)
        if x.type.dtype not in FLOAT_DTYPES:
            raise TilecError(f"{e.func} needs a floating-point operand, not {x.type.dtype}; "
                             "use cast(x, float32)", span)
        return x

    def _int_arg(self, a, what: str) -> int:
        if not isinstance(a, ast.Arg):
            return a
        v = a.value
        if isinstance(v, ast.Unary) and isinstance(v.operand, ast.Num):
            v = ast.Num(-v.operand.value, "-" + v.operand.text, v.operand.is_float, a.span)
        if not isinstance(v, ast.Num) or v.is_float or abs(v.value) > INT_LIMIT:
            raise TilecError(f"{what} must be an integer", a.value.span)
        return v.value

    def _int_list(self, a, what: str) -> list[tuple[int, Span]]:
        if not isinstance(a, ast.Arg) or not isinstance(a.value, ast.ListExpr):
            span = a.span if isinstance(a, ast.Arg) else None
            raise TilecError(f"{what} must be a list of integers, e.g. [-1]", span)
        out = []
        for item in a.value.items:
            out.append((self._int_arg(ast.Arg(None, item, item.span), what), item.span))
        return out

    def _axes(self, x: Value, axes: list[int], span: Span,
              spans: list[Span] | None = None) -> list[int]:
        """Normalize axes to negative indices, peeling dims off `...` when needed."""
        spans = spans or [span] * len(axes)
        certain = len(x.type.dims)
        out = []
        for ax, s in zip(axes, spans):
            if x.type.rank_generic:
                if ax >= 0:
                    raise TilecError(f"axis {ax} of a rank-generic tensor {x.type}: count from "
                                     "the end with a negative axis", s)
                if -ax > certain:
                    raise NeedLead(-ax - certain)
                out.append(ax)
            else:
                rank = certain
                if not -rank <= ax < rank:
                    raise TilecError(f"axis {ax} is out of range for {x.type} of rank {rank}",
                                     s)
                out.append(ax - rank if ax >= 0 else ax)
        if len(set(out)) != len(out):
            raise TilecError("an axis is given twice", span)
        return sorted(out)

    def _reduce(self, e: ast.Call, kind: str, bound: dict) -> Value:
        x = self._float(self.value(bound["x"].value), e, bound["x"].span)
        items = self._int_list(bound["axes"], "axes")
        if not items:
            raise TilecError("axes must not be empty", bound["axes"].span)
        axes = self._axes(x, [a for a, _ in items], bound["axes"].span, [s for _, s in items])
        keep = keepdims(bound["keepdims"])
        dims = list(x.type.dims)
        for ax in axes:
            dims[ax] = Dim.const(1)
        if not keep:
            dims = [d for i, d in enumerate(dims) if i - len(dims) not in axes]
        return self.emit("reduce", [x], {"kind": kind, "axes": axes, "keepdims": bool(keep)},
                         x.type.with_dims(tuple(dims)), e.span)

    def _normalize(self, e: ast.Call, bound: dict) -> Value:
        """normalize(x, mean, var, eps) = (x - mean) * rsqrt(var + eps)."""
        x, mean, var = (self.expr(bound[n].value) for n in ("x", "mean", "var"))
        eps_arg = bound["eps"]
        eps = self.expr(eps_arg.value) if isinstance(eps_arg, ast.Arg) else Weak(eps_arg, e.span)
        sp = lambda n: bound[n].span  # noqa: E731
        centered = self.binary("sub", x, mean, e.span, e.func_span, (sp("x"), sp("mean")))
        shifted = self.binary("add", var, eps, e.span, e.func_span, (sp("var"), e.span))
        scale = self.unary("rsqrt", shifted, e.span)
        out = self.binary("mul", centered, scale, e.span, e.func_span, (e.span, e.span))
        out.attrs["builtin"] = "normalize"   # its allowance is normalize's row, not the steps'
        return out

    def _where(self, e: ast.Call, m: ast.Arg, a: ast.Arg, b: ast.Arg) -> Value:
        mask = self.expr(m.value)
        if not isinstance(mask, Value) or not mask.is_mask:
            raise TilecError("the first argument of where must be a mask (a comparison such "
                             "as x > 0.0)", m.span)
        x, y = self.expr(a.value), self.expr(b.value)
        for v, s in ((x, a.span), (y, b.span)):
            if isinstance(v, Value):
                self._tensor(v, s)
        x, y = self.unify_dtypes([x, y], [a.span, b.span], e.func_span)
        shape = self.broadcast_shapes([mask, x, y], e.func_span)
        mask, x, y = self.broadcast_all([mask, x, y], shape)
        return self.emit("select", [mask, x, y], {}, TensorInfo(x.type.dtype, shape), e.span)

    def _transpose(self, e: ast.Call, bound: dict) -> Value:
        x = self._tensor(self.value(bound["x"].value), bound["x"].span)
        if x.type.rank_generic:
            raise TilecError(f"transpose needs a tensor of known rank, got {x.type}", e.span)
        perm = [p for p, _ in self._int_list(bound["perm"], "perm")]
        rank = len(x.type.dims)
        if sorted(perm) != list(range(rank)):
            raise TilecError(f"perm {perm} is not a permutation of the {rank} axes of "
                             f"{x.type}", bound["perm"].span)
        dims = tuple(x.type.dims[p] for p in perm)
        return self.emit("transpose", [x], {"perm": perm}, x.type.with_dims(dims), e.span)

    def _reshape(self, e: ast.Call, bound: dict) -> Value:
        x = self._tensor(self.value(bound["x"].value), bound["x"].span)
        if x.type.rank_generic:
            raise TilecError(f"reshape needs a tensor of known rank, got {x.type}", e.span)
        shape_arg = bound["shape"]
        if not isinstance(shape_arg.value, ast.ListExpr):
            raise TilecError("reshape expects a list of dimensions, e.g. [tokens, 1, half]",
                             shape_arg.span)
        dims = []
        for item in shape_arg.value.items:
            if isinstance(item, ast.Unary) and isinstance(item.operand, ast.Num):
                raise TilecError("reshape dimensions must be non-negative (no -1: give every "
                                 "dimension)", item.span)
            dims.append(self._extent(item, "reshape dimension"))
        before = _product(x.type.dims)
        after = _product(dims)
        if before != after:
            if (before - after).is_const():
                raise TilecError(f"reshape changes the number of elements: {before} to "
                                 f"{after}", shape_arg.span)
            self.root.checks.append(Check(before, "eq", after,
                                          f"reshape of {before} elements to {after}",
                                          self.here(e.span)))
        return self.emit("reshape", [x], {}, TensorInfo(x.type.dtype, tuple(dims)), e.span)

    def _concat(self, e: ast.Call) -> Value:
        tensors = [a for a in e.args if a.name is None]
        kws = {a.name: a for a in e.args if a.name is not None}
        for k, a in kws.items():
            if k != "axis":
                raise TilecError(f"concat has no parameter '{k}'", a.name_span or a.span)
        if "axis" not in kws:
            raise TilecError("concat needs axis=k", e.span)
        if len(tensors) < 2:
            raise TilecError("concat needs at least two tensors", e.span)
        xs = [self.expr(a.value) for a in tensors]
        xs = self.unify_dtypes(xs, [a.span for a in tensors], e.func_span)
        for x, a in zip(xs, tensors):
            self._tensor(x, a.span)
        axis = self._int_arg(kws["axis"], "axis")
        first = xs[0]
        (ax,) = self._axes(first, [axis], kws["axis"].span)
        for x, a in zip(xs, tensors):
            same_rank = (x.type.rank_generic == first.type.rank_generic
                         and len(x.type.dims) == len(first.type.dims))
            if x.type.shape == () or not same_rank:
                raise TilecError(f"concat operands must have the same rank: {first.type} and "
                                 f"{x.type}", a.span)
            for i, (d0, d1) in enumerate(zip(first.type.dims, x.type.dims)):
                if i - len(first.type.dims) != ax and d0 != d1:
                    raise TilecError(f"concat operands differ outside axis {axis}: "
                                     f"{first.type} and {x.type}", a.span)
        out = xs[0]
        for x in xs[1:]:   # a chain of binary concats
            dims = list(out.type.dims)
            dims[ax] = dims[ax] + x.type.dims[ax]
            out = self.emit("concat", [out, x], {"axis": ax},
                            first.type.with_dims(tuple(dims)), e.span)
        return out

    def matmul(self, a: Value, b: Value, span: Span) -> Value:
        if a.type.dtype != b.type.dtype:
            raise TilecError(f"element types differ: {a.type.dtype} and {b.type.dtype}; "
                             f"convert one with cast(x, {a.type.dtype})", span)
        if a.type.dtype not in FLOAT_DTYPES:
            raise TilecError(f"matmul needs floating-point operands, not {a.type.dtype}", span)
        for x in (a, b):
            if len(x.type.dims) < 2:
                if x.type.rank_generic:
                    raise NeedLead(2 - len(x.type.dims))
                raise TilecError(f"matmul needs operands of rank 2 or more, got {x.type}", span)
        m, k1 = a.type.dims[-2:]
        k2, n = b.type.dims[-2:]
        if k1 != k2:
            raise TilecError(f"matmul contraction dimensions differ: {a.type} @ {b.type} "
                             f"({k1} vs {k2})", span)
        batch_a = a.type.shape[:-2]
        batch_b = b.type.shape[:-2]
        batch = self._broadcast_batch(batch_a, batch_b, span)
        a = self.broadcast_to(a, batch + (m, k1), a.span)
        b = self.broadcast_to(b, batch + (k2, n), b.span)
        return self.emit("matmul", [a, b], {}, TensorInfo(a.type.dtype, batch + (m, n)), span)

    def _broadcast_batch(self, x: Shape, y: Shape, span: Span) -> Shape:
        fake = [Value("param", [], {}, TensorInfo("float32", s), span) for s in (x, y)]
        return self.broadcast_shapes(fake, span)


def _span(a, fallback: Span) -> Span:
    return a.span if isinstance(a, ast.Arg) else fallback


def _product(dims: Iterable[Dim]) -> Dim:
    out = Dim.const(1)
    for d in dims:
        out = out * d
    return out
