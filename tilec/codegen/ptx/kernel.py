"""Kernel-level tile functions -> ``gpu.func`` kernels (gpu, scf, arith, math, llvm dialects).

In: ``func.func`` ops marked ``tile.kernel`` with target ptx (made by tile-kernel), each body
describing ONE row of a grid.  Out: one ``gpu.module @tilec_kernels`` holding, for each, a
``gpu.func @NAME kernel`` with the arguments

    (!llvm.ptr<1> per argument, !llvm.ptr<1> per result, i64 per symbol of
     ``tile.kernel.symbols``, [i64 lead_numel: the product of the ``...`` extents,]
     i64 rows, i64 rows_per_block)

Buffers are flat, contiguous, row-major global memory in the element type of their tensor (a
rank-0 argument too: the host stages scalar parameters on the device in their own type).  An
attention kernel whose keys the grid may split takes one more buffer after its results, its
workspace (:class:`SplitLaunch`, :mod:`.attention`).

How the grid runs: block ``b`` computes the rows ``[b * rows_per_block, (b + 1) *
rows_per_block)`` of the flattened grid, one after the other, with all its threads: a row per
step keeps every reduction inside one block (warp shuffles, then one shared-memory slot per
warp: no atomics, no second kernel), and consecutive rows on one block are what lets a
``cache_hint``ed row stay in shared memory while the grid point it depends on is unchanged
(RoPE: the frequencies of a token, reused for every head).  The host picks the threads per
block (a multiple of 32, from the row's size) and launches at most one resident wave of
blocks, so that large grids stride over the blocks.

Within a row, values are lazy (:mod:`..common.rows`) and every loop is spread over the
threads: thread ``t`` of ``T`` takes elements ``t, t + T, ...``, so a warp touches
consecutive addresses (coalesced).  A 1-D row whose views are all contiguous or broadcast is
moved in chunks of ``16 / (smallest element size)`` elements per thread with 128-bit vector
loads and stores when every address is aligned at run time, the tail element by element; any
other row element by element.  Materialised values, partial reductions, matmul results and
``cache_hint``ed rows (level L1, SHARED or UB) live in dynamic shared memory, carved per
kernel into 16-byte aligned buffers; a barrier follows each write phase and ends each row.
Every load of an input hinted at level L2 goes through an L2 evict-last cache policy made
once per kernel (``createpolicy.fractional.L2::evict_last``, then
``ld.global[.nc].L2::cache_hint``, inline PTX: the NVPTX backend has no such load), so that
what the grid re-reads stays in L2 while the streamed tensors pass through it.
Math goes to libdevice through the ``math`` dialect (``math.exp`` -> ``__nv_expf``,
``math.erf`` -> ``__nv_erff``, ...); sigmoid, silu and the gelus are composed from those.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence

from ...diagnostics import TilecError
from ...dialect import ELEMENT_BYTES, FUSED_ATTR, INPUT_HINTS_ATTR, KERNEL_ATTR, REUSE_ATTR
from ...dialect.locations import span_of
from ...dialect.types import TensorInfo, tensor_info
from ...dims import Dim
from ...mlir import gpu, ir, llvm
from ...mlir import math as mmath
from ...mlir import scf
from ...tiling.tiler import TileParams
from ..common.layout import grid_dim, shape_of
from ..common.rows import (SCRATCH, STORAGE, RowLowering, UnaryTable, apply, grid_point,
                           kernel_target, narrow, next_grid_point,
                           reduced_sizes, round_to, widen)
from ..common.scalar import Num, const, f32, i32, i64, index, multiply_add, select, to_int
from ..common.values import (LEAD, ONE, ZERO, Concat, Lazy, Map, Splat, View, compute_kind,
                             concat_parts, is_ramp, numel, reindex, row_major)

MODULE = "tilec_kernels"
SHARED_SYMBOL = "__tilec_shared"
WARP = 32
VECTOR_BYTES = 16
EVICT_LAST_LEVEL = "L2"                  # read with an L2 evict-last policy
EVICT_LAST_POLICY = "createpolicy.fractional.L2::evict_last.b64 $0, 1.0;"


def _ptr(space: int) -> ir.Type:
    return ir.Type.parse(f"!llvm.ptr<{space}>")


def _math(op: Callable) -> Callable[[Num], Num]:
    return lambda x: Num(op(x.value))


def _sigmoid(x: Num) -> Num:
    return 1.0 / (_math(mmath.exp)(-x) + 1.0)


_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_TANH = _math(mmath.tanh)

_UNARY: UnaryTable = {
    "exp": _math(mmath.exp),
    "log": _math(mmath.log),
    "sqrt": _math(mmath.sqrt),
    "rsqrt": _math(mmath.rsqrt),
    "abs": _math(mmath.absf),
    "reciprocal": lambda x: 1.0 / x,
    "sigmoid": _sigmoid,
    "tanh": _TANH,
    "relu": lambda x: x.maximum(0.0),
    "silu": lambda x: x * _sigmoid(x),
    "gelu": lambda x: x * 0.5 * (_math(mmath.erf)(x * _SQRT_HALF) + 1.0),
    "gelu_tanh": lambda x: x * 0.5 * (
        _TANH((x * x * x * 0.044715 + x) * _SQRT_2_OVER_PI) + 1.0),
    "sin": _math(mmath.sin),
    "cos": _math(mmath.cos),
    "erf": _math(mmath.erf),
    "round": _math(mmath.roundeven),
}


def _pow(a: Num, b: Num) -> Num:
    return Num(mmath.powf(a.value, b.value))


# reduction kind -> (combining step, identity); the language reduces float values only
_COMBINERS: dict[str, tuple[Callable[[Num, Num], Num], float]] = {
    "sum": (lambda a, b: a + b, 0.0),
    "mean": (lambda a, b: a + b, 0.0),
    "max": (lambda a, b: a.maximum(b), -math.inf),
    "min": (lambda a, b: a.minimum(b), math.inf),
}


@dataclass(frozen=True)
class SharedBuffer:
    """One buffer of a kernel's dynamic shared memory (per block)."""

    name: str
    bytes: Dim


