"""Attention fused into one kernel (issue 18): tile-attention marks softmax(q @ transpose(k)
...) @ v, tile-kernel gives its kernel the ``attention`` schedule on the CPU, and the runtime
(``tilec/runtime/cpu_attention.c``) runs it in blocks with an online softmax.  Checked
against the reference: causal grouped-query bfloat16, plain float32, masked by an input's
comparison (per-batch lengths, fully masked rows NaN as in the language), additive bias,
decode (one query row against a long key axis, split across threads), at awkward sizes; the
kernel plan holds no buffer of scores; a near-miss stays unfused, correct, and says why;
float32 attention on ascend-sim runs the unfused kernels (its half and bfloat16 attention is
fused on the Cube: test_attention_cube.py)."""
from __future__ import annotations

import functools
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from conftest import OPS, cpu_flags

import tilec
from tilec.cli import main
from tilec.codegen.common import host
from tilec.diagnostics import DiagnosticSink
from tilec.dialect import KERNEL_ATTR, make_context
from tilec.driver import CompileOptions, kernel_module
from tilec.frontend import compile_source
from tilec.harness.numerics import assert_close
from tilec.harness.reference import run
from tilec.harness.verify import verify
from tilec.mlir import ir

SOURCE = """
func causal_gqa(q: Tensor<bf16>[b, hk, g, s, d], k: Tensor<bf16>[b, hk, 1, t, d],
                v: Tensor<bf16>[b, hk, 1, t, d]) -> Tensor<bf16>[b, hk, g, s, d] {
  let scores = cast(q @ transpose(k, [0, 1, 2, 4, 3]), f32) * rsqrt(cast(dim(d), f32));
  let causal = where(iota([s, t], axis=1) <= iota([s, t], axis=0, start=t - s), scores, -inf);
  return cast(cast(softmax(causal, axis=-1), bf16) @ v, bf16);
}
func plain(q: Tensor<f32>[h, s, d], k: Tensor<f32>[h, t, d], v: Tensor<f32>[h, t, d])
    -> Tensor<f32>[h, s, d] {
  return softmax(q @ transpose(k, [0, 2, 1]) * 0.125, axis=-1) @ v;
}
func lengths(q: Tensor<f32>[b, h, s, d], k: Tensor<f32>[b, h, t, d], v: Tensor<f32>[b, h, t, d],
             lens: Tensor<i32>[b, 1, 1, 1]) -> Tensor<f32>[b, h, s, d] {
  let scores = q @ transpose(k, [0, 1, 3, 2]) * rsqrt(cast(dim(d), f32));
  return softmax(where(iota([s, t], axis=1) < lens, scores, -inf), axis=-1) @ v;
}
func biased(q: Tensor<f32>[h, s, d], k: Tensor<f32>[h, t, d], v: Tensor<f32>[h, t, d],
            bias: Tensor<f32>[h, s, t]) -> Tensor<f32>[h, s, d] {
  return softmax(q @ transpose(k, [0, 2, 1]) + bias, axis=-1) @ v;
}
"""

NEAR_MISS = """
func probabilities_too(q: Tensor<f32>[h, s, d], k: Tensor<f32>[h, t, d],
                       v: Tensor<f32>[h, t, d]) -> (Tensor<f32>[h, s, d], Tensor<f32>[h, s, t]) {
  let p = softmax(q @ transpose(k, [0, 2, 1]), axis=-1);
  return (p @ v, p);
}
"""

UNFUSED = """
func unfused(q: Tensor<f32>[h, s, d], k: Tensor<f32>[h, t, d], v: Tensor<f32>[h, t, d])
    -> Tensor<f32>[h, s, d] {
  return softmax(q @ transpose(k, [0, 2, 1]), axis=-2) @ v;
}
"""

BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(18)
SIZES = (1, 17, 255, 1000)


@functools.lru_cache(maxsize=None)
def reference(source: str):
    return compile_source(source, "attention.tile")


