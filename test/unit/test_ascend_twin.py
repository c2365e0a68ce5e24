"""The Ascend C CPU twin (tilec/runtime/ascend_twin): hand-written Ascend C kernels under
test/unit/ascend_twin are built with g++ against it and run through ctypes.  Correct kernels
match NumPy (double-buffered SiLU with DataCopyPad tails, row reductions with V->S sync, every
vector op, every Cast round mode); broken kernels fail with a message naming the kernel, block,
operation, numbers and source line; one build runs clean under ASan/UBSan."""
from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from conftest import REPO

TWIN = REPO / "tilec" / "runtime" / "ascend_twin"
KERNELS = Path(__file__).resolve().parent / "ascend_twin"
CXX = shutil.which("g++")
FLAGS = ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-I", str(TWIN)]
SANITIZE = ["-O0", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]

pytestmark = pytest.mark.skipif(CXX is None, reason="the twin tests need g++")

RINT, FLOOR, CEIL, ROUND, TRUNC, ODD = range(6)   # tilec_twin::Rounding / the Cast rows
P = ctypes.c_void_p


def _compile(args: list) -> None:
    done = subprocess.run([CXX, *map(str, args)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    """Objects in parallel, then the test library and the sanitizer program."""
    out = tmp_path_factory.mktemp("twin")
    sources = {"runtime": TWIN / "twin_runtime.cpp", "ok": KERNELS / "kernels_ok.cpp",
               "bad": KERNELS / "kernels_bad.cpp", "main": KERNELS / "asan_main.cpp"}
    jobs = [[*FLAGS, "-O1", "-fPIC", "-c", src, "-o", out / f"{name}.o"]
            for name, src in sources.items() if name != "main"]
    jobs += [[*FLAGS, *SANITIZE, "-c", src, "-o", out / f"{name}.asan.o"]
             for name, src in sources.items()]
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(_compile, jobs))
    _compile(["-shared", out / "ok.o", out / "bad.o", out / "runtime.o", "-o", out / "libtwin.so"])
    _compile([*SANITIZE, *(out / f"{n}.asan.o" for n in sources), "-o", out / "twin_asan"])
    return out


@pytest.fixture(scope="module")
def lib(build: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(build / "libtwin.so"))
    i32, i64, u64 = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64
    signatures = {
        "run_silu": ([P, P, i64, i32, i32], i32),
        "run_row_reduce": ([P, P, P, i32, i32, i32], i32),
        "run_ops": ([ctypes.c_int, P, P, P, P], i32),
        "run_casts": ([P, P, P, P, P, P], i32),
        "run_block_ids": ([P, i64], i32),
        "run_reduce_half": ([P, P, i32], i32),
        "run_bad": ([ctypes.c_char_p, i32], i32),
        "reduce_work": ([ctypes.c_int, ctypes.c_int, u64, ctypes.c_int], u64),
        "conv_f32_to_f16": ([P, P, i64, ctypes.c_int, ctypes.c_int], None),
        "conv_f32_to_bf16": ([P, P, i64, ctypes.c_int, ctypes.c_int], None),
        "conv_f16_to_f32": ([P, P, i64], None),
        "tilec_twin_last_error": ([], ctypes.c_char_p),
        "tilec_twin_set_strict": ([ctypes.c_int], None),
    }
    for name, (args, res) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
    return lib


@pytest.fixture
def twin(lib):
    """The library in strict mode (level 1), whatever TILEC_TWIN_STRICT says."""
    lib.tilec_twin_set_strict(1)
    yield lib
    lib.tilec_twin_set_strict(-1)


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def _error(lib) -> str:
    return lib.tilec_twin_last_error().decode()


# --- correct kernels ------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 7, 127, 255, 1000, 4097])
def test_double_buffered_silu_matches_numpy(twin, n):
    rng = np.random.default_rng(n)
    x = rng.uniform(-8, 8, n).astype(np.float16)
    y = np.full(n, np.nan, np.float16)
    assert twin.run_silu(_ptr(x), _ptr(y), n, 4, 256) == 0, _error(twin)
    xf = x.astype(np.float32)
    want = (xf / (np.float32(1) + np.exp(-xf))).astype(np.float16)
    np.testing.assert_allclose(y.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=1e-3)
    assert _error(twin) == ""


@pytest.mark.parametrize("rows, cols", [(1, 1), (5, 7), (10, 64), (7, 100), (3, 1000), (4, 4097)])
def test_row_reduce_with_v_s_sync_matches_numpy(twin, rows, cols):
    rng = np.random.default_rng(rows * cols)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    total, peak = np.zeros(rows, np.float32), np.zeros(rows, np.float32)
    assert twin.run_row_reduce(_ptr(x), _ptr(total), _ptr(peak), rows, cols, 3) == 0, _error(twin)
    np.testing.assert_allclose(total, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(peak, x.max(axis=1))


def _saturate_half(v: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.clip(v.astype(np.float16), -65504, 65504).astype(np.float32)


def _tree_sum_half(x: np.ndarray) -> np.float32:
    """ReduceSum's documented order on Atlas A2: a binary tree in each 256-byte repeat,
    repeats added in order, every half addition saturating."""
    total = None
    for start in range(0, len(x), 128):
        lanes = np.zeros(128, np.float32)
        chunk = x[start:start + 128].astype(np.float32)
        lanes[: len(chunk)] = chunk
        while len(lanes) > 1:
            lanes = _saturate_half(lanes[0::2] + lanes[1::2])
        total = lanes[0] if total is None else _saturate_half(np.array([total + lanes[0]]))[0]
    return total


@pytest.mark.parametrize("n", [4, 100, 128, 300, 4096])
def test_half_reductions_follow_the_documented_order(twin, n):
    rng = np.random.default_rng(n)
    x = rng.uniform(-100, 100, n).astype(np.float16)
    if n == 4:  # the ReduceSum page's example: 60000 + 60000 saturates to 65504
        x = np.array([60000, 60000, -30000, 100], np.float16)
    out = np.zeros(5, np.float16)
    assert twin.run_reduce_half(_ptr(x), _ptr(out), n) == 0, _error(twin)
    assert out[0] == _tree_sum_half(x)
    bits = out.view(np.uint16)
    assert (out[1], bits[2], out[3], bits[4]) == (x.max(), x.argmax(), x.min(), x.argmin())
    if n == 4:
        assert out[0] == 35584   # 65504 + (-29904), to nearest even; the page says "35604"


def test_work_sizes_follow_the_documented_formula(lib):
    """The worked examples of the ReduceSum / ReduceMax pages (elements)."""
    assert lib.reduce_work(0, 1, 288, 0) == 16
    assert lib.reduce_work(0, 1, 8320, 0) == 80
    assert lib.reduce_work(1, 1, 65408, 0) == 1024
    assert lib.reduce_work(1, 1, 65408, 1) == 1056
    assert lib.reduce_work(1, 1, 8320, 1) == 176
    assert lib.reduce_work(1, 1, 32640, 1) == 544
    assert lib.reduce_work(1, 1, 512, 1) == 32
    assert lib.reduce_work(1, 0, 8320, 1) == 288


def test_every_block_runs_with_its_index(twin):
    out = np.zeros(5, np.int32)
    assert twin.run_block_ids(_ptr(out), 5) == 0, _error(twin)
    assert out.tolist() == [5, 1005, 2005, 3005, 4005]
    assert twin.run_block_ids(_ptr(out), 0) == 1
    assert "blockDim 0 is outside 1..65535" in _error(twin)


OPS = {  # row of kernels_ok.cpp's OpsKernel -> (reference in float32, transcendental)
    0: (lambda a, b: a + b, False), 1: (lambda a, b: a - b, False),
    2: (lambda a, b: a * b, False), 3: (lambda a, b: a / b, False),
    4: (np.maximum, False), 5: (np.minimum, False),
    6: (lambda a, b: a + np.float32(1.5), False), 7: (lambda a, b: a * np.float32(-2), False),
    8: (lambda a, b: np.maximum(a, np.float32(0.25)), False),
    9: (lambda a, b: np.minimum(a, np.float32(0.25)), False),
    10: (lambda a, b: np.exp(a), True), 11: (lambda a, b: np.log(np.abs(a)), True),
    12: (lambda a, b: np.abs(a), False), 13: (lambda a, b: np.sqrt(np.abs(a)), False),
    14: (lambda a, b: np.float32(1) / np.sqrt(np.abs(a)), False),
    15: (lambda a, b: np.float32(1) / a, False), 16: (lambda a, b: np.maximum(a, 0), False),
    17: (lambda a, b: np.where(a < b, a, b), False),
    18: (lambda a, b: np.where(a < b, a, np.float32(3)), False),
    19: (lambda a, b: np.full_like(a, 7), False),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_vector_ops_match_numpy(twin, dtype):
    rng = np.random.default_rng(7)
    a = (rng.uniform(0.25, 4, 256) * rng.choice([-1, 1], 256)).astype(dtype)
    b = rng.uniform(-4, 4, 256).astype(dtype)
    out = np.zeros((20, 256), dtype)
    mask = np.zeros(32, np.uint8)
    assert twin.run_ops(int(dtype == np.float16), _ptr(a), _ptr(b), _ptr(out), _ptr(mask)) == 0, \
        _error(twin)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    for row, (ref, transcendental) in OPS.items():
        want = ref(a32, b32).astype(np.float32).astype(dtype).astype(np.float32)
        rtol = (2e-6 if dtype == np.float32 else 2e-3) if transcendental else 0
        np.testing.assert_allclose(out[row].astype(np.float32), want, rtol=rtol, err_msg=f"row {row}")
    # Compare's mask: element i is bit i % 8 of byte i / 8.
    np.testing.assert_array_equal(mask, np.packbits(a < b, bitorder="little"))


def _finite_table(dtype) -> tuple[np.ndarray, np.ndarray]:
    """Every finite value of a 16-bit format, ascending, with its bit pattern."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    with np.errstate(invalid="ignore"):
        values = bits.view(dtype).astype(np.float64)
    keep = np.isfinite(values) & ~((values == 0) & (bits >= 0x8000))
    order = np.argsort(values[keep], kind="stable")
    return values[keep][order], bits[keep][order]


def _round_to(x32: np.ndarray, dtype, mode: int) -> np.ndarray:
    """float32 -> half/bfloat16 values under a Cast rounding mode, overflow saturating."""
    values, bits = _finite_table(dtype)
    x = x32.astype(np.float64)
    hi_i = np.searchsorted(values, x, side="left").clip(0, len(values) - 1)
    lo_i = np.searchsorted(values, x, side="right").clip(1, len(values)) - 1
    lo, hi = values[lo_i], values[hi_i]
    lo = np.where(lo > x, -np.inf, lo)
    hi = np.where(hi < x, np.inf, hi)
    exact = lo == x
    lo_odd, hi_odd = bits[lo_i] & 1, bits[hi_i] & 1
    d_lo, d_hi = x - lo, hi - x
    nearer_hi = (d_hi < d_lo) | ((d_hi == d_lo) & np.where(mode == RINT, lo_odd == 1, x > 0))
    pick = {RINT: np.where(nearer_hi, hi, lo), ROUND: np.where(nearer_hi, hi, lo),
            FLOOR: lo, CEIL: hi, TRUNC: np.where(x > 0, lo, hi),
            ODD: np.where(lo_odd == 1, lo, hi)}[mode]
    out = np.where(exact, x, pick)
    return np.clip(out, values[0], values[-1])


def _round_int(x: np.ndarray, mode: int) -> np.ndarray:
    x = x.astype(np.float64)
    r = {RINT: np.rint, FLOOR: np.floor, CEIL: np.ceil, TRUNC: np.trunc,
         ROUND: lambda v: np.sign(v) * np.floor(np.abs(v) + 0.5)}[mode](x)
    return r


def _cast_inputs() -> np.ndarray:
    special = [1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11), 1 + 2**-8, -(1 + 3 * 2**-8), 0.5, -0.5,
               1.5, 2.5, -2.5, 65519, 65520, 70000, -1e6, 3e9, -3e9, 1e-8, -3e-7, 6e-5, 0.0,
               -0.0, 2**24 + 1, 33554435]
    rng = np.random.default_rng(3)
    x = rng.standard_normal(256) * 300
    x[: len(special)] = special
    return x.astype(np.float32)


def test_casts_follow_every_round_mode(twin):
    x = _cast_inputs()
    h, b = np.zeros((6, 256), np.float16), np.zeros((5, 256), ml_dtypes.bfloat16)
    i, f, hi = np.zeros((5, 256), np.int32), np.zeros((6, 256), np.float32), np.zeros(256, np.int32)
    assert twin.run_casts(_ptr(x), _ptr(h), _ptr(i), _ptr(b), _ptr(f), _ptr(hi)) == 0, _error(twin)
    for mode in range(6):
        np.testing.assert_array_equal(h[mode].astype(np.float64), _round_to(x, np.float16, mode),
                                      err_msg=f"half mode {mode}")
    for mode in range(5):
        np.testing.assert_array_equal(b[mode].astype(np.float64),
                                      _round_to(x, ml_dtypes.bfloat16, mode), err_msg=f"bf16 {mode}")
        ints = _round_int(x, mode).clip(-2**31, 2**31 - 1).astype(np.int64)
        np.testing.assert_array_equal(i[mode], ints, err_msg=f"int32 mode {mode}")
        np.testing.assert_array_equal(f[mode], _round_int(x, mode).astype(np.float32))
    # int32 -> float rounding toward zero; half -> int32 rounding half away from zero.
    exact = i[RINT].astype(np.float64)
    near = exact.astype(np.float32)
    toward_zero = np.where(np.abs(near.astype(np.float64)) > np.abs(exact),
                           np.nextafter(near, np.float32(0)), near)
    np.testing.assert_array_equal(f[5], toward_zero)
    np.testing.assert_array_equal(hi, _round_int(h[RINT].astype(np.float32), ROUND).astype(np.int32))


def test_scalar_conversions_match_numpy(lib):
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    wide = np.zeros(1 << 16, np.float32)
    lib.conv_f16_to_f32(_ptr(halves), _ptr(wide), len(halves))
    want = halves.view(np.float16).astype(np.float32)
    np.testing.assert_array_equal(wide.view(np.uint32)[~np.isnan(want)],
                                  want.view(np.uint32)[~np.isnan(want)])
    assert np.isnan(wide[np.isnan(want)]).all()
    # Every midpoint between neighbouring halves (ties) plus random float32 bit patterns.
    finite = np.sort(want[np.isfinite(want)].astype(np.float64))
    mids = ((finite[1:] + finite[:-1]) / 2).astype(np.float32)
    rand = np.random.default_rng(0).integers(0, 1 << 32, 200_000, dtype=np.uint64)
    rand = rand.astype(np.uint32).view(np.float32)
    x = np.concatenate([mids, rand[~np.isnan(rand)]])
    got = np.zeros(len(x), np.uint16)
    lib.conv_f32_to_f16(_ptr(x), _ptr(got), len(x), RINT, 0)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got, x.astype(np.float16).view(np.uint16))
    lib.conv_f32_to_bf16(_ptr(x), _ptr(got), len(x), RINT, 0)
    np.testing.assert_array_equal(got, x.astype(ml_dtypes.bfloat16).view(np.uint16))
    for mode in (FLOOR, CEIL, ROUND, TRUNC, ODD):
        sample = np.ascontiguousarray(x[::97])
        out = np.zeros(len(sample), np.uint16)
        lib.conv_f32_to_f16(_ptr(sample), _ptr(out), len(sample), mode, 1)
        np.testing.assert_array_equal(out.view(np.float16).astype(np.float64),
                                      _round_to(sample, np.float16, mode), err_msg=f"mode {mode}")


# --- rules caught -----------------------------------------------------------------------------

def _violation_lines() -> dict[str, int]:
    """kernels_bad.cpp: the line marked `// VIOLATION` in each BAD(name) kernel."""
    lines, current = {}, None
    for number, text in enumerate((KERNELS / "kernels_bad.cpp").read_text().splitlines(), 1):
        if m := re.match(r"BAD\((\w+)\)", text):
            current = m.group(1)
        if "// VIOLATION" in text:
            lines[current] = number
    return lines


VIOLATIONS = {  # kernel -> fragments of the message
    "ub_overflow": ["InitBuffer: UB overflow: TBuf<VECCALC> asks for 1 x 70000 bytes",
                    "only 65536 of the 196608 bytes of UB are left",
                    "TQue<VECIN, 2> at kernels_bad.cpp:"],
    "misaligned_count": ["DataCopy: DataCopy of 100 half (200 bytes) is not a multiple of 32 bytes",
                         "silently copy only 192 bytes"],
    "misaligned_ub": ["DataCopy: dst at UB offset 16 is not 32-byte aligned"],
    "deque_empty": ["DeQue: TQue<VECIN, 2>", "is empty"],
    "double_free": ["FreeTensor: double free"],
    "leak": ["kernel end: the tensor allocated at kernels_bad.cpp:{line}", "was never freed"],
    "queue_not_empty": ["kernel end: TQue<VECIN, 1>", "still holds 1 tensor(s) (EnQue at "
                        "kernels_bad.cpp:{line})"],
    "alloc_beyond_num": ["AllocTensor: all 1 buffer(s) of TQue<VECIN, 2>", "are in use"],
    "depth_overflow": ["EnQue: TQue<VECIN, 1>", "already holds 1 tensor(s), its depth"],
    "use_after_free": ["Abs: src is a tensor of TQue<VECIN, 1>", "that was freed"],
    "use_while_queued": ["Abs: src is in the queue of TQue<VECIN, 1>"],
    "missing_v_s": ["GetValue: missing sync: S reads UB[", "written by V (ReduceSum at",
                    "HardEvent::V_S"],
    "missing_mte2_v": ["Muls: missing sync: V reads UB[0, 256) written by MTE2 (DataCopy at",
                       "HardEvent::MTE2_V"],
    "missing_v_mte3": ["DataCopy: missing sync: MTE3 reads UB[0, 256) written by V (Duplicate at",
                       "HardEvent::V_MTE3"],
    "missing_s_mte3": ["missing sync: MTE3 reads UB[0, 2) written by S (SetValue at",
                       "HardEvent::S_MTE3"],
    "war_mte2_over_v": ["missing sync: MTE2 writes UB[0, 256) that V may still be reading (Abs at"],
    "wait_without_set": ["WaitFlag<HardEvent::V_S>(1) without a SetFlag before it"],
    "flag_never_waited": ["kernel end: SetFlag<HardEvent::MTE2_V>(3) at kernels_bad.cpp:{line} "
                          "was never waited for"],
    "barrier_s": ["PipeBarrier<PIPE_S> raises a hardware error"],
    "reduce_work_small": ["ReduceMax: sharedTmpBuffer has 16 half elements but count 2048 needs "
                          "at least 32"],
    "cast_mode": ["Cast: float -> bfloat16_t does not support RoundMode::CAST_NONE"],
    "compare_count": ["Compare: count 100 of float is 400 bytes, not a multiple of 256 bytes"],
    "partial_overlap": ["Add: src0 UB[0, 512) and dst UB[32, 544) overlap partially"],
    "select_scratch": ["Select: this Select mode needs 8192 bytes of UB"],
    "gm_beyond_tensor": ["DataCopy: GM bytes [0, 64) from x+2016 are beyond the GlobalTensor's "
                         "16 elements"],
    "gm_beyond_buffer": ["DataCopy: writes GM bytes [0, 4096) of buffer 'y', which has only 2048"],
    "mte3_overlap_no_barrier": ["MTE3 writes GM y bytes [224, 256) that MTE3 wrote before",
                                "PipeBarrier<PIPE_MTE3>"],
    "second_pipe": ["TPipe: a second TPipe"],
    "uninitialised_tensor": ["Duplicate: dst is a LocalTensor that was never allocated"],
    "tensor_bounds": ["Duplicate: dst needs 258 bytes but the tensor has only 256"],
}
AT_END = {"leak", "queue_not_empty", "flag_never_waited"}   # reported when the kernel returns


@pytest.mark.parametrize("name", sorted(VIOLATIONS))
def test_violation_is_an_error_naming_kernel_block_op_and_line(twin, name):
    assert twin.run_bad(name.encode(), 1) == 1
    message = _error(twin)
    line = _violation_lines()[name]
    assert message.startswith(f"kernel {name} block 0: "), message
    for fragment in VIOLATIONS[name]:
        assert fragment.format(line=line) in message, message
    if name not in AT_END:
        assert message.endswith(f"(at kernels_bad.cpp:{line})"), message


def test_blocks_writing_the_same_gm_bytes_race(twin):
    assert twin.run_bad(b"cross_core_race", 1) == 0
    assert twin.run_bad(b"cross_core_race", 2) == 1
    assert _error(twin) == ("kernel cross_core_race: blocks 0 and 1 both write GM y bytes "
                            "[128, 256): AI cores run in parallel, so the result depends on "
                            "their timing")


def test_strict_levels(lib, monkeypatch):
    for level, rc in ((0, 0), (1, 0), (2, 1)):
        lib.tilec_twin_set_strict(level)
        assert lib.run_bad(b"vv_no_barrier", 1) == rc
    assert "without PipeBarrier<PIPE_V> in between" in _error(lib)
    assert lib.run_bad(b"vv_with_barrier", 1) == 0
    lib.tilec_twin_set_strict(0)
    assert lib.run_bad(b"missing_v_s", 1) == 0       # sync checks off, other rules on
    assert lib.run_bad(b"misaligned_count", 1) == 1
    lib.tilec_twin_set_strict(-1)                     # back to TILEC_TWIN_STRICT, default 1
    monkeypatch.setenv("TILEC_TWIN_STRICT", "0")
    assert lib.run_bad(b"missing_v_s", 1) == 0
    monkeypatch.delenv("TILEC_TWIN_STRICT")
    assert lib.run_bad(b"missing_v_s", 1) == 1


def test_pipe_reset_frees_the_unified_buffer(twin):
    assert twin.run_bad(b"reset_and_reuse", 1) == 0, _error(twin)


def test_a_failed_launch_leaves_nothing_behind(twin):
    assert twin.run_bad(b"leak", 1) == 1
    x, y = np.ones(64, np.float16), np.zeros(64, np.float16)
    assert twin.run_silu(_ptr(x), _ptr(y), 64, 2, 32) == 0, _error(twin)
    assert _error(twin) == ""


def test_sanitizers_find_nothing(build):
    """The twin and every test kernel, correct and broken, under ASan and UBSan."""
    done = subprocess.run([build / "twin_asan"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 failure(s)" in done.stdout
    assert "runtime error" not in done.stderr and "AddressSanitizer" not in done.stderr
