"""The ``gemm`` schedule of a matmul kernel on the tensor cores (float16/bfloat16 operands).

In: a kernel function whose tile parameters hold a :class:`~tilec.tiling.tiler.GemmTile`
(tile-kernel found it to be one ``A @ B`` with an element-wise epilogue) and whose A and B
are both float16 or both bfloat16.  Out: the ``gpu.func`` of :class:`GemmLowering`, with the
ABI of every ptx kernel (:mod:`.kernel`), launched with 256 threads (its row size says so).

How it runs.  Block ``b`` takes output tiles ``b, b + gridDim.x, ...`` of ``tile_m x
tile_n`` (tiles along N fastest, then M, then the batch).  Its 8 warps are 2 x 4 over the
tile, each warp owning ``tile_m / 2 x tile_n / 4`` in m16n8k16 accumulators (float32, in
registers).  The K loop walks blocks of ``block_k`` through ``stages`` shared-memory buffers:
``cp.async`` (16 bytes, ``.cg``) fills the block ``stages - 1`` ahead while the warps compute
on the current one (``cp.async.wait_group``, then a barrier, then the next block's copies,
then the math), each copy giving ``cp.async`` the number of bytes that lie inside the
operand so that the rest is zero-filled (the edges of M, N and K).  Shared rows are padded by
8 elements, so that the eight 16-byte rows an ``ldmatrix`` reads fall in distinct banks.
When an operand's rows are not 16-byte aligned (K or N not a multiple of 8, or a base
pointer), the same buffers are filled element by element with ordinary loads instead (one
uniform branch per copy).  ``ldmatrix.x4`` moves A (as stored) and B (``.trans`` for a
``[K, N]`` B, plain for a ``[N, K]`` weight) into the mma registers, at the addresses
:func:`.fragments.ldmatrix_origins` gives.  The epilogue runs per accumulator element at the
(row, column) that :data:`.fragments.MMA_C` gives: the kernel's row body, with the matmul's
value that element, stored where it lies inside the output.

Why NVVM dialect ops (``nvvm.mma.sync``, ``nvvm.ldmatrix``, ``nvvm.cp.async.shared.global``
and its commit and wait) and not inline PTX: they become LLVM intrinsics whose operands,
results and memory effects LLVM knows, so that it allocates the fragment registers, moves
address arithmetic out of the loop and orders the shared-memory accesses itself; inline asm
would be opaque to all three (and each string a second copy of the instruction's syntax).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from ...dialect import ELEMENT_BYTES, FUSED_ATTR, REUSE_ATTR
from ...dialect.types import tensor_info
from ...dims import Dim
from ...mlir import gpu, ir, llvm, nvvm, scf
from ...tiling.tiler import GemmTile
from ..common.layout import grid_dim, shape_of
from ..common.rows import grid_point
from ..common.scalar import Num, const, i32, index, select, to_int
from ..common.values import Lazy, Splat
from .fragments import MMA_A, MMA_B, MMA_C, Source, affine, ldmatrix_origins
from .kernel import SharedBuffer, _gep, _Lowering, _ptr

THREADS = 256
WARPS_M, WARPS_N = 2, 4
COPY_BYTES = 16              # one cp.async, and the padding of every shared row
CHUNK = 8                    # 16-bit elements per 16-byte copy
OPERAND_TYPES = {"float16": "f16", "bfloat16": "bf16"}


def LDMATRIX_SHAPE() -> ir.Attribute:
    return ir.Attribute.parse("#nvvm.ld_st_matrix_shape<m = 8, n = 8>")


def LDMATRIX_B16() -> ir.Attribute:
    return ir.Attribute.parse("#nvvm.ld_st_matrix_elt_type<b16>")


def operand_type(fn: Any, tile: Optional[GemmTile]) -> Optional[str]:
    """The element type of both operands of kernel ``fn`` when a tiled kernel may read
    them (the same, ranked, and no output taking their buffers), else None."""
    if tile is None:
        return None
    infos = [tensor_info(t) for t in fn.type.inputs]
    a, b = infos[tile.lhs], infos[tile.rhs]
    if a.dtype != b.dtype or a.rank_generic:
        return None
    if {tile.lhs, tile.rhs} & _reused(fn):
        return None                     # a block's stores would overwrite others' operands
    return a.dtype


def supported(fn: Any, tile: Optional[GemmTile]) -> bool:
    """Whether kernel ``fn`` with schedule ``tile`` runs on the tensor cores here."""
    if tile is None or operand_type(fn, tile) not in OPERAND_TYPES:
        return False
    warp_m, warp_n = tile.tile_m // WARPS_M, tile.tile_n // WARPS_N
    chunks = [tile.tile_m * tile.block_k // CHUNK, tile.tile_n * tile.block_k // CHUNK]
    return (warp_m % 16 == 0 and warp_n % 16 == 0 and tile.block_k % 16 == 0
            and tile.stages >= 2 and all(c % THREADS == 0 for c in chunks))


def _reused(fn: Any) -> set[int]:
    """The inputs whose buffers an output of ``fn`` takes (tile-fuse's ``tile.reuse``)."""
    if FUSED_ATTR not in fn.attributes:
        return set()
    fused = ir.DictAttr(fn.attributes[FUSED_ATTR])
    return {int(x) for x in ir.DenseI64ArrayAttr(fused[REUSE_ATTR])} - {-1} \
        if REUSE_ATTR in fused else set()


@dataclass(frozen=True)
class _Operand:
    """How one operand block sits in shared memory: ``rows x cols`` elements of ``element``
    bytes stored (row-major, ``cols`` and 16 bytes apart), one stage every ``stage_bytes``."""

    rows: int
    cols: int
    element: int = 2

    @property
    def pitch(self) -> int:
        return self.cols + COPY_BYTES // self.element

    @property
    def stage_bytes(self) -> int:
        return self.rows * self.pitch * self.element


class GemmLowering(_Lowering):
    """The tensor-core kernel of one ``gemm`` kernel function (module docstring)."""

    def __init__(self, fn: Any, tile: GemmTile) -> None:
        super().__init__(fn)
        self.tile = tile
        self.kind = OPERAND_TYPES.get(self.inputs[tile.lhs].dtype, "f32")
        self.element = ELEMENT_BYTES[self.inputs[tile.lhs].dtype]
        self.chunk = COPY_BYTES // self.element         # elements per copy
        e = self.element
        self.a_block = _Operand(tile.tile_m, tile.block_k, e)
        self.b_block = _Operand(tile.tile_n, tile.block_k, e) if tile.transpose_b \
            else _Operand(tile.block_k, tile.tile_n, e)
        self.acc_value: Optional[Num] = None
        self.column: Optional[Num] = None

    def build(self, module_body: ir.Block) -> Any:
        """The kernel, its threads fixed at 256 (``.maxntid``).  Not ``.minnctapersm 2``:
        it caps ptxas at 128 registers a thread, and some epilogues then spill."""
        kernel = super().build(module_body)
        func = list(module_body.operations)[-1]
        func.attributes["nvvm.maxntid"] = ir.Attribute.parse(f"array<i32: {THREADS}, 1, 1>")
        return kernel

    def _row_elements(self) -> Dim:
        return Dim.const(8 * THREADS)        # the host launches ceil(rows / 8) threads

    # -- the frame -----------------------------------------------------------------------------
    def _row_loop(self, first: Num, last: Num) -> None:
        """Instead of rows: the output tiles, strided over the blocks."""
        a_shape = shape_of(self.inputs[self.tile.lhs])
        out_shape = shape_of(self.outputs[0])
        self.m, self.k, self.n = (self.dim(d) for d in (a_shape[-2], a_shape[-1],
                                                         out_shape[-1]))
        self.extents = [self.dim(grid_dim(g)) for g in self.grid]
        batch = const(index(), 1)
        for e in self.extents[:-1]:
            batch = batch * e
        t = self.tile
        self.tiles_m = (self.m + (t.tile_m - 1)) // t.tile_m
        self.tiles_n = (self.n + (t.tile_n - 1)) // t.tile_n
        tiles = batch * self.tiles_m * self.tiles_n
        self._frame_values()
        loop = scf.ForOp(Num(gpu.block_id(gpu.Dimension.x)).value, tiles.value,
                         Num(gpu.grid_dim(gpu.Dimension.x)).value)
        self.entry = ir.InsertionPoint(loop.operation)
        with ir.InsertionPoint(loop.body):
            self._tile(Num(loop.induction_variable))
            scf.YieldOp([])

    def _frame_values(self) -> None:
        """Per thread: its warp's place in the tile, its lane, the shared buffers."""
        warp, lane = self.tid // 32, self.tid % 32
        self.lane = lane
        self.warp_row = (warp // WARPS_N) * (self.tile.tile_m // WARPS_M)
        self.warp_col = (warp % WARPS_N) * (self.tile.tile_n // WARPS_N)
        stages = self.tile.stages
        self.a_shared = self._buffer("gemm_a", stages * self.a_block.stage_bytes)
        self.b_shared = self._buffer("gemm_b", stages * self.b_block.stage_bytes)
        a, b = self.arg_buffers[self.tile.lhs], self.arg_buffers[self.tile.rhs]
        b_row = self.k if self.tile.transpose_b else self.n
        self.aligned = self._aligned_rows(a, self.k) & self._aligned_rows(b, b_row)

    def _buffer(self, name: str, nbytes: int) -> ir.Value:
        start = (self.offset + 15) // 16 * 16
        self.buffers.append(SharedBuffer(f"{name}#{len(self.buffers)}", Dim.const(nbytes)))
        self.offset = start + nbytes
        return _gep(self.shared_base, start, ir.IntegerType.get_signless(8))

    def _aligned_rows(self, buffer: ir.Value, row: Num) -> Num:
        address = to_int(Num(llvm.ptrtoint(ir.IntegerType.get_signless(64), buffer)), index())
        return (address % COPY_BYTES).eq(0) & (row % self.chunk).eq(0)

    # -- one output tile -----------------------------------------------------------------------
    def _tile(self, t: Num) -> None:
        per_batch = self.tiles_m * self.tiles_n
        b, rest = t // per_batch, t % per_batch
        self.row0 = (rest // self.tiles_n) * self.tile.tile_m
        self.col0 = (rest % self.tiles_n) * self.tile.tile_n
        self.batch = b
        batch = self.extents[:-1]
        self.batch_coords = grid_point(b, batch) if len(batch) > 1 else [b] if batch else []
        acc = self._main_loop()
        self._epilogue(acc)
        self.barrier()             # the next tile's copies reuse the stages

    def _main_loop(self) -> list[Num]:
        t = self.tile
        blocks = (self.k + (t.block_k - 1)) // t.block_k
        for s in range(t.stages - 1):
            self._load_stage(const(index(), s), blocks)
        count = self._accumulators()
        zero = const(ir.F32Type.get(), 0.0)
        loop = scf.ForOp(const(index(), 0).value, blocks.value, const(index(), 1).value,
                         [zero.value] * count)
        with ir.InsertionPoint(loop.body):
            kb = Num(loop.induction_variable)
            nvvm.cp_async_wait_group(t.stages - 2)
            self.barrier()
            self._load_stage(kb + (t.stages - 1), blocks)
            acc = self._compute(kb % t.stages, [Num(v) for v in loop.inner_iter_args])
            scf.YieldOp([v.value for v in acc])
        nvvm.cp_async_wait_group(0)
        return [Num(r) for r in loop.results]

    def _accumulators(self) -> int:
        """float32 accumulators per thread."""
        t = self.tile
        return (t.tile_m // WARPS_M // 16) * (t.tile_n // WARPS_N // 8) * MMA_C.elements

    # -- global -> shared ----------------------------------------------------------------------
    def _load_stage(self, kb: Num, blocks: Num) -> None:
        """Copies of K block ``kb`` into its stage (nothing past the last block), then a
        commit, so that every thread's groups count alike."""
        inside = scf.IfOp(kb.lt(blocks).value)
        with ir.InsertionPoint(inside.then_block):
            stage = kb % self.tile.stages
            k0 = kb * self.tile.block_k
            self._load_operand(self.a_block, self.a_shared, stage, self._a_chunk(k0))
            self._load_operand(self.b_block, self.b_shared, stage, self._b_chunk(k0))
            scf.YieldOp([])
        nvvm.cp_async_commit_group()

    def _a_chunk(self, k0: Num):
        """(row, chunk) of A's block -> (element offset in A, elements inside)."""
        def place(row: Num, chunk: Num) -> tuple[Num, Num]:
            m, k = self.row0 + row, k0 + chunk * self.chunk
            first = (self.batch * self.m + m) * self.k + k
            return first, select(m.lt(self.m), self.k - k, const(index(), 0))
        return place

    def _b_chunk(self, k0: Num):
        """(row, chunk) of B's block -> (element offset in B, elements inside)."""
        t = self.tile
        base = const(index(), 0) if t.broadcast_b else self.batch * self.k * self.n

        def place(row: Num, chunk: Num) -> tuple[Num, Num]:
            if t.transpose_b:                       # stored [N, K]: row n, chunk along k
                n, k = self.col0 + row, k0 + chunk * self.chunk
                return base + n * self.k + k, select(n.lt(self.n), self.k - k,
                                                     const(index(), 0))
            k, n = k0 + row, self.col0 + chunk * self.chunk     # stored [K, N]
            return base + k * self.n + n, select(k.lt(self.k), self.n - n, const(index(), 0))
        return place

    def _load_operand(self, block: _Operand, shared: ir.Value, stage: Num, place) -> None:
        per_row = block.cols // self.chunk
        source = self.arg_buffers[self.tile.lhs if shared is self.a_shared else self.tile.rhs]
        for c in range(block.rows * per_row // THREADS):
            flat = self.tid + c * THREADS
            row, chunk = flat // per_row, flat % per_row
            first, count = place(row, chunk)
            count = select(count.lt(0), const(index(), 0), count)
            count = select(count.gt(self.chunk), const(index(), self.chunk), count)
            offset = stage * block.stage_bytes + (row * block.pitch + chunk * self.chunk) \
                * self.element
            dest = _gep(shared, offset, ir.IntegerType.get_signless(8))
            first = select(count.gt(0), first, const(index(), 0))
            src = _gep(source, first, ir.IntegerType.get_signless(8 * self.element))
            self._copy_chunk(dest, src, count)

    def _copy_chunk(self, dest: ir.Value, src: ir.Value, count: Num) -> None:
        """16 bytes to shared memory, the first ``count`` elements from ``src``, the rest
        zero: by cp.async when the operands' rows are aligned, else element by element."""
        branch = scf.IfOp(self.aligned.value, [], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            nbytes = to_int(count * self.element, i32())
            nvvm.CpAsyncOp(dest, src, 16, ir.Attribute.parse("#nvvm<load_cache_modifier cg>"),
                           cpSize=nbytes.value)
            scf.YieldOp([])
        with ir.InsertionPoint(branch.else_block):
            h = ir.IntegerType.get_signless(8 * self.element)
            vector = llvm.mlir_poison(ir.VectorType.get([self.chunk], h))
            for e in range(self.chunk):
                inside = count.gt(e)      # read element 0 (always there) in place of others
                at = _gep(src, select(inside, const(index(), e), const(index(), 0)), h)
                value = select(inside, Num(llvm.load(h, at)), const(h, 0))
                vector = llvm.insertelement(vector, value.value, const(i32(), e).value)
            llvm.store(vector, dest, alignment=16)
            scf.YieldOp([])

    # -- shared -> registers -> tensor cores ---------------------------------------------------
    def _compute(self, stage: Num, acc: list[Num]) -> list[Num]:
        t = self.tile
        tiles_m, tiles_n = t.tile_m // WARPS_M // 16, t.tile_n // WARPS_N // 8
        for ks in range(t.block_k // 16):
            a = [self._ldmatrix_a(stage, i * 16, ks * 16) for i in range(tiles_m)]
            b: list[list[ir.Value]] = []
            for p in range(tiles_n // 2):
                regs = self._ldmatrix_b(stage, ks * 16, p * 16)
                b += [regs[0:2], regs[2:4]]
            for i in range(tiles_m):
                for j in range(tiles_n):
                    k = (i * tiles_n + j) * 4
                    acc[k:k + 4] = self._mma(a[i], b[j], acc[k:k + 4])
        return acc

    def _lane_address(self, shared: ir.Value, block: _Operand, stage: Num,
                      origins: Sequence[tuple[int, int]], row0: Num, col0: Num) -> ir.Value:
        """The address lane ``l`` gives ldmatrix: stored row ``origins[l / 8][0] + l % 8``,
        column ``origins[l / 8][1]``, from (row0, col0) of this stage's block."""
        q = self.lane // 8
        row, col = const(index(), origins[-1][0]), const(index(), origins[-1][1])
        for k in reversed(range(len(origins) - 1)):
            row = select(q.eq(k), const(index(), origins[k][0]), row)
            col = select(q.eq(k), const(index(), origins[k][1]), col)
        row = row0 + row + self.lane % 8
        offset = stage * block.stage_bytes + (row * block.pitch + col0 + col) * 2
        return _gep(shared, offset, ir.IntegerType.get_signless(8))

    def _ldmatrix(self, address: ir.Value, trans: bool) -> list[ir.Value]:
        four = ir.Type.parse("!llvm.struct<(i32, i32, i32, i32)>")
        shared = llvm.addrspacecast(_ptr(3), address) if address.type != _ptr(3) else address
        layout = ir.Attribute.parse(f"#nvvm.mma_layout<{'col' if trans else 'row'}>")
        loaded = nvvm.ldmatrix(shared, 4, layout, LDMATRIX_SHAPE(), LDMATRIX_B16(),
                               results=[four])
        return [llvm.extractvalue(i32(), loaded, [r]) for r in range(4)]

    def _ldmatrix_a(self, stage: Num, m: int, k: int) -> list[ir.Value]:
        origins = ldmatrix_origins([Source(MMA_A, r) for r in range(4)], False, False)
        address = self._lane_address(self.a_shared, self.a_block, stage, origins,
                                     self.warp_row + m, const(index(), k))
        return self._ldmatrix(address, trans=False)

    def _ldmatrix_b(self, stage: Num, k: int, n: int) -> list[ir.Value]:
        """Registers b0b1, b2b3 of the n8 tiles at columns ``n`` and ``n + 8``."""
        transposed = self.tile.transpose_b
        sources = [Source(MMA_B, r, (0, 8 * t)) for t in range(2) for r in range(2)]
        origins = ldmatrix_origins(sources, transposed, not transposed)
        if transposed:
            row0, col0 = self.warp_col + n, const(index(), k)
        else:
            row0, col0 = const(index(), k), self.warp_col + n
        address = self._lane_address(self.b_shared, self.b_block, stage, origins, row0, col0)
        return self._ldmatrix(address, trans=not transposed)

    def _mma(self, a: list[ir.Value], b: list[ir.Value], c: list[Num]) -> list[Num]:
        f = ir.F32Type.get()
        result = ir.Type.parse("!llvm.struct<(f32, f32, f32, f32)>")
        if self.kind == "f16":
            half2 = ir.VectorType.get([2], ir.F16Type.get())
            a = [llvm.bitcast(half2, v) for v in a]
            b = [llvm.bitcast(half2, v) for v in b]
        kind = ir.Attribute.parse(f"#nvvm.mma_type<{self.kind}>")
        op = nvvm.MmaOp(result, ir.Attribute.parse("#nvvm.shape<m = 16, n = 8, k = 16>"),
                        ir.Attribute.parse("#nvvm.mma_layout<row>"),
                        ir.Attribute.parse("#nvvm.mma_layout<col>"), a, b,
                        [v.value for v in c], multiplicandAPtxType=kind,
                        multiplicandBPtxType=kind)
        return [Num(llvm.extractvalue(f, op.result, [r])) for r in range(4)]

    # -- the epilogue --------------------------------------------------------------------------
    def _epilogue(self, acc: list[Num]) -> None:
        t = self.tile
        tiles_m, tiles_n = t.tile_m // WARPS_M // 16, t.tile_n // WARPS_N // 8
        for i in range(tiles_m):
            for j in range(tiles_n):
                for e in range(MMA_C.elements):
                    row = self._lane_form(e, 0) + self.row0 + self.warp_row + i * 16
                    col = self._lane_form(e, 1) + self.col0 + self.warp_col + j * 8
                    self._element(row, col, acc[(i * tiles_n + j) * 4 + e])

    def _lane_form(self, element: int, axis: int) -> Num:
        form = affine(MMA_C, element, axis)
        return (self.lane // 4) * form.per_group + (self.lane % 4) * form.per_thread \
            + form.constant

    def _element(self, row: Num, col: Num, value: Num) -> None:
        """The kernel's row body at output (row, col), the matmul's value ``value``."""
        inside = scf.IfOp((row.lt(self.m) & col.lt(self.n)).value)
        with ir.InsertionPoint(inside.then_block):
            self.coords = self.batch_coords + [row]
            self.acc_value, self.column = value, col
            self.body()
            scf.YieldOp([])

    def maybe_materialise(self, result: Any, value: Lazy) -> Lazy:
        """Never: the epilogue computes one element per call (a value read twice is
        computed twice), and a copy to shared memory would sweep a row inside a branch."""
        return value

    def matmul(self, op: Any) -> Lazy:
        assert self.acc_value is not None
        return Splat(self.acc_value, tuple(shape_of(self.result_info(op))),
                     self.result_info(op).dtype)

    def store_row(self, op: Any) -> None:
        k = self.output_number(op)
        dest = self.global_row(op, self.out_buffers[k], self.outputs[k])
        ivs = [const(index(), 0)] * (len(dest.sizes) - 1) + [self.column]
        self.store(self.load(self.lazy(op.operands[0]), ivs, {}), dest, ivs)
