"""Kernel-level tile functions -> scf/arith/math/memref functions with the CPU kernel ABI.

In: ``func.func`` ops marked ``tile.kernel`` (made by tile-kernel): a body describing ONE row of
the kernel's grid.  Out: for each, in a new module, ``func.func @NAME`` with
``llvm.emit_c_interface`` and the arguments

    (memref<?xT> per argument, memref<?xT> per result, memref<?xi64> dims,
     index row_begin, index row_end)

Buffers are flat, contiguous and row-major in the storage type of the tensor (a scalar
argument: one f32 for any float type, rounded here to its type, or one i32).  ``dims`` holds
the values of the kernel's ``tile.kernel.symbols`` in order, then, for a rank-generic kernel,
``n`` and the ``n`` extents that ``...`` stands for.  The function computes the rows
``[row_begin, row_end)`` of the grid flattened row-major.

How a row is computed: every tile value becomes a lazy value (:mod:`values`); nothing is
computed until a value must be in memory.  A ``store_row`` evaluates its value's whole tree in
one loop nest writing the output row; reductions, softmax and matmul read their operands
lazily and leave their result in a float32 (int32) scratch buffer or, for one element, in a
register.  A value is also written to scratch when it is read more than once (two consumers,
or a consumer that reads it twice: var, softmax, the right side of a matmul with rows) AND
it contains a transcendental op; cheap values are recomputed.  Scratch buffers are allocated
once per call before the row loop and reused by every row.  Arithmetic is float32 (int32);
float16/bfloat16 are widened on load, narrowed on store, and rounded in registers at an
explicit ``tile.cast``.  ``tile.check`` is the host's business (it knows the symbols before
any kernel runs) and ``tile.hint`` has no effect here.
"""
from __future__ import annotations

import math
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence

from ...diagnostics import TilecError
from ...dialect.locations import span_of
from ...dialect.types import TensorInfo, tensor_info
from ...dims import ELLIPSIS, Dim, parse_dim
from ...mlir import arith, func, ir, memref, scf
from . import mathlib
from .scalar import (Num, bitcast, const, f32, fabs, i16, i32, i64, index, multiply_add, select,
                     sqrt, to_float, to_int, zero_extend)
from .values import (LEAD, ONE, ZERO, Concat, Lazy, Map, Splat, View, compute_kind, map_sizes,
                     reindex, row_major, slice_part)

KERNEL_ATTR = "tile.kernel"
LEAD_DIM = Dim.sym(LEAD)

STORAGE = {"float16": ir.F16Type.get, "bfloat16": ir.BF16Type.get, "float32": f32,
           "int32": i32}
SCRATCH = {"f32": "float32", "i32": "int32"}


@dataclass(frozen=True)
class KernelSignature:
    """What the host needs to call one kernel (see the module docstring for the ABI)."""

    name: str
    inputs: tuple[str, ...]      # storage element type of each argument buffer
    outputs: tuple[str, ...]     # ... and of each result buffer
    symbols: tuple[str, ...]     # the values ``dims`` starts with
    rank_generic: bool           # whether ``dims`` continues with n and the ``...`` extents
    grid: tuple[str, ...]        # the grid's dimensions ("..." for the leading extents)

    @property
    def c_symbol(self) -> str:
        return f"_mlir_ciface_{self.name}"


def _shape(info: TensorInfo) -> tuple[Dim, ...]:
    return tuple(LEAD_DIM if d == ELLIPSIS else d for d in info.shape)


def _grid_dim(entry: str) -> Dim:
    return LEAD_DIM if entry == ELLIPSIS else parse_dim(entry)


def _argument_storage(info: TensorInfo) -> str:
    """Element type of an argument's buffer: a scalar of any float type comes as float32."""
    if info.shape == () and info.dtype != "int32":
        return "float32"
    return info.dtype


def _memref(storage: str) -> ir.Type:
    return ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], STORAGE[storage]())


def _strings(attr: Any) -> list[str]:
    return [ir.StringAttr(a).value for a in attr]


def _ints(attr: Any) -> list[int]:
    return [int(a) for a in attr]


def _error(op: Any, message: str) -> TilecError:
    return TilecError(f"cpu backend: {message}", span_of(op.location))


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


