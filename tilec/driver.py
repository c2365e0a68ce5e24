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
    from .codegen.common.backend import Backend, PartialBuild, Stage
    from .frontend.sema import Options as SemaOptions

ENVIRONMENT = ("CC", "CXX", "ASCEND_HOME_PATH", "PATH")
"""What a backend may read of the environment (passed to it in its :class:`Job`)."""


@dataclass
class CompileOptions:
    emit: str = "so"
    target: str = "cpu"
    defines: dict[str, int | str] = field(default_factory=dict)   # a str: -D T=float16
    templates: dict[str, list[int]] = field(default_factory=dict)
    no_generic: bool = False
    opt_level: int = 2
    pass_pipeline: str | None = None      # replaces the default pipeline of opt_level
    print_ir_after_all: bool = False
    print_ir_after: tuple[str, ...] = ()
    time_passes: bool = False
    verify_each: bool = False             # verify the IR before the pipeline and after each pass
    debug_info: bool = False
    arch: str = ""                        # "" = the target's backend's default
    test_break: str = ""                  # a function whose library output is perturbed (tests)
    gemm_tile: str = ""                   # MxNxK: every matmul kernel's tile (tile-kernel's gemm)

    def sema(self) -> SemaOptions:
        from .frontend.sema import Options
        return Options({k: v for k, v in self.defines.items() if not isinstance(v, str)},
                       {k: list(v) for k, v in self.templates.items()},
                       {k: v for k, v in self.defines.items() if isinstance(v, str)})


def read_source(path: str) -> str:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise TilecError(f"cannot read '{path}': {e.strerror or e}") from None
    return data.decode("utf-8-sig", errors="replace")   # a leading BOM is not program text


def print_module(module, debug_info: bool) -> str:
    return module.operation.get_asm(enable_debug_info=debug_info)


def compile_text(text: str, file: str, options: CompileOptions, sink: DiagnosticSink) -> str:
    """Run the shared stages up to ``options.emit`` (``ast ir opt kernel``) and return that
    stage's text."""
    from .frontend.astprint import format_ast
    from .frontend.parser import parse

    emit = options.emit
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
        return note_stage("kernel", printed, "kernel") or ""


def backend(options: CompileOptions, sink: DiagnosticSink | None = None,
            name: str = "", file: str = "") -> Backend:
    """The backend of ``options.target`` with its checked options, for library ``name`` of
    source ``file``."""
    from .codegen.common.backend import Job
    from .codegen.registry import backend_of

    chosen = backend_of(options.target)
    job = Job(name=name, source=file, test_break=options.test_break,
              tools={k: os.environ.get(k) for k in ENVIRONMENT})
    return chosen(chosen.make_options(options.target, options.arch), sink, job)


def compile_files(text: str, file: str, options: CompileOptions, sink: DiagnosticSink,
                  name: str) -> dict[str, bytes]:
    """Stage ``options.emit`` of ``text``: each file keyed by the suffix it takes beside the
    output ("" for the output itself, ".h" for a library's header), or for a directory by its
    relative path.  A text stage is ``{"": its text}``; ``name`` names a library (a text
    stage quotes the source's stem instead)."""
    from .codegen.common.backend import Output
    from .codegen.registry import stage_of
    from .dialect import make_context

    stage = stage_of(options.target, options.emit)
    chosen = backend(options, sink, Path(file).stem if stage is None or stage.output is
                     Output.TEXT else name, file)
    if stage is None:
        return {"": compile_text(text, file, options, sink).encode()}
    with make_context():
        module = kernel_module(text, file, options, sink)
        value = chosen.run(module, stage.name, note_stage)
    return {"": value.encode()} if stage.output is Output.TEXT else stage.files(value)


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


def write_partial(output: str, partial: PartialBuild) -> TilecError:
    """A build that could not finish here (:class:`~tilec.codegen.common.backend.PartialBuild`,
    such as ``--target ascend`` without CANN): what it carries, written beside ``output``; the
    error that says so."""
    write_directory(str(partial.directory(output)), partial.files, partial.replaceable)
    return TilecError(partial.explain(output))


