"""What every backend's kernel lowering shares: one row of a kernel-level function as lazy values.

In: a ``func.func`` marked ``tile.kernel`` (made by tile-kernel), whose body describes ONE row
of the kernel's grid.  Out: nothing by itself; :class:`RowLowering` walks the body and turns
every tile value into a :mod:`lazy value <.values>` (views of memory, splats, element-wise
maps, concatenations), leaving to a backend subclass how elements are traversed (a loop nest
on the CPU, threads on the GPU), where scratch buffers live, and how reductions and matmul
run.  Element types in registers: f32 for every float type (rounded at an explicit
``tile.cast``), i32, i1 masks; float16/bfloat16 are widened on load and narrowed on store.

A value is materialised (written to scratch) when it is read more than once (two consumers,
or a consumer that reads it twice: var, softmax, the right side of a matmul with rows) AND it
contains a transcendental op; cheap values are recomputed.  ``tile.check`` is the host's
business and ``tile.hint`` has no effect on a row.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

from ...diagnostics import TilecError
from ...dialect.locations import span_of
from ...dialect import KERNEL_ATTR
from ...dialect.ops import ELEMENTWISE_OPS
from ...dialect.types import TensorInfo, tensor_info
from ...dims import Dim, parse_dim
from ...mlir import arith, ir, scf
from .layout import IotaRow, LayoutOps, grid_dim, ints, shape_of, strings
from .scalar import (Num, bitcast, const, f32, i16, i32, i64, index, select, to_float, to_int,
                     zero_extend)
from .values import (ONE, ZERO, Concat, Lazy, Map, Splat, View, compute_kind, is_ramp,
                     map_sizes, numel, reindex, row_major)

STORAGE = {"float16": ir.F16Type.get, "bfloat16": ir.BF16Type.get, "float32": f32,
           "int32": i32}
SCRATCH = {"f32": "float32", "i32": "int32"}


def argument_storage(info: TensorInfo) -> str:
    """Element type of an argument's buffer: a scalar of any float type comes as float32."""
    if info.shape == () and info.dtype != "int32":
        return "float32"
    return info.dtype


def grid_point(row: Num, extents: Sequence[Num]) -> list[Num]:
    """The coordinates of flattened (row-major) grid row ``row``."""
    point: list[Num] = []
    rest = row
    for j in reversed(range(1, len(extents))):
        point.insert(0, rest % extents[j])
        rest = rest // extents[j]
    return [rest] + point


def next_grid_point(coords: list[Num], extents: list[Num]) -> list[Num]:
    """The grid point after ``coords`` in row-major order."""
    out = coords[:-1] + [coords[-1] + 1]
    for j in reversed(range(1, len(coords))):
        wrap = out[j].eq(extents[j])
        out[j] = select(wrap, 0, out[j])
        out[j - 1] = select(wrap, coords[j - 1] + 1, coords[j - 1])
    return out


def kernel_target(op: Any) -> Optional[str]:
    """The target of a kernel function (``tile.kernel``), None for any other op."""
    if op.operation.name != "func.func" or KERNEL_ATTR not in op.attributes:
        return None
    return ir.StringAttr(ir.DictAttr(op.attributes[KERNEL_ATTR])["target"]).value


# ---------------------------------------------------------------------------------------------
# Element types in registers


def round_to(x: Num, dtype: str) -> Num:
    """An f32 value rounded to ``dtype`` (to nearest even) and widened back."""
    if dtype == "float16":
        return to_float(to_float(x, ir.F16Type.get()), f32())
    if dtype == "bfloat16":
        return bitcast(_bfloat16_bits(x) << 16, f32())
    return x


def _bfloat16_bits(x: Num) -> Num:
    """The bfloat16 nearest to f32 ``x`` (ties to even; NaN stays a quiet NaN) as the low 16
    bits of an i32."""
    bits = bitcast(x, i32())
    rounded = (bits + 0x7FFF + (bits.shr_unsigned(16) & 1)).shr_unsigned(16)
    return select(x.is_nan(), 0x7FC0, rounded)


