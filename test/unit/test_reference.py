"""The reference interpreter (tilec.harness.reference) on hand-written tile IR, against
hand-written NumPy in float64 under the contract's tolerances."""
from __future__ import annotations

import json
import math
from collections.abc import Sequence

import ml_dtypes
import numpy as np
import pytest

from tilec.dialect import make_context
from tilec.harness.numerics import NUMPY_DTYPES, assert_close
from tilec.frontend import compile_source
from tilec.harness.reference import ReferenceError, allowed, bind_symbols, find_function, run
from tilec.mlir import ir

FLOATS = ("float32", "float16", "bfloat16")
ELT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "int32": "i32", "bool": "i1"}


def strings(items: Sequence[int | str]) -> str:
    """An MLIR array of string attributes: ["n", "4"]."""
    return json.dumps([str(i) for i in items])


def ty(dtype: str, *dims: int | str) -> str:
    """A tile tensor type: ty("float32", "n", 4) is tensor<?x4xf32, ["n", "4"]>."""
    if not dims:
        return f"tensor<{ELT[dtype]}>"
    sizes = "x".join(str(d) if isinstance(d, int) else "?" for d in dims)
    if all(isinstance(d, int) for d in dims):
        return f"tensor<{sizes}x{ELT[dtype]}>"
    return f"tensor<{sizes}x{ELT[dtype]}, {strings(dims)}>"


def func(params: Sequence[tuple[str, ...]], results: Sequence[str], body: str, *,
         name: str = "f", symbols: Sequence[str] = (), lead: Sequence[str] = ()) -> str:
    """func.func text; a param is (name, type) or (name, type, extra arg attributes)."""
    args = ", ".join(
        f'%{p[0]}: {p[1]} {{tile.name = "{p[0]}"{", " + p[2] if len(p) > 2 else ""}}}'
        for p in params)
    attrs = [f"tile.symbols = {strings(symbols)}"] + ([f"tile.lead = {strings(lead)}"] if lead
                                                      else [])
    res = results[0] if len(results) == 1 else f"({', '.join(results)})"
    return (f"func.func @{name}({args}) -> {res} attributes {{{', '.join(attrs)}}} {{\n"
            f"{body}\n}}\n")


def parse(*funcs: str, unregistered: bool = False) -> ir.Module:
    ctx = make_context()
    ctx.allow_unregistered_dialects = unregistered
    with ctx:
        return ir.Module.parse("\n".join(funcs))


def random(rng: np.random.Generator, shape: tuple[int, ...], dtype: str,
           low: float = -3.0, high: float = 3.0) -> np.ndarray:
    return rng.uniform(low, high, shape).astype(NUMPY_DTYPES[dtype])


def f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def check(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    assert isinstance(got, np.ndarray) and got.dtype == NUMPY_DTYPES[dtype]
    assert_close(got, want, dtype)


def shape_syms(rank: int) -> list[str]:
    return [f"d{i}" for i in range(rank)]


SHAPES = [(1,), (7,), (3, 5), (2, 3, 17)]

# ---------------------------------------------------------------------------------------------
# Element-wise


def _erf(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(v) for v in x.ravel()]).reshape(x.shape)


UNARY_WANT = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "abs": np.abs,
    "neg": lambda x: -x,
    "reciprocal": lambda x: 1 / x,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
    "relu": lambda x: np.where(x > 0, x, 0.0),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
    "sin": np.sin,
    "cos": np.cos,
}
UNARY_DOMAIN = {"log": (0.1, 10.0), "sqrt": (0.0, 10.0), "rsqrt": (0.1, 10.0),
                "reciprocal": (0.25, 4.0)}


def unary_module(op: str, dtype: str, rank: int) -> ir.Module:
    syms = shape_syms(rank)
    t = ty(dtype, *syms)
    body = f'  %0 = "tile.{op}"(%x) : ({t}) -> {t}\n  return %0 : {t}'
    return parse(func([("x", t)], [t], body, symbols=syms))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", sorted(UNARY_WANT))
def test_unary(op: str, dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(1)
    x = random(rng, shape, dtype, *UNARY_DOMAIN.get(op, (-6.0, 6.0)))
    if op == "reciprocal":
        x = x * np.where(rng.random(shape) < 0.5, -1, 1).astype(x.dtype)
    got = run(unary_module(op, dtype, len(shape)), "f", x)
    check(got, UNARY_WANT[op](f64(x)), dtype)


def test_unary_known_values() -> None:
    x = np.array([-1000.0, -40.0, -1.0, 0.0, 1.0, 40.0, 1000.0], np.float32)
    want = {
        "sigmoid": [0.0, 4.248354255291589e-18, 0.2689414213699951, 0.5, 0.7310585786300049,
                    1.0, 1.0],
        "silu": [-0.0, -1.6993417021166355e-16, -0.2689414213699951, 0.0, 0.7310585786300049,
                 40.0, 1000.0],
        "gelu": [-0.0, -0.0, -0.15865525393145707, 0.0, 0.8413447460685429, 40.0, 1000.0],
        "gelu_tanh": [-0.0, -0.0, -0.15880800939172324, 0.0, 0.8411919906082768, 40.0, 1000.0],
    }
    for op, values in want.items():
        got = run(unary_module(op, "float32", 1), "f", x)
        assert not np.isnan(got).any(), op
        check(got, np.array(values), "float32")


def test_return_rounds_to_the_declared_type() -> None:
    x = np.array([-16.0, 0.5, 11.0, 12.0], np.float16)
    got = run(unary_module("exp", "float16", 1), "f", x)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got, np.exp(x.astype(np.float64)).astype(np.float16))
    assert 0 < got[0] < 2**-14 and got[2] == 59872 and np.isinf(got[3])  # subnormal, overflow


def test_int32_unary_wraps() -> None:
    x = np.array([-2**31, -5, -1, 0, 1, 2**31 - 1], np.int32)
    want = {"neg": [-2**31, 5, 1, 0, -1, -2**31 + 1],
            "abs": [-2**31, 5, 1, 0, 1, 2**31 - 1],
            "relu": [0, 0, 0, 0, 1, 2**31 - 1]}
    for op, values in want.items():
        got = run(unary_module(op, "int32", 1), "f", x)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, np.array(values, np.int32))


def test_float_only_op_on_int32_is_an_error() -> None:
    with pytest.raises(ReferenceError, match="tile.exp is not defined on int32"):
        run(unary_module("exp", "int32", 1), "f", np.arange(3, dtype=np.int32))


BINARY_WANT = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "max": np.maximum, "min": np.minimum, "pow": np.power,
}


def binary_module(op: str, dtype: str, lhs: str, rhs: str, res: str) -> ir.Module:
    params = [(name, t, "tile.scalar") if t == ty(dtype) else (name, t)
              for name, t in (("a", lhs), ("b", rhs))]
    body = f'  %0 = "tile.{op}"(%a, %b) : ({lhs}, {rhs}) -> {res}\n  return %0 : {res}'
    return parse(func(params, [res], body))


