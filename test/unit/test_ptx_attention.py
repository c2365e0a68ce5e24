"""The fused attention of the PTX backend (tilec/codegen/ptx/attention.py) without a GPU:
tile-attention fuses float16/bfloat16 attention for ptx (causal grouped-query, an additive
bias read from an input, a mask of an input's per-row lengths), each fused kernel lowers to
FlashAttention-2 on mma.sync m16n8k16 (K by ldmatrix, V by ldmatrix.trans, K/V blocks by
cp.async, the row statistics by warp shuffles; the query heads that share a key head are
rows of one block), and ptxas assembles it for sm_80 and sm_90
with no spills and within the arch's shared memory; float32 attention and a head dimension
that is not a constant multiple of 16 up to 128 keep the unfused kernels, with a remark, and
a chain that needs shared memory (a concatenation) the row lowering of the fused kernel.  Whether the results are right is
bench/gpu_check.py's job: none of this has run on a GPU."""
from __future__ import annotations


import pytest

from ptx_kernels import compiled, entries

from tilec.codegen.ptx.attention import BLOCK_M, BLOCK_N, shared_heads
from tilec.codegen.ptx.toolchain import SHARED_LIMIT
from tilec.diagnostics import DiagnosticSink
from tilec.dialect import KERNEL_ATTR, make_context
from tilec.dims import parse_dim
from tilec.driver import CompileOptions, kernel_module
from tilec.tiling.tiler import TileParams

