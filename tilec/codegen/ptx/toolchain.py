"""gpu dialect -> NVVM -> LLVM IR (+ libdevice) -> PTX -> cubin, with the pinned NVIDIA wheels.

In: a module holding ``gpu.module @tilec_kernels`` (:mod:`.kernel`).  Out, stage by stage:
the NVVM-dialect module (``gpu.module(convert-scf-to-cf, convert-gpu-to-nvvm, ...)``), LLVM IR
(the gpu.module translated, libdevice linked, every symbol but the kernels internalised, then
O3 with llvmlite's NVPTX target), PTX text, and a cubin assembled by ``ptxas`` with its
``-v`` report.

The tools come from the ``nvidia-nvvm`` (libdevice) and ``nvidia-cuda-nvcc`` (ptxas) wheels
pinned in pyproject.toml, found through importlib, never through PATH.  PTX ``.version``:
8.0 (``+ptx80``), the first ISA with sm_90a and the oldest that every arch here accepts, so
that ptxas 13.0 and any driver since CUDA 12.0 (13.0 included) load it.
"""
from __future__ import annotations

import importlib.util
import re
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import llvmlite.binding as llvm

from ...diagnostics import TilecError
from ...mlir import ir, passmanager, translate_module_to_llvmir
from ..common.llvm_text import to_llvm22_text

TRIPLE = "nvptx64-nvidia-cuda"
PTX_FEATURES = "+ptx80"
ARCHES = ("sm_80", "sm_90", "sm_90a")
# Dynamic shared memory one block may use (the opt-in maximum): 163 KiB on sm_80, 227 on sm_90.
SHARED_LIMIT = {"sm_80": 163 * 1024, "sm_90": 227 * 1024, "sm_90a": 227 * 1024}
NVVM_LOWERING = ("builtin.module(gpu.module(canonicalize,cse,convert-scf-to-cf,"
                 "convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},canonicalize,cse,"
                 "reconcile-unrealized-casts))")


def _wheel_file(package: str, relative: str) -> Path:
    """A file of an installed NVIDIA wheel (``nvidia/cu13/...``), found via importlib."""
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations) if spec and spec.submodule_search_locations \
        else []
    for root in roots:
        path = Path(root) / relative
        if path.exists():
            return path
    raise TilecError(f"cannot find {relative} of the '{package}' wheel: install it "
                     f"(pip install '{package}==13.0.88')")


def libdevice_path() -> Path:
    return _wheel_file("nvidia-nvvm", "cu13/nvvm/libdevice/libdevice.10.bc")


def ptxas_path() -> Path:
    return _wheel_file("nvidia-cuda-nvcc", "cu13/bin/ptxas")


def to_nvvm(module: ir.Module) -> None:
    """Lower the gpu.module of ``module`` to the NVVM and LLVM dialects, in place."""
    with module.context:
        passmanager.PassManager.parse(NVVM_LOWERING).run(module.operation)


def _gpu_module(module: ir.Module) -> ir.Operation:
    return next(op.operation for op in module.body.operations
                if op.operation.name == "gpu.module")


@lru_cache(maxsize=None)
def _initialised() -> bool:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return True


@lru_cache(maxsize=None)
def _libdevice_bitcode() -> bytes:
    return libdevice_path().read_bytes()


def target_machine(arch: str) -> llvm.TargetMachine:
    _initialised()
    target = llvm.Target.from_triple(TRIPLE)
    return target.create_target_machine(cpu=arch, features=PTX_FEATURES, opt=3)


def to_llvm(module: ir.Module, arch: str, kernels: Sequence[str]) -> llvm.ModuleRef:
    """The NVVM-dialect ``module`` translated to LLVM IR, libdevice linked, all but
    ``kernels`` internalised (so that unused libdevice functions go), optimised at O3."""
    tm = target_machine(arch)
    text = to_llvm22_text(translate_module_to_llvmir(_gpu_module(module)))
    mod = llvm.parse_assembly(text)
    mod.triple = TRIPLE
    mod.data_layout = str(tm.target_data)
    libdevice = llvm.parse_bitcode(_libdevice_bitcode())
    libdevice.triple = TRIPLE
    libdevice.data_layout = mod.data_layout
    mod.link_in(libdevice)
    for fn in mod.functions:
        if not fn.is_declaration and fn.name not in kernels:
            fn.linkage = llvm.Linkage.internal
    mod.verify()
    builder = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
    builder.getModulePassManager().run(mod, builder)
    return mod


def to_ptx(mod: llvm.ModuleRef, arch: str) -> str:
    return target_machine(arch).emit_assembly(mod)


@dataclass(frozen=True)
class KernelReport:
    """What ``ptxas -v`` says of one kernel."""

    name: str
    registers: int
    spill_stores: int
    spill_loads: int
    shared_bytes: int          # static shared memory


_FUNCTION = re.compile(r"Compiling entry function '(\w+)'")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_USAGE = re.compile(r"Used (\d+) registers")
_SHARED = re.compile(r"(\d+) bytes smem")


def parse_report(text: str) -> list[KernelReport]:
    """The per-kernel figures of a ``ptxas -v`` report."""
    reports = []
    parts = _FUNCTION.split(text)
    for name, body in zip(parts[1::2], parts[2::2]):
        spills = _SPILLS.search(body)
        usage = _USAGE.search(body)
        shared = _SHARED.search(body)
        reports.append(KernelReport(name, int(usage.group(1)) if usage else 0,
                                    int(spills.group(1)) if spills else 0,
                                    int(spills.group(2)) if spills else 0,
                                    int(shared.group(1)) if shared else 0))
    return reports


def assemble(ptx: str, arch: str) -> tuple[bytes, str]:
    """The cubin of ``ptx`` for ``arch`` and ptxas's ``-v`` report; TilecError if ptxas
    rejects it."""
    with tempfile.TemporaryDirectory(prefix="tilec-ptxas-") as tmp:
        source, cubin = Path(tmp) / "kernels.ptx", Path(tmp) / "kernels.cubin"
        source.write_text(ptx)
        args = [str(ptxas_path()), "-v", f"-arch={arch}", "-O3", str(source), "-o", str(cubin)]
        try:
            done = subprocess.run(args, capture_output=True, text=True)
        except OSError as e:
            raise TilecError(f"cannot run ptxas ({args[0]}): {e.strerror or e}") from None
        if done.returncode != 0:
            raise TilecError(f"ptxas rejected the PTX for {arch}:\n"
                             + (done.stderr or done.stdout).strip())
        return cubin.read_bytes(), (done.stderr + done.stdout).strip()