def binary_operands(op: str, dtype: str, shape_a: tuple[int, ...], shape_b: tuple[int, ...],
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    if op == "pow":
        return random(rng, shape_a, dtype, 0.5, 2.0), random(rng, shape_b, dtype, -2.0, 2.0)
    b = random(rng, shape_b, dtype, 0.5, 2.0) if op == "div" else random(rng, shape_b, dtype)
    return random(rng, shape_a, dtype), b


@pytest.mark.parametrize("shape", SHAPES[:3])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", sorted(BINARY_WANT))
def test_binary(op: str, dtype: str, shape: tuple[int, ...]) -> None:
    t = ty(dtype, *shape_syms(len(shape)))
    a, b = binary_operands(op, dtype, shape, shape, np.random.default_rng(2))
    got = run(binary_module(op, dtype, t, t, t), "f", a, b)
    check(got, BINARY_WANT[op](f64(a), f64(b)), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", sorted(BINARY_WANT))
def test_binary_with_a_rank0_operand(op: str, dtype: str) -> None:
    t, s = ty(dtype, "n"), ty(dtype)
    rng = np.random.default_rng(3)
    a, b = binary_operands(op, dtype, (5,), (), rng)
    check(run(binary_module(op, dtype, t, s, t), "f", a, float(b)),
          BINARY_WANT[op](f64(a), f64(b)), dtype)
    a, b = binary_operands(op, dtype, (), (5,), rng)
    check(run(binary_module(op, dtype, s, t, t), "f", a, b), BINARY_WANT[op](f64(a), f64(b)),
          dtype)


def test_python_scalar_is_rounded_to_the_parameter_type() -> None:
    t, s = ty("float16", "n"), ty("float16")
    got = run(binary_module("add", "float16", t, s, t), "f", np.zeros(2, np.float16), 0.1)
    np.testing.assert_array_equal(got, np.full(2, np.float16(0.1)))


@pytest.mark.parametrize("op", ["add", "sub", "mul", "max", "min"])
def test_int32_binary_wraps_like_int32(op: str) -> None:
    t = ty("int32", "n")
    edges = np.array([2**31 - 1, -2**31, 65536, 46341, -7, 0, 3], np.int32)
    a = np.concatenate([edges, np.random.default_rng(4).integers(-2**31, 2**31, 50, np.int32)])
    b = np.concatenate([np.array([1, 1, 65536, 46341, 2, -2**31, -3], np.int32),
                        np.random.default_rng(5).integers(-2**31, 2**31, 50, np.int32)])
    got = run(binary_module(op, "int32", t, t, t), "f", a, b)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, BINARY_WANT[op](a, b))  # int32 NumPy wraps


def test_int32_wrap_values() -> None:
    t = ty("int32", "n")
    a = np.array([2**31 - 1, 65536, 46341], np.int32)
    b = np.array([1, 65536, 46341], np.int32)
    np.testing.assert_array_equal(run(binary_module("add", "int32", t, t, t), "f", a, b)[0],
                                  -2**31)
    np.testing.assert_array_equal(run(binary_module("mul", "int32", t, t, t), "f", a, b),
                                  np.array([2**31 - 1, 0, -2147479015], np.int32))


def test_int32_wraps_after_each_op_not_only_at_return() -> None:
    # max(x + 1, x) and a cast of x + 1 see the wrapped sum
    t, s, tf = ty("int32", "n"), ty("int32"), ty("float32", "n")
    body = f'''  %one = "tile.constant"() {{value = 1 : i64}} : () -> {s}
  %0 = "tile.add"(%x, %one) : ({t}, {s}) -> {t}
  %1 = "tile.max"(%0, %x) : ({t}, {t}) -> {t}
  %2 = "tile.cast"(%0) : ({t}) -> {tf}
  return %1, %2 : {t}, {tf}'''
    top, as_float = run(parse(func([("x", t)], [t, tf], body)), "f",
                        np.array([2**31 - 1, 5], np.int32))
    np.testing.assert_array_equal(top, [2**31 - 1, 6])
    np.testing.assert_array_equal(as_float, [-2.0**31, 6.0])


def test_elementwise_ops_evaluate_in_float64() -> None:
    # (x + 1e-4) - x in float16 arithmetic is 0; the reference rounds only at return
    t, s = ty("float16", "n"), ty("float16")
    body = f'''  %c = "tile.constant"() {{value = 1.0e-04 : f64}} : () -> {s}
  %0 = "tile.add"(%x, %c) : ({t}, {s}) -> {t}
  %1 = "tile.sub"(%0, %x) : ({t}, {t}) -> {t}
  return %1 : {t}'''
    got = run(parse(func([("x", t)], [t], body)), "f", np.array([1.0, 100.0], np.float16))
    np.testing.assert_array_equal(got, np.full(2, np.float16(1e-4)))


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("pred", ["lt", "le", "gt", "ge", "eq", "ne"])
def test_cmp_gives_a_mask(pred: str, dtype: str) -> None:
    t, m = ty(dtype, "n"), ty("bool", "n")
    body = f'''  %0 = "tile.cmp"(%a, %b) {{predicate = "{pred}"}} : ({t}, {t}) -> {m}
  return %0 : {m}'''
    rng = np.random.default_rng(6)
    a = rng.integers(-2, 3, 40).astype(NUMPY_DTYPES[dtype])
    b = rng.integers(-2, 3, 40).astype(NUMPY_DTYPES[dtype])
    want = {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}
    got = run(parse(func([("a", t), ("b", t)], [m], body)), "f", a, b)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, want[pred])


@pytest.mark.parametrize("dtype", FLOATS)
def test_select_with_a_mask_and_a_scalar(dtype: str) -> None:
    # where(x > 0, x, 0.25 * x), the constant beside both
    t, s, m = ty(dtype, "n", "m"), ty(dtype), ty("bool", "n", "m")
    body = f'''  %zero = "tile.constant"() {{value = 0.0 : f64}} : () -> {s}
  %k = "tile.constant"() {{value = 2.5e-01 : f64}} : () -> {s}
  %pos = "tile.cmp"(%x, %zero) {{predicate = "gt"}} : ({t}, {s}) -> {m}
  %neg = "tile.mul"(%x, %k) : ({t}, {s}) -> {t}
  %0 = "tile.select"(%pos, %x, %neg) : ({m}, {t}, {t}) -> {t}
  %1 = "tile.select"(%pos, %k, %x) : ({m}, {s}, {t}) -> {t}
  return %0, %1 : {t}, {t}'''
    x = random(np.random.default_rng(7), (3, 9), dtype)
    got, got_scalar = run(parse(func([("x", t)], [t, t], body)), "f", x)
    check(got, np.where(f64(x) > 0, f64(x), 0.25 * f64(x)), dtype)
    check(got_scalar, np.where(f64(x) > 0, 0.25, f64(x)), dtype)


# ---------------------------------------------------------------------------------------------
# Casts


def cast_module(src: str, dst: str, back: str | None = None) -> ir.Module:
    """x -> cast(dst) [-> cast(back)], returned."""
    ts, td = ty(src, "n"), ty(dst, "n")
    body = f'  %0 = "tile.cast"(%x) : ({ts}) -> {td}\n'
    if back is None:
        return parse(func([("x", ts)], [td], body + f"  return %0 : {td}"))
    tb = ty(back, "n")
    body += f'  %1 = "tile.cast"(%0) : ({td}) -> {tb}\n  return %1 : {tb}'
    return parse(func([("x", ts)], [tb], body))


