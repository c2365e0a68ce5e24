"""The compile driver: source file -> the stage the user asked for.

Stages, in order: ``ast`` (parser), ``ir`` (irgen), ``opt`` (the tensor-level pass pipeline),
``kernel`` (kernel-level IR for the target).
Later stages belong to the backends: text (``llvm``, ``ptx``, ``ascendc``...), binaries
(``obj``, ``cubin``, ``so``) and ``project``, a directory (the CMake project of a CANN build).
Only this module and ``cli`` read files and write outputs.
"""
from __future__ import annotations

import errno
import functools
import hashlib
import importlib.metadata
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .cache import Store, cache_dir
from .diagnostics import Diagnostic, DiagnosticSink, Span, TilecError, register_source

if TYPE_CHECKING:
    from .codegen.ascendc import AscendBackend
    from .codegen.ascendc.build import Sources
    from .frontend.sema import Options as SemaOptions

ALL_STAGES = ("ast", "ir", "opt", "kernel", "llvm", "obj", "gpu", "nvvm", "ptx", "cubin",
              "ascendc", "project", "so")
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
        from .frontend.sema import Options
        return Options(dict(self.defines), {k: list(v) for k, v in self.templates.items()})


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
    from .frontend.astprint import format_ast
    from .frontend.parser import parse

    emit = options.emit
    if emit not in ALL_STAGES:
        raise TilecError(f"unknown stage '{emit}'; expected one of " + ", ".join(ALL_STAGES))
    tree = parse(text, file)
    if (out := note_stage("ast", lambda: format_ast(tree), emit)) is not None:
        return out
    from .dialect import make_context
    from .frontend.irgen import build_module
    from .frontend.sema import analyze

    functions = analyze(tree, options.sema(), sink)
    with make_context():
        module = build_module(functions, file)
        printed = functools.partial(print_module, module, options.debug_info)
        if (out := note_stage("ir", printed, emit)) is not None:
            return out
        optimize(module, options, sink)
        if (out := note_stage("opt", printed, emit)) is not None:
            return out
        build_kernels(module, options, sink)
        if (out := note_stage("kernel", printed, emit)) is not None:
            return out
        if emit == "llvm" and options.target == "cpu":
            from .codegen.cpu import emit_llvm_ir
            return note_stage("llvm", lambda: emit_llvm_ir(module, cpu_arch(options)), emit)
        if emit in PTX_TEXT_STAGES and options.target == "ptx":
            return ptx_backend(options).run(module, emit, note_stage)
        if emit == "ascendc" and options.target in ASCEND_TARGETS:
            backend = ascend_backend(options, sink)
            return note_stage("ascendc", lambda: backend.kernel_file(
                backend.kernels(module), name=Path(file).stem, source=file), emit)
    raise TilecError(f"--emit={options.emit} is not implemented yet; this build of tilec stops "
                     "at --emit=kernel")


BINARY_STAGES = ("obj", "cubin", "so")
PROJECT = "project"
"""The stage whose output is a directory: the CMake project that builds an ascend library
with CANN's CMake support (written without CANN)."""
PTX_TEXT_STAGES = ("gpu", "nvvm", "llvm", "ptx")
ASCEND_TARGETS = ("ascend", "ascend-sim")


def ptx_backend(options: CompileOptions):
    """The PTX backend for ``options`` (``--arch``, default sm_90, checked)."""
    from .codegen.ptx import Options, PtxBackend
    return PtxBackend(Options(options.arch or "sm_90"))


def ascend_backend(options: CompileOptions, sink: DiagnosticSink):
    """The Ascend C backend for ``options`` (``--arch``, default dav-2201, checked)."""
    from .codegen.ascendc import AscendBackend, Options
    return AscendBackend(Options(options.target, options.arch or "dav-2201"), sink)


