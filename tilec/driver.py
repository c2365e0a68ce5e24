"""The compile driver: source file -> the stage the user asked for.

Stages, in order: ``ast`` (parser), ``ir`` (irgen), ``opt`` (the tensor-level pass pipeline),
``kernel`` (kernel-level IR for the target).
Later stages belong to the backends.  Only this module and ``cli`` read files and write outputs.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .diagnostics import DiagnosticSink, TilecError
from .frontend.sema import Options as SemaOptions

ALL_STAGES = ("ast", "ir", "opt", "kernel", "llvm", "obj", "gpu", "nvvm", "ptx", "cubin",
              "ascendc", "so")
TARGETS = ("cpu", "ptx", "ascend", "ascend-sim")


@dataclass
class CompileOptions:
    emit: str = "so"
    target: str = "cpu"
    defines: dict[str, int] = field(default_factory=dict)
    templates: dict[str, list[int]] = field(default_factory=dict)
    no_generic: bool = False
    opt_level: int = 2
    pass_pipeline: str | None = None      # replaces the default pipeline of opt_level
    print_ir_after_all: bool = False
    print_ir_after: tuple[str, ...] = ()
    time_passes: bool = False
    verify_each: bool = False             # verify the IR before the pipeline and after each pass
    debug_info: bool = False
    arch: str = ""                        # "" = the target's default (cpu: x86-64-v3)
    test_break: str = ""                  # a function whose library output is perturbed (tests)

    def sema(self) -> SemaOptions:
        return SemaOptions(dict(self.defines), {k: list(v) for k, v in self.templates.items()})


def read_source(path: str) -> str:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise TilecError(f"cannot read '{path}': {e.strerror or e}") from None
    return data.decode("utf-8-sig", errors="replace")   # a leading BOM is not program text


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
        optimize(module, options, sink)
        if options.emit == "opt":
            return print_module(module, options.debug_info)
        build_kernels(module, options, sink)
        if options.emit == "kernel":
            return print_module(module, options.debug_info)
        if options.emit == "llvm" and options.target == "cpu":
            from .codegen.cpu import emit_llvm_ir
            return emit_llvm_ir(module, cpu_arch(options))
    raise TilecError(f"--emit={options.emit} is not implemented yet; this build of tilec stops "
                     "at --emit=kernel")


BINARY_STAGES = ("obj", "so")
CPU_ARCHES = ("x86-64-v3", "native")


def kernel_module(text: str, file: str, options: CompileOptions, sink: DiagnosticSink):
    """``text`` lowered to kernel-level IR (in the current MLIR context)."""
    from .frontend.irgen import build_module
    from .frontend.parser import parse
    from .frontend.sema import analyze

    module = build_module(analyze(parse(text, file), options.sema(), sink), file)
    optimize(module, options, sink)
    build_kernels(module, options, sink)
    return module


def cpu_arch(options: CompileOptions) -> str:
    """The ``--arch`` of a cpu build, checked (default x86-64-v3)."""
    arch = options.arch or CPU_ARCHES[0]
    if arch not in CPU_ARCHES:
        raise TilecError(f"unknown --arch '{arch}' for --target cpu; expected one of "
                         + ", ".join(CPU_ARCHES))
    return arch


def compile_binary(text: str, file: str, options: CompileOptions, sink: DiagnosticSink,
                   name: str) -> dict[str, bytes]:
    """Stage ``obj`` (the kernels' object file) or ``so`` (a shared library named ``name``
    and its header): each file keyed by the suffix it takes beside the output ("" for the
    output itself, ".h" for the header).  The C compiler is ``$CC``, else ``cc``."""
    if options.target != "cpu":
        raise TilecError(f"--emit={options.emit} is not implemented yet for --target "
                         f"{options.target}")
    arch = cpu_arch(options)
    from .codegen.cpu import compile_kernels
    from .codegen.cpu.host import generate
    from .codegen.cpu.link import link
    from .dialect import make_context

    with make_context():
        module = kernel_module(text, file, options, sink)
        host = generate(module, name=name, source=file, arch=arch,
                        test_break=options.test_break)
        kernels = compile_kernels(module, arch)
    if options.emit == "obj":
        return {"": kernels.object}
    library = link(host, kernels.object, os.environ.get("CC") or "cc")
    return {".h": host.header.encode(), "": library}


def cache_dir() -> Path:
    """Where :mod:`tilec.api` caches libraries: ``$TILEC_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/tilec``, else ``~/.cache/tilec``."""
    if os.environ.get("TILEC_CACHE_DIR"):
        return Path(os.environ["TILEC_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tilec"


@functools.lru_cache(maxsize=1)
def _compiler_digest() -> str:
    """A digest of tilec itself: its sources, templates, runtime and grammar."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".c", ".h", ".j2", ".lark") and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def build_digest(text: str, file: str, options: dict) -> str:
    """The cache key of a library: source, file name, options, tilec, the C compiler and,
    for ``--arch native``, the host CPU."""
    host = ""
    if options.get("arch") == "native":
        import llvmlite.binding as llvm
        host = llvm.get_host_cpu_name() + llvm.get_host_cpu_features().flatten()
    key = {"text": text, "file": file, "options": options, "tilec": _compiler_digest(),
           "cc": os.environ.get("CC") or "cc", "host": host}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def write_outputs(path: str, files: dict[str, bytes]) -> None:
    """Write each file of :func:`compile_binary` atomically beside ``path`` (its suffix
    replacing the extension), ``path`` itself last."""
    for suffix, data in sorted(files.items(), key=lambda item: item[0] == ""):
        write_atomic(str(Path(path).with_suffix(suffix)) if suffix else path, data)


