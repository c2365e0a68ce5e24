"""tilec's CPU kernels against NumPy, PyTorch eager and torch.compile, in one process.

In: the operators of ``tilec/bench/ops/*.tile`` (swiglu, rmsnorm, layernorm, softmax, rope, gelu,
transpose, each as ``OP_f32`` and ``OP_f16``) and the same computations written for each
peer.  Out: one markdown table on stdout (and in ``-o FILE``; a full run of a source checkout
writes ``bench/results/cpu-DATE.md`` there, of an installed tilec ``cpu-DATE.md`` here): per
operator, dtype and output mode the median time of each implementation, tilec's GB/s (bytes an
ideal kernel reads and writes) and its fraction of a copy's bandwidth (``np.copyto`` moving
the same bytes between preallocated buffers, on one thread and on one thread per CPU: the
faster is the roof), and each peer's time with tilec's speed-up over it.

Output modes: ``fresh`` (every call allocates its result: the peer's own allocator; tilec's
runtime uses NumPy's) and ``out=`` (results, and any scratch a peer needs, allocated once).
PyTorch's allocator gets no transparent huge pages unless ``THP_MEM_ALLOC_ENABLE=1`` is set
before torch is imported, so its fresh figures are measured again in a child process with it
set (beside tilec's, for a ratio from one process).  Within a mode the implementations run
round after round, each round in a new shuffled order, so that the machine's drift and the
state of its caches touch all of them alike; the rounds are shared out among passes over
every case, so that each case is sampled across the whole run.  Every peer's result is
checked against tilec's before timing.

    .venv/bin/tilec bench [--quick] [--no-torch] [--ops OP,...] [--arch ARCH] [-o FILE]

(bench/README.md: the peers to install, the columns, how to read them).
"""
from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

import tilec
from tilec.codegen.cpu import BUILD_ARCHES, DEFAULT_ARCH

BENCH = Path(__file__).resolve().parent
# the source checkout tilec is imported from (None for an installed tilec): the recorded
# results go to its bench/results, its commit into the report
CHECKOUT = Path(tilec.__file__).resolve().parent.parent
CHECKOUT = CHECKOUT if (CHECKOUT / "bench" / "results").is_dir() else None
OPS = ("swiglu", "rmsnorm", "layernorm", "softmax", "rope", "gelu", "transpose")
DTYPES = {"float32": np.float32, "float16": np.float16}
SUFFIX = {"float32": "f32", "float16": "f16"}
HEAD_DIM = 128               # rope: hidden = heads * HEAD_DIM
RMS_EPS = 1e-6               # the defaults of ops/*.tile
LN_EPS = 1e-5
SQRT_HALF = math.sqrt(0.5)
TOLERANCE = {"float32": (1e-3, 1e-4), "float16": (1e-2, 1e-2)}   # (rtol, atol) of the check
PEERS = ("numpy", "torch", "compile")
PEER_TITLES = {"numpy": "NumPy", "torch": "torch eager", "compile": "torch.compile"}
MODES = ("fresh", "out=")
THREADS = os.cpu_count() or 1
THP_ENV = "THP_MEM_ALLOC_ENABLE"
OPENBLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
ORDER_SEED = 2026            # the shuffles of sample_times
BASELINE = "x86-64-v3"
# out= also times tilec built for x86-64-v3 alone (unless the run builds it so): the code the
# default build runs on CPUs without AVX-512
BASELINE_RUN = "tilec x86-64-v3"
# tilec is timed in the rounds of each group of peers, for the ratios to them ("tilec beside
# numpy", "tilec beside torch"), and in the rounds of the copies as "tilec", for its share of
# the copy (see measure)
PEER_GROUPS = {"numpy": "numpy", "torch": "torch", "compile": "torch"}
# PyTorch's OpenMP threads spin for a while after each call (libgomp's default), taking the
# second core from whatever runs next: tilec's swiglu float32 took 8.6 ms right after
# torch.compile's, 6.7-7.2 ms alone or 2 ms later, and 7.1 ms right after it with
# OMP_WAIT_POLICY=passive.  In the rounds of the PyTorch peers each call starts this many
# seconds after the one before, untimed: every call finds the machine quiet.
TORCH_SETTLE_S = 0.003
BESIDE = "tilec beside "

Run = Callable[[], Any]      # one call of an implementation, ready to time
Times = dict[str, dict[str, float]]    # output mode -> implementation -> median seconds


@dataclass(frozen=True)
class Size:
    tokens: int
    hidden: int

    @property
    def heads(self) -> int:
        return self.hidden // HEAD_DIM


FULL = Size(4096, 4096)
QUICK = Size(64, 256)