def _widen(x: Num, storage: str) -> Num:
    """A loaded element in registers (f32, or i32)."""
    if storage == "float16":
        return to_float(x, f32())
    if storage == "bfloat16":
        return bitcast(zero_extend(bitcast(x, i16()), i32()) << 16, f32())
    return x


def _narrow(x: Num, storage: str) -> Num:
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


_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)

_FLOAT_UNARY: dict[str, Callable[[Num], Num]] = {
    "exp": mathlib.exp,
    "log": mathlib.log,
    "sqrt": sqrt,
    "rsqrt": lambda x: 1.0 / sqrt(x),
    "abs": fabs,
    "reciprocal": lambda x: 1.0 / x,
    "sigmoid": mathlib.sigmoid,
    "tanh": mathlib.tanh,
    "relu": lambda x: x.maximum(0.0),
    "silu": lambda x: x * mathlib.sigmoid(x),
    "gelu": lambda x: x * 0.5 * (mathlib.erf(x * _SQRT_HALF) + 1.0),
    "gelu_tanh": lambda x: x * 0.5 * (
        mathlib.tanh((x * x * x * 0.044715 + x) * _SQRT_2_OVER_PI) + 1.0),
    "sin": mathlib.sin,
    "cos": mathlib.cos,
}
_BINARY: dict[str, Callable[[Num, Num], Num]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "max": lambda a, b: a.maximum(b),
    "min": lambda a, b: a.minimum(b),
    "pow": mathlib.pow,
}


def apply(op: str, args: Sequence[Num], dtype: str, source: str) -> Num:
    """One element of a :class:`Map`: ``op`` on register values; ``source`` is the element
    type of the first operand (for casts)."""
    if op.startswith("cmp."):
        return args[0].cmp(op[len("cmp."):], args[1])
    if op == "select":
        return select(args[0], args[1], args[2])
    if op == "cast":
        return _cast(args[0], source, dtype)
    if len(args) == 2:
        return _BINARY[op](args[0], args[1])
    if op == "neg":   # the one unary op of int32
        return -args[0]
    return _FLOAT_UNARY[op](args[0])


# ---------------------------------------------------------------------------------------------
# One kernel


