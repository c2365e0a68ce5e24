"""Kernel-level tile functions -> Ascend C vector kernels (one class and one entry each).

In: a ``func.func`` marked ``tile.kernel`` (target ascend), whose body describes ONE row of a
grid.  Out: :class:`KernelSource`: the C++ of its tiling struct, kernel class and
``extern "C" __global__ __aicore__`` entry, and what the host needs to launch it.

How a kernel runs.  The grid's rows are split over the AI cores in contiguous ranges
(``GetBlockIdx()``/``GetBlockNum()``).  Every tile value becomes a lazy value (views of global
memory, scalars, element-wise maps, concatenations; :mod:`tilec.codegen.common.values`) and
nothing is computed until a value must be: a ``store_row`` streams its value's whole tree
through the Unified Buffer in chunks of ``CHUNK`` elements (the "tile", sized from the UB
budget by :mod:`.plan`): copy-in of every leaf through a ``TQue<VECIN, 2>`` (two buffers:
double buffering), the element-wise instructions of the tree on ``VECCALC`` slots
(:mod:`.vector`), and copy-out through a ``TQue<VECOUT, 2>``.  ``DataCopy`` moves 32-byte
multiples, ``DataCopyPad`` the tails (``CopyIn``/``CopyOut`` in the preamble); a short inner
dimension is tiled as several rows per chunk, each padded to 16 elements in UB ("pitched").
A leaf read with inner stride 0 is one scalar per chunk (``ReadScalar``), any other stride is
gathered (``Gather``: one DataCopyPad of one element per 32-byte block, then scalar moves).

Reductions to one value per row end in a scalar register (``ReduceSum``/``ReduceMax``/
``ReduceMin`` per chunk, then the V->S flag before ``GetValue``); other reductions, matmul
(on the vector unit: one multiply-add of a row of the right side per element of the left),
concatenations read by an op and reshapes that are no view are written to the kernel's global
workspace (per core), fenced by ``PipeBarrier<PIPE_ALL>``.  A kernel whose values need no such
scratch and whose global views step linearly with the row number runs its stores over the
rows of its core flattened with the row itself (several rows per chunk) instead of row by row.
A cache-hinted input's row that the grid reuses stays in UB (a ``TQue<VECIN, 1>``) until the
row changes (module :mod:`.residency`).
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Iterator, Optional, Sequence

from ...diagnostics import DiagnosticSink, TilecError
from ...dialect.locations import span_of
from ...dialect.types import TensorInfo, tensor_info
from ...dims import ELLIPSIS, Dim, parse_dim
from ...mlir import ir
from ..common.values import (ONE, ZERO, Concat, Lazy, Map, Splat, View, map_sizes, reindex,
                             row_major, slice_part)
from . import cxx
from .cxx import LEAD, Code, f32, i32
from .plan import GATHER, Plan, reduce_work_floats
from .source import render_kernel
from .vector import C_TYPE, Evaluator, Reg, Scalar, SlotPool, Vec, Vector, compute_kind

KERNEL_ATTR = "tile.kernel"
LEAD_DIM = Dim.sym(LEAD)
IDENTITY = {"sum": 0.0, "mean": 0.0, "max": -math.inf, "min": math.inf}
REDUCE_API = {"sum": "ReduceSum", "mean": "ReduceSum", "max": "ReduceMax", "min": "ReduceMin"}
COMBINE = {"sum": "{a} + {b}", "mean": "{a} + {b}", "max": "({b} > {a} ? {b} : {a})",
           "min": "({b} < {a} ? {b} : {a})"}
VECTOR_COMBINE = {"sum": "Add", "mean": "Add", "max": "Max", "min": "Min"}
SCALAR_COMBINE = {"sum": "Adds", "mean": "Adds", "max": "Maxs", "min": "Mins"}
SCALAR_OPS = {"add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / {1}",
              "max": "({1} > {0} ? {1} : {0})", "min": "({1} < {0} ? {1} : {0})",
              "neg": "-{0}"}
WRAPPING = {"add": "int32_t(uint32_t({0}) + uint32_t({1}))",
            "sub": "int32_t(uint32_t({0}) - uint32_t({1}))",
            "mul": "int32_t(uint32_t({0}) * uint32_t({1}))", "neg": "int32_t(0u - uint32_t({0}))"}
PREDICATES = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "int32": 4}
ELEMENTWISE = frozenset({"exp", "log", "sqrt", "rsqrt", "abs", "neg", "reciprocal", "sigmoid",
                         "tanh", "relu", "silu", "gelu", "gelu_tanh", "sin", "cos", "add",
                         "sub", "mul", "div", "max", "min", "pow", "select", "cast"})


def storage_kind(dtype: str) -> str:
    """The :class:`~.vector.Vec` kind of a buffer of ``dtype`` as loaded (not widened)."""
    return {"float32": "f32", "int32": "i32"}.get(dtype, dtype)


@dataclass(frozen=True)
class Gm:
    """A global tensor of the kernel: its ``GlobalTensor`` member and element type."""

    member: str
    dtype: str


@dataclass(frozen=True)
class Base:
    """The loop-dependent part of a view's offset: ``sum(var * stride)`` over ``terms``
    ``(var, stride, extent)``; a term with an ``extent`` counts 0 when that extent is 1 at run
    time (a dimension broadcast only then).  Grid coordinates are ``g0, g1, ...``."""

    terms: tuple[tuple[str, Dim, Optional[Dim]], ...] = ()

    def expr(self) -> str:
        parts = []
        for var, stride, extent in self.terms:
            term = cxx.times(var, stride)
            parts.append(f"({cxx.dim(extent)} == 1 ? 0 : {term})" if extent else term)
        return cxx.index(*parts)

    def plus(self, var: str, stride: Dim) -> "Base":
        return Base(self.terms + ((var, stride, None),)) if stride != ZERO else self


def view_key(v: View) -> tuple:
    """What identifies the elements of a view (two views with one key load once)."""
    return (v.buffer, v.base, v.offset, v.sizes, v.strides)


def shape_of(info: TensorInfo) -> tuple[Dim, ...]:
    """A tensor's dimensions, ``...`` as the one axis of extent :data:`LEAD_DIM`."""
    return tuple(LEAD_DIM if d == ELLIPSIS else d for d in info.shape)


def numel(sizes: Sequence[Dim]) -> Dim:
    total = ONE
    for d in sizes:
        total = total * d
    return total


def _strings(attr: Any) -> list[str]:
    return [ir.StringAttr(a).value for a in attr]


def _ints(attr: Any) -> list[int]:
    return [int(a) for a in attr]


def leaves(tree: Lazy) -> dict[tuple, View]:
    """The views a tree reads, by key."""
    found: dict[tuple, View] = {}

    def walk(x: Lazy) -> None:
        if isinstance(x, View):
            found.setdefault(view_key(x), x)
        elif isinstance(x, Map):
            for operand in x.operands:
                walk(operand)
        elif isinstance(x, Concat):
            for part in x.parts:
                walk(part)
    walk(tree)
    return found


def fix(x: Lazy, axes: Sequence[int], index: Sequence[str]) -> Lazy:
    """``x`` at loop variables ``index`` along ``axes`` (those axes gone)."""
    dropped = set(axes)
    sizes = tuple(d for a, d in enumerate(x.sizes) if a not in dropped)
    if isinstance(x, Splat):
        return replace(x, sizes=sizes)
    if isinstance(x, View):
        base = x.base if isinstance(x.base, Base) else Base()
        for a, var in zip(axes, index):
            base = base.plus(var, x.strides[a])
        return replace(x, base=base, sizes=sizes,
                       strides=tuple(s for a, s in enumerate(x.strides) if a not in dropped))
    if isinstance(x, Map):
        return replace(x, operands=tuple(v if not v.sizes else fix(v, axes, index)
                                         for v in x.operands), sizes=sizes)
    assert x.axis not in dropped, "a concatenation is never indexed along its axis"
    axis = x.axis - sum(1 for a in dropped if a < x.axis)
    parts = (fix(x.parts[0], axes, index), fix(x.parts[1], axes, index))
    return Concat(parts, axis, sizes, x.dtype)


