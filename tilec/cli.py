"""Command lines: ``tilec`` (compile) and ``tilec-opt`` (run passes on tile IR text).

Every user mistake ends as a diagnostic on stderr and exit status 1; an internal failure says
so (exit 2) instead of showing a traceback.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable, Sequence

from .diagnostics import DiagnosticSink, TilecError, default_sink, register_source
from .cache import Store
from .codegen import registry
from .codegen.common.backend import Output, PartialBuild
from .driver import (CompileOptions, build, cache_dir, read_source, write_atomic,
                     write_directory, write_outputs, write_partial, write_stages)

CMAKE_DIR = Path(__file__).resolve().parent / "cmake"


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as tilec diagnostics (exit 1)."""

    def error(self, message: str):  # type: ignore[override]
        raise TilecError(f"{message} (see '{self.prog} --help')")


def _define(text: str) -> tuple[str, int | str]:
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=(\d+|[A-Za-z_][A-Za-z0-9_]*)", text)
    if not m:
        raise TilecError(f"-D expects NAME=VALUE with a non-negative integer VALUE (a shape "
                         f"symbol) or a dtype (a dtype template), got '{text}'")
    value = m.group(2)
    return m.group(1), int(value) if value.isdigit() else value


def _template(text: str) -> tuple[str, list[int]]:
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=(\d+(?:,\d+)*)", text)
    if not m:
        raise TilecError(f"--template expects NAME=v1,v2,... with positive integers, got '{text}'")
    values = [int(v) for v in m.group(2).split(",")]
    if len(set(values)) != len(values) or 0 in values:
        raise TilecError(f"--template values must be distinct positive integers: '{text}'")
    return m.group(1), values


def _add_build_options(p: argparse.ArgumentParser) -> None:
    """The options that change what is built (shared by compiling and ``tilec verify``)."""
    p.add_argument("--target", default="cpu", choices=registry.targets())
    p.add_argument("--arch", default="", help=registry.arch_help())
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="SYM=V",
                   help="fix shape symbol SYM to V, or dtype template SYM to dtype V")
    p.add_argument("--template", dest="templates", action="append", default=[],
                   metavar="SYM=v1,v2", help="specialise for these values of SYM")
    p.add_argument("--no-generic", action="store_true",
                   help="with templates: drop the generic kernel")
    p.add_argument("-O", dest="opt_level", type=int, default=2, choices=range(4),
                   metavar="N", help="optimisation level 0-3 (default 2)")


def _build_options(args: argparse.Namespace) -> dict:
    """CompileOptions fields from :func:`_add_build_options`; the test hook
    ``TILEC_TEST_BREAK_KERNEL=FUNCTION`` makes a library perturb that function's output."""
    return {"target": args.target, "arch": args.arch,
            "defines": dict(_define(d) for d in args.defines),
            "templates": dict(_template(t) for t in args.templates),
            "no_generic": args.no_generic, "opt_level": args.opt_level,
            "test_break": os.environ.get("TILEC_TEST_BREAK_KERNEL", "")}


