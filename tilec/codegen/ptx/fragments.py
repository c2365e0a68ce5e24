"""The register layouts of the warp-level matrix instructions the PTX GEMM uses, written once.

A :class:`Fragment` is a table: for each of the 32 lanes of a warp and each element the lane
holds, the (row, column) of the matrix element it is.  The tables here are those of
``mma.sync.aligned.m16n8k16`` with float16/bfloat16 multiplicands and float32 accumulators
(A 16 x 16, B 16 x 8, C/D 16 x 8; PTX ISA 9.7.14.5.8) and of ``ldmatrix.sync.aligned.m8n8``
``.b16`` (9.7.14.5.15): lane ``l`` receives, of each 8 x 8 matrix, the elements of stored row
``l / 4`` at columns ``2 (l % 4)`` and ``+1`` (with ``.trans``: of stored column ``l / 4`` at
rows ``2 (l % 4)`` and ``+1``), and lanes ``8q .. 8q + 7`` give the addresses of the eight
stored rows of matrix ``q``.

The lowering (:mod:`.gemm`) asks this module, never the formulas: :func:`ldmatrix_origins`
finds which 8 x 8 block of shared memory each register of an ldmatrix must come from so that
it lands in the registers of an mma operand (and fails if none does), and :func:`affine`
gives a lane's row or column of one element as ``a * (lane >> 2) + b * (lane % 4) + c``,
fitted to the table and checked against all 32 lanes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

WARP = 32
PER_REGISTER = 2            # 16-bit elements in one 32-bit register


def _group(lane: int) -> int:
    return lane >> 2


def _in_group(lane: int) -> int:
    return lane % 4


@dataclass(frozen=True)
class Fragment:
    """One operand's layout: ``table[lane][element] = (row, column)``."""

    name: str
    rows: int
    cols: int
    table: tuple[tuple[tuple[int, int], ...], ...]

    @staticmethod
    def of(name: str, rows: int, cols: int, elements: int,
           place: Callable[[int, int], tuple[int, int]]) -> "Fragment":
        return Fragment(name, rows, cols, tuple(tuple(place(lane, i) for i in range(elements))
                                                for lane in range(WARP)))

    @property
    def elements(self) -> int:
        return len(self.table[0])

    def at(self, lane: int, element: int) -> tuple[int, int]:
        return self.table[lane][element]

    def owner(self, row: int, col: int) -> tuple[int, int]:
        """(lane, element) that holds matrix element (row, col)."""
        for lane, places in enumerate(self.table):
            if (row, col) in places:
                return lane, places.index((row, col))
        raise KeyError((row, col))


def _mma_a(lane: int, i: int) -> tuple[int, int]:
    return (_group(lane) + 8 * ((i >> 1) & 1), 2 * _in_group(lane) + (i & 1) + 8 * (i >> 2))


def _mma_b(lane: int, i: int) -> tuple[int, int]:
    return 2 * _in_group(lane) + (i & 1) + 8 * (i >> 1), _group(lane)


def _mma_c(lane: int, i: int) -> tuple[int, int]:
    return _group(lane) + 8 * (i >> 1), 2 * _in_group(lane) + (i & 1)


MMA_A = Fragment.of("mma.m16n8k16 A (f16/bf16)", 16, 16, 8, _mma_a)
MMA_B = Fragment.of("mma.m16n8k16 B (f16/bf16)", 16, 8, 4, _mma_b)
MMA_C = Fragment.of("mma.m16n8k16 C/D (f32)", 16, 8, 4, _mma_c)


def ldmatrix_element(lane: int, j: int, trans: bool) -> tuple[int, int]:
    """The (stored row, stored column), within its 8 x 8 matrix, of element ``j`` (0 or 1)
    of the register that ``ldmatrix[.trans]`` gives lane ``lane``."""
    if trans:
        return 2 * _in_group(lane) + j, _group(lane)
    return _group(lane), 2 * _in_group(lane) + j


