"""Register transposes for the CPU's block walk of a layout change.

In: a kernel at kernel level whose body only moves data (:data:`~tilec.tiling.tiler.MOVE_OPS`):
one ``load_row`` whose rows read an input across its last axis (the grid's last dimension
indexes it), one ``store_row`` of the same element type.  Out: llvm-dialect ops that move a
strip of squares of TILE x TILE elements at a time: TILE vector loads per square, each
across TILE consecutive rows of the grid (contiguous in the input), the shuffle stages of
:func:`transposed`, then, for each of the TILE rows, the strip's vectors stored one after
the other into that row's place in the output: one whole cache line, so that a
non-temporal store fills it before the next line starts.  Element by element, each load
would use 4 bytes of a line.
"""
from __future__ import annotations

from typing import Any, Sequence

from ...dialect import ELEMENT_BYTES
from ...dialect.types import tensor_info
from ...mlir import ir, llvm
from ...tiling.tiler import MOVE_OPS
from ..common.scalar import Num, i64, to_int

TILE = 8            # rows (and elements) of a square
LINE_BYTES = 64     # a strip of squares writes whole cache lines of each output row


def transposable(fn: Any, grid: Sequence[str]) -> bool:
    """Whether kernel ``fn`` (with this ``grid``) only moves elements of 2 or 4 bytes from
    one input, whose last axis the grid's last dimension indexes, to one output."""
    ops = [op for op in fn.regions[0].blocks[0].operations
           if op.operation.name != "func.return"]
    if not grid or any(op.operation.name not in MOVE_OPS for op in ops):
        return False
    loads = [op for op in ops if op.operation.name == "tile.load_row"]
    stores = [op for op in ops if op.operation.name == "tile.store_row"]
    if len(loads) != 1 or len(stores) != 1:
        return False
    source = tensor_info(loads[0].operands[0].type)
    target = tensor_info(stores[0].results[0].type)
    axes = list(ir.DenseI64ArrayAttr(loads[0].attributes["axes"]))
    return (source.dtype == target.dtype and ELEMENT_BYTES[source.dtype] in (2, 4)
            and axes[-1] == len(source.shape) - 1
            and str(source.shape[-1]) == grid[-1])


def vector_bytes(storage: str) -> int:
    """Bytes of a square's row of ``storage`` elements."""
    return TILE * ELEMENT_BYTES[storage]


def strip(storage: str) -> int:
    """Elements of an output row that a strip of squares writes: one cache line."""
    return LINE_BYTES // ELEMENT_BYTES[storage]


def lane_type(storage: str) -> ir.Type:
    """An integer vector of a square's row: shuffles move bits."""
    width = 8 * ELEMENT_BYTES[storage]
    return ir.VectorType.get([TILE], ir.IntegerType.get_signless(width))
def transposed(rows: list[ir.Value]) -> list[ir.Value]:
    """The columns of the square whose rows are the vectors ``rows``: halves, then quarters,
    then eighths swapped between row pairs (a 2 x 2 block transpose at each scale)."""
    n = len(rows)
    half = n // 2
    while half:
        out = list(rows)
        for i in range(n):
            if i & half:
                continue
            j = i + half
            low = [e for g in range(0, n, 2 * half) for e in
                   (*range(g, g + half), *range(n + g, n + g + half))]
            high = [e + half for e in low]
            out[i] = llvm.shufflevector(rows[i].type, rows[i], rows[j], low)
            out[j] = llvm.shufflevector(rows[i].type, rows[i], rows[j], high)
        rows = out
        half //= 2
    return rows


def pointer(address: Num) -> ir.Value:
    """An ``!llvm.ptr`` to the byte at index value ``address``."""
    return llvm.inttoptr(ir.Type.parse("!llvm.ptr"), to_int(address, i64()).value)


def move_strip(source: Num, source_step: Num, dest: Num, dest_step: Num, storage: str,
               nontemporal: bool) -> None:
    """A strip of squares: input row ``e`` of the strip is a square's row at byte address
    ``source + e * source_step``; the strip's column ``k`` (a cache line of elements) goes
    to ``dest + k * dest_step``, its vectors stored one after the other, so that a
    non-temporal store fills a line before the next line starts."""
    vector = lane_type(storage)
    element = ELEMENT_BYTES[storage]
    n = TILE
    squares = []
    for s in range(strip(storage) // n):
        rows = [llvm.load(vector, pointer(source + source_step * (s * n + e)),
                          alignment=element) for e in range(n)]
        squares.append(transposed(rows))
    for k in range(n):
        for s, columns in enumerate(squares):
            llvm.store(columns[k], pointer(dest + dest_step * k + s * vector_bytes(storage)),
                       alignment=vector_bytes(storage) if nontemporal else element,
                       nontemporal=nontemporal)