def test_cast_to_float16_rounds_to_nearest_even() -> None:
    x = np.array([1 + 2**-11, 1 + 3 * 2**-11, 65504, 65520, 1e-8, 6e-8, -2.5, np.nan, -np.inf],
                 np.float32)
    got = run(cast_module("float32", "float16"), "f", x)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got, x.astype(np.float16))
    assert got[0] == 1.0 and got[1] == 1 + 2**-9 and np.isinf(got[3])


def test_cast_rounds_where_the_cast_is() -> None:
    # cast to float16 and back: what is left is the float16 rounding error, exactly
    x = np.random.default_rng(8).uniform(-4, 4, 64).astype(np.float32)
    t32, t16 = ty("float32", "n"), ty("float16", "n")
    body = f'''  %0 = "tile.cast"(%x) : ({t32}) -> {t16}
  %1 = "tile.cast"(%0) : ({t16}) -> {t32}
  %2 = "tile.sub"(%1, %x) : ({t32}, {t32}) -> {t32}
  return %2 : {t32}'''
    got = run(parse(func([("x", t32)], [t32], body)), "f", x)
    np.testing.assert_array_equal(got, x.astype(np.float16).astype(np.float32) - x)
    assert np.count_nonzero(got) > 32


def test_cast_to_bfloat16() -> None:
    x = np.random.default_rng(9).standard_normal(100).astype(np.float32) * 1e3
    got = run(cast_module("float32", "bfloat16"), "f", x)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got, x.astype(ml_dtypes.bfloat16))


def test_cast_to_bfloat16_rounds_once_from_float64() -> None:
    # 1 + 2^-8 + 2^-30 is above the tie between 1 and 1 + 2^-7; through float32 it would be
    # exactly the tie and round to 1
    t = ty("bfloat16")
    body = f'''  %c = "tile.constant"() {{value = {1 + 2**-8 + 2**-30!r} : f64}} : () -> {t}
  %0 = "tile.cast"(%c) : ({t}) -> {t}
  return %0 : {t}'''
    assert run(parse(func([], [t], body)), "f") == 1 + 2**-7


def test_cast_to_int32_truncates_toward_zero() -> None:
    x = np.array([-2.7, -0.5, 0.5, 2.7, 2147483520.0, -2147483648.0], np.float32)
    got = run(cast_module("float32", "int32"), "f", x)
    np.testing.assert_array_equal(got, np.array([-2, 0, 0, 2, 2147483520, -2**31], np.int32))


@pytest.mark.parametrize("value", [3e9, -3e9, np.nan, np.inf])
def test_cast_to_int32_out_of_range_is_an_error(value: float) -> None:
    with pytest.raises(ReferenceError, match="cast to int32"):
        run(cast_module("float32", "int32"), "f", np.array([1.0, value], np.float32))


def test_cast_from_int32() -> None:
    x = np.array([2049, 2051, -2049, 70000, 16777217], np.int32)
    np.testing.assert_array_equal(run(cast_module("int32", "float16"), "f", x),
                                  [2048, 2052, -2048, np.inf, np.inf])
    np.testing.assert_array_equal(run(cast_module("int32", "float32"), "f", x),
                                  x.astype(np.float32))
    np.testing.assert_array_equal(run(cast_module("int32", "float32", "int32"), "f", x),
                                  np.array([2049, 2051, -2049, 70000, 16777216], np.int32))


# ---------------------------------------------------------------------------------------------
# Data movement


@pytest.mark.parametrize("m,n", [(1, 1), (3, 1), (1, 5), (4, 7)])
def test_broadcast(m: int, n: int) -> None:
    tn, tmn, t1n, s = ty("float32", "n"), ty("float32", "m", "n"), ty("float32", "m", 1), \
        ty("float32")
    body = f'''  %0 = "tile.broadcast"(%v) : ({tn}) -> {tmn}
  %1 = "tile.broadcast"(%col) : ({t1n}) -> {tmn}
  %c = "tile.constant"() {{value = 3.0 : f64}} : () -> {s}
  %2 = "tile.broadcast"(%c) : ({s}) -> {tmn}
  %3 = "tile.add"(%0, %1) : ({tmn}, {tmn}) -> {tmn}
  %4 = "tile.add"(%3, %2) : ({tmn}, {tmn}) -> {tmn}
  return %4 : {tmn}'''
    mod = parse(func([("v", tn), ("col", t1n), ("y", tmn)], [tmn], body, symbols=["n", "m"]))
    rng = np.random.default_rng(10)
    v, col = random(rng, (n,), "float32"), random(rng, (m, 1), "float32")
    y = np.zeros((m, n), np.float32)
    check(run(mod, "f", v, col, y), f64(v)[None, :] + f64(col) + 3.0, "float32")


LAYERNORM_IR = """\
func.func @layernorm(%x: tensor<?x?xf16, ["...", "$0"]> {tile.name = "x"})
    -> tensor<?x?xf16, ["...", "$0"]> attributes {tile.symbols = [], tile.lead = ["$0"]} {
  %0 = "tile.cast"(%x) : (tensor<?x?xf16, ["...", "$0"]>) -> tensor<?x?xf32, ["...", "$0"]>
  %1 = "tile.reduce"(%0) {kind = "mean", axes = array<i64: -1>, keepdims = true}
      : (tensor<?x?xf32, ["...", "$0"]>) -> tensor<?x1xf32, ["...", "1"]>
  %2 = "tile.reduce"(%0) {kind = "var", axes = array<i64: -1>, keepdims = true}
      : (tensor<?x?xf32, ["...", "$0"]>) -> tensor<?x1xf32, ["...", "1"]>
  %3 = "tile.broadcast"(%1) : (tensor<?x1xf32, ["...", "1"]>) -> tensor<?x?xf32, ["...", "$0"]>
  %4 = "tile.sub"(%0, %3) : (tensor<?x?xf32, ["...", "$0"]>, tensor<?x?xf32, ["...", "$0"]>)
      -> tensor<?x?xf32, ["...", "$0"]>
  %eps = "tile.constant"() {value = 1.0e-05 : f64} : () -> tensor<f32>
  %5 = "tile.add"(%2, %eps) : (tensor<?x1xf32, ["...", "1"]>, tensor<f32>)
      -> tensor<?x1xf32, ["...", "1"]>
  %6 = "tile.rsqrt"(%5) : (tensor<?x1xf32, ["...", "1"]>) -> tensor<?x1xf32, ["...", "1"]>
  %7 = "tile.broadcast"(%6) : (tensor<?x1xf32, ["...", "1"]>) -> tensor<?x?xf32, ["...", "$0"]>
  %8 = "tile.mul"(%4, %7) : (tensor<?x?xf32, ["...", "$0"]>, tensor<?x?xf32, ["...", "$0"]>)
      -> tensor<?x?xf32, ["...", "$0"]>
  %9 = "tile.cast"(%8) : (tensor<?x?xf32, ["...", "$0"]>) -> tensor<?x?xf16, ["...", "$0"]>
  return %9 : tensor<?x?xf16, ["...", "$0"]>
}
"""


