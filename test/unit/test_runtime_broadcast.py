"""Run-time broadcasting of different symbols (language 1.1, issue 15): the Hugging Face
rotary case, ``cos`` of batch ``cb`` against ``q`` of batch ``b``, with ``cb == b`` and
``cb == 1``, on ``cpu`` (-O0, -O2) and ``ascend-sim`` against the reference and NumPy; where
no declared result names either symbol, either side may be 1; a mismatch raises naming the
arguments."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tilec
from tilec.cli import main
from tilec.frontend import compile_source
from tilec.harness.numerics import assert_close
from tilec.dims import Dim
from tilec.harness.reference import ReferenceError, run

ROTARY = """
func rotate(x: Tensor<float32>[b, h, s, d]) -> Tensor<float32>[b, h, s, d] {
  return concat(-x[:, :, :, d/2:d], x[:, :, :, 0:d/2], axis=-1);
}
func rotary(q: Tensor<float32>[b, h, s, d], cos: Tensor<float32>[cb, 1, s, d],
            sin: Tensor<float32>[cb, 1, s, d]) -> Tensor<float32>[b, h, s, d] {
  return q * cos + rotate(q) * sin;
}
"""
CONFIGS = [pytest.param("cpu", 2, id="cpu"), pytest.param("cpu", 0, id="cpu-O0"),
           pytest.param("ascend-sim", 2, id="ascend-sim")]


def numpy_rotary(q: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    half = q.shape[-1] // 2
    rotated = np.concatenate([-q[..., half:], q[..., :half]], axis=-1)
    return q * cos + rotated * sin


def inputs(b: int, cb: int, h: int = 3, s: int = 5, d: int = 8) -> list[np.ndarray]:
    rng = np.random.default_rng(b * 10 + cb)
    q = rng.standard_normal((b, h, s, d)).astype(np.float32)
    cos, sin = (rng.standard_normal((cb, 1, s, d)).astype(np.float32) for _ in range(2))
    return [q, cos, sin]


@pytest.fixture(scope="module")
def reference_module():
    return compile_source(ROTARY, "rotary.tile")


@pytest.mark.parametrize("b,cb", [(3, 3), (3, 1), (1, 1), (4, 4)])
@pytest.mark.parametrize("target,opt", CONFIGS)
def test_rotary_broadcasts_cos_at_run_time(target: str, opt: int, b: int, cb: int,
                                           reference_module) -> None:
    lib = tilec.compile_string(ROTARY, "rotary.tile", target=target, opt_level=opt)
    args = inputs(b, cb)
    got = lib.rotary(*args)
    want = run(reference_module, "rotary", *args)
    assert got.shape == (b, 3, 5, 8)
    assert_close(got, np.asarray(want), "float32")
    np.testing.assert_allclose(got, numpy_rotary(*args), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target,opt", CONFIGS)
def test_a_batch_that_does_not_broadcast_names_the_arguments(target: str, opt: int) -> None:
    lib = tilec.compile_string(ROTARY, "rotary.tile", target=target, opt_level=opt)
    with pytest.raises(RuntimeError) as caught:
        lib.rotary(*inputs(3, 2))
    message = str(caught.value)
    assert "cb (of 'cos') must equal b (of 'q') or be 1" in message
    assert "cb = 2" in message and "b = 3" in message


def test_the_reference_refuses_a_batch_that_does_not_broadcast(reference_module) -> None:
    with pytest.raises(ReferenceError, match=r"cb \(of 'cos'\) must equal b \(of 'q'\) or be 1 "
                       r"\(cb = 2, b = 3\)"):
        run(reference_module, "rotary", *inputs(3, 2))


def test_the_declared_result_picks_the_dimension() -> None:
    """``cb`` names the result, so ``b`` is the one that stretches: b == 1 runs."""
    text = """
