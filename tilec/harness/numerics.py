"""Element types and the numerical contract of language.md, shared by the reference, verify
and the tests.

In: NumPy arrays (a result, its reference value) and the result's element type. Out: the
NumPy dtype of each element type, a value rounded once to an element type, and the comparison
``|got - want| <= atol + rtol * |want| + allowance`` with the tolerances chosen by the element
type (integers and masks agree exactly, up to their allowance) and the reference's rounding
allowance (:mod:`.allowance`), 0 unless given.
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from numpy.typing import DTypeLike

NUMPY_DTYPES: dict[str, np.dtype] = {
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float32": np.dtype(np.float32),
    "int32": np.dtype(np.int32),
    "bool": np.dtype(np.bool_),
}

# element type -> (rtol, atol)
TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
    "int32": (0.0, 0.0),
    "bool": (0.0, 0.0),
}


def dtype_name(dtype: str | DTypeLike) -> str:
    """The element type's name (``"bfloat16"``) for a name or a NumPy dtype."""
    name = np.dtype(dtype).name
    if name not in NUMPY_DTYPES:
        raise ValueError(f"{name} is not an element type of the language")
    return name


def to_dtype(values: np.ndarray, dtype: str) -> np.ndarray:
    """Float64 (or integer, or bool) values converted to ``dtype``, rounded once to nearest
    even.  Integers are assumed in range; float -> int32 is the caller's business."""
    if dtype == "bfloat16":
        return _float64_to_bfloat16(np.asarray(values, dtype=np.float64))
    return np.asarray(values).astype(NUMPY_DTYPES[dtype])


def _float64_to_bfloat16(x: np.ndarray) -> np.ndarray:
    # ml_dtypes converts float64 through float32 and so rounds twice; rounding to odd into
    # float32 first keeps the final round-to-nearest-even exact.
    with np.errstate(over="ignore"):
        f = x.astype(np.float32)
    f64 = f.astype(np.float64)
    inexact = np.isfinite(f) & (f64 != x)
    bits = f.view(np.uint32)
    bits = np.where(inexact & (np.abs(f64) > np.abs(x)), bits - np.uint32(1), bits)
    bits = np.where(inexact, bits | np.uint32(1), bits)
    return bits.view(np.float32).astype(ml_dtypes.bfloat16)


@dataclass(frozen=True)
class Comparison:
    """How a result compares with the reference under the contract's tolerances."""

    dtype: str
    size: int
    mismatches: int
    max_abs: float  # over elements finite on both sides
    max_rel: float  # over those whose reference is non-zero
    first: str  # the first mismatch, "" when there is none
    beyond: int = 0    # with an allowance: the elements beyond atol + rtol * |want| alone
    explained: int = 0  # ... and of those, the ones the allowance brings within

    @property
    def ok(self) -> bool:
        return self.mismatches == 0

    def __str__(self) -> str:
        rtol, atol = TOLERANCES[self.dtype]
        if self.beyond:
            text = (f"{self.dtype}: {self.beyond} of {self.size} elements beyond rtol={rtol} "
                    f"atol={atol}; the allowance explains {self.explained}; "
                    f"{self.mismatches} fail")
        else:
            text = (f"{self.dtype}: {self.mismatches} of {self.size} elements outside "
                    f"rtol={rtol} atol={atol}")
        text += f"; max abs error {self.max_abs:.3g}, max rel error {self.max_rel:.3g}"
        return f"{text}; first {self.first}" if self.first else text


def compare(got: np.ndarray, want: np.ndarray, dtype: str | DTypeLike,
            allowance: np.ndarray | None = None) -> Comparison:
    """Compare element-wise; NaN matches NaN and an infinity only the same infinity.  With
    ``allowance`` (the reference's rounding allowance, :func:`tilec.harness.reference.allowed`)
    an element passes within ``atol + rtol * |want| + allowance``, and the comparison counts
    the elements beyond ``atol + rtol * |want|`` and how many of them the allowance explains
    (an int32 result's allowance is where a float -> int32 cast may land on either side of an
    integer).  Raises ValueError when the shapes differ."""
    name = dtype_name(dtype)
    g = np.asarray(got).astype(np.float64)
    w = np.asarray(want).astype(np.float64)
    good, err = _within(g, w, name)
    beyond = explained = 0
    if allowance is not None:
        strict = good
        good, _ = _within(g, w, name, np.broadcast_to(allowance, w.shape))
        beyond = int(np.count_nonzero(~strict))
        explained = int(np.count_nonzero(good & ~strict))
    finite = np.isfinite(g) & np.isfinite(w)
    rel = np.where(finite & (w != 0), err / np.where(w != 0, np.abs(w), 1.0), 0.0)
    bad = np.argwhere(~good)
    first = ""
    if len(bad):
        index = tuple(int(i) for i in bad[0])
        first = f"at {index}: got {float(g[index])!r}, want {float(w[index])!r}"
    return Comparison(name, int(g.size), len(bad), float(err.max(initial=0.0)),
                      float(rel.max(initial=0.0)), first, beyond, explained)


def _within(g: np.ndarray, w: np.ndarray, dtype: str,
            allowance: np.ndarray | float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Which elements of ``g`` match ``w`` within the tolerances of ``dtype`` (widened by
    ``allowance``), and the absolute error of each (0 where either side is not finite)."""
    if g.shape != w.shape:
        raise ValueError(f"shape {g.shape} differs from the reference's {w.shape}")
    rtol, atol = TOLERANCES[dtype]
    finite = np.isfinite(g) & np.isfinite(w)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(finite, np.abs(g - w), 0.0)
    good = (g == w) | (np.isnan(g) & np.isnan(w)) | (
        finite & (err <= atol + rtol * np.abs(w) + allowance))
    return good, err


def assert_close(got: np.ndarray, want: np.ndarray, dtype: str | DTypeLike,
                 allowance: np.ndarray | None = None) -> None:
    """Raise AssertionError unless ``got`` matches ``want`` within the tolerances of ``dtype``
    (plus ``allowance``, as :func:`compare`)."""
    if np.shape(got) != np.shape(want):
        raise AssertionError(f"shape {np.shape(got)} differs from the reference's {np.shape(want)}")
    result = compare(got, want, dtype, allowance)
    if not result.ok:
        raise AssertionError(str(result))