def spread(x: Lazy, sizes: Sequence[Dim], axes: Sequence[int]) -> Lazy:
    """A keepdims reduction ``x`` broadcast back over its reduced ``axes``."""
    moved = reindex(x, sizes, [None if a in axes else a for a in range(len(sizes))])
    assert moved is not None, "a reduction is never a concatenation"
    return moved


def reshaped(x: Lazy, sizes: tuple[Dim, ...]) -> Optional[Lazy]:
    """``x`` in row-major order with new ``sizes``, when that is a view of it: a contiguous
    view, a scalar, or a map of those; None otherwise."""
    if isinstance(x, Splat):
        return replace(x, sizes=sizes)
    if isinstance(x, View):
        if not x.is_row_major():
            return None
        return replace(x, sizes=sizes, strides=row_major(sizes))
    if isinstance(x, Map):
        operands = [v if not v.sizes else reshaped(v, sizes) for v in x.operands]
        if any(v is None for v in operands):
            return None
        return replace(x, operands=tuple(operands), sizes=sizes)
    return None


def small_power(base: Lazy, exponent: Lazy) -> Optional[Lazy]:
    """``pow(x, c)`` for a literal c in 1, 2, 3, -1 as multiplications (exact, or one
    rounding more, as NumPy's power is)."""
    if not isinstance(exponent, Splat) or exponent.value not in ("1.0f", "2.0f", "3.0f",
                                                                "-1.0f"):
        return None
    c = exponent.value
    if c == "1.0f":
        return base
    if c == "-1.0f":
        return Map("reciprocal", (base,), base.sizes, base.dtype)
    square = Map("mul", (base, base), base.sizes, base.dtype)
    return square if c == "2.0f" else Map("mul", (square, base), base.sizes, base.dtype)


def describe(x: Lazy) -> str:
    """A short text of a tree, for comments in the generated code."""
    if isinstance(x, View):
        return x.buffer.member
    if isinstance(x, Splat):
        return x.value
    if isinstance(x, Map):
        return f"{x.op}({', '.join(describe(v) for v in x.operands)})"
    return f"concat({describe(x.parts[0])}, {describe(x.parts[1])})"


# ---------------------------------------------------------------------------------------------
# Traversals: a domain of axes, merged where every view is contiguous across them


@dataclass(frozen=True)
class Axis:
    """A loop of a traversal: indices ``start`` to ``start + extent`` (C++ expressions), its
    extent as a dimension when it is one."""

    extent: str
    size: Optional[Dim]
    start: str = "0"
    end: str = ""

    @property
    def stop(self) -> str:
        return self.end or (self.extent if self.start == "0" else f"{self.start} + {self.extent}")


@dataclass
class Domain:
    """Axes and, for every view (by key), its stride along each axis."""

    axes: list[Axis]
    strides: dict[tuple, list[Dim]]

    @staticmethod
    def of(sizes: Sequence[Dim], views: Sequence[View],
           flat: Optional[tuple[Axis, dict[tuple, Dim]]] = None) -> "Domain":
        axes = [Axis(cxx.dim(d), d) for d in sizes]
        strides = {view_key(v): list(v.strides) for v in views}
        if flat is not None:
            axes.insert(0, flat[0])
            for key, s in strides.items():
                s.insert(0, flat[1][key])
        return Domain(axes, strides).merged()

    def merged(self) -> "Domain":
        """Size-1 axes dropped; an axis folded into the next where every view steps over it
        exactly as over the next axis' whole extent."""
        keep = [k for k, a in enumerate(self.axes) if a.size != ONE]
        axes = [self.axes[k] for k in keep]
        strides = {key: [s[k] for k in keep] for key, s in self.strides.items()}
        k = 0
        while k + 1 < len(axes):
            outer, inner = axes[k], axes[k + 1]
            if inner.size is not None and inner.start == "0" and all(
                    s[k] == s[k + 1] * inner.size for s in strides.values()):
                size = outer.size * inner.size if outer.size is not None else None
                extent = cxx.dim(size) if size is not None else \
                    f"({outer.extent}) * {inner.extent}"
                start = "0" if outer.start == "0" else f"{outer.start} * {inner.extent}"
                end = f"{outer.end} * {inner.extent}" if outer.end else ""
                axes[k:k + 2] = [Axis(extent, size, start, end)]
                for s in strides.values():
                    s[k:k + 2] = [s[k + 1]]
            else:
                k += 1
        return Domain(axes, strides)


@dataclass
class Chunk:
    """One chunk of a traversal: the index expression of each axis, and the chunk's rows,
    row length, UB row pitch and element count (C++ expressions)."""

    index: list[str]
    rows: str = "1"
    length: str = "1"
    pitch: str = "0"
    count: str = "1"
    row_axis: Optional[int] = None      # the pitched axis, if any
    inner: Optional[int] = None         # the chunked axis, if any


@dataclass(frozen=True)
class KernelSource:
    """One kernel's C++ and what its host launcher needs."""

    name: str                    # the kernel function of the IR
    entry: str                   # the extern "C" symbol
    text: str                    # tiling struct, class and entry
    tiling: str                  # the tiling struct's name
    symbols: tuple[str, ...]     # the tiling's sym_* fields, in this order
    rank_generic: bool           # whether the tiling has ``lead``
    grid: tuple[str, ...]        # the grid's dimensions ("..." for the leading extents)
    workspace: Dim               # bytes of global scratch per core
    buffers: tuple[tuple[str, str], ...]   # (name, C++ bytes) of each GM argument
    chunk: int


@dataclass(frozen=True)
class Resident:
    """A reused row of a cache-hinted input kept in UB: ``size`` elements of ``dtype`` in
    the single buffer of queue ``resQ{index}`` (tensor ``res{index}``, its first element's
    global index ``resStart{index}``)."""

    index: int
    dtype: str
    size: Dim
    hint: str               # what it holds: the hinted name, or why it is kept
    hinted: bool            # first served of the UB kept for resident rows

    @property
    def bytes(self) -> Dim:
        return self.size * ELEMENT_BYTES[self.dtype]


class _Fallback(Exception):
    """Flattening rows with the row does not work for this kernel: go row by row."""


def cache_hints(fn: Any) -> dict[int, dict[str, Any]]:
    """The cache hint of each argument of a kernel, by position: from ``tile.cache_hints`` of
    its fused group, or (a function that is its own kernel, -O0) its ``arg_attrs``."""
    entries: list[Any] = []
    if "tile.fused" in fn.attributes:
        fused = ir.DictAttr(fn.attributes["tile.fused"])
        if "tile.cache_hints" in fused:
            entries = list(ir.ArrayAttr(fused["tile.cache_hints"]))
    elif "arg_attrs" in fn.attributes:
        entries = [ir.DictAttr(a)["tile.cache_hint"] if "tile.cache_hint" in ir.DictAttr(a)
                   else ir.DictAttr.get({}) for a in ir.ArrayAttr(fn.attributes["arg_attrs"])]
    hints = {}
    for k, entry in enumerate(entries):
        d = ir.DictAttr(entry)
        if "name" in d:
            hints[k] = {"name": ir.StringAttr(d["name"]).value,
                        "level": ir.StringAttr(d["level"]).value,
                        "resident": _strings(d["resident"]),
                        "reused_over": _strings(d["reused_over"])}
    return hints


