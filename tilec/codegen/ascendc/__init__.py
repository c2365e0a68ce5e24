"""The Ascend C backend: kernel-level tile IR -> Ascend C kernels -> a library.

In: a module after ``tile-kernel{target=ascend}``: ``func.func`` ops marked ``tile.kernel``
(one row of a grid each), the host schedules that call them, template variants.  Out, by
stage: ``ascendc``, the kernel file (:mod:`.kernel`, :mod:`.source`: one
``extern "C" __global__ __aicore__`` entry per kernel, the same text for bisheng and for the
CPU twin), ``so``: the kernel file with its launcher file and the shared host C entries
(the design ABI, header and metadata of every target), built for the CPU twin
(``ascend-sim``) or for CANN (``ascend``: with bisheng, else a CMake project to build on a
machine that has it; :mod:`.build`), and for ``ascend`` ``project``: that CMake project.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ... import __version__
from ...diagnostics import DiagnosticSink, TilecError
from ...tiling.targets import TARGETS
from ..common.host import DeviceCode, generate
from ..common.schedule import Kernel
from .build import (MissingToolchain, Sources, build_cann, build_sim, find_bisheng,
                    is_project, project_files)
from .kernel import KERNEL_ATTR, AscendKernel, KernelSource
from .source import render_file, render_launch

__all__ = ["ARCHES", "AscendBackend", "MissingToolchain", "Options", "find_bisheng",
           "is_project"]

ARCHES = ("dav-2201",)
TARGETS_OF_BACKEND = ("ascend", "ascend-sim")
STAGES = ("ascendc", "project", "so")


@dataclass(frozen=True)
class Options:
    """What changes the code: the target (CANN or the CPU twin) and the NPU architecture."""

    target: str = "ascend"
    arch: str = "dav-2201"

    def __post_init__(self) -> None:
        if self.target not in TARGETS_OF_BACKEND:
            raise TilecError(f"the Ascend C backend builds {', '.join(TARGETS_OF_BACKEND)}, "
                             f"not '{self.target}'")
        if self.arch not in ARCHES:
            raise TilecError(f"unknown --arch '{self.arch}' for --target {self.target}; "
                             "expected one of " + ", ".join(ARCHES))

    def hash(self) -> str:
        return f"{self.target}:{self.arch}"


class AscendBackend:
    """One module's way through the stages (see the module docstring)."""

    name = "ascendc"

    def __init__(self, options: Options, sink: DiagnosticSink) -> None:
        self.options = options
        self.sink = sink
        self.target = TARGETS["ascend"]

    def kernels(self, module: Any) -> list[KernelSource]:
        """Every kernel of ``module``, in its order (the launchers' numbering)."""
        return [AscendKernel(op, self.target.local_bytes, self.sink).generate()
                for op in module.body.operations
                if op.operation.name == "func.func" and KERNEL_ATTR in op.attributes]

    def kernel_file(self, kernels: list[KernelSource], *, name: str, source: str) -> str:
        """Stage ``ascendc``: the kernel file."""
        return render_file([k.text for k in kernels], version=__version__, source=source,
                           name=name, target=self.options.target, arch=self.options.arch)

    def sources(self, module: Any, *, name: str, source: str, test_break: str = "") -> Sources:
        """The kernel file, the launcher file and the host C of library ``name``."""
        kernels = self.kernels(module)
        kernel_file = self.kernel_file(kernels, name=name, source=source)
        twin = self.options.target == "ascend-sim"
        launch = render_launch(kernels, twin=twin, kernels_file=f"{name}.kernels.asc",
                               cores=self.target.cores, version=__version__, source=source,
                               name=name, target=self.options.target, arch=self.options.arch)
        described = {k.name: Kernel(i, k.entry, len(k.buffers)) for i, k in enumerate(kernels)}
        host = generate(module, name=name, source=source, arch=self.options.arch,
                        test_break=test_break,
                        device=DeviceCode(b"", "", described, self.options.target))
        return Sources(name, host, kernel_file, launch)

    def project(self, sources: Sources) -> dict[str, bytes]:
        """Stage ``project``: the CMake project that builds the library with CANN (relative
        path -> bytes)."""
        return project_files(sources, self.options.arch)

    def library(self, sources: Sources, *, cc: str, cxx: str, bisheng: str | None,
                looked: list[str]) -> bytes:
        """Stage ``so``: the library's bytes (see :mod:`.build`)."""
        if self.options.target == "ascend-sim":
            return build_sim(sources, cc, cxx, f"{sources.name}.so")
        return build_cann(sources, self.options.arch, bisheng, looked)
