"""The fragment model of the PTX GEMM (tilec/codegen/ptx/fragments.py) against NVIDIA's PTX
ISA documentation.  The formulas below are transcribed from the PTX ISA (section 9.7.14.5.8,
"Matrix Fragments for mma.m16n8k16 with floating point type", and 9.7.14.5.15, ldmatrix)
as the documentation states them, independently of the module; the spot values are read off
the documentation's figures (Figure 79 and the B and C/D figures beside it)."""
from __future__ import annotations

import numpy as np
import pytest

from tilec.codegen.ptx.fragments import (MMA_A, MMA_B, MMA_C, WARP, Held, Source, affine,
                                         accumulator_as_operand,
                                         ldmatrix_address_row, ldmatrix_element,
                                         ldmatrix_origins)


def doc_a(lane: int, i: int) -> tuple[int, int]:
    # groupID = %laneid >> 2; threadID_in_group = %laneid % 4
    # row = groupID for ai where 0 <= i < 2 || 4 <= i < 6, groupID + 8 otherwise
    # col = (threadID_in_group * 2) + (i & 0x1) for ai where i < 4, ... + 8 for i >= 4
    group, thread = lane >> 2, lane % 4
    row = group if (0 <= i < 2 or 4 <= i < 6) else group + 8
    col = thread * 2 + (i & 0x1) if i < 4 else thread * 2 + (i & 0x1) + 8
    return row, col


def doc_b(lane: int, i: int) -> tuple[int, int]:
    # row = (threadID_in_group * 2) + (i & 0x1) for bi where i < 2, ... + 8 for i >= 2
    # col = groupID
    group, thread = lane >> 2, lane % 4
    row = thread * 2 + (i & 0x1) if i < 2 else thread * 2 + (i & 0x1) + 8
    return row, group


def doc_c(lane: int, i: int) -> tuple[int, int]:
    # row = groupID for ci where i < 2, groupID + 8 for ci where i >= 2
    # col = (threadID_in_group * 2) + (i & 0x1) for ci where i = {0,..,3}
    group, thread = lane >> 2, lane % 4
    return (group if i < 2 else group + 8), thread * 2 + (i & 0x1)


@pytest.mark.parametrize("fragment, doc, elements", [(MMA_A, doc_a, 8), (MMA_B, doc_b, 4),
                                                     (MMA_C, doc_c, 4)],
                         ids=["A", "B", "C"])
def test_mma_m16n8k16_tables_match_the_ptx_isa_formulas(fragment, doc, elements) -> None:
    assert fragment.elements == elements
    for lane in range(WARP):
        for i in range(elements):
            assert fragment.at(lane, i) == doc(lane, i), (lane, i)


@pytest.mark.parametrize("fragment", [MMA_A, MMA_B, MMA_C], ids=["A", "B", "C"])
def test_every_matrix_element_is_held_once(fragment) -> None:
    held = [place for places in fragment.table for place in places]
    assert sorted(held) == [(r, c) for r in range(fragment.rows) for c in range(fragment.cols)]


def test_spot_values_from_the_documented_figures() -> None:
    # Figure 79 (A): T0 holds a0,a1 at row 0 cols 0,1; a2,a3 at row 8; a4..a7 at cols 8,9
    assert [MMA_A.at(0, i) for i in range(8)] == [(0, 0), (0, 1), (8, 0), (8, 1),
                                                  (0, 8), (0, 9), (8, 8), (8, 9)]
    # T31 (group 7, thread 3): a0 at (7, 6), a7 at (15, 15)
    assert MMA_A.at(31, 0) == (7, 6) and MMA_A.at(31, 7) == (15, 15)
    # B: T0 holds b0,b1 in column 0 rows 0,1 and b2,b3 at rows 8,9; T5 column 1 rows 2,3
    assert [MMA_B.at(0, i) for i in range(4)] == [(0, 0), (1, 0), (8, 0), (9, 0)]
    assert [MMA_B.at(5, i) for i in range(2)] == [(2, 1), (3, 1)]
    # C/D: T0 c0,c1 at row 0 cols 0,1, c2,c3 at row 8; T7 (group 1, thread 3) row 1 cols 6,7
    assert [MMA_C.at(0, i) for i in range(4)] == [(0, 0), (0, 1), (8, 0), (8, 1)]
    assert [MMA_C.at(7, i) for i in range(2)] == [(1, 6), (1, 7)]
    assert MMA_C.owner(15, 7) == (31, 3)


def test_ldmatrix_layout_matches_the_ptx_isa() -> None:
    # "each thread receives ... row laneid / 4, elements (laneid % 4) * 2 and + 1"; threads
    # 0-7 address matrix 0, 8-15 matrix 1, 16-23 matrix 2, 24-31 matrix 3 (.x4)
    assert ldmatrix_element(9, 1, trans=False) == (2, 3)
    assert ldmatrix_element(9, 1, trans=True) == (3, 2)
    assert [ldmatrix_address_row(lane) for lane in (0, 7, 8, 17, 31)] == \
        [(0, 0), (0, 7), (1, 0), (2, 1), (3, 7)]


