"""Semantic analysis: AST -> typed, inlined value graphs, one per function.

Name resolution (functions and values live in separate namespaces), inlining of calls between
the file's functions, dtype rules, masks, and symbolic shape inference (affine dimensions,
``...``, NumPy broadcasting, slice bounds, reductions, matmul, reshape/concat/transpose).
The output, :class:`TypedFunction`, is a list of :class:`Value` nodes in program order that
irgen turns into tile IR one op per node.  Every mistake is a located :class:`TilecError`.

One module per concern: :mod:`.values` (the value graph), :mod:`.program` (the program and
its functions: pragmas, parameters, bodies), :mod:`.expressions` (operators, literals,
broadcasting, slices), :mod:`.calls` (calls of the file's functions, inlined) and
:mod:`.builtins` (the built-in functions).  :class:`FunctionAnalyzer` joins the last three's
rules.
"""
from __future__ import annotations

from .builtins import BUILTINS
from .program import FunctionAnalyzer, Program, analyze
from .values import (Check, Hint, Operand, Options, ParamInfo, TypedFunction, Value, Weak,
                     dim_of)

__all__ = ["BUILTINS", "Check", "FunctionAnalyzer", "Hint", "Operand", "Options", "ParamInfo",
           "Program", "TypedFunction", "Value", "Weak", "analyze", "dim_of"]
