"""Front end: ``.tile`` text -> AST (parser) -> typed value graphs (sema) -> tile IR (irgen)."""
from __future__ import annotations

from ..diagnostics import DiagnosticSink
from ..dialect import make_context
from ..mlir import ir
from .sema import Options, analyze


def compile_source(text: str, file: str = "<input>", options: Options | None = None,
                   sink: DiagnosticSink | None = None) -> ir.Module:
    """Parse, analyze and lower ``.tile`` source to tile IR (in a fresh MLIR context).

    Raises :class:`tilec.diagnostics.TilecError` for any mistake in the program."""
    from .irgen import build_module
    from .parser import parse

    functions = analyze(parse(text, file), options, sink)
    with make_context():
        return build_module(functions, file)


__all__ = ["Options", "compile_source"]