def kernel_module(text: str, file: str, options: CompileOptions, sink: DiagnosticSink):
    """``text`` lowered to kernel-level IR (in the current MLIR context)."""
    from .frontend.astprint import format_ast
    from .frontend.irgen import build_module
    from .frontend.parser import parse
    from .frontend.sema import analyze

    tree = parse(text, file)
    note_stage("ast", lambda: format_ast(tree))
    module = build_module(analyze(tree, options.sema(), sink), file)
    printed = functools.partial(print_module, module, options.debug_info)
    note_stage("ir", printed)
    optimize(module, options, sink)
    note_stage("opt", printed)
    build_kernels(module, options, sink)
    note_stage("kernel", printed)
    return module


def cpu_arch(options: CompileOptions) -> str:
    """The ``--arch`` of a cpu build, checked (default x86-64-v3+v4)."""
    from .codegen.cpu import BUILD_ARCHES, DEFAULT_ARCH
    arch = options.arch or DEFAULT_ARCH
    if arch not in BUILD_ARCHES:
        raise TilecError(f"unknown --arch '{arch}' for --target cpu; expected one of "
                         + ", ".join(BUILD_ARCHES))
    return arch


def compile_binary(text: str, file: str, options: CompileOptions, sink: DiagnosticSink,
                   name: str) -> dict[str, bytes]:
    """Stage ``obj`` (the kernels' object file) or ``so`` (a shared library named ``name``
    and its header): each file keyed by the suffix it takes beside the output ("" for the
    output itself, ".h" for the header).  The C compiler is ``$CC``, else ``cc``."""
    if options.target == "ptx":
        return _ptx_binary(text, file, options, sink, name)
    if options.target in ASCEND_TARGETS:
        return _ascend_binary(text, file, options, sink, name)
    if options.target != "cpu" or options.emit == "cubin":
        raise TilecError(f"--emit={options.emit} is not implemented yet for --target "
                         f"{options.target}")
    arch = cpu_arch(options)
    from .codegen.cpu import code_variants, compile_kernels
    from .codegen.common.host import generate
    from .codegen.common.link import link, relocatable
    from .dialect import make_context

    cc = os.environ.get("CC") or "cc"
    with make_context():
        module = kernel_module(text, file, options, sink)
        host = generate(module, name=name, source=file, arch=arch,
                        test_break=options.test_break, cpu_code=code_variants(arch))
        kernels = compile_kernels(module, arch)
    note_stage("llvm", lambda: kernels.llvm_ir)
    if options.emit == "obj":
        return {"": relocatable(kernels.objects, cc)}
    library = link(host, kernels.objects, cc, f"{name}.so")
    return {".h": host.header.encode(), "": library}


def _ptx_binary(text: str, file: str, options: CompileOptions, sink: DiagnosticSink,
                name: str) -> dict[str, bytes]:
    """``cubin``, or ``so``: the host C embedding the cubin and PTX, linked with the CUDA
    launcher.  The ptxas report is the stage ``ptxas`` (what ``--verbose`` prints)."""
    if options.emit == "obj":
        raise TilecError("--emit=obj is for --target cpu; --target ptx emits cubin or so")
    from .codegen.common.host import DeviceCode, generate
    from .codegen.common.link import link
    from .codegen.common.schedule import Kernel
    from .dialect import make_context

    backend = ptx_backend(options)
    with make_context():
        module = kernel_module(text, file, options, sink)
        compiled = backend.run(module, "cubin", note_stage)
        if options.emit == "cubin":
            return {"": compiled.cubin}
        kernels = {k.name: Kernel(i, k.name, len(k.inputs) + len(k.outputs), k.shared,
                                  k.row_elements) for i, k in enumerate(compiled.kernels)}
        host = generate(module, name=name, source=file, arch=backend.options.arch,
                        device=DeviceCode(compiled.cubin, compiled.ptx, kernels))
    library = link(host, None, os.environ.get("CC") or "cc", f"{name}.so")
    return {".h": host.header.encode(), "": library}


