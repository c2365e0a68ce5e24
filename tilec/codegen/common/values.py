"""Lazy row values of the kernel lowerings: what a tile op's result is before it is computed.

In: nothing of MLIR but the values already built (buffers, row offsets, scalars).  Out: a small
tree per tile value that a backend evaluates inside ONE loop nest (or thread-strided loop) where
it is materialised, so that a chain of element-wise and data-movement ops costs one pass:

- :class:`View`: elements in memory (a global buffer's row, a scratch buffer): ``buffer``,
  a row-dependent ``base`` index plus a symbolic ``offset``, and symbolic sizes and strides.
  Slicing, broadcasting, transposing and squeezing a view only change these numbers.
- :class:`Splat`: one SSA scalar standing for every element (rank 0, or a reduction to one
  element broadcast to any shape).
- :class:`Map`: an element-wise op over operands of the same shape or rank 0.
- :class:`Concat`: two values side by side along an axis; it is never evaluated element by
  element, only written to memory part by part.

Sizes, strides and offsets are :class:`~tilec.dims.Dim` polynomials; the ``...`` of a
rank-generic type is one axis whose extent is the symbol :data:`LEAD` (the product of the
leading extents), which is all that row-major addressing needs.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Sequence, Union

from ...dialect.ops import TRANSCENDENTAL_OPS
from ...dialect.types import FLOAT_DTYPES
from ...dims import Dim
from ...mlir import ir
from .scalar import Num

LEAD = "..."
"""The symbol naming the product of the ``...`` extents."""

ONE = Dim.const(1)
ZERO = Dim.const(0)


def row_major(sizes: Sequence[Dim]) -> tuple[Dim, ...]:
    """The strides of a contiguous row-major array of ``sizes``."""
    strides: list[Dim] = []
    step = ONE
    for d in reversed(sizes):
        strides.append(step)
        step = step * d
    return tuple(reversed(strides))


def compute_kind(dtype: str) -> str:
    """How a value of element type ``dtype`` is held in registers: f32, i32 or i1 (masks)."""
    if dtype in FLOAT_DTYPES:
        return "f32"
    return "i32" if dtype == "int32" else "i1"


@dataclass(frozen=True, eq=False)
class View:
    """Elements in memory: element ``i`` is at ``base + offset + sum(i[k] * strides[k])``."""

    buffer: ir.Value                  # memref<?xS>
    storage: str                      # S as an element type name
    base: Optional[Num]               # row-dependent part of the offset (None: 0)
    offset: Dim
    sizes: tuple[Dim, ...]
    strides: tuple[Dim, ...]
    dtype: str

    def is_row_major(self) -> bool:
        """Whether the elements are contiguous in row-major order (size-1 axes ignored)."""
        want = row_major(self.sizes)
        return all(s == w or d == ONE for d, s, w in zip(self.sizes, self.strides, want))


@dataclass(frozen=True, eq=False)
class Splat:
    """One register value standing for every element."""

    value: Num
    sizes: tuple[Dim, ...]
    dtype: str


@dataclass(frozen=True, eq=False)
class Map:
    """An element-wise op, computed element by element where the value is read."""

    # a tile op name ("add"), "cmp.PRED", "select", "cast", or a backend's "NAME.VARIANT" of one
    op: str
    operands: tuple["Lazy", ...]
    sizes: tuple[Dim, ...]
    dtype: str                        # the result's element type

    @property
    def expensive(self) -> bool:
        return self.op.partition(".")[0] in TRANSCENDENTAL_OPS or any(_expensive(x)
                                                                   for x in self.operands)


@dataclass(frozen=True, eq=False)
class Concat:
    """``parts[0]`` then ``parts[1]`` along ``axis``."""

    parts: tuple["Lazy", "Lazy"]
    axis: int
    sizes: tuple[Dim, ...]
    dtype: str

    @property
    def expensive(self) -> bool:
        return any(_expensive(x) for x in self.parts)


Lazy = Union[View, Splat, Map, Concat]


def ramp(start: Dim, sizes: Sequence[Dim], axis: int) -> View:
    """The int32 values ``start + i[axis]`` as a view of no buffer: its address is its value,
    so that slicing, broadcasting and transposing it are those of a view.  Only
    :meth:`~.rows.RowLowering.load` reads it (:func:`is_ramp`)."""
    strides = tuple(ONE if a == axis else ZERO for a in range(len(sizes)))
    return View(None, "int32", None, start, tuple(sizes), strides, "int32")  # type: ignore


def is_ramp(x: Lazy) -> bool:
    """Whether ``x`` is a :func:`ramp`, a view with no memory behind it."""
    return isinstance(x, View) and x.buffer is None


def _expensive(x: Lazy) -> bool:
    return isinstance(x, (Map, Concat)) and x.expensive


def reindex(x: Lazy, sizes: Sequence[Dim], source: Sequence[Optional[int]],
            starts: Optional[Sequence[Dim]] = None) -> Optional[Lazy]:
    """``x`` read at new indices: new axis j is source axis ``source[j]`` (None: an axis of
    its own, where the source is read at index 0) shifted by ``starts`` of that source axis;
    source axes no new axis names are read at index 0.  This is slicing, broadcasting,
    transposing and squeezing at once.  None for a :class:`Concat` whose axis would be cut."""
    sizes = tuple(sizes)
    starts = tuple(starts) if starts is not None else (ZERO,) * len(x.sizes)
    if isinstance(x, Splat):
        return replace(x, sizes=sizes)
    if isinstance(x, View):
        offset = x.offset
        for start, stride in zip(starts, x.strides):
            offset = offset + start * stride
        strides = tuple(ZERO if a is None else x.strides[a] for a in source)
        return replace(x, offset=offset, sizes=sizes, strides=strides)
    if isinstance(x, Map):
        operands = []
        for v in x.operands:
            if not v.sizes:
                operands.append(v)
                continue
            moved = reindex(v, sizes, source, starts)
            assert moved is not None, "element-wise operands are never concatenations"
            operands.append(moved)
        return replace(x, operands=tuple(operands), sizes=sizes)
    if x.axis not in source or starts[x.axis] != ZERO:
        return None
    axis = list(source).index(x.axis)
    if sizes[axis] != x.sizes[x.axis]:
        return None
    parts = []
    for part in x.parts:
        part_sizes = list(sizes)
        part_sizes[axis] = part.sizes[x.axis]
        moved = reindex(part, part_sizes, source, starts)
        if moved is None:
            return None
        parts.append(moved)
    return Concat((parts[0], parts[1]), axis, sizes, x.dtype)


def slice_part(x: Lazy, axis: int, start: Dim, size: Dim) -> Optional[Lazy]:
    """``x[..., start:start+size, ...]`` along ``axis``."""
    sizes = list(x.sizes)
    sizes[axis] = size
    starts = [ZERO] * len(x.sizes)
    starts[axis] = start
    return reindex(x, sizes, range(len(x.sizes)), starts)


def numel(sizes: Sequence[Dim]) -> Dim:
    """The number of elements of a row of ``sizes``."""
    total = ONE
    for d in sizes:
        total = total * d
    return total


def concat_parts(x: Concat, dest: View) -> tuple[tuple[Lazy, View], tuple[Lazy, View]]:
    """Each part of ``x`` with the slice of ``dest`` it goes to: how a concatenation is written
    into memory, part by part."""
    a, b = x.parts
    width = a.sizes[x.axis]
    return ((a, slice_part(dest, x.axis, ZERO, width)),
            (b, slice_part(dest, x.axis, width, b.sizes[x.axis])))


def map_sizes(operands: Sequence[Lazy]) -> tuple[Dim, ...]:
    """The shape of an element-wise op's result: that of its operands of rank > 0."""
    ranked = [x.sizes for x in operands if x.sizes]
    return ranked[0] if ranked else ()