@dataclass(frozen=True)
class GpuKernel:
    """What the host needs to launch one kernel (see the module docstring for the ABI)."""

    name: str
    inputs: tuple[str, ...]           # element type of each argument buffer
    outputs: tuple[str, ...]          # ... and of each result buffer
    symbols: tuple[str, ...]          # the i64 arguments after the buffers
    rank_generic: bool                # whether lead_numel follows them
    grid: tuple[str, ...]             # the grid's dimensions ("..." for the leading extents)
    row_elements: Dim                 # elements of the largest output row: sets the threads
    buffers: tuple[SharedBuffer, ...]
    static_shared: int                # bytes of the reduction slots
    split: Optional["SplitLaunch"] = None   # attention: keys split over blocks, a workspace

    @property
    def shared(self) -> Dim:
        """Dynamic shared memory per block: every buffer, each padded to 16-byte alignment."""
        total = Dim.const(0)
        for b in self.buffers:
            total = total + b.bytes + VECTOR_BYTES
        return total


@dataclass(frozen=True)
class SplitLaunch:
    """What the host needs to split an attention kernel's keys over thread blocks
    (:mod:`.attention`): the grid's tiles are ``batch * ceil(group / block_rows)``, its key
    blocks ``ceil(keys / block_keys)``; each (tile, split) unit takes ``unit_bytes`` of the
    workspace, each tile 4 more (its counter)."""

    batch: Dim
    group: Dim
    keys: Dim
    block_rows: int
    block_keys: int
    unit_bytes: int


@dataclass(frozen=True)
class _Plan:
    """How a 1-D row is moved in vectors: the row's axis, elements per chunk, and the views
    whose addresses must be aligned (those contiguous along the axis)."""

    axis: int
    lanes: int
    aligned: tuple[View, ...]


def _leaves(x: Lazy) -> Optional[list[View]]:
    """The views an element-wise tree reads, None if it holds a concatenation or a ramp
    (an iota, which has no memory to load vectors from)."""
    if isinstance(x, View):
        return None if is_ramp(x) else [x]
    if isinstance(x, Splat):
        return []
    if isinstance(x, Concat):
        return None
    out: list[View] = []
    for v in x.operands:
        if v.sizes:
            found = _leaves(v)
            if found is None:
                return None
            out += found
    return out