def simulate_ldmatrix(stored: np.ndarray, origins: list[tuple[int, int]],
                      trans: bool) -> np.ndarray:
    """What ``ldmatrix`` gives each lane (registers x 2 elements) when lane l points at
    stored row origins[l // 8] + l % 8 (the semantics of the PTX ISA, written here apart)."""
    out = np.zeros((WARP, len(origins), 2), stored.dtype)
    rows = {}
    for lane in range(WARP):
        q, r = lane // 8, lane % 8
        if q < len(origins):
            rows[(q, r)] = stored[origins[q][0] + r, origins[q][1]:origins[q][1] + 8]
    for lane in range(WARP):
        for q in range(len(origins)):
            for j in range(2):
                if trans:
                    out[lane, q, j] = rows[(q, 2 * (lane % 4) + j)][lane // 4]
                else:
                    out[lane, q, j] = rows[(q, lane // 4)][2 * (lane % 4) + j]
    return out


@pytest.mark.parametrize("stored_transposed, trans", [(False, False), (False, True),
                                                      (True, False)])
def test_ldmatrix_origins_fill_the_mma_registers(stored_transposed: bool, trans: bool) -> None:
    """The origins the lowering uses, run through ldmatrix's documented semantics, put in
    every lane's registers exactly the elements the mma fragment table says."""
    rng = np.random.default_rng(0)
    operand = rng.integers(0, 1 << 15, (32, 32))
    stored = operand.T.copy() if stored_transposed else operand
    if stored_transposed or trans:
        # B: two n8 tiles of one k16 step, registers b0b1 / b2b3 of each
        sources = [Source(MMA_B, r, (0, 8 * t)) for t in range(2) for r in range(2)]
    else:
        sources = [Source(MMA_A, r) for r in range(4)]
    origins = ldmatrix_origins(sources, stored_transposed, trans)
    got = simulate_ldmatrix(stored, origins, trans)
    for lane in range(WARP):
        for q, s in enumerate(sources):
            for j in range(2):
                row, col = s.fragment.at(lane, 2 * s.register + j)
                assert got[lane, q, j] == operand[row + s.offset[0], col + s.offset[1]]


def test_ldmatrix_origins_refuse_a_layout_they_cannot_load() -> None:
    # A row-major A cannot come from a transposing ldmatrix
    with pytest.raises(ValueError, match="cannot fill register 0"):
        ldmatrix_origins([Source(MMA_A, 0)], stored_transposed=False, trans=True)


def test_affine_forms_reproduce_the_tables() -> None:
    for fragment in (MMA_A, MMA_B, MMA_C):
        for i in range(fragment.elements):
            for axis in (0, 1):
                form = affine(fragment, i, axis)
                assert [form(lane) for lane in range(WARP)] == \
                    [fragment.at(lane, i)[axis] for lane in range(WARP)]
    assert affine(MMA_C, 3, 0).constant == 8 and affine(MMA_C, 3, 1).per_thread == 2


def test_two_accumulator_tiles_are_the_a_operand_of_the_next_mma() -> None:
    """FlashAttention-2's register reuse, from the documented formulas alone: in every lane,
    A's a0..a7 of an m16k16 block are c0, c1, c2, c3 of the n8 tile of its columns 0..7,
    then c0..c3 of the tile of columns 8..15 (doc_a, doc_c above)."""
    expected = []
    for i in range(8):
        row, col = doc_a(0, i)
        tile, inner = divmod(col, 8)
        element = next(e for e in range(4) if doc_c(0, e) == (row, inner))
        expected.append(Held(tile, element))
    for lane in range(WARP):
        for i, held in enumerate(expected):
            row, col = doc_a(lane, i)
            assert doc_c(lane, held.element) == (row, col - 8 * held.tile), (lane, i)
    assert accumulator_as_operand(MMA_C, MMA_A) == expected
    assert [(h.tile, h.element) for h in expected] == [(0, 0), (0, 1), (0, 2), (0, 3),
                                                        (1, 0), (1, 1), (1, 2), (1, 3)]


def test_an_accumulator_held_by_other_lanes_is_refused() -> None:
    with pytest.raises(ValueError, match="held by lane"):
        accumulator_as_operand(MMA_C, MMA_B.__class__.of(
            "transposed A", 16, 16, 8, lambda lane, i: MMA_A.at(lane, i)[::-1]))
    with pytest.raises(ValueError, match="do not cover"):
        accumulator_as_operand(MMA_A, MMA_C)