@functools.lru_cache(maxsize=1)
def _compiler_digest() -> str:
    """A digest of tilec itself: its sources, templates, runtime and grammar."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".c", ".cpp", ".h", ".j2", ".lark") \
                and "__pycache__" not in path.parts:
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


class _Identify:
    """How a backend names the version of a tool (:meth:`Backend.toolchain`)."""

    command = staticmethod(tool_identity)
    distribution = staticmethod(_dist_version)


def toolchain(options: CompileOptions) -> dict[str, str]:
    """Every tool whose version decides the output of a compile with ``options``: tilec (its
    version and a digest of its sources, so an edit to tilec invalidates), the MLIR bindings,
    llvmlite, the backend's options, and what the backend says its stage depends on (the C
    compiler of a library, ptxas and libdevice, bisheng, the host CPU for ``--arch
    native``...)."""
    from . import __version__
    from .codegen.registry import stage_of

    tools = {"tilec": __version__, "tilec-sources": _compiler_digest(),
             "torch-mlir": _dist_version("torch-mlir"), "llvmlite": _dist_version("llvmlite")}
    chosen = backend(options)
    tools["backend"] = chosen.options.hash()
    stage = stage_of(options.target, options.emit)
    if stage is not None:
        tools.update(chosen.toolchain(stage, _Identify()))
    return tools


def _library_stage(options: CompileOptions) -> Stage | None:
    """The stage ``options.emit`` when its output is not text (None for a text stage)."""
    from .codegen.common.backend import Output
    from .codegen.registry import stage_of

    stage = stage_of(options.target, options.emit)
    return None if stage is None or stage.output is Output.TEXT else stage


def cache_key(text: str, file: str, name: str, options: CompileOptions) -> str:
    """The content address of a compile: sha256 over the source text, the file name
    (diagnostics and a library's metadata quote it), a library's name (its header does),
    every option but :data:`REPORT_OPTIONS`, and :func:`toolchain`."""
    library = name if _library_stage(options) is not None else ""
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

    files: dict[str, bytes]    # as compile_files's; a text stage is {"": its text}, a
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
    if not use_cache:
        from .frontend.parser import prepare
        prepare(store_tables=False)            # the cache directory gets nothing
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
            report = sink.remark if warning.get("remark") else sink.warn
            report(warning["message"], warning["span"] and Span.from_json(warning["span"]))
        outputs = meta["outputs"]
        return Build({suffix: entry.files[path] for suffix, path in outputs.items()},
                     {stage: entry.files[path].decode() for stage, path in
                      meta["stages"].items()},
                     entry.path / outputs[""] if "" in outputs else None, key, hit=True)
    files, stages, warnings = _compile(text, file, options, sink, name, record=True)
    stage = _library_stage(options)
    directory = stage is not None and stage.output.value == "directory"
    outputs = {suffix: f"out/{options.emit}/{suffix}" if directory
               else f"out/{name}{suffix or '.' + options.emit}" for suffix in files}
    stage_paths = {stage: f"stages/{stage}.txt" for stage in stages}
    meta = {"file": file, "emit": options.emit, "target": options.target,
            "outputs": outputs, "stages": stage_paths,
            "warnings": [{"message": w.message, "span": w.span and w.span.to_json(),
                          "remark": w.remark} for w in warnings]}
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
        files = compile_files(text, file, options, sink, name)
    finally:
        _stage_log.reset(token)
    return files, log or {}, sink.warnings[before:]


def write_stages(directory: str, name: str, stages: dict[str, str]) -> None:
    """``--dump-dir``: each stage's text as ``DIRECTORY/<name>.<stage>.txt``."""
    for stage, text in stages.items():
        write_atomic(str(Path(directory) / f"{name}.{stage}.txt"), text)


def write_outputs(path: str, files: dict[str, bytes]) -> None:
    """Write each file of :func:`compile_files` atomically beside ``path`` (its suffix
    replacing the extension), ``path`` itself last."""
    for suffix, data in sorted(files.items(), key=lambda item: item[0] == ""):
        write_atomic(str(Path(path).with_suffix(suffix)) if suffix else path, data)


def build_kernels(module, options: CompileOptions, sink: DiagnosticSink) -> None:
    """Kernel level: outline fused groups (or whole functions, at -O0) into kernels for the
    target's description."""
    from .pipeline import parse_pipeline, run_pipeline

    from .codegen.registry import backend_of

    target = backend_of(options.target).description.name
    gemm = f" gemm={options.gemm_tile}" if options.gemm_tile else ""
    run_pipeline(module, parse_pipeline(f"tile-kernel{{all=true target={target}{gemm}}}"),
                 sink)


def optimize(module, options: CompileOptions, sink: DiagnosticSink) -> None:
    """Run the tensor-level pipeline (the default of ``-O``, or ``--pass-pipeline``)."""
    from .passes import default_pipeline
    from .pipeline import parse_pipeline, run_pipeline, with_options

    text = options.pass_pipeline or default_pipeline(options.opt_level)
    steps = parse_pipeline(text)
    if options.no_generic:
        steps = with_options(steps, "tile-shape-template", no_generic=True)
    if not options.pass_pipeline:
        from .codegen.registry import backend_of
        description = backend_of(options.target).description
        steps = with_options(steps, "tile-fuse", weight_views=description.weight_views,
                             weight_view_types=" ".join(sorted(description.weight_view_types)))
        steps = with_options(steps, "tile-attention", enabled=description.attention,
                             types=" ".join(sorted(description.attention_types)),
                             head_max=description.attention_head_max)
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
    the directory; a failure leaves any previous file untouched.  Something there that is not
    a regular file (``/dev/null``, a pipe) is written to, never replaced."""
    target = Path(path)
    if target.exists() and not target.is_file():
        if target.is_dir():
            raise TilecError(f"cannot write '{path}': it is a directory")
        try:
            with open(target, "wb") as f:
                f.write(data.encode() if isinstance(data, str) else data)
        except OSError as e:
            raise TilecError(f"cannot write '{path}': {e.strerror or e}") from None
        return
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
