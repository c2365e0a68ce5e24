"""The compile driver: source file -> the stage the user asked for.

Stages, in order: ``ast`` (parser), ``ir`` (irgen).  Later stages belong to the passes and
backends.  Only this module and ``cli`` read files and write outputs.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .diagnostics import DiagnosticSink, TilecError
from .frontend.sema import Options as SemaOptions

FRONTEND_STAGES = ("ast", "ir")
ALL_STAGES = ("ast", "ir", "opt", "kernel", "llvm", "obj", "gpu", "nvvm", "ptx", "cubin",
              "ascendc", "so")
TARGETS = ("cpu", "ptx", "ascend", "ascend-sim")


@dataclass
class CompileOptions:
    emit: str = "so"
    target: str = "cpu"
    defines: dict[str, int] = field(default_factory=dict)
    templates: dict[str, list[int]] = field(default_factory=dict)
    debug_info: bool = False

    def sema(self) -> SemaOptions:
        return SemaOptions(dict(self.defines), {k: list(v) for k, v in self.templates.items()})


def read_source(path: str) -> str:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise TilecError(f"cannot read '{path}': {e.strerror or e}") from None
    return data.decode("utf-8", errors="replace")


def print_module(module, debug_info: bool) -> str:
    return module.operation.get_asm(enable_debug_info=debug_info)


def compile_text(text: str, file: str, options: CompileOptions, sink: DiagnosticSink) -> str:
    """Run the pipeline up to ``options.emit`` and return that stage's text."""
    from .frontend.parser import parse

    if options.emit not in ALL_STAGES:
        raise TilecError(f"unknown stage '{options.emit}'; expected one of "
                         + ", ".join(ALL_STAGES))
    tree = parse(text, file)
    if options.emit == "ast":
        from .frontend.astprint import format_ast
        return format_ast(tree)
    from .dialect import make_context
    from .frontend.irgen import build_module
    from .frontend.sema import analyze

    functions = analyze(tree, options.sema(), sink)
    with make_context():
        module = build_module(functions, file)
        if options.emit == "ir":
            return print_module(module, options.debug_info)
    raise TilecError(f"--emit={options.emit} is not implemented yet; this build of tilec stops "
                     "at --emit=ir")


def write_atomic(path: str, data: str | bytes) -> None:
    """Write ``path`` via a temporary file in the same directory and ``os.replace``, creating
    the directory; a failure leaves any previous file untouched."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as e:
        raise TilecError(f"cannot write '{path}': {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, target)
    except OSError as e:
        os.unlink(tmp)
        raise TilecError(f"cannot write '{path}': {e.strerror or e}") from None