def make_inputs(op: str, size: Size, dtype: str, rng: np.random.Generator) -> list[np.ndarray]:
    """The arguments of ``OP_{f32,f16}`` in ops/ (rope's table stays float32)."""
    t, h, kind = size.tokens, size.hidden, DTYPES[dtype]

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32).astype(kind)

    if op == "swiglu":
        return [normal(t, 2 * h)]
    if op == "rmsnorm":
        return [normal(t, h), normal(h)]
    if op == "rope":
        angles = rng.uniform(0.0, 2 * math.pi, (t, HEAD_DIM // 2)).astype(np.float32)
        table = np.concatenate([np.cos(angles), np.sin(angles)], axis=1)
        return [normal(t, size.heads, HEAD_DIM), table]
    return [normal(t, h)]


class Unsupported(Exception):
    """A peer cannot run this case; the message says why."""


# ---------------------------------------------------------------------------------------------
# NumPy: float32 code; float16 arguments are widened first and the result narrowed.

@functools.lru_cache(maxsize=1)
def _erf() -> Optional[Callable]:
    try:
        from scipy.special import erf
    except ImportError:
        return None
    return erf


def numpy_fresh(op: str, a: Sequence[np.ndarray]) -> Any:
    """The idiomatic NumPy expression of ``op`` on float32 arrays."""
    if op == "swiglu":
        h = a[0].shape[-1] // 2
        x, g = a[0][:, :h], a[0][:, h:]
        return x * (g / (1.0 + np.exp(-g)))
    if op == "rmsnorm":
        x, w = a
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + RMS_EPS) * w
    if op == "layernorm":
        x = a[0]
        mean = x.mean(axis=-1, keepdims=True)
        return (x - mean) / np.sqrt(x.var(axis=-1, keepdims=True) + LN_EPS)
    if op == "softmax":
        e = np.exp(a[0] - a[0].max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    if op == "rope":
        q, freqs = a
        half = q.shape[-1] // 2
        c, s = freqs[:, None, :half], freqs[:, None, half:]
        q1, q2 = q[..., :half], q[..., half:]
        return np.concatenate([q1 * c - q2 * s, q2 * c + q1 * s], axis=-1)
    if op == "transpose":
        return np.ascontiguousarray(a[0].T)
    return a[0] * 0.5 * (1.0 + _erf()(a[0] * SQRT_HALF))


def numpy_into(op: str, a: Sequence[np.ndarray], out: np.ndarray) -> Run:
    """``op`` on float32 arrays written into ``out`` by in-place ufuncs (scratch made once)."""
    if op == "swiglu":
        h = out.shape[-1]
        x, g = a[0][:, :h], a[0][:, h:]

        def run() -> None:
            np.negative(g, out=out)
            np.exp(out, out=out)
            np.add(out, 1.0, out=out)
            np.divide(g, out, out=out)
            np.multiply(out, x, out=out)
    elif op == "rmsnorm":
        x, w = a

        def run() -> None:
            inverse = 1.0 / np.sqrt(np.vecdot(x, x)[:, None] * (1.0 / x.shape[-1]) + RMS_EPS)
            np.multiply(x, inverse, out=out)
            np.multiply(out, w, out=out)
    elif op == "layernorm":
        x = a[0]

        def run() -> None:
            np.subtract(x, x.mean(axis=-1, keepdims=True), out=out)
            var = np.vecdot(out, out)[:, None] * (1.0 / x.shape[-1])
            np.multiply(out, 1.0 / np.sqrt(var + LN_EPS), out=out)
    elif op == "softmax":
        x = a[0]

        def run() -> None:
            np.subtract(x, x.max(axis=-1, keepdims=True), out=out)
            np.exp(out, out=out)
            np.multiply(out, 1.0 / out.sum(axis=-1, keepdims=True), out=out)
    elif op == "rope":
        q, freqs = a
        half = q.shape[-1] // 2
        c, s = freqs[:, None, :half], freqs[:, None, half:]
        q1, q2, o1, o2 = q[..., :half], q[..., half:], out[..., :half], out[..., half:]
        scratch = np.empty(q1.shape, np.float32)

        def run() -> None:
            np.multiply(q1, c, out=o1)
            np.multiply(q2, s, out=scratch)
            np.subtract(o1, scratch, out=o1)
            np.multiply(q2, c, out=o2)
            np.multiply(q1, s, out=scratch)
            np.add(o2, scratch, out=o2)
    elif op == "transpose":
        def run() -> None:
            np.copyto(out, a[0].T)
    else:
        x, erf = a[0], _erf()

        def run() -> None:
            np.multiply(x, SQRT_HALF, out=out)
            erf(out, out=out)
            np.add(out, 1.0, out=out)
            np.multiply(out, x, out=out)
            np.multiply(out, 0.5, out=out)
    return run


def numpy_peer(op: str, args: Sequence[np.ndarray], out: Optional[np.ndarray]) -> Run:
    """NumPy's ``fresh`` (``out`` None) or ``out=`` run of ``op``."""
    if op == "gelu" and _erf() is None:
        raise Unsupported("NumPy has no erf (SciPy is not installed)")
    if out is None:
        if args[0].dtype == np.float32:
            return lambda: numpy_fresh(op, args)
        return lambda: numpy_fresh(op, [a.astype(np.float32) for a in args]).astype(np.float16)
    if out.dtype == np.float32:
        return numpy_into(op, args, out)
    wide = [np.empty(a.shape, np.float32) for a in args]
    wide_out = np.empty(out.shape, np.float32)
    compute = numpy_into(op, wide, wide_out)

    def run() -> None:
        for w, a in zip(wide, args):
            np.copyto(w, a)
        compute()
        np.copyto(out, wide_out, casting="same_kind")
    return run


# ---------------------------------------------------------------------------------------------
# PyTorch: the arguments' own dtype (its float16 kernels compute in float32 per op).

def torch_expression(op: str) -> Callable[..., Any]:
    """The idiomatic PyTorch code of ``op`` (eager, and what torch.compile compiles)."""
    import torch
    import torch.nn.functional as F

    def swiglu(x: Any) -> Any:
        h = x.shape[-1] // 2
        return x[:, :h] * F.silu(x[:, h:])

    def rmsnorm(x: Any, w: Any) -> Any:
        return F.rms_norm(x, (x.shape[-1],), w, RMS_EPS)

    def layernorm(x: Any) -> Any:
        return F.layer_norm(x, (x.shape[-1],), eps=LN_EPS)

    def softmax(x: Any) -> Any:
        return torch.softmax(x, dim=-1)

    def rope(q: Any, freqs: Any) -> Any:
        half = q.shape[-1] // 2
        c = freqs[:, None, :half].to(q.dtype)
        s = freqs[:, None, half:].to(q.dtype)
        q1, q2 = q[..., :half], q[..., half:]
        return torch.cat([q1 * c - q2 * s, q2 * c + q1 * s], dim=-1)

    def gelu(x: Any) -> Any:
        return F.gelu(x)

    def transpose(x: Any) -> Any:
        return x.t().contiguous()

    return {"swiglu": swiglu, "rmsnorm": rmsnorm, "layernorm": layernorm, "softmax": softmax,
            "rope": rope, "gelu": gelu, "transpose": transpose}[op]


def torch_into(op: str, a: Sequence[Any], out: Any) -> Run:
    """Eager PyTorch writing ``op`` into ``out`` with ``out=`` kernels and in-place ops."""
    import torch

    aten = torch.ops.aten
    if op == "swiglu":
        h = out.shape[-1]
        x, g = a[0][:, :h], a[0][:, h:]

        def run() -> None:
            aten.silu.out(g, out=out)
            out.mul_(x)
    elif op == "rmsnorm":
        x, w = a

        def run() -> None:
            norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=torch.float32)
            inverse = norm.square_().mul_(1.0 / x.shape[-1]).add_(RMS_EPS).rsqrt_()
            torch.mul(x, inverse, out=out)
            out.mul_(w)
    elif op == "layernorm":
        x = a[0]
        _, mean, rstd = torch.native_layer_norm(x, [x.shape[-1]], None, None, LN_EPS)

        def run() -> None:
            aten.native_layer_norm.out(x, [x.shape[-1]], None, None, LN_EPS,
                                       out0=out, out1=mean, out2=rstd)
    elif op == "softmax":
        def run() -> None:
            aten._softmax.out(a[0], -1, False, out=out)
    elif op == "rope":
        q, freqs = a
        half = q.shape[-1] // 2
        q1, q2, o1, o2 = q[..., :half], q[..., half:], out[..., :half], out[..., half:]

        def run() -> None:
            c = freqs[:, None, :half].to(q.dtype)
            s = freqs[:, None, half:].to(q.dtype)
            torch.mul(q1, c, out=o1)
            o1.addcmul_(q2, s, value=-1.0)
            torch.mul(q2, c, out=o2)
            o2.addcmul_(q1, s)
    elif op == "transpose":
        def run() -> None:
            out.copy_(a[0].t())
    else:
        def run() -> None:
            aten.gelu.out(a[0], out=out)
    return run


def torch_peer(op: str, args: Sequence[np.ndarray], out: Optional[np.ndarray]) -> Run:
    """Eager PyTorch on tensors sharing ``args``' memory: the expression, or into ``out``."""
    import torch

    tensors = [torch.from_numpy(a) for a in args]
    if out is None:
        expression = torch_expression(op)
        return lambda: expression(*tensors)
    return torch_into(op, tensors, torch.from_numpy(out))


def compile_peer(op: str, args: Sequence[np.ndarray], out: Optional[np.ndarray]) -> Run:
    """torch.compile (inductor, CPU) of the eager expression; with ``out``, of the expression
    copied into it (inductor stores the fused result into ``out`` directly)."""
    import torch

    tensors = [torch.from_numpy(a) for a in args]
    if out is None:
        compiled = _compiled(op, into=False)

        def run() -> Any:
            return compiled(*tensors)
    else:
        compiled_into = _compiled(op, into=True)
        target = torch.from_numpy(out)

        def run() -> Any:
            return compiled_into(*tensors, out=target)
    try:
        run()     # compiles, in the first pass
    except Exception as e:  # inductor's failures have many types: report any as the reason
        first = (str(e).strip().splitlines() or [""])[0][:160]
        raise Unsupported(f"torch.compile failed: {type(e).__name__}: {first}") from None
    return run


@functools.lru_cache(maxsize=None)
def _compiled(op: str, into: bool) -> Callable[..., Any]:
    """One torch.compile of ``op``'s expression (``into``: copied into ``out=``) for the
    whole run, so that later passes find it compiled.  Every op's ``into`` shares one code
    object, which dynamo compiles once per op and dtype: the recompilation limit is raised
    for that."""
    import torch

    config = torch._dynamo.config
    setattr(config, "recompile_limit" if hasattr(config, "recompile_limit")
            else "cache_size_limit", 4 * len(OPS) * len(DTYPES))
    expression = torch_expression(op)
    if not into:
        return torch.compile(expression, dynamic=False)

    def copied(*a: Any, out: Any) -> None:
        out.copy_(expression(*a))
    return torch.compile(copied, dynamic=False)


PEER_RUNS: dict[str, Callable[[str, Sequence[np.ndarray], Optional[np.ndarray]], Run]] = {
    "numpy": numpy_peer, "torch": torch_peer, "compile": compile_peer}


# ---------------------------------------------------------------------------------------------
# Measuring

@dataclass
class Case:
    """One operator at one dtype: the measurements of every mode."""

    op: str
    dtype: str
    nbytes: int                                                # an ideal kernel's traffic
    # mode -> implementation -> seconds of each timed call, from every pass
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)     # impl -> why it has no figure

    @property
    def times(self) -> Times:
        """mode -> implementation -> the median of its samples."""
        return {mode: {name: statistics.median(s) for name, s in runs.items()}
                for mode, runs in self.samples.items()}