@pytest.mark.parametrize("shape", [(1,), (7,), (4, 1), (2, 3, 33), (1, 1, 1, 5)])
def test_layernorm_rank_generic(shape: tuple[int, ...]) -> None:
    mod = parse(LAYERNORM_IR)
    x = random(np.random.default_rng(11), shape, "float16") * np.float16(4)
    xf = f64(x)
    mean = xf.sum(-1, keepdims=True) / shape[-1]
    var = ((xf - mean) ** 2).sum(-1, keepdims=True) / shape[-1]
    got = run(mod, "layernorm", x)
    assert got.shape == shape
    check(got, (xf - mean) / np.sqrt(var + 1e-5), "float16")


def test_rank_generic_parameter_needs_its_certain_dimensions() -> None:
    with pytest.raises(ReferenceError, match=r"argument 'x': expected rank >= 1 .*got rank 0"):
        run(parse(LAYERNORM_IR), "layernorm", np.array(1.0, np.float16))


SWIGLU_IR = """\
func.func @swiglu(%input: tensor<?x?x?xf16, ["batch", "seq", "2*hidden"]> {tile.name = "input"})
    -> tensor<?x?x?xf16, ["batch", "seq", "hidden"]>
    attributes {tile.symbols = ["batch", "seq", "hidden"]} {
  %x = "tile.slice"(%input) {starts = ["0", "0", "0"], ends = ["batch", "seq", "hidden"]}
      : (tensor<?x?x?xf16, ["batch", "seq", "2*hidden"]>)
      -> tensor<?x?x?xf16, ["batch", "seq", "hidden"]>
  %gate = "tile.slice"(%input) {starts = ["0", "0", "hidden"], ends = ["batch", "seq", "2*hidden"]}
      : (tensor<?x?x?xf16, ["batch", "seq", "2*hidden"]>)
      -> tensor<?x?x?xf16, ["batch", "seq", "hidden"]>
  %sig = "tile.sigmoid"(%gate) : (tensor<?x?x?xf16, ["batch", "seq", "hidden"]>)
      -> tensor<?x?x?xf16, ["batch", "seq", "hidden"]>
  %silu = "tile.mul"(%gate, %sig) : (tensor<?x?x?xf16, ["batch", "seq", "hidden"]>,
      tensor<?x?x?xf16, ["batch", "seq", "hidden"]>)
      -> tensor<?x?x?xf16, ["batch", "seq", "hidden"]>
  %0 = "tile.mul"(%x, %silu) : (tensor<?x?x?xf16, ["batch", "seq", "hidden"]>,
      tensor<?x?x?xf16, ["batch", "seq", "hidden"]>)
      -> tensor<?x?x?xf16, ["batch", "seq", "hidden"]>
  return %0 : tensor<?x?x?xf16, ["batch", "seq", "hidden"]>
}
"""


@pytest.mark.parametrize("shape", [(1, 1, 2), (2, 3, 10), (1, 5, 254)])
def test_swiglu_slices(shape: tuple[int, ...]) -> None:
    x = random(np.random.default_rng(12), shape, "float16")
    h = shape[-1] // 2
    a, g = f64(x)[..., :h], f64(x)[..., h:]
    check(run(parse(SWIGLU_IR), "swiglu", x), a * g / (1 + np.exp(-g)), "float16")


def test_bind_symbols_of_swiglu() -> None:
    func_op = find_function(parse(SWIGLU_IR), "swiglu")
    assert bind_symbols(func_op, [np.zeros((2, 3, 10), np.float16)]) == \
        {"batch": 2, "seq": 3, "hidden": 5}


def test_slice_of_a_rank_generic_tensor() -> None:
    t, th = ty("float32", "...", "2*h"), ty("float32", "...", "h")
    body = f'''  %0 = "tile.slice"(%x) {{starts = ["h"], ends = ["2*h"]}} : ({t}) -> {th}
  return %0 : {th}'''
    mod = parse(func([("x", t)], [th], body, symbols=["h"]))
    for shape in [(6,), (2, 3, 8)]:
        x = random(np.random.default_rng(13), shape, "float32")
        check(run(mod, "f", x), f64(x)[..., shape[-1] // 2:], "float32")


def test_slice_out_of_range_is_an_error_at_its_location() -> None:
    t, t1 = ty("float32", "n"), ty("float32", "n+1")
    body = f'''  %0 = "tile.slice"(%x) {{starts = ["0"], ends = ["n+1"]}} : ({t}) -> {t1}
      loc("s.tile":3:9)
  return %0 : {t1}'''
    with pytest.raises(ReferenceError, match=r"^s\.tile:3:9: slice 0:n\+1 = 0:5 .* out of range"):
        run(parse(func([("x", t)], [t1], body)), "f", np.zeros(4, np.float32))


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (2, 17)])
def test_concat(shape: tuple[int, ...]) -> None:
    t = ty("float32", "n", "m")
    last, first, three = ty("float32", "n", "2*m"), ty("float32", "2*n", "m"), \
        ty("float32", "n", "3*m")
    # operands of different shapes: [n, m] ++ [n, 2*m]
    body = f'''  %0 = "tile.concat"(%a, %b) {{axis = -1 : i64}} : ({t}, {t}) -> {last}
  %1 = "tile.concat"(%a, %b) {{axis = -2 : i64}} : ({t}, {t}) -> {first}
  %2 = "tile.concat"(%b, %0) {{axis = -1 : i64}} : ({t}, {last}) -> {three}
  return %0, %1, %2 : {last}, {first}, {three}'''
    mod = parse(func([("a", t), ("b", t)], [last, first, three], body, symbols=["n", "m"]))
    rng = np.random.default_rng(14)
    a, b = random(rng, shape, "float32"), random(rng, shape, "float32")
    got = run(mod, "f", a, b)
    assert isinstance(got, tuple) and len(got) == 3
    np.testing.assert_array_equal(got[0], np.hstack([a, b]))
    np.testing.assert_array_equal(got[1], np.vstack([a, b]))
    np.testing.assert_array_equal(got[2], np.hstack([b, a, b]))


def test_reshape() -> None:
    t, t3, flat = ty("float32", "t", "2*h"), ty("float32", "t", 2, "h"), ty("float32", "2*h*t")
    body = f'''  %0 = "tile.reshape"(%x) : ({t}) -> {t3}
  %1 = "tile.reshape"(%x) : ({t}) -> {flat}
  %2 = "tile.reshape"(%s) : ({ty("float32", 4, 6)}) -> {ty("float32", 3, 8)}
  return %0, %1, %2 : {t3}, {flat}, {ty("float32", 3, 8)}'''
    mod = parse(func([("x", t), ("s", ty("float32", 4, 6))],
                     [t3, flat, ty("float32", 3, 8)], body, symbols=["t", "h"]))
    x = np.arange(3 * 10, dtype=np.float32).reshape(3, 10)
    s = np.arange(24, dtype=np.float32).reshape(4, 6)
    a, b, c = run(mod, "f", x, s)
    np.testing.assert_array_equal(a, x.reshape(3, 2, 5))
    np.testing.assert_array_equal(b, x.ravel())
    np.testing.assert_array_equal(c, s.reshape(3, 8))


