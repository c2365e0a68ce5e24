"""Shared fixtures: paths of the repository, the shared examples and the operator library;
every test compiles into a cache of its session's own, never the user's."""
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED_EXAMPLES = REPO.parent / "shared" / "examples"
OPS = REPO / "ops"
EXAMPLE_NAMES = ("swiglu", "layernorm", "rmsnorm_templated", "rope")
AVX512 = {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}   # x86-64-v4's


def cpu_flags() -> set[str]:
    """The flags /proc/cpuinfo lists for this machine's CPU (none where it is missing): the
    oracle, independent of tilec's runtime, that its detection is checked against."""
    path = Path("/proc/cpuinfo")
    for line in path.read_text().splitlines() if path.exists() else ():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def has_avx512() -> bool:
    """Whether /proc/cpuinfo lists x86-64-v4's AVX-512 features for this machine's CPU."""
    return AVX512 <= cpu_flags()


RUNTIME_C = REPO / "tilec" / "runtime" / "cpu_runtime.c"
# qemu-user's model of a CPU with AVX2, FMA, BMI1/2 and F16C and without AVX-512: where a test
# runs a library on a CPU of x86-64-v3 exactly, whatever CPU the machine has
QEMU = shutil.which("qemu-x86_64")
QEMU_V3_CPU = ["-cpu", "Haswell"]


@functools.lru_cache(maxsize=None)
def runtime_library() -> str:
    """The C runtime alone, built once per process (warnings are errors)."""
    path = Path(tempfile.mkdtemp(prefix="tilec-runtime-")) / "runtime.so"
    subprocess.run([os.environ.get("CC") or "cc", "-O2", "-fPIC", "-shared", "-pthread",
                    "-Wall", "-Wextra", "-Werror", "-o", str(path), str(RUNTIME_C)], check=True)
    return str(path)


@functools.lru_cache(maxsize=None)
def cpu_level(tilec_cpu: str | None = None) -> int:
    """The level tilec's runtime finds (``tilec_cpu_level``: 4 where a library of the default
    --arch runs its x86-64-v4 code, 3 where its x86-64-v3 code, 2 below), asked in a child
    process with ``TILEC_CPU`` as this one has it (None) or set to ``tilec_cpu`` ("": unset,
    which gives the CPU's own level)."""
    env = dict(os.environ)
    if tilec_cpu is not None:
        env.pop("TILEC_CPU", None)
        if tilec_cpu:
            env["TILEC_CPU"] = tilec_cpu
    probe = "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).tilec_cpu_level())"
    done = subprocess.run([sys.executable, "-c", probe, runtime_library()], env=env,
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--ascend-sweep", action="store_true",
                     help="run the ascend-sim corpus test over every size combination")
    parser.addoption("--fuzz-long", action="store_true",
                     help="run the fuzz smoke ten times longer (1,000 programs on cpu, 200 "
                          "on ascend-sim) than the CI figure")


@pytest.fixture(scope="session", autouse=True)
def private_compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """TILEC_CACHE_DIR for the whole session (and the processes it starts)."""
    path = tmp_path_factory.getbasetemp() / "tilec-cache"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TILEC_CACHE_DIR", str(path))
        yield path


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_examples() -> Path:
    assert SHARED_EXAMPLES.is_dir(), f"missing {SHARED_EXAMPLES}"
    return SHARED_EXAMPLES
