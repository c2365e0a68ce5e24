"""The runtime: the Python loader's argument checking, DLPack and out=, its independence from
the compiler; the C runtime's thread pool and scalar conversions."""
from __future__ import annotations

import concurrent.futures
import ctypes
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from conftest import OPS, QEMU, QEMU_V3_CPU, cpu_level, has_avx512, runtime_library

import tilec
from tilec.cli import main
from tilec.harness.numerics import assert_close


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory):
    """swiglu and rmsnorm, built by the command line."""
    out = tmp_path_factory.mktemp("libs")
    for name in ("swiglu", "rmsnorm_templated"):
        assert main([str(OPS / f"{name}.tile"), "-o", str(out / f"{name}.so")]) == 0
    return tilec.load(out / "swiglu.so"), tilec.load(out / "rmsnorm_templated.so")


def f16(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float16)


def bf16(*shape: int) -> np.ndarray:
    return np.random.default_rng(1).standard_normal(shape).astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("call,error,message", [
    (lambda s, r: s.swiglu(f16(2, 3)), ValueError,
     "swiglu: argument 'input': expected rank 3 (shape [batch, seq, 2*hidden]), got rank 2 "
     "(shape (2, 3))"),
    (lambda s, r: s.swiglu(f16(2, 3, 4).astype(np.float32)), TypeError,
     "swiglu: argument 'input': expected dtype float16, got float32"),
    (lambda s, r: s.swiglu([[[1.0, 2.0]]]), TypeError,
     "swiglu: argument 'input': expected a NumPy array (or a DLPack tensor) of float16, got "
     "list"),
    (lambda s, r: s.swiglu(f16(2, 3, 5)), ValueError,
     "swiglu: argument 'input' dimension 2 is 2*hidden = 5: hidden would be 5/2, not a "
     "non-negative integer"),
    (lambda s, r: s.swiglu(f16(2, 8, 3).transpose(0, 2, 1)), ValueError,
     "swiglu: argument 'input': expected a C-contiguous (row-major) array, got strides (48, 2, "
     "6) for shape (2, 3, 8); pass np.ascontiguousarray(...)"),
    (lambda s, r: s.swiglu(), TypeError, "swiglu() missing argument 'input'"),
    (lambda s, r: s.swiglu(f16(1, 1, 2), f16(1, 1, 2)), TypeError,
     "swiglu() takes 1 argument (input), got 2"),
    (lambda s, r: s.swiglu(inputs=f16(1, 1, 2)), TypeError,
     "swiglu() got an unexpected keyword argument 'inputs'; parameters: input"),
    (lambda s, r: r.rmsnorm(bf16(4, 8), bf16(9)), ValueError,
     "rmsnorm: symbol hidden is 8 from argument 'x' dimension 1 but argument 'weight' "
     "dimension 0 is 9"),
    (lambda s, r: r.rmsnorm(bf16(4, 8), bf16(8), eps="small"), TypeError,
     "rmsnorm: argument 'eps': expected a float32 scalar, got str"),
    (lambda s, r: r.rmsnorm(bf16(4, 8), bf16(8), 1e-5, x=bf16(4, 8)), TypeError,
     "rmsnorm() got argument 'x' twice"),
    (lambda s, r: s.swiglu(f16(2, 3, 8), out=np.empty((2, 3, 3), np.float16)), ValueError,
     "swiglu: out: expected shape (2, 3, 4), got (2, 3, 3)"),
    (lambda s, r: s.swiglu(f16(2, 3, 8), out=np.empty((2, 3, 4), np.float32)), TypeError,
     "swiglu: out: expected dtype float16, got float32"),
    (lambda s, r: s.swiglu(f16(2, 3, 8), out=np.empty((2, 3, 8), np.float16)[..., ::2]),
     ValueError, "swiglu: out: expected a C-contiguous (row-major) array"),
    (lambda s, r: s.swiglu(f16(2, 3, 8), out=(np.empty((2, 3, 4), np.float16),) * 2), TypeError,
     "swiglu(): out= needs 1 array (one per result), got 2"),
])
def test_wrong_arguments_are_refused_naming_the_argument(libs, call, error, message) -> None:
    with pytest.raises(error) as caught:
        call(*libs)
    assert str(caught.value).startswith(message)


