"""The split decode of the PTX attention (tilec/codegen/ptx/attention.py) without a GPU: the
split rule (decode splits, prefill does not), a NumPy model of the kernel's order (each
split's key blocks from :func:`split_range`, the online softmax over 64-key blocks with P
rounded to bfloat16 for ``P @ V``, the combine over the splits in split order) against the
reference at awkward t, a row that sees no key staying NaN, and ptxas accepting the kernel
with its split path for sm_80 and sm_90 with no spills."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ptx_kernels import compiled, entries

from tilec.codegen.ptx.attention import (BLOCK_M, BLOCK_N, MIN_SPLIT_BLOCKS, attention_splits,
                                         split_range)

SMS = {"sm_80": 108, "sm_90": 132}


def tiles_of(batch: int, rows: int) -> int:
    """The kernel's row blocks: the query rows that share a key head, in blocks of 128."""
    return batch * -(-rows // BLOCK_M)


@pytest.mark.parametrize("sms", sorted(SMS.values()))
@pytest.mark.parametrize("t", [4096, 8192, 16384, 32768])
@pytest.mark.parametrize("heads, kv_heads", [(32, 8), (32, 32)])
def test_a_decode_splits_its_keys_to_fill_the_gpu(sms: int, t: int, heads: int,
                                                  kv_heads: int) -> None:
    tiles = tiles_of(kv_heads, heads // kv_heads)          # one query row per head
    blocks = -(-t // BLOCK_N)
    splits = attention_splits(tiles, blocks, sms)
    assert splits > 1
    assert tiles * splits >= min(sms, tiles * (blocks // MIN_SPLIT_BLOCKS))
    ranges = [split_range(blocks, splits, i) for i in range(splits)]
    assert all(end - first >= MIN_SPLIT_BLOCKS for first, end in ranges)
    assert [r[0] for r in ranges[1:]] == [r[1] for r in ranges[:-1]]
    assert ranges[0][0] == 0 and ranges[-1][1] == blocks


@pytest.mark.parametrize("sms", sorted(SMS.values()))
@pytest.mark.parametrize("s", [1024, 4096])
def test_a_prefill_is_not_split(sms: int, s: int) -> None:
    assert attention_splits(tiles_of(8, 4 * s), -(-s // BLOCK_N), sms) == 1


def test_short_keys_are_not_split() -> None:
    assert attention_splits(8, MIN_SPLIT_BLOCKS * 2 - 1, 132) == 1
    assert attention_splits(8, 0, 132) == attention_splits(0, 512, 132) == 1


def bf16(x: np.ndarray) -> np.ndarray:
    """float32 rounded to bfloat16 (to nearest, ties to even), as float32."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def split_partial(q, k, v, scale, reach, first, end):
    """One split as a block runs it: key blocks ``first`` to ``end``, running max and sum
    in float32, P rounded to bfloat16 for P @ V; keys at or past ``reach`` (per row) -inf."""
    rows, t = q.shape[0], k.shape[0]
    m = np.full(rows, -np.inf, np.float32)
    total = np.zeros(rows, np.float32)
    out = np.zeros((rows, v.shape[1]), np.float32)
    for j in range(first, end):
        keys = np.arange(j * BLOCK_N, (j + 1) * BLOCK_N)
        kb = np.zeros((BLOCK_N, k.shape[1]), np.float32)
        vb = np.zeros((BLOCK_N, v.shape[1]), np.float32)
        inside = keys < t
        kb[inside], vb[inside] = k[keys[inside]], v[keys[inside]]
        scores = (q @ kb.T).astype(np.float32) * np.float32(scale)
        scores[:, ~inside] = -np.inf
        scores[keys[None, :] >= reach[:, None]] = -np.inf
        new = np.maximum(m, scores.max(axis=1))
        shift = np.where(new == -np.inf, np.float32(0), new)
        rescale = np.exp(m - shift)
        p = np.exp(scores - shift[:, None])
        total = total * rescale + p.sum(axis=1, dtype=np.float32)
        out = out * rescale[:, None] + bf16(p) @ vb
        m = new
    return out, m, total


def combine(partials):
    """The combine, in split order: a running maximum, the sums and outputs rescaled."""
    top = np.full(partials[0][1].shape, -np.inf, np.float32)
    total = np.zeros_like(top)
    value = np.zeros_like(partials[0][0])
    with np.errstate(invalid="ignore"):
        for out, m, l in partials:
            new = np.maximum(top, m)
            shift = np.where(new == -np.inf, np.float32(0), new)
            old, mine = np.exp(top - shift), np.exp(m - shift)
            total = total * old + l * mine
            value = value * old[:, None] + out * mine[:, None]
            top = new
        return value / total[:, None]


def model(q, k, v, scale, splits, reach):
    """The split kernel on one row block; ``reach[r]``: keys row r sees (causal)."""
    blocks = -(-k.shape[0] // BLOCK_N)
    seen = -(-int(reach.max()) // BLOCK_N) if reach.max() > 0 else 0
    blocks = min(blocks, seen)                     # the causal tile's visible blocks
    partials = [split_partial(q, k, v, scale, reach, *split_range(blocks, splits, i))
                for i in range(splits)]
    return combine(partials)


def reference(q, k, v, scale, reach):
    scores = (q.astype(np.float64) @ k.T.astype(np.float64)) * scale
    scores[np.arange(k.shape[0])[None, :] >= reach[:, None]] = -np.inf
    with np.errstate(invalid="ignore"):
        p = np.exp(scores - scores.max(axis=1, keepdims=True))
        return (p / p.sum(axis=1, keepdims=True)) @ v


@pytest.mark.parametrize("t", [1, 17, 255, 1000, 4097])
@pytest.mark.parametrize("causal", [False, True])
def test_the_split_model_matches_the_reference(t: int, causal: bool) -> None:
    """Four query heads of one key head (one row each), d = 128: every split count the
    rule could give, with empty splits when there are more splits than blocks."""
    rng = np.random.default_rng(t)
    q, k, v = (bf16(rng.standard_normal((n, 128)).astype(np.float32)) for n in (4, t, t))
    scale = 1 / math.sqrt(128)
    reach = np.full(4, t) if not causal else np.array([t, t - 3, t // 2, 0])
    want = reference(q, k, v, scale, reach)
    blocks = -(-t // BLOCK_N)
    whole = model(q, k, v, scale, 1, reach)
    for splits in sorted({1, 2, 3, 7, attention_splits(1, blocks, 132), blocks + 2}):
        got = model(q, k, v, scale, splits, reach)
        seen = reach > 0
        # P in bfloat16 relative to each split's own maximum: within bfloat16's precision
        tolerance = 2.0 ** -7 * np.abs(want[seen]).max()
        assert np.abs(got[seen] - want[seen]).max() <= tolerance, splits
        assert np.abs(got[seen] - whole[seen]).max() <= tolerance, splits
        assert np.isnan(got[~seen]).all()          # a row with no key: 0 / 0, as unsplit
        assert np.isnan(whole[~seen]).all()


DECODE = """
func dec(q: Tensor<bf16>[b, hk, g, 1, 128], k: Tensor<bf16>[b, hk, 1, t, 128],
         v: Tensor<bf16>[b, hk, 1, t, 128]) -> Tensor<bf16>[b, hk, g, 1, 128] {
  let scores = cast(q @ transpose(k, [0, 1, 2, 4, 3]), f32) * 0.08838834764831845;
  return cast(cast(softmax(scores, axis=-1), bf16) @ v, bf16);
}

func cached(q: Tensor<f16>[b, 1, 64], k: Tensor<f16>[b, t, 64], v: Tensor<f16>[b, t, 64],
            lens: Tensor<int32>[b, 1, 1]) -> Tensor<f16>[b, 1, 64] {
  let scores = cast(q @ transpose(k, [0, 2, 1]), f32) * 0.125;
  let seen = where(iota([1, t], axis=1) < lens, scores, -inf);
  return cast(cast(softmax(seen, axis=-1), f16) @ v, f16);
}
"""


@pytest.mark.parametrize("arch", sorted(SMS))
def test_the_split_kernel_assembles_without_spills(arch: str) -> None:
    """Both kernels hold the split path: the workspace stores, the counter, the combine."""
    kernels, fused = compiled(DECODE, arch, "attention")
    assert sorted(fused.values()) == ["cached", "dec"]
    for name, body in entries(kernels.ptx).items():
        assert ".minnctapersm 1" in body, name
        assert "atom.global.add.u32" in body and body.count("fence.acq_rel.gpu") == 2, name
        assert "st.global.b32" in body or "st.global.f32" in body, name
    for report in kernels.reports():
        assert (report.spill_stores, report.spill_loads) == (0, 0), report
    assert {k.name: k.split is not None for k in kernels.kernels} == {k: True for k in fused}