def test_reshape_with_a_different_count_is_an_error() -> None:
    tn, tm = ty("float32", "n"), ty("float32", "m")
    body = f'''  %0 = "tile.reshape"(%x) : ({tn}) -> {tm} loc("r.tile":2:5)
  return %0 : {tm}'''
    mod = parse(func([("x", tn), ("y", tm)], [tm], body))
    np.testing.assert_array_equal(run(mod, "f", np.ones(3, np.float32), np.ones(3, np.float32)),
                                  np.ones(3))
    with pytest.raises(ReferenceError, match=r"r\.tile:2:5: cannot reshape \[3\]"):
        run(mod, "f", np.ones(3, np.float32), np.ones(4, np.float32))


def test_transpose() -> None:
    t2, t2t = ty("float32", "n", "m"), ty("float32", "m", "n")
    t3, t3t = ty("float32", "a", "b", "c"), ty("float32", "c", "a", "b")
    g, gt = ty("float32", "...", "$0", "$1"), ty("float32", "...", "$1", "$0")
    body = f'''  %0 = "tile.transpose"(%x) {{perm = array<i64: 1, 0>}} : ({t2}) -> {t2t}
  %1 = "tile.transpose"(%y) {{perm = array<i64: 2, 0, 1>}} : ({t3}) -> {t3t}
  %2 = "tile.transpose"(%z) {{perm = array<i64: 1, 0>}} : ({g}) -> {gt}
  return %0, %1, %2 : {t2t}, {t3t}, {gt}'''
    mod = parse(func([("x", t2), ("y", t3), ("z", g)], [t2t, t3t, gt], body, lead=["$0", "$1"]))
    rng = np.random.default_rng(15)
    for zshape in [(3, 4), (2, 5, 3, 4)]:
        x, y, z = (random(rng, s, "float32") for s in [(3, 7), (2, 3, 5), zshape])
        a, b, c = run(mod, "f", x, y, z)
        np.testing.assert_array_equal(a, x.T)
        np.testing.assert_array_equal(b, np.transpose(y, (2, 0, 1)))
        np.testing.assert_array_equal(c, np.swapaxes(z, -1, -2))


# ---------------------------------------------------------------------------------------------
# Reductions, softmax, matmul


def _reduce_want(kind: str, x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    count = math.prod(x.shape[a] for a in axes)
    mean = x.sum(axis=axes, keepdims=True) / count
    want = {"sum": x.sum(axis=axes, keepdims=True), "mean": mean,
            "max": x.max(axis=axes, keepdims=True), "min": x.min(axis=axes, keepdims=True),
            "var": ((x - mean) ** 2).sum(axis=axes, keepdims=True) / count}[kind]
    return want if keepdims else want.reshape([s for i, s in enumerate(x.shape)
                                              if i - x.ndim not in axes])


@pytest.mark.parametrize("keepdims", [True, False])
@pytest.mark.parametrize("axes", [(-1,), (-2,), (-3, -1), (-2, -1)])
@pytest.mark.parametrize("kind", ["sum", "mean", "max", "min", "var"])
def test_reduce(kind: str, axes: tuple[int, ...], keepdims: bool) -> None:
    dims = ["a", "b", "c"]
    kept = [1 if i - 3 in axes else d for i, d in enumerate(dims)]
    res = ty("float32", *(kept if keepdims else [d for d in kept if d != 1]))
    t = ty("float32", *dims)
    axes_text = ", ".join(map(str, axes))
    attrs = f'kind = "{kind}", axes = array<i64: {axes_text}>, keepdims = {str(keepdims).lower()}'
    body = f'''  %0 = "tile.reduce"(%x) {{{attrs}}} : ({t}) -> {res}
  return %0 : {res}'''
    mod = parse(func([("x", t)], [res], body, symbols=dims))
    for shape in [(1, 1, 1), (2, 3, 5), (3, 1, 129)]:
        x = random(np.random.default_rng(16), shape, "float32")
        check(run(mod, "f", x), _reduce_want(kind, f64(x), axes, keepdims), "float32")


def test_reduce_int32_sum_wraps_and_max_is_exact() -> None:
    t, r = ty("int32", "n"), ty("int32")
    body = f'''  %0 = "tile.reduce"(%x) {{kind = "sum", axes = array<i64: -1>, keepdims = false}}
      : ({t}) -> {r}
  %1 = "tile.reduce"(%x) {{kind = "max", axes = array<i64: -1>, keepdims = false}} : ({t}) -> {r}
  return %0, %1 : {r}, {r}'''
    mod = parse(func([("x", t)], [r, r], body))
    total, top = run(mod, "f", np.array([2**31 - 1, 1, 5, -2**31 + 3], np.int32))
    assert total.dtype == np.int32 and total.shape == ()
    assert total == np.array([2**31 - 1, 1, 5, -2**31 + 3], np.int32).sum(dtype=np.int32)
    assert top == 2**31 - 1


def test_reduce_max_of_nothing_is_minus_infinity() -> None:
    t, r = ty("float32", "n", "m"), ty("float32", "n")
    body = f'''  %0 = "tile.reduce"(%x) {{kind = "max", axes = array<i64: -1>, keepdims = false}}
      : ({t}) -> {r}
  return %0 : {r}'''
    got = run(parse(func([("x", t)], [r], body)), "f", np.zeros((3, 0), np.float32))
    np.testing.assert_array_equal(got, np.full(3, -np.inf, np.float32))


def softmax_module(dtype: str, axis: int) -> ir.Module:
    t = ty(dtype, "a", "b", "c")
    body = f'''  %0 = "tile.softmax"(%x) {{axis = {axis} : i64}} : ({t}) -> {t}
  return %0 : {t}'''
    return parse(func([("x", t)], [t], body))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axis", [-1, -2, -3])
def test_softmax(axis: int, dtype: str) -> None:
    for shape in [(1, 1, 1), (2, 3, 5), (1, 4, 33)]:
        x = f64(random(np.random.default_rng(17), shape, dtype, -8, 8))
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        check(run(softmax_module(dtype, axis), "f", x.astype(NUMPY_DTYPES[dtype])),
              e / e.sum(axis=axis, keepdims=True), dtype)


def test_softmax_is_stable() -> None:
    x = np.array([[[1000.0, 1000.0, -1000.0], [-1e30, 0.0, 1e30]]], np.float32)
    got = run(softmax_module("float32", -1), "f", x)
    np.testing.assert_array_equal(got, np.array([[[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]]))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mkn", [(1, 1, 1), (3, 5, 7), (17, 64, 4)])
def test_matmul(mkn: tuple[int, int, int], dtype: str) -> None:
    m, k, n = mkn
    ta, tb, tc = ty(dtype, "b", "m", "k"), ty(dtype, "b", "k", "n"), ty(dtype, "b", "m", "n")
    ta2, tb2, tc2 = ty(dtype, "m", "k"), ty(dtype, "k", "n"), ty(dtype, "m", "n")
    body = f'''  %0 = "tile.matmul"(%x, %y) : ({ta}, {tb}) -> {tc}
  %1 = "tile.matmul"(%u, %v) : ({ta2}, {tb2}) -> {tc2}
  return %0, %1 : {tc}, {tc2}'''
    mod = parse(func([("x", ta), ("y", tb), ("u", ta2), ("v", tb2)], [tc, tc2], body))
    rng = np.random.default_rng(18)
    x, y = random(rng, (2, m, k), dtype), random(rng, (2, k, n), dtype)
    u, v = random(rng, (m, k), dtype), random(rng, (k, n), dtype)
    batched, plain = run(mod, "f", x, y, u, v)
    want = np.einsum("bmk,bkn->bmn", f64(x), f64(y))
    check(batched, want, dtype)
    check(plain, np.einsum("mk,kn->mn", f64(u), f64(v)), dtype)


# ---------------------------------------------------------------------------------------------
# The examples, by hand in tile IR


RMSNORM_IR = """\
func.func @rmsnorm(%x: tensor<?x?xbf16, ["seq", "hidden"]> {tile.name = "x"},
                   %weight: tensor<?xbf16, ["hidden"]> {tile.name = "weight"},
                   %eps: tensor<f32> {tile.name = "eps", tile.scalar, tile.default = 1.0e-06 : f64})
    -> tensor<?x?xbf16, ["seq", "hidden"]> attributes {tile.symbols = ["seq", "hidden"]} {
  %xf = "tile.cast"(%x) : (tensor<?x?xbf16, ["seq", "hidden"]>)
      -> tensor<?x?xf32, ["seq", "hidden"]>
  %sq = "tile.mul"(%xf, %xf) : (tensor<?x?xf32, ["seq", "hidden"]>,
      tensor<?x?xf32, ["seq", "hidden"]>)
      -> tensor<?x?xf32, ["seq", "hidden"]>
  %ms = "tile.reduce"(%sq) {kind = "mean", axes = array<i64: -1>, keepdims = true}
      : (tensor<?x?xf32, ["seq", "hidden"]>) -> tensor<?x1xf32, ["seq", "1"]>
  %0 = "tile.add"(%ms, %eps) : (tensor<?x1xf32, ["seq", "1"]>, tensor<f32>)
      -> tensor<?x1xf32, ["seq", "1"]>
  %1 = "tile.rsqrt"(%0) : (tensor<?x1xf32, ["seq", "1"]>) -> tensor<?x1xf32, ["seq", "1"]>
  %2 = "tile.broadcast"(%1) : (tensor<?x1xf32, ["seq", "1"]>) -> tensor<?x?xf32, ["seq", "hidden"]>
  %3 = "tile.mul"(%xf, %2) : (tensor<?x?xf32, ["seq", "hidden"]>,
      tensor<?x?xf32, ["seq", "hidden"]>)
      -> tensor<?x?xf32, ["seq", "hidden"]>
  %wf = "tile.cast"(%weight) : (tensor<?xbf16, ["hidden"]>) -> tensor<?xf32, ["hidden"]>
  %4 = "tile.broadcast"(%wf) : (tensor<?xf32, ["hidden"]>) -> tensor<?x?xf32, ["seq", "hidden"]>
  %5 = "tile.mul"(%3, %4) : (tensor<?x?xf32, ["seq", "hidden"]>, tensor<?x?xf32, ["seq", "hidden"]>)
      -> tensor<?x?xf32, ["seq", "hidden"]>
  %6 = "tile.cast"(%5) : (tensor<?x?xf32, ["seq", "hidden"]>) -> tensor<?x?xbf16, ["seq", "hidden"]>
  return %6 : tensor<?x?xbf16, ["seq", "hidden"]>
}
"""


def _rmsnorm_want(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    xf = f64(x)
    return xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + eps) * f64(w)


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (5, 128)])
def test_rmsnorm_defaults_and_keywords(shape: tuple[int, int]) -> None:
    mod = parse(RMSNORM_IR)
    rng = np.random.default_rng(19)
    x, w = random(rng, shape, "bfloat16"), random(rng, shape[-1:], "bfloat16")
    eps32 = float(np.float32(1e-6))
    check(run(mod, "rmsnorm", x, w), _rmsnorm_want(x, w, eps32), "bfloat16")
    check(run(mod, "rmsnorm", weight=w, x=x, eps=0.5), _rmsnorm_want(x, w, 0.5), "bfloat16")
    check(run(mod, "rmsnorm", x, w, np.float32(2.0)), _rmsnorm_want(x, w, 2.0), "bfloat16")
    check(run(mod, "rmsnorm", x, w, eps=np.array(3.0, np.float32)), _rmsnorm_want(x, w, 3.0),
          "bfloat16")


