"""The reference semantics of tile IR: a NumPy interpreter, the oracle every backend is
verified against.

In: a module of tile IR (``func.func`` bodies of ``tile`` ops, before or after ``tile-fuse``;
a kernel-level body, marked ``tile.kernel``, runs once per point of its grid) and NumPy arrays / Python scalars for one function's
parameters.  Out: that function's results as NumPy arrays of the declared element types.

Shape symbols are bound from the argument shapes (:func:`bind_symbols`).  Every value is held
in float64 (``int32`` in int64, wrapped to 32 bits after each op; masks as bool) and rounded
only at ``tile.cast`` and at ``func.return``, as the numerical contract of language.md says.
:func:`allowed` also carries each value's rounding allowance (:mod:`.allowance`), which the
contract adds to the tolerances; it is computed on tensor-level IR.
Mistakes of the caller (a wrong rank, dtype or extent, a failing ``tile.check``) raise
:class:`ReferenceError`; so does IR that breaks the contract of ``ops.py``, with a message that
starts with ``internal:``.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dialect import (BINDING_ATTR, BUILTIN_ATTR, DISPATCH_ATTR, KERNEL_ATTR, VARIANT_OF_ATTR,
                       Param, TensorInfo, params_of, tensor_info)
from ..dialect.locations import span_of
from ..binding import Binding, BindError, bind
from ..dims import Dim, parse_dim
from ..mlir import ir
from . import allowance
from .numerics import NUMPY_DTYPES, to_dtype


class ReferenceError(Exception):  # noqa: A001 - the harness's name for its run-time error
    """A run-time error of the reference: names the argument or check and what was expected."""


# ---------------------------------------------------------------------------------------------
# Parameters and symbol binding

UNNAMED = "%arg{}"
"""How messages name a parameter without ``tile.name`` (hand-written IR): as MLIR prints it."""


def bind_symbols(func_op: Any, args: Sequence[Any]) -> dict[str, int]:
    """The shape symbols of ``func_op`` bound from the shapes of ``args`` (anything with a
    shape, in parameter order); ReferenceError when they cannot be bound consistently."""
    return bind_shapes(func_op, args).symbols


def bind_shapes(func_op: Any, args: Sequence[Any]) -> Binding:
    """Bind the symbols and the ``...`` dimensions from the argument shapes, checking every
    parameter's rank, the ``...`` dimensions' agreement, and every extent."""
    ps = params_of(func_op, UNNAMED)
    if len(args) != len(ps):
        raise ReferenceError(f"expected {len(ps)} arguments, got {len(args)}")
    try:
        return bind([(p.name, p.info.shape) for p in ps], [np.shape(a) for a in args])
    except BindError as e:
        raise ReferenceError(str(e)) from None


# ---------------------------------------------------------------------------------------------
# Arguments


# how the interpreter holds values of each element type
STORAGE: dict[str, np.dtype] = {
    "float16": np.dtype(np.float64), "bfloat16": np.dtype(np.float64),
    "float32": np.dtype(np.float64), "int32": np.dtype(np.int64), "bool": np.dtype(np.bool_),
}


def _storage(values: Any, dtype: str) -> np.ndarray:
    return np.asarray(values, dtype=STORAGE[dtype])


def _argument(p: Param, value: Any) -> np.ndarray:
    """Check one argument's type and convert it to the interpreter's storage."""
    want = NUMPY_DTYPES[p.info.dtype]
    if p.scalar and isinstance(value, (int, float)) and not isinstance(value, bool):
        if p.info.dtype == "int32":
            if not isinstance(value, int) or not -2**31 <= value < 2**31:
                raise ReferenceError(f"argument '{p.name}': expected an int32, got {value!r}")
            return np.asarray(value, dtype=np.int64)
        # a floating scalar holds a value of its declared type, as the C ABI passes it
        return _storage(to_dtype(np.asarray(float(value)), p.info.dtype), p.info.dtype)
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if not isinstance(value, np.ndarray):
        raise ReferenceError(f"argument '{p.name}': expected a NumPy array of {want.name}, "
                             f"got {type(value).__name__}")
    if value.dtype != want:
        raise ReferenceError(f"argument '{p.name}': expected dtype {want.name}, "
                             f"got {value.dtype.name}")
    return _storage(value, p.info.dtype)


def _arguments(ps: list[Param], args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """Positional and keyword arguments matched to the parameters, defaults filled in."""
    if len(args) > len(ps):
        raise ReferenceError(f"expected at most {len(ps)} arguments, got {len(args)}")
    by_name: dict[str, Any] = {p.name: a for p, a in zip(ps, args)}
    for key, value in kwargs.items():
        if key not in {p.name for p in ps}:
            raise ReferenceError(f"unknown argument '{key}'; parameters: "
                                 f"{', '.join(p.name for p in ps)}")
        if key in by_name:
            raise ReferenceError(f"argument '{key}' given twice")
        by_name[key] = value
    out = []
    for p in ps:
        if p.name in by_name:
            out.append(by_name[p.name])
        elif p.default is not None:
            out.append(p.default)
        else:
            raise ReferenceError(f"missing argument '{p.name}'")
    return out


# ---------------------------------------------------------------------------------------------
# Ops


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))  # never overflows
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


_erf = np.frompyfunc(math.erf, 1, 1)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.asarray(_erf(x / math.sqrt(2.0)), dtype=np.float64))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "abs": np.abs,
    "neg": np.negative,
    "reciprocal": lambda x: 1.0 / x,
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0),
    "silu": lambda x: x * _sigmoid(x),
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
    "sin": np.sin,
    "cos": np.cos,
    "erf": lambda x: np.asarray(_erf(x), dtype=np.float64),
    "round": np.rint,   # to nearest, ties to even
}
BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "max": np.maximum, "min": np.minimum, "pow": np.power,
}
COMPARE: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal,
}
INT32_ELEMENTWISE = frozenset({"add", "sub", "mul", "max", "min", "neg", "abs", "relu"})


def _where(op: Any) -> str:
    span = span_of(op.location)
    return span.located() if span else str(op.location)


def _error(op: Any, message: str) -> ReferenceError:
    """An error of the program or its arguments, at the op's source location."""
    return ReferenceError(f"{_where(op)}: {message}")


