"""Target descriptions: what the kernel level needs to know of a machine, and nothing more.

The tiling step is target-parametric: it reads only these numbers, so the CPU, Ascend and PTX
backends share one kernel-level IR and differ in the description they pass.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class GemmDesc:
    """What the GEMM schedule needs to know of a machine (:func:`.tiler.plan_gemm`).

    Either ``caches`` (bytes of the memory each operand block of a CPU-style GEMM stays in:
    a micro-panel of B, a block of A, a block of B) from which the tile is derived, or
    ``tile`` (tile_m, tile_n, block_k) stated outright, for targets whose tiles follow their
    matrix instructions rather than their caches."""

    micro: tuple[tuple[int, int], ...]   # the register tiles of the code levels (rows, cols)
    stages: int                          # operand blocks in flight
    staging: str                         # where operand blocks are staged
    small_m: int                         # up to this M, B is streamed once without staging
    staged_bytes: int                    # bytes of one staged element
    caches: Optional[tuple[int, int, int]] = None
    tile: Optional[tuple[int, int, int]] = None


@dataclass(frozen=True)
class TargetDesc:
    name: str
    cores: int               # parallel units the grid is spread over (0: decided at run time)
    vector_bytes: int        # width of one vector instruction
    local_bytes: int         # local memory a tile may use (UB, shared memory, a cache share)
    alignment: int           # bytes every local row buffer is padded to
    double_buffer: bool      # copy-in/out overlap compute (queue depth 2)
    max_tile_rows: int = 64
    staged_io: bool = True   # input and output rows are copied through local memory
    staged_ops: Optional[frozenset[str]] = None   # ops whose row results use it (None: all)
    # without staged_io: the cache_hint levels at which an input row that the next rows reuse
    # is kept in local memory all the same
    resident_levels: frozenset[str] = frozenset()
    # the backend streams every row buffer through local memory in chunks (else it holds
    # them whole, and they must fit)
    streams_rows: bool = True
    # bytes of one line of the two-dimensional blocks of layout changes (0: row by row)
    block_bytes: int = 0
    gemm: Optional[GemmDesc] = None   # the GEMM schedule's description (None: rows only)
    # a matmul kernel reads a transposed or batch-broadcast weight in place (tile-fuse's
    # weight-views); the backends that still lower matmul row by row copy it first
    weight_views: bool = False
    weight_view_types: frozenset[str] = frozenset()   # ... for matmuls of these types only
    # an empty grid's reduction over a leading axis is split across tiles (.split)
    splits_reductions: bool = False
    # tile-attention fuses attention into one kernel, which this target's runtime runs in
    # blocks with an online softmax (tilec/tiling/attention.py); the others run the unfused
    # kernels (their row lowering of the fused one would hold a row of t scores per query)
    attention: bool = False
    attention_types: frozenset[str] = frozenset()   # ... of these operand types (empty: all)
    attention_head_max: int = 0    # ... a constant head dimension, a multiple of 16 up to it


TARGETS: dict[str, TargetDesc] = {
    # CPU: a tile's rows should stay in a core's L2 share; threads are counted at run time.
    "cpu": TargetDesc("cpu", cores=0, vector_bytes=32, local_bytes=256 * 1024, alignment=64,
                      double_buffer=False, block_bytes=64,
                      # packed float32 panels: B's micro-panel (64 KiB: K blocks of 512, half
                      # the passes over the accumulators of 256, which L1 would hold; the
                      # micro-kernel keeps its rate reading it from L2), A's block in half
                      # of L2 (2 MiB a core), B's block in a share of L3 (8 MiB); the
                      # micro-kernels of x86-64-v3 (AVX2, 16 registers) and v4 (AVX-512, 32)
                      gemm=GemmDesc(micro=((6, 16), (14, 32)), stages=1, staging="packed",
                                    small_m=16, staged_bytes=4,
                                    caches=(64 << 10, 2 << 20, 8 << 20)),
                      weight_views=True, splits_reductions=True, attention=True),
    # Ascend 910B (dav-2201) vector cores: 192 KiB UB, 184 KiB usable, 32-byte DataCopy rule.
    "ascend": TargetDesc("ascend", cores=40, vector_bytes=256, local_bytes=184 * 1024,
                         alignment=32, double_buffer=True,
                         # the Cube's 16 x 16 x 16 fractals, L0A/L0B (64 KiB) double-buffered
                         gemm=GemmDesc(micro=((16, 16),), stages=2, staging="l1-l0",
                                       small_m=0, staged_bytes=2, tile=(128, 256, 64)),
                         # the Cube reads a [N, K] or batch-broadcast weight in place (a
                         # float32 one [N, K] only); the vector unit reads the others there
                         weight_views=True,
                         weight_view_types=frozenset({"float16", "bfloat16", "float32"}),
                         # both products of attention on the Cube (half, bfloat16), the online
                         # softmax on the vector cores (codegen/ascendc/attention.py)
                         attention=True, attention_types=frozenset({"float16", "bfloat16"})),
    # NVIDIA GPUs as the PTX backend runs a row: the threads of a block read its input rows and
    # write its output rows in global memory (no copies, no double buffering); element-wise and
    # data-movement values stay in registers; dynamic shared memory holds what needs memory
    # (the rows of reductions that keep dimensions, softmax, matmul) and a cache_hinted input
    # row that the next rows reuse, up to the opt-in limit per block of sm_90 (227 KiB; the
    # backend checks each arch's own after lowering, sm_80's 163 KiB included); 16-byte vectors.
    "ptx": TargetDesc("ptx", cores=132, vector_bytes=16, local_bytes=227 * 1024, alignment=16,
                      double_buffer=False, staged_io=False,
                      staged_ops=frozenset({"tile.reduce", "tile.softmax", "tile.matmul"}),
                      resident_levels=frozenset({"L1", "SHARED", "UB"}), streams_rows=False,
                      # mma.sync m16n8k16 tiles; cp.async stages of 128 x 32 blocks in shared
                      gemm=GemmDesc(micro=((16, 8),), stages=3, staging="shared",
                                    small_m=0, staged_bytes=2, tile=(128, 128, 32)),
                      weight_views=True,
                      # FlashAttention-2 on mma.sync (codegen/ptx/attention.py), its output
                      # accumulators in registers; float32 attention, and a head dimension
                      # not known or too large, keep the unfused kernels
                      attention=True, attention_types=frozenset({"float16", "bfloat16"}),
                      attention_head_max=128),
}


def target(name: str) -> TargetDesc:
    return TARGETS[name]


def register(description: TargetDesc) -> None:
    """Make ``description`` one that ``tile-kernel{target=NAME}`` tiles for (a backend's
    own; :mod:`tilec.codegen.registry` registers each backend's)."""
    known = TARGETS.setdefault(description.name, description)
    if known != description:
        raise ValueError(f"two target descriptions are named '{description.name}'")