ROPE_IR = """\
func.func @rotary_emb(%q: tensor<?x?x?xf16, ["tokens", "heads", "2*half"]> {tile.name = "q"},
                      %rope_freqs: tensor<?x?xf32, ["tokens", "2*half"]> {tile.name = "rope_freqs"})
    -> tensor<?x?x?xf16, ["tokens", "heads", "2*half"]>
    attributes {tile.symbols = ["tokens", "heads", "half"]} {
  %c32 = "tile.slice"(%rope_freqs) {starts = ["0", "0"], ends = ["tokens", "half"]}
      : (tensor<?x?xf32, ["tokens", "2*half"]>) -> tensor<?x?xf32, ["tokens", "half"]>
  %s32 = "tile.slice"(%rope_freqs) {starts = ["0", "half"], ends = ["tokens", "2*half"]}
      : (tensor<?x?xf32, ["tokens", "2*half"]>) -> tensor<?x?xf32, ["tokens", "half"]>
  %cos = "tile.cast"(%c32) : (tensor<?x?xf32, ["tokens", "half"]>)
      -> tensor<?x?xf16, ["tokens", "half"]>
  %sin = "tile.cast"(%s32) : (tensor<?x?xf32, ["tokens", "half"]>)
      -> tensor<?x?xf16, ["tokens", "half"]>
  %q1 = "tile.slice"(%q) {starts = ["0", "0", "0"], ends = ["tokens", "heads", "half"]}
      : (tensor<?x?x?xf16, ["tokens", "heads", "2*half"]>)
      -> tensor<?x?x?xf16, ["tokens", "heads", "half"]>
  %q2 = "tile.slice"(%q) {starts = ["0", "0", "half"], ends = ["tokens", "heads", "2*half"]}
      : (tensor<?x?x?xf16, ["tokens", "heads", "2*half"]>)
      -> tensor<?x?x?xf16, ["tokens", "heads", "half"]>
  %c = "tile.reshape"(%cos) : (tensor<?x?xf16, ["tokens", "half"]>)
      -> tensor<?x1x?xf16, ["tokens", "1", "half"]>
  %s = "tile.reshape"(%sin) : (tensor<?x?xf16, ["tokens", "half"]>)
      -> tensor<?x1x?xf16, ["tokens", "1", "half"]>
  %cb = "tile.broadcast"(%c) : (tensor<?x1x?xf16, ["tokens", "1", "half"]>)
      -> tensor<?x?x?xf16, ["tokens", "heads", "half"]>
  %sb = "tile.broadcast"(%s) : (tensor<?x1x?xf16, ["tokens", "1", "half"]>)
      -> tensor<?x?x?xf16, ["tokens", "heads", "half"]>
  %0 = "tile.mul"(%q1, %cb) : (tensor<?x?x?xf16, ["tokens", "heads", "half"]>,
      tensor<?x?x?xf16, ["tokens", "heads", "half"]>)
      -> tensor<?x?x?xf16, ["tokens", "heads", "half"]>
  %1 = "tile.mul"(%q2, %sb) : (tensor<?x?x?xf16, ["tokens", "heads", "half"]>,
      tensor<?x?x?xf16, ["tokens", "heads", "half"]>)
      -> tensor<?x?x?xf16, ["tokens", "heads", "half"]>
  %lo = "tile.sub"(%0, %1) : (tensor<?x?x?xf16, ["tokens", "heads", "half"]>,
      tensor<?x?x?xf16, ["tokens", "heads", "half"]>)
      -> tensor<?x?x?xf16, ["tokens", "heads", "half"]>
  %2 = "tile.mul"(%q2, %cb) : (tensor<?x?x?xf16, ["tokens", "heads", "half"]>,
      tensor<?x?x?xf16, ["tokens", "heads", "half"]>)
      -> tensor<?x?x?xf16, ["tokens", "heads", "half"]>
  %3 = "tile.mul"(%q1, %sb) : (tensor<?x?x?xf16, ["tokens", "heads", "half"]>,
      tensor<?x?x?xf16, ["tokens", "heads", "half"]>)
      -> tensor<?x?x?xf16, ["tokens", "heads", "half"]>
  %hi = "tile.add"(%2, %3) : (tensor<?x?x?xf16, ["tokens", "heads", "half"]>,
      tensor<?x?x?xf16, ["tokens", "heads", "half"]>)
      -> tensor<?x?x?xf16, ["tokens", "heads", "half"]>
  %r = "tile.concat"(%lo, %hi) {axis = -1 : i64} : (tensor<?x?x?xf16, ["tokens", "heads", "half"]>,
      tensor<?x?x?xf16, ["tokens", "heads", "half"]>)
      -> tensor<?x?x?xf16, ["tokens", "heads", "2*half"]>
  return %r : tensor<?x?x?xf16, ["tokens", "heads", "2*half"]>
}
"""