class _PrintCmakeDir(argparse.Action):
    """``--cmake-dir``: print the CMake package's directory (``tilec_DIR``) and exit."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(CMAKE_DIR)
        parser.exit()


SUBCOMMANDS = """\
other commands (each with its own --help):
  tilec verify FILE [OPTIONS]    run every function against the reference on random inputs
  tilec bench [OPTIONS]          time the CPU kernels against NumPy and PyTorch
  tilec cache info|clear         show the compile cache's location and size; empty it
  tilec-opt FILE.mlir -p PASSES  run passes on tile IR text and print the result"""


def _compile_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="tilec", description="Compile a .tile operator for Ascend (C), PTX or CPU.",
                usage="%(prog)s [OPTIONS] FILE\n       %(prog)s verify|bench|cache ...",
                epilog=SUBCOMMANDS, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cmake-dir", action=_PrintCmakeDir, nargs=0,
                   help="print the directory of the CMake package (for tilec_DIR) and exit")
    p.add_argument("file", help="the .tile source")
    p.add_argument("-o", dest="output",
                   help="output path (written atomically; a library's header goes beside it; "
                        "for --emit=project a directory, replaced whole if tilec wrote it); "
                        "if absent, text stages go to stdout, obj/so to the source's stem in "
                        "the current directory, project to STEM.ascend there")
    stages = registry.all_stages()
    p.add_argument("--emit", default="so", choices=stages, metavar="STAGE",
                   help="stage to produce: " + " ".join(stages) + " (default: so)")
    _add_build_options(p)
    p.add_argument("--pass-pipeline", help="run this pipeline instead of the default")
    p.add_argument("--print-ir-after-all", action="store_true",
                   help="print the IR to stderr after every pass")
    p.add_argument("--print-ir-after", action="append", default=[], metavar="PASS",
                   help="print the IR to stderr after PASS")
    p.add_argument("--time-passes", action="store_true", help="report pass timings on stderr")
    p.add_argument("--verify-each", action="store_true",
                   help="verify the tile IR before the pass pipeline and after every pass")
    p.add_argument("--mlir-print-debuginfo", dest="debug_info", action="store_true",
                   help="print source locations on every op")
    p.add_argument("--no-cache", action="store_true",
                   help="compile even if the compile cache holds the result, store nothing")
    p.add_argument("--dump-dir", metavar="DIR",
                   help="write the text of every stage (DIR/<name>.<stage>.txt)")
    p.add_argument("--verbose", action="store_true",
                   help="report on stderr whether the compile cache served the result, why a "
                        "softmax(q @ transpose(k) ...) @ v did not fuse into one attention "
                        "kernel, and for ptx ptxas's report (registers, spills, shared memory)")
    return p


def _guarded(body: Callable[[], int]) -> int:
    try:
        return body()
    except TilecError as e:
        print(e.render(), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:      # the reader went away (| head): nothing left to say
        return 1
    except RecursionError:
        print("tilec: error: input nested too deeply", file=sys.stderr)
        return 1
    except Exception as e:  # an internal bug: say so plainly, without a traceback
        print(f"tilec: internal error: {type(e).__name__}: {e}\n"
              "please report this with the input that caused it", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["verify"]:
        return verify_main(argv[1:])
    if argv[:1] == ["cache"]:
        return cache_main(argv[1:])
    if argv[:1] == ["bench"]:
        return bench_main(argv[1:])
    if argv[:1] == ["fuzz"]:
        return fuzz_main(argv[1:])

    def run() -> int:
        args = _compile_parser().parse_args(argv)
        options = CompileOptions(
            emit=args.emit, **_build_options(args),
            pass_pipeline=args.pass_pipeline, print_ir_after_all=args.print_ir_after_all,
            print_ir_after=tuple(args.print_ir_after), time_passes=args.time_passes,
            verify_each=args.verify_each, debug_info=args.debug_info)
        text = read_source(args.file)
        stage = registry.stage_of(options.target, options.emit)
        kind = Output.TEXT if stage is None else stage.output
        output = args.output
        if kind is not Output.TEXT and output is None:
            output = Path(args.file).stem + stage.suffix
        name = Path(output or args.file).stem
        try:
            built = build(text, args.file, options, DiagnosticSink(sys.stderr, args.verbose), name,
                          use_cache=not args.no_cache,
                          record_stages=args.dump_dir is not None or args.verbose)
        except PartialBuild as partial:
            raise write_partial(output, partial) from None
        if args.verbose:
            print(_cache_report(built.key, built.hit), file=sys.stderr)
            if "ptxas" in built.stages:
                print(built.stages["ptxas"], file=sys.stderr)
        if args.dump_dir is not None:
            write_stages(args.dump_dir, name, built.stages)
        if kind is Output.DIRECTORY:
            write_directory(output, built.files, stage.replaceable or (lambda _: False))
        elif kind is not Output.TEXT:
            write_outputs(output, built.files)
        elif output:
            write_atomic(output, built.files[""])
        else:
            out = built.files[""].decode()
            sys.stdout.write(out if out.endswith("\n") else out + "\n")
        return 0

    return _guarded(run)


def _cache_report(key: str | None, hit: bool) -> str:
    if key is None:
        return "tilec: compile cache bypassed"
    return f"tilec: compile cache {'hit' if hit else 'miss'}: {key} in {cache_dir()}"


def cache_main(argv: Sequence[str]) -> int:
    """``tilec cache info`` (location, entries, total size) and ``tilec cache clear``."""
    def run() -> int:
        p = _Parser(prog="tilec cache", description="Inspect or empty the compile cache.")
        p.add_argument("action", choices=("info", "clear"))
        args = p.parse_args(argv)
        store = Store(cache_dir())
        if args.action == "clear":
            print(f"removed {store.clear()} entries from {store.root}")
        else:
            usage = store.usage()
            print(f"location: {usage.root}\nentries:  {usage.entries}\n"
                  f"size:     {usage.bytes} bytes ({usage.bytes / 2**20:.1f} MiB)")
        return 0

    return _guarded(run)


def _verify_parser() -> argparse.ArgumentParser:
    from .harness.verify import EXPLAINED

    p = _Parser(prog="tilec verify", formatter_class=argparse.RawDescriptionHelpFormatter,
                description="Run every function of a .tile file, built for a target, against "
                            "the reference semantics on fixed-seed random inputs, and print "
                            "one line per case as it runs.", epilog=EXPLAINED)
    p.add_argument("file", help="the .tile source")
    _add_build_options(p)
    p.add_argument("--max-elements", type=int, default=1 << 22, metavar="N",
                   help="skip cases whose arguments and results hold more elements (default "
                        "4194304)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    return p


def verify_main(argv: Sequence[str]) -> int:
    """``tilec verify FILE``: exit 0 when every case agrees with the reference, else 1."""
    def run() -> int:
        from .harness.verify import verify

        args = _verify_parser().parse_args(argv)
        report = verify(args.file, CompileOptions(**_build_options(args)),
                        max_elements=args.max_elements, seed=args.seed, out=sys.stdout,
                        progress=sys.stderr)
        return 130 if report.interrupted else 0 if report.ok else 1

    return _guarded(run)


def _fuzz_parser() -> argparse.ArgumentParser:
    from .fuzz.oracles import TARGETS

    p = _Parser(prog="tilec fuzz", description="Differential fuzzing: random well-typed "
                "programs, each built for every target and run against the reference "
                "interpreter (and -O0 against -O2, a cache hit against a fresh build, one "
                "thread against all); failures are reduced and written to --out.")
    p.add_argument("--count", type=int, default=100, help="programs to run (default 100)")
    p.add_argument("--seed", type=int, default=0, help="program i of seed S is always the "
                   "same program (default 0)")
    p.add_argument("--first", type=int, default=0, metavar="I",
                   help="start at program I of the seed (default 0): a run continued")
    p.add_argument("--target", default="cpu", metavar="T,...",
                   help=f"comma-separated, of {', '.join(TARGETS)} (default cpu)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--out", default="fuzz-failures", metavar="DIR",
                   help="where the reduced failures go (default fuzz-failures)")
    p.add_argument("--replay", nargs="+", metavar="FILE", default=[],
                   help="run files tilec fuzz wrote through the oracles again, at the sizes "
                        "their headers give, instead of generating programs")
    return p


def fuzz_main(argv: Sequence[str]) -> int:
    """``tilec fuzz``: exit 0 when every program agreed on every oracle, else 1."""
    def run() -> int:
        from .fuzz.oracles import TARGETS
        from .fuzz.run import fuzz

        p = _fuzz_parser()
        args = p.parse_args(argv)
        targets = [t for t in args.target.split(",") if t]
        unknown = [t for t in targets if t not in TARGETS]
        if unknown or not targets:
            p.error(f"unknown target '{unknown[0] if unknown else ''}'; "
                    f"choose from {', '.join(TARGETS)}")
        if args.count < 0 or args.jobs < 1 or args.first < 0:
            p.error("--count and --first must be >= 0 and --jobs >= 1")
        if args.replay:
            return _replay(args.replay, targets)
        summary = fuzz(args.count, args.seed, targets, jobs=args.jobs, out=Path(args.out),
                       progress=sys.stderr, first=args.first)
        for line in summary.lines():
            print(line)
        if summary.unique:
            print(f"reduced failures written to {args.out}/")
        return 130 if summary.interrupted else 0 if summary.ok else 1

    return _guarded(run)


def _replay(files: list[str], targets: list[str]) -> int:
    from .fuzz.replay import replay

    found = replay([read_source(path) for path in files], targets)
    for path, failures in zip(files, found):
        print(f"{path}: " + ("; ".join(f"{f.kind}: {f.message.splitlines()[0]}"
                                       for f in failures) or "agrees"))
    return 1 if any(found) else 0


BENCH_UNSET = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")   # they slow a current NumPy down


def bench_main(argv: Sequence[str]) -> int:
    """``tilec bench [OPTIONS]``: run :mod:`tilec.bench.cpu_ops` (tilec against NumPy and
    PyTorch; ``tilec bench --help``) in a child process without ``BENCH_UNSET``."""
    def run() -> int:
        env = {k: v for k, v in os.environ.items() if k not in BENCH_UNSET}
        return subprocess.call([sys.executable, "-m", "tilec.bench.cpu_ops", *argv], env=env)

    return _guarded(run)


SPLIT_MARKER = "// -----"


def split_input(text: str) -> list[str]:
    """The ``// -----`` separated chunks of ``text``, each preceded by as many empty lines as
    the file has before it, so that locations in a chunk keep the file's line numbers."""
    chunks: list[str] = []
    lines_before = 0
    for part in re.split(rf"^{SPLIT_MARKER}[^\n]*(?:\n|$)", text, flags=re.M):
        chunks.append("\n" * lines_before + part)
        lines_before += part.count("\n") + 1
    return chunks