def test_a_numpy_scalar_is_a_rank_0_tensor() -> None:
    """A NumPy scalar (np.float16(2)) for a Tensor<float16>[] argument, as the reference
    takes it; found by tilec fuzz, where the library refused it with "expected a NumPy array
    of float16, got float16"."""
    lib = tilec.compile_string("func f(s: Tensor<float16>[], y: Tensor<float16>[n]) -> "
                               "Tensor<float16>[n] { return y * s; }", "scalar0.tile")
    y = f16(5)
    assert_close(lib.f(np.float16(2.0), y), y.astype(np.float64) * 2, "float16")
    with pytest.raises(TypeError, match="argument 's': expected dtype float16, got float32"):
        lib.f(np.float32(2.0), y)


def test_outputs_must_be_writable_and_apart_from_the_arguments(libs) -> None:
    swiglu, _ = libs
    x = f16(2, 3, 8)
    read_only = np.empty((2, 3, 4), np.float16)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="swiglu: out: the array is read-only"):
        swiglu.swiglu(x, out=read_only)
    with pytest.raises(ValueError, match="swiglu: out: overlaps argument 'input'"):
        swiglu.swiglu(x, out=x.reshape(-1)[:24].reshape(2, 3, 4))


class OnlyDLPack:
    """A tensor that NumPy can only read through the DLPack protocol."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_dlpack_arguments_and_outputs(libs) -> None:
    swiglu, _ = libs
    x = f16(3, 2, 10)
    want = swiglu.swiglu(x)
    np.testing.assert_array_equal(swiglu.swiglu(OnlyDLPack(x)), want)
    out = OnlyDLPack(np.zeros((3, 2, 5), np.float16))
    assert swiglu.swiglu(x, out=out) is out
    np.testing.assert_array_equal(out.array, want)


def test_scalar_defaults_and_keywords(libs) -> None:
    _, rms = libs
    x, w = bf16(3, 8), bf16(8)
    default = rms.rmsnorm(x, w)
    np.testing.assert_array_equal(rms.rmsnorm(weight=w, x=x, eps=1e-6), default)
    assert not np.array_equal(rms.rmsnorm(x, w, eps=np.float32(4.0)), default)


def test_a_plan_is_kept_per_argument_shapes(libs, monkeypatch) -> None:
    """A function plans a call (binds the symbols, sizes the results) once per argument
    shapes: calls that alternate between shapes, and more shapes than it keeps (PLANS), each
    get their own results, and an argument of a kept shape is still checked."""
    from tilec.runtime import loader
    swiglu = tilec.load(libs[0].path).swiglu   # loaded anew: no plans kept yet
    planned = []
    plan = loader.Function.plan
    monkeypatch.setattr(loader.Function, "plan",
                        lambda self, tensors: planned.append(1) or plan(self, tensors))
    shapes = [(1, 2, 8), (2, 3, 8), (1, 2, 8), (2, 3, 6)] + \
        [(1, 1, 2 * h) for h in range(1, loader.PLANS + 9)] + [(2, 3, 8)]
    for shape in shapes:
        x = f16(*shape)
        h = shape[-1] // 2
        a, gate = x[..., :h].astype(np.float64), x[..., h:].astype(np.float64)
        assert_close(swiglu(x), a * gate / (1 + np.exp(-gate)), "float16")
    # all but the second (1, 2, 8); the last (2, 3, 8) again: forgotten when the plans
    # filled up
    assert len(planned) == len(shapes) - 1
    swiglu(f16(2, 3, 8))
    with pytest.raises(ValueError, match="argument 'input': expected a C-contiguous"):
        swiglu(f16(2, 8, 3).transpose(0, 2, 1))
    with pytest.raises(ValueError, match=r"out: expected shape \(2, 3, 4\), got \(2, 3, 3\)"):
        swiglu(f16(2, 3, 8), out=np.empty((2, 3, 3), np.float16))


def test_zero_sized_tensors(libs) -> None:
    swiglu, _ = libs
    assert swiglu.swiglu(f16(0, 3, 8)).shape == (0, 3, 4)
    assert swiglu.swiglu(f16(2, 3, 0)).shape == (2, 3, 0)


def test_calls_from_several_threads_at_once(libs) -> None:
    swiglu, _ = libs
    inputs = [np.random.default_rng(i).standard_normal((64, 33, 200)).astype(np.float16)
              for i in range(6)]
    alone = [swiglu.swiglu(x) for x in inputs]
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        together = list(pool.map(swiglu.swiglu, inputs * 2))
    for got, want in zip(together, alone * 2):
        np.testing.assert_array_equal(got, want)


RUN_RMSNORM = """
import sys, numpy as np, ml_dtypes, tilec
lib = tilec.load(sys.argv[1])
rng = np.random.default_rng(1)
x = rng.standard_normal((37, 4096)).astype(ml_dtypes.bfloat16)
w = rng.standard_normal(4096).astype(ml_dtypes.bfloat16)
np.save(sys.argv[2], lib.rmsnorm(x, w).astype(np.float32))
print(lib.cpu_code)
"""


def test_the_default_library_runs_x86_64_v4_code_where_the_cpu_has_it(libs, tmp_path) -> None:
    """A library of the default --arch (x86-64-v3+v4) runs its x86-64-v4 code where
    /proc/cpuinfo lists AVX-512 F, BW, CD, DQ and VL, else its x86-64-v3 code, which
    ``TILEC_CPU=x86-64-v3`` also keeps to; both compute the same, to rounding."""
    _, rms = libs
    results = {}
    for forced in (False, True):
        env = {**os.environ, "TILEC_CPU": "x86-64-v3"} if forced else \
            {k: v for k, v in os.environ.items() if k != "TILEC_CPU"}
        done = subprocess.run([sys.executable, "-c", RUN_RMSNORM, rms.path,
                               str(tmp_path / f"{forced}.npy")],
                              capture_output=True, text=True, check=True, env=env)
        results[done.stdout.strip()] = np.load(tmp_path / f"{forced}.npy")
    detected = "x86-64-v4" if cpu_level("") == 4 else "x86-64-v3"
    assert (detected == "x86-64-v4") == has_avx512()       # the runtime reads the CPU right
    assert set(results) == {detected, "x86-64-v3"}
    assert_close(results[detected], results["x86-64-v3"], "bfloat16")


def test_a_library_of_one_arch_runs_that_code(tmp_path) -> None:
    path = tmp_path / "swiglu.so"
    assert main([str(OPS / "swiglu.tile"), "--arch", "x86-64-v3", "-o", str(path)]) == 0
    assert tilec.load(path).cpu_code == "x86-64-v3"


RUN_SWIGLU = """
import sys, numpy as np, tilec
try:
    lib = tilec.load(sys.argv[1])
    lib.swiglu(np.ones((1, 2, 8), np.float16))
    print("ran", lib.cpu_code)
