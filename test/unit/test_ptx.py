"""The PTX backend without a GPU (CI has none): every shared example and corpus program
lowers to PTX that the pinned ptxas accepts for sm_80 and sm_90, with no register spills in
element-wise and row-wise kernels; ``cache_hint(NAME, L2)`` loads NAME through an L2
evict-last policy; the kernel level stages what the backend stages, so a row that fits the
arch's shared memory compiles and one that does not is a located diagnostic; ptxas, started
before its PTX exists, assembles it as one started after, is killed when the compile fails on
the way, and is not started for a text stage; a ptx library builds, loads with
``tilec.load``, and a call without a CUDA driver raises RuntimeError saying so.

What only a GPU can show (the kernels' results and speed) is ``bench/gpu_check.py``'s job:
``test_launch_needs_a_gpu`` is skipped here, with that reason, when no driver is present."""
from __future__ import annotations

import ctypes.util
import functools
import re
import signal
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLE_NAMES, OPS, REPO, SHARED_EXAMPLES

import tilec
import tilec.passes  # noqa: F401  (registers the passes)
import tilec.codegen.ptx.toolchain as ptx_toolchain
from tilec.codegen.ptx import Options, PtxBackend, PtxKernels
from tilec.codegen.ptx.toolchain import SHARED_LIMIT, Ptxas, parse_report
from tilec.diagnostics import DiagnosticSink, TilecError
from tilec.dialect import make_context
from tilec.driver import CompileOptions, kernel_module
from tilec.mlir import ir
from tilec.tiling.targets import TARGETS

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
        return PtxBackend(Options(arch)).run(module, "cubin"), matmul


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


def compile_text(source: str, arch: str, defines: dict[str, int] | None = None) -> PtxKernels:
    """``source`` (file name ``wide.tile``) compiled to a cubin for ``arch``."""
    with make_context():
        module = kernel_module(source, "wide.tile",
                               CompileOptions(target="ptx", defines=defines or {}),
                               DiagnosticSink())
        return PtxBackend(Options(arch)).run(module, "cubin")


def wide_softmax(n: int) -> str:
    """A float32 softmax over rows of ``n`` elements: the row of exponentials is kept in
    shared memory (4*n bytes), and the max and the sum reduce through two static slots of 32
    floats (256 bytes)."""
    return (f"func wide(x: Tensor<f32>[rows, {n}]) -> Tensor<f32>[rows, {n}] {{\n"
            "  return softmax(x);\n}\n")


def test_the_kernel_level_budget_is_the_largest_arch_limit() -> None:
    """tile-kernel knows no arch: it lets through what the largest limit holds and the
    backend checks each arch's own."""
    assert TARGETS["ptx"].local_bytes == max(SHARED_LIMIT.values()) == 227 * 1024


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_known_rows_the_backend_can_run_compile(arch: str) -> None:
    """Rows that the kernel level used to refuse (48 KiB, every input, output and value
    double-buffered or staged), while the backend reads inputs and writes outputs in global
    memory and keeps element-wise values in registers: RMSNorm over 8192 bfloat16 (344112
    bytes then) needs no shared memory but its reduction slot, and a 30000-float softmax
    (720000 bytes then) one row of 120000 bytes."""
    rmsnorm = compile_text((OPS / "rmsnorm_templated.tile").read_text(), arch,
                           {"hidden": 8192})
    softmax = compile_text(wide_softmax(30000), arch)
    for kernels in (rmsnorm, softmax):
        assert kernels.cubin[:4] == b"\x7fELF"
        assert all(r.spill_stores == r.spill_loads == 0 for r in kernels.reports())
    assert all(k.buffers == () for k in rmsnorm.kernels)
    (kernel,) = softmax.kernels
    assert [(b.name, b.bytes.value) for b in kernel.buffers] == [("value#0", 120000)]


def test_a_row_up_to_the_opt_in_limit_compiles_for_sm_90_only() -> None:
    """50000 floats: 200272 bytes of shared memory, within sm_90's 227 KiB (the kernel
    level lets it through) and beyond sm_80's 163 KiB: the backend's diagnostic names the
    kernel, its buffers and the numbers, at the source line of the softmax."""
    kernels = compile_text(wide_softmax(50000), "sm_90")
    assert kernels.cubin[:4] == b"\x7fELF"
    with pytest.raises(TilecError) as caught:
        compile_text(wide_softmax(50000), "sm_80")
    assert caught.value.message == (
        "kernel 'wide__k0' needs 200272 bytes of shared memory per block (value#0 200000 B, "
        "reduction slots 256 B, 16-byte alignment), more than the 166912 bytes of sm_80")
    assert (caught.value.span.file, caught.value.span.line) == ("wide.tile", 2)


def test_a_row_beyond_every_arch_is_a_kernel_level_diagnostic() -> None:
    """60000 floats: the softmax row alone (240000 bytes) exceeds the largest limit, so
    tile-kernel refuses it before any lowering, naming the buffer."""
    with pytest.raises(TilecError) as caught:
        compile_text(wide_softmax(60000), "sm_90")
    assert caught.value.message == (
        "kernel 'wide__k0' needs 240000 bytes of local memory for one row, more than the "
        "232448 bytes of ptx (softmax#0 240000 B x1)")
    assert (caught.value.span.file, caught.value.span.line) == ("wide.tile", 2)


