"""bench/gpu_check.sh without a GPU: ``prepare --only gemm attention`` builds a bundle under
64 MiB whose runtime imports and loads the GEMM and attention libraries with nothing but the
bundle (no tilec install), and ``run`` stops at once, exit status 2, saying that there is no
GPU, or that ml_dtypes (which the bundled runtime needs) is missing.  The attention check's
reference (SDPA with explicit masks, the float32 math backend) agrees with tilec's CPU build of
the same kernels, so that its masks follow the language (a causal diagonal at the last s of t
positions, cache lengths per batch) and a GPU failure is the kernel's."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO

SCRIPT = REPO / "bench" / "gpu_check.sh"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gpu_check") / "bundle"
    done = subprocess.run([str(SCRIPT), "prepare", str(path), "--only", "gemm", "attention"],
                          env={**os.environ, "PYTHON": sys.executable}, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert "gemm" in done.stdout and "MiB" in done.stdout
    return path


def test_prepare_builds_a_small_bundle(bundle: Path) -> None:
    for name in ("bench_gemm.so", "bench_attention.so", "gpu_check.py", "triton_kernels.py", "cases.json",
                 "tilec/runtime/loader.py", "tilec/runtime/interop.py", "tilec/binding.py"):
        assert (bundle / name).is_file(), name
    size = sum(f.stat().st_size for f in bundle.rglob("*") if f.is_file())
    assert size < 64 * 2**20


def test_the_bundled_runtime_stands_alone(bundle: Path, tmp_path: Path) -> None:
    """What the GPU machine does: import tilec from the bundle only and load the GEMMs."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import tilec; "
            "from tilec.runtime.loader import load; "
            "lib = load(sys.argv[1] + '/bench_gemm.so'); "
            "att = load(sys.argv[1] + '/bench_attention.so'); "
            "print(tilec.__file__); print(sorted(lib.functions) + sorted(att.functions))")
    done = subprocess.run([sys.executable, "-c", code, str(bundle)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    location, functions = done.stdout.splitlines()
    assert Path(location).is_relative_to(bundle)
    for name in ("gemm_f16", "linear_gelu_f16", "gemm_bf16", "linear_gelu_bf16",
                 "linear_t_bf16", "shared_weight_bf16", "gemm_f32", "linear_gelu_f32",
                 "causal_gqa", "biased", "decode", "decode_gqa"):
        assert f"'{name}'" in functions


def test_run_without_a_gpu_fails_clearly(bundle: Path) -> None:
    done = subprocess.run([str(SCRIPT), "run", str(bundle)],
                          env={**os.environ, "PYTHON": sys.executable}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "gpu_check run: " in done.stderr and "run it on the GPU machine" in done.stderr
    assert "no CUDA GPU" in done.stderr or "PyTorch is not installed" in done.stderr


def test_run_without_ml_dtypes_says_so(bundle: Path, tmp_path: Path) -> None:
    (tmp_path / "ml_dtypes.py").write_text("raise ImportError('not installed here')\n")
    done = subprocess.run([str(SCRIPT), "run", str(bundle)],
                          env={**os.environ, "PYTHON": sys.executable,
                               "PYTHONPATH": str(tmp_path)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "needs ml_dtypes (pip install ml_dtypes)" in done.stderr, done.stderr


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "bench" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_attention_reference_follows_the_language() -> None:
    """SDPA (float32 math, the check's masks) against tilec's CPU build of the check's own
    kernels, at one awkward size each: a wrong diagonal, head grouping or length mask
    would differ by far more than the tolerance."""
    import torch

    import tilec

    check = _gpu_check()
    lib = tilec.compile_string(check.ATTENTION_SOURCE, "attention.tile", target="cpu")
    gen = torch.Generator().manual_seed(18)
    for name, size in (("causal_gqa", (1, 2, 2, 17, 40)), ("biased", (1, 2, 1, 17, 33)),
                       ("decode", (3, 2, 2, 1, 70)), ("decode_gqa", (1, 2, 4, 1, 300))):
        args = check.attention_args(name, size, "cpu", gen)
        want = check.attention_reference(name, args)
        error, ok = check.attention_error(lib[name](*args), want, str(args[0].dtype)[6:])
        assert ok, (name, error)
        assert float(want.abs().max()) > 0.05, name     # not a vacuous comparison
        wrong = want.flip(-1)                           # a layout slip: columns swapped
        assert not check.attention_error(wrong, want, str(args[0].dtype)[6:])[1], name
    assert np.isfinite(error)
