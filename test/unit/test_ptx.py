"""The PTX backend without a GPU (CI has none): every shared example and corpus program
lowers to PTX that the pinned ptxas accepts for sm_80 and sm_90, with no register spills in
element-wise and row-wise kernels; a kernel whose shared memory is known to exceed the arch's
limit is a located diagnostic; a ptx library builds, loads with ``tilec.load``, and a call
without a CUDA driver raises RuntimeError saying so.

What only a GPU can show (the kernels' results and speed) is ``bench/gpu_check.py``'s job:
``test_launch_needs_a_gpu`` is skipped here, with that reason, when no driver is present."""
from __future__ import annotations

import ctypes.util
import functools
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLE_NAMES, OPS, REPO, SHARED_EXAMPLES

import tilec
import tilec.passes  # noqa: F401  (registers the passes)
from tilec.codegen.ptx import Options, PtxBackend, PtxKernels
from tilec.diagnostics import DiagnosticSink, TilecError
from tilec.dialect import make_context
from tilec.driver import CompileOptions, kernel_module
from tilec.mlir import ir

PROGRAMS = [SHARED_EXAMPLES / f"{n}.tile" for n in EXAMPLE_NAMES] + \
    sorted((REPO / "test" / "corpus").glob("*.tile"))


@functools.cache
def compiled(path: Path, arch: str) -> tuple[PtxKernels, frozenset[str]]:
    """The program's kernels for ``arch``, and the names of those that multiply matrices."""
    with make_context():
        module = kernel_module(path.read_text(), str(path), CompileOptions(target="ptx"),
                               DiagnosticSink())
        matmul = frozenset(ir.StringAttr(op.attributes["sym_name"]).value
                           for op in module.body.operations
                           if "tile.matmul" in str(op))
        return PtxBackend(Options(arch)).run(module), matmul


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_ptxas_accepts_every_program_without_spills(path: Path, arch: str) -> None:
    kernels, matmul = compiled(path, arch)
    assert f".target {arch}" in kernels.ptx and ".version 8.0" in kernels.ptx
    assert kernels.cubin[:4] == b"\x7fELF"
    reports = {r.name: r for r in kernels.reports()}
    assert set(reports) == {k.name for k in kernels.kernels}
    for name, report in reports.items():
        assert 0 < report.registers <= 255, name
        if name not in matmul:
            assert (report.spill_stores, report.spill_loads) == (0, 0), \
                f"{name} spills: {report}"


def test_the_examples_use_shared_memory_where_the_design_says() -> None:
    """RoPE keeps its cache_hinted frequencies in shared memory (a buffer per block);
    swiglu needs none; rmsnorm reduces through one shared slot of 32 floats."""
    rope, _ = compiled(SHARED_EXAMPLES / "rope.tile", "sm_90")
    (kernel,) = rope.kernels
    assert [b.name for b in kernel.buffers] == ["cache_hint#0"]
    assert str(kernel.buffers[0].bytes) == "8*half"     # 2*half float32
    swiglu, _ = compiled(SHARED_EXAMPLES / "swiglu.tile", "sm_90")
    assert swiglu.kernels[0].buffers == () and swiglu.kernels[0].static_shared == 0
    assert "ld.global.nc.v4" in swiglu.ptx               # 128-bit read-only loads
    rmsnorm, _ = compiled(SHARED_EXAMPLES / "rmsnorm_templated.tile", "sm_90")
    assert {k.static_shared for k in rmsnorm.kernels} == {128}


def test_shared_memory_beyond_the_arch_limit_is_a_diagnostic() -> None:
    """tile-kernel already refuses known rows over its 48 KiB budget, so the kernel-level
    IR is made for a small row and widened by hand: a float32 softmax row of 60000 elements
    keeps its exponentials (240000 bytes, plus up to 16 of alignment) in shared memory and
    the max and the sum reduce through two static slots of 32 floats (256 bytes): 240272
    bytes, more than sm_90's 227 KiB."""
    source = "func wide(x: Tensor<f32>[rows, 1000]) -> Tensor<f32>[rows, 1000] {\n" \
             "  return softmax(x);\n}\n"
    with make_context() as context:
        module = kernel_module(source, "wide.tile", CompileOptions(target="ptx"),
                               DiagnosticSink())
        text = module.operation.get_asm(enable_debug_info=True)
        widened = ir.Module.parse(re.sub(r"\b1000\b", "60000", text), context)
        with pytest.raises(TilecError) as caught:
            PtxBackend(Options("sm_90")).run(widened, "gpu")
    error = caught.value
    assert error.message == (
        "kernel 'wide__k0' needs 240272 bytes of shared memory per block (value#0 240000 B, "
        "reduction slots 256 B, 16-byte alignment), more than the 232448 bytes of sm_90")
    assert (error.span.file, error.span.line) == ("wide.tile", 2)


def test_an_unknown_arch_is_an_error() -> None:
    with pytest.raises(TilecError, match=r"unknown --arch 'sm_70' for --target ptx; expected "
                                         r"one of sm_80, sm_90, sm_90a"):
        Options("sm_70")


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> tilec.runtime.loader.Library:
    return tilec.compile(str(OPS / "swiglu.tile"), target="ptx", cache=False)


def test_a_ptx_library_builds_and_loads(library) -> None:
    assert library.metadata["target"] == "ptx" and library.metadata["arch"] == "sm_90"
    assert library.swiglu.signatures == ["swiglu(input: float16[batch, seq, 2*hidden]) -> "
                                         "float16[batch, seq, hidden]"]
    for helper in ("tilec_device_alloc", "tilec_device_free", "tilec_copy_to_device",
                   "tilec_copy_to_host", "tilec_synchronize"):
        assert hasattr(library.cdll, helper)
    assert not hasattr(library.cdll, "tilec_num_threads")


NO_DRIVER = ctypes.util.find_library("cuda") is None


@pytest.mark.skipif(not NO_DRIVER, reason="a CUDA driver is present")
def test_a_call_without_a_driver_says_so(library) -> None:
    x = np.zeros((1, 2, 8), np.float16)
    with pytest.raises(RuntimeError, match=r"^no CUDA driver: cannot load libcuda\.so\.1 .*; a "
                                           r"ptx library needs an NVIDIA GPU and its driver$"):
        library.swiglu(x)
    # the C entry itself returns TILEC_ERR_DEVICE (5) with the same message
    entry = library.cdll.swiglu
    entry.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int64] * 3 + [ctypes.c_void_p]
    assert entry(None, None, 1, 2, 4, None) == 5
    assert library.last_error().startswith("no CUDA driver")
    # shapes are still checked before any device work
    with pytest.raises(ValueError, match="argument 'input'"):
        library.swiglu(np.zeros((1, 2, 7), np.float16))


@pytest.mark.skipif(NO_DRIVER, reason="no CUDA driver on this machine: kernel launches and "
                    "their results are checked by bench/gpu_check.py on a GPU machine")
def test_launch_needs_a_gpu(library) -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 16)).astype(np.float16)
    gate = x[..., 8:].astype(np.float32)
    want = x[..., :8].astype(np.float32) * gate / (1 + np.exp(-gate))
    np.testing.assert_allclose(library.swiglu(x).astype(np.float32), want, rtol=1e-2,
                               atol=1e-3)
