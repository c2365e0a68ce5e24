"""The GPU check of the PTX backend, in two halves (``bench/gpu_check.sh`` runs both).

``prepare BUNDLE [--only PART ...]`` (here, with tilec installed): the parts are
``programs`` (every shared example and every corpus program, ``test/corpus/*.tile``, compiled
to a ptx library, with reference outputs from the reference interpreter on fixed-seed inputs,
the sizes of each program's ``// SIZES:`` header, smallest first), ``bench`` (the five
memory-bound benchmark operators), ``gemm`` (the GEMMs of :data:`GEMM_SOURCE`: tensor cores
for float16/bfloat16, FFMA register tiles for float32) and ``attention`` (the fused
attention kernels of :data:`ATTENTION_SOURCE`); every part by default.  The runtime (``loader.py``, ``device.py``, ``interop.py``,
``binding.py``, ``dims.py``, ``numerics.py``) goes into BUNDLE, which stays under 64 MiB.

``run BUNDLE`` (on the GPU machine: Python 3.12, NumPy, PyTorch, Triton, and ml_dtypes for
the bundled runtime's bfloat16; no tilec, no MLIR): stops at once, exit status 2, when
ml_dtypes is missing or PyTorch sees no CUDA GPU.  Otherwise it loads each library
with the bundled runtime only, checks every output against its reference under the numerical
contract, checks the GEMMs at awkward sizes (M, N in 1, 127, 1000; K 255, whose rows are
copied element by element, and 256, whose rows go through cp.async) against float64, the
fused attention (causal grouped-query, an additive bias, decode with per-batch cache lengths,
at awkward sizes, and decode against the whole cache, 32/8 heads at t up to 32768, whose keys
the kernel splits over thread blocks) against PyTorch's ``scaled_dot_product_attention`` in
float32 math, then
measures GB/s for swiglu, rmsnorm, layernorm, softmax and rope at 4096 tokens x 4096 hidden
against the H200's peak HBM bandwidth (about 4.8 TB/s) and against Triton kernels for the
same ops, and TFLOP/s of ``gelu(x @ w + b)`` at 4096^3 in float16 and bfloat16 against
``torch.matmul`` (cuBLAS; bare, and with PyTorch's bias and GELU after it) and a Triton GEMM
with the same epilogue fused, and of causal grouped-query attention (s = 4096, 32 query and 8
key/value heads, d = 128, bfloat16) against ``scaled_dot_product_attention(is_causal=True,
enable_gqa=True)`` on the flash backend, and decode (one query row, 32/8 heads, d = 128,
bfloat16, t = 4096 and 32768) against ``scaled_dot_product_attention(enable_gqa=True)``,
within 5 minutes.  It prints one line per program, GEMM shape
and benchmark, and exits 1 on any failure.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
import zlib
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
PEAK_BYTES_PER_S = 4.8e12
TOKENS = HIDDEN = 4096
HEADS = 32
EXAMPLE_SIZES = {"swiglu": "batch=2 seq=127 hidden=255", "layernorm": "...=(3,5)",
                 "rmsnorm_templated": "seq=127 hidden=255", "rope": "tokens=127 heads=7 half=32"}
PARTS = ("programs", "bench", "gemm", "attention")
GEMM_DTYPES = {"float16": "f16", "bfloat16": "bf16"}          # benchmarked
CHECKED_GEMM_DTYPES = {**GEMM_DTYPES, "float32": "f32"}
GEMM_TEMPLATE = """
func gemm_{t}(x: Tensor<{t}>[m, k], w: Tensor<{t}>[k, n]) -> Tensor<{t}>[m, n] {{
  return x @ w;
}}
func linear_gelu_{t}(x: Tensor<{t}>[m, k], w: Tensor<{t}>[k, n], b: Tensor<{t}>[n])
    -> Tensor<{t}>[m, n] {{
  return gelu(x @ w + b);
}}
"""
GEMM_VIEWS = """
func linear_t_bf16(x: Tensor<bf16>[m, k], w: Tensor<bf16>[n, k]) -> Tensor<bf16>[m, n] {
  return x @ transpose(w, [1, 0]);
}
func shared_weight_bf16(x: Tensor<bf16>[b, m, k], w: Tensor<bf16>[k, n]) -> Tensor<bf16>[b, m, n] {
  return x @ w;
}
"""
GEMM_SOURCE = "".join(GEMM_TEMPLATE.format(t=t) for t in CHECKED_GEMM_DTYPES.values()) \
    + GEMM_VIEWS
"""The GEMMs of the check: plain and with a bias and GELU in float16, bfloat16 and float32,
and in bfloat16 a Linear weight [n, k] read in place and a weight broadcast over a batch."""
GEMM_KINDS = {"f16": ("gemm", "linear_gelu"), "f32": ("gemm", "linear_gelu"),
              "bf16": ("gemm", "linear_gelu", "linear_t", "shared_weight")}
GEMM_SIZES = [(m, n, k) for k in (255, 256) for m in (1, 127, 1000) for n in (1, 127, 1000)]
GEMM_BENCH = 4096
ATTENTION_SOURCE = """
func causal_gqa(q: Tensor<bf16>[b, hk, g, s, 128], k: Tensor<bf16>[b, hk, 1, t, 128],
                v: Tensor<bf16>[b, hk, 1, t, 128]) -> Tensor<bf16>[b, hk, g, s, 128] {
  let scores = cast(q @ transpose(k, [0, 1, 2, 4, 3]), f32) * 0.08838834764831845;
  let causal = where(iota([s, t], axis=1) <= iota([s, t], axis=0, start=t - s), scores, -inf);
  return cast(cast(softmax(causal, axis=-1), bf16) @ v, bf16);
}
func biased(q: Tensor<f16>[h, s, 64], k: Tensor<f16>[h, t, 64], v: Tensor<f16>[h, t, 64],
            bias: Tensor<f32>[s, t]) -> Tensor<f16>[h, s, 64] {
  let scores = cast(q @ transpose(k, [0, 2, 1]), f32) * 0.125 + bias;
  return cast(cast(softmax(scores, axis=-1), f16) @ v, f16);
}
func decode(q: Tensor<bf16>[b, hk, g, 1, 128], k: Tensor<bf16>[b, hk, 1, t, 128],
            v: Tensor<bf16>[b, hk, 1, t, 128], lens: Tensor<int32>[b, 1, 1, 1, 1])
    -> Tensor<bf16>[b, hk, g, 1, 128] {
  let scores = cast(q @ transpose(k, [0, 1, 2, 4, 3]), f32) * 0.08838834764831845;
  let cached = where(iota([1, t], axis=1) < lens, scores, -inf);
  return cast(cast(softmax(cached, axis=-1), bf16) @ v, bf16);
}
func decode_gqa(q: Tensor<bf16>[b, hk, g, 1, 128], k: Tensor<bf16>[b, hk, 1, t, 128],
                v: Tensor<bf16>[b, hk, 1, t, 128]) -> Tensor<bf16>[b, hk, g, 1, 128] {
  let scores = cast(q @ transpose(k, [0, 1, 2, 4, 3]), f32) * 0.08838834764831845;
  return cast(cast(softmax(scores, axis=-1), bf16) @ v, bf16);
}
"""
"""The fused attention kernels of the check: causal grouped-query (the last s of t positions),
a float32 additive bias, decode against per-batch cache lengths, and decode against the
whole cache (the keys split over thread blocks: flash-decoding)."""
ATTENTION_SIZES = {
    # (b, hk, g, s, t): causal rows always see a key (s <= t): a row that sees none is NaN in
    # the language and 0 in SDPA
    "causal_gqa": [(1, 2, 4, 1, 1), (2, 1, 2, 17, 17), (1, 2, 2, 17, 255), (1, 1, 4, 255, 1000),
                   (1, 2, 1, 1000, 1000)],
    "biased": [(1, 3, 1, 17, 255), (1, 2, 1, 1000, 1), (1, 1, 1, 255, 1000)],
    "decode": [(3, 2, 4, 1, 1), (2, 2, 4, 1, 255), (2, 8, 4, 1, 4097)],
    # one query row, 32 query and 8 key/value heads: 8 row blocks, the keys split
    "decode_gqa": [(1, 8, 4, 1, 17), (1, 8, 4, 1, 1000), (1, 8, 4, 1, 4096),
                   (1, 8, 4, 1, 32768), (2, 2, 4, 1, 4097)],
}
# relative to the largest output (which shrinks as t grows): the output's rounding and P
# rounded to the operand type before P @ V, float32 statistics
ATTENTION_TOLERANCE = {"bfloat16": 2.0 ** -6, "float16": 2.0 ** -9}


def attention_error(got, want, dtype: str) -> tuple[float, bool]:
    """The largest error of ``got`` and whether it is within :data:`ATTENTION_TOLERANCE`
    (NaN never is)."""
    error = float((got.float() - want.float()).abs().max()) if want.numel() else 0.0
    allowed = ATTENTION_TOLERANCE[dtype] * float(want.abs().max()) if want.numel() else 0.0
    return error, error <= allowed and not bool(got.isnan().any())
ATTENTION_BENCH = (1, 8, 4, 4096, 128)   # b, key/value heads, queries per head, s = t, d
DECODE_BENCH = [(1, 8, 4, 1, t) for t in (4096, 32768)]   # b, hk, g, s, t (d = 128)
BENCH_SOURCES = {
    "softmax": "func softmax_rows(x: Tensor[rows, n]) -> Tensor[rows, n] {\n"
               "  return softmax(x, axis=-1);\n}\n",
}


# ---------------------------------------------------------------------------------------------
# prepare (needs tilec)


def _sizes(text: str, stem: str) -> tuple[dict[str, int], tuple[int, ...]]:
    """The first binding of the program's ``// SIZES:`` header (an example's from above)."""
    found = re.search(r"^// SIZES: (.*)$", text, re.MULTILINE)
    line = EXAMPLE_SIZES.get(stem) or (found.group(1) if found else "")
    first = line.split(";")[-1 if stem in EXAMPLE_SIZES else 0]
    symbols, lead = {}, ()
    for item in first.split():
        name, value = item.split("=")
        if name == "...":
            lead = tuple(int(v) for v in value.strip("()").split(",") if v)
        else:
            symbols[name] = int(value)
    return symbols, lead


def prepare(bundle: Path, parts: tuple[str, ...] = PARTS) -> None:
    bundle.mkdir(parents=True, exist_ok=True)
    cases, programs = _prepare_programs(bundle) if "programs" in parts else ([], [])
    if "bench" in parts:
        _prepare_bench(bundle)
    if "gemm" in parts:
        _prepare_gemm(bundle)
    if "attention" in parts:
        _prepare_attention(bundle)
    runtime = bundle / "tilec"
    (runtime / "runtime").mkdir(parents=True, exist_ok=True)
    (runtime / "harness").mkdir(exist_ok=True)
    for name in ("runtime/loader.py", "runtime/device.py", "runtime/interop.py", "binding.py",
                 "dims.py", "harness/numerics.py"):
        shutil.copy(REPO / "tilec" / name, runtime / name)
    for package in ("", "runtime", "harness"):
        (runtime / package / "__init__.py").write_text("")
    (bundle / "cases.json").write_text(json.dumps(cases, indent=1))
    shutil.copy(Path(__file__), bundle / "gpu_check.py")
    shutil.copy(Path(__file__).with_name("triton_kernels.py"), bundle)
    size = sum(f.stat().st_size for f in bundle.rglob("*") if f.is_file())
    print(f"bundle {bundle}: {', '.join(parts)}; {len(cases)} functions of {len(programs)} "
          f"programs, {size / 2**20:.1f} MiB")
    if size > 64 * 2**20:
        raise SystemExit("the bundle is over 64 MiB")


def _prepare_programs(bundle: Path) -> tuple[list[dict], list[Path]]:
    import tilec
    from tilec.dialect import params_of
    from tilec.frontend import compile_source
    from tilec.harness.reference import find_function, run

    programs = [REPO.parent / "shared" / "examples" / f"{n}.tile" for n in EXAMPLE_SIZES]
    programs += sorted((REPO / "test" / "corpus").glob("*.tile"))
    cases = []
    for path in programs:
        text = path.read_text()
        library = bundle / "programs" / f"{path.stem}.so"
        library.parent.mkdir(exist_ok=True)
        built = tilec.compile(str(path), target="ptx")
        shutil.copy(built.path, library)
        module = compile_source(text, path.name)
        symbols, lead = _sizes(text, path.stem)
        for function in built.functions:
            fn = find_function(module, function)
            peeled = [a for a in fn.attributes["tile.lead"]] if "tile.lead" in fn.attributes \
                else []
            known = dict(symbols)
            known.update({str(a).strip('"'): v for a, v in zip(peeled, lead[len(lead)
                                                                          - len(peeled):])})
            rng = np.random.default_rng(zlib.crc32(f"{path.stem}.{function}".encode()))
            args = {}
            for p in params_of(fn):
                if p.scalar:
                    args[p.name] = p.default if p.default is not None else \
                        int(rng.integers(1, 5)) if p.info.dtype == "int32" else \
                        float(rng.uniform(0.1, 1.0))
                    continue
                shape = tuple(int(d.evaluate(known)) for d in p.info.dims)
                if p.info.rank_generic:
                    shape = lead[:len(lead) - len(peeled)] + shape
                dtype = tilec.runtime.loader.NUMPY_DTYPES[p.info.dtype]
                args[p.name] = rng.integers(-50, 50, shape).astype(dtype) \
                    if p.info.dtype == "int32" else rng.uniform(-2, 2, shape).astype(dtype)
            want = run(module, function, **args)
            want = list(want) if isinstance(want, tuple) else [want]
            data = bundle / "programs" / f"{path.stem}.{function}.npz"
            stored = {k: np.asarray(v) for k, v in args.items()}
            np.savez(data, **{f"in_{k}": v.view(np.uint16) if v.dtype.itemsize == 2 and
                              v.dtype != np.float16 else v for k, v in stored.items()},
                     **{f"want_{r}": w.astype(np.float64) for r, w in enumerate(want)})
            cases.append({"library": library.name, "function": function,
                          "data": data.name, "inputs": list(args),
                          "dtypes": {k: str(v.dtype) for k, v in stored.items()},
                          "result_types": _result_dtypes(fn)})
    for name in ("swiglu", "rmsnorm_templated", "layernorm", "rope"):
        shutil.copy(bundle / "programs" / f"{name}.so", bundle / f"bench_{name}.so")
    return cases, programs


def _prepare_bench(bundle: Path) -> None:
    import tilec

    for name, source in BENCH_SOURCES.items():
        shutil.copy(tilec.compile_string(source, f"{name}.tile", target="ptx").path,
                    bundle / f"bench_{name}.so")


def _prepare_gemm(bundle: Path) -> None:
    import tilec

    shutil.copy(tilec.compile_string(GEMM_SOURCE, "gemm.tile", target="ptx").path,
                bundle / "bench_gemm.so")


def _prepare_attention(bundle: Path) -> None:
    import tilec

    shutil.copy(tilec.compile_string(ATTENTION_SOURCE, "attention.tile", target="ptx").path,
                bundle / "bench_attention.so")


def _result_dtypes(fn) -> list[str]:
    from tilec.dialect.types import tensor_info
    return [tensor_info(t).dtype for t in fn.type.results]


# ---------------------------------------------------------------------------------------------
# run (on the GPU machine, runtime only)


def check_programs(bundle: Path) -> int:
    from tilec.harness.numerics import assert_close
    from tilec.runtime.loader import NUMPY_DTYPES, load

    failures = 0
    libraries: dict[str, object] = {}
    for case in json.loads((bundle / "cases.json").read_text()):
        lib = libraries.setdefault(case["library"], load(bundle / "programs" / case["library"]))
        data = np.load(bundle / "programs" / case["data"])
        args = {k: data[f"in_{k}"].view(NUMPY_DTYPES.get(case["dtypes"][k], case["dtypes"][k]))
                if case["dtypes"][k] == "bfloat16" else data[f"in_{k}"] for k in case["inputs"]}
        label = f"{case['library'][:-3]}.{case['function']}"
        try:
            got = lib[case["function"]](**args)
            got = list(got) if isinstance(got, tuple) else [got]
            worst = 0.0
            for r, (g, dtype) in enumerate(zip(got, case["result_types"])):
                want = data[f"want_{r}"]
                assert_close(g, want, dtype)
                if want.size:
                    worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - want))))
            print(f"ok    {label:48} max abs error {worst:.3g}")
        except (AssertionError, RuntimeError, ValueError, TypeError) as e:
            failures += 1
            print(f"FAIL  {label:48} {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    return failures


def _time(fn, repeat: int = 20) -> float:
    import torch
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeat):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return sorted(times)[len(times) // 2]


def benchmarks(bundle: Path) -> int:
    import torch
    import triton_kernels as tk

    from tilec.runtime.loader import load

    cuda = torch.device("cuda")
    t, h = TOKENS, HIDDEN
    f16, bf16, f32 = torch.float16, torch.bfloat16, torch.float32
    x16 = torch.randn(t, h, device=cuda, dtype=f16)
    cases = {
        "swiglu": (load(bundle / "bench_swiglu.so").swiglu,
                   [torch.randn(1, t, 2 * h, device=cuda, dtype=f16)], (1, t, h), f16,
                   tk.swiglu),
        "rmsnorm": (load(bundle / "bench_rmsnorm_templated.so").rmsnorm,
                    [torch.randn(t, h, device=cuda, dtype=bf16),
                     torch.randn(h, device=cuda, dtype=bf16)], (t, h), bf16, tk.rmsnorm),
        "layernorm": (load(bundle / "bench_layernorm.so").layernorm, [x16], (t, h), f16,
                      tk.layernorm),
        "softmax": (load(bundle / "bench_softmax.so").softmax_rows, [x16], (t, h), f16,
                    tk.softmax),
        "rope": (load(bundle / "bench_rope.so").rotary_emb,
                 [torch.randn(t, HEADS, h // HEADS, device=cuda, dtype=f16),
                  torch.randn(t, h // HEADS, device=cuda, dtype=f32)], (t, HEADS, h // HEADS),
                 f16, tk.rope),
    }
    failures = 0
    print(f"{'op':10} {'tilec GB/s':>11} {'% peak':>7} {'triton GB/s':>12} {'tilec/triton':>13}"
          f"  max |tilec - triton|")
    for name, (fn, args, shape, dtype, reference) in cases.items():
        out = torch.empty(shape, device=cuda, dtype=dtype)
        ref = torch.empty(shape, device=cuda, dtype=dtype)
        moved = sum(a.numel() * a.element_size() for a in args) + out.numel() * out.element_size()
        ours = _time(lambda: fn(*args, out=out))
        theirs = _time(lambda: reference(*args, ref))
        torch.cuda.synchronize()
        diff = (out.float() - ref.float()).abs().max().item()
        tolerance = {f16: 2e-2, bf16: 1e-1, f32: 1e-3}[dtype]
        failures += diff > tolerance * max(1.0, ref.float().abs().max().item())
        print(f"{name:10} {moved / ours / 1e9:11.0f} {100 * moved / ours / PEAK_BYTES_PER_S:6.1f}%"
              f" {moved / theirs / 1e9:12.0f} {theirs / ours:12.2f}x  {diff:.3g}")
    return failures


def _gemm_reference(name: str, x, w, b):
    """float64 of the GEMM ``name`` (on the GPU)."""
    import torch
    x, w = x.double(), w.double()
    if name.startswith("linear_t"):
        return x @ w.T
    if name.startswith("linear_gelu"):
        return torch.nn.functional.gelu(x @ w + b.double())
    return x @ w


def _gemm_args(name: str, m: int, n: int, k: int, dtype, gen) -> list:
    import torch

    def rand(*shape):
        return (torch.rand(shape, generator=gen, device="cuda") * 2 - 1).to(dtype)
    if name.startswith("linear_t"):
        return [rand(m, k), rand(n, k)]
    if name.startswith("shared_weight"):
        return [rand(3, m, k), rand(k, n)]
    if name.startswith("linear_gelu"):
        return [rand(m, k), rand(k, n), rand(n)]
    return [rand(m, k), rand(k, n)]


# the result's rounding (half an ulp of the output type, doubled for the epilogue's math)
# and float32 accumulation over K (a few ulps of float32 per term)
GEMM_TOLERANCE = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -20}


def check_gemms(bundle: Path) -> int:
    """The GEMMs of :data:`GEMM_SOURCE` at :data:`GEMM_SIZES` against float64."""
    import torch
    from tilec.runtime.loader import load

    lib = load(bundle / "bench_gemm.so")
    gen = torch.Generator(device="cuda").manual_seed(19)
    failures = 0
    for dtype_name, short in CHECKED_GEMM_DTYPES.items():
        dtype = getattr(torch, dtype_name)
        for kind in GEMM_KINDS[short]:
            name = f"{kind}_{short}"
            worst, bad = 0.0, []
            for m, n, k in GEMM_SIZES:
                args = _gemm_args(name, m, n, k, dtype, gen)
                rows = (3, m, n) if name.startswith("shared_weight") else (m, n)
                out = torch.empty(rows, device="cuda", dtype=dtype)
                try:
                    lib[name](*args, out=out)
                    got = out.double()
                except (RuntimeError, ValueError, TypeError) as e:
                    bad.append(f"{m}x{n}x{k}: {type(e).__name__}: {str(e)[:120]}")
                    continue
                want = _gemm_reference(name, *args, *([None] * (3 - len(args))))
                allowed = GEMM_TOLERANCE[dtype_name] * want.abs() + 1e-5 * k
                error = (got - want).abs()
                worst = max(worst, float(error.max()) if error.numel() else 0.0)
                if got.shape != want.shape or bool((error > allowed).any()):
                    bad.append(f"{m}x{n}x{k}: max error {float(error.max()):.3g}")
            failures += len(bad)
            print(f"{'FAIL' if bad else 'ok':5} {name:48} {len(GEMM_SIZES)} sizes, max abs "
                  f"error {worst:.3g}" + (f"; {bad[0]}" if bad else ""))
    return failures


def gemm_benchmarks(bundle: Path) -> int:
    """TFLOP/s of gelu(x @ w + b) at GEMM_BENCH^3 against cuBLAS and a Triton GEMM."""
    import torch
    import triton_kernels as tk
    from tilec.runtime.loader import load

    lib = load(bundle / "bench_gemm.so")
    s = GEMM_BENCH
    flops = 2.0 * s ** 3
    failures = 0
    print(f"{'gemm ' + str(s) + '^3':16} {'tilec':>8} {'torch.matmul':>13} {'torch+epi':>10} "
          f"{'triton':>8} {'tilec/cuBLAS':>13}  (TFLOP/s; tilec and triton fuse bias+GELU)")
    for dtype_name, short in GEMM_DTYPES.items():
        dtype = getattr(torch, dtype_name)
        x = torch.randn(s, s, device="cuda", dtype=dtype)
        w = torch.randn(s, s, device="cuda", dtype=dtype) / 64
        b = torch.randn(s, device="cuda", dtype=dtype)
        out, ref = (torch.empty(s, s, device="cuda", dtype=dtype) for _ in range(2))
        fn = lib[f"linear_gelu_{short}"]
        ours = _time(lambda: fn(x, w, b, out=out))
        bare = _time(lambda: torch.matmul(x, w, out=ref))
        eager = _time(lambda: torch.nn.functional.gelu(torch.addmm(b, x, w)))
        theirs = _time(lambda: tk.matmul_bias_gelu(x, w, b, ref))
        torch.cuda.synchronize()
        want = torch.nn.functional.gelu(torch.addmm(b.float(), x.float(), w.float()))
        diff = (out.float() - want).abs().max().item()
        failures += diff > 4 * GEMM_TOLERANCE[dtype_name] * max(1.0, want.abs().max().item())
        print(f"{dtype_name:16} {flops / ours / 1e12:8.1f} {flops / bare / 1e12:13.1f} "
              f"{flops / eager / 1e12:10.1f} {flops / theirs / 1e12:8.1f} "
              f"{bare / ours:12.2f}x  max |tilec - float32| {diff:.3g}")
    return failures


def attention_args(name: str, sizes: tuple[int, ...], device: str, gen) -> list:
    """Fixed-seed inputs of the attention ``name`` in its tilec layout (torch tensors)."""
    import torch

    b, hk, g, s, t = sizes
    dtype = torch.float16 if name == "biased" else torch.bfloat16
    d = 64 if name == "biased" else 128

    def rand(*shape, kind=dtype):
        return (torch.rand(shape, generator=gen, device=device) * 2 - 1).to(kind)
    if name == "biased":
        return [rand(hk, s, d), rand(hk, t, d), rand(hk, t, d), rand(s, t, kind=torch.float32)]
    q, k, v = rand(b, hk, g, s, d), rand(b, hk, 1, t, d), rand(b, hk, 1, t, d)
    if name == "decode":
        lens = torch.randint(1, t + 1, (b, 1, 1, 1, 1), generator=gen, device=device,
                             dtype=torch.int32)
        return [q, k, v, lens]
    return [q, k, v]


def attention_reference(name: str, args: list):
    """``scaled_dot_product_attention`` in float32 math (explicit masks: the language's causal
    diagonal is the last s of t positions, SDPA's ``is_causal`` the first), tilec's layout."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (a.float() for a in args[:3])
    if name == "biased":
        mask, scale = args[3], 0.125
    else:
        b, hk, g, s, d = q.shape
        t = k.shape[-2]
        q, k, v = q.reshape(b, hk * g, s, d), k.reshape(b, hk, t, d), v.reshape(b, hk, t, d)
        rows = torch.arange(s, device=q.device)[:, None]
        cols = torch.arange(t, device=q.device)[None, :]
        mask = cols <= rows + (t - s) if name == "causal_gqa" else \
            cols < args[3].reshape(b, 1, 1, 1) if name == "decode" else None
        scale = 0.08838834764831845
    with sdpa_kernel(SDPBackend.MATH):
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=scale, enable_gqa=name != "biased")
    return out.reshape(args[0].shape)