def build_kernels(module, options: CompileOptions, sink: DiagnosticSink) -> None:
    """Kernel level: outline fused groups (or whole functions, at -O0) into kernels for the
    target's description."""
    from .pipeline import parse_pipeline, run_pipeline

    target = "ascend" if options.target == "ascend-sim" else options.target
    run_pipeline(module, parse_pipeline(f"tile-kernel{{all=true target={target}}}"), sink)


def optimize(module, options: CompileOptions, sink: DiagnosticSink) -> None:
    """Run the tensor-level pipeline (the default of ``-O``, or ``--pass-pipeline``)."""
    from .passes import default_pipeline
    from .pipeline import parse_pipeline, run_pipeline

    text = options.pass_pipeline or default_pipeline(options.opt_level)
    steps = parse_pipeline(text)
    if options.no_generic:
        steps = [(k, (p[0], {**p[1], "no-generic": "true"}))
                 if k == "tilec" and p[0].name == "tile-shape-template" else (k, p)
                 for k, p in steps]
    if options.verify_each:
        verify_after("irgen", module)
    timings: list[tuple[str, float]] = []
    last = [time.perf_counter()]

    def after_each(name: str, mod) -> None:
        now = time.perf_counter()
        timings.append((name, now - last[0]))
        if options.print_ir_after_all or name in options.print_ir_after:
            print(f"// -----// IR Dump After {name} //----- //", file=sys.stderr)
            print(print_module(mod, options.debug_info), file=sys.stderr)
        if options.verify_each:
            verify_after(name, mod)
        last[0] = time.perf_counter()

    run_pipeline(module, steps, sink, after_each)
    if options.time_passes:
        total = sum(t for _, t in timings) or 1e-9
        print("===-------------------------------------------------------------------------===",
              file=sys.stderr)
        print("  Pass execution timing report", file=sys.stderr)
        print(f"  Total: {total * 1e3:.3f} ms", file=sys.stderr)
        for name, t in timings:
            print(f"  {t * 1e3:9.3f} ms ({100 * t / total:5.1f}%)  {name}", file=sys.stderr)


def verify_after(stage: str, module) -> None:
    """``--verify-each``: the tile IR that ``stage`` produced must verify; the error says which
    stage broke it."""
    from .dialect.verify import verify_module

    try:
        verify_module(module)
    except TilecError as e:
        raise TilecError(f"IR after {stage} does not verify: {e.message}", e.span) from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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
            os.fchmod(f.fileno(), 0o666 & ~_umask())   # mkstemp's 0o600 hides it from others
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, target)
    except OSError as e:
        os.unlink(tmp)
        raise TilecError(f"cannot write '{path}': {e.strerror or e}") from None
