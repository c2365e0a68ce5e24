"""The GPU check of the PTX backend, in two halves (``bench/gpu_check.sh`` runs both).

``prepare BUNDLE`` (here, with tilec installed): compiles every shared example and every
corpus program (``test/corpus/*.tile``) to a ptx library, computes reference outputs with the
reference interpreter on fixed-seed inputs (the sizes of each program's ``// SIZES:`` header,
smallest first), builds the five benchmark operators, and copies the runtime (``loader.py``,
``device.py``, ``dims.py``, ``numerics.py``) into BUNDLE, which stays under 64 MiB.

``run BUNDLE`` (on the GPU machine: Python 3.12, NumPy, PyTorch, Triton; no tilec, no MLIR):
loads each library with the bundled runtime only, checks every output against its reference
under the numerical contract, then measures GB/s for swiglu, rmsnorm, layernorm, softmax and
rope at 4096 tokens x 4096 hidden against the H200's peak HBM bandwidth (about 4.8 TB/s) and
against Triton kernels for the same ops, within 5 minutes.  It prints one line per program
(``ok``/``FAIL`` and the worst error) and one per benchmark, and exits 1 on any failure.
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


def prepare(bundle: Path) -> None:
    import tilec
    from tilec.dialect import params_of
    from tilec.frontend import compile_source
    from tilec.harness.reference import find_function, run

    bundle.mkdir(parents=True, exist_ok=True)
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
    for name, source in BENCH_SOURCES.items():
        shutil.copy(tilec.compile_string(source, f"{name}.tile", target="ptx").path,
                    bundle / f"bench_{name}.so")
    runtime = bundle / "tilec"
    (runtime / "runtime").mkdir(parents=True, exist_ok=True)
    (runtime / "harness").mkdir(exist_ok=True)
    for name in ("runtime/loader.py", "runtime/device.py", "dims.py", "harness/numerics.py"):
        shutil.copy(REPO / "tilec" / name, runtime / name)
    for package in ("", "runtime", "harness"):
        (runtime / package / "__init__.py").write_text("")
    (bundle / "cases.json").write_text(json.dumps(cases, indent=1))
    shutil.copy(Path(__file__), bundle / "gpu_check.py")
    size = sum(f.stat().st_size for f in bundle.rglob("*") if f.is_file())
    print(f"bundle {bundle}: {len(cases)} functions of {len(programs)} programs, "
          f"{size / 2**20:.1f} MiB")
    if size > 64 * 2**20:
        raise SystemExit("the bundle is over 64 MiB")


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("prepare", "run"))
    parser.add_argument("bundle", type=Path)
    args = parser.parse_args()
    if args.mode == "prepare":
        sys.path.insert(0, str(REPO))
        prepare(args.bundle)
        shutil.copy(Path(__file__).with_name("triton_kernels.py"), args.bundle)
        return 0
    sys.path.insert(0, str(args.bundle))
    start = time.monotonic()
    failures = check_programs(args.bundle)
    failures += benchmarks(args.bundle)
    print(f"{failures} failure(s) in {time.monotonic() - start:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
