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

How a row is computed: every tile value becomes a lazy value (:mod:`..common.rows`); nothing
is computed until a value must be in memory.  A ``store_row`` evaluates its value's whole tree in
one loop nest writing the output row; reductions and matmul read their operands lazily and
leave their result in a float32 (int32) scratch buffer or, for one element, in a register;
softmax leaves its exponentials in scratch, or where the float32 output row it is stored to is
computed, for that store to scale.  A value is also written to scratch when it is read more
than once (two consumers, or a consumer that reads it twice: var, softmax, the right side of a
matmul with rows) AND it contains a transcendental op; cheap values are recomputed.  Scratch
buffers are allocated once per call before the row loop and reused by every row.  Arithmetic
is float32 (int32); float16/bfloat16 are widened on load, narrowed on store, and rounded in
registers at an explicit ``tile.cast``.  ``tile.check`` is the host's business (it knows the
symbols before any kernel runs) and ``tile.hint`` has no effect here.

A kernel whose tile parameters give a two-dimensional ``block`` (a layout change whose rows
read an input across its last axis) walks its rows in blocks instead
(:meth:`_Kernel._block_loop`): the store of each row writes only the block's range of elements, row after
row, so that the input lines the block reads are used whole while they are in L1; there is no
prefetch and no streaming.  A kernel that only moves data moves a block's rows together, in
squares of registers (:mod:`.transpose`), with non-temporal stores into a big output
(:meth:`_Kernel.store_squares`).