def _internal(op: Any, message: str) -> ReferenceError:
    """IR that breaks the contract of ops.py: a bug of the compiler, not of the user."""
    return ReferenceError(f"internal: {op.operation.name} at {_where(op)}: {message}")


def _strings(attr: Any) -> list[str]:
    return [ir.StringAttr(a).value for a in attr]


class _Interpreter:
    """Evaluates blocks of tile ops under one symbol binding."""

    def __init__(self, binding: Binding, module: ir.Module | None = None,
                 track: bool = False) -> None:
        self.binding = binding
        self.module = module
        self.track = track  # also compute every value's rounding allowance (:func:`allowed`)
        self.allowances: list[np.ndarray] = []  # those of the values the last block passed on
        self.point: tuple[tuple[int, ...], ...] = ()  # the grid point a kernel body runs for:
        # the coordinates of each grid entry (all the leading ones for '...')
        self.stored: dict[Any, np.ndarray] = {}  # a kernel's outputs, filled row by row

    # shapes ---------------------------------------------------------------------------------
    def dim(self, d: Dim | str, op: Any) -> int:
        d = parse_dim(d) if isinstance(d, str) else d
        unknown = d.symbols() - self.binding.symbols.keys()
        if unknown:
            raise _internal(op, f"{d} uses unbound {', '.join(sorted(unknown))}")
        value = d.evaluate(self.binding.symbols)
        if value.denominator != 1 or value < 0:
            raise _error(op, f"dimension {d} is {value} with {self.binding.symbols}, not a "
                             f"non-negative integer")
        return int(value)

    def integer(self, d: str, op: Any) -> int:
        """The value of dimension expression ``d``, which may be negative (``iota``'s start,
        ``dim``)."""
        value = parse_dim(d).evaluate(self.binding.symbols)
        if value.denominator != 1:
            raise _error(op, f"{d} is {value} with {self.binding.symbols}, not an integer")
        return int(value)

    def shape(self, info: TensorInfo, op: Any) -> tuple[int, ...]:
        """The actual shape of a value of type ``info``."""
        dims = tuple(self.dim(d, op) for d in info.dims)
        if not info.rank_generic:
            return dims
        if self.binding.lead is None:
            raise _internal(op, "a '...' type in a function without '...' parameters")
        return self.binding.lead + dims

    # evaluation -----------------------------------------------------------------------------
    def block(self, block: Any, inputs: Sequence[np.ndarray],
              allowances: Sequence[np.ndarray] = ()) -> list[np.ndarray]:
        """Evaluate ``block`` on its arguments; the values its terminator passes on (and,
        when tracking, their allowances in ``self.allowances``; the arguments' are 0 unless
        given)."""
        env: dict[Any, np.ndarray] = dict(zip(block.arguments, inputs))
        denv: dict[Any, np.ndarray] = {a: np.zeros(()) for a in block.arguments}
        denv.update(zip(block.arguments, allowances))
        for op in block.operations:
            name = op.operation.name
            xs = [env[v] for v in op.operands]
            if name in ("func.return", "tile.yield"):
                self.allowances = [denv[v] for v in op.operands] if self.track else []
                return xs
            if name == "tile.check":
                self.check(op)
                continue
            if name == "tile.hint":  # a pragma's note to the backends: no value changes
                continue
            if name == "func.call":
                outs = self.call(op, xs)
            elif name == "tile.fused":
                outs = self.block(op.regions[0].blocks[0], xs,
                                  [denv[v] for v in op.operands] if self.track else ())
            elif name in _HANDLERS:
                outs = [_HANDLERS[name](self, op, xs)]
            else:
                raise _error(op, f"the reference does not know operation '{name}'")
            if len(outs) != len(op.results):
                raise _internal(op, f"{len(outs)} values for {len(op.results)} results")
            for r, v in zip(op.results, outs):
                env[r] = self.finish(op, r.type, v)
            if self.track:
                builtin = _builtin_allowance(op, env, denv)
                denv.update(zip(op.results, [builtin] if builtin is not None else self.allowance(
                    op, xs, [denv[v] for v in op.operands], [env[r] for r in op.results])))
        raise ReferenceError("internal: a block without a terminator")

    def call(self, op: Any, xs: list[np.ndarray]) -> list[np.ndarray]:
        """A kernel launched by a host function (tile-kernel outlines groups into them).  It
        runs under the host's binding, which the host passes it: its inputs need not show
        every symbol (a broadcast over a new dimension, a dimension ``c*g``)."""
        callee = find_function(self.module, ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
        for x, t in zip(xs, callee.type.inputs):
            if x.shape != self.shape(tensor_info(t), op):
                raise _internal(op, f"an argument of shape {list(x.shape)} for type {t}")
        return _run_body(_Interpreter(self.binding, self.module, self.track), callee, xs)

    def finish(self, op: Any, t: ir.Type, value: np.ndarray) -> np.ndarray:
        """Wrap int32 results and check that the value has the result type's shape."""
        info = tensor_info(t)
        value = np.asarray(value)
        if info.dtype == "int32" and value.dtype == np.int64:
            value = (value + 2**31) % 2**32 - 2**31
        want = self.shape(info, op)
        if value.shape != want or value.dtype != STORAGE[info.dtype]:
            raise _internal(op, f"computed {value.dtype}{list(value.shape)} for a result of "
                                f"type {t}, which is {list(want)} here")
        return value

    def allowance(self, op: Any, xs: list[np.ndarray], ds: list[np.ndarray],
                  outs: list[np.ndarray]) -> list[np.ndarray]:
        """The allowances of ``op``'s results (:mod:`.allowance`)."""
        name = op.operation.name
        if name == "tile.fused":
            return self.allowances
        rule = _ALLOWANCE.get(name)
        if rule is None:
            raise _internal(op, "no allowance rule: it is computed on tensor-level IR")
        try:
            return [rule(self, op, xs, ds, outs[0])]
        except KeyError as e:
            raise _error(op, str(e.args[0])) from None

    def check(self, op: Any) -> None:
        a = op.attributes
        rel = a["rel"].value
        if rel in ("int", "i32"):
            value = parse_dim(a["lhs"].value).evaluate(self.binding.symbols)
            if value.denominator == 1 and (rel == "int" or -2**31 <= value < 2**31):
                return
            values = parse_dim(a["lhs"].value).symbols()
            raise _error(op, f"{a['message'].value} (" + ", ".join(
                f"{s} = {self.binding.symbols[s]}" for s in sorted(values)) + ")")
        lhs, rhs = self.dim(a["lhs"].value, op), self.dim(a["rhs"].value, op)
        if rel not in ("le", "eq", "bcast"):
            raise _internal(op, f"relation {rel!r}")
        if lhs <= rhs if rel == "le" else lhs == rhs or (rel == "bcast" and lhs == 1):
            return
        raise _error(op, f"{a['message'].value} ({a['lhs'].value} = {lhs}, "
                         f"{a['rhs'].value} = {rhs})")


Handler = Callable[[_Interpreter, Any, list[np.ndarray]], np.ndarray]


def _elementwise(name: str, fn: Callable[..., np.ndarray]) -> Handler:
    def handler(ev: _Interpreter, op: Any, xs: list[np.ndarray]) -> np.ndarray:
        if xs[0].dtype == np.int64 and name not in INT32_ELEMENTWISE:
            raise _error(op, f"tile.{name} is not defined on int32")
        _same_shapes(op, xs)
        return fn(*xs)
    return handler


def _same_shapes(op: Any, xs: list[np.ndarray]) -> None:
    shapes = {x.shape for x in xs if x.ndim}
    if len(shapes) > 1:
        raise _internal(op, f"operand shapes {sorted(shapes)} are neither equal nor rank 0")


def _constant(ev: _Interpreter, op: Any, xs: list[np.ndarray]) -> np.ndarray:
    value = op.attributes["value"].value
    dtype = tensor_info(op.results[0].type).dtype
    if dtype == "int32" and not float(value).is_integer():
        raise _internal(op, f"{value} for an int32")
    return _storage(value, dtype)


def _cmp(ev: _Interpreter, op: Any, xs: list[np.ndarray]) -> np.ndarray:
    _same_shapes(op, xs)
    return COMPARE[op.attributes["predicate"].value](xs[0], xs[1])


def _select(ev: _Interpreter, op: Any, xs: list[np.ndarray]) -> np.ndarray:
    _same_shapes(op, xs)
    return np.where(xs[0], xs[1], xs[2])


def _cast(ev: _Interpreter, op: Any, xs: list[np.ndarray]) -> np.ndarray:
    x = xs[0]
    dtype = tensor_info(op.results[0].type).dtype
    if dtype in ("float16", "bfloat16", "float32"):
        return to_dtype(x.astype(np.float64), dtype).astype(np.float64)
    if dtype != "int32" or x.dtype != np.float64:
        return _storage(x, dtype)
    t = np.trunc(x)
    bad = ~((t >= -2**31) & (t < 2**31))  # NaN too
    if bad.any():
        raise _error(op, f"cast to int32 of {float(x[bad].flat[0])}, which is out of its range")
    return t.astype(np.int64)


def _broadcast(ev: _Interpreter, op: Any, xs: list[np.ndarray]) -> np.ndarray:
    shape = ev.shape(tensor_info(op.results[0].type), op)
    try:
        return np.broadcast_to(xs[0], shape)
    except ValueError:
        raise _internal(op, f"{list(xs[0].shape)} does not broadcast to {list(shape)}") from None


def _slice(ev: _Interpreter, op: Any, xs: list[np.ndarray]) -> np.ndarray:
    x = xs[0]
    starts, ends = _strings(op.attributes["starts"]), _strings(op.attributes["ends"])
    k = x.ndim - len(starts)
    index: list[slice] = [slice(None)] * k
    for axis, (s, e) in enumerate(zip(starts, ends), start=k):
        lo, hi = ev.dim(s, op), ev.dim(e, op)
        if not lo <= hi <= x.shape[axis]:
            raise _error(op, f"slice {s}:{e} = {lo}:{hi} of dimension {axis} of size "
                             f"{x.shape[axis]} is out of range")
        index.append(slice(lo, hi))
    return x[tuple(index)]


def _concat(ev: _Interpreter, op: Any, xs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(xs, axis=op.attributes["axis"].value)


def _reshape(ev: _Interpreter, op: Any, xs: list[np.ndarray]) -> np.ndarray:
    shape = ev.shape(tensor_info(op.results[0].type), op)
    if math.prod(shape) != xs[0].size:
        raise _error(op, f"cannot reshape {list(xs[0].shape)} ({xs[0].size} elements) to "
                         f"{list(shape)}")
    return xs[0].reshape(shape)


def _transpose(ev: _Interpreter, op: Any, xs: list[np.ndarray]) -> np.ndarray:
    # on a rank-generic tensor the permutation moves the dimensions after the '...' ones
    perm = list(op.attributes["perm"])
    k = xs[0].ndim - len(perm)
    return np.transpose(xs[0], list(range(k)) + [k + p for p in perm])


def _reduce(ev: _Interpreter, op: Any, xs: list[np.ndarray]) -> np.ndarray:
    a = op.attributes
    x, kind = xs[0], a["kind"].value
    axes, keepdims = tuple(a["axes"]), a["keepdims"].value
    if kind in ("max", "min"):
        # the identity of an empty reduction: -inf for max (int32: its minimum), +inf for min
        low = -np.inf if x.dtype == np.float64 else -2**31
        high = np.inf if x.dtype == np.float64 else 2**31 - 1
        fn, initial = (np.max, low) if kind == "max" else (np.min, high)
        return fn(x, axis=axes, keepdims=keepdims, initial=initial)
    fn = {"sum": np.sum, "mean": np.mean, "var": np.var}.get(kind)
    if fn is None:
        raise _internal(op, f"kind {kind!r}")
    return fn(x, axis=axes, keepdims=keepdims)


def _softmax(ev: _Interpreter, op: Any, xs: list[np.ndarray]) -> np.ndarray:
    axis = op.attributes["axis"].value
    e = np.exp(xs[0] - np.max(xs[0], axis=axis, keepdims=True, initial=-np.inf))
    return e / np.sum(e, axis=axis, keepdims=True)


def _arg_reduce(ev: _Interpreter, op: Any, xs: list[np.ndarray]) -> np.ndarray:
    """The first index of the greatest (least) element; NumPy, like torch, counts a NaN as
    greater and as less than every number, so the first NaN wins."""
    a = op.attributes
    axis = a["axis"].value
    fn = np.argmax if a["kind"].value == "max" else np.argmin
    out = fn(xs[0], axis=axis).astype(np.int64)
    return np.expand_dims(out, axis) if a["keepdims"].value else out


def _iota(ev: _Interpreter, op: Any, xs: list[np.ndarray]) -> np.ndarray:
    """``start`` plus the index along ``axis``; in a kernel row (``shape`` and ``axes`` set
    by tile-kernel) the row of the whole tensor at the current grid point."""
    a = op.attributes
    axis = a["axis"].value
    if "shape" in a:
        info = TensorInfo("int32", tuple(parse_dim(d) for d in _strings(a["shape"])))
    else:
        info = tensor_info(op.results[0].type)
    shape = ev.shape(info, op)
    ramp = ev.integer(a["start"].value, op) + np.arange(shape[axis], dtype=np.int64)
    whole = np.broadcast_to(ramp.reshape([-1 if i == axis else 1 for i in range(len(shape))]),
                            shape)
    if "axes" in a:
        return np.array(whole[_row_index(ev, op, whole, info)])
    return np.array(whole)


def _dim(ev: _Interpreter, op: Any, xs: list[np.ndarray]) -> np.ndarray:
    return np.array(ev.integer(op.attributes["expr"].value, op), dtype=np.int64)


def _matmul(ev: _Interpreter, op: Any, xs: list[np.ndarray]) -> np.ndarray:
    a, b = xs
    row = a.ndim == 1 and b.ndim == 2   # a kernel row: one row of lhs times the whole rhs
    if not row and (a.ndim < 2 or b.ndim < 2 or a.shape[:-2] != b.shape[:-2]):
        raise _internal(op, f"operand shapes {list(a.shape)} and {list(b.shape)}")
    return np.matmul(a, b)


_HANDLERS: dict[str, Handler] = {
    **{f"tile.{name}": _elementwise(name, fn) for name, fn in {**UNARY, **BINARY}.items()},
    "tile.constant": _constant,
    "tile.cmp": _cmp,
    "tile.select": _select,
    "tile.cast": _cast,
    "tile.broadcast": _broadcast,
    "tile.slice": _slice,
    "tile.concat": _concat,
    "tile.reshape": _reshape,
    "tile.transpose": _transpose,
    "tile.reduce": _reduce,
    "tile.softmax": _softmax,
    "tile.matmul": _matmul,
    "tile.iota": _iota,
    "tile.dim": _dim,
    "tile.arg_reduce": _arg_reduce,
}


# ---------------------------------------------------------------------------------------------
# Entry point


def _numpy_axes(ev: _Interpreter, info: TensorInfo, axis: int) -> list[int]:
    """The NumPy axes of MLIR axis ``axis`` (the ``...`` axis spans all leading dims)."""
    if not info.rank_generic:
        return [axis]
    lead = len(ev.binding.lead or ())
    return list(range(lead)) if axis == 0 else [lead + axis - 1]


def _row_index(ev: _Interpreter, op: Any, x: np.ndarray, info: TensorInfo) -> tuple:
    """Index of the current grid point's row in ``x`` (``axes`` of load_row/store_row)."""
    index: list[Any] = [slice(None)] * x.ndim
    for axis, here in zip((int(a) for a in op.attributes["axes"]), ev.point):
        if axis < 0:
            continue
        for np_axis, c in zip(_numpy_axes(ev, info, axis), here):
            index[np_axis] = 0 if x.shape[np_axis] == 1 else c
    return tuple(index)


def _load_row(ev: _Interpreter, op: Any, xs: list[np.ndarray]) -> np.ndarray:
    info = tensor_info(op.operands[0].type)
    return np.array(xs[0][_row_index(ev, op, xs[0], info)])


def _store_row(ev: _Interpreter, op: Any, xs: list[np.ndarray]) -> np.ndarray:
    info = tensor_info(op.results[0].type)
    key = op.results[0]
    if key not in ev.stored:
        ev.stored[key] = np.zeros(ev.shape(info, op), dtype=STORAGE[info.dtype])
    out = ev.stored[key]
    out[_row_index(ev, op, out, info)] = xs[0]
    return out


_HANDLERS["tile.load_row"] = _load_row
_HANDLERS["tile.store_row"] = _store_row


# ---------------------------------------------------------------------------------------------
# Allowances: each rule gives the allowance of an op's result from its operands, their
# allowances and the result (the arithmetic is in :mod:`.allowance`)

AllowanceRule = Callable[[_Interpreter, Any, list[np.ndarray], list[np.ndarray], np.ndarray],
                         np.ndarray]


def _elementwise_allowance(name: str) -> AllowanceRule:
    return lambda ev, op, xs, ds, out: allowance.elementwise(name, xs, ds, out)


def _moved(ev: _Interpreter, op: Any, xs: list[np.ndarray], ds: list[np.ndarray],
           out: np.ndarray) -> np.ndarray:
    """Data movement moves the allowances with the values."""
    return np.asarray(_HANDLERS[op.operation.name](
        ev, op, [np.broadcast_to(d, np.shape(x)) for d, x in zip(ds, xs)]), dtype=np.float64)


def _cmp_allowance(ev: _Interpreter, op: Any, xs: list[np.ndarray], ds: list[np.ndarray],
                   out: np.ndarray) -> np.ndarray:
    """1 where the operands are within their allowances of each other: either answer."""
    with np.errstate(all="ignore"):
        gap = np.abs(xs[0].astype(np.float64) - xs[1])
        return (np.isfinite(gap) & (gap <= ds[0] + ds[1]) & ((ds[0] + ds[1]) > 0)) * 1.0


def _select_allowance(ev: _Interpreter, op: Any, xs: list[np.ndarray], ds: list[np.ndarray],
                      out: np.ndarray) -> np.ndarray:
    mask, a, b = xs
    chosen = np.where(mask, ds[1], ds[2])
    with np.errstate(all="ignore"):
        either = np.maximum(ds[1], ds[2]) + np.abs(a.astype(np.float64) - b)
    return allowance.finite_only(out, np.where(ds[0] > 0, either, chosen))


def _cast_allowance(ev: _Interpreter, op: Any, xs: list[np.ndarray], ds: list[np.ndarray],
                    out: np.ndarray) -> np.ndarray:
    source = tensor_info(op.operands[0].type).dtype
    return allowance.rounded(xs[0].astype(np.float64), ds[0], source,
                             tensor_info(op.results[0].type).dtype)


def _reduce_allowance(ev: _Interpreter, op: Any, xs: list[np.ndarray], ds: list[np.ndarray],
                      out: np.ndarray) -> np.ndarray:
    a = op.attributes
    return allowance.reduction(a["kind"].value, xs[0], ds[0], tuple(a["axes"]),
                               a["keepdims"].value, out)


def _softmax_allowance(ev: _Interpreter, op: Any, xs: list[np.ndarray], ds: list[np.ndarray],
                       out: np.ndarray) -> np.ndarray:
    return allowance.softmax(xs[0], ds[0], out, op.attributes["axis"].value)


def _matmul_allowance(ev: _Interpreter, op: Any, xs: list[np.ndarray], ds: list[np.ndarray],
                      out: np.ndarray) -> np.ndarray:
    return allowance.finite_only(out, allowance.matmul(*xs, *ds))


_ALLOWANCE: dict[str, AllowanceRule] = {
    **{f"tile.{name}": _elementwise_allowance(name) for name in {**UNARY, **BINARY}},
    "tile.constant": lambda ev, op, xs, ds, out: np.zeros(np.shape(out)),
    # integers made exactly: indices, dimensions, and argmax/argmin's index (exact, as
    # integer results are)
    **{f"tile.{name}": lambda ev, op, xs, ds, out: np.zeros(np.shape(out))
       for name in ("iota", "dim", "arg_reduce")},
    **{f"tile.{name}": _moved for name in ("broadcast", "slice", "concat", "reshape",
                                           "transpose")},
    "tile.cmp": _cmp_allowance,
    "tile.select": _select_allowance,
    "tile.cast": _cast_allowance,
    "tile.reduce": _reduce_allowance,
    "tile.softmax": _softmax_allowance,
    "tile.matmul": _matmul_allowance,
}


def _producer(value: Any, name: str) -> Any:
    """The op ``name`` that defines ``value``, through broadcasts; None when another op or a
    block argument does."""
    owner = value.owner
    while not isinstance(owner, ir.Block) and owner.operation.name == "tile.broadcast":
        owner = owner.operands[0].owner
    return None if isinstance(owner, ir.Block) or owner.operation.name != name else owner


def _normalize_operands(op: Any) -> list[Any] | None:
    """x, mean, var and eps of the ``(x - mean) * rsqrt(var + eps)`` that ``op`` ends."""
    centered = _producer(op.operands[0], "tile.sub")
    scale = _producer(op.operands[1], "tile.rsqrt")
    shifted = scale and _producer(scale.operands[0], "tile.add")
    if centered is None or shifted is None:
        return None
    return [*centered.operands, *shifted.operands]


def _builtin_allowance(op: Any, env: dict[Any, np.ndarray],
                       denv: dict[Any, np.ndarray]) -> np.ndarray | None:
    """The allowance of a composite built-in's value (``tile.builtin``), from the built-in's
    own operands by its row; None for any other op, or where its steps are not all in this
    block (the composed steps' allowance stands then)."""
    if op.operation.name != "tile.mul" or BUILTIN_ATTR not in op.attributes \
            or ir.StringAttr(op.attributes[BUILTIN_ATTR]).value != "normalize":
        return None
    operands = _normalize_operands(op)
    if operands is None or any(v not in env for v in operands):
        return None
    out = env[op.results[0]]
    xs = [np.broadcast_to(env[v], out.shape) for v in operands]
    ds = [np.broadcast_to(denv[v], out.shape) for v in operands]
    return allowance.normalize(xs, ds, out)


def _grid_extents(ev: _Interpreter, func_op: Any) -> list[tuple[int, ...]]:
    """The extents of each grid entry (those of the leading dimensions for '...')."""
    kernel = ir.DictAttr(func_op.attributes[KERNEL_ATTR])
    return [ev.binding.lead or () if d == "..." else (ev.dim(d, func_op),)
            for d in _strings(kernel["grid"])]


def _run_body(ev: _Interpreter, func_op: Any, values: list[Any]) -> list[np.ndarray]:
    """A tensor-level body once, or a kernel-level body once per grid point."""
    block = func_op.regions[0].blocks[0]
    if KERNEL_ATTR not in func_op.attributes:
        return ev.block(block, values)
    outs: list[np.ndarray] = []
    for point in itertools.product(*(np.ndindex(*e) for e in _grid_extents(ev, func_op))):
        ev.point = point
        outs = ev.block(block, values)
    if not outs:   # an empty grid writes nothing: outputs of the declared (empty) shape
        outs = [np.zeros(ev.shape(tensor_info(t), func_op), dtype=STORAGE[tensor_info(t).dtype])
                for t in func_op.type.results]
    return outs


def find_function(module: ir.Module, func_name: str) -> Any:
    """The ``func.func`` named ``func_name``; ReferenceError naming the ones there are."""
    names = []
    for op in module.body.operations:
        if op.operation.name == "func.func":
            name = ir.StringAttr(op.attributes["sym_name"]).value
            if name == func_name:
                return op
            names.append(name)
    raise ReferenceError(f"no function '{func_name}' in the module; it has: {', '.join(names)}")


@dataclass(frozen=True)
class Dispatch:
    """A function's entry in the module's ``tile.dispatch`` table (see tilec.dialect)."""

    generic: str                                    # "" when the generic function was dropped
    variants: tuple[tuple[str, dict[str, int]], ...]  # (function, binding)


def dispatch_entry(module: ir.Module, func_name: str) -> Dispatch | None:
    """``func_name``'s entry in the module's dispatch table; None when it has none."""
    attrs = module.operation.attributes
    if DISPATCH_ATTR not in attrs or func_name not in ir.DictAttr(attrs[DISPATCH_ATTR]):
        return _front_end_variants(module, func_name)
    entry = ir.DictAttr(attrs[DISPATCH_ATTR])[func_name]
    variants = tuple((v["fn"].value, {b.name: b.attr.value for b in v["binding"]})
                     for v in entry["variants"])
    return Dispatch(entry["generic"].value, variants)


def _front_end_variants(module: ir.Module, func_name: str) -> Dispatch | None:
    """Before tile-shape-template: the variants the front end made of ``func_name`` (a
    run-time broadcast's other direction), which the generic function cannot serve."""
    variants = tuple(
        (ir.StringAttr(op.attributes["sym_name"]).value,
         {b.name: b.attr.value for b in ir.DictAttr(op.attributes[BINDING_ATTR])})
        for op in module.body.operations
        if op.operation.name == "func.func" and VARIANT_OF_ATTR in op.attributes
        and ir.StringAttr(op.attributes[VARIANT_OF_ATTR]).value == func_name)
    return Dispatch(func_name, variants) if variants else None


def _dispatch(module: ir.Module, func_name: str, entry: Dispatch,
              values: Sequence[np.ndarray]) -> Any:
    """The function that serves a call: the variant whose binding equals the symbols bound
    from the arguments, else the generic function."""
    if entry.generic:
        generic = find_function(module, entry.generic)
        symbols = bind_symbols(generic, values)
        for fn, binding in entry.variants:
            if all(symbols.get(s) == v for s, v in binding.items()):
                return find_function(module, fn)
        return generic
    # without the generic signature the binding is checked against each variant's, where the
    # bound symbols are constants
    for fn, _ in entry.variants:
        variant = find_function(module, fn)
        try:
            bind_shapes(variant, values)
        except ReferenceError:
            continue
        return variant
    bindings = "; ".join(", ".join(f"{s} = {v}" for s, v in b.items()) for _, b in entry.variants)
    raise ReferenceError(f"'{func_name}' has no variant for argument shapes "
                         f"{', '.join(str(np.shape(v)) for v in values)} (variants: {bindings}) "
                         "and no generic function (dropped by --no-generic)")


def run(module: ir.Module, func_name: str, /, *args: Any, **kwargs: Any) -> Any:
    """Evaluate func ``func_name`` of ``module`` on NumPy arrays / Python scalars.

    Positional or keyword args by parameter name (``tile.name`` arg attr); scalar params with
    ``tile.default`` may be omitted.  A function in the module's dispatch table runs the
    variant for its arguments' shapes.  Returns one np.ndarray for a single result, a tuple
    for several."""
    return _run(module, func_name, args, kwargs)


def allowed(module: ir.Module, func_name: str, /, *args: Any,
            **kwargs: Any) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """The results :func:`run` gives (always a tuple) and the rounding allowance of each
    (float64 arrays of the results' shapes, :mod:`.allowance`): a float32 kernel's result
    agrees with the reference where ``|got - want| <= atol + rtol * |want| + allowance``
    (:func:`tilec.harness.numerics.compare`).  The arguments carry none."""
    return _run(module, func_name, args, kwargs, track=True)


def _run(module: ir.Module, func_name: str, args: tuple[Any, ...], kwargs: dict[str, Any],
         track: bool = False) -> Any:
    entry = dispatch_entry(module, func_name)
    abi = func_name if entry is None else entry.generic or entry.variants[0][0]
    func_op = find_function(module, abi)  # every variant has the generic's parameters
    ps = params_of(func_op, UNNAMED)
    with np.errstate(all="ignore"):  # inf and NaN are values like any other, as in a kernel
        values = [_argument(p, a) for p, a in zip(ps, _arguments(ps, args, kwargs))]
        if entry is not None:
            func_op = _dispatch(module, func_name, entry, values)
        interpreter = _Interpreter(bind_shapes(func_op, values), module, track)
        outs = _run_body(interpreter, func_op, values)
        if len(outs) != len(func_op.type.results):
            raise ReferenceError(f"internal: {func_name} returns {len(outs)} values for "
                                 f"{len(func_op.type.results)} results")
        dtypes = [tensor_info(t).dtype for t in func_op.type.results]
        results = tuple(to_dtype(v, dtype) for v, dtype in zip(outs, dtypes))
        if track:   # the return rounds: either neighbour where the allowance reaches across
            return results, tuple(allowance.rounded(v.astype(np.float64), d, dtype, dtype)
                                  for v, d, dtype in zip(outs, interpreter.allowances, dtypes))
    return results[0] if len(results) == 1 else results