def widen(x: Num, storage: str) -> Num:
    """A loaded element in registers (f32, or i32)."""
    if storage == "float16":
        return to_float(x, f32())
    if storage == "bfloat16":
        return bitcast(zero_extend(bitcast(x, i16()), i32()) << 16, f32())
    return x


def narrow(x: Num, storage: str) -> Num:
    """A value in registers as an element of a ``storage`` buffer."""
    if storage == "float16":
        return to_float(x, ir.F16Type.get())
    if storage == "bfloat16":
        return bitcast(to_int(_bfloat16_bits(x), i16()), ir.BF16Type.get())
    return x


def _cast(x: Num, source: str, target: str) -> Num:
    if target == "int32":
        return to_int(x, i32()) if source != "int32" else x
    if source == "int32":
        x = to_float(x, f32())
    return round_to(x, target)


UnaryTable = dict[str, Callable[[Num], Num]]
"""A backend's float32 unary functions by tile op name (exp, log, ..., sin, cos) and ``pow``
(two operands)."""

_BINARY: dict[str, Callable[[Num, Num], Num]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "max": lambda a, b: a.maximum(b),
    "min": lambda a, b: a.minimum(b),
}


def apply(op: str, args: Sequence[Num], dtype: str, source: str, unary: UnaryTable,
          power: Callable[[Num, Num], Num]) -> Num:
    """One element of a :class:`Map`: ``op`` on register values; ``source`` is the element
    type of the first operand (for casts); ``unary`` and ``power`` are the backend's math."""
    if op.startswith("cmp."):
        return args[0].cmp(op[len("cmp."):], args[1])
    if op == "select":
        return select(args[0], args[1], args[2])
    if op == "cast":
        return _cast(args[0], source, dtype)
    if op == "pow":
        return power(args[0], args[1])
    if len(args) == 2:
        return _BINARY[op](args[0], args[1])
    if op == "neg":   # the one unary op of int32
        return -args[0]
    return unary[op](args[0])


# ---------------------------------------------------------------------------------------------
# One row


