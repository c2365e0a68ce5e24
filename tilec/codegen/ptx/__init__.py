"""The PTX backend: kernel-level tile IR -> gpu dialect -> NVVM -> LLVM IR -> PTX -> cubin.

In: a module whose ``func.func`` ops marked ``tile.kernel`` (target ptx) describe one row of a
grid each.  Out: :class:`PtxBackend` runs the stages in order, each keyed by the name
``--emit`` gives it (``gpu``, ``nvvm``, ``llvm``, ``ptx``, ``cubin``, ``so``), and stops at any
of them; :class:`PtxKernels` is the value of ``cubin``: cubin, PTX, the ptxas report and each
kernel's launch description for the host; ``so`` embeds them in the shared host C, linked
with the CUDA launcher.

A kernel whose dynamic shared memory is known at compile time and exceeds the arch's per-block
limit is a located error naming the function, its buffers, the bytes and the limit.
This module is light: the stages import the lowering and the toolchain when they run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...tiling.targets import TARGETS
from ..common.backend import Backend, BackendOptions, HostTarget, Output, Stage

__all__ = ["ARCHES", "Options", "PtxBackend", "PtxKernels"]
ARCHES = ("sm_80", "sm_90", "sm_90a")
DEVICE_EXPORTS = ("tilec_device_alloc", "tilec_device_free", "tilec_copy_to_device",
                  "tilec_copy_to_host", "tilec_synchronize")
"""What a ptx library exports for callers without CUDA bindings (the Python runtime)."""


@dataclass(frozen=True)
class Options(BackendOptions):
    """What changes the code: the GPU architecture."""

    arch: str = "sm_90"
    target: str = "ptx"
    arches = ARCHES


@dataclass(frozen=True)
class PtxKernels:
    """The compiled kernels of a module."""

    cubin: bytes
    ptx: str
    report: str                          # ptxas -v
    kernels: tuple[Any, ...]             # .kernel.GpuKernel

    def reports(self) -> list[Any]:
        from .toolchain import parse_report
        return parse_report(self.report)


class PtxBackend(Backend):
    """The stages of ``--target ptx`` (see the module docstring)."""

    name = "ptx"
    targets = ("ptx",)
    arches = ARCHES
    default_arch = "sm_90"
    arch_help = "ptx: sm_80, sm_90 (default), sm_90a"
    description = TARGETS["ptx"]
    Options = Options
    host = HostTarget("ptx", __name__, host_memory=False, api="tilec_cuda",
                      exports=DEVICE_EXPORTS)
    stages = (
        Stage("gpu", Output.TEXT, "kernel", "lower", text=lambda v: str(v[0])),
        Stage("nvvm", Output.TEXT, "gpu", "nvvm", text=lambda v: str(v[0])),
        Stage("llvm", Output.TEXT, "nvvm", "llvm", text=lambda v: str(v[0])),
        Stage("ptx", Output.TEXT, "llvm", "ptx", text=lambda v: v[0]),
        Stage("cubin", Output.BINARY, "ptx", "cubin", files=lambda v: {"": v.cubin},
              suffix=".o"),
        Stage("so", Output.LIBRARY, "cubin", "library", files=lambda files: files,
              suffix=".so"),
    )

    def toolchain(self, stage: Stage, identify: Any) -> dict[str, str]:
        tools = {"ptxas": identify.distribution("nvidia-cuda-nvcc"),
                 "libdevice": identify.distribution("nvidia-nvvm")}
        if stage.output is Output.LIBRARY:
            tools["cc"] = identify.command(self.job.tool("CC", "cc"))
        return tools

    def lower(self, module: Any) -> tuple[Any, list[Any]]:
        """Stage ``gpu``: the kernels as a gpu.module, checked against the arch's shared
        memory."""
        from .kernel import check_shared, lower_kernels
        from .toolchain import SHARED_LIMIT

        arch = self.options.arch
        lowered, kernels = lower_kernels(module)
        check_shared(module, kernels, SHARED_LIMIT[arch], arch)
        return lowered, kernels

    def nvvm(self, value: tuple[Any, list[Any]]) -> tuple[Any, list[Any]]:
        """Stage ``nvvm``; a build that goes on to the cubin starts ptxas here, so that its
        start-up overlaps the lowering."""
        from . import toolchain

        self.ptxas = self.resources.enter_context(toolchain.Ptxas(self.options.arch))
        if self.stop in ("cubin", "so"):
            self.ptxas.start()
        toolchain.to_nvvm(value[0])
        return value

    def llvm(self, value: tuple[Any, list[Any]]) -> tuple[Any, list[Any]]:
        """Stage ``llvm``: the kernels' LLVM IR with the libdevice functions they call."""
        from . import toolchain
        return toolchain.to_llvm(value[0], self.options.arch, [k.name for k in value[1]]), \
            value[1]

    def ptx(self, value: tuple[Any, list[Any]]) -> tuple[str, list[Any]]:
        from . import toolchain
        return toolchain.to_ptx(value[0], self.options.arch), value[1]

    def cubin(self, value: tuple[str, list[Any]]) -> PtxKernels:
        """Stage ``cubin``; ptxas's report is the stage ``ptxas`` (what ``--verbose``
        prints)."""
        ptx, kernels = value
        cubin, report = self.ptxas.assemble(ptx)
        self.note("ptxas", lambda: report, self.stop)
        return PtxKernels(cubin, ptx, report, tuple(kernels))

    def library(self, compiled: PtxKernels) -> dict[str, bytes]:
        """Stage ``so``: the host C embedding the cubin and the PTX, linked with the CUDA
        launcher; the header beside it."""
        from ..common.host import DeviceCode, generate
        from ..common.link import link
        from ..common.schedule import Kernel

        job = self.job
        kernels = {k.name: Kernel(i, k.name, len(k.inputs) + len(k.outputs) + bool(k.split),
                                  k.shared, k.row_elements, split=k.split)
                   for i, k in enumerate(compiled.kernels)}
        host = generate(self.module, name=job.name, source=job.source, arch=self.options.arch,
                        target=self.host,
                        device=DeviceCode(compiled.cubin, compiled.ptx, kernels))
        library = link(host, None, job.tool("CC", "cc"), f"{job.name}.so")
        return {".h": host.header.encode(), "": library}

