"""Accuracy of the CPU backend's float32 transcendentals (tilec.codegen.cpu.mathlib), compiled
and run like any kernel, against NumPy in float64 over the whole float32 range: inf, NaN,
signed zeros and subnormals must come out as NumPy has them, and finite results within the
stated number of float32 ulps (absolute error where the result is below ``floor``)."""
from __future__ import annotations

import ctypes
import math
from typing import Callable

import llvmlite.binding as llvm
import numpy as np
import pytest

from cpu_harness import Built, MemRef1D, build, call
from tilec.codegen.common.scalar import Num, const, f32, index
from tilec.codegen.cpu import mathlib
from tilec.codegen.cpu.llvm import Machine, mlir_to_llvm_ir, optimise
from tilec.mlir import func, ir, memref, scf

erf = np.vectorize(math.erf)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -x))


# erf's absolute error (test_erf_nonnegative): the fit's 2.4e-8 and float32's rounding of
# x * P(x^2) / Q(x^2), a few ulp relative, largest in absolute terms where erf nears 1 (3.1e-7
# measured)
ERF_ERROR = 3.5e-7

# name -> (float64 reference, input range, max ulps, floor: results smaller in magnitude are
# checked against an absolute error of `floor` instead)
FUNCTIONS = {
    "exp": (np.exp, (-110.0, 90.0), 1.0, 0.0),
    "log": (np.log, (0.0, 3.4e38), 1.0, 0.0),
    "tanh": (np.tanh, (-20.0, 20.0), 1.5, 0.0),
    "sigmoid": (_sigmoid, (-110.0, 110.0), 2.5, 1e-37),
    "silu": (lambda x: x * _sigmoid(x), (-110.0, 110.0), 3.0, 1e-35),
    "sin": (np.sin, (-3.4e38, 3.4e38), 1.5, 0.0),
    "cos": (np.cos, (-3.4e38, 3.4e38), 1.5, 0.0),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (0.0, 3.4e38), 1.5, 0.0),
    # 0.5 x (1 + erf(x / sqrt 2)) cancels for x < 0: its error there is absolute, 0.5 |x| times
    # erf's, where |x / sqrt 2| < 4 (erf is -1 beyond): at most 0.5 * 4 sqrt(2) * ERF_ERROR
    "gelu": (lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2))), (-12.0, 12.0), 3.0,
             2 * math.sqrt(2) * ERF_ERROR),
    # erf_nonnegative(|x|) with x's sign: its error is ERF_ERROR's, a few ulp where it is small
    "erf": (erf, (-10.0, 10.0), 4.0, ERF_ERROR),
    "round": (np.rint, (-3.4e38, 3.4e38), 0.0, 1e-45),   # exact
    "gelu_tanh": (lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) *
                                                   (x + 0.044715 * x ** 3))),
                  (-12.0, 12.0), 3.0, 5e-7),
}
SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.2e-38, 3.4e38, -3.4e38]


def inputs(lo: float, hi: float) -> np.ndarray:
    """Evenly spaced and geometrically spaced points of [lo, hi], and the special values."""
    top = max(abs(lo), abs(hi))
    spread = np.geomspace(1e-38, top, 50000)
    x = np.concatenate([np.linspace(lo, hi, 100001), spread, -spread, SPECIALS])
    with np.errstate(over="ignore"):
        x = x.astype(np.float32)
    return x[np.isnan(x) | ((x >= lo) & (x <= hi)) | np.isinf(x)]


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Built:
    source = "\n".join(f"func f_{name}(x: Tensor<f32>[n]) -> Tensor<f32>[n] "
                       f"{{ return {name}(x); }}" for name in FUNCTIONS)
    source += ("\nfunc f_pow(a: Tensor<f32>[n], b: Tensor<f32>[n]) -> Tensor<f32>[n] "
               "{ return pow(a, b); }")
    return build(source, tmp_path_factory.mktemp("mathlib"))


def _run(library: Built, name: str, *args: np.ndarray) -> np.ndarray:
    out = np.zeros(args[0].shape, np.float32)
    call(library, f"f_{name}", list(args), [out])
    return out


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_accuracy(library, name):
    reference, (lo, hi), max_ulps, floor = FUNCTIONS[name]
    x = inputs(lo, hi)
    got = _run(library, name, x).astype(np.float64)
    with np.errstate(all="ignore"):
        exact = reference(x.astype(np.float64))
        rounded = exact.astype(np.float32)
    special = ~np.isfinite(rounded)
    assert np.array_equal(got[special], rounded[special], equal_nan=True), \
        f"{name} of {x[special]}: {got[special]}, want {rounded[special]}"
    finite = ~special
    error = np.abs(got[finite] - exact[finite])
    ulp = np.spacing(np.abs(rounded[finite])).astype(np.float64)
    allowed = np.maximum(max_ulps * ulp, floor)
    worst = np.argmax(error / allowed)
    assert error[worst] <= allowed[worst], (
        f"{name}({x[finite][worst]!r}) = {got[finite][worst]!r}, want {exact[finite][worst]!r} "
        f"({error[worst] / ulp[worst]:.2f} ulp)")