def _ascend_binary(text: str, file: str, options: CompileOptions, sink: DiagnosticSink,
                   name: str) -> dict[str, bytes]:
    """``so``: the Ascend C kernels, their launchers and the host C, built against the CPU
    twin with ``$CC`` and ``$CXX`` (else ``cc``, ``c++``) for ascend-sim, or with CANN's
    bisheng (looked for under ``$ASCEND_HOME_PATH``, then on ``PATH``) for ascend.  The
    kernel file is the stage ``ascendc``."""
    if options.emit != "so":
        stages = "ascendc, project or so" if options.target == "ascend" else "ascendc or so"
        raise TilecError(f"--emit={options.emit} is not a stage of --target {options.target}; "
                         f"it emits {stages}")
    from .codegen.ascendc import find_bisheng

    backend, sources = _ascend_sources(text, file, options, sink, name)
    bisheng, looked = find_bisheng(os.environ.get("ASCEND_HOME_PATH"), os.environ.get("PATH"))
    library = backend.library(sources, cc=os.environ.get("CC") or "cc",
                              cxx=os.environ.get("CXX") or "c++", bisheng=bisheng, looked=looked)
    return {".h": sources.host.header.encode(), "": library}


def compile_project(text: str, file: str, options: CompileOptions, sink: DiagnosticSink,
                    name: str) -> dict[str, bytes]:
    """Stage ``project`` of --target ascend: the CMake project that builds library ``name``
    with CANN (relative path -> bytes; ``NAME.h`` is the library's header).  It needs no
    CANN: nothing is compiled."""
    if options.target != "ascend":
        raise TilecError(f"--emit=project writes the CMake project of a CANN build: it is for "
                         f"--target ascend, not --target {options.target}")
    backend, sources = _ascend_sources(text, file, options, sink, name)
    return backend.project(sources)


def _ascend_sources(text: str, file: str, options: CompileOptions, sink: DiagnosticSink,
                    name: str) -> tuple[AscendBackend, Sources]:
    """The Ascend C backend of ``options`` and the sources of library ``name`` (their kernel
    file is the stage ``ascendc``)."""
    from .dialect import make_context

    backend = ascend_backend(options, sink)
    with make_context():
        module = kernel_module(text, file, options, sink)
        sources = backend.sources(module, name=name, source=file, test_break=options.test_break)
    note_stage("ascendc", lambda: sources.kernels)
    return backend, sources


def write_project(output: str, missing) -> TilecError:
    """``--target ascend`` without CANN: the project that ``missing`` (a
    :class:`~tilec.codegen.ascendc.MissingToolchain`) carries, written beside ``output``; the
    error that says so."""
    from .codegen.ascendc import is_project

    write_directory(str(missing.project_directory(output)), missing.files, is_project)
    return TilecError(missing.explain(output))