def check_attention(bundle: Path) -> int:
    """The kernels of :data:`ATTENTION_SOURCE` at :data:`ATTENTION_SIZES` against SDPA."""
    import torch
    from tilec.runtime.loader import load

    lib = load(bundle / "bench_attention.so")
    gen = torch.Generator(device="cuda").manual_seed(18)
    failures = 0
    for name, sizes in ATTENTION_SIZES.items():
        worst, bad = 0.0, []
        for size in sizes:
            args = attention_args(name, size, "cuda", gen)
            try:
                got = lib[name](*args).float()
            except (RuntimeError, ValueError, TypeError) as e:
                bad.append(f"{size}: {type(e).__name__}: {str(e)[:120]}")
                continue
            error, ok = attention_error(got, attention_reference(name, args),
                                        str(args[0].dtype)[6:])
            worst = max(worst, error)
            if not ok:
                bad.append(f"{size}: max error {error:.3g}")
        failures += len(bad)
        print(f"{'FAIL' if bad else 'ok':5} attention {name:38} {len(sizes)} sizes, max abs "
              f"error {worst:.3g}" + (f"; {bad[0]}" if bad else ""))
    return failures


def attention_benchmark(bundle: Path) -> int:
    """TFLOP/s of causal GQA attention against SDPA's flash backend (the one its users get)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from tilec.runtime.loader import load

    b, hk, g, s, d = ATTENTION_BENCH
    lib = load(bundle / "bench_attention.so")
    gen = torch.Generator(device="cuda").manual_seed(4096)
    q, k, v = attention_args("causal_gqa", (b, hk, g, s, s), "cuda", gen)
    out = torch.empty_like(q)
    flops = 4.0 * b * hk * g * s * s * d / 2          # causal: half the scores
    ours = _time(lambda: lib.causal_gqa(q, k, v, out=out))
    q4, k4, v4 = q.reshape(b, hk * g, s, d), k.reshape(b, hk, s, d), v.reshape(b, hk, s, d)
    backend = "flash"
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            theirs = _time(lambda: torch.nn.functional.scaled_dot_product_attention(
                q4, k4, v4, is_causal=True, enable_gqa=True))
    except RuntimeError as e:
        backend = f"default (flash refused: {str(e).splitlines()[0][:80]})"
        theirs = _time(lambda: torch.nn.functional.scaled_dot_product_attention(
            q4, k4, v4, is_causal=True, enable_gqa=True))
    want = torch.nn.functional.scaled_dot_product_attention(q4, k4, v4, is_causal=True,
                                                            enable_gqa=True)
    diff, ok = attention_error(out, want.reshape(out.shape), "bfloat16")
    print(f"attention s={s} {hk * g}/{hk} heads d={d} causal bf16: tilec "
          f"{flops / ours / 1e12:.1f} TFLOP/s, SDPA {backend} {flops / theirs / 1e12:.1f}, "
          f"tilec/SDPA {theirs / ours:.2f}x, max |tilec - SDPA| {diff:.3g}")
    return int(not ok)


def decode_benchmark(bundle: Path) -> int:
    """Decode (one query row, 32/8 heads, d = 128, bfloat16) against SDPA at t = 4096 and
    32768: its time, and the key/value bytes read per second by each."""
    import torch
    from tilec.runtime.loader import load

    lib = load(bundle / "bench_attention.so")
    gen = torch.Generator(device="cuda").manual_seed(32768)
    failures = 0
    for b, hk, g, s, t in DECODE_BENCH:
        q, k, v = attention_args("decode_gqa", (b, hk, g, s, t), "cuda", gen)
        out = torch.empty_like(q)
        ours = _time(lambda: lib.decode_gqa(q, k, v, out=out))
        q4, k4, v4 = q.reshape(b, hk * g, s, 128), k.reshape(b, hk, t, 128), \
            v.reshape(b, hk, t, 128)
        theirs = _time(lambda: torch.nn.functional.scaled_dot_product_attention(
            q4, k4, v4, enable_gqa=True))
        want = torch.nn.functional.scaled_dot_product_attention(q4, k4, v4, enable_gqa=True)
        diff, ok = attention_error(out, want.reshape(out.shape), "bfloat16")
        moved = 2.0 * b * hk * t * 128 * 2            # K and V, bfloat16
        print(f"decode t={t} {hk * g}/{hk} heads d=128 bf16: tilec {ours * 1e6:.1f} us "
              f"({moved / ours / 1e9:.0f} GB/s), SDPA {theirs * 1e6:.1f} us "
              f"({moved / theirs / 1e9:.0f} GB/s), tilec/SDPA {theirs / ours:.2f}x, "
              f"max |tilec - SDPA| {diff:.3g}{'' if ok else ' FAIL'}")
        failures += int(not ok)
    return failures


def gpu_missing() -> str:
    """Why this machine cannot run the check ('' when it can)."""
    try:
        import ml_dtypes  # noqa: F401  (the bundled runtime's bfloat16)
    except ImportError:
        return "the bundled runtime needs ml_dtypes (pip install ml_dtypes), which is missing"
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA GPU (torch.cuda.is_available() is False)"
    return ""


def run(bundle: Path) -> int:
    """The run half (module docstring): 2 without a GPU, 1 on any failure, else 0."""
    missing = gpu_missing()
    if missing:
        print(f"gpu_check run: {missing}; run it on the GPU machine", file=sys.stderr)
        return 2
    start = time.monotonic()
    failures = check_programs(bundle)
    if (bundle / "bench_gemm.so").exists():
        failures += check_gemms(bundle)
    if (bundle / "bench_attention.so").exists():
        failures += check_attention(bundle)
    if (bundle / "bench_swiglu.so").exists() and (bundle / "bench_softmax.so").exists():
        failures += benchmarks(bundle)
    if (bundle / "bench_gemm.so").exists():
        failures += gemm_benchmarks(bundle)
    if (bundle / "bench_attention.so").exists():
        failures += attention_benchmark(bundle)
        failures += decode_benchmark(bundle)
    print(f"{failures} failure(s) in {time.monotonic() - start:.0f} s")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("prepare", "run"))
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS),
                        help="prepare: the parts to build (default: all)")
    args = parser.parse_args()
    if args.mode == "prepare":
        sys.path.insert(0, str(REPO))
        prepare(args.bundle, tuple(args.only))
        return 0
    sys.path.insert(0, str(args.bundle))
    return run(args.bundle)


if __name__ == "__main__":
    sys.exit(main())
