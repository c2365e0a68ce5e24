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
from . import MACHINE_ARCHES as ARCHES

__all__ = ["ARCHES", "Machine", "mlir_to_llvm_ir", "optimise", "to_llvm22_text"]

TRIPLE = "x86_64-unknown-linux-gnu"
# LLVM tunes x86-64-v4 and most AVX-512 CPUs to vectorise 256 bits wide (older ones lower their
# clock for 512-bit instructions); x86-64-v4 and native ask for the full width, with which a
# kernel's long row loops need half the instructions (float16 softmax and GELU at 4096 x 4096
# ran 20-30% faster than at 256 bits on this machine).
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
    """The code generator's view of a CPU: ``x86-64-v3`` (AVX2, FMA, F16C), ``x86-64-v4``
    (AVX-512 F, BW, CD, DQ, VL) or the host, the latter two with their widest vectors."""

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
        elif self.arch == "x86-64-v4":
            cpu, features = self.arch, FULL_WIDTH_VECTORS
        else:
            cpu, features = self.arch, ""
        target = llvm.Target.from_triple(TRIPLE)
        return target.create_target_machine(cpu=cpu, features=features, opt=3, reloc="pic",
                                            codemodel="default")


def optimise(llvm_ir: str, machine: Machine, exported: Sequence[str],
             suffix: str = "") -> tuple[llvm.ModuleRef, llvm.TargetMachine]:
    """Parse LLVM IR text and run LLVM's O3 pipeline with both vectorizers for ``machine``;
    of the functions defined, only ``exported`` stay external, each renamed with ``suffix``
    appended."""
    tm = machine.target_machine()
    mod = llvm.parse_assembly(llvm_ir)
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    for fn in mod.functions:   # once inlined into the exported ones, the others go away
        if fn.is_declaration:
            continue
        if fn.name not in exported:
            fn.linkage = llvm.Linkage.internal
        elif suffix:
            fn.name = fn.name + suffix
    options = llvm.create_pipeline_tuning_options(speed_level=3)
    options.loop_vectorization = True
    options.slp_vectorization = True
    builder = llvm.create_pass_builder(tm, options)
    builder.getModulePassManager().run(mod, builder)
    return mod, tm
