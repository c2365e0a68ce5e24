"""PTX kernels built without a GPU, for the tests of the tensor-core lowerings
(test_ptx_gemm.py, test_ptx_attention.py)."""
from __future__ import annotations

import functools
import re

import tilec.passes  # noqa: F401  (registers the passes)
from tilec.codegen.ptx import Options, PtxBackend, PtxKernels
from tilec.diagnostics import DiagnosticSink
from tilec.dialect import KERNEL_ATTR, make_context
from tilec.driver import CompileOptions, kernel_module
from tilec.mlir import ir
from tilec.tiling.tiler import TileParams


@functools.cache
def compiled(source: str, arch: str, schedule: str) -> tuple[PtxKernels, dict[str, str]]:
    """The kernels, and the function each kernel of ``schedule`` comes from."""
    with make_context():
        module = kernel_module(source, f"{schedule}.tile", CompileOptions(target="ptx"),
                               DiagnosticSink())
        found = {}
        for op in module.body.operations:
            if KERNEL_ATTR in op.attributes and \
                    TileParams.of(op.attributes[KERNEL_ATTR]).schedule == schedule:
                name = ir.StringAttr(op.attributes["sym_name"]).value
                found[name] = name.rsplit("__", 1)[0]
        return PtxBackend(Options(arch)).run(module, "cubin"), found


def entries(ptx: str) -> dict[str, str]:
    """Each kernel's PTX body by name."""
    parts = re.split(r"\.visible \.entry (\w+)\(", ptx)
    return dict(zip(parts[1::2], parts[2::2]))
