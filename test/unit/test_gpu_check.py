"""bench/gpu_check.sh without a GPU: ``prepare --only gemm`` builds a bundle under 64 MiB
whose runtime imports and loads the GEMM library with nothing but the bundle (no tilec
install), and ``run`` stops at once, exit status 2, saying that there is no GPU."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

SCRIPT = REPO / "bench" / "gpu_check.sh"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gpu_check") / "bundle"
    done = subprocess.run([str(SCRIPT), "prepare", str(path), "--only", "gemm"],
                          env={**os.environ, "PYTHON": sys.executable}, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert "gemm" in done.stdout and "MiB" in done.stdout
    return path


def test_prepare_builds_a_small_bundle(bundle: Path) -> None:
    for name in ("bench_gemm.so", "gpu_check.py", "triton_kernels.py", "cases.json",
                 "tilec/runtime/loader.py", "tilec/runtime/interop.py", "tilec/binding.py"):
        assert (bundle / name).is_file(), name
    size = sum(f.stat().st_size for f in bundle.rglob("*") if f.is_file())
    assert size < 64 * 2**20


def test_the_bundled_runtime_stands_alone(bundle: Path, tmp_path: Path) -> None:
    """What the GPU machine does: import tilec from the bundle only and load the GEMMs."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import tilec; "
            "from tilec.runtime.loader import load; "
            "lib = load(sys.argv[1] + '/bench_gemm.so'); "
            "print(tilec.__file__); print(sorted(lib.functions))")
    done = subprocess.run([sys.executable, "-c", code, str(bundle)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    location, functions = done.stdout.splitlines()
    assert Path(location).is_relative_to(bundle)
    for name in ("gemm_f16", "linear_gelu_f16", "gemm_bf16", "linear_gelu_bf16",
                 "linear_t_bf16", "shared_weight_bf16"):
        assert f"'{name}'" in functions


def test_run_without_a_gpu_fails_clearly(bundle: Path) -> None:
    done = subprocess.run([str(SCRIPT), "run", str(bundle)],
                          env={**os.environ, "PYTHON": sys.executable}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "gpu_check run: " in done.stderr and "run it on the GPU machine" in done.stderr
    assert "no CUDA GPU" in done.stderr or "PyTorch is not installed" in done.stderr
