"""The kernel-level tiler: one typed record of tile parameters per kernel, and the rule that
decides what must fit local memory.

In: a kernel's row plan (:mod:`.rows`), the row buffers that tile-kernel made (name, row type,
copies) and a target description.  Out: :class:`TileParams`, which tile-kernel writes into
the kernel's ``tile.kernel`` attribute (``--emit=kernel`` prints it) and which
:meth:`TileParams.of` reads back.

A schedule names how a kernel walks its iteration space.  ``rows``: one row of the grid at a
time, ``tile_rows`` rows per tile when rows are known to be small, every buffer streamed in
chunks when a row is larger than local memory (``streamed``).  ``gemm``: a kernel holding a
matmul whose operands the kernel reads where they are, with its element-wise epilogue; the
record then holds a :class:`GemmTile` (:func:`plan_gemm`): output tiles of ``tile_m`` x
``tile_n``, K in blocks of ``block_k``, ``stages`` blocks in flight, the operands staged
where ``staging`` says, B read as stored (``transpose_b``: a ``[.., N, K]`` weight) and once
for every batch (``broadcast_b``), the epilogue applied to each finished accumulator tile
before its one store; the row body stays, as the epilogue's definition and the lowering of
backends that do not tile matmul yet.  The attention schedule (query blocks over key/value
blocks) will add its own record beside it.

What tiling splits and what it cannot: a target whose backend streams rows through local
memory in chunks (``TargetDesc.streams_rows``: the CPU reads rows where they are and keeps
what is read twice in scratch memory; Ascend copies chunks through UB and keeps values read
twice in its global workspace) splits every buffer, so no program fails there for local
memory at any size.  A target that holds a row's buffers whole (PTX: the rows of softmax,
reductions and matmul in a block's shared memory, and cache-hinted rows kept resident)
cannot split them: those buffers are ``whole_bytes`` and are the only ones checked, with a
located error naming the kernel, its buffers and the numbers.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from ..diagnostics import Span, TilecError
from ..dialect.types import ELEMENT_BYTES, TensorInfo
from ..dims import ELLIPSIS, Dim, parse_dim
from ..mlir import ir
from .attention import AttentionTile
from .targets import GemmDesc, TargetDesc

ROWS = "rows"
GEMM = "gemm"
ATTENTION = "attention"


@dataclass(frozen=True)
class Buffer:
    """One row buffer in local memory: ``copies`` of a row of type ``info``."""

    name: str
    info: TensorInfo
    copies: int

    def bytes(self, align: int) -> Dim:
        """Bytes of one copy: elements * element size, rounded up to ``align`` when the size
        is known (symbolic sizes are assumed padded by the backend)."""
        n = Dim.const(1)
        for d in self.info.shape:
            n = n * (Dim.sym("lead") if d == ELLIPSIS else d)
        nbytes = n * ELEMENT_BYTES[self.info.dtype]
        if nbytes.value is not None:
            return Dim.const(-(-nbytes.value // align) * align)
        return nbytes


@dataclass(frozen=True)
class GemmTile:
    """The two-dimensional schedule of a matmul kernel (see the module docstring)."""

    tile_m: int                  # output rows per tile (rows of A staged together)
    tile_n: int                  # output columns per tile (columns of B staged together)
    block_k: int                 # K per block: the operands are staged block by block
    stages: int                  # blocks in flight (1: stage, then compute)
    staging: str                 # where blocks are staged: "packed" (CPU panels), "shared"...
    micro: tuple[int, ...]       # register tiles (rows, cols) of the code levels, flattened
    small_m: int                 # up to this M, B streams once from memory, not staged
    lhs: int                     # the kernel argument that is A ([.., M, K])
    rhs: int                     # ... B ([.., K, N], or [.., N, K] with transpose_b)
    transpose_b: bool
    broadcast_b: bool            # one B ([K, N]) for every batch of A

    def attributes(self) -> ir.DictAttr:
        i64 = ir.IntegerType.get_signless(64)
        ints = {k: ir.IntegerAttr.get(i64, getattr(self, k))
                for k in ("tile_m", "tile_n", "block_k", "stages", "small_m", "lhs", "rhs")}
        return ir.DictAttr.get({
            **ints, "staging": ir.StringAttr.get(self.staging),
            "micro": ir.DenseI64ArrayAttr.get(list(self.micro)),
            "transpose_b": ir.BoolAttr.get(self.transpose_b),
            "broadcast_b": ir.BoolAttr.get(self.broadcast_b)})

    @staticmethod
    def of(attr: Any) -> "GemmTile":
        d = ir.DictAttr(attr)
        n = {k: ir.IntegerAttr(d[k]).value
             for k in ("tile_m", "tile_n", "block_k", "stages", "small_m", "lhs", "rhs")}
        return GemmTile(n["tile_m"], n["tile_n"], n["block_k"], n["stages"],
                        ir.StringAttr(d["staging"]).value,
                        tuple(ir.DenseI64ArrayAttr(d["micro"])), n["small_m"], n["lhs"],
                        n["rhs"], ir.BoolAttr(d["transpose_b"]).value,
                        ir.BoolAttr(d["broadcast_b"]).value)


@dataclass(frozen=True)
class TileParams:
    """The tile parameters of one kernel (see the module docstring)."""

    schedule: str                 # how the kernel walks its iteration space: "rows"
    grid: tuple[str, ...]         # the grid's dimensions ("..." for the leading extents)
    row_bytes: Dim                # local memory of one row, every buffer whole
    whole_bytes: Dim              # ... of the buffers the target cannot split
    tile_rows: int                # rows per tile; 0: rows of a size known at run time only
    streamed: bool                # a row exceeds local memory and streams through it in chunks
    # layout changes: (rows, elements) of the two-dimensional blocks a tile is walked in, the
    # rows of one block's elements read together; (0, 0): row after row
    block: tuple[int, int] = (0, 0)
    gemm: Optional[GemmTile] = None   # the matmul schedule (``schedule == "gemm"``)
    # a reduction over a leading axis (an empty grid) split into at most ``split`` tiles of
    # ``split_rows`` (its extent), each leaving ``split_width`` partial results; 0: none
    split: int = 0
    split_rows: Dim = Dim.const(0)
    split_width: Dim = Dim.const(0)
    # the attention schedule (``schedule == "attention"``): an AttentionTile
    attention: Optional[Any] = None

    def attributes(self) -> dict[str, ir.Attribute]:
        i64 = ir.IntegerType.get_signless(64)
        extra = {"gemm": self.gemm.attributes()} if self.gemm is not None else {}
        if self.attention is not None:
            extra["attention"] = self.attention.attributes()
        if self.split:
            extra.update({
                "split": ir.IntegerAttr.get(i64, self.split),
                "split_rows": ir.StringAttr.get(str(self.split_rows)),
                "split_width": ir.StringAttr.get(str(self.split_width)),
            })
        return {
            **extra,
            "schedule": ir.StringAttr.get(self.schedule),
            "grid": ir.ArrayAttr.get([ir.StringAttr.get(g) for g in self.grid]),
            "row_bytes": ir.StringAttr.get(str(self.row_bytes)),
            "whole_bytes": ir.StringAttr.get(str(self.whole_bytes)),
            "tile_rows": ir.IntegerAttr.get(i64, self.tile_rows),
            "streamed": ir.BoolAttr.get(self.streamed),
            "block": ir.DenseI64ArrayAttr.get(list(self.block)),
        }

    @staticmethod
    def of(kernel: Any) -> "TileParams":
        """The record of a ``tile.kernel`` attribute (an ``ir.DictAttr``)."""
        params = TileParams(
            ir.StringAttr(kernel["schedule"]).value,
            tuple(ir.StringAttr(g).value for g in kernel["grid"]),
            parse_dim(ir.StringAttr(kernel["row_bytes"]).value),
            parse_dim(ir.StringAttr(kernel["whole_bytes"]).value),
            ir.IntegerAttr(kernel["tile_rows"]).value,
            ir.BoolAttr(kernel["streamed"]).value,
            tuple(ir.DenseI64ArrayAttr(kernel["block"])),
            GemmTile.of(kernel["gemm"]) if "gemm" in kernel else None,
            *((ir.IntegerAttr(kernel["split"]).value,
               parse_dim(ir.StringAttr(kernel["split_rows"]).value),
               parse_dim(ir.StringAttr(kernel["split_width"]).value))
              if "split" in kernel else ()))
        if "attention" in kernel:
            params = dataclasses.replace(params, attention=AttentionTile.of(kernel["attention"]))
        return params


def _total(buffers: Sequence[Buffer], align: int) -> Dim:
    total = Dim.const(0)
    for b in buffers:
        total = total + b.bytes(align) * b.copies
    return total


def layout_block(body_ops: Sequence[str], rows_out: Sequence[TensorInfo], grid: Sequence[Any],
                 reads_across: bool, target: TargetDesc) -> tuple[int, int]:
    """The two-dimensional block of a layout change: a kernel of element-wise and layout ops
    only whose one output row is one axis, and whose rows read across the grid (a transpose
    that moves the last axis): each row then reads its elements from as many cache lines,
    and the next rows read the rest of those lines.  A block is as many rows as an input
    line holds by BLOCK_LINES output lines of elements (lines of ``TargetDesc.block_bytes``;
    0: the target's backend walks rows one at a time), or, for a kernel that only moves
    data, MOVE_BLOCK_LINES lines of rows by MOVE_STREAMS elements."""
    if not target.block_bytes or not grid or not reads_across or len(rows_out) != 1:
        return (0, 0)
    if len(rows_out[0].shape) != 1 or set(body_ops) & ROW_BOUND_OPS:
        return (0, 0)
    line = target.block_bytes // ELEMENT_BYTES[rows_out[0].dtype]
    if set(body_ops) <= MOVE_OPS:
        return (MOVE_BLOCK_LINES * line, MOVE_STREAMS)
    return (line, BLOCK_LINES * line)


# output lines per row of a block: with fewer, the block's rows leave each input line
# after a few elements and come back to it after its set has evicted it
BLOCK_LINES = 4

# a kernel that only moves data (which the CPU moves in squares of registers, a few lines
# of every row at a time): blocks of rows that read a page of each input row, by as many
# elements as the L2 streamer follows streams (it tracks 32 pages at a time): then each of
# the block's input rows is read forwards line after line, prefetched by the hardware,
# while its output lines are each written whole (with more, the reads wait on memory)
MOVE_OPS = frozenset({"tile.load_row", "tile.transpose", "tile.store_row"})
MOVE_BLOCK_LINES = 64
MOVE_STREAMS = 32


# ops whose row is computed as a whole (or read twice): a block of a row would redo them
ROW_BOUND_OPS = frozenset({"tile.reduce", "tile.softmax", "tile.matmul", "tile.concat"})


def plan_row_tiles(name: str, span: Span | None, grid: Sequence[Any], buffers: Sequence[Buffer],
                   target: TargetDesc, block: tuple[int, int] = (0, 0),
                   split: tuple[Dim, Dim] | None = None) -> TileParams:
    """The ``rows`` schedule of kernel ``name`` over ``grid`` with these row buffers; a
    located error when the buffers the target holds whole cannot fit its local memory."""
    row_bytes = _total(buffers, target.alignment)
    whole = [] if target.streams_rows else list(buffers)
    whole_bytes = _total(whole, target.alignment)
    if whole_bytes.value is not None and whole_bytes.value > target.local_bytes:
        listing = ", ".join(f"{b.name} {b.bytes(target.alignment)} B x{b.copies}"
                            for b in whole)
        raise TilecError(f"kernel '{name}' needs {whole_bytes.value} bytes of local memory for "
                         f"one row, more than the {target.local_bytes} bytes of {target.name}"
                         f" ({listing})", span)
    tile_rows, streamed = 0, False
    if row_bytes.value is not None:
        streamed = row_bytes.value > target.local_bytes
        tile_rows = max(1, min(target.max_tile_rows,
                               target.local_bytes // max(row_bytes.value, 1)))
    return TileParams(ROWS, tuple(str(g) for g in grid), row_bytes, whole_bytes, tile_rows,
                      streamed, block, None, *((SPLIT_TILES, *split) if split else ()))


@dataclass(frozen=True)
class GemmOperands:
    """How a matmul kernel reads its operands (found by tile-kernel)."""

    lhs: int
    rhs: int
    transpose_b: bool
    broadcast_b: bool


def _power_of_two_floor(x: int) -> int:
    return 1 << max(x, 1).bit_length() - 1


def gemm_tile(desc: GemmDesc) -> tuple[int, int, int]:
    """(tile_m, tile_n, block_k) of a target: its ``tile``, or from its ``caches``
    (panel, block, shared): block_k the largest power of two whose micro-panel of B (block_k
    x the widest micro tile's columns) fits the first; tile_m the rows of A whose block
    fills half the second (the rest is B's panels and C passing through), a multiple of
    every micro tile's rows; tile_n the columns of B whose block fills the third, a
    multiple of every micro tile's columns."""
    if desc.tile is not None:
        return desc.tile
    assert desc.caches is not None
    panel, block, shared = desc.caches
    rows = math.lcm(*(r for r, _ in desc.micro))
    cols = math.lcm(*(c for _, c in desc.micro))
    e = desc.staged_bytes
    block_k = _power_of_two_floor(panel // (max(c for _, c in desc.micro) * e))
    tile_m = max(rows, block // 2 // (block_k * e) // rows * rows)
    tile_n = max(cols, shared // (block_k * e) // cols * cols)
    return tile_m, tile_n, block_k


def parse_gemm_override(text: str) -> Optional[tuple[int, int, int]]:
    """``MxNxK`` (tile_m, tile_n, block_k; every one at least 1), or None for ``""``;
    ValueError naming the text otherwise."""
    if not text:
        return None
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise ValueError(f"gemm tile '{text}' is not MxNxK with three positive integers")
    return int(parts[0]), int(parts[1]), int(parts[2])


def plan_gemm(rows: TileParams, operands: GemmOperands, target: TargetDesc,
              override: Optional[tuple[int, int, int]] = None) -> TileParams:
    """The ``gemm`` schedule of a kernel whose ``rows`` record is ``rows``: the target's tile
    (:func:`gemm_tile`) or ``override`` (tile-kernel's option ``gemm=MxNxK``)."""
    desc = target.gemm
    assert desc is not None
    tile_m, tile_n, block_k = override or gemm_tile(desc)
    micro = tuple(x for pair in desc.micro for x in pair)
    tile = GemmTile(tile_m, tile_n, block_k, desc.stages, desc.staging, micro, desc.small_m,
                    operands.lhs, operands.rhs, operands.transpose_b, operands.broadcast_b)
    return dataclasses.replace(rows, schedule=GEMM, gemm=tile)


# the most tiles a split reduction takes: a fixed count, so that its partial results, and the
# order they are combined in, do not depend on the threads that compute them
SPLIT_TILES = 32
# the fewest rows of the reduced axis in a tile (fewer tiles where the axis is short)
SPLIT_MIN_ROWS = 16
