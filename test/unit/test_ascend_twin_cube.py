"""The Cube of the Ascend C twin: the examples of the public API pages (asc-devkit
docs/zh/api, 矩阵计算（ISASI）) transcribed as tests -- the ND2NZ layouts of DataCopy GM->L1
(its "连续搬运" and "非连续搬运" examples), LoadData 2D's fractal moves (its 非连续搬入,
设置搬运起始位置 and 分形转置 examples), Mmad's data types and Fixpipe's conversions -- a GEMM
at awkward sizes through the whole path, a mixed AIC/AIV kernel ordered by cross-core flags,
and one test per misuse the twin catches.  The kernels are test/unit/ascend_twin/cube_*.cpp."""
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
FLAGS = ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-O1", "-fPIC", "-I", str(TWIN)]
P = ctypes.c_void_p

pytestmark = pytest.mark.skipif(CXX is None, reason="the twin tests need g++")


def _compile(args: list) -> None:
    done = subprocess.run([CXX, *map(str, args)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> ctypes.CDLL:
    out = tmp_path_factory.mktemp("cube")
    sources = [TWIN / "twin_runtime.cpp", TWIN / "twin_cube.cpp", KERNELS / "cube_kernels.cpp",
               KERNELS / "cube_bad.cpp"]
    jobs = [[*FLAGS, "-c", s, "-o", out / f"{s.stem}.o"] for s in sources]
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(_compile, jobs))
    _compile(["-shared", *(out / f"{s.stem}.o" for s in sources), "-lpthread",
              "-o", out / "libcube.so"])
    lib = ctypes.CDLL(str(out / "libcube.so"))
    u16p, u32, i32 = ctypes.POINTER(ctypes.c_uint16), ctypes.c_uint32, ctypes.c_int
    for name, args in {"run_nd2nz": [u16p, u32, P, P],
                       "run_load": [i32, u16p, u32, u32, P, P],
                       "run_gemm": [i32, i32, u32, u32, u32, i32, P, P, P],
                       "run_mix_relu": [i32, u32, u32, u32, P, P, P, P],
                       "run_mix_ids": [i32, P],
                       "run_cube_bad": [ctypes.c_char_p, i32, P, P]}.items():
        getattr(lib, name).argtypes, getattr(lib, name).restype = args, i32
    lib.tilec_twin_last_error.restype = ctypes.c_char_p
    return lib


def _p(a: np.ndarray) -> int:
    return a.ctypes.data


def _error(lib) -> str:
    return lib.tilec_twin_last_error().decode()


def _params(*values: int):
    return (ctypes.c_uint16 * len(values))(*values)


# --- DataCopy GM -> L1 with ND2NZ --------------------------------------------------------------

def _nd2nz_expected(src, l1_elems, nd, n, d, src_nd, src_d, c0s, ns, nz_m):
    """The page's layout: row r, column c of ND matrix i to
    i * dstNzMatrixStride + (c // 16) * dstNzC0Stride * 16 + r * dstNzNStride * 16 + c % 16
    (half: C0 = 16 elements); the columns up to the next 32 bytes are zeros.  Returns the
    expected L1 and the mask of the positions the copy writes."""
    want, mask = np.zeros(l1_elems, np.float16), np.zeros(l1_elems, bool)
    for i in range(nd):
        for r in range(n):
            for c in range(-(-d // 16) * 16):
                at = i * nz_m + (c // 16) * c0s * 16 + r * ns * 16 + c % 16
                want[at] = src[i * src_nd + r * src_d + c] if c < d else 0
                mask[at] = True
    return want, mask


@pytest.mark.parametrize("case", [
    # 连续搬运: ndNum 1, nValue 16, dValue 23, srcDValue 32, dstNzC0Stride 16, dstNzNStride 1
    (1, 16, 23, 0, 32, 16, 1, 0),
    # 非连续搬运: ndNum 2, nValue 8, dValue 23, srcNdMatrixStride 384, srcDValue 32,
    # dstNzC0Stride 37, dstNzNStride 2, dstNzMatrixStride 320
    (2, 8, 23, 384, 32, 37, 2, 320),
    # the 调用示例: A of m = 40, k = 56, dstNzC0Stride CeilAlign(40, 16)
    (1, 40, 56, 0, 56, 48, 1, 0),
])
def test_nd2nz_follows_the_page_examples(lib, case):
    src = (np.arange(4096) % 2000).astype(np.float16)
    l1_elems = 4096
    out = np.full(l1_elems, np.nan, np.float16)
    assert lib.run_nd2nz(_params(*case), l1_elems * 2, _p(src), _p(out)) == 0, _error(lib)
    want, mask = _nd2nz_expected(src, l1_elems, *case)
    np.testing.assert_array_equal(out[mask], want[mask])
    assert np.isnan(out[~mask]).all()      # nothing else written: the rest is L1's garbage


def test_nd2nz_with_a_zero_count_is_a_nop(lib):
    src, out = np.ones(256, np.float16), np.zeros(256, np.float16)
    assert lib.run_nd2nz(_params(0, 16, 16, 0, 16, 16, 1, 0), 512, _p(src), _p(out)) == 0
    assert np.isnan(out).all()


# --- LoadData 2D ---------------------------------------------------------------------------------

def _fractals(a: np.ndarray, elem: int) -> np.ndarray:
    return a.reshape(-1, 512 // elem)


@pytest.mark.parametrize("dtype, start, repeat, src_stride, dst_gap", [
    (np.float32, 0, 4, 2, 2),   # 非连续搬入: four float fractals, srcStride 2, dstGap 2
    (np.float32, 1, 4, 2, 2),   # 设置搬运起始位置: startIndex 1 skips the first fractal
    (np.float32, 0, 2, 1, 2),   # six float fractals, three calls of two: one call of them
    (np.float16, 0, 3, 1, 0),
])
def test_load_data_moves_fractals_as_the_page_shows(lib, dtype, start, repeat, src_stride,
                                                    dst_gap):
    elem = np.dtype(dtype).itemsize
    l1 = np.arange(16 * 512 // elem).astype(dtype)
    l0 = np.zeros(16 * 512 // elem, dtype)
    prm = _params(start, repeat, src_stride, dst_gap, 0)
    assert lib.run_load(int(dtype is np.float32), prm, l1.nbytes, l0.nbytes, _p(l1),
                        _p(l0)) == 0, _error(lib)
    src, dst = _fractals(l1, elem), _fractals(l0, elem)
    for j in range(repeat):
        np.testing.assert_array_equal(dst[j * (1 + dst_gap)], src[start + j * src_stride])
    untouched = set(range(len(dst))) - {j * (1 + dst_gap) for j in range(repeat)}
    assert all(np.isnan(dst[f]).all() for f in untouched)


def test_load_data_transposes_each_fractal(lib):
    """分形转置: half, repeatTimes 2, srcStride 2, dstGap 2, ifTranspose 1."""
    l1 = np.arange(8 * 256).astype(np.float16)
    l0 = np.zeros(8 * 256, np.float16)
    assert lib.run_load(0, _params(0, 2, 2, 2, 1), l1.nbytes, l0.nbytes, _p(l1),
                        _p(l0)) == 0, _error(lib)
    src, dst = l1.reshape(-1, 16, 16), l0.reshape(-1, 16, 16)
    np.testing.assert_array_equal(dst[0], src[0].T)
    np.testing.assert_array_equal(dst[3], src[2].T)


# --- Mmad and Fixpipe ----------------------------------------------------------------------------

def _ints(shape, rng, dtype) -> np.ndarray:
    """Small integers: every product and sum is exact in float, whatever the order."""
    return rng.integers(-4, 5, size=shape).astype(dtype)


@pytest.mark.parametrize("m, n, k", [(16, 16, 16), (40, 36, 56), (1, 7, 127), (33, 100, 20)])
@pytest.mark.parametrize("trans_b", [False, True])
def test_half_gemm_accumulates_in_float(lib, m, n, k, trans_b):
    rng = np.random.default_rng(m * n + k)
    a = _ints((m, k), rng, np.float16)
    b = _ints((k, n), rng, np.float16)
    c = np.zeros((m, n), np.float32)
    stored = np.ascontiguousarray(b.T) if trans_b else b
    assert lib.run_gemm(0, 0, m, n, k, int(trans_b), _p(a), _p(stored), _p(c)) == 0, _error(lib)
    np.testing.assert_array_equal(c, a.astype(np.float32) @ b.astype(np.float32))


def test_mmad_with_m_1_is_gemv_reading_l0a_as_nd(lib):
    """Mmad page, constraints: with M = 1 the Cube runs GEMV and reads L0A in ND, not as ZZ
    fractals.  A row of A laid out as ZZ (what ND2NZ and LoadData give) is then read wrong
    beyond its first 16 elements, so a kernel multiplies 16 rows instead (the test kernel
    does, but for this case)."""
    rng = np.random.default_rng(11)
    m, n, k = 1, 7, 40
    a, b = _ints((m, k), rng, np.float16), _ints((k, n), rng, np.float16)
    exact = a.astype(np.float32) @ b.astype(np.float32)
    c = np.zeros((m, n), np.float32)
    assert lib.run_gemm(0, 0, m, n, k, 2, _p(a), _p(b), _p(c)) == 0, _error(lib)
    # ND over the ZZ fractals: elements 0..15 are the row's first 16, the next come from
    # rows 1.. of the first fractal, which ND2NZ never wrote (the twin's fresh L1 is NaN)
    assert np.isnan(c).all()
    assert lib.run_gemm(0, 0, m, n, k, 0, _p(a), _p(b), _p(c)) == 0, _error(lib)
    np.testing.assert_array_equal(c, exact)


def test_fixpipe_f322f16_rounds_to_nearest_even(lib):
    """F322F16 is a cast with CAST_RINT: sums that fall between two halfs round to even."""
    m, n, k = 16, 16, 16
    a = np.zeros((m, k), np.float16)
    a[:, 0], a[:, 1] = 2048, np.arange(m) % 4          # 2048 + {0, 1, 2, 3}
    b = np.zeros((k, n), np.float16)
    b[0], b[1] = 1, 1
    c = np.zeros((m, n), np.float16)
    assert lib.run_gemm(0, 1, m, n, k, 0, _p(a), _p(b), _p(c)) == 0, _error(lib)
    exact = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_array_equal(c, exact.astype(np.float16))   # NumPy rounds to even
    assert c[1, 0] == 2048 and c[3, 0] == 2052                    # 2049 -> 2048, 2051 -> 2052


def test_bf16_gemm_rounds_out_with_f322bf16(lib):
    rng = np.random.default_rng(5)
    m, n, k = 24, 40, 40
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    c = np.zeros((m, n), ml_dtypes.bfloat16)
    assert lib.run_gemm(1, 2, m, n, k, 0, _p(a), _p(b), _p(c)) == 0, _error(lib)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), exact, rtol=2 ** -8, atol=1e-5)


@pytest.mark.parametrize("m, n, k", [(16, 16, 8), (20, 33, 30)])
def test_float_gemm_with_transposed_weights(lib, m, n, k):
    """float x float -> float (Mmad's types): fractals of 16 x 8 in L0A and 8 x 16 in L0B."""
    rng = np.random.default_rng(k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)          # stored [n, k]
    c = np.zeros((m, n), np.float32)
    assert lib.run_gemm(2, 0, m, n, k, 1, _p(a), _p(w), _p(c)) == 0, _error(lib)
    np.testing.assert_allclose(c, a @ w.T, rtol=1e-5, atol=1e-5)


# --- mixed kernels: AIC and AIV through GM with cross-core flags --------------------------------

@pytest.mark.parametrize("how", [1, 2])     # launched as mixed; declared by its first statement
def test_mixed_kernel_hands_the_product_to_the_vector_cores(lib, how):
    rng = np.random.default_rng(1)
    m, n, k = 40, 36, 56
    a, b = _ints((m, k), rng, np.float16), _ints((k, n), rng, np.float16)
    ws, out = np.zeros((m, n), np.float32), np.zeros((m, n), np.float16)
    assert lib.run_mix_relu(how, m, n, k, _p(a), _p(b), _p(ws), _p(out)) == 0, _error(lib)
    want = np.maximum(a.astype(np.float32) @ b.astype(np.float32), 0)
    np.testing.assert_array_equal(out, want.astype(np.float16))


def test_block_indices_of_a_mixed_kernel(lib):
    """GetBlockIdx page: AIC in [0, numBlocks), AIV in [0, 2 * numBlocks); GetBlockNum is
    numBlocks on both; GetTaskRatio 1 on the AIC, 2 on an AIV; GetSubBlockIdx 0/1 on AIVs."""
    ids = np.full(128, -1, np.int32)
    assert lib.run_mix_ids(3, _p(ids)) == 0, _error(lib)
    assert ids[:6].tolist() == [301, 0] * 3
    assert ids[64:76].tolist() == [302, 0, 302, 1] * 3


# --- rules caught --------------------------------------------------------------------------------

def _lines(path: Path, pattern: str) -> dict[str, int]:
    lines, current = {}, None
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if m := re.match(pattern, text):
            current = m.group(1)
        if "// VIOLATION" in text:
            lines.setdefault(current, number)
    return lines


VIOLATIONS = {  # kernel -> (launch mode: 0 vector, 1 AIC, 2 mixed; fragments of the message)
    "l1_overflow": (1, ["InitBuffer: L1 overflow: TQue<B1, 1> asks for 1 x 204800 bytes",
                        "only 114688 of the 524288 bytes of L1 are left",
                        "TQue<A1, 2> at cube_bad.cpp:"]),
    "l0a_overflow": (1, ["L0A overflow: TQue<A2, 2> asks for 2 x 40000 bytes (80896 with "
                         "512-byte alignment)", "of the 65536 bytes of L0A"]),
    "l0c_overflow": (1, ["L0C overflow: TQue<CO1, 1> asks for 1 x 140000 bytes",
                         "of the 131072 bytes of L0C"]),
    "l0a_misaligned": (1, ["LoadData: dst at L0A offset 32 is not 512-byte aligned"]),
    "mmad_wrong_position": (1, ["Mmad: fm is a tensor in L0B (TQue<B2, 1>",
                                "Mmad takes it from L0A (TPosition A2)"]),
    "l0c_misaligned": (1, ["Mmad: dst at L0C offset 64 is not 1024-byte aligned"]),
    "mmad_beyond_l0a": (1, ["Mmad: fm needs 1536 bytes but the tensor has only 1024"]),
    "ub_on_cube": (1, ["InitBuffer: TQue<VECIN, 1> lives in UB, which the cube core (AIC) does "
                       "not have"]),
    "l1_on_vector": (0, ["InitBuffer: TQue<A1, 1> lives in L1, which the vector core does not "
                         "have"]),
    "missing_mte2_mte1": (1, ["LoadData: missing sync: MTE1 reads L1[0, 512) written by MTE2 "
                              "(DataCopy at cube_bad.cpp:", "HardEvent::MTE2_MTE1"]),
    "missing_m_fix": (1, ["Fixpipe: missing sync: FIX reads L0C[0, 1024) written by M (Mmad at",
                          "HardEvent::M_FIX"]),
    "fixpipe_quant": (1, ["Fixpipe: float -> half needs quantPre = QuantMode_t::F322F16",
                          "not NoQuant"]),
    "nd2nz_range": (1, ["DataCopy: dstNzC0Stride 0 is outside [1, 16384]"]),
    "cross_flag_not_mix": (1, ["CrossCoreSetFlag: cross-core flags order the AIC and AIVs of a "
                               "mixed kernel"]),
    "cross_wait_hang": (2, ["kernel cross_wait_hang block 0: CrossCoreWaitFlag: the block would "
                            "hang: AIV0 waits for flag 1 (CrossCoreWaitFlag at cube_bad.cpp:{line})",
                            "AIV1 waits for flag 1"]),
    "late_kernel_type": (0, ["KERNEL_TASK_TYPE_DEFAULT: the kernel type must be declared by "
                             "the kernel's first statement"]),
    "cross_flag_overflow": (2, ["kernel cross_flag_overflow block 0 AIC: CrossCoreSetFlag: the "
                                "counter of cross-core flag 2 would exceed 15"]),
}
AT_END = {"cross_wait_hang"}


@pytest.mark.parametrize("name", sorted(VIOLATIONS))
def test_cube_misuse_is_an_error_naming_kernel_op_and_line(lib, name):
    mode, fragments = VIOLATIONS[name]
    x, y = np.zeros(4096, np.float16), np.zeros(4096, np.float32)
    assert lib.run_cube_bad(name.encode(), mode, _p(x), _p(y)) == 1
    message = _error(lib)
    line = _lines(KERNELS / "cube_bad.cpp", r"BAD\((\w+)\)")[name]
    assert message.startswith(f"kernel {name} block 0"), message
    for fragment in fragments:
        assert fragment.format(line=line) in message, message
    if name not in AT_END:
        assert message.endswith(f"(at cube_bad.cpp:{line})"), message


def test_a_vector_core_reading_cube_results_without_the_flag_wait(lib):
    m, n, k = 40, 36, 56
    a, b = np.ones((m, k), np.float16), np.ones((k, n), np.float16)
    ws, out = np.zeros((m, n), np.float32), np.zeros((m, n), np.float16)
    assert lib.run_mix_relu(0, m, n, k, _p(a), _p(b), _p(ws), _p(out)) == 1
    message = _error(lib)
    line = next(i for i, t in enumerate((KERNELS / "cube_kernels.cpp").read_text().splitlines(), 1)
                if "// VIOLATION" in t)
    assert message.startswith("kernel mix_relu_nowait block 0 AIV0: DataCopyPad: missing "
                              "cross-core sync: AIV0 reads GM ws bytes [0, "), message
    assert "that the AIC wrote (Fixpipe at cube_kernels.cpp:" in message, message
    assert "no CrossCoreSetFlag on PIPE_FIX after that write" in message, message
    assert message.endswith(f"(at cube_kernels.cpp:{line})"), message