@functools.lru_cache(maxsize=1)
def _compiler_digest() -> str:
    """A digest of tilec itself: its sources, templates, runtime and grammar."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".c", ".h", ".j2", ".lark") and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


REPORT_OPTIONS = ("print_ir_after_all", "print_ir_after", "time_passes", "verify_each")
"""Options that report on a compile while it runs: they never change its output, and a compile
asked for one of them runs rather than being served from the cache."""


@functools.lru_cache(maxsize=None)
def tool_identity(command: str) -> str:
    """``command`` and the first line of its ``--version`` (asked once per process)."""
    try:
        done = subprocess.run([*shlex.split(command), "--version"], capture_output=True,
                              text=True, timeout=60)
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        return f"{command}: unavailable ({type(e).__name__})"
    return f"{command}: " + (done.stdout or done.stderr).partition("\n")[0].strip()


def _dist_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def toolchain(options: CompileOptions) -> dict[str, str]:
    """Every tool whose version decides the output of a compile with ``options``: tilec (its
    version and a digest of its sources, so an edit to tilec invalidates), the MLIR bindings,
    llvmlite, the C (and for ascend-sim C++) compiler of a binary stage, ptxas and libdevice
    (their wheels) for ptx, bisheng for an ascend library, and the host CPU for
    ``--arch native``."""
    from . import __version__

    tools = {"tilec": __version__, "tilec-sources": _compiler_digest(),
             "torch-mlir": _dist_version("torch-mlir"), "llvmlite": _dist_version("llvmlite")}
    if options.emit in BINARY_STAGES:
        tools["cc"] = tool_identity(os.environ.get("CC") or "cc")
        if options.target == "ascend-sim":
            tools["c++"] = tool_identity(os.environ.get("CXX") or "c++")
    if options.target == "ptx":
        tools["ptxas"] = _dist_version("nvidia-cuda-nvcc")
        tools["libdevice"] = _dist_version("nvidia-nvvm")
    if options.target == "ascend" and options.emit in BINARY_STAGES:
        tools["bisheng"] = tool_identity("bisheng")
    if options.arch == "native":
        import llvmlite.binding as llvm
        tools["host"] = llvm.get_host_cpu_name() + llvm.get_host_cpu_features().flatten()
    return tools


def cache_key(text: str, file: str, name: str, options: CompileOptions) -> str:
    """The content address of a compile: sha256 over the source text, the file name
    (diagnostics and a library's metadata quote it), a library's name (its header does),
    every option but :data:`REPORT_OPTIONS`, and :func:`toolchain`."""
    library = name if options.emit in (*BINARY_STAGES, PROJECT) else ""
    key = {"source": hashlib.sha256(text.encode()).hexdigest(), "file": file, "name": library,
           "options": {k: v for k, v in asdict(options).items() if k not in REPORT_OPTIONS},
           "toolchain": toolchain(options)}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


_stage_log: ContextVar[dict[str, str] | None] = ContextVar("tilec_stage_log", default=None)


def note_stage(stage: str, produce: Callable[[], str], emit: str = "") -> str | None:
    """A compile reached ``stage``: its text, ``produce()``, is recorded while :func:`build`
    records stages (for ``--dump-dir`` and the cache), and returned when ``stage`` is the
    stage to ``emit`` (else None).  Every text stage of every target reports here."""
    log = _stage_log.get()
    if log is None and stage != emit:
        return None
    text = produce()
    if log is not None:
        log[stage] = text
    return text if stage == emit else None


@dataclass(frozen=True)
class Build:
    """What :func:`build` produced."""

    files: dict[str, bytes]    # as compile_binary's; a text stage is {"": its text}, a
                               # project {relative path: contents}
    stages: dict[str, str]     # the text of each stage the compile went through, when recorded
    output: Path | None        # the "" file inside the cache entry, when there is one
    key: str | None            # the cache key, unless the cache was bypassed
    hit: bool


def build(text: str, file: str, options: CompileOptions, sink: DiagnosticSink, name: str, *,
          use_cache: bool = True, record_stages: bool = False) -> Build:
    """The one compile entry: stage ``options.emit`` of ``text`` (``name`` names a library and
    its header), served from the compile cache when the same compile was stored (its warnings
    are reported again), else compiled and stored with every stage's text.
    ``use_cache=False`` and the :data:`REPORT_OPTIONS` bypass the cache; stages are then
    recorded only when ``record_stages``."""
    if not use_cache or any(getattr(options, f) for f in REPORT_OPTIONS):
        files, stages, _ = _compile(text, file, options, sink, name, record_stages)
        return Build(files, stages, None, None, hit=False)
    key = cache_key(text, file, name, options)
    store = Store(cache_dir())
    entry = store.lookup(key)
    if entry is not None:
        meta = entry.meta
        register_source(file, text)
        for warning in meta["warnings"]:
            sink.warn(warning["message"], warning["span"] and Span.from_json(warning["span"]))
        outputs = meta["outputs"]
        return Build({suffix: entry.files[path] for suffix, path in outputs.items()},
                     {stage: entry.files[path].decode() for stage, path in
                      meta["stages"].items()},
                     entry.path / outputs[""] if "" in outputs else None, key, hit=True)
    files, stages, warnings = _compile(text, file, options, sink, name, record=True)
    outputs = {suffix: f"out/{PROJECT}/{suffix}" if options.emit == PROJECT
               else f"out/{name}{suffix or '.' + options.emit}" for suffix in files}
    stage_paths = {stage: f"stages/{stage}.txt" for stage in stages}
    meta = {"file": file, "emit": options.emit, "target": options.target,
            "outputs": outputs, "stages": stage_paths,
            "warnings": [{"message": w.message, "span": w.span and w.span.to_json()}
                         for w in warnings]}
    stored = {**{outputs[s]: data for s, data in files.items()},
              **{stage_paths[s]: text.encode() for s, text in stages.items()}}
    entry_path = store.publish(key, stored, meta)
    output = entry_path / outputs[""] if entry_path and "" in outputs else None
    return Build(files, stages, output, key, hit=False)


def _compile(text: str, file: str, options: CompileOptions, sink: DiagnosticSink, name: str,
             record: bool) -> tuple[dict[str, bytes], dict[str, str], list[Diagnostic]]:
    """Compile without the cache: the output files, the recorded stage texts and the
    warnings reported meanwhile."""
    before = len(sink.warnings)
    log: dict[str, str] | None = {} if record else None
    token = _stage_log.set(log)
    try:
        if options.emit in BINARY_STAGES:
            files = compile_binary(text, file, options, sink, name)
        elif options.emit == PROJECT:
            files = compile_project(text, file, options, sink, name)
        else:
            files = {"": compile_text(text, file, options, sink).encode()}
    finally:
        _stage_log.reset(token)
    return files, log or {}, sink.warnings[before:]


def write_stages(directory: str, name: str, stages: dict[str, str]) -> None:
    """``--dump-dir``: each stage's text as ``DIRECTORY/<name>.<stage>.txt``."""
    for stage, text in stages.items():
        write_atomic(str(Path(directory) / f"{name}.{stage}.txt"), text)


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


def write_directory(path: str, files: dict[str, bytes],
                    replaceable: Callable[[Path], bool]) -> None:
    """Publish ``files`` (relative path -> bytes) as the directory ``path``, whole: they are
    written into a temporary directory beside it, which is then renamed to ``path``.  An
    existing ``path`` is replaced only when it is an empty directory or ``replaceable`` says
    so (a directory tilec wrote); anything else there is an error, and so is a failure, which
    leaves the previous directory as it was."""
    target = Path(path)
    try:
        if target.is_symlink() or target.exists():
            if target.is_symlink() or not target.is_dir():
                raise TilecError(f"cannot write the directory '{path}': a file is in the way")
            if any(target.iterdir()) and not replaceable(target):
                raise TilecError(f"cannot write '{path}': the directory exists and tilec did "
                                 "not write it; remove it or choose another -o")
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    except OSError as e:
        raise TilecError(f"cannot write '{path}': {e.strerror or e}") from None
    try:
        staged.chmod(0o777 & ~_umask())   # mkdtemp's 0o700 hides it from others
        for relative, data in files.items():
            (staged / relative).parent.mkdir(parents=True, exist_ok=True)
            (staged / relative).write_bytes(data)
        _rename_over(staged, target)
    except OSError as e:
        shutil.rmtree(staged, ignore_errors=True)
        raise TilecError(f"cannot write '{path}': {e.strerror or e}") from None


def _rename_over(staged: Path, target: Path) -> None:
    """Rename the directory ``staged`` to ``target``, replacing a previous ``target``: that
    one is first renamed aside (and put back when the second rename fails), then removed."""
    try:
        os.rename(staged, target)          # no target, or an empty one
        return
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    previous = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
    try:
        os.rename(target, previous)        # onto the empty directory mkdtemp made
    except OSError:
        previous.rmdir()
        raise
    try:
        os.rename(staged, target)
    except OSError:
        os.rename(previous, target)
        raise
    shutil.rmtree(previous, ignore_errors=True)