def _passes_epilog() -> str:
    """The tilec passes, each with its summary and options (the registry's)."""
    from .pipeline import REGISTRY, options_help

    lines = ["tilec passes (PASS{option=value ...}; or any upstream MLIR pass):"]
    for name, info in sorted(REGISTRY.items()):
        lines.append(f"  {name:<22}{info.summary}")
        if options_help(info):
            lines.append(f"  {'':<22}options: {options_help(info)}")
    return "\n".join(lines)


def _opt_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="tilec-opt", description="Run passes on tile IR and print the result.",
                epilog=_passes_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="tile IR (.mlir), or - for stdin")
    p.add_argument("-p", "--passes", default="", help="PASS[,PASS...]")
    p.add_argument("-o", dest="output")
    p.add_argument("--split-input-file", action="store_true",
                   help=f"run on each '{SPLIT_MARKER}' separated part of the input on its own "
                   "and print the results separated the same way")
    p.add_argument("--verify-each", action=argparse.BooleanOptionalAction, default=True,
                   help="verify the input and the IR after every pass (default: on)")
    p.add_argument("--mlir-print-debuginfo", dest="debug_info", action="store_true")
    return p


def _located_in(error: TilecError, name: str) -> TilecError:
    """``Module.parse`` calls its input '-': name the file instead in an error's location."""
    span = error.span
    if span is None or span.file != "-":
        return error
    return TilecError(error.message, dataclasses.replace(span, file=name),
                      error.diagnostic.notes)


