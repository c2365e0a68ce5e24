"""gpu dialect -> NVVM -> LLVM IR (+ libdevice) -> PTX -> cubin, with the pinned NVIDIA wheels.

In: a module holding ``gpu.module @tilec_kernels`` (:mod:`.kernel`).  Out, stage by stage:
the NVVM-dialect module (``gpu.module(convert-scf-to-cf, convert-gpu-to-nvvm, ...)``), LLVM IR
(the gpu.module translated, the libdevice functions it calls linked, every symbol but the
kernels internalised, then O3 with llvmlite's NVPTX target), PTX text, and a cubin assembled
by ``ptxas`` with its ``-v`` report (:class:`Ptxas`: started before the PTX is made).

Kept for the life of the process, so that each compile does only its own work: LLVM's NVPTX
target (initialised once) and a target machine per arch, where the wheels' files are, the
bytes of libdevice, and per libdevice function, arch pair that function extracted from
libdevice as bitcode.

The tools come from the ``nvidia-nvvm`` (libdevice) and ``nvidia-cuda-nvcc`` (ptxas) wheels
of the extra ``ptx`` pinned in pyproject.toml, found through importlib, never through PATH.
PTX ``.version``: 8.0 (``+ptx80``), the first ISA with sm_90a and the oldest that every arch here accepts, so
that ptxas 13.0 and any driver since CUDA 12.0 (13.0 included) load it.
"""
from __future__ import annotations

import importlib.util
import re
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional, Sequence

import llvmlite.binding as llvm

from ...diagnostics import TilecError
from ...mlir import ir, passmanager, translate_module_to_llvmir
from ..common.llvm_text import to_llvm22_text
from . import ARCHES

TRIPLE = "nvptx64-nvidia-cuda"
PTX_FEATURES = "+ptx80"
LIBDEVICE_PREFIX = "__nv_"
# Dynamic shared memory one block may use (the opt-in maximum): 163 KiB on sm_80, 227 on sm_90.
SHARED_LIMIT = {"sm_80": 163 * 1024, "sm_90": 227 * 1024, "sm_90a": 227 * 1024}
# Simplify once, before the lowering: after it LLVM's O3 does the same work (the PTX of every
# shared example and corpus program is the same without a second canonicalize,cse there).
NVVM_LOWERING = ("builtin.module(gpu.module(canonicalize,cse,convert-scf-to-cf,"
                 "convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},"
                 "reconcile-unrealized-casts))")


def _wheel_file(tool: str, relative: str) -> Path:
    """A file of an installed NVIDIA wheel (``nvidia/cu13/...``; the extra ``ptx`` installs
    them), found via importlib."""
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations) if spec and spec.submodule_search_locations \
        else []
    for root in roots:
        path = Path(root) / relative
        if path.exists():
            return path
    raise TilecError(f"--target ptx needs {tool}: pip install 'tilec[ptx]'")


@lru_cache(maxsize=None)
def libdevice_path() -> Path:
    return _wheel_file("libdevice", "cu13/nvvm/libdevice/libdevice.10.bc")


@lru_cache(maxsize=None)
def ptxas_path() -> Path:
    return _wheel_file("ptxas", "cu13/bin/ptxas")


def to_nvvm(module: ir.Module) -> None:
    """Lower the gpu.module of ``module`` to the NVVM and LLVM dialects, in place.  The IR
    is verified before the lowering (tilec built it) and after it, not between its upstream
    passes: a verification costs as much as a pass, and these passes, given valid IR, leave
    valid IR."""
    with module.context:
        module.operation.verify()
        lowering = passmanager.PassManager.parse(NVVM_LOWERING)
        lowering.enable_verifier(False)
        lowering.run(module.operation)
        module.operation.verify()


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


@lru_cache(maxsize=None)
def _libdevice_function(name: str, arch: str) -> bytes:
    """The bitcode of libdevice's function ``name`` and what it uses, nothing else: made
    once per process, name and arch, so that a compile links a few hundred lines of IR
    instead of parsing, linking and optimising all of libdevice (352 functions).  What
    ``name`` uses is ``linkonce_odr``, so that the copies two such modules share (``fabsf``,
    the table of ``sinf`` and ``cosf``) merge when both are linked."""
    library = llvm.parse_bitcode(_libdevice_bitcode())
    for value in [*library.functions, *library.global_variables]:
        if not value.is_declaration and value.name != name:
            value.linkage = llvm.Linkage.linkonce_odr
    tm = target_machine(arch)
    library.triple = TRIPLE
    library.data_layout = str(tm.target_data)
    passes = llvm.create_new_module_pass_manager()
    passes.add_global_dead_code_eliminate_pass()
    passes.run(library, llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(0)))
    return library.as_bitcode()


@lru_cache(maxsize=None)
def target_machine(arch: str) -> llvm.TargetMachine:
    """LLVM's NVPTX target machine for ``arch``, made once per process and arch."""
    _initialised()
    target = llvm.Target.from_triple(TRIPLE)
    return target.create_target_machine(cpu=arch, features=PTX_FEATURES, opt=3)


def to_llvm(module: ir.Module, arch: str, kernels: Sequence[str]) -> llvm.ModuleRef:
    """The NVVM-dialect ``module`` translated to LLVM IR, the libdevice functions it calls
    linked, all but ``kernels`` internalised (so that what O3 inlines goes), optimised at O3."""
    tm = target_machine(arch)
    text = to_llvm22_text(translate_module_to_llvmir(_gpu_module(module)))
    mod = llvm.parse_assembly(text)
    mod.triple = TRIPLE
    mod.data_layout = str(tm.target_data)
    called = [fn.name for fn in mod.functions
              if fn.is_declaration and fn.name.startswith(LIBDEVICE_PREFIX)]
    for name in called:
        mod.link_in(llvm.parse_bitcode(_libdevice_function(name, arch)))
    for value in [*mod.functions, *mod.global_variables]:
        if not value.is_declaration and value.name not in kernels:
            value.linkage = llvm.Linkage.internal
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


class Ptxas:
    """One run of ``ptxas -v -O3`` for ``arch``: :meth:`start` starts the process before the
    PTX exists, so that its start-up (about 10 ms) overlaps the lowering that makes the PTX,
    and :meth:`assemble` feeds it the PTX (started then if not before).  The PTX goes in and
    the cubin comes out through pipes (no files).  Used as a context manager: a process left
    without its PTX (a compile that failed on the way) is killed on exit."""

    def __init__(self, arch: str) -> None:
        self.arch = arch
        self.process: Optional[subprocess.Popen] = None

    def start(self) -> None:
        """Start ptxas, waiting for its input; TilecError when it cannot run."""
        args = [str(ptxas_path()), "-v", f"-arch={self.arch}", "-O3", "/dev/stdin", "-o",
                "/dev/stdout"]
        try:
            self.process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE)
        except OSError as e:
            raise TilecError(f"cannot run ptxas ({args[0]}): {e.strerror or e}") from None

    def assemble(self, ptx: str) -> tuple[bytes, str]:
        """The cubin of ``ptx`` and ptxas's ``-v`` report; TilecError if ptxas rejects it."""
        if self.process is None:
            self.start()
        assert self.process is not None
        cubin, errors = self.process.communicate(ptx.encode())
        report = errors.decode(errors="replace").strip()
        if self.process.returncode != 0:
            raise TilecError(f"ptxas rejected the PTX for {self.arch}:\n{report}")
        return cubin, report

    def __enter__(self) -> "Ptxas":
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            self.process.communicate()