# ---------------------------------------------------------------------------------------------
# One kernel


class AscendKernel:
    """Generates one kernel (see the module docstring)."""

    def __init__(self, fn: Any, budget: int, sink: DiagnosticSink) -> None:
        self.fn = fn
        self.budget = budget
        self.sink = sink
        kernel = ir.DictAttr(fn.attributes[KERNEL_ATTR])
        self.name = ir.StringAttr(fn.attributes["sym_name"]).value
        self.entry = f"tilec_{self.name}"
        self.grid = _strings(kernel["grid"])
        self.symbols = _strings(kernel["symbols"])
        self.inputs = [tensor_info(t) for t in fn.type.inputs]
        self.outputs = [tensor_info(t) for t in fn.type.results]
        self.rank_generic = any(i.rank_generic for i in self.inputs + self.outputs)
        self.span = span_of(fn.location)
        self.hints = cache_hints(fn)

    def grid_extent(self, j: int) -> Dim:
        return LEAD_DIM if self.grid[j] == ELLIPSIS else parse_dim(self.grid[j])

    def generate(self) -> KernelSource:
        """The kernel's source: rows and row flattened where that works (no reduction,
        softmax, matmul or reused cache-hinted input, every view linear in the row number),
        else row by row, keeping resident the rows of hinted inputs that the grid reuses and
        of inputs that several passes over one row read, unless they are known not to fit."""
        ops = {op.operation.name for op in self.fn.regions[0].blocks[0].operations}
        reused = any(h["reused_over"] for h in self.hints.values())
        flat = bool(self.grid) and not reused and \
            not ops & {"tile.reduce", "tile.softmax", "tile.matmul"}
        lowering = self._lower(flat, hints=True, keep=frozenset())
        reread = frozenset(key for key, passes in lowering.passes.items() if passes > 1)
        if reread:
            lowering = self._lower(flat, hints=True, keep=reread)
        room = lowering.plan.resident_budget(self.budget)
        hinted = [r for r in lowering.residents.values() if r.hinted]
        need = sum((r.bytes for r in hinted), ZERO)
        if need.value is not None and need.value > room:
            self.sink.warn(f"cache_hint({', '.join(sorted({r.hint for r in hinted}))}): the "
                           f"rows of kernel '{self.name}' it asks to keep take {need.value} "
                           f"bytes, more than the {room} bytes of UB it may keep resident (of "
                           f"{self.budget}); streaming them instead", self.span)
            lowering = self._lower(flat, hints=False, keep=reread)
        lowering.plan.choose_chunk(self.budget, self.span)
        buffers = tuple((pointer, f"{elements} * sizeof({C_TYPE[gm.dtype]})")
                        for gm, pointer, elements in lowering.globals)
        return KernelSource(self.name, self.entry, lowering.render(), f"{self.entry}_tiling",
                            tuple(self.symbols), self.rank_generic, tuple(self.grid),
                            lowering.workspace * 4, buffers, lowering.plan.chunk)


    def _lower(self, flat: bool, hints: bool, keep: frozenset[tuple]) -> "_Lowering":
        try:
            lowering = _Lowering(self, flat, hints, keep)
            lowering.run()
        except _Fallback:
            lowering = _Lowering(self, False, hints, keep)
            lowering.run()
        return lowering