@pytest.fixture(scope="module")
def lib():
    return tilec.compile_string(SOURCE, "attention.tile")


def rand(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def agrees(lib, name: str, *args, source: str = SOURCE) -> np.ndarray:
    got = getattr(lib, name)(*args)
    want = run(reference(source), name, *args)
    assert_close(got, want, want.dtype)
    return got


@pytest.mark.parametrize("s,t", [(s, t) for s in SIZES for t in SIZES if s <= t][::2]
                         + [(255, 17), (17, 1)])
def test_causal_grouped_query_bf16(lib, s, t):
    d = 64 if s * t < 10000 else 128
    q = rand((1, 2, 3, s, d), BF16)
    k, v = rand((1, 2, 1, t, d), BF16), rand((1, 2, 1, t, d), BF16)
    got = agrees(lib, "causal_gqa", q, k, v)
    # queries are the last s of t keys: with s > t the first s - t rows see no key at all
    assert np.isnan(got.astype(np.float32)).any() == (s > t)


@pytest.mark.parametrize("s,t,d", [(17, 1000, 72), (255, 17, 33), (1, 255, 128)])
def test_bfloat16_head_sizes_off_the_tiles(lib, s, t, d):
    """bfloat16 runs on AMX tiles where the CPU has them: d and t off the tiles' 32 (the
    pairs, key rows and value columns padded with zeros), d odd (keys packed one by one)."""
    q = rand((1, 2, 3, s, d), BF16)
    k, v = rand((1, 2, 1, t, d), BF16), rand((1, 2, 1, t, d), BF16)
    agrees(lib, "causal_gqa", q, k, v)


def test_key_heads_packed_a_batch_at_a_time(lib):
    """bfloat16 on AMX packs the keys and values of as many key heads at once as 8 MiB holds:
    at t = 8200 and d = 128 one (4.1 MiB each), so the second key head is packed and read in
    a batch of its own; 512 rows a key head keep up to 4 threads on the shared packing."""
    q = rand((1, 2, 1, 512, 128), BF16)
    k, v = rand((1, 2, 1, 8200, 128), BF16), rand((1, 2, 1, 8200, 128), BF16)
    agrees(lib, "causal_gqa", q, k, v)


@pytest.mark.parametrize("s,t,d", [(1, 1, 64), (17, 255, 128), (255, 17, 64), (1000, 1000, 64),
                                   (17, 1000, 128), (127, 255, 72)])
def test_plain_float32(lib, s, t, d):
    agrees(lib, "plain", rand((2, s, d)), rand((2, t, d)), rand((2, t, d)))


def test_masked_by_lengths_with_a_row_that_sees_nothing(lib):
    s, t, d = 17, 255, 64
    lens = np.array([0, 1, 100, 255], np.int32).reshape(4, 1, 1, 1)
    got = agrees(lib, "lengths", rand((4, 2, s, d)), rand((4, 2, t, d)), rand((4, 2, t, d)),
                 lens)
    assert np.isnan(got[0]).all() and not np.isnan(got[1:]).any()


@pytest.mark.parametrize("s,t", [(1, 1000), (255, 17)])
def test_additive_bias(lib, s, t):
    agrees(lib, "biased", rand((2, s, 64)), rand((2, t, 64)), rand((2, t, 64)),
           rand((2, s, t)))


RESHAPED = """
func gqa_reshaped(q: Tensor<f32>[b, h, s, d], k: Tensor<f32>[b, hk, t, d],
                  v: Tensor<f32>[b, hk, t, d]) -> Tensor<f32>[b, h, s, d] {
  let q5 = reshape(q, [b, hk, 3, s, d]);
  let k5 = reshape(k, [b, hk, 1, t, d]);
  let scores = q5 @ transpose(k5, [0, 1, 2, 4, 3]) * rsqrt(cast(dim(d), f32));
  let causal = where(iota([s, t], axis=1) <= iota([s, t], axis=0, start=t - s), scores, -inf);
  return reshape(softmax(causal, axis=-1) @ reshape(v, [b, hk, 1, t, d]), [b, h, s, d]);
}
"""


@pytest.mark.parametrize("s,t", [(17, 255), (1, 1000)])
def test_grouped_query_spelled_with_reshape(s, t):
    """Keys and values [b, hk, t, d] reshaped to [b, hk, 1, t, d], queries [b, 3 hk, s, d] to
    [b, hk, 3, s, d]: one attention kernel, matching the reference."""
    plan = _plan(RESHAPED)["gqa_reshaped"]
    assert [record for schedule, record in plan if schedule == "attention"] == [
        {"causal": True, "diagonal": "-s+t"}]
    lib = tilec.compile_string(RESHAPED, "reshaped.tile")
    agrees(lib, "gqa_reshaped", rand((2, 6, s, 64)), rand((2, 2, t, 64)), rand((2, 2, t, 64)),
           source=RESHAPED)


def test_the_reshapes_around_attention_launch_nothing():
    """The kernels that reshape q, k, v and the output are not launched: the attention kernel
    reads the arguments and writes the output where they lie (a row-major reshape leaves the
    bytes as they are), so grouped-query attention spelled with reshape copies nothing."""
    with make_context():
        module = kernel_module(RESHAPED, "reshaped.tile", CompileOptions(), DiagnosticSink())
        entries = host._entries(module, host._kernels(module), "", "")
        launches = [launch for impl in entries[0].impls for launch in impl.launches]
        assert [launch.kernel.attention is not None for launch in launches] == [True]
        assert entries[0].generic.slots == 0


def test_decode_splits_the_keys_across_threads(lib):
    """One query row of one head against 4000 keys: the key axis is split (the problem has
    one block of rows, or two); the combined result matches the reference."""
    q, k, v = rand((1, 1, 1, 1, 128), BF16), rand((1, 1, 1, 4000, 128), BF16), \
        rand((1, 1, 1, 4000, 128), BF16)
    agrees(lib, "causal_gqa", q, k, v)
    agrees(lib, "plain", rand((1, 1, 128)), rand((1, 4000, 128)), rand((1, 4000, 128)))
    # causal, two row blocks: run heaviest first, each split's result kept under its block
    q = rand((1, 1, 1, 128, 128), BF16)
    agrees(lib, "causal_gqa", q, rand((1, 1, 1, 4000, 128), BF16), rand((1, 1, 1, 4000, 128), BF16))


DECODE = "\n".join(f"""
func decode_{short}(q: Tensor<{short}>[b, hk, g, s, d], k: Tensor<{short}>[b, hk, 1, t, d],
                    v: Tensor<{short}>[b, hk, 1, t, d], lens: Tensor<i32>[b, 1, 1, 1, 1])
    -> Tensor<{short}>[b, hk, g, s, d] {{
  let scores = cast(q @ transpose(k, [0, 1, 2, 4, 3]), f32) * rsqrt(cast(dim(d), f32));
  let seen = where(iota([s, t], axis=1) < lens, scores, -inf);
  return cast(cast(softmax(seen, axis=-1), {short}) @ v, {short});
}}""" for short in ("f32", "f16", "bf16"))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16])
@pytest.mark.parametrize("g,s,t,d", [(1, 1, 1000, 64), (3, 1, 17, 33), (4, 1, 1000, 128),
                                     (5, 1, 255, 72), (3, 2, 1000, 64), (9, 1, 255, 64)])
