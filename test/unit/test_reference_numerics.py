"""The numerical contract helpers (tilec.harness.numerics): tolerances, comparison, rounding."""
import ml_dtypes
import numpy as np
import pytest

from tilec.harness.numerics import TOLERANCES, assert_close, compare, dtype_name, to_dtype


@pytest.mark.parametrize("dtype,rtol,atol", [("float32", 1e-4, 1e-5), ("float16", 1e-2, 1e-3),
                                             ("bfloat16", 2e-2, 1e-2)])
def test_tolerances_are_the_contract(dtype: str, rtol: float, atol: float) -> None:
    assert TOLERANCES[dtype] == (rtol, atol)
    want = np.array([0.0, 1.0, -300.0])
    inside = want + 0.9 * (atol + rtol * np.abs(want))
    outside = want - 1.1 * (atol + rtol * np.abs(want))
    assert_close(inside, want, dtype)
    for i in range(3):
        bad = inside.copy()
        bad[i] = outside[i]
        with pytest.raises(AssertionError, match=rf"1 of 3 elements outside .*first at \({i},\)"):
            assert_close(bad, want, dtype)


def test_integers_and_masks_are_exact() -> None:
    assert_close(np.array([2**31 - 1, -5], np.int32), np.array([2**31 - 1, -5]), np.int32)
    with pytest.raises(AssertionError, match="int32: 1 of 2"):
        assert_close(np.array([2**31 - 1, -5], np.int32), np.array([2**31 - 2, -5]), "int32")
    with pytest.raises(AssertionError, match="bool: 1 of 2"):
        assert_close(np.array([True, False]), np.array([True, True]), np.bool_)


def test_nan_and_infinities() -> None:
    assert_close(np.array([np.nan, np.inf, -np.inf]), np.array([np.nan, np.inf, -np.inf]),
                 "float32")
    for got, want in [(np.nan, 1.0), (1.0, np.nan), (np.inf, 1e38), (np.inf, -np.inf)]:
        with pytest.raises(AssertionError):
            assert_close(np.array([got]), np.array([want]), "float32")


def test_compare_reports_errors() -> None:
    result = compare(np.array([1.0, 2.0, 0.5]), np.array([1.0, 2.5, 0.0]), "float16")
    assert not result.ok and result.mismatches == 2 and result.size == 3
    assert result.max_abs == 0.5 and result.max_rel == 0.2
    assert result.first == "at (1,): got 2.0, want 2.5"
    with pytest.raises(ValueError, match="shape"):
        compare(np.zeros(2), np.zeros(3), "float32")
    with pytest.raises(AssertionError, match=r"shape \(2,\) differs"):
        assert_close(np.zeros(2), np.zeros((2, 1)), "float32")


def test_dtype_names() -> None:
    assert dtype_name(ml_dtypes.bfloat16) == "bfloat16"
    assert dtype_name("float16") == "float16"
    with pytest.raises(ValueError, match="float64 is not an element type"):
        dtype_name(np.float64)


def test_to_bfloat16_rounds_once() -> None:
    x = np.array([1 + 2**-8 + 2**-30, 1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8 + 2**-30),
                  1 + 2**-7 + 2**-8 - 2**-40, 3.4e38, 3.3e38, 1e-45, 0.0, np.nan, -np.inf])
    got = to_dtype(x, "bfloat16")
    assert got.dtype == ml_dtypes.bfloat16
    want = [1 + 2**-7, 1.0, 1 + 2**-6, -(1 + 2**-7), 1 + 2**-7, np.inf,
            float(np.float32(3.3e38).astype(ml_dtypes.bfloat16)), 0.0, 0.0, np.nan, -np.inf]
    np.testing.assert_array_equal(got.astype(np.float64), want)
    # away from ties it agrees with ml_dtypes
    y = np.random.default_rng(0).standard_normal(1000) * 1e4
    np.testing.assert_array_equal(to_dtype(y.astype(np.float32).astype(np.float64), "bfloat16"),
                                  y.astype(np.float32).astype(ml_dtypes.bfloat16))


def test_an_integer_may_move_within_its_allowance() -> None:
    want, allowance = np.array([3, 5, 7]), np.array([1.0, 0.0, 1.0])
    got = np.array([2, 5, 8], np.int32)
    assert compare(got, want, "int32").mismatches == 2
    result = compare(got, want, "int32", allowance)
    assert result.ok and (result.beyond, result.explained) == (2, 2)
    off = compare(np.array([2, 6, 7], np.int32), want, "int32", allowance)
    assert off.mismatches == 1 and (off.beyond, off.explained) == (2, 1)
    assert str(off).endswith("the allowance explains 1; 1 fail; max abs error 1, "
                             "max rel error 0.333; first at (1,): got 6.0, want 5.0")