class RowLowering(LayoutOps):
    """The backend-independent part of lowering one kernel: symbols and dimensions, the op
    handlers that build lazy values (the layout ones from :class:`.layout.LayoutOps`),
    materialisation, softmax and the var/mean reductions.  A subclass provides the frame
    and: ``read`` (one element of a view), ``write``, ``scratch``, ``copy``,
    ``full_reduction`` (one reduction kind over axes), ``matmul``, ``scalar_argument`` and
    the buffers ``arg_buffers`` / ``out_buffers``."""

    backend = "backend"

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        kernel = ir.DictAttr(fn.attributes[KERNEL_ATTR])
        self.name = ir.StringAttr(fn.attributes["sym_name"]).value
        self.grid = strings(kernel["grid"])
        self.symbols = strings(kernel["symbols"])
        self.inputs = [tensor_info(t) for t in fn.type.inputs]
        self.outputs = [tensor_info(t) for t in fn.type.results]
        self.rank_generic = any(i.rank_generic for i in self.inputs + self.outputs)
        self.values: dict[str, Num] = {}     # symbol -> its index value
        self.dims: dict[Dim, Num] = {}       # memo of dim()
        self.entry: Optional[ir.InsertionPoint] = None   # where row-invariant values go
        self.arg_buffers: list[Any] = []
        self.out_buffers: list[Any] = []
        self.coords: list[Num] = []          # the current grid point
        self.returned: list[Any] = []        # the tile values the kernel function returns
        self.env: dict[Any, Lazy] = {}
        self.reductions: dict[tuple, tuple[Lazy, Lazy]] = {}   # key -> (operand, result)

    def error(self, op: Any, message: str) -> TilecError:
        return TilecError(f"{self.backend} backend: {message}", span_of(op.location))

    # -- dimensions ----------------------------------------------------------------------------
    def dim(self, d: Dim) -> Num:
        """The index value of ``d``, computed once at ``self.entry``."""
        if d in self.dims:
            return self.dims[d]
        with self.entry:
            scale = math.lcm(*(c.denominator for c in d.terms.values())) if d.terms else 1
            total: Optional[Num] = None
            for monomial, c in d.terms.items():
                factors = [self.values[s] for s in monomial]
                if c * scale != 1 or not factors:
                    factors.insert(0, const(index(), int(c * scale)))
                term = factors[0]
                for f in factors[1:]:
                    term = term * f
                total = term if total is None else total + term
            value = const(index(), 0) if total is None else total
            value = value // scale if scale != 1 else value
        self.dims[d] = value
        return value

    def reciprocal_count(self, sizes: Sequence[Dim], axes: Sequence[int]) -> Num:
        return 1.0 / to_float(to_int(self.dim(numel([sizes[a] for a in axes])), i64()), f32())

    # -- the body ------------------------------------------------------------------------------
    def body(self) -> None:
        """Lower the ops of one row at the current insertion point."""
        block = self.fn.regions[0].blocks[0]
        for arg, info in zip(block.arguments, self.inputs):
            if info.shape == ():
                self.env[arg] = self.scalar_argument(ir.BlockArgument(arg).arg_number, info)
        ops = list(block.operations)
        self.returned = list(ops[-1].operands)
        for op in ops[:-1]:
            name = op.operation.name
            if name in ("tile.hint", "tile.check"):
                continue
            with op.location:
                value = self._lower(op, name)
            if value is not None:
                self.env[op.results[0]] = self.maybe_materialise(op.results[0], value)

    def _lower(self, op: Any, name: str) -> Optional[Lazy]:
        if name in _HANDLERS:
            return getattr(self, _HANDLERS[name])(op)
        if name.startswith("tile.") and name[len("tile."):] in ELEMENTWISE_OPS:
            return self.elementwise(op, name[len("tile."):])
        raise self.error(op, f"cannot lower '{name}'")

    def maybe_materialise(self, result: Any, value: Lazy) -> Lazy:
        if isinstance(value, (Map, Concat)) and value.expensive and self.reads(result) > 1:
            return self.in_memory(value)
        return value

    def reads(self, result: Any) -> int:
        """How many times the consumers of ``result`` read each of its elements."""
        owners: list[Any] = []
        for use in result.uses:
            owner = use.owner.operation
            if not any(owner == o for o in owners):
                owners.append(owner)
        return sum(self._weight(owner, result) for owner in owners)

    @staticmethod
    def _weight(consumer: Any, value: Any) -> int:
        name = consumer.name
        if name == "tile.hint":
            return 0
        if name == "tile.softmax":
            return 2
        if name == "tile.reduce" and ir.StringAttr(consumer.attributes["kind"]).value == "var":
            return 2
        if name == "tile.matmul" and consumer.operands[1] == value:
            return 2 if len(tensor_info(consumer.operands[0].type).shape) > 1 else 1
        return 1

    def fold(self, sizes: Sequence[Dim], init: Num,
             step: Callable[[list[Num], Num], Num]) -> Num:
        """``acc = step(indices, acc)`` over a sequential loop nest on ``sizes``, from ``init``."""
        def level(i: int, ivs: list[Num], acc: Num) -> Num:
            if i == len(sizes):
                return step(ivs, acc)
            if sizes[i] == ONE:
                return level(i + 1, ivs + [const(index(), 0)], acc)
            loop = scf.ForOp(const(index(), 0).value, self.dim(sizes[i]).value,
                             const(index(), 1).value, [acc.value])
            with ir.InsertionPoint(loop.body):
                out = level(i + 1, ivs + [Num(loop.induction_variable)],
                            Num(loop.inner_iter_args[0]))
                scf.YieldOp([out.value])
            return Num(loop.results[0])
        return level(0, [], init)

    def address(self, view: View, ivs: Sequence[Num]) -> Num:
        """The index, into its buffer, of the element of ``view`` at ``ivs``."""
        total: Optional[Num] = view.base
        terms = [] if view.offset == ZERO else [self.dim(view.offset)]
        for i, stride in zip(ivs, view.strides):
            if stride != ZERO:
                terms.append(i if stride == ONE else i * self.dim(stride))
        for t in terms:
            total = t if total is None else total + t
        return total if total is not None else const(index(), 0)

    # -- memory (the subclass decides how) -----------------------------------------------------
    def in_memory(self, x: Lazy) -> View:
        return x if isinstance(x, View) else self.copy(x)

    def readable(self, x: Lazy) -> Lazy:
        """``x``, or a copy in memory when it cannot be read element by element."""
        return self.in_memory(x) if isinstance(x, Concat) else x

    def reindexed(self, x: Lazy, sizes: Sequence[Dim], source: Sequence[Optional[int]],
                  starts: Optional[Sequence[Dim]] = None) -> Lazy:
        moved = reindex(x, sizes, source, starts)
        return moved if moved is not None else reindex(self.in_memory(x), sizes, source, starts)

    # -- global rows ---------------------------------------------------------------------------
    def row_base(self, op: Any, info: TensorInfo) -> Optional[Num]:
        """The index of the first element of the row of global tensor ``info`` at the current
        grid point (``axes`` of load_row/store_row: a grid-indexed axis of extent 1 is read
        at index 0); None for 0."""
        shape = shape_of(info)
        strides = row_major(shape)
        base: Optional[Num] = None
        for j, axis in enumerate(ints(op.attributes["axes"])):
            if axis < 0:
                continue
            stride = self._grid_stride(shape[axis], strides[axis], grid_dim(self.grid[j]))
            if stride is None:
                continue
            term = self.coords[j] * stride
            base = term if base is None else base + term
        return base

    def global_row(self, op: Any, buffer: Any, info: TensorInfo) -> View:
        """The view of the row of global tensor ``info`` at the current grid point."""
        shape = shape_of(info)
        strides = row_major(shape)
        axes = ints(op.attributes["axes"])
        kept = [a for a in range(len(shape)) if a not in axes]
        return View(buffer, info.dtype, self.row_base(op, info), ZERO,
                    tuple(shape[a] for a in kept), tuple(strides[a] for a in kept), info.dtype)

    def _grid_stride(self, extent: Dim, stride: Dim, grid_extent: Dim) -> Optional[Num]:
        if extent == ONE:
            return None
        if extent == grid_extent or extent.value is not None:
            return self.dim(stride)
        with self.entry:
            return select(self.dim(extent).eq(1), 0, self.dim(stride))

    # -- handlers ------------------------------------------------------------------------------
    def load_row(self, op: Any) -> Lazy:
        arg = op.operands[0]
        info = tensor_info(arg.type)
        view = self.global_row(op, self.arg_buffers[ir.BlockArgument(arg).arg_number], info)
        if view.sizes:
            return view
        return Splat(self.load(view, [], {}), (), view.dtype)

    def output_number(self, store: Any) -> int:
        """Which of the kernel's outputs the ``tile.store_row`` op ``store`` writes."""
        return next(i for i, v in enumerate(self.returned) if v == store.results[0])

    def store_row(self, op: Any) -> None:
        k = self.output_number(op)
        dest = self.global_row(op, self.out_buffers[k], self.outputs[k])
        self.write(self.lazy(op.operands[0]), dest)

    def constant(self, op: Any) -> Splat:
        info = self.result_info(op)
        value = op.attributes["value"]
        number = ir.FloatAttr(value).value if isinstance(value, ir.FloatAttr) else \
            ir.IntegerAttr(value).value
        kind = f32() if compute_kind(info.dtype) == "f32" else i32()
        return Splat(const(kind, number), (), info.dtype)

    def iota(self, op: Any) -> Lazy:
        """The row of a ``tile.iota`` at the current grid point: one value when its axis is
        a grid axis, else a :func:`~.values.ramp` along the row axis (as a Map, so that it is
        computed, never copied from memory)."""
        iota = IotaRow.of(op)
        sizes = tuple(shape_of(self.result_info(op)))
        g = iota.grid_axis()
        if g is None:
            return iota.ramp(sizes)
        here = self.coords[g] if g >= 0 else const(index(), 0)
        return Splat(to_int(here + self.dim(iota.start), i32()), sizes, "int32")

    def dim_value(self, op: Any) -> Splat:
        expr = parse_dim(ir.StringAttr(op.attributes["expr"]).value)
        return Splat(to_int(self.dim(expr), i32()), (), "int32")

    def elementwise(self, op: Any, name: str) -> Lazy:
        operands = [self.readable(self.lazy(v)) for v in op.operands]
        dtype = self.result_info(op).dtype
        if name == "pow":
            power = _small_power(operands[0], operands[1])
            if power is not None:
                return power
        if all(isinstance(x, Splat) for x in operands):
            value = self.apply(name, [x.value for x in operands], dtype, operands[0].dtype)
            return Splat(value, map_sizes(operands), dtype)
        return Map(name, tuple(operands), map_sizes(operands), dtype)

    def apply(self, op: str, args: Sequence[Num], dtype: str, source: str) -> Num:
        raise NotImplementedError

    def reshape_copy(self, x: Lazy, sizes: Sequence[Dim]) -> Lazy:
        view = x if isinstance(x, View) and x.is_row_major() else self.copy(x)
        return View(view.buffer, view.storage, view.base, view.offset, sizes, row_major(sizes),
                    view.dtype)

    def reduce(self, op: Any) -> Lazy:
        x = self.readable(self.lazy(op.operands[0]))
        rank = len(x.sizes)
        axes = sorted(rank + a for a in ints(op.attributes["axes"]))
        keepdims = bool(ir.BoolAttr(op.attributes["keepdims"]).value)
        kind = ir.StringAttr(op.attributes["kind"]).value
        return self.reduction(x, axes, kind, keepdims)

    def reduction(self, x: Lazy, axes: list[int], kind: str, keepdims: bool) -> Lazy:
        """``kind`` over ``axes`` of ``x``, computed once per row (a var reuses the mean of
        the same value): a Splat when one element results, else a view of scratch."""
        key = (id(x), tuple(axes), kind, keepdims)
        if key not in self.reductions:
            if kind == "var":
                mean = self.reduction(x, axes, "mean", keepdims=True)
                centred = Map("sub", (x, spread(mean, x.sizes, axes)), x.sizes, x.dtype)
                result = self.reduction(Map("mul", (centred, centred), x.sizes, x.dtype), axes,
                                        "mean", keepdims)
            else:
                result = self.full_reduction(x, axes, kind, keepdims)
            self.reductions[key] = (x, result)
        return self.reductions[key][1]

    def softmax(self, op: Any) -> Lazy:
        x = self.readable(self.lazy(op.operands[0]))
        axis = len(x.sizes) + int(ir.IntegerAttr(op.attributes["axis"]).value)
        top = spread(self.reduction(x, [axis], "max", True), x.sizes, [axis])
        shifted = Map("sub", (x, top), x.sizes, x.dtype)
        exps = self.in_memory(Map("exp", (shifted,), x.sizes, x.dtype))
        total = self.reduction(exps, [axis], "sum", True)
        if isinstance(total, Splat):
            inverse = Splat(1.0 / total.value, x.sizes, x.dtype)
            return Map("mul", (exps, inverse), x.sizes, x.dtype)
        return Map("div", (exps, spread(total, x.sizes, [axis])), x.sizes, x.dtype)

    # -- the subclass's part -------------------------------------------------------------------
    def scalar_argument(self, index: int, info: TensorInfo) -> Splat:
        raise NotImplementedError

    def load(self, x: Lazy, ivs: Sequence[Num], memo: dict[int, Num]) -> Num:
        """The element of ``x`` at ``ivs`` in registers; ``memo`` shares what one loop body
        already computed."""
        key = id(x)
        if key in memo:
            return memo[key]
        if isinstance(x, Splat):
            value = x.value
        elif is_ramp(x):
            value = to_int(self.address(x, ivs), i32())  # type: ignore[arg-type]
        elif isinstance(x, View):
            value = widen(self.read(x, ivs), x.storage)
        elif isinstance(x, Map):
            args = [self.load(v, ivs if v.sizes else [], memo) for v in x.operands]
            value = self.apply(x.op, args, x.dtype, x.operands[0].dtype)
        else:
            raise AssertionError("a concatenation is written to memory, never read lazily")
        memo[key] = value
        return value

    def read(self, view: View, ivs: Sequence[Num]) -> Num:
        """The element of ``view`` at ``ivs`` as stored (float16 as such)."""
        raise NotImplementedError

    def write(self, x: Lazy, dest: View) -> None:
        raise NotImplementedError

    def copy(self, x: Lazy) -> View:
        raise NotImplementedError

    def full_reduction(self, x: Lazy, axes: list[int], kind: str, keepdims: bool) -> Lazy:
        raise NotImplementedError

    def matmul(self, op: Any) -> Lazy:
        raise NotImplementedError