def test_libdevice_code_two_functions_share_is_linked_once() -> None:
    """sinf and cosf both use libdevice's table for large arguments: each is linked from a
    module of its own (cached per process), and the table appears once in the PTX."""
    kernels = compile_text("func f(x: Tensor<f32>[n]) -> Tensor<f32>[n] {\n"
                           "  return sin(x) + cos(x);\n}\n", "sm_90")
    assert len(re.findall(r"^\.global .*__cudart_i2opi_f\w*\[24\]", kernels.ptx, re.M)) == 1
    assert kernels.cubin[:4] == b"\x7fELF"


HINTED = """func scale(x: Tensor<f16>[n, m], w: Tensor<f32>[m]) -> Tensor<f16>[n, m] {{
  {pragma}
  return cast(cast(x, f32) * w, f16);
}}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_an_l2_hint_loads_through_an_evict_last_policy(arch: str) -> None:
    """``cache_hint(w, L2)``: one evict-last policy per kernel, and w's loads (two 128-bit
    vectors per 8 elements in the aligned path, one float in each tail) take it; every
    other load is as in the kernel without the hint.  ptxas accepts it, without spills."""
    hinted = compile_text(HINTED.format(pragma="#pragma cache_hint(w, L2)"), arch)
    plain = compile_text(HINTED.format(pragma=""), arch)
    assert hinted.cubin[:4] == b"\x7fELF"
    assert all(r.spill_stores == r.spill_loads == 0 for r in hinted.reports())
    assert hinted.ptx.count("createpolicy.fractional.L2::evict_last.b64") == 1

    def loads(ptx: str, qualifier: str = "") -> Counter[str]:
        return Counter(re.findall(rf"ld\.global\.nc{qualifier}\.(b16|b32|v4\.b32)\s", ptx))
    through_policy = loads(hinted.ptx, r"\.L2::cache_hint")
    assert through_policy == {"b32": 2, "v4.b32": 2}
    assert loads(plain.ptx) == loads(hinted.ptx) + through_policy
    assert "cache_hint" not in plain.ptx


SCALE = HINTED.format(pragma="")


def test_ptxas_started_before_its_ptx_assembles_it_as_one_started_after() -> None:
    ptx = compile_text(SCALE, "sm_90").ptx
    with Ptxas("sm_90") as early:
        early.start()
        cubin, report = early.assemble(ptx)
    with Ptxas("sm_90") as late:
        late_cubin, late_report = late.assemble(ptx)
    assert cubin[:4] == b"\x7fELF" and cubin == late_cubin
    assert [r.name for r in parse_report(report)] == ["scale__k0"]
    assert parse_report(report) == parse_report(late_report)    # but for its compile time
    with Ptxas("sm_90") as ptxas, pytest.raises(TilecError, match="ptxas rejected the PTX for "
                                                                   "sm_90:\nptxas /dev/stdin"):
        ptxas.assemble(ptx.replace(".target sm_90", ".target sm_90 not ptx;"))


def _module(source: str):
    """``source``'s kernel-level module, in the current context."""
    return kernel_module(source, "scale.tile", CompileOptions(target="ptx"), DiagnosticSink())


def test_a_compile_that_fails_after_ptxas_started_leaves_no_process(monkeypatch) -> None:
    started: list[subprocess.Popen] = []
    start = Ptxas.start

    def start_and_keep(self: Ptxas) -> None:
        start(self)
        started.append(self.process)

    monkeypatch.setattr(Ptxas, "start", start_and_keep)

    def broken(*args: object) -> None:
        raise RuntimeError("a lowering bug")

    monkeypatch.setattr(ptx_toolchain, "to_llvm", broken)
    with make_context(), pytest.raises(RuntimeError, match="a lowering bug"):
        PtxBackend(Options("sm_90")).run(_module(SCALE), "cubin")
    assert len(started) == 1 and started[0].returncode == -signal.SIGKILL


@pytest.mark.parametrize("stop", ["gpu", "nvvm", "llvm", "ptx"])
def test_a_text_stage_starts_no_ptxas(monkeypatch, stop: str) -> None:
    def refuse(self: Ptxas) -> None:
        raise AssertionError("ptxas started")

    monkeypatch.setattr(Ptxas, "start", refuse)
    with make_context():
        text = PtxBackend(Options("sm_90")).run(_module(SCALE), stop)
    assert isinstance(text, str) and "scale__k0" in text


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


@pytest.mark.parametrize("emit, tool", [("so", "ptxas"), ("ptx", "libdevice")])
def test_without_the_ptx_extra_the_error_names_it(monkeypatch, capsys, tmp_path, emit,
                                                   tool) -> None:
    """Where the NVIDIA wheels (the extra ``ptx``) are not installed, --target ptx says what
    it needs and how to install it, instead of failing inside."""
    from tilec.cli import main
    from tilec.codegen.ptx import toolchain

    find_spec = toolchain.importlib.util.find_spec
    monkeypatch.setattr(toolchain.importlib.util, "find_spec",
                        lambda name, *more: None if name == "nvidia" else find_spec(name, *more))
    for cached in (toolchain.ptxas_path, toolchain.libdevice_path, toolchain._libdevice_bitcode,
                   toolchain._libdevice_function):
        monkeypatch.setattr(toolchain, cached.__name__, functools.lru_cache(cached.__wrapped__))
    assert main([str(OPS / "swiglu.tile"), "--target", "ptx", f"--emit={emit}", "--no-cache",
                 "-o", str(tmp_path / "out")]) == 1
    assert f"error: --target ptx needs {tool}: pip install 'tilec[ptx]'" in capsys.readouterr().err
