"""Building an Ascend library: generated sources -> a shared library, or a CANN project.

In: the host C (:class:`~tilec.codegen.common.host.HostCode`), the kernel file and the
launcher file of :mod:`.source`.  Out:

- ``--target ascend-sim``: the bytes of a ``.so`` from the host C++ compiler: the kernel
  file unchanged against the CPU twin (``tilec/runtime/ascend_twin``), the launcher, the host
  C and the cpu runtime, exporting what the host code exports.
- ``--target ascend``: the files of a CMake project for CANN (``find_package(ASC)``,
  ``project(NAME LANGUAGES ASC CXX)``): the output of ``--emit=project``
  (:func:`project_files`), and for ``so`` built with ``bisheng`` when it is found
  (``$ASCEND_HOME_PATH/compiler/bin``, ``compiler/ccec_compiler/bin``,
  ``*-linux/ccec_compiler/bin``, then ``PATH``); without it :class:`MissingToolchain` carries the project's files, which the
  command line writes beside the output before reporting what is missing.
"""
from __future__ import annotations

import functools
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ...diagnostics import TilecError
from ...runtime.ascend_twin import CXXFLAGS, RUNTIME_SOURCES
from ..common.backend import PartialBuild
from ..common.host import HostCode
from ..common.link import RUNTIME, compile_in, library_flags, prepare, runtime_objects
from .source import TEMPLATES

ASCEND_RUNTIME = ("cpu_runtime.c", "cpu_runtime.h", "tilec_ascend.h")
OBJECT_FLAGS = ("-O2", "-fPIC", "-fno-strict-aliasing")
KERNEL_FLAGS = ("-O0", "-fPIC", "-shared", "-pthread")
"""The kernels and launchers compile unoptimised: their run time on the twin is the twin's
checks (its runtime compiles with -O2), and -O2 would triple the build time."""


@dataclass(frozen=True)
class Sources:
    """The generated sources of one library, named after it."""

    name: str
    host: HostCode
    kernels: str        # the Ascend C kernel file (``--emit=ascendc``)
    launch: str         # the launcher file, which includes the kernel file

    @property
    def kernels_file(self) -> str:
        return f"{self.name}.kernels.asc"

    @property
    def launch_file(self) -> str:
        return f"{self.name}.launch.asc"


def build_sim(sources: Sources, cc: str, cxx: str, soname: str) -> bytes:
    """The ``.so`` of an ascend-sim library: the host C and the cpu runtime with the C
    compiler ``cc``, the launcher (with the kernel file) and the twin with the C++ compiler
    ``cxx``, which links."""
    c_command, cxx_command = shlex.split(cc) or ["cc"], shlex.split(cxx) or ["c++"]
    for command, language, variable in ((c_command, "C", "CC"), (cxx_command, "C++", "CXX")):
        if shutil.which(command[0]) is None:
            raise TilecError(f"no {language} compiler '{command[0]}' to build the CPU twin "
                             f"library with: install one or set {variable} to its path")
    with tempfile.TemporaryDirectory(prefix="tilec-ascend-sim-") as tmp:
        work = Path(tmp)
        c_inputs = prepare(work, sources.host, ASCEND_RUNTIME)
        (work / sources.kernels_file).write_text(sources.kernels)
        (work / "launch.cpp").write_text(sources.launch)
        twin = twin_objects(tuple(cxx_command))
        for name, data in twin.items():
            (work / name).write_bytes(data)
        compile_in(work, [*c_command, *OBJECT_FLAGS, "-c", c_inputs[0]], "C")
        objects = [Path(c_inputs[0]).with_suffix(".o").name, *sorted(twin),
                   *runtime_objects(work, c_command, OBJECT_FLAGS, c_inputs[1:])]
        library = work / "library.so"
        compile_in(work, [*cxx_command, *CXXFLAGS, *KERNEL_FLAGS, f"-I{work}", "-o",
                          str(library), "launch.cpp", *objects, *library_flags(soname), "-lm"],
                   "C++")
        return library.read_bytes()


@functools.lru_cache(maxsize=None)
def twin_objects(cxx: tuple[str, ...]) -> dict[str, bytes]:
    """The twin's runtime compiled by ``cxx`` (object file name -> bytes): once per process,
    it is the slow half of every ascend-sim build."""
    with tempfile.TemporaryDirectory(prefix="tilec-twin-") as tmp:
        work = Path(tmp)
        compile_in(work, [*cxx, *CXXFLAGS, *OBJECT_FLAGS, "-c", *map(str, RUNTIME_SOURCES)],
                   "C++")
        names = [f"{Path(source).stem}.o" for source in RUNTIME_SOURCES]
        return {name: (work / name).read_bytes() for name in names}