class _Lowering:
    """The lazy values of one row and the code that materialises them."""

    def __init__(self, kernel: AscendKernel, flat: bool, hints: bool,
                 keep: frozenset[tuple]) -> None:
        self.k = kernel
        self.flat = flat
        self.use_hints = hints            # keep the rows of hinted inputs resident
        self.keep = keep                  # and these leaves (read by several passes)
        self.passes: dict[tuple, int] = {}      # input leaf -> traversals reading it
        self.plan = Plan(kernel.name)
        self.slots = SlotPool()
        self.masks = SlotPool()
        self.names = [0]
        self.counter = 0
        self.queues_used = 0
        self.prologue = Code()             # before the rows: row-invariant scalars
        self.body = Code()                 # one row (flat: every row of the core)
        self.gm_in: list[Gm] = []
        self.gm_out: list[Gm] = []
        self.globals: list[tuple[Gm, str, str]] = []     # (tensor, its pointer, elements)
        self.env: dict[Any, Lazy] = {}
        self.reductions: dict[tuple, Lazy] = {}
        self.workspace = ZERO              # 4-byte elements of scratch per core
        self.scratch: dict[str, Gm] = {}
        self.returned: list[Any] = []
        self.notes: list[str] = []         # said in the kernel's comment
        self.hinted: dict[Gm, dict[str, Any]] = {}     # cache-hinted inputs the grid reuses
        self.streamed: set[Gm] = set()        # hinted inputs too large to keep: never kept
        self.residents: dict[tuple, Resident] = {}

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    # -- set-up --------------------------------------------------------------------------------
    def run(self) -> None:
        k = self.k
        block = k.fn.regions[0].blocks[0]
        for i, info in enumerate(k.inputs):
            self.gm_in.append(Gm(f"gmIn{i}", info.dtype))
            self.globals.append((self.gm_in[-1], f"in{i}", cxx.dim(numel(shape_of(info)))))
        for r, info in enumerate(k.outputs):
            self.gm_out.append(Gm(f"gmOut{r}", info.dtype))
            self.globals.append((self.gm_out[-1], f"out{r}", cxx.dim(numel(shape_of(info)))))
        for arg, info, gm in zip(block.arguments, k.inputs, self.gm_in):
            if info.shape == ():
                self.env[arg] = Splat(self.read_scalar(self.prologue, gm, "0"), (), info.dtype)
        self.hint_notes()
        ops = list(block.operations)
        self.returned = list(ops[-1].operands)
        for op in ops[:-1]:
            name = op.operation.name
            if name in ("tile.hint", "tile.check"):
                continue
            with op.location:
                value = self._lower(op, name)
            if value is not None:
                self.env[op.results[0]] = value
        self.plan.slots = self.slots.peak
        self.plan.masks = self.masks.peak
        self.plan.residents = [f"res{r.index} ({r.hint}) {r.bytes} B"
                               for r in self.residents.values()]

    def hint_notes(self) -> None:
        """The inputs whose rows stay resident, and what the comment says of every hint."""
        for k, hint in sorted(self.k.hints.items()):
            what = f"cache_hint({hint['name']}, {hint['level']}) on input {k}"
            if not hint["reused_over"]:
                self.notes.append(f"{what}: no grid dimension reuses it: streamed once per row")
            elif not self.use_hints:
                self.streamed.add(self.gm_in[k])
                self.notes.append(f"{what}: too large to keep in UB: streamed")
            else:
                self.hinted[self.gm_in[k]] = hint
                self.notes.append(f"{what}: its row stays in UB while the row does not change "
                                  f"(reused over {', '.join(hint['reused_over'])}) and fits")

    def scratch_gm(self, kind: str) -> Gm:
        """The core's workspace as a GlobalTensor of float (f32) or int32_t (i32)."""
        if kind not in self.scratch:
            self.scratch[kind] = Gm("wsF" if kind == "f32" else "wsI",
                                    "float32" if kind == "f32" else "int32")
        return self.scratch[kind]

    # -- op handlers ---------------------------------------------------------------------------
    def _lower(self, op: Any, name: str) -> Optional[Lazy]:
        short = name[len("tile."):]
        handler = getattr(self, f"op_{short}", None)
        if handler is not None:
            return handler(op)
        if short in ELEMENTWISE:
            return self.elementwise(op, short)
        raise TilecError(f"ascend backend: cannot lower '{name}'", span_of(op.location))

    def lazy(self, value: Any) -> Lazy:
        return self.env[value]

    @staticmethod
    def result_info(op: Any) -> TensorInfo:
        return tensor_info(op.results[0].type)

    def op_load_row(self, op: Any) -> Lazy:
        index = ir.BlockArgument(op.operands[0]).arg_number
        view = self.global_row(op, self.gm_in[index], self.k.inputs[index])
        if view.sizes:
            return view
        return Splat(self.read_scalar(self.body, view.buffer, self.address(view, [])), (),
                     view.dtype)

    def op_store_row(self, op: Any) -> None:
        r = next(i for i, v in enumerate(self.returned) if v == op.results[0])
        self.write(self.lazy(op.operands[0]),
                   self.global_row(op, self.gm_out[r], self.k.outputs[r]))

    def global_row(self, op: Any, gm: Gm, info: TensorInfo) -> View:
        """The view of the row of global tensor ``info`` at the current grid point (``axes``
        of load_row/store_row: a grid-indexed axis of extent 1 is read at index 0)."""
        shape = shape_of(info)
        strides = row_major(shape)
        axes = _ints(op.attributes["axes"])
        terms = []
        for j, axis in enumerate(axes):
            if axis < 0 or shape[axis] == ONE:
                continue
            certain = shape[axis] == self.k.grid_extent(j) or shape[axis].value is not None
            terms.append((f"g{j}", strides[axis], None if certain else shape[axis]))
        kept = [a for a in range(len(shape)) if a not in axes]
        return View(gm, info.dtype, Base(tuple(terms)), ZERO, tuple(shape[a] for a in kept),
                    tuple(strides[a] for a in kept), info.dtype)

    def op_constant(self, op: Any) -> Splat:
        info = self.result_info(op)
        value = op.attributes["value"]
        if isinstance(value, ir.FloatAttr):
            return Splat(f32(ir.FloatAttr(value).value), (), info.dtype)
        number = ir.IntegerAttr(value).value
        return Splat(f32(number) if compute_kind(info.dtype) == "f32" else i32(number), (),
                     info.dtype)

    def elementwise(self, op: Any, name: str) -> Lazy:
        operands = [self.readable(self.lazy(v)) for v in op.operands]
        dtype = self.result_info(op).dtype
        x = operands[0]
        if name == "cast" and x.dtype != "int32" and dtype == "float32" and not (
                isinstance(x, Map) and x.op == "cast"):
            return replace(x, dtype=dtype)      # values are float32 already: nothing to do
        if name == "pow":
            power = small_power(operands[0], operands[1])
            if power is not None:
                return power
        if all(isinstance(x, Splat) for x in operands):
            return Splat(self.scalar_op(name, operands, dtype), map_sizes(operands), dtype)
        return Map(name, tuple(operands), map_sizes(operands), dtype)

    def op_cmp(self, op: Any) -> Lazy:
        return self.elementwise(op, "cmp." + ir.StringAttr(op.attributes["predicate"]).value)

    def op_broadcast(self, op: Any) -> Lazy:
        x = self.lazy(op.operands[0])
        sizes = shape_of(self.result_info(op))
        k = len(sizes) - len(x.sizes)
        source = [None if j < k or (x.sizes[j - k] == ONE and sizes[j] != ONE) else j - k
                  for j in range(len(sizes))]
        return self.reindexed(x, sizes, source)

    def op_slice(self, op: Any) -> Lazy:
        x = self.lazy(op.operands[0])
        starts = [parse_dim(s) for s in _strings(op.attributes["starts"])]
        k = len(x.sizes) - len(starts)
        return self.reindexed(x, shape_of(self.result_info(op)), range(len(x.sizes)),
                              [ZERO] * k + starts)

    def op_transpose(self, op: Any) -> Lazy:
        x = self.lazy(op.operands[0])
        perm = _ints(op.attributes["perm"])
        k = len(x.sizes) - len(perm)
        return self.reindexed(x, shape_of(self.result_info(op)),
                              list(range(k)) + [k + p for p in perm])

    def op_reshape(self, op: Any) -> Lazy:
        x = self.lazy(op.operands[0])
        sizes = shape_of(self.result_info(op))
        old = [a for a, d in enumerate(x.sizes) if d != ONE]
        new = [j for j, d in enumerate(sizes) if d != ONE]
        if [x.sizes[a] for a in old] == [sizes[j] for j in new]:
            source: list[Optional[int]] = [None] * len(sizes)
            for a, j in zip(old, new):
                source[j] = a
            return self.reindexed(x, sizes, source)
        moved = reshaped(x, sizes)
        if moved is None:
            moved = reshaped(self.copy(x), sizes)
        assert moved is not None, "a row-major copy always reshapes"
        return moved

    def op_concat(self, op: Any) -> Lazy:
        a, b = (self.lazy(v) for v in op.operands)
        sizes = shape_of(self.result_info(op))
        axis = len(sizes) + int(ir.IntegerAttr(op.attributes["axis"]).value)
        return Concat((a, b), axis, sizes, self.result_info(op).dtype)

    def op_reduce(self, op: Any) -> Lazy:
        x = self.readable(self.lazy(op.operands[0]))
        axes = sorted(len(x.sizes) + a for a in _ints(op.attributes["axes"]))
        keepdims = bool(ir.BoolAttr(op.attributes["keepdims"]).value)
        return self.reduction(x, axes, ir.StringAttr(op.attributes["kind"]).value, keepdims)

    def op_softmax(self, op: Any) -> Lazy:
        x = self.readable(self.lazy(op.operands[0]))
        axis = len(x.sizes) + int(ir.IntegerAttr(op.attributes["axis"]).value)
        top = spread(self.reduction(x, [axis], "max", True), x.sizes, [axis])
        exps = Map("exp", (Map("sub", (x, top), x.sizes, x.dtype),), x.sizes, x.dtype)
        total = self.reduction(exps, [axis], "sum", True)
        if isinstance(total, Splat):
            inverse = Splat(self.scalar(f"1.0f / {total.value}", "f32"), (), x.dtype)
            return Map("mul", (exps, inverse), x.sizes, x.dtype)
        return Map("div", (exps, spread(total, x.sizes, [axis])), x.sizes, x.dtype)

    def op_matmul(self, op: Any) -> Lazy:
        lhs, rhs = (self.readable(self.lazy(v)) for v in op.operands)
        info = self.result_info(op)
        out = self.new_scratch(shape_of(info), compute_kind(info.dtype))
        self.fence()
        self.matmul(lhs, rhs, out)
        self.fence()
        return replace(out, dtype=info.dtype)

    # -- lazy helpers --------------------------------------------------------------------------
    def readable(self, x: Lazy) -> Lazy:
        """``x``, or a copy in the workspace when it cannot be read element by element."""
        return self.copy(x) if isinstance(x, Concat) else x

    def reindexed(self, x: Lazy, sizes: Sequence[Dim], source: Sequence[Optional[int]],
                  starts: Optional[Sequence[Dim]] = None) -> Lazy:
        moved = reindex(x, sizes, source, starts)
        if moved is None:
            moved = reindex(self.copy(x), sizes, source, starts)
        assert moved is not None, "a view always reindexes"
        return moved

    def reduction(self, x: Lazy, axes: list[int], kind: str, keepdims: bool) -> Lazy:
        """``kind`` over ``axes`` of ``x``, computed once per row (a var reuses the mean of
        the same value): a Splat when one element results, else a view of scratch."""
        key = (id(x), tuple(axes), kind, keepdims)
        if key not in self.reductions:
            if kind == "var":
                mean = self.reduction(x, axes, "mean", keepdims=True)
                centred = Map("sub", (x, spread(mean, x.sizes, axes)), x.sizes, x.dtype)
                result = self.reduction(Map("mul", (centred, centred), x.sizes, x.dtype),
                                        axes, "mean", keepdims)
            else:
                result = self.reduce(x, axes, kind, keepdims)
            self.reductions[key] = result
        return self.reductions[key]

    def scalar(self, expr: str, kind: str) -> str:
        """``expr`` held in a new constant of the row body."""
        name = self.fresh("s")
        self.body(f"const {C_TYPE[kind]} {name} = {expr};")
        return name

    def scalar_op(self, name: str, operands: Sequence[Lazy], dtype: str) -> str:
        """An element-wise op of scalars: C++ for arithmetic, comparisons and where, the
        vector unit (one element) for the rest."""
        values = [x.value for x in operands]
        kind = compute_kind(dtype)
        if kind == "i32" and name in WRAPPING:
            return self.scalar(WRAPPING[name].format(*values), kind)
        if name in SCALAR_OPS and kind in ("f32", "i32"):
            return self.scalar(SCALAR_OPS[name].format(*values), kind)
        if name.startswith("cmp."):
            return self.scalar(f"{values[0]} {PREDICATES[name[4:]]} {values[1]}", "i32")
        if name == "select":
            return self.scalar(f"{values[0]} ? {values[1]} : {values[2]}", kind)
        if name == "cast" and operands[0].dtype == "int32" and dtype == "float32":
            return self.scalar(f"float({values[0]})", kind)
        return self.vector_scalar(Map(name, tuple(operands), (), dtype))

    def vector_scalar(self, tree: Map) -> str:
        """A map of scalars computed on the vector unit (one element) and read back."""
        code = self.body
        kind = compute_kind(tree.dtype)
        name = self.fresh("s")
        code(f"{C_TYPE[kind]} {name};  // {describe(tree)} on the vector unit")
        with code.block(""), self.slots.scope(), self.masks.scope():
            value = self.chunk_value(code, tree, Domain([], {}), Chunk([]))
            vector = Vector(code, "1", self.slots, self.masks, self.names)
            tensor = vector.tensor(value)
            self.sync("V_S")
            code(f"{name} = {tensor.name}.GetValue(0);")
        return name

    def sync(self, event: str) -> None:
        self.body(f"SetFlag<HardEvent::{event}>(EVENT_ID0);")
        self.body(f"WaitFlag<HardEvent::{event}>(EVENT_ID0);")

    # -- the workspace -------------------------------------------------------------------------
    def fence(self) -> None:
        """Every pipe's work so far is done: orders the workspace's writers and readers."""
        self.body("PipeBarrier<PIPE_ALL>();")

    def new_scratch(self, sizes: Sequence[Dim], kind: str) -> View:
        """A row-major region of the core's workspace."""
        if self.flat:
            raise _Fallback
        gm = self.scratch_gm(kind)
        view = View(gm, gm.dtype, None, self.workspace, tuple(sizes), row_major(sizes),
                    gm.dtype)
        self.workspace = self.workspace + numel(sizes)
        return view

    def copy(self, x: Lazy) -> View:
        """``x`` written to a new scratch region."""
        view = self.new_scratch(x.sizes, compute_kind(x.dtype))
        self.fence()
        self.write(x, view)
        self.fence()
        return replace(view, dtype=x.dtype)

    # -- one chunk -----------------------------------------------------------------------------
    def address(self, view: View, index: Sequence[str],
                strides: Optional[Sequence[Dim]] = None) -> str:
        """The element index of ``view`` at loop indices ``index`` (one per stride)."""
        strides = view.strides if strides is None else strides
        base = "0"
        if isinstance(view.base, Base):
            # flattened, the grid's coordinates are one axis of the traversal
            terms = tuple(t for t in view.base.terms if not (self.flat and t[0][0] == "g"))
            base = Base(terms).expr()
        offset = cxx.dim(view.offset) if view.offset != ZERO else "0"
        return cxx.index(base, offset, *(cxx.times(i, s) for i, s in zip(index, strides)))

    def read_scalar(self, code: Code, gm: Gm, address: str) -> str:
        """One element of ``gm`` into a scalar register (through UB: ``ReadScalar``)."""
        self.plan.scalars = True
        name = self.fresh("s")
        kind = compute_kind(gm.dtype)
        code(f"const {C_TYPE[kind]} {name} = tilec::ReadScalar({gm.member}[{address}], scalars);")
        return name

    def chunk_value(self, code: Code, tree: Lazy, domain: Domain, at: Chunk) -> Reg:
        """Copy in the leaves of ``tree`` for chunk ``at`` of ``domain`` and compute it."""
        return self.compute(code, tree, at, self.copy_in(code, tree, domain, at))

    def compute(self, code: Code, tree: Lazy, at: Chunk, loaded: dict[tuple, Reg],
                into: Optional[Vec] = None) -> Reg:
        """``tree`` on chunk ``at`` from its ``loaded`` leaves: in ``into`` when that is a
        map's kind, else wherever it ends."""
        vector = Vector(code, at.count, self.slots, self.masks, self.names)
        return Evaluator(vector, loaded, view_key).root(tree, into)

    def copy_in(self, code: Code, tree: Lazy, domain: Domain, at: Chunk) -> dict[tuple, Reg]:
        """The leaves of ``tree`` for chunk ``at`` of ``domain``: the copies in of every
        contiguous leaf issued first (each through its own VECIN queue, or a resident row),
        then their DeQue; scalars and gathered leaves as they come."""
        vector = Vector(code, at.count, self.slots, self.masks, self.names)
        loaded: dict[tuple, Reg] = {}
        queued: list[tuple[View, list[Dim], int, Optional[Resident]]] = []
        self.queues_used = 0
        for key, view in leaves(tree).items():
            strides = domain.strides[key]
            inner = strides[at.inner] if at.inner is not None else ZERO
            if inner == ZERO:
                index = ["0" if k == at.inner else x for k, x in enumerate(at.index)]
                loaded[key] = Scalar(self.read_scalar(code, view.buffer, self.address(
                    view, index, strides)), compute_kind(view.buffer.dtype))
            elif inner != ONE:
                loaded[key] = self.gather(code, vector, view, strides, at)
            else:
                queued.append((view, strides, self.queue(), self.resident(view, domain)))
        for view, strides, q, resident in queued:
            c_type = C_TYPE[view.buffer.dtype]
            row_stride = strides[at.row_axis] if at.row_axis is not None else ZERO
            address = self.address(view, at.index, strides)
            copy = [f"x{q} = inQ{q}.AllocTensor<{c_type}>();",
                    f"tilec::CopyIn(x{q}, {view.buffer.member}[{address}], {at.rows}, "
                    f"{at.length}, {cxx.dim(row_stride)}, {at.pitch});",
                    f"inQ{q}.EnQue(x{q});"]
            if resident is None:
                code(f"LocalTensor<{c_type}> " + copy[0])
                code(copy[1])
                code(copy[2])
                continue
            code(f"LocalTensor<{c_type}> x{q};")
            with code.block(f"if (resident{resident.index})", "} else {"):
                start = self.address(view, ["0"] * len(at.index), strides)
                code(f"tilec::Keep(resQ{resident.index}, res{resident.index}, "
                     f"resStart{resident.index}, {view.buffer.member}, {start}, "
                     f"{cxx.dim(resident.size)});")
                code(f"x{q} = res{resident.index}[{at.index[0]}];")
            code.depth += 1
            for line in copy:
                code(line)
            code.depth -= 1
            code("}")
        for view, strides, q, resident in queued:
            c_type = C_TYPE[view.buffer.dtype]
            guard = f"if (!resident{resident.index}) " if resident is not None else ""
            code(f"{guard}x{q} = inQ{q}.DeQue<{c_type}>();")
            loaded[view_key(view)] = Vec(f"x{q}", storage_kind(view.buffer.dtype),
                                         queue=f"inQ{q}",
                                         guard=f"resident{resident.index}" if resident else None)
        return loaded

    def resident(self, view: View, domain: Domain) -> Optional["Resident"]:
        """The resident copy of a leaf of an input (a contiguous row, the whole traversal):
        of a cache-hinted input that the grid reuses, or one that several passes over the row
        read; None for any other leaf."""
        if view.buffer not in self.gm_in or len(domain.axes) != 1 or \
                domain.axes[0].size is None or self.flat:
            return None
        key = view_key(view)
        self.passes[key] = self.passes.get(key, 0) + 1
        invariant = bool(self.k.grid) and (not isinstance(view.base, Base)
                                           or not view.base.terms)
        if view.buffer in self.streamed or (view.buffer not in self.hinted
                                            and key not in self.keep and not invariant):
            return None
        if key not in self.residents:
            if view.buffer in self.hinted:
                what = self.hinted[view.buffer]["name"]
            else:
                what = f"{view.buffer.member}, " + ("the same for every row" if invariant
                                                   else "read by several passes over a row")
                self.notes.append(f"a row of {what}: kept in UB while it fits")
            self.residents[key] = Resident(len(self.residents), view.buffer.dtype,
                                           domain.axes[0].size, what,
                                           view.buffer in self.hinted)
        return self.residents[key]

    def queue(self) -> int:
        """A VECIN queue for one more leaf of the current chunk."""
        q = self.queues_used
        self.queues_used += 1
        self.plan.in_queues = max(self.plan.in_queues, self.queues_used)
        return q

    def gather(self, code: Code, vector: Vector, view: View, strides: list[Dim],
               at: Chunk) -> Vec:
        """A leaf whose inner stride is not 1: staged one element per 32-byte block, then
        moved into place by the scalar unit (``Gather``)."""
        self.plan.gathers = True
        raw = vector.temp(storage_kind(view.buffer.dtype))
        address = self.address(view, at.index, strides)
        code(f"tilec::Gather({raw.name}, {view.buffer.member}[{address}], {at.length}, "
             f"{cxx.dim(strides[at.inner])}, stageBuf.Get<{C_TYPE[view.buffer.dtype]}>());")
        return raw

    # -- traversals ----------------------------------------------------------------------------
    def domain(self, sizes: Sequence[Dim], views: Sequence[View]) -> Domain:
        """The domain of a traversal over ``sizes`` reading ``views`` (flattened: the core's
        rows first)."""
        flat = None
        if self.flat:
            flat = (Axis("rowEnd - rowBegin", None, "rowBegin", "rowEnd"),
                    {view_key(v): self.flat_stride(v) for v in views})
        return Domain.of(sizes, views, flat)

    def flat_stride(self, view: View) -> Dim:
        """How far ``view`` moves from one row to the next, when its offset is linear in the
        flattened row number; else :class:`_Fallback`."""
        if not isinstance(view.base, Base) or not view.base.terms:
            return ZERO
        steps = {var: (stride, extent) for var, stride, extent in view.base.terms}
        if any(extent is not None for _, extent in steps.values()):
            raise _Fallback
        last = len(self.k.grid) - 1
        step = steps.get(f"g{last}", (ZERO, None))[0]
        scale = ONE
        for j in reversed(range(len(self.k.grid))):
            if steps.get(f"g{j}", (ZERO, None))[0] != step * scale:
                raise _Fallback
            scale = scale * self.k.grid_extent(j)
        return step

    @contextmanager
    def loops(self, code: Code, domain: Domain, axes: Sequence[int], index: list[str]
              ) -> Iterator[None]:
        """Scalar loops over ``axes`` of ``domain``; their variables go into ``index``."""
        opened = 0
        try:
            for a in axes:
                axis = domain.axes[a]
                var = self.fresh("i")
                index[a] = var
                code(f"for (int64_t {var} = {axis.start}; {var} < {axis.stop}; ++{var}) {{")
                code.depth += 1
                opened += 1
            yield
        finally:
            for _ in range(opened):
                code.depth -= 1
                code("}")

    @contextmanager
    def chunks(self, code: Code, domain: Domain, index: list[str], pitched: bool = False,
               limit: str = "CHUNK") -> Iterator[Chunk]:
        """The chunk loop over the last axis of ``domain`` (and, ``pitched``, several rows
        of the axis before it per chunk); the other axes' loop variables must already be in
        ``index``.  Every chunk's temporaries are free again after it."""
        if not domain.axes:
            with self.slots.scope(), self.masks.scope():
                yield Chunk(index)
            return
        inner = len(domain.axes) - 1
        axis = domain.axes[inner]
        k = self.fresh("")       # one number for the names of this chunk loop
        n, c, length, count = f"n{k}", f"c{k}", f"len{k}", f"cnt{k}"
        code(f"const int64_t {n} = {axis.extent};")
        opened = 0
        if pitched:
            row_axis = inner - 1
            rows_axis = domain.axes[row_axis]
            pitch, tile, step, r, rows = (f"{stem}{k}" for stem in ("pitch", "tileRows",
                                                                    "step", "r", "rows"))
            end = rows_axis.stop
            code(f"const uint32_t {pitch} = tilec::Pitch({n}), "
                 f"{tile} = tilec::TileRows({n}, CHUNK);")
            code(f"const int64_t {step} = {tile} > 1 ? {n} : {limit};")
            code(f"for (int64_t {r} = {rows_axis.start}; {r} < {end}; {r} += {tile}) {{")
            code.depth += 1
            opened += 1
            code(f"const uint32_t {rows} = tilec::Min<int64_t>({tile}, {end} - {r});")
            index[row_axis] = r
        else:
            step = limit
        code(f"for (int64_t {c} = 0; {c} < {n}; {c} += {step}) {{")
        code.depth += 1
        opened += 1
        index[inner] = c if axis.start == "0" else f"{axis.start} + {c}"
        code(f"const uint32_t {length} = tilec::Min<int64_t>({step}, {n} - {c});")
        if pitched:
            code(f"const uint32_t {count} = ({rows} - 1) * {pitch} + {length};")
            at = Chunk(index, rows, length, pitch, count, row_axis, inner)
        else:
            code(f"const uint32_t {count} = {length};")
            at = Chunk(index, "1", length, "0", count, None, inner)
        with self.slots.scope(), self.masks.scope():
            yield at
        for _ in range(opened):
            code.depth -= 1
            code("}")

    @staticmethod
    def pitchable(views: Sequence[View], domain: Domain) -> bool:
        """Whether rows of the last axis may share a chunk: two axes or more, and every view
        contiguous along the last one."""
        return len(domain.axes) >= 2 and all(domain.strides[view_key(v)][-1] == ONE
                                             for v in views)

    @staticmethod
    def limit(views: Sequence[View], domain: Domain) -> str:
        """The chunk length: CHUNK, or GATHER when a view is gathered or scattered."""
        strided = domain.axes and any(domain.strides[view_key(v)][-1] not in (ZERO, ONE)
                                      for v in views)
        return "GATHER" if strided else "CHUNK"

    def out_tensor(self, code: Code, dtype: str) -> Vec:
        """A tensor of the VECOUT queue for a chunk of a ``dtype`` buffer."""
        self.plan.out_queues = 1
        c_type = C_TYPE[dtype]
        name = self.fresh("y")
        code(f"LocalTensor<{c_type}> {name} = outQ0.AllocTensor<{c_type}>();")
        return Vec(name, storage_kind(dtype))

    def copy_out(self, code: Code, out: Vec, dest: View, at: Chunk, strides: Sequence[Dim]
                 ) -> None:
        """The computed ``out`` through the VECOUT queue to ``dest`` at chunk ``at`` (its
        elements scattered when ``dest`` is not contiguous along the chunk)."""
        c_type = C_TYPE[dest.buffer.dtype]
        row_stride = strides[at.row_axis] if at.row_axis is not None else ZERO
        inner = strides[at.inner] if at.inner is not None else ONE
        address = self.address(dest, at.index, strides)
        code(f"outQ0.EnQue({out.name});")
        code(f"{out.name} = outQ0.DeQue<{c_type}>();")
        if inner in (ZERO, ONE):
            code(f"tilec::CopyOut({dest.buffer.member}[{address}], {out.name}, {at.rows}, "
                 f"{at.length}, {cxx.dim(row_stride)}, {at.pitch});")
        else:
            self.plan.scatters = True
            code(f"tilec::Scatter({dest.buffer.member}[{address}], {out.name}, {at.length}, "
                 f"{cxx.dim(inner)}, scatterBuf.Get<{c_type}>());")
        code(f"outQ0.FreeTensor({out.name});")

    def write(self, x: Lazy, dest: View) -> None:
        """Compute ``x`` into ``dest`` (a concatenation part by part)."""
        if isinstance(x, Concat):
            a, b = x.parts
            width = a.sizes[x.axis]
            self.write(a, slice_part(dest, x.axis, ZERO, width))
            self.write(b, slice_part(dest, x.axis, width, b.sizes[x.axis]))
            return
        if isinstance(x, Map) and x.op == "cast" and x.dtype == dest.buffer.dtype and \
                x.dtype in ("float16", "bfloat16") and x.operands[0].dtype != "int32":
            x = x.operands[0]        # the store rounds to the same type: round once
        code = self.body
        views = list(leaves(x).values()) + [dest]
        domain = self.domain(dest.sizes, views)
        index = ["0"] * len(domain.axes)
        pitched = self.pitchable(views, domain)
        outer = range(len(domain.axes) - (2 if pitched else 1)) if domain.axes else range(0)
        code(f"// {dest.buffer.member} <- {describe(x)}")
        with self.loops(code, domain, outer, index), \
                self.chunks(code, domain, index, pitched, self.limit(views, domain)) as at:
            loaded = self.copy_in(code, x, domain, at)
            out = self.out_tensor(code, dest.buffer.dtype)
            value = self.compute(code, x, at, loaded, into=out)
            self.place(Vector(code, at.count, self.slots, self.masks, self.names), value, out)
            self.copy_out(code, out, dest, at, domain.strides[view_key(dest)])

    def place(self, vector: Vector, value: Reg, out: Vec) -> None:
        """A chunk's value into the out tensor (of the storage type)."""
        if isinstance(value, Vec) and value.name == out.name:
            return
        if out.kind in ("float16", "bfloat16"):
            tensor = vector.tensor(value)
            vector.emit(f"Cast({out.name}, {tensor.name}, RoundMode::CAST_RINT, {vector.n})")
            vector.release(tensor)
            if tensor is not value:
                vector.release(value)
            return
        vector.copy(value, out)
        vector.release(value)

    # -- reductions ----------------------------------------------------------------------------
    def reduce(self, x: Lazy, axes: list[int], kind: str, keepdims: bool) -> Lazy:
        sizes = x.sizes
        kept = [a for a in range(len(sizes)) if a not in axes]
        out_sizes = tuple(ONE if a in axes else d for a, d in enumerate(sizes)
                          if keepdims or a not in axes)
        count = numel([sizes[a] for a in axes])
        if isinstance(x, Splat):
            if kind in ("max", "min", "mean"):
                return replace(x, sizes=out_sizes)
            return Splat(self.scalar(f"{x.value} * float({cxx.dim(count)})", "f32"),
                         out_sizes, x.dtype)
        if all(sizes[a] == ONE for a in kept):
            acc = self.reduce_to_scalar(x, kind)
            return Splat(self.mean(acc, kind, count), out_sizes, x.dtype)
        out = self.new_scratch(tuple(sizes[a] for a in kept), "f32")
        self.fence()
        if axes[-1] == len(sizes) - 1:
            self.reduce_rows(x, kind, kept, count, out)
        else:
            self.reduce_columns(x, kind, axes, kept, count, out)
        self.fence()
        source = [kept.index(a) if a in kept else None for a in range(len(sizes))
                  if keepdims or a not in axes]
        result = reindex(out, out_sizes, source)
        assert result is not None, "a view always reindexes"
        return replace(result, dtype=x.dtype)

    def mean(self, acc: str, kind: str, count: Dim) -> str:
        if kind != "mean":
            return acc
        return self.scalar(f"{acc} / float({cxx.dim(count)})", "f32")

    def reduce_to_scalar(self, x: Lazy, kind: str) -> str:
        """``kind`` over every axis of ``x``: chunk by chunk (ReduceSum/Max/Min, the V->S
        flag, GetValue) into a new scalar."""
        code = self.body
        acc = self.fresh("acc")
        code(f"// {acc} <- {kind} of {describe(x)}")
        code(f"float {acc} = {f32(IDENTITY[kind])};")
        domain = Domain.of(x.sizes, list(leaves(x).values()))
        index = ["0"] * len(domain.axes)
        self.plan.reduces = True
        outer = range(len(domain.axes) - 1) if domain.axes else range(0)
        with self.loops(code, domain, outer, index), \
                self.chunks(code, domain, index, False,
                                            self.limit(list(leaves(x).values()), domain)) as at:
            value = self.chunk_value(code, x, domain, at)
            vector = Vector(code, at.count, self.slots, self.masks, self.names)
            if isinstance(value, Scalar):
                part = value.expr if kind in ("max", "min") else \
                    f"{value.expr} * float({at.count})"
            else:
                vector.emit(f"{REDUCE_API[kind]}(red, {value.name}, work, {at.count})")
                vector.release(value)
                self.sync("V_S")
                part = "red.GetValue(0)"
            code(f"{acc} = {COMBINE[kind].format(a=acc, b=part)};")
        return acc

    def reduce_rows(self, x: Lazy, kind: str, kept: list[int], count: Dim, out: View) -> None:
        """A reduction over the innermost axis keeping outer ones: a scalar per kept index,
        each stored as one element."""
        code = self.body
        index = [self.fresh("k") for _ in kept]
        code(f"// {out.buffer.member} <- {kind} of {describe(x)} over its last axes")
        with self.scalar_loops(code, [x.sizes[a] for a in kept], index):
            acc = self.reduce_to_scalar(fix(x, kept, index), kind)
            value = self.mean(acc, kind, count)
            y = self.out_tensor(code, "float32")
            code(f"Duplicate({y.name}, {value}, 1);")
            self.copy_out(code, y, out, Chunk(index), out.strides)

    def reduce_columns(self, x: Lazy, kind: str, axes: list[int], kept: list[int],
                       count: Dim, out: View) -> None:
        """A reduction keeping the innermost axis: an accumulator for a chunk of it,
        combined with that chunk at every index of the reduced axes."""
        code = self.body
        outer = kept[:-1]
        index = [self.fresh("k") for _ in outer]
        code(f"// {out.buffer.member} <- {kind} of {describe(x)} over axes "
             f"{', '.join(map(str, axes))}, column by column")
        with self.scalar_loops(code, [x.sizes[a] for a in outer], index):
            row = fix(x, outer, index)
            row_out = fix(out, list(range(len(outer))), index)
            assert isinstance(row_out, View)
            rest = [a for a in range(len(x.sizes)) if a not in outer]
            reduced = [rest.index(a) for a in axes]
            self.accumulate(row, kind, reduced, count, row_out)

    def accumulate(self, x: Lazy, kind: str, reduced: list[int], count: Dim, out: View
                   ) -> None:
        """``out`` (1-D) = ``kind`` of ``x`` over its ``reduced`` axes (all but the last)."""
        code = self.body
        inner = len(x.sizes) - 1
        acc = self.slots.take()
        with self.chunks(code, Domain.of([x.sizes[inner]], []), ["0"]) as at:
            code(f"LocalTensor<float> acc = Slot<float>({acc});")
            code(f"Duplicate(acc, {f32(IDENTITY[kind])}, {at.count});")
            index = [self.fresh("j") for _ in reduced]
            with self.scalar_loops(code, [x.sizes[a] for a in reduced], index), \
                    self.slots.scope(), self.masks.scope():
                vector = Vector(code, at.count, self.slots, self.masks, self.names)
                value = self.on_chunk(code, fix(x, reduced, index), at)
                if isinstance(value, Scalar):
                    vector.emit(f"{SCALAR_COMBINE[kind]}(acc, acc, {value.expr}, {at.count})")
                else:
                    vector.emit(f"{VECTOR_COMBINE[kind]}(acc, acc, {value.name}, {at.count})")
                    vector.release(value)
            if kind == "mean":
                code(f"Muls(acc, acc, 1.0f / float({cxx.dim(count)}), {at.count});")
            y = self.out_tensor(code, "float32")
            code(f"Muls({y.name}, acc, 1.0f, {at.count});")
            self.copy_out(code, y, out, at, out.strides)
        self.slots.give(acc)

    def on_chunk(self, code: Code, x: Lazy, at: Chunk) -> Reg:
        """1-D ``x`` computed at 1-D chunk ``at`` of an enclosing traversal."""
        domain = Domain.of(x.sizes, list(leaves(x).values()))
        chunk = Chunk(at.index[:len(domain.axes)], "1", at.length, "0", at.count, None,
                      0 if domain.axes else None)
        return self.chunk_value(code, x, domain, chunk)

    @contextmanager
    def scalar_loops(self, code: Code, sizes: Sequence[Dim], index: list[str]
                     ) -> Iterator[None]:
        """Loops over ``sizes`` with the variables named in ``index``."""
        opened = 0
        try:
            for var, size in zip(index, sizes):
                code(f"for (int64_t {var} = 0; {var} < {cxx.dim(size)}; ++{var}) {{")
                code.depth += 1
                opened += 1
            yield
        finally:
            for _ in range(opened):
                code.depth -= 1
                code("}")

    # -- matmul --------------------------------------------------------------------------------
    def matmul(self, lhs: Lazy, rhs: Lazy, out: View) -> None:
        """``out = lhs @ rhs`` on the vector unit: for each output row and chunk of it, an
        accumulator plus ``lhs[m, k] * rhs[k, chunk]`` over k, the left side staged in UB a
        chunk of k at a time and read as scalars (after the V->S flag)."""
        code = self.body
        rows = list(range(len(out.sizes) - 1))
        index = [self.fresh("m") for _ in rows]
        code(f"// {out.buffer.member} <- matmul({describe(lhs)}, {describe(rhs)}) on the "
             "vector unit")
        batch = len(rhs.sizes) - 2
        with self.scalar_loops(code, [out.sizes[a] for a in rows], index):
            lhs_row = fix(lhs, list(range(len(lhs.sizes) - 1)), index[-(len(lhs.sizes) - 1):]
                          if len(lhs.sizes) > 1 else [])
            rhs_mat = fix(rhs, list(range(batch)), index[:batch])
            out_row = fix(out, rows, index)
            assert isinstance(out_row, View)
            self.matmul_row(lhs_row, rhs_mat, out_row)

    def matmul_row(self, lhs: Lazy, rhs: Lazy, out: View) -> None:
        code = self.body
        acc, staged = self.slots.take(), self.slots.take()
        k_size, n_size = rhs.sizes
        with self.chunks(code, Domain.of([n_size], []), ["0"]) as at:
            code(f"LocalTensor<float> acc = Slot<float>({acc});")
            code(f"Duplicate(acc, 0.0f, {at.count});")
            k_domain = Domain.of([k_size], list(leaves(lhs).values()))
            k_index = ["0"] * len(k_domain.axes)
            with self.chunks(code, k_domain, k_index, False,
                             self.limit(list(leaves(lhs).values()), k_domain)) as kat:
                code(f"LocalTensor<float> lhs = Slot<float>({staged});")
                target = Vec("lhs", "f32")
                value = self.compute(code, lhs, kat, self.copy_in(code, lhs, k_domain, kat),
                                     into=target)
                self.place(Vector(code, kat.count, self.slots, self.masks, self.names), value,
                           target)
                self.sync("V_S")
                kk = self.fresh("kk")
                start = kat.index[0] if k_domain.axes else "0"
                with code.block(f"for (uint32_t {kk} = 0; {kk} < {kat.count}; ++{kk})"), \
                        self.slots.scope(), self.masks.scope():
                    code(f"const float a = lhs.GetValue({kk});")
                    row = fix(rhs, [0], [cxx.index(start, kk)])
                    value = self.on_chunk(code, row, at)
                    vector = Vector(code, at.count, self.slots, self.masks, self.names)
                    if isinstance(value, Scalar):
                        vector.emit(f"Adds(acc, acc, a * {value.expr}, {at.count})")
                    else:
                        term = vector.temp("f32")
                        vector.emit(f"Muls({term.name}, {value.name}, a, {at.count})")
                        vector.emit(f"Add(acc, acc, {term.name}, {at.count})")
                        vector.release(value)
            y = self.out_tensor(code, "float32")
            code(f"Muls({y.name}, acc, 1.0f, {at.count});")
            self.copy_out(code, y, out, at, out.strides)
        self.slots.give(acc)
        self.slots.give(staged)

    # -- the class -------------------------------------------------------------------------------
    def render(self) -> str:
        k = self.k
        coordinates = ["const int64_t g0 = row;"] if len(k.grid) == 1 else []
        if len(k.grid) > 1:
            coordinates.append("int64_t rest = row;")
            for j in reversed(range(1, len(k.grid))):
                extent = cxx.dim(k.grid_extent(j))
                coordinates.append(f"const int64_t g{j} = rest % {extent};")
                coordinates.append(f"rest /= {extent};")
            coordinates.append("const int64_t g0 = rest;")
        tbufs = [name for name, used in (("calc", self.plan.slots), ("maskBuf", self.plan.masks),
                                         ("reduceBuf", self.plan.reduces),
                                         ("stageBuf", self.plan.gathers),
                                         ("scatterBuf", self.plan.scatters),
                                         ("scalars", self.plan.scalars)) if used]
        return render_kernel({
            "k": {"name": k.name, "entry": k.entry, "tiling": f"{k.entry}_tiling",
                  "symbols": k.symbols, "rank_generic": k.rank_generic, "grid": k.grid},
            "flat": self.flat, "notes": self.notes, "plan": self.plan,
            "args": [pointer for _, pointer, _ in self.globals],
            "globals": self.globals, "scratch": list(self.scratch.values()),
            "tbufs": tbufs, "gather": GATHER, "reduce_work": reduce_work_floats(self.plan.chunk),
            "prologue": self.prologue.lines, "body": self.body.lines,
            "coordinates": coordinates, "resident_bytes": self.plan.resident_budget(k.budget),
            "residents": [{"index": r.index, "dtype": r.dtype, "hint": r.hint,
                           "bytes": cxx.dim(r.bytes)} for r in sorted(
                               self.residents.values(), key=lambda r: (not r.hinted, r.index))],
        })
