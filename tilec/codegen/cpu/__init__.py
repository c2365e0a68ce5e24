"""The CPU backend: kernel-level tile IR -> an x86-64 object file of kernels.

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
from .kernel import KernelSignature, lower_kernels
from .llvm import ARCHES, Machine, mlir_to_llvm_ir, optimise

__all__ = ["ARCHES", "CpuObject", "KernelSignature", "compile_kernels", "emit_llvm_ir"]


@dataclass(frozen=True)
class CpuObject:
    """The compiled kernels of a module."""

    object: bytes
    kernels: tuple[KernelSignature, ...]
    llvm_ir: str


def _optimised(module: ir.Module, arch: str) -> tuple[Any, Any, list[KernelSignature]]:
    lowered, kernels = lower_kernels(module)
    mod, tm = optimise(mlir_to_llvm_ir(lowered), Machine(arch), [k.c_symbol for k in kernels])
    return mod, tm, kernels


def compile_kernels(module: ir.Module, arch: str = "x86-64-v3") -> CpuObject:
    """Compile every cpu kernel of ``module`` for ``arch`` (``x86-64-v3`` or ``native``)."""
    mod, tm, kernels = _optimised(module, arch)
    llvm_ir = str(mod)   # before code generation, whose preparation passes rewrite the module
    return CpuObject(tm.emit_object(mod), tuple(kernels), llvm_ir)


def emit_llvm_ir(module: ir.Module, arch: str = "x86-64-v3") -> str:
    """The optimised LLVM IR of every cpu kernel of ``module``."""
    return str(_optimised(module, arch)[0])
