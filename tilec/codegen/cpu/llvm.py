"""scf/arith/math/memref MLIR -> LLVM IR -> optimised object code for the host.

In: a module of ``func.func`` ops (:mod:`tilec.codegen.cpu.kernel`).  Out: LLVM IR text
optimised at O3 for an x86-64 CPU, and the relocatable (PIC) object file's bytes.

The MLIR bindings are LLVM 24-git and llvmlite is LLVM 22, so LLVM IR crosses between them as
text, rewritten by :func:`..common.llvm_text.to_llvm22_text` where the older parser reads it
differently.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import llvmlite.binding as llvm

from ...mlir import ir, passmanager, translate_module_to_llvmir
from ..common.llvm_text import to_llvm22_text

__all__ = ["ARCHES", "Machine", "mlir_to_llvm_ir", "optimise", "to_llvm22_text"]

TRIPLE = "x86_64-unknown-linux-gnu"
ARCHES = ("x86-64-v3", "native")
# LLVM tunes most AVX-512 CPUs to vectorise 256 bits wide (older ones lower their clock for
# 512-bit instructions); --arch native asks for the host's full width, with which a kernel's
# long row loops need half the instructions.
FULL_WIDTH_VECTORS = "-prefer-256-bit"
LOWERING = ("builtin.module(canonicalize,cse,convert-scf-to-cf,expand-strided-metadata,"
            "finalize-memref-to-llvm,convert-to-llvm,reconcile-unrealized-casts)")


def mlir_to_llvm_ir(module: ir.Module) -> str:
    """Lower ``module`` (scf/arith/math/memref/func) to the llvm dialect and translate it;
    LLVM IR text that llvmlite's LLVM parses.  ``module`` is lowered in place."""
    with module.context:
        passmanager.PassManager.parse(LOWERING).run(module.operation)
        return to_llvm22_text(str(translate_module_to_llvmir(module.operation)))


@lru_cache(maxsize=None)
def _initialised() -> bool:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return True


@dataclass(frozen=True)
class Machine:
    """The code generator's view of a CPU: ``x86-64-v3`` (AVX2, FMA, F16C) or the host, with
    the widest vectors it has."""

    arch: str = "x86-64-v3"

    def __post_init__(self) -> None:
        if self.arch not in ARCHES:
            raise ValueError(f"unknown cpu arch '{self.arch}'; expected one of "
                             + ", ".join(ARCHES))

    def target_machine(self) -> llvm.TargetMachine:
        _initialised()
        if self.arch == "native":
            cpu = llvm.get_host_cpu_name()
            features = f"{llvm.get_host_cpu_features().flatten()},{FULL_WIDTH_VECTORS}"
        else:
            cpu, features = self.arch, ""
        target = llvm.Target.from_triple(TRIPLE)
        return target.create_target_machine(cpu=cpu, features=features, opt=3, reloc="pic",
                                            codemodel="default")


def optimise(llvm_ir: str, machine: Machine,
             exported: Sequence[str]) -> tuple[llvm.ModuleRef, llvm.TargetMachine]:
    """Parse LLVM IR text and run LLVM's O3 pipeline with both vectorizers for ``machine``;
    of the functions defined, only ``exported`` stay external."""
    tm = machine.target_machine()
    mod = llvm.parse_assembly(llvm_ir)
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    for fn in mod.functions:   # once inlined into the exported ones, the others go away
        if not fn.is_declaration and fn.name not in exported:
            fn.linkage = llvm.Linkage.internal
    options = llvm.create_pipeline_tuning_options(speed_level=3)
    options.loop_vectorization = True
    options.slp_vectorization = True
    builder = llvm.create_pass_builder(tm, options)
    builder.getModulePassManager().run(mod, builder)
    return mod, tm
