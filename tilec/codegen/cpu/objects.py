"""The CPU backend's kernels: kernel-level tile IR -> x86-64 object files.

In: a module whose ``func.func`` ops marked ``tile.kernel`` (target cpu) describe one row of a
grid each.  Out: :class:`CpuObject`: the object file's bytes (PIC, to be linked into a shared
library by the system C compiler), the kernels' C symbols with their argument types, and the
optimised LLVM IR text (``--emit=llvm``).

Stages: :mod:`.kernel` (tile -> scf/arith/math/memref with the kernel ABI), :mod:`.llvm`
(upstream lowering to the llvm dialect, translation, O3 with llvmlite, object emission).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...mlir import ir
from . import DEFAULT_ARCH
from .kernel import KernelSignature, lower_kernels
from .llvm import Machine, mlir_to_llvm_ir, optimise

__all__ = ["CodeVariant", "CpuObject", "KernelSignature", "code_variants", "compile_kernels",
           "emit_llvm_ir", "optimised"]

# the x86-64 level of each arch that names one, lowest first: the default build's codes
LEVELS = {"x86-64-v3": 3, "x86-64-v4": 4}


@dataclass(frozen=True)
class CodeVariant:
    """One compilation of a library's kernels."""

    arch: str        # a :class:`~.llvm.Machine` arch
    suffix: str      # appended to each kernel's C symbol ("" for the code run by default)
    level: int       # the x86-64 level the CPU needs to run it (0: the host's, not checked)


def code_variants(arch: str) -> tuple[CodeVariant, ...]:
    """The compilations of a library built for ``arch``, the one run by default first (the
    library runs a later one on a CPU of its level); each but the first has its arch, as a C
    identifier, appended to the kernels' symbols."""
    arches = tuple(LEVELS) if arch == DEFAULT_ARCH else (arch,)
    return tuple(CodeVariant(a, "__" + a.replace("-", "_") if i else "", LEVELS.get(a, 0))
                 for i, a in enumerate(arches))


@dataclass(frozen=True)
class CpuObject:
    """The compiled kernels of a module: an object file per :class:`CodeVariant`."""

    objects: tuple[bytes, ...]
    kernels: tuple[KernelSignature, ...]
    llvm_ir: str


def optimised(module: ir.Module, arch: str) -> tuple[list[KernelSignature],
                                                     list[tuple[str, Any, Any]]]:
    """The kernels of ``module`` and, per code variant of ``arch``, its optimised LLVM IR
    text (under a comment naming its arch when there are several), module and target
    machine.  The text is taken before code generation, whose preparation passes rewrite the
    module."""
    lowered, kernels = lower_kernels(module)
    text = mlir_to_llvm_ir(lowered)
    variants = code_variants(arch)
    built = []
    for variant in variants:
        mod, tm = optimise(text, Machine(variant.arch), [c for k in kernels for c in k.c_symbols],
                           variant.suffix)
        label = f"; ---- {variant.arch} ----\n" if len(variants) > 1 else ""
        built.append((label + str(mod), mod, tm))
    return kernels, built


def compile_kernels(module: ir.Module, arch: str = DEFAULT_ARCH) -> CpuObject:
    """Compile every cpu kernel of ``module`` for ``arch`` (one of :data:`BUILD_ARCHES`)."""
    kernels, built = optimised(module, arch)
    return CpuObject(tuple(tm.emit_object(mod) for _, mod, tm in built), tuple(kernels),
                     "\n".join(text for text, _, _ in built))


def emit_llvm_ir(module: ir.Module, arch: str = DEFAULT_ARCH) -> str:
    """The optimised LLVM IR of every cpu kernel of ``module``, code variant by variant."""
    return "\n".join(text for text, _, _ in optimised(module, arch)[1])