def test_pow(library):
    """NumPy's power: exact special cases, the sign from an odd exponent, NaN for a negative
    base and a fractional exponent; elsewhere exp(b log|a|) with a relative error that grows
    with |b log a| (the rounding of the product), about (2 + |b log a|) float32 ulps."""
    special = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 2.5, np.inf,
                        -np.inf, np.nan, 1e-30, 1e30], np.float32)
    a, b = (v.ravel() for v in np.meshgrid(special, special))
    rng = np.random.default_rng(5)
    a = np.concatenate([a, np.exp(rng.uniform(-20, 20, 20000)),
                        -np.exp(rng.uniform(-5, 5, 2000))]).astype(np.float32)
    b = np.concatenate([b, rng.uniform(-4, 4, 20000),
                        rng.integers(-10, 10, 2000)]).astype(np.float32)
    got = _run(library, "pow", a, b).astype(np.float64)
    with np.errstate(all="ignore"):
        want = np.power(a.astype(np.float64), b.astype(np.float64))
        rounded = want.astype(np.float32).astype(np.float64)
    special = ~np.isfinite(rounded) | (rounded == 0)
    assert np.array_equal(got[special], rounded[special], equal_nan=True)
    finite = ~special
    rel = np.abs(got[finite] - want[finite]) / np.abs(want[finite])
    with np.errstate(all="ignore"):   # NaN where a special case gave a finite result
        exponent = np.nan_to_num(np.abs(b[finite] * np.log(np.abs(a[finite].astype(float)))))
    assert np.all(rel <= (2 + exponent) * 2.0 ** -23)


# ---------------------------------------------------------------------------------------------
# Functions the language reaches only inside others: erf (gelu) and softmax's exp


def _jit(fn: Callable[[Num], Num]) -> Callable[[np.ndarray], np.ndarray]:
    """``fn`` (a mathlib function) on every element of a float32 array: one loop lowered and
    optimised as the kernels are, run by llvmlite's JIT."""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.create()
        vector = ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], f32())
        with ir.InsertionPoint(module.body):
            apply = func.FuncOp("apply", ir.FunctionType.get([vector, vector], []))
            apply.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
            block = apply.add_entry_block()
            source, target = block.arguments
            with ir.InsertionPoint(block):
                zero, one = const(index(), 0).value, const(index(), 1).value
                loop = scf.ForOp(zero, memref.dim(source, zero), one)
                with ir.InsertionPoint(loop.body):
                    i = [loop.induction_variable]
                    memref.store(fn(Num(memref.load(source, i))).value, target, i)
                    scf.YieldOp([])
                func.ReturnOp([])
        llvm_ir = mlir_to_llvm_ir(module)
    optimised, machine = optimise(llvm_ir, Machine(), ["_mlir_ciface_apply"])
    engine = llvm.create_mcjit_compiler(optimised, machine)
    engine.finalize_object()
    address = engine.get_function_address("_mlir_ciface_apply")
    entry = ctypes.CFUNCTYPE(None, ctypes.POINTER(MemRef1D), ctypes.POINTER(MemRef1D))(address)

    def run(x: np.ndarray) -> np.ndarray:
        y = np.empty_like(x)
        descriptors = [MemRef1D(a.ctypes.data, a.ctypes.data, 0, a.size, 1) for a in (x, y)]
        entry(*(ctypes.byref(d) for d in descriptors))
        return y

    run.engine = engine     # the code lives as long as its engine
    return run


def test_erf_nonnegative():
    """Absolute error within ERF_ERROR on a dense grid of [0, 4.5] (where the error lives) and
    the tail; within 4 ulp where erf < 0.5 (P / Q is near 2/sqrt(pi) there: only the
    roundings of P, Q, the product and the quotient count); exactly 1 from x = 4 on, never
    beyond; -0, inf and NaN as math.erf has them."""
    spread = np.geomspace(1e-45, 3.4e38, 20000)
    x = np.concatenate([np.linspace(0.0, 4.5, 450001), spread]).astype(np.float32)
    run = _jit(mathlib.erf_nonnegative)
    got = run(x).astype(np.float64)
    exact = erf(x.astype(np.float64))
    error = np.abs(got - exact)
    assert error.max() <= ERF_ERROR, f"erf({x[error.argmax()]!r}): error {error.max():.3g}"
    small = exact < 0.5
    ulp = np.spacing(exact[small].astype(np.float32)).astype(np.float64)
    assert np.max(error[small] / ulp) <= 4.0
    assert np.all(got[x >= 4.0] == 1.0)
    assert np.all(got <= 1.0)
    special = np.array([-0.0, np.inf, np.nan], np.float32)
    got = run(special)
    assert np.array_equal(got, [-0.0, 1.0, np.nan], equal_nan=True)
    assert np.signbit(got[0])


