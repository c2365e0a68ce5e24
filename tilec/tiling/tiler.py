"""The kernel-level tiler: one typed record of tile parameters per kernel, and the rule that
decides what must fit local memory.

In: a kernel's row plan (:mod:`.rows`), the row buffers that tile-kernel made (name, row type,
copies) and a target description.  Out: :class:`TileParams`, which tile-kernel writes into
the kernel's ``tile.kernel`` attribute (``--emit=kernel`` prints it) and which
:meth:`TileParams.of` reads back.

A schedule names how a kernel walks its iteration space; ``rows`` is the one built so far: one
row of the grid at a time, ``tile_rows`` rows per tile when rows are known to be small, every
buffer streamed in chunks when a row is larger than local memory (``streamed``).  The GEMM
(M x N tiles with a K loop) and attention (query blocks over key/value blocks) schedules add
their own fields to this record and their own planning function beside :func:`plan_rows`.

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

from dataclasses import dataclass
from typing import Any, Sequence

from ..diagnostics import Span, TilecError
from ..dialect.types import ELEMENT_BYTES, TensorInfo
from ..dims import ELLIPSIS, Dim, parse_dim
from ..mlir import ir
from .targets import TargetDesc

ROWS = "rows"


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

    def attributes(self) -> dict[str, ir.Attribute]:
        i64 = ir.IntegerType.get_signless(64)
        return {
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
        return TileParams(
            ir.StringAttr(kernel["schedule"]).value,
            tuple(ir.StringAttr(g).value for g in kernel["grid"]),
            parse_dim(ir.StringAttr(kernel["row_bytes"]).value),
            parse_dim(ir.StringAttr(kernel["whole_bytes"]).value),
            ir.IntegerAttr(kernel["tile_rows"]).value,
            ir.BoolAttr(kernel["streamed"]).value,
            tuple(ir.DenseI64ArrayAttr(kernel["block"])))


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
    0: the target's backend walks rows one at a time)."""
    if not target.block_bytes or not grid or not reads_across or len(rows_out) != 1:
        return (0, 0)
    if len(rows_out[0].shape) != 1 or set(body_ops) & ROW_BOUND_OPS:
        return (0, 0)
    line = target.block_bytes // ELEMENT_BYTES[rows_out[0].dtype]
    return (line, BLOCK_LINES * line)


# output lines per row of a block: with fewer, the block's rows leave each input line
# after a few elements and come back to it after its set has evicted it
BLOCK_LINES = 4


# ops whose row is computed as a whole (or read twice): a block of a row would redo them
ROW_BOUND_OPS = frozenset({"tile.reduce", "tile.softmax", "tile.matmul", "tile.concat"})


def plan_row_tiles(name: str, span: Span | None, grid: Sequence[Any], buffers: Sequence[Buffer],
                   target: TargetDesc, block: tuple[int, int] = (0, 0)) -> TileParams:
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
                      streamed, block)