def ldmatrix_address_row(lane: int) -> tuple[int, int]:
    """(matrix, stored row) whose address lane ``lane`` gives to ``ldmatrix.x4``."""
    return lane // 8, lane % 8


@dataclass(frozen=True)
class Source:
    """One register an ldmatrix fills: register ``register`` of ``fragment`` (its elements
    ``2 register`` and ``+1``), the fragment at ``offset`` (rows, columns) in the operand."""

    fragment: Fragment
    register: int
    offset: tuple[int, int] = (0, 0)


def ldmatrix_origins(sources: Sequence[Source], stored_transposed: bool,
                     trans: bool) -> list[tuple[int, int]]:
    """For an ``ldmatrix.x{len(sources)}[.trans]`` that fills ``sources``: the (stored row,
    stored column) where each of its 8 x 8 matrices starts in shared memory, which holds the
    operand as is or, with ``stored_transposed``, transposed (stored row = operand column).
    ValueError when the instruction cannot fill those registers."""
    origins = []
    for q, source in enumerate(sources):
        found = set()
        for lane in range(WARP):
            for j in range(PER_REGISTER):
                row, col = source.fragment.at(lane, PER_REGISTER * source.register + j)
                row, col = row + source.offset[0], col + source.offset[1]
                stored = (col, row) if stored_transposed else (row, col)
                inner = ldmatrix_element(lane, j, trans)
                found.add((stored[0] - inner[0], stored[1] - inner[1]))
        if len(found) != 1:
            raise ValueError(f"ldmatrix{'.trans' if trans else ''} cannot fill register "
                             f"{source.register} of {source.fragment.name} (matrix {q})")
        origins.append(found.pop())
    return origins


@dataclass(frozen=True)
class Affine:
    """``per_group * (lane >> 2) + per_thread * (lane % 4) + constant``."""

    per_group: int
    per_thread: int
    constant: int

    def __call__(self, lane: int) -> int:
        return self.per_group * _group(lane) + self.per_thread * _in_group(lane) + self.constant


def affine(fragment: Fragment, element: int, axis: int) -> Affine:
    """The row (``axis`` 0) or column (1) of ``element`` as an affine function of the lane's
    group and place in it, fitted to the table; ValueError if the table is not affine."""
    base = fragment.at(0, element)[axis]
    fitted = Affine(fragment.at(4, element)[axis] - base, fragment.at(1, element)[axis] - base,
                    base)
    if any(fitted(lane) != fragment.at(lane, element)[axis] for lane in range(WARP)):
        raise ValueError(f"{fragment.name}: element {element} is not affine in the lane")
    return fitted


@dataclass(frozen=True)
class Held:
    """Where a lane holds one element: element ``element`` of the accumulator of the n8
    tile ``tile`` (a row of tiles side by side)."""

    tile: int
    element: int


def accumulator_as_operand(accumulator: Fragment, operand: Fragment) -> list[Held]:
    """How the accumulators of ``operand.cols / accumulator.cols`` tiles side by side become,
    in the same lane, the registers of ``operand``: for each element of ``operand``, the tile
    and element that hold it (FlashAttention's P, the C fragments of ``S = Q K^T`` read as
    the A fragment of ``P V`` after conversion).  ValueError where another lane holds it
    (the product would need shuffles)."""
    tiles = operand.cols // accumulator.cols
    if accumulator.rows != operand.rows or tiles * accumulator.cols != operand.cols:
        raise ValueError(f"{accumulator.name} tiles do not cover {operand.name}")
    held = []
    for element in range(operand.elements):
        found = set()
        for lane in range(WARP):
            row, col = operand.at(lane, element)
            tile, col = divmod(col, accumulator.cols)
            owner, inner = accumulator.owner(row, col)
            if owner != lane:
                raise ValueError(f"{operand.name} element {element} of lane {lane} is held by "
                                 f"lane {owner} in {accumulator.name}")
            found.add(Held(tile, inner))
        if len(found) != 1:
            raise ValueError(f"{operand.name} element {element} is not one accumulator "
                             "element in every lane")
        held.append(found.pop())
    return held