except RuntimeError as e:
    print(e)
"""


LEVELS = {"x86-64-v2": 2, "x86-64-v3": 3, "x86-64-v4": 4}
NEEDS = {3: "x86-64-v3 CPUs (AVX2, FMA, BMI1 and BMI2)",
         4: "x86-64-v4 CPUs (AVX-512 F, BW, CD, DQ and VL)"}


def refusal(level: int, lowered: bool) -> str:
    """How an entry of a library whose code needs ``level`` starts its refusal."""
    said = " (as TILEC_CPU says)" if lowered else ""
    return f"swiglu: this library's code is for {NEEDS[level]}, which this one is not{said}: " \
        "build it"


def run_swiglu(path: Path, tilec_cpu: str, emulate: bool = False) -> str:
    """What RUN_SWIGLU prints for the library at ``path`` with TILEC_CPU set to ``tilec_cpu``
    ("": unset), on this CPU or on qemu's x86-64-v3 CPU (``emulate``)."""
    env = {k: v for k, v in os.environ.items() if k != "TILEC_CPU"}
    if tilec_cpu:
        env["TILEC_CPU"] = tilec_cpu
    command = [sys.executable, "-c", RUN_SWIGLU, str(path)]
    if emulate:
        command = [QEMU, *QEMU_V3_CPU, *command]
    return subprocess.run(command, capture_output=True, text=True, check=True,
                          env=env).stdout.strip()


@pytest.mark.parametrize("arch, cpu, needs", [
    ("x86-64-v3+v4", "x86-64-v2", 3), ("x86-64-v4", "x86-64-v3", 4)])
def test_a_cpu_below_the_librarys_code_is_refused_not_crashed(tmp_path, arch, cpu, needs):
    """On a CPU without the instructions of a library's code (TILEC_CPU lowers the level the
    library sees, as a CPU without them would), an entry fails with TILEC_ERR_DEVICE and
    says what to build instead, where running the code would end the process (SIGILL).  The
    refusal says "as TILEC_CPU says" only where TILEC_CPU, not the CPU, took the level down;
    which of the two this machine shows, the runtime says (``cpu_level``)."""
    path = tmp_path / "swiglu.so"
    assert main([str(OPS / "swiglu.tile"), "--arch", arch, "-o", str(path)]) == 0
    found = cpu_level("")
    assert run_swiglu(path, cpu).startswith(refusal(needs, lowered=found > LEVELS[cpu]))
    unset = run_swiglu(path, "")
    assert unset.startswith("ran") if found >= needs else unset.startswith(refusal(needs, False))