func f(q: Tensor<float32>[b, n], c: Tensor<float32>[cb, n]) -> Tensor<float32>[cb, n] {
  return q * c;
}
"""
    lib = tilec.compile_string(text, "f.tile")
    q = np.arange(4, dtype=np.float32).reshape(1, 4)
    c = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(lib.f(q, c), q * c)
    np.testing.assert_array_equal(lib.f(np.ones((3, 4), np.float32), c), c)
    with pytest.raises(RuntimeError, match=r"b \(of 'q'\) must equal cb \(of 'c'\) or be 1"):
        lib.f(np.ones((2, 4), np.float32), c)


# --- tilec.torch --------------------------------------------------------------------------------
def test_torch_operator_broadcasts_and_checks_under_compile() -> None:
    torch = pytest.importorskip("torch")
    import tilec.torch
    ops = tilec.torch.register(tilec.compile_string(ROTARY, "rotary.tile"), "t_rtbcast")
    rotary = ops.rotary
    compiled = torch.compile(lambda q, c, s: torch.ops.t_rtbcast.rotary(q, c, s) * 2,
                             backend="aot_eager", fullgraph=True, dynamic=True)
    for b, cb in ((3, 3), (3, 1), (2, 2), (4, 1)):
        q, cos, sin = (torch.from_numpy(a) for a in inputs(b, cb))
        want = torch.from_numpy(numpy_rotary(q.numpy(), cos.numpy(), sin.numpy()))
        torch.testing.assert_close(rotary(q, cos, sin), want)
        torch.testing.assert_close(compiled(q, cos, sin), want * 2)
    with torch._subclasses.fake_tensor.FakeTensorMode():
        fake = torch.empty(3, 3, 5, 8), torch.empty(1, 1, 5, 8), torch.empty(1, 1, 5, 8)
        assert torch.ops.t_rtbcast.rotary(*fake).shape == (3, 3, 5, 8)
        bad = torch.empty(3, 3, 5, 8), torch.empty(2, 1, 5, 8), torch.empty(2, 1, 5, 8)
        with pytest.raises(Exception, match=r"cb \(of 'cos'\) must equal b \(of 'q'\) or be 1"):
            torch.ops.t_rtbcast.rotary(*bad)


def test_ptxas_accepts_the_generic_and_the_broadcast_variant(tmp_path: Path) -> None:
    source = tmp_path / "rotary.tile"
    source.write_text(ROTARY)
    assert main([str(source), "--target", "ptx", "--emit=cubin",
                 "-o", str(tmp_path / "rotary.cubin")]) == 0
    ptx = tmp_path / "rotary.ptx"
    assert main([str(source), "--target", "ptx", "--emit=ptx", "-o", str(ptx)]) == 0
    entries = [line for line in ptx.read_text().splitlines() if ".entry" in line]
    assert any("rotary__cb_1" in e for e in entries) and any("rotary_" in e and "cb_1" not in e
                                                             for e in entries), entries


def test_a_define_on_one_side_broadcasts_against_the_constant() -> None:
    lib = tilec.compile_string(ROTARY, "rotary.tile", defines={"b": 3})
    for cb in (3, 1):
        args = inputs(3, cb)
        np.testing.assert_allclose(lib.rotary(*args), numpy_rotary(*args), rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match=r"cb \(of 'cos'\) must be 3 or be 1 .*cb = 2"):
        lib.rotary(*inputs(3, 2))


REDUCED = """
func f(q: Tensor<float32>[b, n], c: Tensor<float32>[cb, n]) -> Tensor<float32>[n] {
  return reduce_sum(c * q + q * c, axes=[0], keepdims=false);
}
"""
EITHER = [(3, 3), (1, 3), (3, 1), (1, 1)]


def reduced_inputs(b: int, cb: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(b * 10 + cb)
    return (rng.standard_normal((b, 6)).astype(np.float32),
            rng.standard_normal((cb, 6)).astype(np.float32))


@pytest.mark.parametrize("target,opt", CONFIGS)
def test_either_side_may_be_1_where_no_result_names_the_symbols(target: str, opt: int) -> None:
    """No declared result names b or cb: the broadcast's extent is the larger one (the sum
    runs over 3 rows whichever side is 1), and two broadcasts of the same symbols agree.
    Sizes that differ with neither 1 raise naming both arguments."""
    lib = tilec.compile_string(REDUCED, "f.tile", target=target, opt_level=opt)
    module = compile_source(REDUCED, "f.tile")
    for b, cb in EITHER:
        q, c = reduced_inputs(b, cb)
        want = (2 * c * q).sum(axis=0)
        np.testing.assert_allclose(lib.f(q, c), want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(run(module, "f", q, c), want, rtol=1e-5, atol=1e-6)
    message = (r"b \(of 'q'\) and cb \(of 'c'\) must be equal or one of them 1 "
               r"\(b = 3, cb = 2\)")
    with pytest.raises(RuntimeError, match=message):
        lib.f(*reduced_inputs(3, 2))
    with pytest.raises(ReferenceError, match=message):
        run(module, "f", *reduced_inputs(3, 2))


def test_either_side_may_be_1_without_the_generic_kernel() -> None:
    lib = tilec.compile_string(REDUCED, "f.tile", no_generic=True)
    for b, cb in ((1, 3), (3, 1), (1, 1)):
        q, c = reduced_inputs(b, cb)
        np.testing.assert_allclose(lib.f(q, c), (2 * c * q).sum(axis=0), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="no variant"):   # equal sizes need the generic kernel
        lib.f(*reduced_inputs(3, 3))


def test_ptx_has_a_kernel_for_each_direction(tmp_path: Path) -> None:
    source = tmp_path / "f.tile"
    source.write_text(REDUCED)
    assert main([str(source), "--target", "ptx", "--emit=cubin",
                 "-o", str(tmp_path / "f.cubin")]) == 0       # ptxas accepts it
    ptx = tmp_path / "f.ptx"
    assert main([str(source), "--target", "ptx", "--emit=ptx", "-o", str(ptx)]) == 0
    entries = [line for line in ptx.read_text().splitlines() if ".entry" in line]
    for variant in ("f__b_1", "f__cb_1"):
        assert any(variant in e for e in entries), entries


def test_a_declared_result_keeps_its_size() -> None:
    """The result is declared [b, h, s, d]: with b = 1 and cb = 3 the broadcast would be 3
    long, not b, so it is refused (language.md: a returned shape must equal the declared)."""
    lib = tilec.compile_string(ROTARY, "rotary.tile")
    with pytest.raises(RuntimeError, match=r"cb \(of 'cos'\) must equal b \(of 'q'\) or be "
                                           r"1 \(cb = 3, b = 1\)"):
        lib.rotary(*inputs(1, 3))


def test_torch_shapes_accept_either_side_where_the_library_does() -> None:
    from tilec.torch import shapes
    one_way = ["cb", "b", "message", False]
    either = ["cb", "b", "message", True]
    for pairs, holds in (([one_way], False), ([either], True), ([one_way[:3]], False)):
        solution = shapes.solve([("q", (Dim.sym("b"),)), ("c", (Dim.sym("cb"),))], [(1,), (3,)])
        shapes.broadcasts(pairs, solution)
        assert all(bool(c) for c, _ in solution.conditions) is holds


def test_a_template_on_another_symbol_keeps_the_variants_at_1() -> None:
    """Each stretching symbol's variant at 1 serves any value of the other symbols: with a
    template on n, b = 1 at n = 6 ran the generic kernel (the templates' product bound n = 8
    too), which read q as if b were cb."""
    text = REDUCED.replace("{\n", "{\n  #pragma shape_template(n, [8])\n", 1)
    lib = tilec.compile_string(text, "f.tile")
    for b, cb in EITHER:
        q, c = reduced_inputs(b, cb)
        np.testing.assert_allclose(lib.f(q, c), (2 * c * q).sum(axis=0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target,opt", CONFIGS)
def test_an_odd_head_size_is_refused_as_the_reference_refuses_it(target: str, opt: int,
                                                                  reference_module) -> None:
    """rotate() slices at d/2: language.md divides symbols exactly, so d = 7 is an error in
    the library as in the reference (the library read past the row before), naming d's
    argument (q: rotate's x is inlined)."""
    lib = tilec.compile_string(ROTARY, "rotary.tile", target=target, opt_level=opt)
    args = inputs(3, 3, d=7)
    message = r"rotary.tile:3:.*slice bound 'd/2' \(d of 'q'\) is not an integer \(d = 7\)"
    with pytest.raises(RuntimeError, match=message):
        lib.rotary(*args)
    with pytest.raises(ReferenceError, match=message):
        run(reference_module, "rotary", *args)