@pytest.mark.parametrize("tokens,heads,half", [(1, 1, 1), (3, 4, 8), (5, 2, 63)])
def test_rope(tokens: int, heads: int, half: int) -> None:
    rng = np.random.default_rng(20)
    q = random(rng, (tokens, heads, 2 * half), "float16")
    freqs = random(rng, (tokens, 2 * half), "float32", -1, 1)
    cos = f64(freqs[:, :half].astype(np.float16))[:, None, :]
    sin = f64(freqs[:, half:].astype(np.float16))[:, None, :]
    q1, q2 = f64(q)[..., :half], f64(q)[..., half:]
    want = np.concatenate([q1 * cos - q2 * sin, q2 * cos + q1 * sin], axis=-1)
    check(run(parse(ROPE_IR), "rotary_emb", q, rope_freqs=freqs), want, "float16")


# ---------------------------------------------------------------------------------------------
# Structure: tile.fused, tile.check


def test_fused_region() -> None:
    t = ty("float32", "n")
    runs = "array<i32: 2, 0, 0, 0, 0, 0, 0, 0>"  # operand/result segments (ops.TYPE_RUNS)
    inner = f'''    %e = "tile.exp"(%p) : ({t}) -> {t}
    %m = "tile.mul"(%e, %q) : ({t}, {t}) -> {t}
    "tile.yield"(%m, %e) {{operandSegmentSizes = {runs}}}
      : ({t}, {t}) -> ()'''
    body = f'''  %0:2 = "tile.fused"(%a, %b) ({{
  ^bb0(%p: {t}, %q: {t}):
{inner}
  }}) {{operandSegmentSizes = {runs}, resultSegmentSizes = {runs}}}
      : ({t}, {t}) -> ({t}, {t})
  %1 = "tile.add"(%0#0, %0#1) : ({t}, {t}) -> {t}
  return %1, %0#1 : {t}, {t}'''
    mod = parse(func([("a", t), ("b", t)], [t, t], body))
    rng = np.random.default_rng(21)
    a, b = random(rng, (9,), "float32"), random(rng, (9,), "float32")
    got, exp = run(mod, "f", a, b)
    check(got, np.exp(f64(a)) * f64(b) + np.exp(f64(a)), "float32")
    check(exp, np.exp(f64(a)), "float32")


def check_module(rel: str) -> ir.Module:
    t, th = ty("float32", "n"), ty("float32", "h")
    body = f'''  "tile.check"() {{lhs = "h", rel = "{rel}", rhs = "n",
                  message = "slice end h exceeds the size n of x"}}
      : () -> () loc("swiglu.tile":4:3)
  %0 = "tile.slice"(%x) {{starts = ["0"], ends = ["h"]}} : ({t}) -> {th}
  return %0 : {th}'''
    return parse(func([("x", t), ("y", th)], [th], body))


def test_check_passes() -> None:
    x = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(run(check_module("le"), "f", x, np.zeros(3, np.float32)), x[:3])
    np.testing.assert_array_equal(run(check_module("eq"), "f", x, np.zeros(5, np.float32)), x)


@pytest.mark.parametrize("rel,h", [("le", 6), ("eq", 3)])
def test_failing_check_names_its_message_and_location(rel: str, h: int) -> None:
    with pytest.raises(ReferenceError) as err:
        run(check_module(rel), "f", np.zeros(5, np.float32), np.zeros(h, np.float32))
    assert str(err.value) == \
        f"swiglu.tile:4:3: slice end h exceeds the size n of x (h = {h}, n = 5)"


# ---------------------------------------------------------------------------------------------
# Errors of the caller


def two_param_module(tx: str, ty_: str) -> ir.Module:
    return parse(func([("x", tx), ("y", ty_)], [tx], f"  return %x : {tx}"))


@pytest.mark.parametrize("args,message", [
    ((np.zeros((2, 3), np.float32), np.zeros(3, np.float32)), None),
    ((np.zeros(3, np.float32), np.zeros(3, np.float32)),
     r"argument 'x': expected rank 2 \(shape \[n, m\]\), got rank 1 \(shape \(3,\)\)"),
    ((np.zeros((2, 3), np.float16), np.zeros(3, np.float32)),
     r"argument 'x': expected dtype float32, got float16"),
    ((np.zeros((2, 3), np.float32), [0.0, 0.0, 0.0]),
     r"argument 'y': expected a NumPy array of float32, got list"),
    ((np.zeros((2, 3), np.float32), np.zeros(4, np.float32)),
     r"symbol m is 3 from argument 'x' dimension 1 but argument 'y' dimension 0 is 4"),
])
def test_argument_errors(args: tuple, message: str | None) -> None:
    mod = two_param_module(ty("float32", "n", "m"), ty("float32", "m"))
    if message is None:
        np.testing.assert_array_equal(run(mod, "f", *args), args[0])
        return
    with pytest.raises(ReferenceError, match=f"^{message}$"):
        run(mod, "f", *args)


def test_static_dimension() -> None:
    mod = two_param_module(ty("float32", 4, "n"), ty("float32", "n"))
    with pytest.raises(ReferenceError, match=r"^argument 'x' dimension 0: expected 4, got 5$"):
        run(mod, "f", np.zeros((5, 2), np.float32), np.zeros(2, np.float32))


def test_odd_size_for_2_hidden() -> None:
    with pytest.raises(ReferenceError, match=r"^argument 'input' dimension 2 is 2\*hidden = 9: "
                                             r"hidden would be 9/2, not a non-negative integer$"):
        run(parse(SWIGLU_IR), "swiglu", np.zeros((1, 2, 9), np.float16))


