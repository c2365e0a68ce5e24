"""The CPU backend: kernel-level tile IR -> x86-64 kernels -> a shared library.

In: a module after ``tile-kernel{target=cpu}``: ``func.func`` ops marked ``tile.kernel`` (one
row of a grid each) and the host schedules that call them.  Out, by stage: ``llvm`` (the
optimised LLVM IR of every code variant, :mod:`.objects`), ``obj`` (the kernels' object file),
``so`` (the kernels linked with the shared host C and the cpu runtime, and its header).

Stages: :mod:`.kernel` (tile -> scf/arith/math/memref with the kernel ABI), :mod:`.llvm`
(upstream lowering to the llvm dialect, translation, O3 with llvmlite, object emission).
This module is light: the stages import them when they run.
"""
from __future__ import annotations

from typing import Any

from ...tiling.targets import TARGETS
from ..common.backend import Backend, BackendOptions, HostTarget, Output, Stage

DEFAULT_ARCH = "x86-64-v3+v4"
"""The default ``--arch``: every kernel compiled twice, for x86-64-v3 (AVX2) and for x86-64-v4
(AVX-512), the library running the latter where the CPU has AVX-512, as NumPy and PyTorch pick
their kernels when they load: one library that runs on every x86-64-v3 CPU and at full width on
the others.  It costs twice the LLVM time and twice the code."""
MACHINE_ARCHES = ("x86-64-v3", "x86-64-v4", "native")
"""The arches one code variant is compiled for (:class:`.llvm.Machine`)."""
BUILD_ARCHES = (DEFAULT_ARCH, *MACHINE_ARCHES)

__all__ = ["BUILD_ARCHES", "DEFAULT_ARCH", "MACHINE_ARCHES", "CpuBackend"]


class Options(BackendOptions):
    arches = BUILD_ARCHES


def _llvm_text(value: tuple[Any, list[tuple[str, Any, Any]]]) -> str:
    return "\n".join(text for text, _, _ in value[1])


class CpuBackend(Backend):
    """The stages of ``--target cpu`` (see the module docstring)."""

    name = "cpu"
    targets = ("cpu",)
    arches = BUILD_ARCHES
    default_arch = DEFAULT_ARCH
    arch_help = ("cpu: x86-64-v3+v4 (default: AVX2 code, and AVX-512 code run where the CPU "
                 "has it), x86-64-v3, x86-64-v4 or native (tune for this machine)")
    description = TARGETS["cpu"]
    Options = Options
    host = HostTarget("cpu", __name__, host_memory=True,
                      exports=("tilec_num_threads", "tilec_cpu_code", "tilec_alloc_peak"))
    stages = (
        Stage("llvm", Output.TEXT, "kernel", "optimise", text=_llvm_text),
        Stage("obj", Output.BINARY, "llvm", "object", suffix=".o"),
        Stage("so", Output.LIBRARY, "llvm", "library", files=lambda files: files,
              suffix=".so"),
    )

    def toolchain(self, stage: Stage, identify: Any) -> dict[str, str]:
        tools = {}
        if stage.output is not Output.TEXT:
            tools["cc"] = identify.command(self.job.tool("CC", "cc"))
        if self.options.arch == "native":
            import llvmlite.binding as llvm
            tools["host"] = llvm.get_host_cpu_name() + llvm.get_host_cpu_features().flatten()
        return tools

    def optimise(self, module: Any) -> tuple[Any, list[tuple[str, Any, Any]]]:
        """Stage ``llvm``: the kernels and, per code variant, its optimised LLVM IR."""
        from .objects import optimised
        return optimised(module, self.options.arch)

    def _objects(self, value: tuple[Any, list[tuple[str, Any, Any]]]) -> list[bytes]:
        return [tm.emit_object(mod) for _, mod, tm in value[1]]

    def object(self, value: tuple[Any, list[tuple[str, Any, Any]]]) -> bytes:
        """Stage ``obj``: one relocatable object holding every code variant's kernels."""
        from ..common.link import relocatable
        return relocatable(self._objects(value), self.job.tool("CC", "cc"))

    def library(self, value: tuple[Any, list[tuple[str, Any, Any]]]) -> dict[str, bytes]:
        """Stage ``so``: the kernels linked with the host C; the header beside it."""
        from ..common.host import generate
        from ..common.link import link
        from .objects import code_variants

        job = self.job
        host = generate(self.module, name=job.name, source=job.source, arch=self.options.arch,
                        test_break=job.test_break, cpu_code=code_variants(self.options.arch),
                        target=self.host)
        library = link(host, self._objects(value), job.tool("CC", "cc"), f"{job.name}.so")
        return {".h": host.header.encode(), "": library}

