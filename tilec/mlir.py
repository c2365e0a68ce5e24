"""The one module that imports the MLIR Python bindings.

tilec uses the upstream bindings as shipped in the pinned ``torch-mlir`` wheel; swapping the
carrier (a standalone ``mlir`` wheel, a source build) means editing this file only.

Besides the bindings' modules, it makes the contexts cheap that every compile creates:
:func:`new_context` loads only the dialects tilec builds ops of, and :func:`load_dialect`
loads an ext-defined dialect from IRDL text made once per process.
"""
from __future__ import annotations

import sys

from torch_mlir import ir, passmanager, rewrite  # noqa: F401
from torch_mlir.dialects import (arith, builtin, ext, func, gpu, llvm, math,  # noqa: F401
                                 memref, nvvm, scf)
from torch_mlir.dialects import irdl
from torch_mlir.dialects._ods_common import _cext
from torch_mlir.dialects.llvm import translate_module_to_llvmir  # noqa: F401
from torch_mlir.dialects.ext import Dialect, Operand, Result, result  # noqa: F401

__all__ = ["ir", "passmanager", "rewrite", "arith", "builtin", "ext", "func", "gpu", "llvm",
           "math", "memref", "nvvm", "scf", "translate_module_to_llvmir", "Dialect", "Operand",
           "Result", "result", "BUILDER_DIALECTS", "new_context", "load_dialect"]

BUILDER_DIALECTS: tuple[str, ...] = tuple(
    module.__name__.rpartition(".")[2]
    for module in (arith, builtin, func, gpu, llvm, math, memref, scf))
"""The upstream dialects whose Python op builders tilec calls (the modules exported here): a
builder needs its dialect loaded.  Any other dialect loads when IR text or a pass names it, as
in ``mlir-opt``."""


def new_context() -> ir.Context:
    """A new context with :data:`BUILDER_DIALECTS` loaded.  The bindings' default loads every
    registered dialect (about 4 ms per context, and as much again to destroy it)."""
    return ir.Context(load_on_create_dialects=list(BUILDER_DIALECTS))


_IRDL_TEXT: dict[type[Dialect], str] = {}


def load_dialect(dialect: type[Dialect]) -> None:
    """Load ``dialect``, an ext-defined dialect of operations only, into the current context.

    ``Dialect.load`` builds the dialect's IRDL module op by op in Python and canonicalizes it,
    in every context.  Here that happens once per process, in a context of its own (which also
    registers the dialect's op classes, a table of the process); every context then parses the
    printed IRDL and attaches the ops' traits.  The first time, the dialect's Python module
    also becomes the one the bindings import for it before they make a view of one of its ops:
    they would otherwise try, and fail, to import ``torch_mlir.dialects.NAME`` for every op.
    ValueError for a dialect that defines types or attributes (their type casters are
    registered per context)."""
    if dialect.types or dialect.attributes:
        raise ValueError(f"dialect '{dialect.name}' defines types or attributes: use its load()")
    text = _IRDL_TEXT.get(dialect)
    if text is None:
        with ir.Context(load_on_create_dialects=["irdl"]):
            dialect.load()
            text = _IRDL_TEXT[dialect] = str(dialect._mlir_module)
        search_prefix = _cext.globals.dialect_search_modules[0]
        sys.modules.setdefault(f"{search_prefix}.{dialect.name}", sys.modules[dialect.__module__])
    irdl.load_dialects(ir.Module.parse(text))
    for op in dialect.operations:
        op._attach_traits()