def test_decode_streams_a_few_query_rows(g, s, t, d, dtype):
    """Up to 8 query rows a key head (the heads of a grouped-query unit, s rows each) stream
    the keys and values once (16-lane dot products, bfloat16 pairs on AVX512_BF16); 9 rows
    run on the tiles.  1 to 5 rows, d off the 16 and 32 lanes, split or not, float32,
    float16 and bfloat16, a batch index whose rows see no key (NaN) and one that sees one."""
    lib = tilec.compile_string(DECODE, "decode.tile")
    name = "decode_" + {np.float32: "f32", np.float16: "f16", BF16: "bf16"}[dtype]
    lens = np.array([t, 0, 1], np.int32).reshape(3, 1, 1, 1, 1)
    got = agrees(lib, name, rand((3, 2, g, s, d), dtype), rand((3, 2, 1, t, d), dtype),
                 rand((3, 2, 1, t, d), dtype), lens, source=DECODE)
    nan = np.isnan(got.astype(np.float32))
    assert nan[1].all() and not nan[0].any() and not nan[2].any()


# posix_memalign (tilec_alloc's) failing from TILEC_TEST_ALLOC_LIMIT bytes up: NumPy and
# Python allocate with malloc, so only the runtime's blocks fail
_FAILING_ALLOC = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
int posix_memalign(void** p, size_t align, size_t size) {
  static int (*real)(void**, size_t, size_t);
  const char* limit = getenv("TILEC_TEST_ALLOC_LIMIT");
  if (limit != NULL && size >= strtoull(limit, NULL, 10)) return ENOMEM;
  if (real == NULL) real = (int (*)(void**, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
  return real(p, align, size);
}
"""
_CALL_OUT_OF_MEMORY = """
import sys, numpy as np, tilec
sys.path.insert(0, sys.argv[2])
import test_attention as t
lib = tilec.load(sys.argv[1])
for name, q, kv in (("plain", (2, 300, 128), (2, 300, 128)),
                    ("causal_gqa", (1, 1, 2, 300, 128), (1, 1, 1, 300, 128))):
    dtype = np.float32 if name == "plain" else t.BF16
    try:
        getattr(lib, name)(t.rand(q, dtype), t.rand(kv, dtype), t.rand(kv, dtype))
    except RuntimeError as e:
        print(name, e)
    else:
        print(name, "returned")
"""


def test_out_of_memory_for_the_scratch_raises(tmp_path):
    """A thread that cannot allocate its scratch (or the caller the packed keys and values
    that the threads share) makes the call fail with a message, never return an output left
    unwritten."""
    shim = tmp_path / "failing_alloc.so"
    (tmp_path / "failing_alloc.c").write_text(_FAILING_ALLOC)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(shim), str(tmp_path / "failing_alloc.c"),
                    "-ldl"], check=True)
    source = tmp_path / "attention.tile"
    source.write_text(SOURCE)
    library = tmp_path / "attention.so"
    assert main([str(source), "-o", str(library)]) == 0
    env = dict(os.environ, LD_PRELOAD=str(shim), TILEC_TEST_ALLOC_LIMIT="100000")
    done = subprocess.run([sys.executable, "-c", _CALL_OUT_OF_MEMORY, str(library),
                           os.path.dirname(__file__)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("plain attention: out of memory for a thread's scratch")
    # bfloat16 on AMX first allocates the packed keys and values the threads share
    assert lines[1].startswith("causal_gqa attention: out of memory for ")
    assert all(line.endswith("the output is not written") for line in lines)


def _plan(source: str, target: str = "cpu", sink: DiagnosticSink | None = None) -> dict:
    """Per function of the kernel-level module: the kernels it calls, with each its schedule
    and attention record ({} where it has none)."""
    plan = {}
    with make_context():
        module = kernel_module(source, "attention.tile", CompileOptions(target=target),
                               sink or DiagnosticSink())
        functions = {ir.StringAttr(op.attributes["sym_name"]).value: op
                     for op in module.body.operations}
        for name, fn in functions.items():
            if KERNEL_ATTR in fn.attributes:
                continue
            plan[name] = []
            for op in fn.regions[0].blocks[0].operations:
                if op.operation.name != "func.call":
                    continue
                kernel = ir.DictAttr(functions[ir.FlatSymbolRefAttr(
                    op.attributes["callee"]).value].attributes[KERNEL_ATTR])
                record = ir.DictAttr(kernel["attention"]) if "attention" in kernel else None
                plan[name].append((ir.StringAttr(kernel["schedule"]).value, {} if record is None
                                   else {"causal": ir.BoolAttr(record["causal"]).value,
                                         "diagonal": ir.StringAttr(record["diagonal"]).value}))
    return plan


def test_the_scores_are_never_a_buffer():
    """Each function is one call of one attention kernel: no kernel writes the [.., s, t]
    scores or probabilities for another to read (the scores function is the runtime's to
    call on one block at a time, never launched)."""
    plan = _plan(SOURCE)
    assert {name: [schedule for schedule, _ in calls] for name, calls in plan.items()} == {
        name: ["attention"] for name in ("causal_gqa", "plain", "lengths", "biased")}
    assert plan["causal_gqa"][0][1] == {"causal": True, "diagonal": "-s+t"}
    assert plan["plain"][0][1] == {"causal": False, "diagonal": "0"}


def test_a_near_miss_stays_unfused_correct_and_says_why():
    sink = DiagnosticSink()
    plan = _plan(NEAR_MISS, sink=sink)
    assert [w.message for w in sink.warnings] == [
        "attention not fused: the softmax is read by more than one op (the probabilities "
        "would be stored)"]
    assert [schedule for schedule, _ in plan["probabilities_too"]] == ["gemm", "rows", "gemm"]
    lib = tilec.compile_string(NEAR_MISS, "near.tile")
    q, k, v = rand((2, 17, 64)), rand((2, 255, 64)), rand((2, 255, 64))
    got = lib.probabilities_too(q, k, v)
    want = run(reference(NEAR_MISS), "probabilities_too", q, k, v)
    for g, w in zip(got, want):
        assert_close(g, w, w.dtype)


def test_remarks_show_with_verbose_only_and_never_change_the_cache_key(tmp_path, capsys):
    """--verbose shows why a near-miss did not fuse, from a fresh compile or a cached one;
    without it nothing is printed; and asking for remarks is no new compile (one key)."""
    from tilec.cli import main

    path = tmp_path / "near.tile"
    path.write_text(NEAR_MISS)
    why = "warning: attention not fused: the softmax is read by more than one op"
    for verbose, hit in ((False, "miss"), (True, "hit"), (True, "hit")):
        args = [str(path), "--emit=opt", "-o", str(tmp_path / "near.opt")]
        assert main(args + ["--verbose"] * verbose) == 0
        err = capsys.readouterr().err
        assert (why in err) == verbose, err
        assert verbose <= (f"compile cache {hit}" in err), err


def test_ascend_sim_runs_float32_attention_unfused():
    plan = _plan(SOURCE, "ascend-sim")
    schedules = [schedule for schedule, _ in plan["plain"]]
    assert "attention" not in schedules and schedules.count("gemm") == 2
    assert [schedule for schedule, _ in plan["causal_gqa"]] == ["attention"]
    lib = tilec.compile_string(SOURCE, "attention.tile", target="ascend-sim")
    agrees(lib, "plain", rand((1, 7, 16)), rand((1, 17, 16)), rand((1, 17, 16)))
    agrees(lib, "causal_gqa", rand((1, 1, 2, 7, 16), BF16), rand((1, 1, 1, 17, 16), BF16),
           rand((1, 1, 1, 17, 16), BF16))


@pytest.mark.parametrize("name", ["attention", "attention_decode"])
def test_the_operators_pass_tilec_verify(name):
    report = verify(str(OPS / f"{name}.tile"), CompileOptions(), max_elements=1 << 19)
    assert report.ok, report.table()
    labels = " ".join(c.label for c in report.cases if c.status == "pass")
    assert all(f"t={v} " in labels + " " for v in (1, 7, 127, 255)), labels
    if name == "attention":     # the template variants run
        assert "d=64" in labels


CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
import tilec, test_attention as t
lib = tilec.compile_string(t.SOURCE, "attention.tile")
t.agrees(lib, "plain", t.rand((2, 255, 72)), t.rand((2, 1000, 72)), t.rand((2, 1000, 72)))
t.agrees(lib, "causal_gqa", t.rand((1, 2, 3, 17, 64), t.BF16), t.rand((1, 2, 1, 255, 64), t.BF16),
         t.rand((1, 2, 1, 255, 64), t.BF16))
t.agrees(lib, "plain", t.rand((1, 1, 128)), t.rand((1, 4000, 128)), t.rand((1, 4000, 128)))
t.agrees(lib, "plain", t.rand((1, 59, 40)), t.rand((1, 300, 40)), t.rand((1, 300, 40)))
t.agrees(lib, "plain", t.rand((1, 256, 128)), t.rand((1, 8200, 128)), t.rand((1, 8200, 128)))
t.agrees(lib, "causal_gqa", t.rand((1, 2, 4, 1, 72), t.BF16), t.rand((1, 2, 1, 1000, 72), t.BF16),
         t.rand((1, 2, 1, 1000, 72), t.BF16))
t.agrees(lib, "causal_gqa", t.rand((1, 2, 3, 1, 80), t.BF16), t.rand((1, 2, 1, 1000, 80), t.BF16),
         t.rand((1, 2, 1, 1000, 80), t.BF16))
lib = tilec.compile_string(t.DECODE, "decode.tile")   # 9 rows: tiles; batch 1's rows NaN
got = t.agrees(lib, "decode_bf16", t.rand((2, 2, 9, 1, 64), t.BF16),
               t.rand((2, 2, 1, 255, 64), t.BF16), t.rand((2, 2, 1, 255, 64), t.BF16),
               t.np.array([255, 0], t.np.int32).reshape(2, 1, 1, 1, 1), source=t.DECODE)
nan = t.np.isnan(got.astype(t.np.float32))
assert nan[1].all() and not nan[0].any()
"""


@pytest.mark.parametrize("level", ["x86-64-v3", "x86-64-v4", "x86-64-v4+bf16"])
def test_matches_the_reference_on_the_avx2_and_avx512_code(level):
    """TILEC_CPU=x86-64-v3: the 6 x 16 tiles (59 rows: 9 of 6 and 5 left, 63: 10 and 3 left;
    d = 40: 32 columns by the tiles, 8 by the scalar code); x86-64-v4: the 8 x 32 ones,
    bfloat16 widened (this process runs AMX for bfloat16 where the CPU has it; any TILEC_CPU
    turns it off); x86-64-v4+bf16: bfloat16's products on vdpbf16ps (AMX off; AMX's packing
    for more than FEW rows, the keys and values in place for a decode); d = 72 leaves
    columns of v to the 16-wide and the scalar code; d = 80 (x86-64-v3) takes a bfloat16
    decode's pairs of 16-element loads; bfloat16 results, NaN rows among them, narrowed on
    8 or 16 lanes; 8200 float32 keys and values (8.0 MiB) walked by each of 4 tasks (2
    threads: no split), copied block by block into scratch (COPY_BYTES)."""
    if level.endswith("+bf16") and "avx512_bf16" not in cpu_flags():
        pytest.skip("this CPU has no AVX512-BF16")
    env = dict(os.environ, TILEC_CPU=level, TILEC_NUM_THREADS="2")
    done = subprocess.run([sys.executable, "-c", CHILD, os.path.dirname(__file__)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_bench_counts_the_librarys_peak_allocations():
    """tilec bench --ops attention --memory: the most bytes the library's allocations held
    during a call beyond what they held before it, whichever thread made them: at s = t =
    4096 in bfloat16 packed keys and values (where the CPU packs them, 8 MiB at once for four
    key heads) or the threads' scratch; nothing left allocated after it; and an unfused
    chain's buffers between its kernels count (a [32, 512, 512] float32 scores tensor)."""
    from tilec.bench.attention import peak_extra_bytes
    lib = tilec.compile_string(SOURCE + UNFUSED, "attention.tile")
    q = rand((1, 8, 4, 4096, 128), BF16)
    k, v = rand((1, 8, 1, 4096, 128), BF16), rand((1, 8, 1, 4096, 128), BF16)
    out = np.ones(q.shape, BF16)
    grown = peak_extra_bytes(lib, lambda: lib.causal_gqa(q, k, v, out=out))
    least = 8 * 2**20 if tilec_cpu_packs_bfloat16() else 2**10
    assert least <= grown < 40 * 2**20
    assert peak_extra_bytes(lib, lambda: None) == 0
    q, k, v = rand((32, 512, 64)), rand((32, 512, 64)), rand((32, 512, 64))
    assert peak_extra_bytes(lib, lambda: lib.unfused(q, k, v)) >= 32 * 512 * 512 * 4


def test_the_bench_rotates_a_decode_beyond_the_cache_and_copies_as_many_bytes(monkeypatch):
    """A decode reads key/value sets of at least twice the last-level cache (so that they
    come from memory), a prefill one set; the copy it is compared with runs in the threads
    asked for."""
    from tilec.bench import attention as bench
    monkeypatch.setattr(bench, "last_level_cache", lambda: 3 * 2**20)
    rng = np.random.default_rng(0)
    sets = bench.key_value_sets(("decode", 1, 256, False, "bfloat16"), rng)
    assert len(sets) == 6 and sets[0][0].shape == (1, bench.KV_HEADS, 1, 256, bench.D)
    assert sum(k.nbytes + v.nbytes for k, v in sets) >= 6 * 2**20
    assert not np.array_equal(sets[0][0], sets[1][0])
    assert len(bench.key_value_sets(("decode", 1, 256, False, "bfloat16"), rng, False)) == 1
    assert len(bench.key_value_sets(("prefill", 64, 64, True, "float32"), rng)) == 1
    monkeypatch.setenv("TILEC_NUM_THREADS", "3")
    assert bench.tilec_threads() == 3
    with bench.copying(2**20, 3) as (copy, moved):
        copy()
    assert moved == 2 * 2**20


_PEAK_AT_8_THREADS = """
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np, tilec, test_attention as t
from tilec.bench.attention import peak_extra_bytes
lib = tilec.compile_string(t.SOURCE, "attention.tile")
q = t.rand((1, 1, 1, 1024, 128), t.BF16)
k, v = t.rand((1, 1, 1, 16384, 128), t.BF16), t.rand((1, 1, 1, 16384, 128), t.BF16)
out = np.ones(q.shape, t.BF16)
print(peak_extra_bytes(lib, lambda: lib.causal_gqa(q, k, v, out=out)))
"""


def test_peak_memory_does_not_grow_with_the_threads():
    """bfloat16 at t = 16384 on 8 threads: the 16 row blocks of the key head read its keys
    and values packed once (8 MiB) for all the threads, not once a thread (64 MiB); the
    library's peak allocations counted as ``tilec bench --memory`` counts them."""
    if not tilec_cpu_packs_bfloat16():
        pytest.skip("no AMX or AVX512-BF16: bfloat16 is widened, nothing is packed")
    env = dict(os.environ, TILEC_NUM_THREADS="8")
    done = subprocess.run([sys.executable, "-c", _PEAK_AT_8_THREADS, os.path.dirname(__file__)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert 8 * 2**20 <= int(done.stdout) < 24 * 2**20


def tilec_cpu_packs_bfloat16() -> bool:
    """Whether this process's bfloat16 attention packs its keys and values (for AMX, else for
    AVX512-BF16's vdpbf16ps), as the runtime decides."""
    flags = cpu_flags()
    return ("amx_bf16" in flags and "amx_tile" in flags or "avx512_bf16" in flags) \
        and "TILEC_CPU" not in os.environ
