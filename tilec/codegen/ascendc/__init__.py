"""The Ascend C backend: kernel-level tile IR -> Ascend C kernels -> a library.

In: a module after ``tile-kernel{target=ascend}``: ``func.func`` ops marked ``tile.kernel``
(one row of a grid each), the host schedules that call them, template variants.  Out, by
stage: ``ascendc``, the kernel file (:mod:`.kernel`, :mod:`.source`: one
``extern "C" __global__ __aicore__`` entry per kernel, the same text for bisheng and for the
CPU twin), ``so``: the kernel file with its launcher file and the shared host C entries
(the design ABI, header and metadata of every target), built for the CPU twin
(``ascend-sim``) or for CANN (``ascend``: with bisheng, else a CMake project to build on a
machine that has it; :mod:`.build`), and for ``ascend`` ``project``: that CMake project.
This module is light: the stages import the emitter and the builds when they run.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ...tiling.targets import TARGETS
from ..common.backend import Backend, BackendOptions, HostTarget, Output, Stage

__all__ = ["ARCHES", "AscendBackend", "Options", "is_project"]

ARCHES = ("dav-2201",)
SIM = "ascend-sim"
"""The target built for the CPU twin of the Ascend C API rather than for CANN."""


class Options(BackendOptions):
    """What changes the code: the target (CANN or the CPU twin) and the NPU architecture."""

    arches = ARCHES


def is_project(directory: Path) -> bool:
    """Whether ``directory`` holds a CMake project that tilec wrote (:mod:`.build`)."""
    from .build import is_project as written_by_tilec
    return written_by_tilec(directory)


class AscendBackend(Backend):
    """The stages of ``--target ascend`` and ``--target ascend-sim`` (see the module
    docstring)."""

    name = "ascendc"
    targets = ("ascend", SIM)
    arches = ARCHES
    default_arch = "dav-2201"
    arch_help = "ascend, ascend-sim: dav-2201 (default)"
    description = TARGETS["ascend"]
    Options = Options
    stages = (
        Stage("ascendc", Output.TEXT, "kernel", "kernel_file", text=lambda v: v[1]),
        Stage("project", Output.DIRECTORY, "ascendc", "project", files=lambda files: files,
              suffix=".ascend", replaceable=is_project),
        Stage("so", Output.LIBRARY, "ascendc", "library", files=lambda files: files,
              suffix=".so"),
    )

    @classmethod
    def stage_table(cls, target: str) -> dict[str, Stage]:
        """``project`` (a CANN build's CMake project) is not a stage of the twin."""
        return {s.name: s for s in cls.stages if target != SIM or s.name != "project"}

    def toolchain(self, stage: Stage, identify: Any) -> dict[str, str]:
        if stage.output is not Output.LIBRARY:
            return {}
        tools = {"cc": identify.command(self.job.tool("CC", "cc"))}
        if self.options.target == SIM:
            tools["c++"] = identify.command(self.job.tool("CXX", "c++"))
        else:
            tools["bisheng"] = identify.command("bisheng")
        return tools

    def kernels(self, module: Any) -> list[Any]:
        """Every kernel of ``module``, in its order (the launchers' numbering)."""
        from .attention import is_scores
        from .kernel import KERNEL_ATTR, AscendKernel
        return [AscendKernel(op, self.description.local_bytes, self.sink).generate()
                for op in module.body.operations
                if op.operation.name == "func.func" and KERNEL_ATTR in op.attributes
                and not is_scores(op)]

    def kernel_file(self, module: Any) -> tuple[list[Any], str]:
        """Stage ``ascendc``: the kernels and the kernel file."""
        from ... import __version__
        from .source import render_file

        kernels = self.kernels(module)
        return kernels, render_file([k.text for k in kernels], version=__version__,
                                    source=self.job.source, name=self.job.name,
                                    target=self.options.target, arch=self.options.arch)

    def sources(self, value: tuple[list[Any], str]) -> Any:
        """The kernel file, the launcher file and the host C of the library."""
        from ... import __version__
        from ..common.host import DeviceCode, generate
        from ..common.schedule import Kernel
        from .build import Sources
        from .source import render_launch

        kernels, kernel_file = value
        job, target, arch = self.job, self.options.target, self.options.arch
        launch = render_launch(kernels, twin=target == SIM, kernels_file=f"{job.name}.kernels.asc",
                               cores=self.description.cores, version=__version__,
                               source=job.source, name=job.name, target=target, arch=arch)
        described = {k.name: Kernel(i, k.entry, len(k.buffers)) for i, k in enumerate(kernels)}
        host = generate(self.module, name=job.name, source=job.source, arch=arch,
                        test_break=job.test_break, device=DeviceCode(b"", "", described),
                        target=HostTarget(target, __name__, host_memory=target == SIM,
                                          api="tilec_ascend"))
        return Sources(job.name, host, kernel_file, launch)

    def project(self, value: tuple[list[Any], str]) -> dict[str, bytes]:
        """Stage ``project``: the CMake project that builds the library with CANN (relative
        path -> bytes)."""
        from .build import project_files
        return project_files(self.sources(value), self.options.arch)

    def library(self, value: tuple[list[Any], str]) -> dict[str, bytes]:
        """Stage ``so``: built against the CPU twin with ``$CC`` and ``$CXX`` (else ``cc``,
        ``c++``) for ascend-sim, or with CANN's bisheng (looked for under
        ``$ASCEND_HOME_PATH``, then on ``PATH``) for ascend; the header beside it."""
        from .build import build_cann, build_sim, find_bisheng

        sources = self.sources(value)
        if self.options.target == SIM:
            library = build_sim(sources, self.job.tool("CC", "cc"), self.job.tool("CXX", "c++"),
                                f"{sources.name}.so")
        else:
            bisheng, looked = find_bisheng(self.job.tools.get("ASCEND_HOME_PATH"),
                                           self.job.tools.get("PATH"))
            library = build_cann(sources, self.options.arch, bisheng, looked)
        return {".h": sources.host.header.encode(), "": library}