def test_exp_nonpositive():
    """softmax's exp, of x - max <= 0: within 1 ulp where e^x is a normal float32, below that
    0 or within 1 ulp (2**-149) of the subnormal, exactly 0 from x = -88 down; e^-0 = 1,
    e^-inf = 0, NaN stays NaN."""
    spread = np.geomspace(1e-45, 110.0, 20000)
    x = np.concatenate([np.linspace(-110.0, 0.0, 400001), -spread]).astype(np.float32)
    run = _jit(mathlib.exp_nonpositive)
    got = run(x).astype(np.float64)
    exact = np.exp(x.astype(np.float64))
    ulp = np.spacing(exact.astype(np.float32)).astype(np.float64)
    error = np.abs(got - exact) / ulp
    normal = exact >= np.finfo(np.float32).tiny
    assert error[normal].max() <= 1.0, f"exp({x[normal][error[normal].argmax()]!r})"
    assert np.all((got[~normal] == 0) | (error[~normal] <= 1.0))
    assert np.all(got[x <= -88.0] == 0)
    special = run(np.array([-0.0, -np.inf, np.nan], np.float32))
    assert np.array_equal(special, [1.0, 0.0, np.nan], equal_nan=True)


# ---------------------------------------------------------------------------------------------
# NARROW: the precision for values rounded to float16 or bfloat16 (mathlib's docstring)

# below a fiftieth of float16's rounding (2**-11, 4.9e-4)
NARROW_ERROR = 1e-5
# gelu's absolute error where it cancels (x < 0): 0.5 |x| times erf's, |x| < 4 sqrt 2
NARROW_GELU_FLOOR = 2 * math.sqrt(2) * NARROW_ERROR

# name -> (mathlib function, float64 reference, input range, floor as in FUNCTIONS)
NARROW_FUNCTIONS = {
    "exp": (mathlib.exp, np.exp, (-110.0, 90.0), 0.0),
    "exp_nonpositive": (mathlib.exp_nonpositive, np.exp, (-110.0, 0.0), 0.0),
    "sigmoid": (mathlib.sigmoid, _sigmoid, (-110.0, 110.0), 1e-37),
    "silu": (mathlib.silu, lambda x: x * _sigmoid(x), (-110.0, 110.0), 1e-35),
    "tanh": (mathlib.tanh, np.tanh, (-20.0, 20.0), 0.0),
    "gelu": (mathlib.gelu, FUNCTIONS["gelu"][0], (-12.0, 12.0), NARROW_GELU_FLOOR),
}


@pytest.mark.parametrize("name", list(NARROW_FUNCTIONS))
def test_narrow_accuracy(name):
    """Relative error within NARROW_ERROR (absolute below ``floor``, and where float32's
    smallest normal is, 2**-126, for exp's subnormal results); inf, NaN and the results at
    +-0 exactly as the full precision has them."""
    fn, reference, (lo, hi), floor = NARROW_FUNCTIONS[name]
    x = inputs(lo, hi)
    got = _jit(lambda v: fn(v, mathlib.NARROW))(x).astype(np.float64)
    full = _jit(fn)(x).astype(np.float64)
    with np.errstate(all="ignore"):
        exact = reference(x.astype(np.float64))
    special = ~np.isfinite(full) | (x == 0)
    assert np.array_equal(got[special], full[special], equal_nan=True)
    assert np.array_equal(np.signbit(got[special]), np.signbit(full[special]))
    finite = ~special
    allowed = np.maximum(NARROW_ERROR * np.abs(exact[finite]),
                         max(floor, np.finfo(np.float32).tiny))
    error = np.abs(got[finite] - exact[finite])
    worst = np.argmax(error / allowed)
    assert error[worst] <= allowed[worst], (
        f"{name}({x[finite][worst]!r}) = {got[finite][worst]!r}, want {exact[finite][worst]!r}")


def test_narrow_erf():
    """NARROW erf: absolute error within 5e-6 (the fit's 4.1e-6 and float32's rounding),
    exactly 1 from x = 4 on, never beyond."""
    x = np.concatenate([np.linspace(0.0, 4.5, 450001),
                        np.geomspace(1e-45, 3.4e38, 20000)]).astype(np.float32)
    got = _jit(lambda v: mathlib.erf_nonnegative(v, mathlib.NARROW))(x).astype(np.float64)
    error = np.abs(got - erf(x.astype(np.float64)))
    assert error.max() <= 5e-6, f"erf({x[error.argmax()]!r}): error {error.max():.3g}"
    assert np.all(got[x >= 4.0] == 1.0)
    assert np.all(got <= 1.0)