def sample_times(runs: dict[str, Run], rounds: int, warmup: int,
                 shuffler: random.Random, settle: float = 0.0) -> dict[str, list[float]]:
    """Seconds of each run in ``rounds`` rounds that call every run once, in an order shuffled
    afresh each round, each call ``settle`` seconds (untimed) after the one before.  The
    machine's last-level cache can hold several of these working sets (480 MiB on the machine
    of ``results/``), so a call finds its inputs in cache or not depending on what ran just
    before it: a fixed order would favour whoever follows the one that read the same
    arrays."""
    for run in runs.values():
        for _ in range(warmup):
            run()
    samples: dict[str, list[float]] = {name: [] for name in runs}
    order = list(runs)
    for _ in range(rounds):
        shuffler.shuffle(order)
        for name in order:
            if settle:
                time.sleep(settle)
            start = time.perf_counter()
            runs[name]()
            samples[name].append(time.perf_counter() - start)
    return samples


def _as_numpy(value: Any) -> np.ndarray:
    return value if isinstance(value, np.ndarray) else value.numpy()


def check(name: str, got: Any, want: np.ndarray, dtype: str) -> None:
    """A peer must compute what tilec computes (within the loose ``TOLERANCE``)."""
    rtol, atol = TOLERANCE[dtype]
    got = _as_numpy(got).astype(np.float32)
    if got.shape != want.shape or not np.allclose(got, want.astype(np.float32), rtol, atol):
        error = np.max(np.abs(got - want)) if got.shape == want.shape else got.shape
        raise SystemExit(f"bench: {name} disagrees with tilec (max abs error {error})")


