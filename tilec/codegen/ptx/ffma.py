"""The ``gemm`` schedule of a float32 matmul kernel: register tiles of FFMA on CUDA cores.

In: a kernel function whose tile parameters hold a :class:`~tilec.tiling.tiler.GemmTile`
and whose A and B are both float32.  Out: the ``gpu.func`` of :class:`FfmaGemmLowering`,
with the frame, the ``cp.async`` pipeline, the edges and the epilogue of the tensor-core
kernel (:mod:`.gemm`), launched with the same 256 threads.

Why not the tensor cores: their float32 input is TF32 (a 10-bit mantissa), which does not
meet the float32 contract; split TF32 (three mma.sync per product) would, and is left for
later.  Here each thread owns a ``tile_m / 16 x tile_n / 16`` register tile of float32
accumulators: rows ``ty + 16 i`` and columns ``4 (tx + 16 j) + c`` of the block's tile, for
``(ty, tx)`` its place in a 16 x 16 grid of threads.  Every four steps of K it reads, from
shared memory, one 16-byte vector of A per row (four steps of K, stored along a row) and of
B one 16-byte vector per four columns and step (``[K, N]``) or per column (a ``[N, K]``
weight), then runs the outer products as fused multiply-adds in registers.  A half-warp's
rows are two (a broadcast) and its columns 64 consecutive floats, so that A's and B's reads
are free of bank conflicts for a ``[K, N]`` B.
"""
from __future__ import annotations

from typing import Any, Optional

from ...mlir import ir, llvm, scf
from ...tiling.tiler import GemmTile
from ..common.scalar import Num, const, f32, i32, index, multiply_add
from .gemm import COPY_BYTES, THREADS, GemmLowering, operand_type
from .kernel import _gep

GRID = 16                   # threads per side of the block's 16 x 16 grid
LANES = 4                   # float32 elements of one 16-byte shared-memory read


def supported(fn: Any, tile: Optional[GemmTile]) -> bool:
    """Whether kernel ``fn`` with schedule ``tile`` runs as FFMA register tiles here."""
    if tile is None or operand_type(fn, tile) != "float32":
        return False
    chunk = COPY_BYTES // 4
    chunks = [tile.tile_m * tile.block_k // chunk, tile.tile_n * tile.block_k // chunk]
    return (tile.tile_m % GRID == 0 and tile.tile_n % (GRID * LANES) == 0
            and tile.block_k % LANES == 0 and tile.stages >= 2
            and all(c % THREADS == 0 for c in chunks))


class FfmaGemmLowering(GemmLowering):
    """The float32 register-tile kernel of one ``gemm`` kernel function (module docstring)."""

    def _frame_values(self) -> None:
        super()._frame_values()
        self.ty, self.tx = self.tid // GRID, self.tid % GRID
        self.rows_per_thread = self.tile.tile_m // GRID
        self.groups = self.tile.tile_n // (GRID * LANES)   # 4-column groups per thread

    def _accumulators(self) -> int:
        return (self.tile.tile_m // GRID) * (self.tile.tile_n // GRID)

    def _row(self, i: int) -> Num:
        return self.ty + GRID * i

    def _column(self, j: int, c: int) -> Num:
        return (self.tx + GRID * j) * LANES + c

    # -- shared -> registers -> FFMA -----------------------------------------------------------
    def _compute(self, stage: Num, acc: list[Num]) -> list[Num]:
        """The block's steps of K four at a time, in a loop: unrolled, LLVM would hoist
        the shared-memory reads of later steps and run out of registers."""
        loop = scf.ForOp(const(index(), 0).value, const(index(), self.tile.block_k).value,
                         const(index(), LANES).value, [v.value for v in acc])
        with ir.InsertionPoint(loop.body):
            k = Num(loop.induction_variable)
            acc = [Num(v) for v in loop.inner_iter_args]
            a = [self._vector(self.a_shared, self.a_block, stage, self._row(i), k)
                 for i in range(self.rows_per_thread)]
            b = self._b_values(stage, k)
            for kk in range(LANES):
                for i, row in enumerate(a):
                    for n, column in enumerate(b[kk]):
                        slot = i * len(b[kk]) + n
                        acc[slot] = multiply_add(row[kk], column, acc[slot])
            scf.YieldOp([v.value for v in acc])
        return [Num(r) for r in loop.results]

    def _b_values(self, stage: Num, k: Num) -> list[list[Num]]:
        """B at steps ``k .. k + 3`` of this block: per step, the thread's columns in order."""
        columns = [(j, c) for j in range(self.groups) for c in range(LANES)]
        if self.tile.transpose_b:            # stored [N, K]: a vector along K per column
            per_column = [self._vector(self.b_shared, self.b_block, stage,
                                       self._column(j, c), k) for j, c in columns]
            return [[v[kk] for v in per_column] for kk in range(LANES)]
        out = []
        for kk in range(LANES):              # stored [K, N]: a vector of 4 columns per step
            groups = [self._vector(self.b_shared, self.b_block, stage,
                                   k + kk, None, j) for j in range(self.groups)]
            out.append([v for g in groups for v in g])
        return out

    def _vector(self, shared: ir.Value, block: Any, stage: Num, row: Num,
                col: Optional[Num], group: int = 0) -> list[Num]:
        """Four floats of a stage's block from stored ``row``: from column ``col``, or, when
        None, from the first column of the thread's 4-column ``group``."""
        column = col if col is not None else self._column(group, 0)
        offset = stage * block.stage_bytes + (row * block.pitch + column) * 4
        address = _gep(shared, offset, ir.IntegerType.get_signless(8))
        vector = llvm.load(ir.VectorType.get([LANES], f32()), address, alignment=COPY_BYTES)
        return [Num(llvm.extractelement(vector, const(i32(), e).value)) for e in range(LANES)]

    # -- the epilogue --------------------------------------------------------------------------
    def _epilogue(self, acc: list[Num]) -> None:
        per_row = self.groups * LANES
        for i in range(self.rows_per_thread):
            for j in range(self.groups):
                for c in range(LANES):
                    row = self.row0 + self._row(i)
                    col = self.col0 + self._column(j, c)
                    self._element(row, col, acc[i * per_row + j * LANES + c])
