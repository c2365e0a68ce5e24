"""The Cube path of a GEMM kernel on Atlas A2 (910B): the product on the cube core (AIC), the
element-wise epilogue on the two vector cores (AIV) of each block, one mixed kernel.

In: a kernel that tile-kernel gave the ``gemm`` schedule (:mod:`tilec.tiling.gemm`) whose A
and B are half or bfloat16 arguments read where they are.  Out: :class:`CubePlan` (None for
any other kernel, which keeps the vector unit's matmul), which :mod:`.kernel` renders as the
AIC's class (``templates/cube.asc.j2``) beside the vector class, and the ``__mix__(1, 2)``
entry that runs one or the other (``ASCEND_IS_AIC``).

The AIC of block ``b`` computes the float product of the grid rows its two AIVs take (the
rows split over ``GetBlockNum() * GetTaskRatio()`` vector cores), tile by tile: for each
``tile_m x tile_n`` output tile and each ``block_k`` block of K, A's block and B's block go
GM -> L1 with ND2NZ (``DataCopy`` with ``Nd2NzParams``; B stored ``[.., N, K]`` when
transposed, once for every batch when broadcast), L1 -> L0A/L0B (``LoadData``: A's NZ into
L0A's ZZ fractals, B's 16 x 16 fractals transposed into L0B's ZN ones, or as they are for a
transposed B), then ``Mmad`` accumulates into L0C in float; the finished tile goes out through
``Fixpipe`` (NZ2ND, no quantisation) to the product's rows at the workspace's start.  L1 and
L0A/L0B are double buffered (queues of two: the next K block is copied in while this one is
multiplied).  Then one ``CrossCoreSetFlag<2, PIPE_FIX>`` hands the rows to the block's AIVs,
which wait for it (``CrossCoreWaitFlag``) and run the kernel's row body with the matmul read
from that product.

Tile sizes: the target's GemmTile (128 x 256, K blocks of 64) fits dav-2201's memories as
docs/ascendc.md cites them (CANN "Storage Units"): L0A 2 x 128 x 64 x 2 B = 32 KiB of 64,
L0B 2 x 64 x 256 x 2 B = 64 KiB of 64, L0C 128 x 256 x 4 B = 128 KiB of 128, L1
2 x (16 + 32) KiB = 96 KiB of 512; buffers start on 512-byte (L0A/L0B) and 1024-byte (L0C)
boundaries because every size is a multiple of them.  Mmad's m, n, k stay under its 4095
(Mmad page).  ND2NZ's srcDValue (the source's row stride) is a uint16 (DataCopy ND2NZ page):
with K or N beyond 65535 elements the operand rows go GM -> L1 one ND2NZ copy each.  A single
valid row (tm = 1) is multiplied as 16: Mmad with M = 1 is GEMV, reading L0A as ND (Mmad
page, constraints).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ...dialect.types import tensor_info
from ...dims import Dim
from ...mlir import ir
from ...tiling.tiler import GEMM, GemmTile
from . import cxx
from .source import TEMPLATES
from .vector import C_TYPE

CUBE_TYPES = ("float16", "bfloat16", "float32")
"""Operand types the Cube path takes: Mmad's half x half, bfloat16_t x bfloat16_t and
float x float into float on Atlas A2 (Mmad page, table 6).  float32 only with B stored
[N, K]: its NZ fractals (16 x 8) are L0B's ZN ones as they are, while B stored [K, N] needs
LoadData's transpose, which takes 2-byte types only (LoadData page)."""


@dataclass(frozen=True)
class CubePlan:
    """How a GEMM kernel runs on the Cube (see the module docstring)."""

    tile: GemmTile
    dtype: str           # the operands' element type
    m: Dim
    n: Dim
    k: Dim
    # A is stored in float: the AIVs split it into two ``dtype`` parts, hi = round(a) and
    # lo = round(a - hi), and the AIC multiplies both (a's float precision, not dtype's)
    convert_a: bool

    @property
    def a_offset(self) -> str:
        """C++: where A's hi part starts in the workspace (after the product)."""
        return f"(t.rows * ({cxx.dim(self.n)}) * 4 + 31) / 32 * 32"

    @property
    def lo_offset(self) -> str:
        """C++: where A's lo part starts in the workspace (after the hi part)."""
        return f"{self.a_offset} + (t.rows * ({cxx.dim(self.k)}) * 2 + 31) / 32 * 32"

    @property
    def product_bytes(self) -> str:
        """C++: bytes of the float product of every row (``t.rows`` rows of N), and of A
        rounded to the operand type when it is stored in float."""
        a = f" + 2 * RoundUp32(t.rows * ({cxx.dim(self.k)}) * 2)" if self.convert_a else ""
        return f"RoundUp32(t.rows * ({cxx.dim(self.n)}) * 4){a}"



def plan(fn: Any, kernel: Any) -> Optional[CubePlan]:
    """The Cube plan of kernel ``fn`` (its ``tile.kernel`` attribute ``kernel``), or None."""
    if ir.StringAttr(kernel["schedule"]).value != GEMM or "gemm" not in kernel:
        return None
    tile = GemmTile.of(kernel["gemm"])
    inputs = [tensor_info(t) for t in fn.type.inputs]
    outputs = [tensor_info(t) for t in fn.type.results]
    a, b = inputs[tile.lhs], inputs[tile.rhs]
    if b.dtype not in CUBE_TYPES or a.rank_generic or b.rank_generic:
        return None
    if any(o.rank_generic for o in outputs) or len(outputs[0].shape) < 2:
        return None
    # the row body reads B as stored, and A as stored or rounded from float to B's type (an
    # intermediate result kept in float between kernels)
    read = {}
    for op in fn.regions[0].blocks[0].operations:
        if op.operation.name == "tile.load_row" and isinstance(op.operands[0], ir.BlockArgument):
            read.setdefault(op.operands[0].arg_number, set()).add(
                tensor_info(op.results[0].type).dtype)
    if read.get(tile.rhs) != {b.dtype} or read.get(tile.lhs) != {b.dtype}:
        return None
    if a.dtype not in (b.dtype, "float32") or b.dtype == "float32" and not tile.transpose_b:
        return None
    shape = outputs[0].shape
    return CubePlan(tile, b.dtype, shape[-2], shape[-1], a.shape[-1], a.dtype != b.dtype)


def render(p: CubePlan, entry: str, tiling: str) -> str:
    """The AIC's class of the kernel whose entry is ``entry``."""
    t = p.tile
    return TEMPLATES.get_template("cube.asc.j2").render(
        entry=entry, tiling=tiling, ctype=C_TYPE[p.dtype], m=cxx.dim(p.m), n=cxx.dim(p.n),
        k=cxx.dim(p.k), tm=t.tile_m, tn=t.tile_n,
        tk=t.block_k // 2 if p.dtype == "float32" else t.block_k, trans_b=t.transpose_b,
        broadcast_b=t.broadcast_b, convert_a=p.convert_a, a_offset=p.a_offset,
        lo_offset=p.lo_offset).rstrip() + "\n"