def copy_runs(nbytes: int) -> dict[str, Run]:
    """``np.copyto`` between preallocated buffers moving ``nbytes`` (read + written): on one
    thread (``copy``), and cut in ``THREADS`` parts copied on as many threads (``copy_all``;
    NumPy lets go of the GIL while it copies).  Each copy has buffers of its own, as each
    kernel has: sharing them, the second copy would find them where the first left them, in
    cache, a start that no kernel gets."""
    def buffers() -> tuple[np.ndarray, np.ndarray]:
        source = np.ones(nbytes // 8, np.float32)
        return source, np.empty_like(source)

    one_target, one_source = buffers()[::-1]
    source, target = buffers()
    parts = list(zip(np.array_split(target, THREADS), np.array_split(source, THREADS)))

    def copy_all() -> None:
        for pending in [_copier().submit(np.copyto, t, s) for t, s in parts]:
            pending.result()
    return {"copy": lambda: np.copyto(one_target, one_source), "copy_all": copy_all}


@functools.lru_cache(maxsize=1)
def _copier() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(THREADS)


def roof(times: dict[str, float]) -> float:
    """The faster copy's seconds."""
    return min(times["copy"], times["copy_all"])


def best_copy(cases: Sequence["Case"]) -> float:
    """The copy bandwidth (bytes/s) of the run: the best of every case's faster copy.  Run in
    shuffled order with buffers of their own, the copies of every case measure one roof
    (within the noise); taking its best keeps a copy slowed by a busy machine from flattering
    the kernel timed beside it."""
    return max(case.nbytes / roof(times) for case in cases for times in case.times.values())


@dataclass(frozen=True)
class Settings:
    """How a run measures (the command line's options)."""

    quick: bool = False
    arch: str = DEFAULT_ARCH      # tilec's --arch
    repeat: int = 12
    warmup: int = 2
    passes: int = 3

    @property
    def size(self) -> Size:
        return QUICK if self.quick else FULL

    def options(self) -> list[str]:
        """These settings as command-line options."""
        return (["--quick"] if self.quick else []) + [
            "--arch", self.arch, "--repeat", str(self.repeat), "--warmup", str(self.warmup),
            "--passes", str(self.passes)]

    def rounds(self, pass_number: int) -> int:
        """The rounds of pass ``pass_number``: ``repeat`` shared out among the passes."""
        return self.repeat // self.passes + (pass_number < self.repeat % self.passes)


def measure(op: str, dtype: str, settings: Settings, plan: dict[str, Sequence[str]],
            rounds: int, baseline: bool = True, case: Optional[Case] = None,
            pass_number: int = 0) -> Case:
    """Time tilec, the copies and the peers on ``op`` in each mode of ``plan`` (mode -> its
    peers) for ``rounds`` rounds, adding the samples to ``case`` (a new one if None); with
    ``baseline``, in the out= mode also tilec built for x86-64-v3 alone (unless the settings
    build it so already).  tilec is timed in rounds of its own with each group of
    implementations: the copies (its share of the copy), NumPy, and PyTorch eager with
    ``torch.compile`` (the ratios to them).  NumPy runs for a third of a second on one core in
    some cases, and on a virtual machine the other core, left idle meanwhile, ran the next
    calls several times slower (``numpy.exp`` of 4M floats: 2.4 ms, 26 ms right after a 0.3 s
    sleep), a penalty that would land on whatever is timed beside it in the cases with the
    slowest peers: tilec's share of the copy, and its ratios to PyTorch (swiglu float32,
    timed with NumPy in the rounds: 9.1 ms beside PyTorch, 7.2 ms beside the copies)."""
    rng = np.random.default_rng(0)
    args = make_inputs(op, settings.size, dtype, rng)

    def build(arch: str) -> Any:
        library = tilec.compile(str(BENCH / "ops" / f"{op}.tile"), arch=arch)
        return library[f"{op}_{SUFFIX[dtype]}"]

    kernel = build(settings.arch)
    want = kernel(*args)
    case = case or Case(op, dtype, sum(a.nbytes for a in args) + want.nbytes)
    for mode, peers in plan.items():
        out = None if mode == "fresh" else np.empty_like(want)
        tilec_run = (lambda: kernel(*args)) if out is None else (lambda: kernel(*args, out=out))
        runs: dict[str, Run] = {**copy_runs(case.nbytes), "tilec": tilec_run}
        if baseline and out is not None and settings.arch != BASELINE:
            baseline_kernel, baseline_out = build(BASELINE), np.empty_like(want)
            runs[BASELINE_RUN] = lambda: baseline_kernel(*args, out=baseline_out)
            runs[BASELINE_RUN]()
            check(f"tilec --arch {BASELINE}", baseline_out, want, dtype)
        groups = {"copies": runs}
        for peer in peers:
            target = None if out is None else np.empty_like(want)
            try:
                run = PEER_RUNS[peer](op, args, target)
            except Unsupported as e:
                case.missing[peer] = str(e)
                continue
            result = run()
            check(f"{PEER_TITLES[peer]} ({mode})", result if target is None else target, want,
                  dtype)
            group = PEER_GROUPS[peer]
            groups.setdefault(group, {BESIDE + group: tilec_run})[peer] = run
        for name, group in groups.items():
            shuffler = random.Random(f"{ORDER_SEED}/{op}/{dtype}/{mode}/{pass_number}/{name}")
            sampled = sample_times(group, rounds, settings.warmup, shuffler,
                                   TORCH_SETTLE_S if name == "torch" else 0.0)
            for name, times in sampled.items():
                case.samples.setdefault(mode, {}).setdefault(name, []).extend(times)
    return case


def thp_times(ops: Sequence[str], settings: Settings) -> dict[str, Times]:
    """The times, keyed ``OP/DTYPE``, from a child process whose PyTorch allocator asks for
    huge pages (``THP_MEM_ALLOC_ENABLE=1`` before torch is imported): tilec in both modes (a
    baseline for ratios within the child), the torch peers with fresh outputs."""
    with tempfile.TemporaryDirectory(prefix="tilec-bench-") as tmp:
        results = Path(tmp) / "thp.json"
        subprocess.run([sys.executable, __file__, "--thp-child", str(results), "--ops",
                        ",".join(ops), *settings.options()],
                       check=True, env={**os.environ, THP_ENV: "1"})
        return json.loads(results.read_text())


# ---------------------------------------------------------------------------------------------
# The report

def _percent(share: float) -> str:
    """Rounded down, so that a share printed as 70% has reached 70%."""
    return f"{math.floor(100 * share)}%"


def _cell(seconds: Optional[float], tilec_seconds: float) -> str:
    if seconds is None:
        return "—"
    return f"{seconds * 1e3:.3g} ({seconds / tilec_seconds:.2f}×)"


def table(cases: Sequence[Case], thp: dict[str, Times], peers: Sequence[str],
          bandwidth: float) -> str:
    """The main table: one row per operator, dtype and output mode."""
    peer_columns = [(p, with_thp) for p in peers
                    for with_thp in ((False, True) if thp and p != "numpy" else (False,))]
    titles = [PEER_TITLES[p] + (" THP" if t else "") for p, t in peer_columns]
    baseline = any(BASELINE_RUN in times for case in cases for times in case.times.values())
    head = ["op", "dtype", "outputs", "MB moved", f"copy GB/s, 1 / {THREADS} threads",
            "tilec ms", "tilec GB/s", "% of copy"] + (
            [f"tilec --arch {BASELINE} ms (% of copy)"] if baseline else []) + titles
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case in cases:
        for mode, times in case.times.items():
            tilec_s, copies = times["tilec"], (times["copy"], times["copy_all"])
            row = [case.op, case.dtype, mode, f"{case.nbytes / 1e6:.1f}",
                   " / ".join(f"{case.nbytes / c / 1e9:.1f}" for c in copies),
                   f"{tilec_s * 1e3:.3g}", f"{case.nbytes / tilec_s / 1e9:.1f}",
                   _percent(case.nbytes / bandwidth / tilec_s)]
            if baseline:
                baseline_s = times.get(BASELINE_RUN)
                row.append("" if baseline_s is None else f"{baseline_s * 1e3:.3g} "
                           f"({_percent(case.nbytes / bandwidth / baseline_s)})")
            for peer, with_thp in peer_columns:
                if not with_thp:
                    row.append(_cell(times.get(peer), beside(times, peer)))
                elif mode != "fresh":
                    row.append("")
                else:
                    child = thp[f"{case.op}/{case.dtype}"]["fresh"]
                    row.append(_cell(child.get(peer), beside(child, peer)))
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def beside(times: dict[str, float], peer: str) -> float:
    """tilec's time in the rounds of ``peer``'s group in one mode (among the copies where
    that group did not run)."""
    return times.get(BESIDE + PEER_GROUPS[peer], times["tilec"])


Verdict = Optional[tuple[str, bool]]     # (the figure, whether it meets its target)


def numpy_target(case: Case, thp: dict[str, Times]) -> Verdict:
    """tilec >= 2x NumPy in float32, in both modes (float16 figures are shown, not judged)."""
    ratios = [t["numpy"] / beside(t, "numpy") for t in case.times.values() if "numpy" in t]
    if not ratios:
        return None
    return " / ".join(f"{r:.2f}" for r in ratios), case.dtype != "float32" or min(ratios) >= 2


def compile_target(case: Case, thp: dict[str, Times]) -> Verdict:
    """tilec's best time at least as good as torch.compile's best (any mode), within each
    process (this one; the THP child): the smaller ratio of the two."""
    ratios = []
    for times in (case.times, thp.get(f"{case.op}/{case.dtype}", {})):
        figures = [t["compile"] for t in times.values() if "compile" in t]
        if figures:
            ratios.append(min(figures) / min(beside(t, "compile") for t in times.values()))
    if not ratios:
        return None
    return f"{min(ratios):.2f}", min(ratios) >= 1


# tilec's share of the copy bandwidth with out= that each op should reach (others: 70%)
COPY_SHARE = {"transpose": 0.6}


def copy_target(bandwidth: float) -> Callable[[Case, dict[str, Times]], Verdict]:
    """tilec with preallocated outputs at >= 70% of the run's copy bandwidth (COPY_SHARE)."""
    def judge(case: Case, thp: dict[str, Times]) -> Verdict:
        if "out=" not in case.times:
            return None
        share = case.nbytes / bandwidth / case.times["out="]["tilec"]
        return _percent(share), share >= COPY_SHARE.get(case.op, 0.7)
    return judge


def targets(cases: Sequence[Case], thp: dict[str, Times], peers: Sequence[str],
            bandwidth: float) -> str:
    """The issue's targets per case, for the peers that ran."""
    columns = [("× NumPy fresh / out= (≥ 2, float32)", numpy_target)] if "numpy" in peers else []
    if "compile" in peers:
        columns.append(("best torch.compile / best tilec (≥ 1)", compile_target))
    columns.append(("% of copy, out= (≥ 70%; transpose ≥ 60%)", copy_target(bandwidth)))
    head = ["op", "dtype"] + [title for title, _ in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    verdicts = []
    for case in cases:
        row = [case.op, case.dtype]
        for _, judge in columns:
            verdict = judge(case, thp)
            if verdict is None:
                row.append("—")
                continue
            verdicts.append(verdict)
            figure, ok = verdict
            row.append(f"{figure} {'✓' if ok else '✗'}")
        lines.append("| " + " | ".join(row) + " |")
    met = sum(ok for _, ok in verdicts)
    return "\n".join(lines) + f"\n\nTargets met: {met} of {len(verdicts)}."


def environment(settings: Settings, peers: Sequence[str], load: tuple[float, float]) -> str:
    """What the figures depend on: machine (and its load average over one minute before and
    after the run), libraries, threads, huge pages, sizes."""
    model = next((line.split(":", 1)[1].strip()
                  for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.machine())
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    code = tilec.compile_string("func f(x: Tensor<f32>[n]) -> Tensor<f32>[n] { return x; }",
                                "probe.tile", arch=settings.arch).cpu_code
    lines = [f"- machine: {model}, {os.cpu_count()} CPUs; transparent huge pages: "
             f"{thp.read_text().strip() if thp.exists() else 'unknown'}; load average "
             f"{load[0]:.1f} before, {load[1]:.1f} after",
             f"- tilec {tilec.__version__} ({_revision()}, --arch {settings.arch}, running "
             f"{code} code here), threads: "
             f"{os.environ.get('TILEC_NUM_THREADS', os.cpu_count())}",
             f"- NumPy {np.__version__} (one thread per ufunc); {_blas()}; "
             + ", ".join(f"{k}={os.environ.get(k, 'unset')}" for k in OPENBLAS_ENV)]
    if "torch" in peers:
        import torch
        lines.append(f"- PyTorch {torch.__version__}, {torch.get_num_threads()} threads, "
                     f"kernels {torch.backends.cpu.get_cpu_capability()}; torch.compile: "
                     "inductor, default options, dynamic=False")
    size = settings.size
    lines.append(f"- size: tokens {size.tokens} x hidden {size.hidden} (rope: {size.heads} "
                 f"heads of {HEAD_DIM}; swiglu reads 2*hidden); median of {settings.repeat} "
                 f"rounds, in {settings.passes} passes over every case, each pass's rounds "
                 f"after {settings.warmup} warm-up calls (the THP child: one pass)")
    return "\n".join(lines)


def _revision() -> str:
    """The commit of the checkout tilec is imported from (``-dirty`` with local changes)."""
    if CHECKOUT is None:
        return f"tilec {tilec.__version__}, installed"
    done = subprocess.run(["git", "-C", str(CHECKOUT), "describe", "--always", "--dirty"],
                          capture_output=True, text=True)
    return f"commit {done.stdout.strip()}" if done.returncode == 0 else "not a git checkout"


def _blas() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "BLAS kernel unknown (threadpoolctl is not installed)"
    return "; ".join(f"{i['internal_api']} {i['version']} kernel {i.get('architecture')}"
                     for i in threadpool_info() if i["user_api"] == "blas") or "no BLAS found"


def report(cases: Sequence[Case], thp: dict[str, Times], peers: Sequence[str],
           settings: Settings, load: tuple[float, float]) -> str:
    bandwidth = best_copy(cases)
    missing = sorted({f"{PEER_TITLES[p]}, {c.op} {c.dtype}: {why}"
                      for c in cases for p, why in c.missing.items()})
    date = datetime.date.today().isoformat()
    parts = [f"# tilec CPU benchmark, {date}", "", environment(settings, peers, load), "",
             "Times in ms (median); a peer's cell is `ms (tilec's speed-up over it)`. GB/s "
             "counts the bytes an ideal kernel reads and writes once; `copy` is `np.copyto` "
             "of that many bytes between preallocated buffers, on one thread and cut across "
             f"{THREADS} threads; `% of copy` is tilec's share of the run's copy bandwidth, the "
             f"best of every row's faster copy ({bandwidth / 1e9:.1f} GB/s). `fresh`: each call "
             "allocates its result; `out=`: results (and a peer's scratch) allocated once."
             + (" THP: PyTorch with THP_MEM_ALLOC_ENABLE=1, in a child process (ratio to tilec "
                "measured there)." if thp else ""), "", table(cases, thp, peers, bandwidth), ""]
    if missing:
        parts += ["Not measured:", ""] + [f"- {m}" for m in missing] + [""]
    parts += ["## Targets", ""]
    if settings.quick:
        parts += ["(--quick: these sizes time call overhead; the targets are for the full "
                  "size.)", ""]
    parts += [targets(cases, thp, peers, bandwidth)]
    return "\n".join(parts) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--ops=gemm" in argv or any(a == "--ops" and b == "gemm" for a, b in zip(argv, argv[1:])):
        from . import gemm   # the GEMM's own benchmark (its figures are GFLOP/s, not GB/s)
        return gemm.main([a for a in argv if a not in ("--ops", "gemm", "--ops=gemm")])
    if "--ops=attention" in argv or any(a == "--ops" and b == "attention"
                                        for a, b in zip(argv, argv[1:])):
        from . import attention   # fused attention against torch's SDPA (times, not GB/s)
        return attention.main([a for a in argv
                               if a not in ("--ops", "attention", "--ops=attention")])
    p = argparse.ArgumentParser(prog="tilec bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help=f"tokens {QUICK.tokens} x hidden {QUICK.hidden}: a smoke test")
    p.add_argument("--no-torch", action="store_true", help="leave out the PyTorch peers")
    p.add_argument("--ops", default=",".join(OPS),
                   help="comma-separated (default: all); 'gemm' alone: the matmul benchmark "
                        "(tilec/bench/gemm.py, its own options); 'attention' alone: fused "
                        "attention against torch's SDPA (tilec/bench/attention.py)")
    p.add_argument("--arch", default=Settings.arch, choices=BUILD_ARCHES,
                   help=f"tilec's --arch (default {DEFAULT_ARCH})")
    p.add_argument("--repeat", type=int, default=Settings.repeat,
                   help=f"timed rounds (default {Settings.repeat})")
    p.add_argument("--warmup", type=int, default=Settings.warmup,
                   help=f"untimed calls first, in each pass (default {Settings.warmup})")
    p.add_argument("--passes", type=int, default=Settings.passes,
                   help="times over every case, the rounds shared out among them, so that "
                        f"each case is sampled across the whole run (default {Settings.passes})")
    p.add_argument("-o", dest="output",
                   help="also write the report here (default for a full run, every op with "
                        "the torch peers and not --quick: bench/results/cpu-DATE.md of the "
                        "source checkout, or cpu-DATE.md here for an installed tilec)")
    p.add_argument("--thp-child", metavar="JSON", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    ops = [op for op in args.ops.split(",") if op]
    unknown = sorted(set(ops) - set(OPS))
    if unknown:
        p.error(f"unknown op '{unknown[0]}'; ops: {', '.join(OPS)}")
    if min(args.repeat, args.passes) < 1 or args.passes > args.repeat:
        p.error("--passes must be between 1 and --repeat")
    settings = Settings(args.quick, args.arch, args.repeat, args.warmup, args.passes)
    if args.thp_child:
        plan = {"fresh": ("torch", "compile"), "out=": ()}
        cases = [measure(op, dtype, settings, plan, settings.repeat, baseline=False)
                 for op in ops for dtype in DTYPES]
        Path(args.thp_child).write_text(json.dumps({f"{c.op}/{c.dtype}": c.times
                                                    for c in cases}))
        return 0
    peers = ("numpy",) if args.no_torch else PEERS
    load_before = os.getloadavg()[0]
    cases: dict[tuple[str, str], Case] = {}
    for number in range(settings.passes):
        for op in ops:
            for dtype in DTYPES:
                print(f"bench: pass {number + 1}/{settings.passes}: {op} {dtype}",
                      file=sys.stderr, flush=True)
                cases[op, dtype] = measure(op, dtype, settings,
                                           {mode: peers for mode in MODES},
                                           settings.rounds(number), case=cases.get((op, dtype)),
                                           pass_number=number)
    thp = {} if args.no_torch else thp_times(ops, settings)
    text = report(list(cases.values()), thp, peers, settings,
                  (load_before, os.getloadavg()[0]))
    sys.stdout.write(text)
    full = not args.quick and not args.no_torch and set(ops) == set(OPS)
    output = args.output or ((CHECKOUT / "bench" / "results" if CHECKOUT else Path.cwd()) /
                             f"cpu-{datetime.date.today().isoformat()}.md" if full else None)
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(text)
    return 0


if __name__ == "__main__":
    from tilec.cli import _guarded
    sys.exit(_guarded(main))
