"""tilec's fused attention (tile-attention, ``runtime/cpu_attention.c``) against PyTorch's
``scaled_dot_product_attention`` called as its users call it: ``is_causal=True`` for causal,
``enable_gqa=True`` for grouped-query attention (no expanded keys or values, no mask).

In: 32 query heads and 8 key/value heads, d = 128, s = t in {512, 1024, 4096} (and 16384 with
``--long``), causal and not, float32 and bfloat16; decode: one query row against t in
{4096, 32768} keys (SDPA without a mask: one query row sees every key).  A decode rotates
through enough key/value sets to hold at least twice the last-level cache, so that its keys
and values come from memory, not the cache; SDPA reads the same sets.  Out: one markdown
table: per case the best time of each, tilec's speed-up over SDPA (above 1: tilec faster),
and for decode the bytes of the keys and values read per second against a copy's over as
many bytes in the same process, timed in turns with it (``np.copyto`` between preallocated
buffers, in as many threads as tilec runs; bytes read and written, as STREAM counts them):
the best of each, and the decode's percentage of the copy's bandwidth in the same round,
the median over the rounds (``round_share``: the host's bandwidth moves between rounds).

With ``--memory``, one more call per case measures tilec's peak extra memory: the most bytes
the library's own allocations (its threads' scratch, packed keys and values, split results,
buffers between unfused kernels) held at once during the call, beyond what they held before
it (``tilec_alloc_peak``).  Not the resident set's growth: Linux folds the page faults of
other threads into it lazily, so it missed the packed keys and values the pool's threads
wrote (8 MiB read as 1.4), and a process reuses what an earlier case freed.

    tilec bench --ops attention [--long] [--quick] [--only prefill|decode] [--memory]
                                [--repeat N] [--threads N] [-o FILE]
"""
from __future__ import annotations

import argparse
import ctypes
import os
import platform
from typing import Any, Callable, Optional, Sequence

import ml_dtypes
import numpy as np

import tilec

from .gemm import best, copying, in_turns, last_level_cache, round_share, tilec_threads

SOURCE = """
func causal__T(q: Tensor<T>[b, hk, g, s, d], k: Tensor<T>[b, hk, 1, t, d],
               v: Tensor<T>[b, hk, 1, t, d]) -> Tensor<T>[b, hk, g, s, d] {
  let scores = cast(q @ transpose(k, [0, 1, 2, 4, 3]), f32) * rsqrt(cast(dim(d), f32));
  let masked = where(iota([s, t], axis=1) <= iota([s, t], axis=0, start=t - s), scores, -inf);
  return cast(cast(softmax(masked, axis=-1), T) @ v, T);
}
func full__T(q: Tensor<T>[b, hk, g, s, d], k: Tensor<T>[b, hk, 1, t, d],
             v: Tensor<T>[b, hk, 1, t, d]) -> Tensor<T>[b, hk, g, s, d] {
  let scores = cast(q @ transpose(k, [0, 1, 2, 4, 3]), f32) * rsqrt(cast(dim(d), f32));
  return cast(cast(softmax(scores, axis=-1), T) @ v, T);
}
"""
DTYPES = {"float32": (np.float32, "f32"), "bfloat16": (ml_dtypes.bfloat16, "bf16")}
HEADS, KV_HEADS, D = 32, 8, 128
Case = tuple[str, int, int, bool, str]    # kind (prefill/decode), s, t, causal, dtype


def source() -> str:
    return "\n".join(SOURCE.replace("__T", f"_{short}").replace("<T>", f"<{short}>")
                     .replace(", T)", f", {short})") for _, short in DTYPES.values())


def cases(long: bool, quick: bool) -> list[Case]:
    if quick:
        return [("prefill", 64, 64, True, "float32"), ("decode", 1, 256, False, "bfloat16")]
    sizes = (512, 1024, 4096) + ((16384,) if long else ())
    out: list[Case] = [("prefill", n, n, causal, dtype) for n in sizes for causal in (True, False)
                       for dtype in DTYPES]
    return out + [("decode", 1, t, False, dtype) for t in (4096, 32768) for dtype in DTYPES]


def peak_extra_bytes(lib: Any, run: Callable[[], Any]) -> int:
    """The most bytes ``lib``'s allocations held during ``run()`` beyond what they held
    before it."""
    peak = lib.cdll.tilec_alloc_peak
    peak.restype, peak.argtypes = ctypes.c_int64, (ctypes.c_int,)
    peak(1)
    before = peak(1)
    run()
    return peak(0) - before