def opt_main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)

    def run() -> int:
        from . import passes  # noqa: F401  (registers the tilec passes)
        from .dialect import make_context
        from .dialect.verify import verify_module
        from .driver import verify_after
        from .mlir import ir
        from .pipeline import parse_pipeline, run_pipeline

        args = _opt_parser().parse_args(argv)
        name = "<stdin>" if args.file == "-" else args.file
        text = sys.stdin.read() if args.file == "-" else read_source(args.file)
        register_source(name, text)
        steps = parse_pipeline(args.passes) if args.passes else []

        def process(chunk: str) -> str:
            try:
                module = ir.Module.parse(chunk)
            except ir.MLIRError as e:
                raise TilecError(f"{name}: cannot parse IR: {e}") from None
            try:
                if args.verify_each:
                    verify_module(module)
                run_pipeline(module, steps, default_sink(),
                             verify_after if args.verify_each else None)
            except TilecError as e:
                raise _located_in(e, name) from None
            return module.operation.get_asm(enable_debug_info=args.debug_info)

        chunks = split_input(text) if args.split_input_file else [text]
        outputs: list[str] = []
        status = 0
        with make_context():
            for chunk in chunks:
                try:
                    outputs.append(process(chunk))
                except TilecError as e:
                    if len(chunks) == 1:
                        raise
                    print(e.render(), file=sys.stderr)
                    status = 1
        out = f"{SPLIT_MARKER}\n".join(outputs)
        if args.output:
            write_atomic(args.output, out)
        else:
            sys.stdout.write(out)
        return status

    return _guarded(run)


if __name__ == "__main__":
    sys.exit(main())