ATTENTION = """
func gqa(q: Tensor<bf16>[b, hk, g, s, 128], k: Tensor<bf16>[b, hk, 1, t, 128],
         v: Tensor<bf16>[b, hk, 1, t, 128]) -> Tensor<bf16>[b, hk, g, s, 128] {
  let scores = cast(q @ transpose(k, [0, 1, 2, 4, 3]), f32) * 0.08838834764831845;
  let causal = where(iota([s, t], axis=1) <= iota([s, t], axis=0, start=t - s), scores, -inf);
  return cast(cast(softmax(causal, axis=-1), bf16) @ v, bf16);
}

func biased(q: Tensor<f16>[h, s, 64], k: Tensor<f16>[h, t, 64], v: Tensor<f16>[h, t, 64],
            bias: Tensor<f32>[s, t]) -> Tensor<f16>[h, s, 64] {
  let scores = cast(q @ transpose(k, [0, 2, 1]), f32) * 0.125 + bias;
  return cast(cast(softmax(scores, axis=-1), f16) @ v, f16);
}

func lengths(q: Tensor<bf16>[b, 1, 64], k: Tensor<bf16>[b, t, 64], v: Tensor<bf16>[b, t, 64],
             lens: Tensor<int32>[b, 1, 1]) -> Tensor<bf16>[b, 1, 64] {
  let scores = cast(q @ transpose(k, [0, 2, 1]), f32) * 0.125;
  let cached = where(iota([1, t], axis=1) < lens, scores, -inf);
  return cast(cast(softmax(cached, axis=-1), bf16) @ v, bf16);
}
"""
KINDS = {"gqa": "bf16", "biased": "f16", "lengths": "bf16"}
HEADS = {"gqa": 128, "biased": 64, "lengths": 64}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_attention_is_one_flash_kernel_on_the_tensor_cores(arch: str) -> None:
    kernels, fused = compiled(ATTENTION, arch, "attention")
    assert sorted(fused.values()) == sorted(KINDS)
    bodies = entries(kernels.ptx)
    assert sorted(bodies) == sorted(fused)          # one kernel each, no scores function
    for kernel, name in fused.items():
        body, kind = bodies[kernel], KINDS[name]
        assert f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32" in body, name
        assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in body, name        # Q, K
        assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in body, name  # V
        assert "cp.async.cg.shared.global" in body and "cp.async.wait_group" in body, name
        assert "shfl.sync.bfly.b32" in body, name                             # row max, sum
        # Q K^T: d/16 x (BLOCK_N/8) mma per block; P V: (BLOCK_N/16) x (d/8)
        products = (HEADS[name] // 16) * (BLOCK_N // 8) + (BLOCK_N // 16) * (HEADS[name] // 8)
        assert body.count("mma.sync.aligned") == products, name
    for report in kernels.reports():
        assert (report.spill_stores, report.spill_loads) == (0, 0), report
        assert report.registers <= 255


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_attention_shared_memory_fits_the_arch(arch: str) -> None:
    """Q's block once, K and V in two stages, rows padded by 16 bytes; 256 threads."""
    kernels, fused = compiled(ATTENTION, arch, "attention")
    for kernel in kernels.kernels:
        d = HEADS[fused[kernel.name]]
        need = (BLOCK_M + 4 * BLOCK_N) * (d + 8) * 2
        assert need <= kernel.shared.value <= need + 3 * 16 <= SHARED_LIMIT[arch]
        assert kernel.row_elements.value == 8 * 256


def unfused_remarks(source: str) -> list[str]:
    """The remarks of building ``source`` for ptx, whose attention must stay unfused."""
    sink = DiagnosticSink()
    with make_context():
        module = kernel_module(source, "f.tile", CompileOptions(target="ptx"), sink)
        kernels = [op for op in module.body.operations if KERNEL_ATTR in op.attributes]
        assert len(kernels) > 1
        assert all(TileParams.of(op.attributes[KERNEL_ATTR]).schedule != "attention"
                   for op in kernels)
    return [d.render() for d in sink.warnings]


def test_float32_attention_stays_unfused_and_says_why() -> None:
    source = ("func f(q: Tensor<f32>[s, 64], k: Tensor<f32>[t, 64], v: Tensor<f32>[t, 64])\n"
              "    -> Tensor<f32>[s, 64] {\n"
              "  return softmax(q @ transpose(k, [1, 0]), axis=-1) @ v;\n}\n")
    remarks = unfused_remarks(source)
    assert any("fuses attention of bfloat16 and float16 only, not float32" in r
               for r in remarks), remarks


@pytest.mark.parametrize("head, why", [("d", "not d"), ("256", "not 256"),
                                       ("40", "not 40")])
def test_a_head_the_kernel_cannot_hold_stays_unfused_and_says_why(head: str, why: str) -> None:
    """A symbolic, too large or odd head dimension keeps the unfused kernels (which hold no
    row of scores in shared memory, so any t runs)."""
    source = ATTENTION.split("func biased")[0].replace("128", head)
    remarks = unfused_remarks(source)
    assert any("one constant head dimension, a multiple of 16 up to 128, " + why in r
               for r in remarks), remarks


def test_a_chain_that_needs_shared_memory_keeps_the_row_lowering() -> None:
    """A concatenated bias is copied to shared memory by the whole block, with a barrier:
    never inside one score element's code.  The fused kernel is lowered by rows instead."""
    source = """
func catmask(q: Tensor<bf16>[h, s, 64], k: Tensor<bf16>[h, 8, 64], v: Tensor<bf16>[h, 8, 64],
             b1: Tensor<f32>[s, 3], b2: Tensor<f32>[s, 5]) -> Tensor<bf16>[h, s, 64] {
  let scores = cast(q @ transpose(k, [0, 2, 1]), f32) * 0.125 + concat(b1, b2, axis=1);
  return cast(cast(softmax(scores, axis=-1), bf16) @ v, bf16);
}
"""
    kernels, fused = compiled(source, "sm_90", "attention")
    (kernel,) = fused
    body = entries(kernels.ptx)[kernel]
    assert "mma.sync" not in body and "bar.sync" in body
    (report,) = [r for r in kernels.reports() if r.name == kernel]
    assert (report.spill_stores, report.spill_loads) == (0, 0)


@pytest.mark.parametrize("out, k, v, heads", [
    (("b", "hk", "g"), ("b", "hk", "1"), ("b", "hk", "1"), 1),   # grouped-query
    (("h",), ("h",), ("h",), 0),                                # one key head per query head
    (("b", "g"), ("b", "1"), ("b", "g"), 0),                     # v not shared: no packing
    (("b", "1", "g"), ("1", "1", "1"), ("1", "1", "1"), 1),     # a 1 of the output stops it
    (("b", "h", "g"), ("b", "1", "1"), ("b", "1", "1"), 2),
])
def test_query_heads_that_share_a_key_head_are_rows_of_one_block(out, k, v, heads) -> None:
    dims = [tuple(parse_dim(d) for d in shape) for shape in (out, k, v)]
    assert shared_heads(*dims) == heads