def key_value_sets(case: Case, rng: np.random.Generator, rotate: bool = True) -> list:
    """The (k, v) pairs a case reads: one for prefill; for decode (with ``rotate``) as many
    as hold at least twice the last-level cache."""
    kind, s, t, causal, dtype = case
    count = 1
    if kind == "decode" and rotate:
        one = 2 * KV_HEADS * t * D * np.dtype(DTYPES[dtype][0]).itemsize
        count = max(1, -(-2 * last_level_cache() // one))
    return [tuple(rng.standard_normal((1, KV_HEADS, 1, t, D), np.float32)
                  .astype(DTYPES[dtype][0]) for _ in "kv") for _ in range(count)]


def as_torch(a: np.ndarray, heads: int) -> Any:
    """``a`` as a torch tensor [1, heads, n, D] sharing its memory."""
    import torch
    if a.dtype == np.float32:
        return torch.from_numpy(a.reshape(1, heads, -1, D))
    return torch.from_numpy(a.view(np.int16).reshape(1, heads, -1, D)).view(torch.bfloat16)


def time_case(lib: Any, case: Case, repeat: int, rng: np.random.Generator,
              memory: bool = False, rotate: bool = True) -> dict:
    kind, s, t, causal, dtype = case
    np_dtype, short = DTYPES[dtype]
    group = HEADS // KV_HEADS
    q = rng.standard_normal((1, KV_HEADS, group, s, D), np.float32).astype(np_dtype)
    sets = key_value_sets(case, rng, rotate)
    fn = getattr(lib, f"{'causal' if causal or kind == 'decode' else 'full'}_{short}")
    out = np.ones(q.shape, np_dtype)     # written: its pages are resident before the call
    row = {}
    if memory:
        row["extra"] = peak_extra_bytes(lib, lambda: fn(q, *sets[0], out=out))
    def run() -> None:
        for k, v in sets:
            fn(q, k, v, out=out)

    if kind == "decode":    # in turns with a copy of as many bytes
        kv_bytes = sum(k.nbytes + v.nbytes for k, v in sets)
        with copying(kv_bytes, tilec_threads()) as (copy, moved):
            mine, copied = in_turns([run, copy], repeat)
        row["tilec"] = min(mine) / len(sets)
        row["gbps"], row["copy"] = kv_bytes / min(mine) / 1e9, moved / min(copied) / 1e9
        row["share"] = round_share(mine, copied, kv_bytes, moved)
    else:
        row["tilec"] = best(run, repeat) / len(sets)
    try:
        import torch.nn.functional as F
    except ImportError:
        return row
    tq = as_torch(q, HEADS)
    tsets = [(as_torch(k, KV_HEADS), as_torch(v, KV_HEADS)) for k, v in sets]
    row["sdpa"] = best(lambda: [F.scaled_dot_product_attention(
        tq, tk, tv, is_causal=causal and kind == "prefill", enable_gqa=True)
        for tk, tv in tsets], repeat) / len(sets)
    return row


def _torch_threads() -> str:
    try:
        import torch
    except ImportError:
        return "-"
    return str(torch.get_num_threads())


def report(rows: list[tuple[Case, dict]], level: str) -> str:
    """The table of ``rows``, under a header naming the machine, the CPU code that ran
    (``level``: x86-64-v3 or x86-64-v4) and the threads."""
    load = os.getloadavg()
    lines = [f"# attention: tilec vs torch scaled_dot_product_attention ({platform.machine()}, "
             f"{len(os.sched_getaffinity(0))} CPUs, TILEC_NUM_THREADS "
             f"{os.environ.get('TILEC_NUM_THREADS', 'unset')}, torch threads {_torch_threads()})",
             "", f"CPU code: {level}.", "",
             f"Load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} (the machine "
             "is shared: the ratios, measured side by side, count more than the times).", "",
             f"{HEADS} query heads, {KV_HEADS} key/value heads, d = {D}, batch 1.", "",
             f"A decode rotates through key/value sets of at least twice the last-level cache "
             f"({last_level_cache() / 2**20:.0f} MiB); its copy runs in {tilec_threads()} "
             "threads over as many bytes, counting bytes read and written.", "",
             "| case | s | t | causal | dtype | tilec ms | SDPA ms | tilec/SDPA speed-up | "
             "decode GB/s (copy GB/s), best | decode % of copy, median round | "
             "tilec peak extra MiB |",
             "| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for (kind, s, t, causal, dtype), row in rows:
        sdpa = row.get("sdpa")
        speed = f"{sdpa / row['tilec']:.2f}x" if sdpa else "-"
        gbps = f"{row['gbps']:.1f} ({row['copy']:.1f})" if "gbps" in row else ""
        share = f"{100 * row['share']:.0f}%" if "gbps" in row else ""
        extra = f"{row['extra'] / 2**20:.1f}" if row.get("extra") is not None else ""
        lines.append(f"| {kind} | {s} | {t} | {'yes' if causal else 'no'} | {dtype} | "
                     f"{row['tilec'] * 1e3:.1f} | {sdpa * 1e3 if sdpa else 0:.1f} | {speed} | "
                     f"{gbps} | {share} | {extra} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="tilec bench --ops attention",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--long", action="store_true", help="add s = t = 16384")
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes, decode not rotated: a smoke test")
    p.add_argument("--only", choices=("prefill", "decode"), help="only these cases")
    p.add_argument("--memory", action="store_true",
                   help="one more call per case: tilec's peak extra memory")
    p.add_argument("--repeat", type=int, default=3, help="timed calls per case (default 3)")
    p.add_argument("--threads", type=int, default=0,
                   help="threads of both (TILEC_NUM_THREADS, torch.set_num_threads; default: "
                        "each its own): 1 compares the code on a machine others load")
    p.add_argument("-o", dest="output", help="also write the report here")
    args = p.parse_args(argv)
    if args.threads:
        os.environ["TILEC_NUM_THREADS"] = str(args.threads)   # read when the pool starts
        try:
            import torch
            torch.set_num_threads(args.threads)
        except ImportError:
            pass
    lib = tilec.compile_string(source(), "attention_bench.tile")
    rng = np.random.default_rng(0)
    rows = []
    for case in cases(args.long, args.quick):
        if args.only and case[0] != args.only:
            continue
        rows.append((case, time_case(lib, case, args.repeat, rng, args.memory,
                                     rotate=not args.quick)))
        print(f"  {case}: {rows[-1][1]}", flush=True)
    text = report(rows, lib.cpu_code or "unknown")
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    return 0