@pytest.mark.skipif(QEMU is None, reason="needs qemu-x86_64 (Debian's qemu-user, which "
                    ".ci/run installs) to run a library on a CPU without AVX-512")
def test_on_a_cpu_without_avx512_the_default_library_runs_its_avx2_code(tmp_path) -> None:
    """On qemu's Haswell (x86-64-v3, no AVX-512), whatever this machine's CPU: a library of
    the default --arch runs its x86-64-v3 code, one of x86-64-v4 alone refuses to run, in
    the words of a CPU that lacks the instructions rather than of TILEC_CPU."""
    for arch, want in [("x86-64-v3+v4", "ran x86-64-v3"),
                       ("x86-64-v4", refusal(4, lowered=False))]:
        path = tmp_path / f"{arch}.so"
        assert main([str(OPS / "swiglu.tile"), "--arch", arch, "-o", str(path)]) == 0
        assert run_swiglu(path, "", emulate=True).startswith(want)
        assert run_swiglu(path, "x86-64-v3", emulate=True).startswith(want)


def test_a_library_without_tilec_cpu_code_loads(tmp_path) -> None:
    """A cpu library of a tilec before tilec_cpu_code: cpu_code is None."""
    (tmp_path / "old.c").write_text(
        'const char* tilec_metadata(void) { return "{\\"format\\": 1, \\"target\\": '
        '\\"cpu\\", \\"functions\\": {}}"; }\n'
        'const char* tilec_last_error(void) { return ""; }\n')
    subprocess.run([os.environ.get("CC") or "cc", "-shared", "-fPIC", "-o",
                    str(tmp_path / "old.so"), str(tmp_path / "old.c")], check=True)
    old = tilec.load(tmp_path / "old.so")
    assert (old.target, old.cpu_code, old.functions) == ("cpu", None, {})


def test_library_metadata_and_repr(libs) -> None:
    _, rms = libs
    meta = rms.metadata
    assert (meta["target"], meta["arch"], meta["format"]) == ("cpu", "x86-64-v3+v4", 1)
    fn = meta["functions"]["rmsnorm"]
    assert [(p["name"], p["kind"], p["dtype"], p["shape"], p["default"]) for p in fn["params"]] \
        == [("x", "tensor", "bfloat16", ["seq", "hidden"], None),
            ("weight", "tensor", "bfloat16", ["hidden"], None),
            ("eps", "scalar", "float32", [], 1e-6)]
    assert fn["results"] == [{"dtype": "bfloat16", "shape": ["seq", "hidden"]}]
    assert (fn["symbols"], fn["lead"], fn["generic"]) == (["seq", "hidden"], None, True)
    assert [(v["function"], v["binding"]) for v in fn["variants"]] == [
        ("rmsnorm__seq_2048", {"seq": 2048}), ("rmsnorm__seq_8192", {"seq": 8192}),
        ("rmsnorm__seq_32768", {"seq": 32768})]
    assert repr(rms.rmsnorm).startswith("<tilec function rmsnorm(x: bfloat16[seq, hidden], "
                                        "weight: bfloat16[hidden], eps: float32 = 1e-06) -> "
                                        "bfloat16[seq, hidden] from ")
    assert rms["rmsnorm"] is rms.rmsnorm
    with pytest.raises(AttributeError, match="has no function 'swiglu'; it has: rmsnorm"):
        rms.swiglu


LOADER_ONLY = """
import sys, numpy as np, tilec
lib = tilec.load(sys.argv[1])
y = lib.swiglu(np.ones((1, 2, 4), np.float16))
heavy = sorted(m for m in sys.modules
               if m.split('.')[0] in ('torch_mlir', 'llvmlite', 'lark', 'jinja2')
               or m in ('tilec.mlir', 'tilec.driver', 'tilec.api'))
print(float(y[0, 0, 0]), heavy)
"""


def test_the_loader_imports_neither_compiler_nor_mlir(libs) -> None:
    swiglu, _ = libs
    done = subprocess.run([sys.executable, "-c", LOADER_ONLY, swiglu.path], check=True,
                          capture_output=True, text=True)
    assert done.stdout.split() == ["0.73095703125", "[]"]   # silu(1) in float16


# ---------------------------------------------------------------------------------------------
# The C runtime on its own


@pytest.fixture(scope="module")
def runtime() -> ctypes.CDLL:
    return ctypes.CDLL(runtime_library())


