"""Linking a library: host C + the runtime (+ the CPU kernels' object) -> a shared library.

In: :class:`~tilec.codegen.common.host.HostCode`, for a cpu library the object files of the
kernels, one per code variant (a ptx library embeds its cubin in the host C instead), and the
C compiler command.
Out: the bytes of the ``.so``.  Everything is built in a temporary directory that is removed
afterwards, so a failing compiler leaves nothing behind.  A version script exports only what
``HostCode.exports`` names (the entries, ``tilec_last_error``, ``tilec_record_error``,
``tilec_metadata``, and ``tilec_num_threads`` or the device helpers): kernels and the runtime
stay private to the library, so two libraries loaded in one process never call each other's
kernels, while their error messages share one slot (see ``cpu_runtime.c``).  A ptx
library links ``tilec_cuda.c`` and ``-ldl``: the CUDA driver is opened at run time.
"""
from __future__ import annotations

import functools
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from ...diagnostics import TilecError
from .host import HostCode

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
FLAGS = ("-O2", "-fPIC", "-shared", "-pthread", "-fno-strict-aliasing",
         "-fsemantic-interposition")
CPU_RUNTIME = ("cpu_runtime.c", "cpu_runtime.h")
GEMM_RUNTIME = ("cpu_gemm.c", "cpu_gemm.h")   # only where a kernel runs on the CPU GEMM
ATTENTION_RUNTIME = ("cpu_attention.c", "cpu_attention.h")   # ... on the CPU attention
CUDA_RUNTIME = ("tilec_cuda.c", "tilec_cuda.h")


def link(host: HostCode, kernels_objects: Sequence[bytes] | None, cc: str,
         soname: str) -> bytes:
    """The shared library named ``soname`` (with the CUDA launcher when there are no kernels
    objects); TilecError naming the compiler when it is missing or fails."""
    command = c_compiler(cc)
    runtime = CPU_RUNTIME + (CUDA_RUNTIME if kernels_objects is None else ()) \
        + (GEMM_RUNTIME if host.gemm else ()) + (ATTENTION_RUNTIME if host.attention else ())
    with tempfile.TemporaryDirectory(prefix="tilec-link-") as tmp:
        work = Path(tmp)
        inputs = prepare(work, host, runtime)
        objects = runtime_objects(work, command, FLAGS, inputs[1:])
        inputs = inputs[:1] + objects + _written(work, kernels_objects or ())
        library = work / "library.so"
        compile_in(work, [*command, *FLAGS, "-o", str(library), *inputs,
                          *library_flags(soname), "-lm", "-ldl"], "C")
        return library.read_bytes()


def runtime_objects(work: Path, command: Sequence[str], flags: Sequence[str],
                    sources: Sequence[str]) -> list[str]:
    """The runtime's C ``sources``, which :func:`prepare` copied into ``work``, compiled
    there with ``flags``: the names of the objects.  Each is compiled once per process for
    the same compiler, flags and runtime files (:func:`_runtime_object`): the runtime is
    the same in every library, and its GEMM half is the slowest file a link compiles."""
    files = tuple((p.name, p.read_text()) for p in sorted(work.iterdir())
                  if p.suffix in (".c", ".h") and p.name != "host.c")
    names = []
    for source in sources:
        names.append(Path(source).with_suffix(".o").name)
        (work / names[-1]).write_bytes(_runtime_object(tuple(command), tuple(flags), source,
                                                       files))
    return names


@functools.lru_cache(maxsize=None)
def _runtime_object(command: tuple[str, ...], flags: tuple[str, ...], source: str,
                    files: tuple[tuple[str, str], ...]) -> bytes:
    """``source`` compiled with ``flags`` beside ``files`` (name, text): the object's bytes."""
    with tempfile.TemporaryDirectory(prefix="tilec-runtime-") as tmp:
        work = Path(tmp)
        for name, text in files:
            (work / name).write_text(text)
        compile_in(work, [*command, *flags, "-c", source, "-o", "runtime.o"], "C")
        return (work / "runtime.o").read_bytes()


def relocatable(objects: Sequence[bytes], cc: str) -> bytes:
    """One relocatable object file holding all of ``objects`` (``cc -r``)."""
    if len(objects) == 1:
        return objects[0]
    command = c_compiler(cc)
    with tempfile.TemporaryDirectory(prefix="tilec-link-") as tmp:
        work = Path(tmp)
        compile_in(work, [*command, "-r", "-nostdlib", "-o", "kernels.o",
                          *_written(work, objects)], "C")
        return (work / "kernels.o").read_bytes()


def c_compiler(cc: str) -> list[str]:
    """The C compiler command ``cc`` split into words; TilecError when it is not installed."""
    command = shlex.split(cc) or ["cc"]
    if shutil.which(command[0]) is None:
        raise TilecError(f"no C compiler '{command[0]}' to link the library with: install one "
                         "(gcc or clang) or set CC to its path")
    return command


def _written(work: Path, objects: Sequence[bytes]) -> list[str]:
    """``objects`` written to ``work`` as kernels0.o, kernels1.o, ...; their names."""
    names = []
    for i, data in enumerate(objects):
        names.append(f"kernels{i}.o")
        (work / names[-1]).write_bytes(data)
    return names


def prepare(work: Path, host: HostCode, runtime: tuple[str, ...]) -> list[str]:
    """``work`` filled with the host C, the version script exporting ``host.exports`` and
    the ``runtime`` files; the C sources to compile."""
    (work / "host.c").write_text(host.source)
    (work / "exports.map").write_text(
        "{\n  global:\n" + "".join(f"    {name};\n" for name in host.exports)
        + "  local: *;\n};\n")
    for name in runtime:
        shutil.copy(RUNTIME / name, work / name)
    return ["host.c"] + [name for name in runtime if name.endswith(".c")]


def library_flags(soname: str) -> list[str]:
    """The linker flags of every library: its soname and the version script of
    :func:`prepare`."""
    return [f"-Wl,-soname,{soname}", "-Wl,--version-script=exports.map"]


def compile_in(work: Path, args: list[str], language: str) -> None:
    """Run compiler command ``args`` in ``work``; TilecError naming the ``language``'s
    compiler when it cannot run or fails."""
    try:
        done = subprocess.run(args, cwd=work, capture_output=True, text=True)
    except OSError as e:
        raise TilecError(f"cannot run the {language} compiler '{args[0]}': {e.strerror or e}") \
            from None
    if done.returncode != 0:
        raise TilecError(f"the {language} compiler failed to link the library "
                         f"({shlex.join(args)}):\n" + (done.stderr or done.stdout).strip())
