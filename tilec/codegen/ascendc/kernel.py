"""Kernel-level tile functions -> Ascend C vector kernels (one class and one entry each).

In: a ``func.func`` marked ``tile.kernel`` (target ascend), whose body describes ONE row of a
grid.  Out: :class:`KernelSource`: the C++ of its tiling struct, kernel class and
``extern "C" __global__ __aicore__`` entry, and what the host needs to launch it.

The grid's rows are split over the AI cores in contiguous ranges (``GetBlockIdx()`` /
``GetBlockNum()``).  Every tile value of the row becomes a lazy value (:mod:`.lazy`): views of
global memory, scalars, element-wise maps, concatenations; nothing is computed until a value
must be: a ``store_row`` streams its tree through the Unified Buffer (:mod:`.stream`), a
reduction or matmul computes its result (:mod:`.reduce`), a value that cannot be read element
by element (a concatenation read by an op, a reshape that is no view) goes to the workspace.
Scalars are C++ on the scalar unit, or one element on the vector unit for the ops that need
it (rsqrt, exp, ...).  A kernel without reduction, softmax, matmul or reused cache-hinted
input, whose views all step linearly with the row number, runs its stores over the core's rows
flattened with the row (short rows share a chunk); any other goes row by row, keeping in UB
the rows of its inputs that the grid reuses (cache hints) or several passes over the row
read, while they fit.  The chunk size comes from the UB budget (:mod:`.plan`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence

from ...diagnostics import DiagnosticSink, TilecError
from ...dialect import FUSED_ATTR, HINT_ATTR, INPUT_HINTS_ATTR, KERNEL_ATTR
from ...dialect.locations import span_of
from ...dialect.ops import ELEMENTWISE_OPS, OpKind, ops_of_kind
from ...dialect.types import TensorInfo, tensor_info
from ...dims import Dim, parse_dim
from ...mlir import ir
from ..common.values import (ONE, ZERO, Concat, Lazy, Map, Splat, View, map_sizes, numel,
                             reindex, row_major)
from . import attention, cube, cxx
from .cxx import Code, f32, i32
from ..common.layout import IotaRow, LayoutOps, grid_dim, ints, shape_of, strings
from .lazy import Base, Gm, grid_var, reshaped, small_power, spread
from .plan import GATHER, reduce_work_floats
from .reduce import Reducer
from .source import render_kernel
from .stream import NotFlat
from .vector import C_TYPE, compute_kind

SCALAR_OPS = {"add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / {1}",
              "max": "({1} > {0} ? {1} : {0})", "min": "({1} < {0} ? {1} : {0})",
              "neg": "-{0}"}
WRAPPING = {"add": "int32_t(uint32_t({0}) + uint32_t({1}))",
            "sub": "int32_t(uint32_t({0}) - uint32_t({1}))",
            "mul": "int32_t(uint32_t({0}) * uint32_t({1}))", "neg": "int32_t(0u - uint32_t({0}))"}
ROW_WIDE = frozenset(f"tile.{n}" for kind in (OpKind.REDUCTION, OpKind.MATMUL)
                     for n in ops_of_kind(kind))
"""The ops whose result needs the whole row computed first: a kernel with one is not flattened."""
PREDICATES = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


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
    cube: str = ""               # C++ bytes of the Cube's product ("": no Cube, no AIC)
    cube_guard: str = ""         # C++ condition under which the Cube path cannot run ("": none)
    cube_why: str = ""           # ... and why


def cache_hints(fn: Any) -> dict[int, dict[str, Any]]:
    """The cache hint of each argument of a kernel, by position: from ``tile.cache_hints`` of
    its fused group, or (a function that is its own kernel, -O0) its ``arg_attrs``."""
    entries: list[Any] = []
    if FUSED_ATTR in fn.attributes:
        fused = ir.DictAttr(fn.attributes[FUSED_ATTR])
        if INPUT_HINTS_ATTR in fused:
            entries = list(ir.ArrayAttr(fused[INPUT_HINTS_ATTR]))
    elif "arg_attrs" in fn.attributes:
        entries = [ir.DictAttr(a)[HINT_ATTR] if HINT_ATTR in ir.DictAttr(a)
                   else ir.DictAttr.get({}) for a in ir.ArrayAttr(fn.attributes["arg_attrs"])]
    hints = {}
    for k, entry in enumerate(entries):
        d = ir.DictAttr(entry)
        if "name" in d:
            hints[k] = {"name": ir.StringAttr(d["name"]).value,
                        "level": ir.StringAttr(d["level"]).value,
                        "reused_over": strings(d["reused_over"])}
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
        self.grid = strings(kernel["grid"])
        self.symbols = strings(kernel["symbols"])
        self.inputs = [tensor_info(t) for t in fn.type.inputs]
        self.outputs = [tensor_info(t) for t in fn.type.results]
        self.rank_generic = any(i.rank_generic for i in self.inputs + self.outputs)
        self.span = span_of(fn.location)
        self.hints = cache_hints(fn)
        self.attention = None if self.rank_generic else attention.plan(fn, kernel)
        self.cube = None if self.rank_generic or self.attention else cube.plan(fn, kernel)

    def grid_extent(self, j: int) -> Dim:
        return grid_dim(self.grid[j])

    def generate(self) -> KernelSource:
        """The kernel's source: rows and row flattened where that works (no reduction,
        softmax, matmul or reused cache-hinted input, every view linear in the row number),
        else row by row, keeping resident the rows of hinted inputs that the grid reuses and
        of inputs that several passes over one row read, unless they are known not to fit."""
        if self.attention is not None:
            return attention.generate(self)
        ops = {op.operation.name for op in self.fn.regions[0].blocks[0].operations}
        reused = any(h["reused_over"] for h in self.hints.values())
        flat = bool(self.grid) and not reused and not ops & ROW_WIDE
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
        try:
            lowering.plan.choose_chunk(self.budget, self.span)
        except TilecError:
            if not lowering.residents:
                raise
            if hinted:
                self.sink.warn(f"cache_hint({', '.join(sorted({r.hint for r in hinted}))}): "
                               f"kernel '{self.name}' needs all of UB to stream its values; "
                               "streaming the hinted rows too", self.span)
            lowering = self._lower(flat, hints=False, keep=None)
            lowering.plan.choose_chunk(self.budget, self.span)
        buffers = tuple((pointer, f"{elements} * sizeof({C_TYPE[gm.dtype]})")
                        for gm, pointer, elements in lowering.globals)
        return KernelSource(self.name, self.entry, lowering.render(), f"{self.entry}_tiling",
                            tuple(self.symbols), self.rank_generic, tuple(self.grid),
                            lowering.workspace * 4, buffers, lowering.plan.chunk,
                            self.cube.product_bytes if self.cube else "")

    def _lower(self, flat: bool, hints: bool, keep: Optional[frozenset[tuple]]
               ) -> "_Lowering":
        try:
            lowering = _Lowering(self, flat, hints, keep)
            lowering.run()
        except NotFlat:
            lowering = _Lowering(self, False, hints, keep)
            lowering.run()
        return lowering


class _Lowering(Reducer, LayoutOps):
    """The lazy values of one row and the code that materialises them."""

    def __init__(self, kernel: AscendKernel, flat: bool, hints: bool,
                 keep: Optional[frozenset[tuple]]) -> None:
        super().__init__(kernel.name, [kernel.grid_extent(j) for j in range(len(kernel.grid))],
                         flat, keep)
        self.k = kernel
        self.use_hints = hints            # keep the rows of hinted inputs resident
        self.prologue = Code()            # before the rows: row-invariant scalars
        self.gm_out: list[Gm] = []
        self.globals: list[tuple[Gm, str, str]] = []     # (tensor, its pointer, elements)
        self.env: dict[Any, Lazy] = {}
        self.reductions: dict[tuple, tuple[Lazy, Lazy]] = {}    # key -> (operand, result)
        self.returned: list[Any] = []
        self.before_cube = Code()         # per row, before the AIC runs (a Cube kernel's A)

    # -- set-up --------------------------------------------------------------------------------
    def run(self) -> None:
        """Lower every op of the row, in order."""
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
                value = self.lower_op(op, name)
            if value is not None:
                self.env[op.results[0]] = value
        self.plan.slots = self.slots.peak
        self.plan.masks = self.masks.peak
        self.plan.residents = [f"res{r.index} ({r.hint}) {r.bytes} B"
                               for r in self.residents.values()]

    def hint_notes(self) -> None:
        """Which hinted inputs have their rows kept resident (or streamed), and what the
        kernel's comment says of every hint."""
        for k, hint in sorted(self.k.hints.items()):
            what = f"cache_hint({hint['name']}, {hint['level']}) on input {k}"
            if not hint["reused_over"]:
                self.notes.append(f"{what}: no grid dimension reuses it: streamed once per row")
            elif not self.use_hints:
                self.streamed.add(self.gm_in[k])
                self.notes.append(f"{what}: no room to keep it in UB: streamed")
            else:
                self.hinted[self.gm_in[k]] = hint["name"]
                self.notes.append(f"{what}: its row stays in UB while the row does not change "
                                  f"(reused over {', '.join(hint['reused_over'])}) and fits")

    # -- op handlers ---------------------------------------------------------------------------
    def lower_op(self, op: Any, name: str) -> Optional[Lazy]:
        short = name[len("tile."):]
        handler = getattr(self, f"op_{short}", None)
        if handler is not None:
            return handler(op)
        if short in ELEMENTWISE_OPS:
            return self.elementwise(op, short)
        raise TilecError(f"ascend backend: cannot lower '{name}'", span_of(op.location))

    def op_load_row(self, op: Any) -> Lazy:
        index = ir.BlockArgument(op.operands[0]).arg_number
        view = self.global_row(op, self.gm_in[index], self.k.inputs[index])
        if view.sizes:
            return view
        if self.flat and isinstance(view.base, Base) and view.base.terms:
            raise NotFlat    # one element per row: a chunk of flattened rows needs many
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
        axes = ints(op.attributes["axes"])
        terms = []
        for j, axis in enumerate(axes):
            if axis < 0 or shape[axis] == ONE:
                continue
            certain = shape[axis] == self.k.grid_extent(j) or shape[axis].value is not None
            terms.append((grid_var(j), strides[axis], None if certain else shape[axis]))
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

    def op_dim(self, op: Any) -> Splat:
        expr = parse_dim(ir.StringAttr(op.attributes["expr"]).value)
        return Splat(f"int32_t({cxx.dim(expr)})", (), "int32")

    def op_iota(self, op: Any) -> Lazy:
        """As :meth:`~..common.rows.RowLowering.iota`: a grid coordinate (not in a flattened
        kernel, whose rows are no loop), or a ramp along the row."""
        iota = IotaRow.of(op)
        sizes = tuple(shape_of(self.result_info(op)))
        g = iota.grid_axis()
        if g is None:
            return iota.ramp(sizes)
        if self.flat:
            raise NotFlat
        here = grid_var(g) if g >= 0 else "0"
        return Splat(f"int32_t({here} + {cxx.dim(iota.start)})", sizes, "int32")

    def elementwise(self, op: Any, name: str) -> Lazy:
        operands = [self.readable(self.lazy(v)) for v in op.operands]
        dtype = self.result_info(op).dtype
        first = operands[0]
        if name == "cast" and first.dtype != "int32" and dtype == "float32" and not (
                isinstance(first, Map) and first.op == "cast"):
            return replace(first, dtype=dtype)      # values are float32 already: nothing to do
        if name == "pow":
            power = small_power(operands[0], operands[1])
            if power is not None:
                return power
        if all(isinstance(operand, Splat) for operand in operands):
            return Splat(self.scalar_op(name, operands, dtype), map_sizes(operands), dtype)
        return Map(name, tuple(operands), map_sizes(operands), dtype)

    def reshape_copy(self, x: Lazy, sizes: Sequence[Dim]) -> Lazy:
        moved = reshaped(x, sizes)
        if moved is None:
            moved = reshaped(self.copy(x), sizes)
        assert moved is not None, "a row-major copy always reshapes"
        return moved

    def op_reduce(self, op: Any) -> Lazy:
        x = self.readable(self.lazy(op.operands[0]))
        axes = sorted(len(x.sizes) + a for a in ints(op.attributes["axes"]))
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
        info = self.result_info(op)
        if self.k.cube is not None:    # the AIC's float product of this row, in GM
            if self.k.cube.convert_a:
                self.round_lhs(op.operands[0])
            store = next(o for o in self.k.fn.regions[0].blocks[0].operations
                         if o.operation.name == "tile.store_row")
            row = self.global_row(store, Gm("gmCube", "float32"),
                                  replace(self.k.outputs[0], dtype="float32"))
            return replace(row, dtype=info.dtype)
        lhs, rhs = (self.readable(self.lazy(v)) for v in op.operands)
        out = self.new_scratch(shape_of(info), compute_kind(info.dtype))
        self.fence()
        self.matmul(lhs, rhs, out)
        self.fence()
        return replace(out, dtype=info.dtype)

    def round_lhs(self, lhs: Any) -> None:
        """The Cube's A, stored in float: this row split into two parts of the operand
        type, hi = round(a) and lo = round(a - hi), into the workspace (``gmA16``,
        ``gmA16Lo``), in the loop that runs before the AIC starts."""
        plan = self.k.cube
        info = replace(self.k.inputs[plan.tile.lhs], dtype=plan.dtype)
        a = self.lazy(lhs)
        a32 = replace(a, dtype="float32")
        hi = Map("cast", (a32,), a.sizes, plan.dtype)
        rest = Map("sub", (a32, Map("cast", (hi,), a.sizes, "float32")), a.sizes, "float32")
        body, self.body = self.body, self.before_cube
        try:
            self.write(hi, self.global_row(lhs.owner, Gm("gmA16", plan.dtype), info))
            self.write(Map("cast", (rest,), a.sizes, plan.dtype),
                       self.global_row(lhs.owner, Gm("gmA16Lo", plan.dtype), info))
        finally:
            self.body = body

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
            self.reductions[key] = (x, result)     # x kept alive: its id stays its own
        return self.reductions[key][1]

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

    # -- the class -----------------------------------------------------------------------------
    def coordinate_lines(self) -> list[str]:
        """C++ of the grid coordinates ``g0, g1, ...`` of grid row ``row``."""
        k = self.k
        coordinates = [f"const int64_t {grid_var(0)} = row;"] if len(k.grid) == 1 else []
        if len(k.grid) > 1:
            coordinates.append("int64_t rest = row;")
            for j in reversed(range(1, len(k.grid))):
                extent = cxx.dim(k.grid_extent(j))
                coordinates.append(f"const int64_t {grid_var(j)} = rest % {extent};")
                coordinates.append(f"rest /= {extent};")
            coordinates.append(f"const int64_t {grid_var(0)} = rest;")
        return coordinates

    def render(self, attention: Optional[dict[str, Any]] = None) -> str:
        """The kernel's C++; ``attention``: the fused attention's parts (:mod:`.attention`),
        whose AIV methods replace the row loop."""
        k = self.k
        coordinates = self.coordinate_lines()
        tbufs = [name for name, used in (("calc", self.plan.slots), ("maskBuf", self.plan.masks),
                                         ("reduceBuf", self.plan.reduces),
                                         ("stageBuf", self.plan.gathers),
                                         ("scatterBuf", self.plan.scatters),
                                         ("scalars", self.plan.scalars)) if used]
        plan = k.cube
        return render_kernel({
            "cube": plan and {"text": cube.render(plan, k.entry, f"{k.entry}_tiling"),
                              "aic_args": [f"in{plan.tile.lhs}", f"in{plan.tile.rhs}"],
                              "ctype": C_TYPE[plan.dtype], "a_offset": plan.a_offset,
                              "lo_offset": plan.lo_offset,
                              "k": cxx.dim(plan.k), "before": self.before_cube.lines},
            "attention": attention,
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