def test_negative_solution() -> None:
    mod = two_param_module(ty("float32", "n+4"), ty("float32", "n"))
    with pytest.raises(ReferenceError, match="n would be -2, not a non-negative integer"):
        run(mod, "f", np.zeros(2, np.float32), np.zeros(0, np.float32))


def test_conflict_through_an_expression() -> None:
    mod = two_param_module(ty("float32", "2*h"), ty("float32", "h+1"))
    run(mod, "f", np.zeros(6, np.float32), np.zeros(4, np.float32))
    with pytest.raises(ReferenceError, match=r"^argument 'y' dimension 0: expected h\+1 = 4 "
                                             r"\(h = 3 from argument 'x' dimension 0\), got 5$"):
        run(mod, "f", np.zeros(6, np.float32), np.zeros(5, np.float32))


def test_symbols_bound_in_any_order() -> None:
    # x's n*m needs both; y binds m and z binds n later in the list
    mod = parse(func([("x", ty("float32", "n*m")), ("y", ty("float32", "m")),
                      ("z", ty("float32", "n+1"))], [ty("float32", "n*m")],
                     f'  return %x : {ty("float32", "n*m")}'))
    func_op = find_function(mod, "f")
    args = [np.zeros(12, np.float32), np.zeros(3, np.float32), np.zeros(5, np.float32)]
    assert bind_symbols(func_op, args) == {"m": 3, "n": 4}
    with pytest.raises(ReferenceError, match=r"argument 'x' dimension 0: expected m\*n = 12"):
        run(mod, "f", np.zeros(11, np.float32), *args[1:])


def test_unbindable_symbol() -> None:
    mod = two_param_module(ty("float32", "n*m"), ty("float32", "m*n"))
    with pytest.raises(ReferenceError, match=r"argument 'x' dimension 0 is m\*n: cannot bind m, n"):
        run(mod, "f", np.zeros(6, np.float32), np.zeros(6, np.float32))


def test_inconsistent_leading_dimensions() -> None:
    g = ty("float32", "...", "$0")
    mod = parse(func([("x", g), ("y", g)], [g], f"  return %x : {g}", lead=["$0"]))
    run(mod, "f", np.zeros((2, 3, 4), np.float32), np.zeros((2, 3, 4), np.float32))
    with pytest.raises(ReferenceError, match=r"^argument 'y': its '\.\.\.' dimensions \(2, 5\) "
                                             r"differ from \(2, 3\) of argument 'x'$"):
        run(mod, "f", np.zeros((2, 3, 4), np.float32), np.zeros((2, 5, 4), np.float32))
    with pytest.raises(ReferenceError, match=r"dimensions \(\) differ from \(2,\)"):
        run(mod, "f", np.zeros((2, 4), np.float32), np.zeros(4, np.float32))


def test_calling_errors() -> None:
    mod = parse(RMSNORM_IR)
    x, w = np.zeros((2, 4), ml_dtypes.bfloat16), np.zeros(4, ml_dtypes.bfloat16)
    cases = [
        ((x,), {}, r"^missing argument 'weight'$"),
        ((x, w), {"bias": w}, r"^unknown argument 'bias'; parameters: x, weight, eps$"),
        ((x, w), {"x": x}, r"^argument 'x' given twice$"),
        ((x, w, 1.0, 2.0), {}, r"^expected at most 3 arguments, got 4$"),
        ((x, w, np.float16(1.0)), {}, r"^argument 'eps': expected dtype float32, got float16$"),
        ((x, w, True), {}, r"^argument 'eps': expected a NumPy array of float32, got bool$"),
    ]
    for args, kwargs, message in cases:
        with pytest.raises(ReferenceError, match=message):
            run(mod, "rmsnorm", *args, **kwargs)
    with pytest.raises(ReferenceError, match=r"^no function 'norm' in the module; it has: "
                                             r"rmsnorm$"):
        run(mod, "norm", x, w)


def test_int32_scalar_parameter() -> None:
    t, s = ty("int32", "n"), ty("int32")
    mod = parse(func([("x", t), ("k", s, "tile.scalar, tile.default = 7 : i64")], [t],
                     f'  %0 = "tile.add"(%x, %k) : ({t}, {s}) -> {t}\n  return %0 : {t}'))
    x = np.array([1, 2], np.int32)
    np.testing.assert_array_equal(run(mod, "f", x), [8, 9])
    np.testing.assert_array_equal(run(mod, "f", x, k=-1), [0, 1])
    for bad in [2**31, 1.5]:
        with pytest.raises(ReferenceError, match=f"argument 'k': expected an int32, got {bad}"):
            run(mod, "f", x, k=bad)


def test_unknown_operation_is_named() -> None:
    t = ty("float32", "n")
    body = f'  %0 = "foo.bar"(%x) : ({t}) -> {t} loc("u.tile":1:2)\n  return %0 : {t}'
    mod = parse(func([("x", t)], [t], body), unregistered=True)
    with pytest.raises(ReferenceError, match=r"^u\.tile:1:2: the reference does not know "
                                             r"operation 'foo\.bar'$"):
        run(mod, "f", np.zeros(2, np.float32))


def test_result_type_that_disagrees_is_an_internal_error() -> None:
    tn, tm = ty("float32", "n"), ty("float32", "m")
    body = f'  %0 = "tile.exp"(%x) : ({tn}) -> {tm}\n  return %0 : {tm}'
    mod = parse(func([("x", tn), ("y", tm)], [tm], body))
    with pytest.raises(ReferenceError, match=r"^internal: tile.exp at .*computed float64\[3\] "
                                             r"for a result of type .*, which is \[4\] here$"):
        run(mod, "f", np.zeros(3, np.float32), np.zeros(4, np.float32))


def test_a_cast_near_an_integer_may_land_on_either_side_of_it() -> None:
    module = compile_source("func q(x: Tensor<f32>[n], s: float32) -> Tensor<i32>[n] {\n"
                            "  return cast(x / s, i32);\n}\n", "q.tile")
    # float32's tolerance at 3 is 1e-5 + 3e-4: 2.9999 and 3.0 are that close to the boundary
    # at 3, -2.99995 to the one at -3; 3.01 and 0.5 are not near any
    x = np.array([2.9999, 3.0, 3.01, -2.99995, 0.5], np.float32)
    (nominal,), (d,) = allowed(module, "q", x, 1.0)
    np.testing.assert_array_equal(nominal, [2, 3, 3, -2, 0])
    np.testing.assert_array_equal(d, [1, 1, 0, 1, 0])
    np.testing.assert_array_equal(nominal, run(module, "q", x, 1.0))


def test_what_is_computed_from_such_a_cast_may_move_with_it() -> None:
    module = compile_source("func f(x: Tensor<f32>[n]) -> Tensor<f32>[n] {\n"
                            "  return cast(cast(x, i32) * 2, f32) * 0.5;\n}\n", "f.tile")
    (value,), (d,) = allowed(module, "f", np.array([2.99999, 2.5], np.float32))
    np.testing.assert_array_equal(value, [2.0, 2.0])
    assert abs(d[0] - 1.0) < 1e-6 and d[1] < 1e-6   # 2 * 0.5 = 1 either way, and a rounding
