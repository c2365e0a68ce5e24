"""Test helper: compile tile source with the CPU backend, link it with the system C compiler,
and call its kernels through the kernel ABI (ctypes, hand-built memref descriptors), next to
the reference interpreter on the tensor-level function."""
from __future__ import annotations

import ctypes
import math
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import tilec.passes  # noqa: F401  (registers the passes)
from tilec.codegen.cpu.objects import CpuObject, KernelSignature, compile_kernels
from tilec.dialect import params_of
from tilec.dims import ELLIPSIS, parse_dim
from tilec.frontend import compile_source
from tilec.harness.numerics import NUMPY_DTYPES, assert_close
from tilec.harness.reference import bind_shapes, find_function, run
from tilec.pipeline import parse_pipeline, run_pipeline
from tilec.tiling.tiler import SPLIT_MIN_ROWS


class MemRef1D(ctypes.Structure):
    _fields_ = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p),
                ("offset", ctypes.c_int64), ("size", ctypes.c_int64), ("stride", ctypes.c_int64)]


def _descriptor(a: np.ndarray) -> MemRef1D:
    assert a.flags.c_contiguous
    return MemRef1D(a.ctypes.data, a.ctypes.data, 0, a.size, 1)


@dataclass
class Built:
    reference: Any          # the tensor-level module
    kernels: Any            # the kernel-level module
    cpu: CpuObject
    library: ctypes.CDLL

    def signature(self, name: str) -> KernelSignature:
        return next(k for k in self.cpu.kernels if k.name == name)


def build(source: str, directory: Path, file: str = "test.tile", arch: str = "x86-64-v3") -> Built:
    """Kernelize every function of ``source`` (tile-kernel{all=true}), compile, link a .so."""
    module = compile_source(source, file)
    with module.context:
        run_pipeline(module, parse_pipeline("tile-kernel{all=true}"))
        cpu = compile_kernels(module, arch)
    obj, lib = directory / "kernels.o", directory / "kernels.so"
    obj.write_bytes(cpu.objects[0])
    subprocess.run(["cc", "-shared", "-fPIC", str(obj), "-o", str(lib)], check=True)
    return Built(compile_source(source, file), module, cpu, ctypes.CDLL(str(lib)))


def call(built: Built, name: str, args: list[Any], outputs: list[np.ndarray],
         pieces: int = 1) -> None:
    """Run kernel ``name`` over its whole grid, as ``pieces`` calls on consecutive row ranges,
    writing ``outputs`` (allocated by the caller with the results' shapes)."""
    fn = find_function(built.kernels, name)
    sig = built.signature(name)
    ps = params_of(fn)
    args = list(args) + [p.default for p in ps[len(args):]]   # scalars left to their default
    buffers = []
    for p, a in zip(ps, args):
        if p.info.shape == ():
            buffers.append(np.array([a], np.int32 if p.info.dtype == "int32" else np.float32))
        else:
            buffers.append(np.ascontiguousarray(a))
    binding = bind_shapes(fn, args)
    dims = [binding.symbols[s] for s in sig.symbols]
    if sig.rank_generic:
        dims += [len(binding.lead), *binding.lead]
    dims_buffer = np.array(dims + [0], np.int64)
    rows = 1
    for g in sig.grid:
        rows *= math.prod(binding.lead) if g == ELLIPSIS else \
            int(parse_dim(g).evaluate(binding.symbols))
    workspace = []
    if sig.split:     # the tiles (as tilec_split_tiles), then the row that combines them
        most, extent, width = sig.split
        n = int(parse_dim(extent).evaluate(binding.symbols))
        tile_rows = max(-(-n // most), SPLIT_MIN_ROWS)
        rows = max(-(-n // tile_rows), 1)
        workspace = [np.zeros(rows * int(parse_dim(width).evaluate(binding.symbols)) or 1,
                              np.float32)]
    descriptors = [_descriptor(b) for b in buffers + outputs + workspace + [dims_buffer]]
    entry = getattr(built.library, sig.c_symbol)
    bounds = np.linspace(0, rows, pieces + 1).astype(np.int64)
    if sig.split:
        bounds = np.append(bounds, rows + 1)
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        entry(*[ctypes.byref(d) for d in descriptors], ctypes.c_int64(lo), ctypes.c_int64(hi))


def check(built: Built, name: str, *args: Any, pieces: int = 1) -> list[np.ndarray]:
    """The kernel's results, asserted close to the reference on the tensor-level function."""
    want = run(built.reference, name, *args)
    want = list(want) if isinstance(want, tuple) else [want]
    got = [np.zeros(w.shape, NUMPY_DTYPES[w.dtype.name]) for w in want]
    call(built, name, list(args), got, pieces)
    for g, w in zip(got, want):
        assert_close(g, w, w.dtype)
    return got
