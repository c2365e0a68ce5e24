"""The PTX backend: kernel-level tile IR -> gpu dialect -> NVVM -> LLVM IR -> PTX -> cubin.

In: a module whose ``func.func`` ops marked ``tile.kernel`` (target ptx) describe one row of a
grid each.  Out: :class:`PtxBackend` runs the stages in order, each keyed by the name
``--emit`` gives it (``gpu``, ``nvvm``, ``llvm``, ``ptx``, ``cubin``), and stops at any of
them; :class:`PtxKernels` is the end of the line: cubin, PTX, the ptxas report and each
kernel's launch description for the host.

A kernel whose dynamic shared memory is known at compile time and exceeds the arch's per-block
limit is a located error naming the function, its buffers, the bytes and the limit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from ...diagnostics import TilecError
from ...dialect.locations import span_of
from ...mlir import ir
from .kernel import GpuKernel, is_ptx_kernel, lower_kernels
from .toolchain import (ARCHES, SHARED_LIMIT, KernelReport, Ptxas, parse_report, to_llvm,
                        to_nvvm, to_ptx)

__all__ = ["ARCHES", "GpuKernel", "KernelReport", "Options", "PtxBackend", "PtxKernels"]
STAGES = ("gpu", "nvvm", "llvm", "ptx", "cubin")
Note = Callable[[str, Callable[[], str], str], Optional[str]]
"""``note(stage, produce, stop)``: record a stage's text; the text when ``stage`` is ``stop``."""


def _ignore(stage: str, produce: Callable[[], str], stop: str) -> Optional[str]:
    return produce() if stage == stop else None


@dataclass(frozen=True)
class Options:
    """What changes the code: the GPU architecture."""

    arch: str = "sm_90"

    def __post_init__(self) -> None:
        if self.arch not in ARCHES:
            raise TilecError(f"unknown --arch '{self.arch}' for --target ptx; expected one of "
                             + ", ".join(ARCHES))

    def hash(self) -> str:
        return f"ptx:{self.arch}"


@dataclass(frozen=True)
class PtxKernels:
    """The compiled kernels of a module."""

    cubin: bytes
    ptx: str
    report: str                          # ptxas -v
    kernels: tuple[GpuKernel, ...]

    def reports(self) -> list[KernelReport]:
        return parse_report(self.report)


class PtxBackend:
    """One module's way through the stages (see the module docstring)."""

    name = "ptx"

    def __init__(self, options: Options) -> None:
        self.options = options

    def run(self, module: ir.Module, stop: str = "cubin", note: Note = _ignore) -> Any:
        """The text of stage ``stop`` (``gpu``, ``nvvm``, ``llvm``, ``ptx``), or for
        ``cubin`` the :class:`PtxKernels`; each stage's text (and ptxas's report as stage
        ``ptxas``) goes to ``note(stage, produce)`` on the way."""
        arch = self.options.arch
        lowered, kernels = lower_kernels(module)
        _check_shared(module, kernels, SHARED_LIMIT[arch], arch)
        if (text := note("gpu", lambda: str(lowered), stop)) is not None:
            return text
        with Ptxas(arch) as ptxas:
            if stop == "cubin":
                ptxas.start()          # it starts up while the stages below make its PTX
            to_nvvm(lowered)
            if (text := note("nvvm", lambda: str(lowered), stop)) is not None:
                return text
            llvm_module = to_llvm(lowered, arch, [k.name for k in kernels])
            if (text := note("llvm", lambda: str(llvm_module), stop)) is not None:
                return text
            ptx = to_ptx(llvm_module, arch)
            if (text := note("ptx", lambda: ptx, stop)) is not None:
                return text
            cubin, report = ptxas.assemble(ptx)
        note("ptxas", lambda: report, stop)
        return PtxKernels(cubin, ptx, report, tuple(kernels))


def _check_shared(module: ir.Module, kernels: list[GpuKernel], limit: int, arch: str) -> None:
    functions: dict[str, Any] = {ir.StringAttr(op.attributes["sym_name"]).value: op
                                 for op in module.body.operations if is_ptx_kernel(op)}
    for kernel in kernels:
        need = kernel.shared.value
        if need is None or need + kernel.static_shared <= limit:
            continue
        listing = ", ".join(f"{b.name} {b.bytes} B" for b in kernel.buffers)
        raise TilecError(
            f"kernel '{kernel.name}' needs {need + kernel.static_shared} bytes of shared memory "
            f"per block ({listing}, reduction slots {kernel.static_shared} B, 16-byte "
            f"alignment), more than the {limit} bytes of {arch}",
            span_of(functions[kernel.name].location))