class _Lowering(RowLowering):
    """Builds the ``gpu.func`` of one kernel; see the module docstring."""

    backend = "ptx"

    def __init__(self, fn: Any) -> None:
        super().__init__(fn)
        self.buffers: list[SharedBuffer] = []
        self.slots = 0
        self.hint_keys: list[Num] = []        # per staged hint: the row it holds (loop-carried)
        self.next_keys: list[Num] = []
        self.staged: dict[int, int] = {}      # argument number -> its hint's key index
        self.tid = self.threads = self.slot_base = self.shared_base = self.offset = None
        fused = ir.DictAttr(fn.attributes[FUSED_ATTR]) if FUSED_ATTR in fn.attributes \
            else None
        self.hints = [ir.DictAttr(h) for h in fused[INPUT_HINTS_ATTR]] \
            if fused is not None and INPUT_HINTS_ATTR in fused else []
        self.evict_last = frozenset(number for number, hint in enumerate(self.hints)
                                    if "level" in hint and
                                    ir.StringAttr(hint["level"]).value == EVICT_LAST_LEVEL)
        self.policy: Optional[ir.Value] = None

    # -- frame ---------------------------------------------------------------------------------
    workspaces = 0                         # buffers after the results (attention's split)

    def build(self, module_body: ir.Block) -> GpuKernel:
        n_buffers = len(self.inputs) + len(self.outputs) + self.workspaces
        types = [_ptr(1)] * n_buffers + [i64()] * (len(self.symbols) + self.rank_generic + 2)
        with self.fn.location, ir.InsertionPoint(module_body):
            slots = llvm.GlobalOp(ir.TypeAttr.get(ir.Type.parse("!llvm.array<1 x f32>")),
                                  f"__tilec_slots_{self.name}",
                                  ir.Attribute.parse("#llvm.linkage<internal>"),
                                  addr_space=3, alignment=VECTOR_BYTES)
            kernel = gpu.GPUFuncOp(ir.FunctionType.get(types, []), sym_name=self.name,
                                   kernel=True)
            if not self._in_place():
                kernel.attributes["arg_attrs"] = ir.ArrayAttr.get(
                    [_attrs("llvm.noalias", "llvm.readonly")] * len(self.inputs)
                    + [_attrs("llvm.noalias")] * (len(self.outputs) + self.workspaces)
                    + [_attrs()] * (len(types) - n_buffers))
            block = kernel.body.blocks.append(*types)
            args = [Num(a) for a in block.arguments]
            with ir.InsertionPoint(block):
                self.entry = ir.InsertionPoint(block)
                self.arg_buffers = [a.value for a in args[:len(self.inputs)]]
                self.out_buffers = [a.value for a in
                                    args[len(self.inputs):n_buffers - self.workspaces]]
                self.workspace = args[n_buffers - 1].value if self.workspaces else None
                rest = args[n_buffers:]
                for name, value in zip(self.symbols, rest):
                    self.values[name] = to_int(value, index())
                if self.rank_generic:
                    self.values[LEAD] = to_int(rest[len(self.symbols)], index())
                rows, per_block = (to_int(v, index()) for v in rest[-2:])
                self.grid_rows = rows
                self.tid = Num(gpu.thread_id(gpu.Dimension.x))
                self.threads = Num(gpu.block_dim(gpu.Dimension.x))
                self.slot_base = llvm.mlir_addressof(_ptr(3), slots.sym_name.value)
                self.shared_base = llvm.mlir_addressof(_ptr(3), SHARED_SYMBOL)
                first = Num(gpu.block_id(gpu.Dimension.x)) * per_block
                end = first + per_block
                last = select(end.lt(rows), end, rows)
                self.offset = const(index(), 0)
                self._row_loop(first, last)
                gpu.ReturnOp([])
        if not self.buffers:
            self.shared_base.owner.erase()
        if self.slots:
            slots.attributes["global_type"] = ir.TypeAttr.get(
                ir.Type.parse(f"!llvm.array<{self.slots * WARP} x f32>"))
        else:
            self.slot_base.owner.erase()
            slots.operation.erase()
        return GpuKernel(self.name, tuple(i.dtype for i in self.inputs),
                         tuple(i.dtype for i in self.outputs), tuple(self.symbols),
                         self.rank_generic, tuple(self.grid), self._row_elements(),
                         tuple(self.buffers), self.slots * WARP * 4, self.split_launch())

    def split_launch(self) -> Optional["SplitLaunch"]:
        """How the host splits this kernel's grid (attention's keys), None: it does not."""
        return None

    def _in_place(self) -> bool:
        """Whether an output may take the buffer of an input (tile-fuse's ``tile.reuse``):
        then no buffer is marked ``noalias`` (which lets reads go through the read-only
        cache)."""
        if FUSED_ATTR not in self.fn.attributes:
            return False
        fused = ir.DictAttr(self.fn.attributes[FUSED_ATTR])
        return REUSE_ATTR in fused and any(int(x) >= 0 for x in fused[REUSE_ATTR])

    def _row_elements(self) -> Dim:
        block = self.fn.regions[0].blocks[0]
        largest = Dim.const(1)
        for op in block.operations:
            if op.operation.name != "tile.store_row":
                continue
            count = Dim.const(1)
            for d in shape_of(tensor_info(op.operands[0].type)):
                count = count * d
            if count.value is None or largest.value is not None and count.value > largest.value:
                largest = count
        return largest

    def _row_loop(self, first: Num, last: Num) -> None:
        """The block's rows, the grid point carried (found by division once, then advanced
        with carries), and for each staged hint the row base it holds (-1: none yet)."""
        extents = [self.dim(grid_dim(g)) for g in self.grid]
        carried = grid_point(first, extents) if len(extents) > 1 else []
        keys = [const(index(), -1) for _ in self._staged_hints()]
        loop = scf.ForOp(first.value, last.value, const(index(), 1).value,
                         [c.value for c in carried + keys])
        self.entry = ir.InsertionPoint(loop.operation)
        with ir.InsertionPoint(loop.body):
            inner = [Num(v) for v in loop.inner_iter_args]
            if carried:
                self.coords = inner[:len(carried)]
            elif extents:
                self.coords = [Num(loop.induction_variable)]
            self.hint_keys = inner[len(carried):]
            self.next_keys = list(self.hint_keys)
            self.body()
            if self.buffers or self.slots:
                self.barrier()
            advanced = next_grid_point(self.coords, extents) if carried else []
            scf.YieldOp([c.value for c in advanced + self.next_keys])

    def _staged_hints(self) -> list[int]:
        """Argument numbers of the inputs whose rows tile-kernel put in local memory (a
        ``cache_hint`` at a resident level on a row that the next rows of a block reuse)."""
        block = self.fn.regions[0].blocks[0]
        staged = []
        for op in block.operations:
            if op.operation.name == "tile.load_row" and \
                    ir.StringAttr(op.attributes["space"]).value == "local":
                number = ir.BlockArgument(op.operands[0]).arg_number
                self.staged[number] = len(staged)
                staged.append(number)
        return staged

    def barrier(self) -> None:
        gpu.barrier()

    # -- shared memory -------------------------------------------------------------------------
    def scratch(self, sizes: Sequence[Dim], dtype: str, storage: Optional[str] = None,
                name: str = "scratch") -> View:
        """A row-major buffer in dynamic shared memory (in registers' precision unless
        ``storage`` is given), placed once per kernel at a 16-byte aligned offset."""
        storage = storage or SCRATCH[compute_kind(dtype)]
        nbytes = numel(sizes) * ELEMENT_BYTES[storage]
        self.buffers.append(SharedBuffer(f"{name}#{len(self.buffers)}", nbytes))
        with self.entry:
            start = (self.offset + (VECTOR_BYTES - 1)) // VECTOR_BYTES * VECTOR_BYTES
            self.offset = start + self.dim(nbytes)
            pointer = _gep(self.shared_base, start, ir.IntegerType.get_signless(8))
        return View(pointer, storage, None, ZERO, tuple(sizes), row_major(sizes), dtype)

    # -- elements ------------------------------------------------------------------------------
    def read(self, view: View, ivs: Sequence[Num]) -> Num:
        pointer = _gep(view.buffer, self.address(view, ivs), STORAGE[view.storage]())
        return Num(self._load(view, pointer, 1))

    def _load(self, view: View, pointer: ir.Value, lanes: int) -> ir.Value:
        """``lanes`` elements of ``view`` at ``pointer`` (a vector when more than one, aligned
        to 16 bytes or to its size); through the L2 evict-last policy when ``view`` reads an
        input hinted at level L2."""
        if any(view.buffer == self.arg_buffers[n] for n in self.evict_last):
            return self._evict_last_load(pointer, view.storage, lanes)
        element = STORAGE[view.storage]()
        if lanes == 1:
            return llvm.load(element, pointer)
        return llvm.load(ir.VectorType.get([lanes], element), pointer,
                         alignment=min(VECTOR_BYTES, lanes * ELEMENT_BYTES[view.storage]))

    def _evict_last_load(self, pointer: ir.Value, storage: str, lanes: int) -> ir.Value:
        """:meth:`_load` through the evict-last policy: one ``b16`` or ``b32`` element, or
        a ``v4.b32`` per 16 bytes of a vector."""
        element = STORAGE[storage]()
        nbytes = lanes * ELEMENT_BYTES[storage]
        if lanes == 1:
            bits = 8 * nbytes
            loaded = self._evict_last_asm(ir.IntegerType.get_signless(bits), pointer,
                                          f"b{bits} $0", "=h" if bits == 16 else "=r")
            return llvm.bitcast(element, loaded)
        words = []
        four = ir.Type.parse("!llvm.struct<(i32, i32, i32, i32)>")
        for chunk in range(nbytes // VECTOR_BYTES):
            address = _gep(pointer, const(index(), chunk * VECTOR_BYTES),
                           ir.IntegerType.get_signless(8))
            loaded = self._evict_last_asm(four, address, "v4.b32 {$0, $1, $2, $3}",
                                          "=r,=r,=r,=r")
            words += [llvm.extractvalue(i32(), loaded, [k]) for k in range(4)]
        vector = llvm.mlir_poison(ir.VectorType.get([len(words)], i32()))
        for k, word in enumerate(words):
            vector = llvm.insertelement(vector, word, const(i32(), k).value)
        return llvm.bitcast(ir.VectorType.get([lanes], element), vector)

    def _evict_last_asm(self, result: ir.Type, pointer: ir.Value, destination: str,
                        constraints: str) -> ir.Value:
        """``ld.global.L2::cache_hint.<destination>, [pointer], policy`` (``.nc`` unless an
        output may take an input's buffer; then it also keeps its place among the stores)."""
        if self.policy is None:
            with self.entry:
                self.policy = llvm.inline_asm(i64(), [], EVICT_LAST_POLICY, "=l")
        in_place = self._in_place()
        operands = len(constraints.split(","))
        load = "ld.global" + ("" if in_place else ".nc") + ".L2::cache_hint"
        return llvm.inline_asm(result, [pointer, self.policy],
                               f"{load}.{destination}, [${operands}], ${operands + 1};",
                               f"{constraints},l,l", has_side_effects=in_place)

    def store(self, value: Num, dest: View, ivs: Sequence[Num]) -> None:
        pointer = _gep(dest.buffer, self.address(dest, ivs), STORAGE[dest.storage]())
        llvm.store(narrow(value, dest.storage).value, pointer)

    def apply(self, op: str, args: Sequence[Num], dtype: str, source: str) -> Num:
        return apply(op, args, dtype, source, _UNARY, _pow)

    def scalar_argument(self, number: int, info: TensorInfo) -> Splat:
        with self.entry:
            loaded = Num(llvm.load(STORAGE[info.dtype](), self.arg_buffers[number]))
            value = round_to(widen(loaded, info.dtype), info.dtype)
        return Splat(value, (), info.dtype)

    # -- traversal -----------------------------------------------------------------------------
    @contextmanager
    def spread(self, sizes: Sequence[Dim]) -> Iterator[list[Num]]:
        """A loop over the elements of ``sizes`` (flattened row-major), thread ``t`` taking
        ``t, t + T, ...``; inside it the value is the list of indices."""
        loop = scf.ForOp(self.tid.value, self.dim(numel(sizes)).value, self.threads.value)
        with ir.InsertionPoint(loop.body):
            yield self._unflatten(Num(loop.induction_variable), sizes)
            scf.YieldOp([])

    def _unflatten(self, flat: Num, sizes: Sequence[Dim]) -> list[Num]:
        ivs: list[Num] = []
        rest = flat
        non_unit = [a for a, d in enumerate(sizes) if d != ONE]
        for a in reversed(range(len(sizes))):
            if sizes[a] == ONE:
                ivs.insert(0, const(index(), 0))
            elif a == non_unit[0]:
                ivs.insert(0, rest)
            else:
                ivs.insert(0, rest % self.dim(sizes[a]))
                rest = rest // self.dim(sizes[a])
        return ivs

    def _plan(self, x: Lazy, dest_sizes: Sequence[Dim],
              dest: Optional[View]) -> Optional[_Plan]:
        """Vectors for a 1-D row whose views are contiguous or constant along it."""
        axes = [a for a, d in enumerate(dest_sizes) if d != ONE]
        views = _leaves(x)
        if len(axes) != 1 or views is None:
            return None
        axis = axes[0]
        views += [dest] if dest is not None else []
        if any(v.strides[axis] not in (ONE, ZERO) for v in views):
            return None
        aligned = tuple(v for v in views if v.strides[axis] == ONE)
        if not aligned:
            return None
        lanes = VECTOR_BYTES // min(ELEMENT_BYTES[v.storage] for v in aligned)
        return _Plan(axis, lanes, aligned)

    def _aligned(self, plan: _Plan) -> Num:
        """Whether every contiguous view starts on its vector alignment in this row."""
        ok: Optional[Num] = None
        for v in plan.aligned:
            size = ELEMENT_BYTES[v.storage]
            align = min(VECTOR_BYTES, plan.lanes * size)
            start = to_int(Num(llvm.ptrtoint(i64(), v.buffer)), index())
            start = start + self.address(v, [const(index(), 0)] * len(v.sizes)) * size
            this = (start % align).eq(0)
            ok = this if ok is None else ok & this
        return ok

    def _lanes(self, x: Lazy, plan: _Plan, first: Num, memo: dict[int, list[Num]]) -> list[Num]:
        """``plan.lanes`` consecutive elements of ``x`` from index ``first`` of the axis."""
        key = id(x)
        if key in memo:
            return memo[key]
        ivs = [const(index(), 0)] * len(x.sizes)
        if x.sizes:
            ivs[plan.axis] = first
        if isinstance(x, Splat) or not x.sizes:
            out = [self.load(x, ivs if x.sizes else [], {})] * plan.lanes
        elif isinstance(x, View) and x.strides[plan.axis] == ZERO:
            out = [self.load(x, ivs, {})] * plan.lanes
        elif isinstance(x, View):
            pointer = _gep(x.buffer, self.address(x, ivs), STORAGE[x.storage]())
            loaded = self._load(x, pointer, plan.lanes)
            out = [widen(Num(llvm.extractelement(loaded, const(i32(), j).value)), x.storage)
                   for j in range(plan.lanes)]
        else:
            operands = [self._lanes(v, plan, first, memo) for v in x.operands]
            out = [self.apply(x.op, [o[j] for o in operands], x.dtype, x.operands[0].dtype)
                   for j in range(plan.lanes)]
        memo[key] = out
        return out

    def _store_lanes(self, values: list[Num], dest: View, plan: _Plan, first: Num) -> None:
        element = STORAGE[dest.storage]()
        vector = Num(llvm.mlir_poison(ir.VectorType.get([plan.lanes], element)))
        for j, v in enumerate(values):
            vector = Num(llvm.insertelement(vector.value, narrow(v, dest.storage).value,
                                            const(i32(), j).value))
        ivs = [const(index(), 0)] * len(dest.sizes)
        ivs[plan.axis] = first
        pointer = _gep(dest.buffer, self.address(dest, ivs), element)
        llvm.store(vector.value, pointer,
                   alignment=min(VECTOR_BYTES, plan.lanes * ELEMENT_BYTES[dest.storage]))

    def sweep(self, x: Lazy, carried: list[Num],
              fold: Optional[Callable[[list[Num], list[Num]], list[Num]]] = None,
              dest: Optional[View] = None) -> list[Num]:
        """Every element of ``x`` spread over the threads, either written to ``dest`` or
        folded into ``carried`` (``carried = fold(values, carried)`` with one element, or a
        vector's worth); in vectors when the row allows it and is aligned in this row."""
        plan = self._plan(x, x.sizes, dest)

        def element(flat: Num, acc: list[Num]) -> list[Num]:
            ivs = self._unflatten(flat, x.sizes)
            if dest is not None:
                self.store(self.load(x, ivs, {}), dest, ivs)
                return acc
            return fold([self.load(x, ivs, {})], acc)

        n = self.dim(numel(x.sizes))
        if plan is None:
            return _for(self.tid, n, self.threads, carried, element)

        def chunk(c: Num, acc: list[Num]) -> list[Num]:
            first = c * plan.lanes
            values = self._lanes(x, plan, first, {})
            if dest is not None:
                self._store_lanes(values, dest, plan, first)
                return acc
            return fold(values, acc)

        chunks = n // plan.lanes
        branch = scf.IfOp(self._aligned(plan).value, [c.type for c in carried], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            out = _for(self.tid, chunks, self.threads, carried, chunk)
            out = _for(chunks * plan.lanes + self.tid, n, self.threads, out, element)
            scf.YieldOp([v.value for v in out])
        with ir.InsertionPoint(branch.else_block):
            scf.YieldOp([v.value for v in _for(self.tid, n, self.threads, carried, element)])
        return [Num(r) for r in branch.results]

    # -- writing -------------------------------------------------------------------------------
    def write(self, x: Lazy, dest: View) -> None:
        """Compute ``x`` into ``dest`` (a concatenation part by part)."""
        if isinstance(x, Concat):
            for part, into in concat_parts(x, dest):
                self.write(part, into)
            return

        self.sweep(x, [], dest=dest)

    def copy(self, x: Lazy) -> View:
        """``x`` computed into a new shared buffer, visible to the whole block."""
        view = self.scratch(x.sizes, x.dtype, name="value")
        self.write(x, view)
        self.barrier()
        return view

    def load_row(self, op: Any) -> Lazy:
        """A global row, or for a staged ``cache_hint`` its copy in shared memory, refreshed
        only when the row it holds changes."""
        number = ir.BlockArgument(op.operands[0]).arg_number
        view = super().load_row(op)
        if number not in self.staged or not isinstance(view, View):
            return view
        k = self.staged[number]
        copy = self.scratch(view.sizes, view.dtype, storage=view.storage, name="cache_hint")
        key = self.row_base(op, self.inputs[number]) or const(index(), 0)
        refresh = scf.IfOp(key.ne(self.hint_keys[k]).value)
        with ir.InsertionPoint(refresh.then_block):
            self.write(view, copy)
            scf.YieldOp([])
        self.barrier()
        self.next_keys[k] = key
        return copy

    # -- reductions and matmul -----------------------------------------------------------------
    def full_reduction(self, x: Lazy, axes: list[int], kind: str, keepdims: bool) -> Lazy:
        combine, identity = _COMBINERS[kind]
        init = const(f32(), identity)
        kept = [a for a in range(len(x.sizes)) if a not in axes]
        out_sizes = reduced_sizes(x.sizes, axes, keepdims)
        if all(x.sizes[a] == ONE for a in kept):
            total = self.block_reduce(x, init, combine)
            if kind == "mean":
                total = total * self.reciprocal_count(x.sizes, axes)
            return Splat(total, out_sizes, x.dtype)
        acc = self.scratch(tuple(x.sizes[a] for a in kept), x.dtype, name="reduction")
        with self.spread(acc.sizes) as kept_ivs:
            def step(reduced: list[Num], a: Num) -> Num:
                ivs, r = [], iter(reduced)
                for axis in range(len(x.sizes)):
                    ivs.append(kept_ivs[kept.index(axis)] if axis in kept else next(r))
                return combine(a, self.load(x, ivs, {}))
            total = self.fold([x.sizes[a] for a in axes], init, step)
            self.store(total, acc, kept_ivs)
        self.barrier()
        source = [kept.index(a) if a in kept else None for a in range(len(x.sizes))
                  if keepdims or a not in axes]
        result = reindex(acc, out_sizes, source)
        if kind != "mean":
            return result
        scale = Splat(self.reciprocal_count(x.sizes, axes), (), x.dtype)
        return Map("mul", (result, scale), out_sizes, x.dtype)

    def block_reduce(self, x: Lazy, init: Num, combine: Callable[[Num, Num], Num]) -> Num:
        """``combine`` over every element of ``x`` by the whole block: each thread folds its
        elements, each warp folds its threads with shuffles, and every thread folds the warps'
        partial results from this reduction's shared slot."""
        def step(values: list[Num], acc: list[Num]) -> list[Num]:
            total = acc[0]
            for v in values:
                total = combine(total, v)
            return [total]

        (partial,) = self.sweep(x, [init], step)
        width = const(i32(), WARP)
        offset = WARP // 2
        while offset:
            other = gpu.shuffle(partial.value, const(i32(), offset).value, width.value,
                                gpu.ShuffleMode.XOR)[0]
            partial = combine(partial, Num(other))
            offset //= 2
        slot = _gep(self.slot_base, const(index(), self.slots * WARP), f32())
        self.slots += 1
        first_lane = scf.IfOp((self.tid % WARP).eq(0).value)
        with ir.InsertionPoint(first_lane.then_block):
            llvm.store(partial.value, _gep(slot, self.tid // WARP, f32()))
            scf.YieldOp([])
        self.barrier()
        (total,) = _for(const(index(), 0), self.threads // WARP, const(index(), 1), [init],
                        lambda w, acc: [combine(acc[0], Num(llvm.load(f32(), _gep(slot, w,
                                                                                     f32()))))])
        return total

    def matmul(self, op: Any) -> Lazy:
        """``[.., M, K] @ [.., K, N]`` (or a row ``[K] @ [K, N]``) into shared memory: each
        thread one output element, its dot product in float32."""
        lhs, rhs = (self.readable(self.lazy(v)) for v in op.operands)
        info = self.result_info(op)
        sizes = shape_of(info)
        out = self.scratch(sizes, info.dtype, name="matmul")
        batch = len(rhs.sizes) - 2
        with self.spread(sizes) as ivs:
            rows, n = ivs[:-1], ivs[-1]
            total = self.fold([rhs.sizes[-2]], const(f32(), 0.0), lambda k, acc: multiply_add(
                self.load(lhs, rows + k, {}), self.load(rhs, ivs[:batch] + k + [n], {}), acc))
            self.store(total, out, ivs)
        self.barrier()
        return out


def _attrs(*names: str) -> ir.DictAttr:
    return ir.DictAttr.get({name: ir.UnitAttr.get() for name in names})


def _gep(base: ir.Value, offset: Num, element: ir.Type) -> ir.Value:
    """``base + offset`` elements of type ``element``."""
    inbounds = ir.IntegerAttr.get(i32(), 3)       # inbounds | nusw: offsets never leave a buffer
    return llvm.GEPOp(base.type, base, [to_int(offset, i64()).value], [_DYNAMIC_INDEX], element,
                      inbounds).result


_DYNAMIC_INDEX = -2**31    # rawConstantIndices: this index is an operand


def _for(lo: Num, hi: Num, step: Num, carried: list[Num],
         body: Callable[[Num, list[Num]], list[Num]]) -> list[Num]:
    """``scf.for`` from ``lo`` to ``hi`` by ``step`` carrying ``carried``."""
    loop = scf.ForOp(lo.value, hi.value, step.value, [c.value for c in carried])
    with ir.InsertionPoint(loop.body):
        out = body(Num(loop.induction_variable), [Num(v) for v in loop.inner_iter_args])
        scf.YieldOp([v.value for v in out])
    return [Num(r) for r in loop.results]


def is_ptx_kernel(op: Any) -> bool:
    """Whether ``op`` is a kernel function (``tile.kernel``) for the ptx target."""
    return kernel_target(op) == "ptx"


def _lowering(fn: Any) -> _Lowering:
    """FlashAttention-2 for an ``attention`` kernel it supports (:mod:`.attention`), the
    tensor-core GEMM for a ``gemm`` kernel it supports (:mod:`.gemm`), the FFMA register
    tiles for a float32 one (:mod:`.ffma`), else rows."""
    from . import attention, ffma, gemm

    params = TileParams.of(fn.attributes[KERNEL_ATTR])
    if attention.supported(fn, params.attention):
        return attention.AttentionLowering(fn, params.attention)
    tile = params.gemm
    if tile is not None and gemm.supported(fn, tile):
        return gemm.GemmLowering(fn, tile)
    if tile is not None and ffma.supported(fn, tile):
        return ffma.FfmaGemmLowering(fn, tile)
    return _Lowering(fn)


def _build(fn: Any, body: ir.Block) -> GpuKernel:
    """The kernel of ``fn`` in ``body``; an attention kernel whose chain needs shared memory
    is taken out again and lowered by rows."""
    from .attention import NeedsMemory

    before = len(list(body.operations))
    try:
        return _lowering(fn).build(body)
    except NeedsMemory:
        for op in list(body.operations)[before:]:
            op.operation.erase()
        return _Lowering(fn).build(body)


def _scores_function(op: Any) -> bool:
    """Whether ``op`` is the scores function of an attention kernel: the CPU runtime calls
    its epilogue; the PTX attention kernel applies the chain itself, so it is not built."""
    return "scores_of" in ir.DictAttr(op.attributes[KERNEL_ATTR])


def lower_kernels(module: ir.Module) -> tuple[ir.Module, list[GpuKernel]]:
    """A new module holding ``gpu.module @tilec_kernels`` with the kernel of every ptx kernel
    function of ``module``."""
    with module.context, ir.Location.unknown():
        out = ir.Module.create()
        out.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()
        with ir.InsertionPoint(out.body):
            container = gpu.GPUModuleOp(MODULE)
        body = container.bodyRegion.blocks.append()
        with ir.InsertionPoint(body):
            llvm.GlobalOp(ir.TypeAttr.get(ir.Type.parse("!llvm.array<0 x i8>")), SHARED_SYMBOL,
                          ir.Attribute.parse("#llvm.linkage<external>"), addr_space=3,
                          alignment=VECTOR_BYTES)
        kernels = [_build(op, body) for op in module.body.operations
                   if is_ptx_kernel(op) and not _scores_function(op)]
    return out, kernels


def check_shared(module: ir.Module, kernels: list[GpuKernel], limit: int, arch: str) -> None:
    """A located error for a kernel that needs more shared memory than ``arch`` has."""
    functions: dict[str, Any] = {ir.StringAttr(op.attributes["sym_name"]).value: op
                                 for op in module.body.operations if is_ptx_kernel(op)}
    for kernel in kernels:
        need = kernel.shared.value
        if need is None or need + kernel.static_shared <= limit:
            continue
        listing = ", ".join(f"{b.name} {b.bytes} B" for b in kernel.buffers)
        raise TilecError(
            f"kernel '{kernel.name}' needs {need + kernel.static_shared} bytes of shared memory "
            f"per block ({listing}, reduction slots {kernel.static_shared} B, 16-byte "
            f"alignment), more than the {limit} bytes of {arch}",
            span_of(functions[kernel.name].location))