class _Kernel:
    """Builds the function of one kernel; see the module docstring."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        kernel = ir.DictAttr(fn.attributes[KERNEL_ATTR])
        self.name = ir.StringAttr(fn.attributes["sym_name"]).value
        self.grid = _strings(kernel["grid"])
        self.symbols = _strings(kernel["symbols"])
        self.inputs = [tensor_info(t) for t in fn.type.inputs]
        self.outputs = [tensor_info(t) for t in fn.type.results]
        self.rank_generic = any(i.rank_generic for i in self.inputs + self.outputs)
        self.signature = KernelSignature(
            self.name, tuple(_argument_storage(i) for i in self.inputs),
            tuple(i.dtype for i in self.outputs), tuple(self.symbols), self.rank_generic,
            tuple(self.grid))
        self.values: dict[str, Num] = {}     # symbol -> its index value
        self.dims: dict[Dim, Num] = {}       # memo of dim()
        self.entry: Optional[ir.InsertionPoint] = None   # where loop-invariant values go
        self.arg_buffers: list[ir.Value] = []
        self.out_buffers: list[ir.Value] = []
        self.deallocs: list[ir.Value] = []
        self.coords: list[Num] = []          # the current grid point
        self.returned: list[Any] = []        # the tile values the kernel function returns
        self.env: dict[Any, Lazy] = {}
        self.reductions: dict[tuple, tuple[Lazy, Lazy]] = {}   # key -> (operand, result)

    # -- function frame -------------------------------------------------------------------------
    def build(self) -> None:
        buffers = [_memref(s) for s in self.signature.inputs + self.signature.outputs]
        dims_type = ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], i64())
        ftype = ir.FunctionType.get(buffers + [dims_type, index(), index()], [])
        with self.fn.location:
            fn = func.FuncOp(self.name, ftype)
            fn.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
            block = fn.add_entry_block()
            args = list(block.arguments)
            n_in = len(self.inputs)
            self.arg_buffers = args[:n_in]
            self.out_buffers = args[n_in:n_in + len(self.outputs)]
            dims_buffer, row_begin, row_end = args[-3:]
            with ir.InsertionPoint(block):
                self.entry = ir.InsertionPoint(block)
                self._bind_symbols(dims_buffer)
                self._row_loop(Num(row_begin), Num(row_end))
                for buf in self.deallocs:
                    memref.dealloc(buf)
                func.ReturnOp([])

    def _bind_symbols(self, dims_buffer: ir.Value) -> None:
        for k, name in enumerate(self.symbols):
            self.values[name] = self._dims_entry(dims_buffer, const(index(), k))
        if not self.rank_generic:
            return
        first = len(self.symbols)
        n = self._dims_entry(dims_buffer, const(index(), first))
        lo = const(index(), first + 1)
        loop = scf.ForOp(lo.value, (lo + n).value, const(index(), 1).value,
                         [const(index(), 1).value])
        with ir.InsertionPoint(loop.body):
            extent = self._dims_entry(dims_buffer, Num(loop.induction_variable))
            scf.YieldOp([(Num(loop.inner_iter_args[0]) * extent).value])
        self.values[LEAD] = Num(loop.results[0])

    @staticmethod
    def _dims_entry(dims_buffer: ir.Value, k: Num) -> Num:
        return to_int(Num(memref.load(dims_buffer, [k.value])), index())

    def dim(self, d: Dim) -> Num:
        """The index value of ``d``, computed once before the row loop."""
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

    def _row_loop(self, row_begin: Num, row_end: Num) -> None:
        """``for row in [row_begin, row_end)`` with the grid point kept in ``self.coords``:
        found by division once, then advanced with carries."""
        extents = [self.dim(_grid_dim(g)) for g in self.grid]
        start: list[Num] = []
        rest = row_begin
        for j in reversed(range(1, len(extents))):
            start.insert(0, rest % extents[j])
            rest = rest // extents[j]
        start.insert(0, rest)
        carried = start if len(extents) > 1 else []
        one = const(index(), 1)
        loop = scf.ForOp(row_begin.value, row_end.value, one.value, [c.value for c in carried])
        self.entry = ir.InsertionPoint(loop.operation)
        with ir.InsertionPoint(loop.body):
            if carried:
                self.coords = [Num(c) for c in loop.inner_iter_args]
            elif extents:
                self.coords = [Num(loop.induction_variable)]
            self._body()
            scf.YieldOp([c.value for c in self._advance(self.coords, extents)] if carried else [])

    @staticmethod
    def _advance(coords: list[Num], extents: list[Num]) -> list[Num]:
        """The grid point after ``coords`` in row-major order."""
        out = coords[:-1] + [coords[-1] + 1]
        for j in reversed(range(1, len(coords))):
            wrap = out[j].eq(extents[j])
            out[j] = select(wrap, 0, out[j])
            out[j - 1] = select(wrap, coords[j - 1] + 1, coords[j - 1])
        return out

    # -- loops and memory ----------------------------------------------------------------------
    @contextmanager
    def loops(self, sizes: Sequence[Dim]) -> Iterator[list[Num]]:
        """A loop nest over ``sizes`` (innermost last; no loop for a size-1 axis); inside it
        the insertion point is the innermost body and the value is the list of indices."""
        ivs: list[Num] = []
        with ExitStack() as stack:
            for d in sizes:
                if d == ONE:
                    ivs.append(const(index(), 0))
                    continue
                loop = scf.ForOp(const(index(), 0).value, self.dim(d).value,
                                 const(index(), 1).value)
                stack.enter_context(ir.InsertionPoint(loop.body))
                stack.callback(scf.YieldOp, [])
                ivs.append(Num(loop.induction_variable))
            yield ivs

    def fold(self, sizes: Sequence[Dim], init: Num,
             step: Callable[[list[Num], Num], Num]) -> Num:
        """``acc = step(indices, acc)`` over a loop nest on ``sizes``, from ``init``."""
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

    def scratch(self, sizes: Sequence[Dim], dtype: str) -> View:
        """A row-major scratch buffer in registers' precision, allocated before the row loop
        and freed after it."""
        storage = SCRATCH[compute_kind(dtype)]
        count = ONE
        for d in sizes:
            count = count * d
        n = self.dim(count)
        with self.entry:
            buf = memref.alloc(_memref(storage), [n.value], [], alignment=64)
        self.deallocs.append(buf)
        return View(buf, storage, None, ZERO, tuple(sizes), row_major(sizes), dtype)

    def address(self, view: View, ivs: Sequence[Num]) -> Num:
        total: Optional[Num] = view.base
        terms = [] if view.offset == ZERO else [self.dim(view.offset)]
        for i, stride in zip(ivs, view.strides):
            if stride != ZERO:
                terms.append(i if stride == ONE else i * self.dim(stride))
        for t in terms:
            total = t if total is None else total + t
        return total if total is not None else const(index(), 0)

    def load(self, x: Lazy, ivs: Sequence[Num], memo: dict[int, Num]) -> Num:
        """The element of ``x`` at ``ivs`` in registers; ``memo`` shares what one loop body
        already computed."""
        key = id(x)
        if key in memo:
            return memo[key]
        if isinstance(x, Splat):
            value = x.value
        elif isinstance(x, View):
            loaded = Num(memref.load(x.buffer, [self.address(x, ivs).value]))
            value = _widen(loaded, x.storage)
        elif isinstance(x, Map):
            args = [self.load(v, ivs if v.sizes else [], memo) for v in x.operands]
            value = apply(x.op, args, x.dtype, x.operands[0].dtype)
        else:
            raise AssertionError("a concatenation is written to memory, never read lazily")
        memo[key] = value
        return value

    def store(self, value: Num, dest: View, ivs: Sequence[Num]) -> None:
        memref.store(_narrow(value, dest.storage).value, dest.buffer,
                     [self.address(dest, ivs).value])

    def write(self, x: Lazy, dest: View) -> None:
        """Compute ``x`` into ``dest`` (a concatenation part by part)."""
        if isinstance(x, Concat):
            a, b = x.parts
            width = a.sizes[x.axis]
            self.write(a, slice_part(dest, x.axis, ZERO, width))
            self.write(b, slice_part(dest, x.axis, width, b.sizes[x.axis]))
            return
        with self.loops(dest.sizes) as ivs:
            self.store(self.load(x, ivs, {}), dest, ivs)

    def copy(self, x: Lazy) -> View:
        """``x`` computed into a new scratch buffer."""
        view = self.scratch(x.sizes, x.dtype)
        self.write(x, view)
        return view

    def in_memory(self, x: Lazy) -> View:
        return x if isinstance(x, View) else self.copy(x)

    def readable(self, x: Lazy) -> Lazy:
        """``x``, or a copy in memory when it cannot be read element by element."""
        return self.in_memory(x) if isinstance(x, Concat) else x

    def reindexed(self, x: Lazy, sizes: Sequence[Dim], source: Sequence[Optional[int]],
                  starts: Optional[Sequence[Dim]] = None) -> Lazy:
        moved = reindex(x, sizes, source, starts)
        return moved if moved is not None else reindex(self.in_memory(x), sizes, source, starts)

    # -- the body ------------------------------------------------------------------------------
    def _body(self) -> None:
        block = self.fn.regions[0].blocks[0]
        for arg, info in zip(block.arguments, self.inputs):
            if info.shape == ():
                self.env[arg] = self._scalar_argument(arg, info)
        ops = list(block.operations)
        self.returned = list(ops[-1].operands)
        for op in ops[:-1]:
            name = op.operation.name
            if name in ("tile.hint", "tile.check"):
                continue
            handler = _HANDLERS.get(name) or _ELEMENTWISE.get(name)
            if handler is None:
                raise _error(op, f"cannot lower '{name}'")
            with op.location:
                value = handler(self, op)
            if value is not None:
                self.env[op.results[0]] = self._maybe_materialise(op.results[0], value)

    def _scalar_argument(self, arg: Any, info: TensorInfo) -> Splat:
        buffer = self.arg_buffers[ir.BlockArgument(arg).arg_number]
        with self.entry:
            value = round_to(Num(memref.load(buffer, [const(index(), 0).value])), info.dtype)
        return Splat(value, (), info.dtype)

    def _maybe_materialise(self, result: Any, value: Lazy) -> Lazy:
        if isinstance(value, (Map, Concat)) and value.expensive and self._reads(result) > 1:
            return self.in_memory(value)
        return value

    def _reads(self, result: Any) -> int:
        """How many times the consumers of ``result`` read each of its elements."""
        owners: list[Any] = []
        for use in result.uses:
            owner = use.owner.operation
            if not any(owner == o for o in owners):
                owners.append(owner)
        return sum(self._weight(owner, result) for owner in owners)

    def _weight(self, consumer: Any, value: Any) -> int:
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

    def lazy(self, value: Any) -> Lazy:
        return self.env[value]

    def result_info(self, op: Any) -> TensorInfo:
        return tensor_info(op.results[0].type)

    # -- global rows ---------------------------------------------------------------------------
    def global_row(self, op: Any, buffer: ir.Value, info: TensorInfo) -> View:
        """The view of the row of global tensor ``info`` at the current grid point (``axes``
        of load_row/store_row: a grid-indexed axis of extent 1 is read at index 0)."""
        shape = _shape(info)
        strides = row_major(shape)
        axes = _ints(op.attributes["axes"])
        base: Optional[Num] = None
        for j, axis in enumerate(axes):
            if axis < 0:
                continue
            stride = self._grid_stride(shape[axis], strides[axis], _grid_dim(self.grid[j]))
            if stride is None:
                continue
            term = self.coords[j] * stride
            base = term if base is None else base + term
        kept = [a for a in range(len(shape)) if a not in axes]
        return View(buffer, info.dtype, base, ZERO, tuple(shape[a] for a in kept),
                    tuple(strides[a] for a in kept), info.dtype)

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

    def store_row(self, op: Any) -> None:
        k = next(i for i, v in enumerate(self.returned) if v == op.results[0])
        dest = self.global_row(op, self.out_buffers[k], self.outputs[k])
        self.write(self.lazy(op.operands[0]), dest)

    def constant(self, op: Any) -> Splat:
        info = self.result_info(op)
        value = op.attributes["value"]
        number = ir.FloatAttr(value).value if isinstance(value, ir.FloatAttr) else \
            ir.IntegerAttr(value).value
        kind = f32() if compute_kind(info.dtype) == "f32" else i32()
        return Splat(const(kind, number), (), info.dtype)

    def elementwise(self, op: Any, name: str) -> Lazy:
        operands = [self.readable(self.lazy(v)) for v in op.operands]
        dtype = self.result_info(op).dtype
        if name == "pow":
            power = _small_power(operands[0], operands[1])
            if power is not None:
                return power
        if all(isinstance(x, Splat) for x in operands):
            value = apply(name, [x.value for x in operands], dtype, operands[0].dtype)
            return Splat(value, map_sizes(operands), dtype)
        return Map(name, tuple(operands), map_sizes(operands), dtype)

    def cmp(self, op: Any) -> Lazy:
        return self.elementwise(op, "cmp." + ir.StringAttr(op.attributes["predicate"]).value)

    def broadcast(self, op: Any) -> Lazy:
        x = self.lazy(op.operands[0])
        sizes = _shape(self.result_info(op))
        k = len(sizes) - len(x.sizes)
        source = [None if j < k or (x.sizes[j - k] == ONE and sizes[j] != ONE) else j - k
                  for j in range(len(sizes))]
        return self.reindexed(x, sizes, source)

    def slice(self, op: Any) -> Lazy:
        x = self.lazy(op.operands[0])
        starts = [parse_dim(s) for s in _strings(op.attributes["starts"])]
        k = len(x.sizes) - len(starts)
        return self.reindexed(x, _shape(self.result_info(op)), range(len(x.sizes)),
                              [ZERO] * k + starts)

    def transpose(self, op: Any) -> Lazy:
        x = self.lazy(op.operands[0])
        perm = _ints(op.attributes["perm"])
        k = len(x.sizes) - len(perm)
        return self.reindexed(x, _shape(self.result_info(op)),
                              list(range(k)) + [k + p for p in perm])

    def reshape(self, op: Any) -> Lazy:
        x = self.lazy(op.operands[0])
        sizes = _shape(self.result_info(op))
        old = [a for a, d in enumerate(x.sizes) if d != ONE]
        new = [j for j, d in enumerate(sizes) if d != ONE]
        if [x.sizes[a] for a in old] == [sizes[j] for j in new]:
            source: list[Optional[int]] = [None] * len(sizes)
            for a, j in zip(old, new):
                source[j] = a
            return self.reindexed(x, sizes, source)
        view = x if isinstance(x, View) and x.is_row_major() else self.copy(x)
        return View(view.buffer, view.storage, view.base, view.offset, sizes, row_major(sizes),
                    view.dtype)

    def concat(self, op: Any) -> Lazy:
        a, b = (self.lazy(v) for v in op.operands)
        sizes = _shape(self.result_info(op))
        axis = len(sizes) + int(ir.IntegerAttr(op.attributes["axis"]).value)
        return Concat((a, b), axis, sizes, self.result_info(op).dtype)

    def reduce(self, op: Any) -> Lazy:
        x = self.readable(self.lazy(op.operands[0]))
        rank = len(x.sizes)
        axes = sorted(rank + a for a in _ints(op.attributes["axes"]))
        keepdims = bool(ir.BoolAttr(op.attributes["keepdims"]).value)
        kind = ir.StringAttr(op.attributes["kind"]).value
        return self.reduction(x, axes, kind, keepdims)

    def reduction(self, x: Lazy, axes: list[int], kind: str, keepdims: bool) -> Lazy:
        """``kind`` over ``axes`` of ``x``: a Splat when one element results, else a view of a
        scratch buffer (a mean: that times 1/count, lazily).  Computed once per row (a var
        reuses the mean of the same value)."""
        key = (id(x), tuple(axes), kind, keepdims)
        if key not in self.reductions:
            self.reductions[key] = (x, self._reduction(x, axes, kind, keepdims))
        return self.reductions[key][1]

    def _reduction(self, x: Lazy, axes: list[int], kind: str, keepdims: bool) -> Lazy:
        if kind == "var":
            mean = self.reduction(x, axes, "mean", keepdims=True)
            centred = Map("sub", (x, _spread(mean, x.sizes, axes)), x.sizes, x.dtype)
            return self.reduction(Map("mul", (centred, centred), x.sizes, x.dtype), axes,
                                  "mean", keepdims)
        kept = [a for a in range(len(x.sizes)) if a not in axes]
        out_sizes = tuple(ONE if a in axes else d for a, d in enumerate(x.sizes)
                          if keepdims or a not in axes)
        combine, identity = _COMBINERS[kind]
        init = const(f32(), identity)
        if all(x.sizes[a] == ONE for a in kept):
            total = self.fold(x.sizes, init, lambda ivs, acc: combine(acc, self.load(x, ivs, {})))
            if kind == "mean":
                total = total * self._reciprocal_count(x, axes)
            return Splat(total, out_sizes, x.dtype)
        acc = self.scratch(tuple(x.sizes[a] for a in kept), x.dtype)
        last = kept[-1] + 1
        outer_reduced = any(a < last for a in axes)
        if outer_reduced:
            with self.loops(acc.sizes) as ivs:
                self.store(init, acc, ivs)
        with self.loops(x.sizes[:last]) as outer:
            kept_ivs = [outer[a] for a in kept]
            start = self.load(acc, kept_ivs, {}) if outer_reduced else init
            total = self.fold(x.sizes[last:], start,
                              lambda inner, a: combine(a, self.load(x, outer + inner, {})))
            self.store(total, acc, kept_ivs)
        source = [kept.index(a) if a in kept else None for a in range(len(x.sizes))
                  if keepdims or a not in axes]
        result = reindex(acc, out_sizes, source)
        if kind != "mean":
            return result
        scale = Splat(self._reciprocal_count(x, axes), (), x.dtype)
        return Map("mul", (result, scale), out_sizes, x.dtype)

    def _reciprocal_count(self, x: Lazy, axes: list[int]) -> Num:
        count = ONE
        for a in axes:
            count = count * x.sizes[a]
        return 1.0 / to_float(to_int(self.dim(count), i64()), f32())

    def softmax(self, op: Any) -> Lazy:
        x = self.readable(self.lazy(op.operands[0]))
        axis = len(x.sizes) + int(ir.IntegerAttr(op.attributes["axis"]).value)
        top = _spread(self.reduction(x, [axis], "max", True), x.sizes, [axis])
        shifted = Map("sub", (x, top), x.sizes, x.dtype)
        exps = self.in_memory(Map("exp", (shifted,), x.sizes, x.dtype))
        total = self.reduction(exps, [axis], "sum", True)
        if isinstance(total, Splat):
            inverse = Splat(1.0 / total.value, x.sizes, x.dtype)
            return Map("mul", (exps, inverse), x.sizes, x.dtype)
        return Map("div", (exps, _spread(total, x.sizes, [axis])), x.sizes, x.dtype)

    def matmul(self, op: Any) -> Lazy:
        """``[.., M, K] @ [.., K, N]`` (or a row ``[K] @ [K, N]``) into scratch: for each
        output row, k outside n so that the inner loop runs along contiguous rows."""
        lhs, rhs = (self.readable(self.lazy(v)) for v in op.operands)
        info = self.result_info(op)
        sizes = _shape(info)
        out = self.scratch(sizes, info.dtype)
        batch = len(rhs.sizes) - 2
        k_size, n_size = rhs.sizes[-2], rhs.sizes[-1]
        zero = const(f32(), 0.0)
        with self.loops(sizes[:-1]) as rows:
            batch_ivs = rows[:batch]
            with self.loops([n_size]) as (n,):
                self.store(zero, out, rows + [n])
            with self.loops([k_size]) as (k,):
                a = self.load(lhs, rows + [k], {})
                with self.loops([n_size]) as (n,):
                    b = self.load(rhs, batch_ivs + [k, n], {})
                    self.store(multiply_add(a, b, self.load(out, rows + [n], {})), out,
                               rows + [n])
        return out


def _spread(x: Lazy, sizes: Sequence[Dim], axes: Sequence[int]) -> Lazy:
    """A keepdims reduction ``x`` broadcast back over its reduced ``axes``."""
    moved = reindex(x, sizes, [None if a in axes else a for a in range(len(sizes))])
    assert moved is not None, "a reduction is never a concatenation"
    return moved


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


def _sum(a: Num, b: Num) -> Num:
    """``a + b`` that LLVM may reassociate, so that a sum over a loop vectorises."""
    return Num(arith.addf(a.value, b.value, fastmath=arith.FastMathFlags.reassoc))


# reduction kind -> (combining step, identity); the language reduces float values only
_COMBINERS: dict[str, tuple[Callable[[Num, Num], Num], float]] = {
    "sum": (_sum, 0.0),
    "mean": (_sum, 0.0),
    "max": (lambda a, b: a.maximum(b), -math.inf),
    "min": (lambda a, b: a.minimum(b), math.inf),
}


_HANDLERS: dict[str, Callable[[_Kernel, Any], Optional[Lazy]]] = {
    "tile.load_row": _Kernel.load_row,
    "tile.store_row": _Kernel.store_row,
    "tile.constant": _Kernel.constant,
    "tile.cmp": _Kernel.cmp,
    "tile.broadcast": _Kernel.broadcast,
    "tile.slice": _Kernel.slice,
    "tile.transpose": _Kernel.transpose,
    "tile.reshape": _Kernel.reshape,
    "tile.concat": _Kernel.concat,
    "tile.reduce": _Kernel.reduce,
    "tile.softmax": _Kernel.softmax,
    "tile.matmul": _Kernel.matmul,
}
_ELEMENTWISE: dict[str, Callable[[_Kernel, Any], Lazy]] = {
    f"tile.{name}": (lambda kernel, op, name=name: kernel.elementwise(op, name))
    for name in ("exp", "log", "sqrt", "rsqrt", "abs", "neg", "reciprocal", "sigmoid", "tanh",
                 "relu", "silu", "gelu", "gelu_tanh", "sin", "cos", "add", "sub", "mul", "div",
                 "max", "min", "pow", "select", "cast")
}


def is_cpu_kernel(op: Any) -> bool:
    """Whether ``op`` is a kernel function (``tile.kernel``) for the cpu target."""
    if op.operation.name != "func.func" or KERNEL_ATTR not in op.attributes:
        return False
    return ir.StringAttr(ir.DictAttr(op.attributes[KERNEL_ATTR])["target"]).value == "cpu"


def lower_kernels(module: ir.Module) -> tuple[ir.Module, list[KernelSignature]]:
    """A new module holding the ABI function of every cpu kernel of ``module``."""
    with module.context, ir.Location.unknown():
        out = ir.Module.create()
        signatures = []
        with ir.InsertionPoint(out.body):
            for op in module.body.operations:
                if is_cpu_kernel(op):
                    kernel = _Kernel(op)
                    kernel.build()
                    signatures.append(kernel.signature)
    return out, signatures
