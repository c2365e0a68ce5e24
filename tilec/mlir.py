"""The one module that imports the MLIR Python bindings.

tilec uses the upstream bindings as shipped in the pinned ``torch-mlir`` wheel; swapping the
carrier (a standalone ``mlir`` wheel, a source build) means editing this file only.
"""
from torch_mlir import ir, passmanager, rewrite  # noqa: F401
from torch_mlir.dialects import arith, builtin, ext, func, gpu, llvm, math, memref, scf  # noqa: F401
from torch_mlir.dialects.llvm import translate_module_to_llvmir  # noqa: F401
from torch_mlir.dialects.ext import Dialect, Operand, Result, result  # noqa: F401

__all__ = ["ir", "passmanager", "rewrite", "arith", "builtin", "ext", "func", "gpu", "llvm",
           "math", "memref", "scf", "translate_module_to_llvmir", "Dialect", "Operand", "Result", "result"]
