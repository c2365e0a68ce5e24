"""tilec.torch: operators registered from a library, their schemas, kernels, errors, fake
implementations under torch.compile/torch.export, autograd and module replacement; and the
NumPy call path on PyTorch tensors."""
from __future__ import annotations

import functools
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import OPS, REPO

import tilec
import tilec.torch


@functools.cache
def lib(name: str, **options):
    return tilec.compile(str(OPS / f"{name}.tile"), **options)


@functools.cache
def ops(name: str):
    return tilec.torch.register(lib(name))


def rmsnorm_reference(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


# --- the NumPy call path on tensors -----------------------------------------------------------
def test_importing_tilec_and_loading_a_library_do_not_import_torch() -> None:
    path = lib("swiglu").path
    code = ("import sys, numpy as np, tilec\n"
            f"l = tilec.load({path!r})\n"
            "y = l.swiglu(np.ones((1, 2, 8), np.float16))\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n"
            "assert 'tilec.torch' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_numpy_path_takes_bfloat16_tensors_and_returns_tensors() -> None:
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    w = torch.rand(64, dtype=torch.bfloat16, requires_grad=True)     # a parameter
    y = lib("rmsnorm_templated").rmsnorm(x, w)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16
    want = rmsnorm_reference(x.float(), w.detach().float(), 1e-6)
    torch.testing.assert_close(y.float(), want, rtol=2e-2, atol=1e-2)


def test_numpy_path_keeps_numpy_results_for_numpy_arguments() -> None:
    y = lib("swiglu").swiglu(np.ones((1, 2, 8), np.float16))
    assert isinstance(y, np.ndarray)


def test_numpy_path_non_contiguous_message_names_both_fixes() -> None:
    x = torch.randn(2, 16, 3, dtype=torch.float16).transpose(1, 2)
    with pytest.raises(ValueError, match=r"argument 'input'.*np\.ascontiguousarray.*"
                                         r"\.contiguous\(\)"):
        lib("swiglu").swiglu(x)


# --- schemas and calls ----------------------------------------------------------------------
def test_schema_from_metadata() -> None:
    ops("rmsnorm")
    f = torch.ops.tilec.rmsnorm_f32
    assert str(f.default._schema) == ("tilec::rmsnorm_f32(Tensor x, Tensor weight, "
                                      "float eps=9.9999999999999995e-07) -> Tensor")
    assert str(f.out._schema) == ("tilec::rmsnorm_f32.out(Tensor x, Tensor weight, "
                                  "float eps=9.9999999999999995e-07, *, Tensor(a!) out) -> ()")
    b = torch.ops.tilec.rmsnorm_f32_backward
    assert str(b.default._schema).endswith("float eps, Tensor grad) -> (Tensor, Tensor)")
    assert "Tensor(a!) out0, Tensor(b!) out1) -> ()" in str(b.out._schema)


def test_a_default_before_a_parameter_without_one_is_left_out() -> None:
    text = "func f(x: Tensor<f32>[n], a: float32 = 2.0, b: float32) -> Tensor<f32>[n] {\n" \
           "  return x * a + b;\n}\n"
    tilec.torch.register(tilec.compile_string(text, "defaults.tile"), "t_defaults")
    assert str(torch.ops.t_defaults.f.default._schema).endswith("(Tensor x, float a, float b)"
                                                                " -> Tensor")
    x = torch.ones(3)
    assert torch.equal(torch.ops.t_defaults.f(x, 2.0, 1.0), torch.full((3,), 3.0))


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_every_dtype_agrees_with_the_numpy_path(dtype: str) -> None:
    ops("llama")
    torch_dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
    x = torch.randn(2, 3, 32).to(torch_dtype)
    got = getattr(torch.ops.tilec, f"swiglu_{dtype}")(x)
    want = getattr(lib("llama"), f"swiglu_{dtype}")(x)
    assert got.dtype == torch_dtype and got.shape == (2, 3, 16)
    assert torch.equal(got, want)


def test_float16_and_default_scalars() -> None:
    ops("swiglu")
    x = torch.randn(2, 3, 16, dtype=torch.float16)
    want = x[..., :8].float() * torch.nn.functional.silu(x[..., 8:].float())
    torch.testing.assert_close(torch.ops.tilec.swiglu(x).float(), want, rtol=1e-2, atol=1e-3)
    ops("rmsnorm")
    x, w = torch.randn(5, 32), torch.randn(32)
    torch.testing.assert_close(torch.ops.tilec.rmsnorm_f32(x, w),
                               rmsnorm_reference(x, w, 1e-6), rtol=1e-4, atol=1e-5)


def test_out_variant_writes_in_place() -> None:
    ops("rmsnorm")
    x, w = torch.randn(5, 32), torch.randn(32)
    out = torch.empty(5, 32)
    assert torch.ops.tilec.rmsnorm_f32.out(x, w, 1e-5, out=out) is None
    assert torch.equal(out, torch.ops.tilec.rmsnorm_f32(x, w, 1e-5))
    strided = torch.empty(32, 5).t()                         # non-contiguous: via a copy
    torch.ops.tilec.rmsnorm_f32.out(x, w, 1e-5, out=strided)
    assert torch.equal(strided, out)
    dx, dw = torch.empty(5, 32), torch.empty(32)
    torch.ops.tilec.rmsnorm_f32_backward.out(x, w, 1e-5, out, out0=dx, out1=dw)
    want_dx, want_dw = torch.ops.tilec.rmsnorm_f32_backward(x, w, 1e-5, out)
    assert torch.equal(dx, want_dx) and torch.equal(dw, want_dw)


def test_non_contiguous_inputs_are_copied() -> None:
    ops("llama")
    q = torch.randn(6, 3, 4, 8).transpose(1, 2)          # Hugging Face's transposed views
    k, v = torch.randn(6, 5, 4, 8).transpose(1, 2), torch.randn(6, 5, 4, 8).transpose(1, 2)
    mask = torch.zeros(6, 1, 3, 5)
    got = torch.ops.tilec.attention_f32(q, k, v, mask, 0.5)
    want = torch.ops.tilec.attention_f32(q.contiguous(), k.contiguous(), v.contiguous(),
                                         mask, 0.5)
    assert torch.equal(got, want)
    ref = torch.softmax(q @ k.transpose(-1, -2) * 0.5, -1) @ v
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)


# --- errors -----------------------------------------------------------------------------------
def test_wrong_dtype_names_the_argument() -> None:
    ops("rmsnorm")
    with pytest.raises(TypeError, match=r"rmsnorm_f32: argument 'weight': expected dtype "
                                        r"float32, got torch.float16"):
        torch.ops.tilec.rmsnorm_f32(torch.randn(2, 8), torch.randn(8).half())


def test_wrong_rank_and_shape_name_the_argument() -> None:
    ops("rmsnorm")
    with pytest.raises(ValueError, match=r"argument 'x': expected rank 2"):
        torch.ops.tilec.rmsnorm_f32(torch.randn(2, 3, 8), torch.randn(8))
    with pytest.raises(ValueError, match=r"argument 'weight'"):
        torch.ops.tilec.rmsnorm_f32(torch.randn(2, 8), torch.randn(9))
    ops("swiglu")
    with pytest.raises(ValueError, match=r"argument 'input' dimension 2 is 2\*hidden = 15"):
        torch.ops.tilec.swiglu(torch.randn(1, 2, 15).half())


def test_wrong_out_shape_names_it() -> None:
    ops("rmsnorm")
    with pytest.raises(ValueError, match=r"argument 'out': expected shape \(2, 8\)"):
        torch.ops.tilec.rmsnorm_f32.out(torch.randn(2, 8), torch.randn(8), out=torch.empty(8))


def test_a_ptx_library_refuses_cpu_tensors_naming_the_argument() -> None:
    text = "func twice(x: Tensor<f32>[n]) -> Tensor<f32>[n] {\n  return x * 2.0;\n}\n"
    tilec.torch.register(tilec.compile_string(text, "twice.tile", target="ptx"), "t_ptx")
    with pytest.raises(ValueError, match=r"argument 'x': expected a cuda tensor \(the library "
                                         r"is built for ptx\), got one on cpu"):
        torch.ops.t_ptx.twice(torch.ones(4))


def test_registering_twice_is_harmless() -> None:
    first = ops("swiglu")
    again = tilec.torch.register(tilec.compile(str(OPS / "swiglu.tile")))
    assert again.swiglu is first.swiglu
    x = torch.randn(1, 2, 8, dtype=torch.float16)
    assert torch.equal(torch.ops.tilec.swiglu(x), lib("swiglu").swiglu(x))


def test_a_namespace_clash_is_an_error_naming_it() -> None:
    ops("swiglu")
    other = "func swiglu(x: Tensor<f32>[n]) -> Tensor<f32>[n] {\n  return x;\n}\n"
    with pytest.raises(RuntimeError, match=r"torch.ops.tilec.swiglu is already registered with "
                                           r"schema swiglu\(Tensor input\)"):
        tilec.torch.register(tilec.compile_string(other, "other.tile"))
    add = "func add(x: Tensor<f32>[n]) -> Tensor<f32>[n] {\n  return x;\n}\n"
    with pytest.raises(RuntimeError, match=r"torch.ops.aten.add already exists and was not "
                                           r"registered by tilec"):
        tilec.torch.register(tilec.compile_string(add, "add.tile"), "aten")


# --- autograd -----------------------------------------------------------------------------------
def test_no_backward_is_a_clear_error_on_backward() -> None:
    ops("swiglu")
    x = torch.randn(1, 2, 8, dtype=torch.float16, requires_grad=True)
    y = torch.ops.tilec.swiglu(x)                 # the forward works on a grad-requiring input
    with pytest.raises(RuntimeError, match=r"torch.ops.tilec.swiglu has no backward: name one "
                                           r"in its .tile file with '#pragma backward"):
        y.float().sum().backward()


def test_rmsnorm_gradients_match_pytorch_autograd() -> None:
    ops("rmsnorm")
    torch.manual_seed(0)
    x = torch.randn(7, 48, requires_grad=True)
    w = torch.randn(48, requires_grad=True)
    g = torch.randn(7, 48)
    (torch.ops.tilec.rmsnorm_f32(x, w, 1e-5) * g).sum().backward()
    x2, w2 = x.detach().requires_grad_(), w.detach().requires_grad_()
    (rmsnorm_reference(x2, w2, 1e-5) * g).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(w.grad, w2.grad, rtol=1e-4, atol=1e-5)


def test_rmsnorm_gradcheck() -> None:
    ops("rmsnorm")
    torch.manual_seed(1)
    x = torch.randn(4, 16, requires_grad=True)
    w = torch.randn(16, requires_grad=True)
    with pytest.warns(UserWarning, match="double precision"):    # float32 on purpose
        assert torch.autograd.gradcheck(lambda a, b: torch.ops.tilec.rmsnorm_f32(a, b, 1e-5),
                                        (x, w), eps=1e-3, atol=1e-2)


# --- torch.compile and torch.export -----------------------------------------------------------
def test_compile_fullgraph_dynamic_two_operators() -> None:
    ops("rmsnorm")
    ops("llama")
    graphs = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        graphs.append(gm)
        return gm.forward

    def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.ops.tilec.swiglu_f32(torch.ops.tilec.rmsnorm_f32(x.flatten(0, 1), w)
                                          .view(x.shape))

    compiled = torch.compile(block, backend=backend, fullgraph=True, dynamic=True)
    for batch, seq, hidden in ((2, 3, 8), (3, 5, 12), (4, 7, 20)):
        x, w = torch.randn(batch, seq, 2 * hidden), torch.randn(2 * hidden)
        got = compiled(x, w)
        assert got.shape == (batch, seq, hidden)
        torch.testing.assert_close(got, block(x, w), rtol=0, atol=0)
    assert len(graphs) == 1, "one graph for every shape: no recompilation"
    called = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert torch.ops.tilec.rmsnorm_f32 in called
    assert torch.ops.tilec.swiglu_f32 in called


def test_export_keeps_the_2_times_hidden_relation() -> None:
    ops("llama")

    class Swiglu(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ops.tilec.swiglu_f32(x)

    half = torch.export.Dim("half", min=1, max=1024)
    exported = torch.export.export(Swiglu(), (torch.randn(2, 3, 16),),
                                   dynamic_shapes={"x": {0: torch.export.Dim("batch"),
                                                         2: 2 * half}})
    x = torch.randn(4, 3, 40)
    assert torch.equal(exported.module()(x), torch.ops.tilec.swiglu_f32(x))


def test_template_only_function_under_compile() -> None:
    templated = tilec.compile(str(OPS / "rmsnorm_templated.tile"), templates={"seq": [4, 6]},
                              no_generic=True)
    tilec.torch.register(templated, "t_templated")
    f = torch.compile(lambda x, w: torch.ops.t_templated.rmsnorm(x, w) * 2, backend="aot_eager",
                      fullgraph=True, dynamic=True)
    for seq in (4, 6):
        x, w = torch.randn(seq, 32).bfloat16(), torch.randn(32).bfloat16()
        assert torch.equal(f(x, w), torch.ops.t_templated.rmsnorm(x, w) * 2)
    with pytest.raises(Exception, match="no variant for argument shapes"):
        f(torch.randn(5, 32).bfloat16(), torch.randn(32).bfloat16())


# --- replace -----------------------------------------------------------------------------------
def test_replace_swaps_modules_and_reports_them() -> None:
    class Norm(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(16))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return rmsnorm_reference(x, self.weight, 1e-6)

    class TilecNorm(torch.nn.Module):
        def __init__(self, old: Norm) -> None:
            super().__init__()
            self.weight = old.weight

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ops.tilec.rmsnorm_f32(x, self.weight)

    ops("rmsnorm")
    model = torch.nn.Sequential(Norm(), torch.nn.Linear(16, 16),
                                torch.nn.Sequential(torch.nn.ReLU(), Norm()))
    x = torch.randn(3, 16)
    want = model(x)
    report = tilec.torch.replace(model, {Norm: TilecNorm})
    assert [str(r) for r in report] == ["0: Norm -> TilecNorm", "2.1: Norm -> TilecNorm"]
    assert str(report).endswith("2 x Norm -> TilecNorm")
    assert isinstance(model[2][1], TilecNorm)
    torch.testing.assert_close(model(x), want, rtol=1e-4, atol=1e-5)


def test_tilec_torch_is_a_lazy_attribute() -> None:
    code = ("import sys, tilec\nassert 'tilec.torch' not in sys.modules\n"
            "assert tilec.torch.register is sys.modules['tilec.torch'].register\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
