"""The Ascend C backend's behaviour around the kernels: ``--emit=ascendc``, ``--target ascend``
without CANN (the project written, the message, exit 1), where bisheng is looked for, the
compile-time UB diagnostic, the cache-hint warning, and ``--target ascend-sim`` libraries on
the command line (loaded, verified, and reporting the twin's findings as errors)."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

import tilec
import tilec.passes  # noqa: F401  (registers the passes)
from tilec.cli import main
from tilec.codegen.ascendc.build import find_bisheng
from tilec.codegen.ascendc.kernel import KERNEL_ATTR, AscendKernel
from tilec.diagnostics import DiagnosticSink, TilecError
from tilec.dialect import make_context
from tilec.driver import CompileOptions, kernel_module

SCALE = """func scale(x: Tensor<f32>[n, m], w: Tensor<f32>[m]) -> Tensor<f32>[n, m] {
  return x * w;
}
"""


@pytest.fixture
def scale_tile(tmp_path: Path) -> Path:
    path = tmp_path / "scale.tile"
    path.write_text(SCALE)
    return path


def test_emit_ascendc_prints_the_kernel_source(scale_tile: Path, capsys) -> None:
    assert main([str(scale_tile), "--emit=ascendc", "--target", "ascend"]) == 0
    out = capsys.readouterr().out
    assert '#include "kernel_operator.h"' in out
    assert 'extern "C" __global__ __aicore__ void tilec_scale__k0(GM_ADDR in0, GM_ADDR in1, ' \
           'GM_ADDR out0, GM_ADDR workspace, GM_ADDR tiling) {' in out


def test_ascend_without_cann_writes_the_project_and_fails(scale_tile: Path, tmp_path: Path,
                                                           monkeypatch, capsys) -> None:
    home = tmp_path / "cann"          # an install without bisheng
    home.mkdir()
    monkeypatch.setenv("ASCEND_HOME_PATH", str(home))
    output = tmp_path / "out" / "scale.so"
    assert main([str(scale_tile), "--target", "ascend", "-o", str(output)]) == 1
    err = capsys.readouterr().err
    project = tmp_path / "out" / "scale.ascend"
    assert "error: --target ascend needs CANN's bisheng compiler, which is not installed" in err
    assert f"looked in {home / 'compiler' / 'bin'}, {home / 'compiler' / 'ccec_compiler' / 'bin'}" \
           f", {home / '*-linux' / 'ccec_compiler' / 'bin'}, PATH" in err
    assert f"cmake -S {project} -B {project / 'build'} && cmake --build {project / 'build'} " \
           f"&& cp {project / 'build' / 'scale.so'} {output}" in err
    assert not output.exists()
    assert sorted(p.name for p in project.iterdir()) == [
        "CMakeLists.txt", "cpu_runtime.c", "cpu_runtime.h", "exports.map", "scale.h",
        "scale.host.c", "scale.kernels.asc", "scale.launch.asc", "tilec_ascend.h"]
    cmake = (project / "CMakeLists.txt").read_text()
    assert "find_package(ASC REQUIRED)\nproject(scale LANGUAGES ASC CXX)" in cmake
    assert "add_library(scale SHARED scale.launch.asc scale.host.c cpu_runtime.c)" in cmake
    launch = (project / "scale.launch.asc").read_text()
    assert '#include "scale.kernels.asc"' in launch
    assert "tilec_scale__k0<<<uint32_t(blocks), nullptr, stream>>>((GM_ADDR)buffers[0], " \
           "(GM_ADDR)buffers[1], (GM_ADDR)buffers[2], (GM_ADDR)workspace, (GM_ADDR)tiling);" \
           in launch
    assert "int scale(const void* x, const void* w, void* out_0, int64_t n, int64_t m, " \
           "void* stream);" in (project / "scale.h").read_text()
    assert "status = tilec_ascend_launch_0(kb, kv, rows, stream);" in \
        (project / "scale.host.c").read_text()


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize("where", ["compiler/bin", "compiler/ccec_compiler/bin",
                                   "aarch64-linux/ccec_compiler/bin"])
def test_bisheng_is_found_under_ascend_home_path(tmp_path: Path, where: str) -> None:
    bisheng = _executable(tmp_path / where / "bisheng")
    assert find_bisheng(str(tmp_path), "") == (str(bisheng), [
        str(tmp_path / "compiler" / "bin"), str(tmp_path / "compiler" / "ccec_compiler" / "bin"),
        str(tmp_path / "*-linux" / "ccec_compiler" / "bin")])


def test_bisheng_is_found_on_path_last(tmp_path: Path) -> None:
    bisheng = _executable(tmp_path / "bin" / "bisheng")
    found, looked = find_bisheng(None, str(tmp_path / "bin"))
    assert (found, looked) == (str(bisheng), ["$ASCEND_HOME_PATH (not set)", "PATH"])


def kernels_of(source: str, budget: int, sink: DiagnosticSink) -> list:
    with make_context():
        module = kernel_module(source, "test.tile", CompileOptions(target="ascend"), sink)
        return [AscendKernel(op, budget, sink).generate() for op in module.body.operations
                if KERNEL_ATTR in op.attributes]


def test_a_kernel_whose_buffers_cannot_fit_ub_is_a_located_error() -> None:
    params = ", ".join(f"a{i}: Tensor<f32>[n]" for i in range(100))
    total = " + ".join(f"a{i}" for i in range(100))
    with pytest.raises(TilecError) as caught:
        kernels_of(f"func many({params}) -> Tensor<f32>[n] {{\n  return {total};\n}}\n",
                   184 * 1024, DiagnosticSink())
    assert caught.value.render().startswith(
        "test.tile:2:10: error: kernel 'many__k0' cannot fit the Unified Buffer: with the "
        "smallest tile, 256 elements, its buffers need 207872 bytes, more than the 188416 bytes "
        "of ascend (100 VECIN queues (inQ) of 2 buffers 204800 B, the VECOUT queue (outQ0) of 2 "
        "buffers 2048 B, 1 VECCALC slot (calc) 1024 B)")


def hinted(width: int) -> str:
    return (f"#pragma cache_hint(table, UB)\nfunc apply(x: Tensor<f32>[n, {width}], "
            f"table: Tensor<f32>[{width}]) -> Tensor<f32>[n, {width}] {{\n"
            "  return x * table;\n}\n")


def quiet_sink() -> DiagnosticSink:
    return DiagnosticSink(stream=open(os.devnull, "w"))


def test_a_hinted_row_is_kept_in_ub_while_the_budget_allows() -> None:
    sink = quiet_sink()
    kept = kernels_of(hinted(2048), 184 * 1024, sink)[0].text
    assert not sink.warnings
    assert "tilec::Keep(resQ0, res0, resStart0, gmIn1, 0, 2048);" in kept


def test_a_hinted_row_larger_than_its_share_of_ub_is_streamed_with_a_warning() -> None:
    sink = quiet_sink()
    streamed = kernels_of(hinted(2048), 16000, sink)[0].text
    assert [w.message for w in sink.warnings] == [
        "cache_hint(table): the rows of kernel 'apply__k0' it asks to keep take 8192 bytes, "
        "more than the 8000 bytes of UB it may keep resident (of 16000); streaming them instead"]
    assert "tilec::Keep" not in streamed
    assert "cache_hint(table, UB) on input 1: no room to keep it in UB: streamed" in streamed


def test_hinted_rows_give_way_when_streaming_needs_all_of_ub() -> None:
    sink = quiet_sink()
    # 2 VECIN and the VECOUT queue of 256-element chunks need 6144 bytes: more than half of
    # the 10000, so the 4096-byte row is not kept after all
    streamed = kernels_of(hinted(1024), 10000, sink)[0].text
    assert [w.message for w in sink.warnings] == [
        "cache_hint(table): kernel 'apply__k0' needs all of UB to stream its values; streaming "
        "the hinted rows too"]
    assert "tilec::Keep" not in streamed


def test_an_ascend_sim_library_runs_on_the_twin(scale_tile: Path, tmp_path: Path) -> None:
    output = tmp_path / "scale.so"
    assert main([str(scale_tile), "--target", "ascend-sim", "-o", str(output)]) == 0
    lib = tilec.load(output)
    assert lib.metadata["target"] == "ascend-sim"
    x = np.arange(21, dtype=np.float32).reshape(3, 7)
    w = np.linspace(-1, 1, 7, dtype=np.float32)
    np.testing.assert_array_equal(lib.scale(x, w), x * w)
    assert main(["verify", str(scale_tile), "--target", "ascend-sim"]) == 0


def test_verify_on_ascend_sim_fails_a_broken_library(scale_tile: Path, monkeypatch) -> None:
    monkeypatch.setenv("TILEC_TEST_BREAK_KERNEL", "scale")
    assert main(["verify", str(scale_tile), "--target", "ascend-sim"]) == 1


def test_a_twin_violation_is_an_error_naming_kernel_block_and_op(monkeypatch) -> None:
    lib = tilec.compile_string("func f(x: Tensor<f32>[n]) -> Tensor<f32>[n] {\n"
                               "  return exp(x) * 2.0;\n}\n", "f.tile", target="ascend-sim")
    x = np.ones(5, np.float32)
    np.testing.assert_allclose(lib.f(x), 2 * np.exp(x), rtol=1e-6)
    # level 2 also wants PipeBarrier<PIPE_V> between dependent vector instructions, which the
    # generated code leaves to the compiler's automatic synchronisation
    monkeypatch.setenv("TILEC_TWIN_STRICT", "2")
    with pytest.raises(RuntimeError, match=r"^kernel tilec_f__k0 block 0: Muls: V reads "
                                           r"UB\[.* that V wrote before \(Exp at f\.kernels"):
        lib.f(x)