def spread(x: Lazy, sizes: Sequence[Dim], axes: Sequence[int]) -> Lazy:
    """A keepdims reduction ``x`` broadcast back over its reduced ``axes``."""
    moved = reindex(x, sizes, [None if a in axes else a for a in range(len(sizes))])
    assert moved is not None, "a reduction is never a concatenation"
    return moved


def reduced_sizes(sizes: Sequence[Dim], axes: Sequence[int], keepdims: bool) -> tuple[Dim, ...]:
    """The shape of a reduction's result."""
    return tuple(ONE if a in axes else d for a, d in enumerate(sizes)
                 if keepdims or a not in axes)


def _literal(x: Lazy) -> Optional[float]:
    """The value of a Splat made by ``tile.constant``."""
    if not isinstance(x, Splat):
        return None
    owner = x.value.value.owner
    if not isinstance(owner.opview, arith.ConstantOp) or not x.value.floating:
        return None
    return ir.FloatAttr(owner.attributes["value"]).value


def _small_power(base: Lazy, exponent: Lazy) -> Optional[Lazy]:
    """``pow(x, c)`` for a constant c in 1, 2, 3, -1 as multiplications (exact, or one
    rounding more, as NumPy's power is) instead of ``exp(c * log(x))``."""
    c = _literal(exponent)
    if c not in (1.0, 2.0, 3.0, -1.0):
        return None
    if c == 1.0:
        return base
    if c == -1.0:
        return Map("reciprocal", (base,), base.sizes, base.dtype)
    square = Map("mul", (base, base), base.sizes, base.dtype)
    return square if c == 2.0 else Map("mul", (square, base), base.sizes, base.dtype)


_HANDLERS: dict[str, str] = {
    "tile.load_row": "load_row",
    "tile.store_row": "store_row",
    "tile.constant": "constant",
    "tile.iota": "iota",
    "tile.dim": "dim_value",
    "tile.cmp": "op_cmp",
    "tile.broadcast": "op_broadcast",
    "tile.slice": "op_slice",
    "tile.transpose": "op_transpose",
    "tile.reshape": "op_reshape",
    "tile.concat": "op_concat",
    "tile.reduce": "reduce",
    "tile.softmax": "softmax",
    "tile.matmul": "matmul",
}