# ---------------------------------------------------------------------------------------------
# CANN


BISHENG_DIRECTORIES = ("compiler/bin", "compiler/ccec_compiler/bin", "*-linux/ccec_compiler/bin")
"""Where CANN releases keep bisheng, under ``$ASCEND_HOME_PATH``, in the order looked at."""


def find_bisheng(ascend_home: str | None, path: str | None) -> tuple[str | None, list[str]]:
    """bisheng's path (None when absent) and every place looked at: under ``ascend_home``
    (``$ASCEND_HOME_PATH``) :data:`BISHENG_DIRECTORIES`, then ``path`` (``$PATH``)."""
    if not ascend_home:
        looked = ["$ASCEND_HOME_PATH (not set)"]
    else:
        home = Path(ascend_home)
        looked = [str(home / directory) for directory in BISHENG_DIRECTORIES]
        for directory in BISHENG_DIRECTORIES:
            for candidate in sorted(home.glob(f"{directory}/bisheng")):
                if candidate.is_file():
                    return str(candidate), looked
    return shutil.which("bisheng", path=path), looked + ["PATH"]


def project_files(sources: Sources, arch: str) -> dict[str, bytes]:
    """The CMake project of a CANN build: its sources, the runtime files they include, the
    version script and ``CMakeLists.txt`` (relative path -> bytes)."""
    files = {
        sources.kernels_file: sources.kernels.encode(),
        sources.launch_file: sources.launch.encode(),
        f"{sources.name}.host.c": sources.host.source.encode(),
        f"{sources.name}.h": sources.host.header.encode(),
        "exports.map": ("{\n  global:\n" + "".join(f"    {name};\n"
                                                     for name in sources.host.exports)
                        + "  local: *;\n};\n").encode(),
        "CMakeLists.txt": TEMPLATES.get_template("CMakeLists.txt.j2").render(
            name=sources.name, arch=arch, launch=sources.launch_file,
            host=f"{sources.name}.host.c").encode(),
    }
    for name in ASCEND_RUNTIME:
        files[name] = (RUNTIME / name).read_bytes()
    return files


PROJECT_MARKER = b"# Generated by tilec"
"""How the ``CMakeLists.txt`` of every project :func:`project_files` makes begins."""


def is_project(directory: Path) -> bool:
    """Whether ``directory`` holds a project that tilec wrote (its ``CMakeLists.txt`` begins
    with :data:`PROJECT_MARKER`): one that writing a project there may replace."""
    try:
        with open(directory / "CMakeLists.txt", "rb") as f:
            return f.read(len(PROJECT_MARKER)) == PROJECT_MARKER
    except OSError:
        return False


class MissingToolchain(PartialBuild):
    """No CANN toolchain: ``files`` (relative path -> bytes) is the project that builds the
    library on a machine with one; :meth:`explain` says where it was written and how."""

    def __init__(self, name: str, looked: list[str], files: Mapping[str, bytes]) -> None:
        super().__init__(f"--target ascend needs CANN's bisheng compiler, which is not "
                         f"installed (looked in {', '.join(looked)})")
        self.name = name
        self.looked = looked
        self.files = dict(files)

    def directory(self, output: str) -> Path:
        """Where the project goes: ``NAME.ascend`` beside ``output``."""
        return Path(output).parent / f"{self.name}.ascend"

    def replaceable(self, directory: Path) -> bool:
        return is_project(directory)

    def explain(self, output: str) -> str:
        directory = self.directory(output)
        build = directory / "build"
        return (f"{self.message}; wrote the kernels, their launchers, the host code and a "
                f"CMake project to {directory}/ instead.  To build {output} on a machine with "
                f"CANN: source $ASCEND_HOME_PATH/set_env.sh, then run: cmake -S {directory} "
                f"-B {build} && cmake --build {build} && cp {build}/{self.name}.so {output}")


def build_cann(sources: Sources, arch: str, bisheng: str | None, looked: list[str]) -> bytes:
    """The ``.so`` built by CMake with CANN's toolchain; :class:`MissingToolchain` when
    bisheng is not found."""
    files = project_files(sources, arch)
    if bisheng is None:
        raise MissingToolchain(sources.name, looked, files)
    with tempfile.TemporaryDirectory(prefix="tilec-ascend-") as tmp:
        work = Path(tmp)
        for relative, data in files.items():
            (work / relative).write_bytes(data)
        compile_in(work, ["cmake", "-S", ".", "-B", "build", f"-DCMAKE_ASC_COMPILER={bisheng}"],
                   "CMake")
        compile_in(work, ["cmake", "--build", "build"], "Ascend C")
        return (work / "build" / f"{sources.name}.so").read_bytes()
