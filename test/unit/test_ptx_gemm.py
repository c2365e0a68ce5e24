"""The tensor-core GEMM of the PTX backend (tilec/codegen/ptx/gemm.py) without a GPU: every
float16/bfloat16 ``gemm`` kernel (a bias and GELU, a weight broadcast over the batch with a
float32 result, a Linear weight ``[N, K]`` read in place, a batched B with two results that
read one GELU: recomputed per element, never copied to shared memory) lowers to mma.sync
m16n8k16, ldmatrix and cp.async, ptxas assembles it for sm_80 and sm_90 with no spills and
within the arch's shared memory, and the host launches it with 256 threads; a float32 matmul
runs register tiles of FFMA (ffma.py) through the same stages and epilogue, no
spills either.  Whether the results are right is
bench/gpu_check.py's job."""
from __future__ import annotations


import pytest

from ptx_kernels import compiled, entries

from tilec.codegen.ptx.gemm import THREADS
from tilec.codegen.ptx.toolchain import SHARED_LIMIT

GEMMS = """
func linear_gelu(x: Tensor<bf16>[m, k], w: Tensor<bf16>[k, n], b: Tensor<bf16>[n]) -> Tensor<bf16>[m, n] {
  return gelu(x @ w + b);
}

func shared_weight(x: Tensor<f16>[b, m, k], w: Tensor<f16>[k, n]) -> Tensor<f32>[b, m, n] {
  return cast((x @ w) * 0.5, f32);
}

func linear(x: Tensor<bf16>[m, k], w: Tensor<bf16>[n, k]) -> Tensor<bf16>[m, n] {
  return x @ transpose(w, [1, 0]);
}

func batched_two(x: Tensor<bf16>[b, m, k], w: Tensor<bf16>[b, k, n], r: Tensor<bf16>[b, m, n])
    -> (Tensor<bf16>[b, m, n], Tensor<bf16>[b, m, n]) {
  let y = gelu(x @ w + r);
  return (y, y * 2.0);
}
"""
NAMES = ("linear_gelu", "shared_weight", "linear", "batched_two")
OPERANDS = {"linear_gelu": "bf16", "shared_weight": "f16", "linear": "bf16",
            "batched_two": "bf16"}
TRANSPOSED_WEIGHT = {"linear"}      # B [N, K] read in place: ldmatrix without .trans


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_gemm_kernels_run_on_the_tensor_cores_without_spills(arch: str) -> None:
    kernels, gemms = compiled(GEMMS, arch, "gemm")
    bodies = entries(kernels.ptx)
    assert sorted(gemms.values()) == sorted(NAMES)
    for kernel, name in gemms.items():
        body = bodies[kernel]
        kind = OPERANDS[name]
        assert f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32" in body, name
        assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in body, name
        transposing = "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in body
        assert transposing == (name not in TRANSPOSED_WEIGHT), name
        assert "cp.async.cg.shared.global" in body and "cp.async.wait_group" in body, name
    reports = {r.name: r for r in kernels.reports()}
    assert set(reports) == set(bodies)
    for report in reports.values():       # every kernel, the copies beside the GEMMs too
        assert (report.spill_stores, report.spill_loads) == (0, 0), report
        assert report.registers <= 255


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_gemm_launch_fits_the_arch(arch: str) -> None:
    """256 threads (the host gives ceil(row_elements / 8), at most 256), and three stages
    of a 128 x 32 A block and a 32 x 128 B block (128 x 32 for a weight [N, K]), rows
    padded by 8 elements; .maxntid tells ptxas the 256."""
    kernels, gemms = compiled(GEMMS, arch, "gemm")
    bodies = entries(kernels.ptx)
    for kernel in kernels.kernels:
        if kernel.name not in gemms:
            continue
        assert kernel.row_elements.value == 8 * THREADS
        assert ".maxntid 256, 1, 1" in bodies[kernel.name]
        b_block = 128 * 40 if gemms[kernel.name] in TRANSPOSED_WEIGHT else 32 * 136
        stages = 3 * (128 * 40 + b_block) * 2
        assert stages <= kernel.shared.value <= stages + 2 * 16
        assert kernel.shared.value <= SHARED_LIMIT[arch]


F32_GEMMS = """
func linear_gelu32(x: Tensor<f32>[m, k], w: Tensor<f32>[k, n], b: Tensor<f32>[n]) -> Tensor<f32>[m, n] {
  return gelu(x @ w + b);
}

func linear32(x: Tensor<f32>[m, k], w: Tensor<f32>[n, k]) -> Tensor<f32>[m, n] {
  return x @ transpose(w, [1, 0]);
}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_float32_matmul_runs_ffma_register_tiles_without_spills(arch: str) -> None:
    """float32 never reaches the tensor cores (TF32 would break the float32 contract): each
    thread's 8 x 8 tile of FFMA reads 16-byte vectors of the cp.async-filled stages (per 4
    steps of K, 8 of A's rows and 8 vectors of B), 64 FMAs a step, in a loop over K."""
    kernels, gemms = compiled(F32_GEMMS, arch, "gemm")
    bodies = entries(kernels.ptx)
    assert sorted(gemms.values()) == ["linear32", "linear_gelu32"]
    for kernel in gemms:
        body = bodies[kernel]
        assert "mma.sync" not in body and "ldmatrix" not in body
        assert "cp.async.cg.shared.global" in body and "cp.async.wait_group" in body
        assert body.count("ld.shared.v4.b32") >= 16
        assert body.count("fma.rn.f32") >= 64 * 4
        assert ".maxntid 256, 1, 1" in body
    reports = {r.name: r for r in kernels.reports()}
    for name in gemms:
        assert (reports[name].spill_stores, reports[name].spill_loads) == (0, 0), reports[name]


def test_float32_matmul_stages_fit_the_arch() -> None:
    """Three stages of float32 blocks, rows padded by 16 bytes: A 128 x 36, B 32 x 132 (a
    weight [N, K]: 128 x 36)."""
    kernels, gemms = compiled(F32_GEMMS, "sm_80", "gemm")
    for kernel in kernels.kernels:
        if kernel.name not in gemms:
            continue
        assert kernel.row_elements.value == 8 * THREADS
        b_block = 128 * 36 if gemms[kernel.name] == "linear32" else 32 * 132
        stages = 3 * (128 * 36 + b_block) * 4
        assert stages <= kernel.shared.value <= stages + 2 * 16 <= SHARED_LIMIT["sm_80"]