ROWS = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


@pytest.mark.parametrize("rows,traffic", [(1, 1 << 30), (7, 10), (1000, 1 << 20),
                                          (4097, 1 << 30)])
def test_parallel_for_runs_every_row_once(runtime, rows: int, traffic: int) -> None:
    seen = np.zeros(rows, np.int64)

    @ROWS
    def body(ctx, begin: int, end: int) -> None:
        seen[begin:end] += 1

    runtime.tilec_parallel_for(ctypes.c_int64(rows), ctypes.c_int64(traffic), body, None)
    np.testing.assert_array_equal(seen, 1)


@pytest.mark.parametrize("items", [1, 2, 14, 33])
def test_parallel_items_hands_out_one_row_at_a_time(runtime, items: int) -> None:
    """The GEMM's launches: every item a chunk of its own (14 items in 8 chunks of 1 or 2
    left a thread idle for an item at the end), each run once."""
    calls = []

    @ROWS
    def body(ctx, begin: int, end: int) -> None:
        calls.append((begin, end))

    runtime.tilec_parallel_items(ctypes.c_int64(items), body, None)
    threads = runtime.tilec_num_threads()
    want = [(i, i + 1) for i in range(items)] if threads > 1 else [(0, items)]
    assert sorted(calls) == want


def test_thread_count_comes_from_the_environment(tmp_path: Path, runtime) -> None:
    probe = ("import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).tilec_num_threads())")
    path = runtime._name
    for env, want in [("3", "3"), ("1", "1"), ("zero", str(len(os.sched_getaffinity(0))))]:
        done = subprocess.run([sys.executable, "-c", probe, path], capture_output=True,
                              text=True, check=True, env={**os.environ, "TILEC_NUM_THREADS": env})
        assert done.stdout.strip() == want


def test_cpu_level_comes_from_the_cpu_lowered_by_tilec_cpu(runtime) -> None:
    """4 with AVX-512 (this suite's kernels need at least x86-64-v3, so 3 without); TILEC_CPU
    lowers it, and only lowers it; other values are ignored."""
    probe = ("import ctypes, sys; r = ctypes.CDLL(sys.argv[1]); "
             "print(r.tilec_cpu_level(), r.tilec_cpu_level_lowered())")
    found = str(cpu_level(""))
    for env, want in [("", f"{found} 0"), ("x86-64-v3", f"3 {int(found == '4')}"),
                      ("x86-64-v2", "2 1"), ("x86-64-v4", f"{found} 0"), ("v9", f"{found} 0")]:
        done = subprocess.run([sys.executable, "-c", probe, runtime._name], capture_output=True,
                              text=True, check=True, env={**os.environ, "TILEC_CPU": env})
        assert done.stdout.strip() == want, env


def test_half_conversions_round_to_nearest_even(runtime) -> None:
    for name, dtype in [("f16", np.float16), ("bf16", ml_dtypes.bfloat16)]:
        to_bits = getattr(runtime, f"tilec_f32_to_{name}")
        to_bits.argtypes, to_bits.restype = [ctypes.c_float], ctypes.c_uint16
        widen = getattr(runtime, f"tilec_{name}_to_f32")
        widen.argtypes, widen.restype = [ctypes.c_uint16], ctypes.c_float
        special = np.array([0.0, -0.0, np.inf, -np.inf, 65504.0, 65520.0, 1e-8, 6e-8, 3e-5,
                            1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, 3.4e38], np.float32)
        values = np.concatenate([special, np.random.default_rng(0).standard_normal(2000)
                                 .astype(np.float32) * np.float32(100)])
        got = np.array([to_bits(float(v)) for v in values], np.uint16)
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(got, values.astype(dtype).view(np.uint16))
        assert to_bits(float("nan")) & 0x7fff > (0x7c00 if name == "f16" else 0x7f80)
        every = np.arange(0, 1 << 16, 97, dtype=np.uint16)
        widened = np.array([widen(int(b)) for b in every], np.float32)
        np.testing.assert_array_equal(widened, every.view(dtype).astype(np.float32))


def test_cases_run_in_a_forked_child(libs) -> None:
    swiglu, _ = libs
    x = f16(64, 64, 256)
    want = swiglu.swiglu(x)      # starts the parent's pool
    pid = os.fork()
    if pid == 0:                 # the child must not wait for the parent's threads
        os._exit(0 if np.array_equal(swiglu.swiglu(x), want) else 1)
    assert os.waitpid(pid, 0)[1] == 0
    assert_close(swiglu.swiglu(x), want, "float16")
