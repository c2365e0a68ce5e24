"""Linking a CPU library: host C + the runtime + the kernels' object -> a shared library.

In: :class:`~tilec.codegen.cpu.host.HostCode`, the object file of the kernels (the CPU
backend's), and the C compiler command.  Out: the bytes of the ``.so``.  Everything is built
in a temporary directory that is removed afterwards, so a failing compiler leaves nothing
behind.  A version script exports only the entries, ``tilec_last_error``,
``tilec_metadata`` and ``tilec_num_threads``: kernels and the runtime stay private to the
library, so two libraries loaded in one process never call each other's kernels.
"""
from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from ...diagnostics import TilecError
from .host import HostCode

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
FLAGS = ("-O2", "-fPIC", "-shared", "-pthread", "-fno-strict-aliasing")


def link(host: HostCode, kernels_object: bytes, cc: str) -> bytes:
    """The shared library; TilecError naming the compiler when it is missing or fails."""
    command = shlex.split(cc) or ["cc"]
    if shutil.which(command[0]) is None:
        raise TilecError(f"no C compiler '{command[0]}' to link the library with: install one "
                         "(gcc or clang) or set CC to its path")
    with tempfile.TemporaryDirectory(prefix="tilec-link-") as tmp:
        work = Path(tmp)
        (work / "host.c").write_text(host.source)
        (work / "kernels.o").write_bytes(kernels_object)
        (work / "exports.map").write_text(
            "{\n  global:\n" + "".join(f"    {name};\n" for name in host.exports)
            + "  local: *;\n};\n")
        shutil.copy(RUNTIME / "cpu_runtime.c", work / "cpu_runtime.c")
        shutil.copy(RUNTIME / "cpu_runtime.h", work / "cpu_runtime.h")
        library = work / "library.so"
        args = [*command, *FLAGS, "-o", str(library), "host.c", "cpu_runtime.c", "kernels.o",
                "-Wl,--version-script=exports.map", "-lm"]
        try:
            done = subprocess.run(args, cwd=work, capture_output=True, text=True)
        except OSError as e:
            raise TilecError(f"cannot run the C compiler '{command[0]}': {e.strerror or e}") \
                from None
        if done.returncode != 0:
            raise TilecError(f"the C compiler failed to link the library ({shlex.join(args)}):\n"
                             + (done.stderr or done.stdout).strip())
        return library.read_bytes()