Memory: before a row's passes, the contiguous input rows of the next grid point of the launch
are prefetched into L2 (:meth:`_Kernel.prefetch_next_row`), so that their reads overlap this
row's arithmetic.  A contiguous output row of an output of STREAM_MIN_BYTES or more (decided
at run time) is computed block by block into a scratch row and copied out with non-temporal
stores, which do not read the lines they overwrite (:meth:`_Kernel.row_out`); the kernel then
ends with an ``sfence``.  The row of a stored softmax is copied out during the next row's
exponentials instead, so that the stores drain while the core computes
(:meth:`_Kernel.deferred_stream`).
"""
from __future__ import annotations

import math
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence

from ...dialect import ELEMENT_BYTES, FUSED_ATTR, KERNEL_ATTR, REUSE_ATTR
from ...dialect.types import FLOAT_DTYPES, TensorInfo, tensor_info
from ...dims import Dim, parse_dim
from ...mlir import arith, func, ir, llvm, memref, scf
from ...tiling.tiler import SPLIT_MIN_ROWS, GemmTile, TileParams
from ..common.layout import grid_dim, ints, shape_of
from ..common.rows import (STORAGE, SCRATCH, RowLowering, UnaryTable, apply, argument_storage,
                           grid_point, kernel_target, narrow, next_grid_point, reduced_sizes,
                           round_to, spread, widen)
from ..common.scalar import (Num, bitcast, const, f32, fabs, i16, i32, i64, index, multiply_add,
                             round_even, select, sqrt, to_int)
from ..common.values import (LEAD, ONE, ZERO, Concat, Lazy, Map, Splat, View, compute_kind,
                             concat_parts, numel, reindex, row_major)
from . import mathlib
from . import transpose
from .transpose import transposable


EPILOGUE = "__epilogue"   # the suffix of a gemm kernel's epilogue function


@dataclass(frozen=True)
class KernelSignature:
    """What the host needs to call one kernel (see the module docstring for the ABI)."""

    name: str
    inputs: tuple[str, ...]      # storage element type of each argument buffer
    outputs: tuple[str, ...]     # ... and of each result buffer
    symbols: tuple[str, ...]     # the values ``dims`` starts with
    rank_generic: bool           # whether ``dims`` continues with n and the ``...`` extents
    grid: tuple[str, ...]        # the grid's dimensions ("..." for the leading extents)
    gemm: Optional[GemmTile] = None   # the matmul schedule: the function is its epilogue
    # a split reduction: (the most tiles, the reduced extent, elements of a partial result);
    # the kernel then takes a float32 workspace after its results, and its rows are the
    # tiles, then one that combines them
    split: tuple[int, str, str] = ()

    @property
    def c_symbol(self) -> str:
        return f"_mlir_ciface_{self.name}"

    @property
    def c_symbols(self) -> list[str]:
        """The C symbols of its functions: the rows function, and a gemm kernel's epilogue
        (:meth:`_Kernel.build_epilogue`)."""
        return [self.c_symbol] + ([self.c_symbol + EPILOGUE] if self.gemm is not None else [])


CACHE_LINE_BYTES = 64
PREFETCH_MIN_BYTES = 1024   # shorter rows are left to the hardware prefetchers
# and so is a row's part beyond this: a longer burst of prefetches competes with the row's own
# reads and stores (SwiGLU's rows of 32 KiB lost 13% prefetched whole; against 8 KiB, 2 KiB
# was 2-5% faster over the six bench operators in four runs, 5-12% for GELU and SwiGLU)
PREFETCH_MAX_BYTES = 2048
PREFETCH_TO_L2 = 2          # llvm.prefetch's locality 2: prefetcht1
# An output at least this big is stored past the caches: on the machine this was tuned on
# (2 cores, 2 MiB of L2 each), softmax and the norms won 7-35% streaming 48 MiB or more, broke
# even at 32 MiB and lost 10-30% at 19 MiB and less (the output stays cached between calls).
STREAM_MIN_BYTES = 32 << 20
STREAM_VECTOR_BYTES = 32    # one AVX store, which a non-temporal store needs aligned
# a streaming row is computed and stored out this much (whole lines) at a time
STREAM_BLOCK_BYTES = 1024
# Shorter rows do not stream: their partial lines at either end, written the ordinary way,
# and the copy's set-up would cost more than the whole lines save (rope's rows of 128 lost 2x).
STREAM_MIN_ROW_BYTES = 2048


@dataclass(frozen=True)
class _RowOut:
    """Where the row of an output at the current grid point is computed: ``target``, which is
    ``dest``, the row's place in the output, or, for an output that may stream, a run-time
    choice: when ``streams`` holds, the row of ``staging``, copied to ``dest`` afterwards
    with non-temporal stores."""

    target: View
    dest: View
    staging: Optional[View] = None
    streams: Optional[Num] = None


# bfloat16 buffers hold i16 here: given bfloat values, LLVM folds the NaN select of the
# rounding into a select of bfloat, which the x86 back end computes in float32 and narrows
# with a call of __truncsfbf2 (libgcc's, which a library does not link)
CPU_STORAGE = {**STORAGE, "bfloat16": i16}


def _memref(storage: str) -> ir.Type:
    return ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], CPU_STORAGE[storage]())


def _stored(value: Num, storage: str) -> Num:
    """``value`` (in registers) as an element of a ``storage`` buffer of this backend."""
    element = narrow(value, storage)
    return bitcast(element, i16()) if storage == "bfloat16" else element


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)

# softmax's exponentials of x - max (never above 0): a Map op of this backend's own
EXP_NONPOSITIVE = "exp_nonpositive"
# the suffix of an op computed in mathlib's NARROW precision (:func:`_rounded_narrow`)
NARROW = ".narrow"


def _gelu_tanh(x: Num, precision: mathlib.Precision) -> Num:
    inner = (x * x * x * 0.044715 + x) * _SQRT_2_OVER_PI
    return x * 0.5 * (mathlib.tanh(inner, precision) + 1.0)


# the functions of two precisions, which take it as their second argument
_TWO_PRECISIONS: dict[str, Callable[[Num, mathlib.Precision], Num]] = {
    EXP_NONPOSITIVE: mathlib.exp_nonpositive,
    "exp": mathlib.exp,
    "sigmoid": mathlib.sigmoid,
    "tanh": mathlib.tanh,
    "silu": mathlib.silu,
    "gelu": mathlib.gelu,
    "gelu_tanh": _gelu_tanh,
}

_FLOAT_UNARY: UnaryTable = {
    "log": mathlib.log,
    "sqrt": sqrt,
    "rsqrt": lambda x: 1.0 / sqrt(x),
    "abs": fabs,
    "reciprocal": lambda x: 1.0 / x,
    "relu": lambda x: x.maximum(0.0),
    "sin": mathlib.sin,
    "cos": mathlib.cos,
    "erf": mathlib.erf,
    "round": round_even,
    **{name: (lambda x, f=f: f(x, mathlib.FULL)) for name, f in _TWO_PRECISIONS.items()},
    **{name + NARROW: (lambda x, f=f: f(x, mathlib.NARROW))
       for name, f in _TWO_PRECISIONS.items()},
}

NARROW_FLOATS = ("float16", "bfloat16")
# users that keep the relative error of the value they read, up to a rounding of their own
_ERROR_KEEPING = ("tile.mul", "tile.div", "tile.neg")
_NARROW_SEARCH_DEPTH = 8


def _rounded_narrow(value: Any, depth: int = 0) -> bool:
    """Whether every element of ``value`` is rounded to float16 or bfloat16 (by a ``cast`` or
    the store of a result) before anything but a product, a quotient or a negation reads it
    (a softmax would not do: it turns an absolute error into a relative one): then mathlib's
    NARROW precision, a fiftieth of that rounding, cannot show in any result beyond it.  A
    chain longer than _NARROW_SEARCH_DEPTH is not followed."""
    users = [use.owner.operation for use in value.uses]
    users = [u for u in users if u.name != "tile.hint"]
    if not users or depth > _NARROW_SEARCH_DEPTH:
        return False
    for user in users:
        if user.name in ("tile.cast", "tile.store_row"):
            if tensor_info(user.results[0].type).dtype not in NARROW_FLOATS:
                return False
        elif user.name not in _ERROR_KEEPING or not _rounded_narrow(user.results[0], depth + 1):
            return False
    return True


# ---------------------------------------------------------------------------------------------
# One kernel


class _Kernel(RowLowering):
    """Builds the function of one kernel; see the module docstring."""

    backend = "cpu"

    def __init__(self, fn: Any, epilogue: bool = False) -> None:
        super().__init__(fn)
        self.epilogue = epilogue
        self.signature = KernelSignature(
            self.name, tuple(argument_storage(i) for i in self.inputs),
            tuple(i.dtype for i in self.outputs), tuple(self.symbols), self.rank_generic,
            tuple(self.grid), TileParams.of(fn.attributes[KERNEL_ATTR]).gemm,
            _split_of(ir.DictAttr(fn.attributes[KERNEL_ATTR])))
        self.deallocs: list[ir.Value] = []
        self.rows_out: dict[int, _RowOut] = {}    # output number -> where its row goes
        self.next_coords: list[Num] = []          # the grid point after ``coords``
        self.next_row_in_launch: Optional[Num] = None   # whether this launch computes it
        self.row_in_launch: Optional[Num] = None  # the row's number within this launch
        self.rows_in_launch: Optional[Num] = None
        # output number -> where the base of its row's place in the output is kept until the
        # next row streams that row out (:meth:`deferred_stream`)
        self.deferred: dict[int, ir.Value] = {}
        kernel = ir.DictAttr(fn.attributes[KERNEL_ATTR])
        # the tile's two-dimensional block (rows, elements), and while a block's row is
        # lowered, the range of its elements that the row's store writes
        self.block = tuple(ir.DenseI64ArrayAttr(kernel["block"])) if "block" in kernel \
            else (0, 0)
        self.element_range: Optional[tuple[Num, Num]] = None
        # a gemm kernel's accumulator tile: (buffer, first row, its row stride)
        self.accumulator: Optional[tuple[ir.Value, Num, Num]] = None
        # an attention kernel's scores function writes its result as a tile too, rows the
        # accumulator's stride apart (the runtime's block of scores), not into a [.., s, t]
        # tensor: one call a block instead of one a row (:meth:`tile_row`)
        self.tile_result = epilogue and "scores_of" in kernel
        self.row: Optional[Num] = None            # the grid row being computed
        # a kernel that only moves data, walked in squares of registers (:mod:`.transpose`),
        # and while a square's rows are lowered, the range of elements they move so
        self.square = bool(self.block[0]) and transposable(fn, self.grid)
        self.square_span: Optional[tuple[Num, Num]] = None
        self.square_rows: Optional[Num] = None
        self.fenced = False     # whether the kernel ends with an sfence
        # a split reduction (:mod:`tilec.tiling.split`): the most tiles, the reduced extent, the
        # elements of a partial result; while a row is lowered, "tile" (with the tile's
        # number and rows) or "combine"
        self.split = ir.IntegerAttr(kernel["split"]).value if "split" in kernel else 0
        self.split_dims = tuple(parse_dim(ir.StringAttr(kernel[k]).value)
                                for k in ("split_rows", "split_width")) if self.split else ()
        self.split_mode: Optional[str] = None
        self.tile: Optional[tuple[Num, Num, Num]] = None
        self.tiles: Optional[Num] = None
        self.workspace: Optional[ir.Value] = None

    # -- function frame -------------------------------------------------------------------------
    def build(self) -> None:
        buffers = [_memref(s) for s in self.signature.inputs + self.signature.outputs]
        dims_type = ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], i64())
        if self.epilogue:
            self.build_epilogue(buffers, dims_type)
            return
        if self.split:
            buffers.append(_memref("float32"))
        ftype = ir.FunctionType.get(buffers + [dims_type, index(), index()], [])
        with self.fn.location:
            block, args = self._entry_block(self.name, ftype)
            if self.split:
                self.workspace = args[len(self.inputs) + len(self.outputs)]
            dims_buffer, row_begin, row_end = args[-3:]
            with ir.InsertionPoint(block):
                self.entry = ir.InsertionPoint(block)
                self._bind_symbols(dims_buffer)
                if self.block[0]:
                    self._block_loop(Num(row_begin), Num(row_end))
                elif self.split:
                    self._split_loop(Num(row_begin), Num(row_end))
                else:
                    self._row_loop(Num(row_begin), Num(row_end))
                for k, pending in self.deferred.items():
                    self.stream_last_row(self.rows_out[k], pending)
                if self.fenced or any(out.streams is not None
                                      for out in self.rows_out.values()):
                    # non-temporal stores are weakly ordered: drain them before returning
                    llvm.call_intrinsic(None, "llvm.x86.sse.sfence", [], [], [])
                for buf in self.deallocs:
                    memref.dealloc(buf)
                func.ReturnOp([])

    def _entry_block(self, name: str, ftype: ir.Type) -> tuple[ir.Block, list[ir.Value]]:
        """A C-interface function ``name`` of ``ftype``: its entry block and arguments, the
        kernel's input and output buffers bound to the first of them."""
        fn = func.FuncOp(name, ftype)
        fn.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
        block = fn.add_entry_block()
        args = list(block.arguments)
        n_in = len(self.inputs)
        self.arg_buffers = args[:n_in]
        self.out_buffers = args[n_in:n_in + len(self.outputs)]
        return block, args

    def build_epilogue(self, buffers: list[ir.Type], dims_type: ir.Type) -> None:
        """The second function of a ``gemm`` kernel, ``NAME__epilogue`` (the first, the rows
        function, computes the whole kernel where nothing else runs the matmul): the
        epilogue over one accumulator tile,

            (memref per argument, memref per result, memref<?xf32> acc, memref<?xi64> dims,
             index row_begin, index row_end, index col_begin, index col_end, index ld)

        stores elements [col_begin, col_end) of the rows [row_begin, row_end) of every
        result, the matmul's value read from ``acc`` (element (r, j) at (r - row_begin) * ld
        + j - col_begin), everything else as the row body says; the runtime's GEMM
        (``cpu_gemm.c``) calls it with each finished tile.  An attention kernel's scores
        function writes its result laid out as ``acc`` (:attr:`tile_result`), for
        ``cpu_attention.c``'s blocks of scores."""
        ftype = ir.FunctionType.get(buffers + [_memref("float32"), dims_type] + [index()] * 5,
                                    [])
        with self.fn.location:
            block, args = self._entry_block(self.name + EPILOGUE, ftype)
            acc, dims_buffer, row_begin, row_end, col_begin, col_end, ld = args[-7:]
            with ir.InsertionPoint(block):
                self.entry = ir.InsertionPoint(block)
                self._bind_symbols(dims_buffer)
                self.accumulator = (acc, Num(row_begin), Num(ld))
                self.element_range = (Num(col_begin), Num(col_end))
                extents = [self.dim(grid_dim(g)) for g in self.grid]
                rows = scf.ForOp(row_begin, row_end, const(index(), 1).value)
                self.entry = ir.InsertionPoint(rows.operation)
                with ir.InsertionPoint(rows.body):
                    self.row = Num(rows.induction_variable)
                    self.coords = grid_point(self.row, extents) if len(extents) > 1 \
                        else [self.row]
                    self.body()
                    scf.YieldOp([])
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

    def _row_loop(self, row_begin: Num, row_end: Num) -> None:
        """``for row in [row_begin, row_end)`` with the grid point kept in ``self.coords``:
        found by division once, then advanced with carries."""
        extents = [self.dim(grid_dim(g)) for g in self.grid]
        carried = grid_point(row_begin, extents) if len(extents) > 1 else []
        one = const(index(), 1)
        loop = scf.ForOp(row_begin.value, row_end.value, one.value, [c.value for c in carried])
        self.entry = ir.InsertionPoint(loop.operation)
        with self.entry:
            self.rows_in_launch = row_end - row_begin
        with ir.InsertionPoint(loop.body):
            row = Num(loop.induction_variable)
            if carried:
                self.coords = [Num(c) for c in loop.inner_iter_args]
                self.next_coords = next_grid_point(self.coords, extents)
            elif extents:
                self.coords, self.next_coords = [row], [row + 1]
            self.next_row_in_launch = (row + 1).lt(row_end)
            self.row_in_launch = row - row_begin
            self.body()
            scf.YieldOp([c.value for c in self.next_coords] if carried else [])

    def _split_loop(self, row_begin: Num, row_end: Num) -> None:
        """Rows ``[row_begin, row_end)`` of a split reduction: row ``t`` below the tile count
        reduces tile ``t``'s rows of the reduced axis into its partial results in the
        workspace (:meth:`partial_reduction`); the row after the tiles combines them in
        tile order and computes the rest of the kernel (:meth:`combined_partials`).  The
        tiles are those of ``tilec_split_tiles`` in the host."""
        loop = scf.ForOp(row_begin.value, row_end.value, const(index(), 1).value)
        self.entry = ir.InsertionPoint(loop.operation)
        extent = self.dim(self.split_dims[0])
        with self.entry:
            rows = ((extent + (self.split - 1)) // self.split).maximum(SPLIT_MIN_ROWS)
            self.tiles = ((extent + rows - 1) // rows).maximum(1)
        with ir.InsertionPoint(loop.body):
            t = Num(loop.induction_variable)
            branch = scf.IfOp(t.lt(self.tiles).value, has_else=True)
            for block, mode in ((branch.then_block, "tile"), (branch.else_block, "combine")):
                with ir.InsertionPoint(block):
                    self.split_mode = mode
                    self.tile = (t, t * rows, (t * rows + rows).minimum(extent))
                    self.reductions.clear()
                    self.body()
                    scf.YieldOp([])
            scf.YieldOp([])
        self.split_mode = None

    def _block_loop(self, row_begin: Num, row_end: Num) -> None:
        """Rows ``[row_begin, row_end)`` in the tile's two-dimensional blocks: for each
        ``rows`` rows, ``elements`` of each row's one axis at a time, so that the input lines
        a row reads across the grid serve the block's other rows while they are in L1, and
        the block writes whole output lines (a kernel that only moves data does so in
        squares of registers: :meth:`_square_part`)."""
        rows, elements = (const(index(), b) for b in self.block)
        store = next(op for op in self.fn.regions[0].blocks[0].operations
                     if op.operation.name == "tile.store_row")
        extents = [self.dim(grid_dim(g)) for g in self.grid]
        length = self.dim(tensor_info(store.operands[0].type).shape[0])
        blocks = scf.ForOp(row_begin.value, row_end.value, rows.value)
        self.entry = ir.InsertionPoint(blocks.operation)
        with self.entry:
            start = self.line_phase() - elements
        with ir.InsertionPoint(blocks.body):
            first = Num(blocks.induction_variable)
            last = (first + rows).minimum(row_end)
            parts = scf.ForOp(start.value, length.value, elements.value)
            with ir.InsertionPoint(parts.body):
                lo = Num(parts.induction_variable)
                span = (lo.maximum(const(index(), 0)), (lo + elements).minimum(length))
                if self.square:
                    self._square_part(first, last, span, extents)
                else:
                    self._rows_of_block(first, last, span, extents)
                scf.YieldOp([])
            scf.YieldOp([])

    def line_phase(self) -> Num:
        """Elements from the output's first element to its next cache line: a block's parts
        begin there (the first part holds the elements before it), so that a part of whole
        lines is stored in strips, not element by element at its edges, when the rows begin
        where the first does (NumPy's big arrays begin 16 bytes past a page).  A blocked
        kernel has one output (:func:`~tilec.tiling.tiler.layout_block`)."""
        element = ELEMENT_BYTES[self.outputs[0].dtype]
        base = Num(memref.extract_aligned_pointer_as_index(self.out_buffers[0]))
        return ((0 - base) & (CACHE_LINE_BYTES - 1)) // element

    def _rows_of_block(self, first: Num, last: Num, span: tuple[Num, Num],
                       extents: list[Num]) -> None:
        """Rows ``[first, last)``, each storing the elements ``span`` of its row."""
        self.element_range = span
        each = scf.ForOp(first.value, last.value, const(index(), 1).value)
        with ir.InsertionPoint(each.body):
            row = Num(each.induction_variable)
            self.coords = grid_point(row, extents) if len(extents) > 1 else [row]
            self.body()
            scf.YieldOp([])
        self.element_range = None

    def _square_part(self, first: Num, last: Num, span: tuple[Num, Num],
                     extents: list[Num]) -> None:
        """Elements ``span`` of rows ``[first, last)`` of a kernel that only moves data, in
        runs of rows consecutive along the grid's last dimension (so are their input
        columns), each lowered from its first row's views (:meth:`store_squares`)."""
        if len(extents) == 1:
            self._squares_of_run(first, last, span, [first])
            return
        run = extents[-1]
        one = const(index(), 1)
        runs = scf.ForOp((first // run).value, ((last - 1) // run + 1).value, one.value)
        with ir.InsertionPoint(runs.body):
            q = Num(runs.induction_variable)
            begin = (q * run).maximum(first)
            self._squares_of_run(begin, ((q + 1) * run).minimum(last), span,
                                 grid_point(begin, extents))
            scf.YieldOp([])

    def _squares_of_run(self, first: Num, last: Num, span: tuple[Num, Num],
                        coords: list[Num]) -> None:
        self.coords = coords
        self.square_span = self.element_range = span
        self.square_rows = last - first
        self.body()
        self.square_span = self.element_range = None

    def store_squares(self, value: Lazy, dest: View) -> None:
        """Elements ``square_span`` of ``square_rows`` rows from this one: ``value`` is this
        row's view of the input, whose next rows start one element further on, ``dest`` its
        row of the output, followed by the next rows'.  Strips of squares
        (:mod:`.transpose`) where the input columns are whole aligned vectors and the
        output rows whole cache lines, stored past the caches when the output is big
        enough (:meth:`streams_squares`); the edges element by element."""
        assert isinstance(value, View) and len(value.sizes) == 1
        element = ELEMENT_BYTES[dest.storage]
        n, width = transpose.TILE, transpose.strip(dest.storage)
        lo, hi = self.square_span
        count = self.square_rows
        length = self.dim(dest.sizes[0])
        source = Num(memref.extract_aligned_pointer_as_index(value.buffer))
        target = Num(memref.extract_aligned_pointer_as_index(dest.buffer))
        head = (((0 - (source + self.address(value, [lo]) * element))
                 & (transpose.vector_bytes(dest.storage) - 1)) // element).minimum(count)
        rows = (head, head + (count - head) // n * n)
        skip = (((0 - (target + self.address(dest, [lo]) * element))
                 & (transpose.LINE_BYTES - 1)) // element).minimum(hi - lo)
        strips = (lo + skip, lo + skip + (hi - lo - skip) // width * width)
        step = (self.dim(value.strides[0]) * element, length * element)
        branch = scf.IfOp(self.streams_squares(dest, length).value, has_else=True)
        for block, nontemporal in ((branch.then_block, True), (branch.else_block, False)):
            with ir.InsertionPoint(block):
                groups = scf.ForOp(rows[0].value, rows[1].value, const(index(), n).value)
                with ir.InsertionPoint(groups.body):
                    k = Num(groups.induction_variable)
                    loop = scf.ForOp(strips[0].value, strips[1].value,
                                     const(index(), width).value)
                    with ir.InsertionPoint(loop.body):
                        j = [Num(loop.induction_variable)]
                        transpose.move_strip(
                            source + (self.address(value, j) + k) * element, step[0],
                            target + (self.address(dest, j) + k * length) * element, step[1],
                            dest.storage, nontemporal)
                        scf.YieldOp([])
                    scf.YieldOp([])
                scf.YieldOp([])
        edges = [((const(index(), 0), head), (lo, hi)), ((rows[1], count), (lo, hi)),
                 (rows, (lo, strips[0])), (rows, (strips[1], hi))]
        for rows_, elements in edges:
            self.copy_elements(value, dest, length, rows_, elements)

    def streams_squares(self, dest: View, length: Num) -> Num:
        """Whether the strips of a layout change go past the caches: an output of
        STREAM_MIN_BYTES or more whose rows all start a cache line where the first does."""
        element = ELEMENT_BYTES[dest.storage]
        with self.entry:
            size = Num(memref.dim(dest.buffer, const(index(), 0).value)) * element
            self.fenced = True
            return size.ge(STREAM_MIN_BYTES) & ((length * element)
                                                & (transpose.LINE_BYTES - 1)).eq(0)

    def copy_elements(self, value: View, dest: View, length: Num, rows: tuple[Num, Num],
                      elements: tuple[Num, Num]) -> None:
        """Elements ``elements`` of rows ``rows`` (counted from this one) of a layout change,
        one at a time (:meth:`store_squares`)."""
        with ExitStack() as stack:
            ivs = []
            for lo, hi in (rows, elements):
                loop = scf.ForOp(lo.value, hi.value, const(index(), 1).value)
                stack.enter_context(ir.InsertionPoint(loop.body))
                stack.callback(scf.YieldOp, [])
                ivs.append(Num(loop.induction_variable))
            k, j = ivs
            element = memref.load(value.buffer, [(self.address(value, [j]) + k).value])
            memref.store(element, dest.buffer, [(self.address(dest, [j]) + k * length).value])

    def store_row(self, op: Any) -> None:
        if self.split_mode == "tile":     # a tile leaves partial results only
            return
        value = self.lazy(op.operands[0])
        if self.element_range is not None:
            buffer, info = self.out_buffers[self.output_number(op)], \
                self.outputs[self.output_number(op)]
            dest = self.tile_row(op, buffer, info) if self.tile_result \
                else self.global_row(op, buffer, info)
            if self.square_span is not None:
                self.store_squares(value, dest)
                return
            lo, hi = self.element_range
            loop = scf.ForOp(lo.value, hi.value, const(index(), 1).value)
            with ir.InsertionPoint(loop.body):
                ivs = [Num(loop.induction_variable)]
                self.store(self.load(value, ivs, {}), dest, ivs)
                scf.YieldOp([])
            return
        out = self.row_out(op, may_stream=not (isinstance(value, (Map, Concat))
                                               and value.expensive))
        if out.staging is None:
            self.write(value, out.dest)
        elif isinstance(value, Concat):    # written part by part: streamed out whole
            self.write(value, out.target)
            with ir.InsertionPoint(scf.IfOp(out.streams.value).then_block):
                whole = (const(index(), 0), self.dim(out.dest.sizes[0]))
                self.stream(out.staging, out.dest, *whole)
                scf.YieldOp([])
        else:
            k = self.output_number(op)
            branch = scf.IfOp(out.streams.value, has_else=True)
            with ir.InsertionPoint(branch.then_block):
                if k in self.deferred:     # streamed out by the next row, or after the last
                    self.write(value, out.staging)
                    base = out.dest.base if out.dest.base is not None else const(index(), 0)
                    memref.store(base.value, self.deferred[k], [const(index(), 0).value])
                else:
                    self.write_streaming(value, out.staging, out.dest)
                scf.YieldOp([])
            with ir.InsertionPoint(branch.else_block):
                self.write(value, out.dest)
                scf.YieldOp([])

    def row_out(self, store: Any, may_stream: bool = True) -> _RowOut:
        """Where ``store`` (a ``tile.store_row``) writes the row of its output.  A contiguous
        row of one axis of a big output (:meth:`streams`) streams, unless ``may_stream`` is
        false: it is computed into a scratch row and copied out with non-temporal stores
        (:meth:`write_streaming`), because stores that miss the cache read each line from
        memory before writing it, and an output that big would not stay in the cache for its
        reader anyway.  That pays where the row is cheap to compute and the time goes to
        memory traffic (the last pass of softmax or a norm); a row of transcendentals keeps
        the cores busy meanwhile and would only pay for the copy, so it does not stream (on
        two cores GELU and SwiGLU lost 8-13% streamed)."""
        k = self.output_number(store)
        if k in self.rows_out:
            return self.rows_out[k]
        dest = self.global_row(store, self.out_buffers[k], self.outputs[k])
        out = _RowOut(dest, dest)
        if may_stream and len(dest.sizes) == 1 and dest.strides[0] == ONE \
                and dest.base is not None:
            staging = self.scratch(dest.sizes, dest.dtype, dest.storage)
            streams = self.streams(self.out_buffers[k], dest)
            target = View(arith.select(streams.value, staging.buffer, dest.buffer), dest.storage,
                          select(streams, const(index(), 0), dest.base), dest.offset,
                          dest.sizes, dest.strides, dest.dtype)
            out = _RowOut(target, dest, staging, streams)
        self.rows_out[k] = out
        return out

    def write_streaming(self, x: Lazy, staging: View, dest: View) -> None:
        """Compute the row ``x`` into ``staging`` and copy it to ``dest`` (:meth:`stream`) block
        by block: the elements before the first cache-line boundary of ``dest``, then blocks of
        STREAM_BLOCK_BYTES, so that the non-temporal stores drain while the next block is
        computed, and each line but the row's first and last is written by them whole."""
        count = self.dim(dest.sizes[0])
        element = ELEMENT_BYTES[dest.storage]
        head = self.line_head(dest, count)
        self.compute_and_stream(x, staging, dest, const(index(), 0), head)
        block = const(index(), STREAM_BLOCK_BYTES // element)
        blocks = scf.ForOp(head.value, count.value, block.value)
        with ir.InsertionPoint(blocks.body):
            lo = Num(blocks.induction_variable)
            self.compute_and_stream(x, staging, dest, lo, (lo + block).minimum(count))
            scf.YieldOp([])

    def line_head(self, dest: View, count: Num) -> Num:
        """How many of the first ``count`` elements of the contiguous row ``dest`` come before
        its first cache-line boundary."""
        element = ELEMENT_BYTES[dest.storage]
        return (((0 - self.row_address(dest)) & (CACHE_LINE_BYTES - 1)) // element).minimum(count)

    def compute_and_stream(self, x: Lazy, staging: View, dest: View, lo: Num, hi: Num) -> None:
        """Elements [lo, hi) of the row ``x`` computed into ``staging``, then streamed."""
        elements = scf.ForOp(lo.value, hi.value, const(index(), 1).value)
        with ir.InsertionPoint(elements.body):
            ivs = [Num(elements.induction_variable)]
            self.store(self.load(x, ivs, {}), staging, ivs)
            scf.YieldOp([])
        self.stream(staging, dest, lo, hi)

    def row_address(self, row: View) -> Num:
        """The address of the first element of the contiguous row ``row`` (the kernel ABI's
        memrefs, like scratch, have offset 0)."""
        first = self.address(row, [const(index(), 0)] * len(row.sizes))
        pointer = Num(memref.extract_aligned_pointer_as_index(row.buffer))
        return pointer + first * ELEMENT_BYTES[row.storage]

    def streams(self, buffer: ir.Value, row: View) -> Num:
        """Whether the output ``buffer``, of rows ``row``, streams: at least STREAM_MIN_BYTES
        in rows of at least STREAM_MIN_ROW_BYTES, its address a multiple of its element's size
        (so that cache-line boundaries fall between elements)."""
        element = ELEMENT_BYTES[row.storage]
        with self.entry:
            size = Num(memref.dim(buffer, const(index(), 0).value)) * element
            row_bytes = self.dim(row.sizes[0]) * element
            address = Num(memref.extract_aligned_pointer_as_index(buffer))
            return (size.ge(STREAM_MIN_BYTES) & row_bytes.ge(STREAM_MIN_ROW_BYTES)
                    & (address & (element - 1)).eq(0))

    def stream(self, staging: View, dest: View, lo: Num, hi: Num) -> None:
        """Copy elements [lo, hi) of the row ``staging`` to the contiguous row ``dest``: the
        whole cache lines of ``dest`` among them with aligned 32-byte non-temporal stores,
        which write a line without reading it first, the rest (the part of a line at either
        end) with ordinary stores.  A line is never written both ways: mixing them would
        flush it half written."""
        element = ELEMENT_BYTES[dest.storage]
        line = const(index(), CACHE_LINE_BYTES // element)
        first = self.address(dest, [const(index(), 0)])
        source = Num(memref.extract_aligned_pointer_as_index(staging.buffer))
        target = self.row_address(dest)
        misaligned = (target + lo * element) & (CACHE_LINE_BYTES - 1)
        lines_begin = (lo + ((0 - misaligned) & (CACHE_LINE_BYTES - 1)) // element).minimum(hi)
        lines_end = lines_begin + (hi - lines_begin) // line * line
        for start, end in ((lo, lines_begin), (lines_end, hi)):
            loop = scf.ForOp(start.value, end.value, const(index(), 1).value)
            with ir.InsertionPoint(loop.body):
                j = loop.induction_variable
                memref.store(memref.load(staging.buffer, [j]), dest.buffer,
                             [(first + Num(j)).value])
                scf.YieldOp([])
        vector = ir.VectorType.get([STREAM_VECTOR_BYTES // 4], i32())
        step = const(index(), STREAM_VECTOR_BYTES // element)
        loop = scf.ForOp(lines_begin.value, lines_end.value, step.value)
        with ir.InsertionPoint(loop.body):
            offset = Num(loop.induction_variable) * element
            value = llvm.load(vector, _pointer(source + offset), alignment=element)
            llvm.store(value, _pointer(target + offset), alignment=STREAM_VECTOR_BYTES,
                       nontemporal=True)
            scf.YieldOp([])

    def load_row(self, op: Any) -> Lazy:
        """The row that ``op`` loads, and the same row of the next grid point prefetched."""
        row = super().load_row(op)
        if isinstance(row, View) and self.element_range is None:
            self.prefetch_next_row(op, row)
        return row

    def prefetch_next_row(self, op: Any, row: View) -> None:
        """Ask for the lines of the row that ``op`` loads at the next grid point (the first
        PREFETCH_MAX_BYTES of it), into L2, when this launch computes that point and the row
        is contiguous and at least PREFETCH_MIN_BYTES long: one prefetch per cache line, all
        before this row's passes, so that the memory reads of the next row overlap this
        row's arithmetic (the hardware's prefetchers start late on each page and stop at its
        end)."""
        if not self.grid or row.base is None or tuple(row.strides) != row_major(row.sizes):
            return
        current = self.coords
        self.coords = self.next_coords
        next_base = self.row_base(op, tensor_info(op.operands[0].type))
        self.coords = current
        elements = self.dim(numel(row.sizes))
        element_bytes = ELEMENT_BYTES[row.storage]
        wanted = self.next_row_in_launch & (elements * element_bytes).ge(PREFETCH_MIN_BYTES)
        step = const(index(), CACHE_LINE_BYTES // element_bytes)
        end = next_base + elements.minimum(const(index(), PREFETCH_MAX_BYTES // element_bytes))
        with ir.InsertionPoint(scf.IfOp(wanted.value).then_block):
            lines = scf.ForOp(next_base.value, end.value, step.value)
            with ir.InsertionPoint(lines.body):
                memref.prefetch(row.buffer, [lines.induction_variable], is_write=False,
                                locality_hint=PREFETCH_TO_L2, is_data_cache=True)
                scf.YieldOp([])
            scf.YieldOp([])

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

    def scratch(self, sizes: Sequence[Dim], dtype: str, storage: Optional[str] = None) -> View:
        """A row-major scratch buffer (in registers' precision unless ``storage`` is given),
        cache-line aligned, allocated before the row loop and freed after it."""
        storage = storage or SCRATCH[compute_kind(dtype)]
        n = self.dim(numel(sizes))
        with self.entry:
            buf = memref.alloc(_memref(storage), [n.value], [], alignment=CACHE_LINE_BYTES)
        self.deallocs.append(buf)
        return View(buf, storage, None, ZERO, tuple(sizes), row_major(sizes), dtype)

    def read(self, view: View, ivs: Sequence[Num]) -> Num:
        return Num(memref.load(view.buffer, [self.address(view, ivs).value]))

    def store(self, value: Num, dest: View, ivs: Sequence[Num]) -> None:
        memref.store(_stored(value, dest.storage).value, dest.buffer,
                     [self.address(dest, ivs).value])

    def write(self, x: Lazy, dest: View) -> None:
        """Compute ``x`` into ``dest`` (a concatenation part by part)."""
        if isinstance(x, Concat):
            for part, into in concat_parts(x, dest):
                self.write(part, into)
            return
        with self.loops(dest.sizes) as ivs:
            self.store(self.load(x, ivs, {}), dest, ivs)

    def copy(self, x: Lazy) -> View:
        """``x`` computed into a new scratch buffer."""
        view = self.scratch(x.sizes, x.dtype)
        self.write(x, view)
        return view

    def scalar_argument(self, index_: int, info: TensorInfo) -> Splat:
        buffer = self.arg_buffers[index_]
        with self.entry:
            value = round_to(Num(memref.load(buffer, [const(index(), 0).value])), info.dtype)
        return Splat(value, (), info.dtype)

    def apply(self, op: str, args: Sequence[Num], dtype: str, source: str) -> Num:
        return apply(op, args, dtype, source, _FLOAT_UNARY, mathlib.pow)

    def elementwise(self, op: Any, name: str) -> Lazy:
        if name in _TWO_PRECISIONS and _rounded_narrow(op.results[0]):
            name += NARROW
        return super().elementwise(op, name)

    def full_reduction(self, x: Lazy, axes: list[int], kind: str, keepdims: bool) -> Lazy:
        combine, identity = _COMBINERS[kind]
        if self.split_mode == "tile":
            self.partial_reduction(x, axes, combine, identity)
            return Splat(const(f32(), identity), reduced_sizes(x.sizes, axes, keepdims),
                         x.dtype)
        if self.split_mode == "combine":
            total = self.combined_partials(x, axes, combine, identity, keepdims)
        else:
            total = self.combine_over(x, axes, combine, identity, keepdims)
        if kind != "mean":
            return total
        scale = self.reciprocal_count(x.sizes, axes)
        if isinstance(total, Splat):
            return Splat(total.value * scale, total.sizes, x.dtype)
        return Map("mul", (total, Splat(scale, (), x.dtype)), total.sizes, x.dtype)

    def partials(self, tile: Num, sizes: Sequence[Dim], dtype: str) -> View:
        """The partial results of tile number ``tile`` in the workspace."""
        base = tile * self.dim(self.split_dims[1])
        return View(self.workspace, "float32", base, ZERO, tuple(sizes), row_major(sizes), dtype)

    def partial_reduction(self, x: Lazy, axes: list[int], combine: Callable[[Num, Num], Num],
                          identity: float) -> None:
        """``combine`` over ``axes`` (axis 0 among them) of this tile's rows of ``x`` into its
        partial results: rows in order, the axes after the last kept one in registers."""
        kept = [a for a in range(len(x.sizes)) if a not in axes]
        t, lo, hi = self.tile
        sizes = [x.sizes[a] for a in kept]
        # accumulated in scratch, which LLVM knows to be aligned and apart from x, then copied
        acc = self.scratch(sizes, x.dtype)
        init = const(f32(), identity)
        with self.loops(acc.sizes) as ivs:
            self.store(init, acc, ivs)
        last = kept[-1] + 1 if kept else 1
        rows = scf.ForOp(lo.value, hi.value, const(index(), 1).value)
        with ir.InsertionPoint(rows.body):
            with self.loops(x.sizes[1:last]) as middle:
                outer = [Num(rows.induction_variable)] + middle
                kept_ivs = [outer[a] for a in kept]
                total = self.fold(x.sizes[last:], self.load(acc, kept_ivs, {}),
                                  lambda inner, a: combine(a, self.load(x, outer + inner, {})))
                self.store(total, acc, kept_ivs)
            scf.YieldOp([])
        self.write(acc, self.partials(t, sizes, x.dtype))

    def combined_partials(self, x: Lazy, axes: list[int], combine: Callable[[Num, Num], Num],
                          identity: float, keepdims: bool) -> Lazy:
        """The reduction of ``x`` from the tiles' partial results, combined in tile order: a
        Splat when one element results, else a view of scratch (as :meth:`combine_over`)."""
        kept = [a for a in range(len(x.sizes)) if a not in axes]
        sizes = [x.sizes[a] for a in kept]
        out_sizes = reduced_sizes(x.sizes, axes, keepdims)
        init = const(f32(), identity)
        tiles = scf.ForOp(const(index(), 0).value, self.tiles.value, const(index(), 1).value,
                          [init.value])
        if all(d == ONE for d in sizes):
            with ir.InsertionPoint(tiles.body):
                part = self.partials(Num(tiles.induction_variable), sizes, x.dtype)
                zeros = [const(index(), 0)] * len(sizes)
                scf.YieldOp([combine(Num(tiles.inner_iter_args[0]),
                                     self.load(part, zeros, {})).value])
            return Splat(Num(tiles.results[0]), out_sizes, x.dtype)
        acc = self.scratch(sizes, x.dtype)
        with ir.InsertionPoint(tiles.operation):
            with self.loops(sizes) as ivs:
                self.store(init, acc, ivs)
        with ir.InsertionPoint(tiles.body):
            part = self.partials(Num(tiles.induction_variable), sizes, x.dtype)
            with self.loops(sizes) as ivs:
                self.store(combine(self.load(acc, ivs, {}), self.load(part, ivs, {})), acc, ivs)
            scf.YieldOp([tiles.inner_iter_args[0]])
        source = [kept.index(a) if a in kept else None for a in range(len(x.sizes))
                  if keepdims or a not in axes]
        return reindex(acc, out_sizes, source)

    def combine_over(self, x: Lazy, axes: list[int], combine: Callable[[Num, Num], Num],
                     identity: float, keepdims: bool, copy_to: Optional[View] = None) -> Lazy:
        """``acc = combine(acc, element)`` over ``axes`` of ``x`` from ``identity``: a Splat
        when one element results, else a view of scratch.  With ``copy_to`` (of ``x``'s
        shape), each element is also stored there as it is read: one pass does both."""
        def element(ivs: list[Num]) -> Num:
            value = self.load(x, ivs, {})
            if copy_to is not None:
                self.store(value, copy_to, ivs)
            return value

        kept = [a for a in range(len(x.sizes)) if a not in axes]
        out_sizes = reduced_sizes(x.sizes, axes, keepdims)
        init = const(f32(), identity)
        if all(x.sizes[a] == ONE for a in kept):
            total = self.fold(x.sizes, init, lambda ivs, acc: combine(acc, element(ivs)))
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
                              lambda inner, a: combine(a, element(outer + inner)))
            self.store(total, acc, kept_ivs)
        source = [kept.index(a) if a in kept else None for a in range(len(x.sizes))
                  if keepdims or a not in axes]
        return reindex(acc, out_sizes, source)

    def softmax(self, op: Any) -> Lazy:
        """Three passes over the row: its max (:meth:`row_max`, else
        :func:`_stabilising_max`); ``exp(x - max)`` (never above 1:
        :func:`~.mathlib.exp_nonpositive`) written out while it is summed; the consumer's
        pass, which reads those back times ``1 / sum``.  A NaN, or an inf, in the
        row makes the sum, and so every result, NaN, as in the reference.  The exponentials
        go where the output row is computed (:meth:`output_row`: the row itself, or the
        scratch row it streams from) when the result is only stored there, so that the last
        pass stays in cache; else to scratch.  In a float16 or bfloat16 row they are rounded
        to it there, and the result once more: within the contract's tolerance of those
        types, with a float32 sum of the unrounded values, and 15% faster at 4096 x 4096."""
        x = self.readable(self.lazy(op.operands[0]))
        axis = len(x.sizes) + int(ir.IntegerAttr(op.attributes["axis"]).value)
        top = self.row_max(x, axis)
        if top is None:
            top = self.combine_over(x, [axis], _stabilising_max, -math.inf, True)
        shifted = Map("sub", (x, spread(top, x.sizes, [axis])), x.sizes, x.dtype)
        exps = self.output_row(op.results[0]) or self.scratch(x.sizes, x.dtype)
        exp = EXP_NONPOSITIVE + (NARROW if _rounded_narrow(op.results[0]) else "")
        element = Map(exp, (shifted,), x.sizes, x.dtype)
        deferred = self.deferred_stream(op, x)
        if deferred is None:
            total = self.combine_over(element, [axis], _sum, 0.0, True, copy_to=exps)
        else:
            total = Splat(self.sum_streaming_previous(element, exps, deferred), (ONE,), x.dtype)
        if isinstance(total, Splat):
            inverse = Splat(1.0 / total.value, x.sizes, x.dtype)
            return Map("mul", (exps, inverse), x.sizes, x.dtype)
        return Map("div", (exps, spread(total, x.sizes, [axis])), x.sizes, x.dtype)

    def row_max(self, x: Lazy, axis: int) -> Optional[Splat]:
        """Softmax's shift, the max along ``axis`` of ``x``, when that is the only axis longer
        than 1 and ``x`` is a float16 or bfloat16 row in memory, or one seen through casts
        between floats: taken over the stored bits as signed integers ordered as the floats are
        (:func:`_ordered_bits`), four integer ops per vector of 16 elements, where LLVM's
        vectorised ``maxnum`` widens every 8 to float32 and tests each vector for NaN (a
        float16 softmax at 4096 x 4096 ran 11% faster; float32 rows, 9% slower so, keep
        :func:`_stabilising_max`).  A cast rounds monotonically, so it commutes with the max
        and is applied once, to the result.  A NaN of either sign makes its own ``x - max``,
        and so the row, NaN, whatever the max.  None where not."""
        if any(d != ONE for a, d in enumerate(x.sizes) if a != axis):
            return None
        casts: list[Map] = []
        source = x
        while isinstance(source, Map) and source.op == "cast" and source.dtype in FLOAT_DTYPES \
                and source.operands[0].dtype in FLOAT_DTYPES:
            casts.append(source)
            source = source.operands[0]
        if not isinstance(source, View) or source.storage not in NARROW_FLOATS:
            return None
        bits = ir.IntegerType.get_signless(8 * ELEMENT_BYTES[source.storage])
        lowest = -(1 << (bits.width - 1))
        top = self.fold(x.sizes, const(bits, lowest), lambda ivs, acc: acc.maximum(
            _ordered_bits(bitcast(self.read(source, ivs), bits))))
        value = widen(bitcast(_ordered_bits(top), CPU_STORAGE[source.storage]()), source.storage)
        for cast in reversed(casts):
            value = self.apply("cast", [value], cast.dtype, cast.operands[0].dtype)
        return Splat(value, reduced_sizes(x.sizes, [axis], True), x.dtype)

    def deferred_stream(self, op: Any, x: Lazy) -> Optional[int]:
        """The output whose row the softmax ``op`` of the row ``x`` computes, when that row
        streams out at the next row, during this softmax's pass of exponentials (the costliest
        one), instead of right after it is computed, with nothing to overlap (which left the
        core waiting on memory for a third of the time of a float16 softmax at 4096 x 4096):
        a grid kernel whose softmax runs along a row of one axis and is only stored (or only
        cast, then stored) to an output that may stream and shares no other buffer's memory.
        Its row is then computed whole into the staging row and streamed out by the next row
        before its own store overwrites the staging row (or, the launch's last row, after the
        row loop: :meth:`stream_last_row`); the base of its place in the output waits in a
        scratch cell.  None where not."""
        if not self.grid or len(x.sizes) != 1:
            return None
        store = _only_user(op.results[0])
        if store is not None and store.name == "tile.cast":
            store = _only_user(store.results[0])
        if store is None or store.name != "tile.store_row":
            return None
        k = self.output_number(store)
        if self.reused(k) or self.row_out(store).staging is None:
            return None
        with self.entry:
            cell = memref.alloca(ir.MemRefType.get([1], index()), [], [])
            memref.store(const(index(), 0).value, cell, [const(index(), 0).value])
        self.deferred[k] = cell
        return k

    def sum_streaming_previous(self, element: Lazy, copy_to: View, k: int) -> Num:
        """The sum of the row ``element``, each element also stored to ``copy_to``, in blocks
        of STREAM_BLOCK_BYTES of the output: before each block, when this launch computed a
        row before this one and it streams, the next part of that row goes out
        (:meth:`stream`), ahead of the block, because a softmax stored straight to its output
        keeps its exponentials in the staging row that holds that row."""
        out = self.rows_out[k]
        count = self.dim(element.sizes[0])
        previous = self.previous_row(out, self.deferred[k])
        head = self.line_head(previous, count)
        block = const(index(), STREAM_BLOCK_BYTES // ELEMENT_BYTES[out.dest.storage])
        pending = out.streams & self.row_in_launch.gt(0)
        zero = const(index(), 0)
        blocks = scf.ForOp(zero.value, count.value, block.value, [const(f32(), 0.0).value])
        with ir.InsertionPoint(blocks.body):
            lo = Num(blocks.induction_variable)
            with ir.InsertionPoint(scf.IfOp(pending.value).then_block):
                # whole lines after the first block: [0, head + block), then block by block
                begin = select(lo.eq(0), zero, (head + lo).minimum(count))
                self.stream(out.staging, previous, begin, (head + lo + block).minimum(count))
                scf.YieldOp([])
            elements = scf.ForOp(lo.value, (lo + block).minimum(count).value,
                                 const(index(), 1).value, [blocks.inner_iter_args[0]])
            with ir.InsertionPoint(elements.body):
                ivs = [Num(elements.induction_variable)]
                value = self.load(element, ivs, {})
                self.store(value, copy_to, ivs)
                scf.YieldOp([_sum(Num(elements.inner_iter_args[0]), value).value])
            scf.YieldOp([elements.results[0]])
        return Num(blocks.results[0])

    def previous_row(self, out: _RowOut, pending: ir.Value) -> View:
        """The row of ``out``'s output whose base waits in ``pending``."""
        dest = out.dest
        base = Num(memref.load(pending, [const(index(), 0).value]))
        return View(dest.buffer, dest.storage, base, dest.offset, dest.sizes, dest.strides,
                    dest.dtype)

    def stream_last_row(self, out: _RowOut, pending: ir.Value) -> None:
        """After the row loop: the launch's last row of a deferred output out of staging."""
        last = out.streams & self.rows_in_launch.gt(0)
        with ir.InsertionPoint(scf.IfOp(last.value).then_block):
            previous = self.previous_row(out, pending)
            self.stream(out.staging, previous, const(index(), 0), self.dim(previous.sizes[0]))
            scf.YieldOp([])

    def output_row(self, value: Any) -> Optional[View]:
        """Where the output row that ``value`` is stored to is computed
        (:meth:`row_out`), if storing it there is its one use and the output shares no other
        buffer's memory (``tile.reuse``), so that it can hold partial results until the
        store; else None."""
        store = _only_user(value)
        if store is None or store.name != "tile.store_row":
            return None
        k = self.output_number(store)
        if self.reused(k):
            return None
        return self.row_out(store).target

    def reused(self, output: int) -> bool:
        """Whether output number ``output`` takes the memory of another buffer."""
        if FUSED_ATTR not in self.fn.attributes:
            return False
        fused = ir.DictAttr(self.fn.attributes[FUSED_ATTR])
        return list(ir.DenseI64ArrayAttr(fused[REUSE_ATTR]))[output] >= 0

    def matmul(self, op: Any) -> Lazy:
        """``[.., M, K] @ [.., K, N]`` (or a row ``[K] @ [K, N]``) into scratch: for each
        output row, k outside n so that the inner loop runs along contiguous rows; in a
        ``gemm`` kernel, the row of the accumulator tile that the runtime computed."""
        if self.accumulator is not None:
            return self.accumulated(op)
        lhs, rhs = (self.readable(self.lazy(v)) for v in op.operands)
        info = self.result_info(op)
        sizes = shape_of(info)
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

    def tile_base(self) -> Num:
        """Where the current row starts in a tile laid out as the accumulator: element
        (r, j) at (r - row_begin) * ld + j - col_begin (:meth:`build_epilogue`)."""
        assert self.accumulator is not None and self.row is not None \
            and self.element_range is not None
        _, first, ld = self.accumulator
        return (self.row - first) * ld - self.element_range[0]

    def tile_row(self, op: Any, buffer: ir.Value, info: TensorInfo) -> View:
        """The current row of an output written as a tile (:attr:`tile_result`)."""
        shape = shape_of(info)
        kept = [a for a in range(len(shape)) if a not in ints(op.attributes["axes"])]
        assert len(kept) == 1, "a scores row is one axis of keys"
        return View(buffer, info.dtype, self.tile_base(), ZERO, (shape[kept[0]],), (ONE,),
                    info.dtype)

    def accumulated(self, op: Any) -> View:
        """The matmul's row in the accumulator tile (:meth:`build_epilogue`)."""
        assert self.accumulator is not None
        info = self.result_info(op)
        return View(self.accumulator[0], "float32", self.tile_base(), Dim.const(0),
                    shape_of(info), (ONE,), info.dtype)


def _split_of(kernel: Any) -> tuple[int, str, str]:
    if "split" not in kernel:
        return ()
    return (ir.IntegerAttr(kernel["split"]).value, ir.StringAttr(kernel["split_rows"]).value,
            ir.StringAttr(kernel["split_width"]).value)


def _only_user(value: Any) -> Optional[Any]:
    """The op that reads ``value``, if it has one reader."""
    users = [use.owner.operation for use in value.uses]
    return users[0] if len(users) == 1 else None


def _pointer(address: Num) -> ir.Value:
    """An ``!llvm.ptr`` to the byte at index value ``address``."""
    return llvm.inttoptr(ir.Type.parse("!llvm.ptr"), to_int(address, i64()).value)


def _sum(a: Num, b: Num) -> Num:
    """``a + b`` that LLVM may reassociate, so that a sum over a loop vectorises."""
    return Num(arith.addf(a.value, b.value, fastmath=arith.FastMathFlags.reassoc))


def _ordered_bits(bits: Num) -> Num:
    """The bits of an IEEE float as a signed integer, to a signed integer ordered as the floats
    are (-0 just below +0, NaN beyond the infinities of its sign), and back: negative floats
    order backwards as integers, so their magnitude bits are flipped."""
    return bits ^ ((bits >> (bits.type.width - 1)) & ((1 << (bits.type.width - 1)) - 1))


def _stabilising_max(acc: Num, x: Num) -> Num:
    """``max(acc, x)`` for softmax's shift: ``maximumf`` marked ``nnan`` and ``nsz``, which
    LLVM vectorises to one ``vmaxps`` per vector.  The marks promise no NaN, which a row may
    break, and then the max is unspecified; the results are not: that NaN's own ``x - max`` is
    NaN whatever the max, so the sum, and every result, is NaN, as in the reference (and
    which zero is the max does not matter to ``x - max``).  ``maxnumf`` marked ``nnan`` ran
    5% slower (LLVM 22 still tests each vector for NaN, and leaves the loop at one) and, in a
    loop of 127 elements 16 wide (x86-64-v4), failed an assertion of LLVM's vectorizer."""
    return Num(arith.maximumf(acc.value, x.value,
                              fastmath=arith.FastMathFlags.nnan | arith.FastMathFlags.nsz))


# reduction kind -> (combining step, identity); the language reduces float values only
_COMBINERS: dict[str, tuple[Callable[[Num, Num], Num], float]] = {
    "sum": (_sum, 0.0),
    "mean": (_sum, 0.0),
    "max": (lambda a, b: a.maximum(b), -math.inf),
    "min": (lambda a, b: a.minimum(b), math.inf),
}


def is_cpu_kernel(op: Any) -> bool:
    """Whether ``op`` is a kernel function (``tile.kernel``) for the cpu target."""
    return kernel_target(op) == "cpu"


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
                    if kernel.signature.gemm is not None:
                        _Kernel(op, epilogue=True).build()
    return out, signatures
