"""Triton kernels for the GPU check's benchmarks (``bench/gpu_check.py run``): swiglu, rmsnorm,
layernorm, softmax and rope, one program per row, and a GEMM with a fused bias and GELU (the
structure of Triton's matmul tutorial: a program per output block, blocks grouped along M so
that neighbours share B's columns in L2, ``tl.dot`` over K blocks; written for this check),
each writing into a preallocated ``out`` like the tilec calls they are measured against."""
import torch
import triton
import triton.language as tl


@triton.jit
def _swiglu(inp, out, hidden, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(inp + row * 2 * hidden + cols, mask=mask).to(tl.float32)
    g = tl.load(inp + row * 2 * hidden + hidden + cols, mask=mask).to(tl.float32)
    tl.store(out + row * hidden + cols, (x * g * tl.sigmoid(g)).to(out.dtype.element_ty),
             mask=mask)


@triton.jit
def _rmsnorm(x_ptr, w_ptr, out, hidden, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * hidden + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.rsqrt(tl.sum(x * x, axis=0) / hidden + eps)
    tl.store(out + row * hidden + cols, (x * r * w).to(out.dtype.element_ty), mask=mask)


@triton.jit
def _layernorm(x_ptr, out, n, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n
    d = tl.where(mask, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / n
    tl.store(out + row * n + cols, (d * tl.rsqrt(var + eps)).to(out.dtype.element_ty),
             mask=mask)


@triton.jit
def _softmax(x_ptr, out, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out + row * n + cols, (e / tl.sum(e, axis=0)).to(out.dtype.element_ty), mask=mask)


@triton.jit
def _rope(q_ptr, f_ptr, out, heads, half, BLOCK: tl.constexpr):
    token = tl.program_id(0)
    head = tl.program_id(1)
    cols = tl.arange(0, BLOCK)
    mask = cols < half
    base = (token * heads + head) * 2 * half
    q1 = tl.load(q_ptr + base + cols, mask=mask).to(tl.float32)
    q2 = tl.load(q_ptr + base + half + cols, mask=mask).to(tl.float32)
    c = tl.load(f_ptr + token * 2 * half + cols, mask=mask).to(tl.float16).to(tl.float32)
    s = tl.load(f_ptr + token * 2 * half + half + cols, mask=mask).to(tl.float16).to(tl.float32)
    tl.store(out + base + cols, (q1 * c - q2 * s).to(out.dtype.element_ty), mask=mask)
    tl.store(out + base + half + cols, (q2 * c + q1 * s).to(out.dtype.element_ty), mask=mask)


def swiglu(inp: torch.Tensor, out: torch.Tensor) -> None:
    hidden = out.shape[-1]
    _swiglu[(out.numel() // hidden,)](inp, out, hidden, BLOCK=triton.next_power_of_2(hidden))


def rmsnorm(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
    hidden = x.shape[-1]
    _rmsnorm[(x.shape[0],)](x, w, out, hidden, 1e-6, BLOCK=triton.next_power_of_2(hidden))


def layernorm(x: torch.Tensor, out: torch.Tensor) -> None:
    n = x.shape[-1]
    _layernorm[(x.numel() // n,)](x, out, n, 1e-5, BLOCK=triton.next_power_of_2(n))


def softmax(x: torch.Tensor, out: torch.Tensor) -> None:
    n = x.shape[-1]
    _softmax[(x.numel() // n,)](x, out, n, BLOCK=triton.next_power_of_2(n))


def rope(q: torch.Tensor, freqs: torch.Tensor, out: torch.Tensor) -> None:
    tokens, heads, width = q.shape
    half = width // 2
    _rope[(tokens, heads)](q, freqs, out, heads, half, BLOCK=triton.next_power_of_2(half))


_GEMM_CONFIGS = [
    triton.Config({"BM": 128, "BN": 256, "BK": 64, "GROUP": 8}, num_warps=8, num_stages=3),
    triton.Config({"BM": 128, "BN": 128, "BK": 64, "GROUP": 8}, num_warps=4, num_stages=4),
    triton.Config({"BM": 256, "BN": 128, "BK": 64, "GROUP": 8}, num_warps=8, num_stages=3),
]


@triton.autotune(configs=_GEMM_CONFIGS, key=["m", "n", "k"])
@triton.jit
def _matmul_bias_gelu(x_ptr, w_ptr, b_ptr, out, m, n, k, BM: tl.constexpr, BN: tl.constexpr,
                      BK: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0)
    blocks_m, blocks_n = tl.cdiv(m, BM), tl.cdiv(n, BN)
    band = pid // (GROUP * blocks_n)                 # GROUP block rows walked column by column
    first = band * GROUP
    height = tl.minimum(blocks_m - first, GROUP)
    inside = pid % (GROUP * blocks_n)
    bm, bn = first + inside % height, inside // height
    rows = bm * BM + tl.arange(0, BM)
    cols = bn * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, k, BK):
        a = tl.load(x_ptr + rows[:, None] * k + (k0 + ks)[None, :],
                    mask=(rows[:, None] < m) & ((k0 + ks)[None, :] < k), other=0.0)
        b = tl.load(w_ptr + (k0 + ks)[:, None] * n + cols[None, :],
                    mask=((k0 + ks)[:, None] < k) & (cols[None, :] < n), other=0.0)
        acc = tl.dot(a, b, acc)
    acc += tl.load(b_ptr + cols, mask=cols < n, other=0.0).to(tl.float32)[None, :]
    acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
    tl.store(out + rows[:, None] * n + cols[None, :], acc.to(out.dtype.element_ty),
             mask=(rows[:, None] < m) & (cols[None, :] < n))


def matmul_bias_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor,
                     out: torch.Tensor) -> None:
    """out = gelu(x @ w + b) for contiguous x [m, k], w [k, n], b [n]."""
    m, k = x.shape
    n = w.shape[1]

    def grid(meta):
        return (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)
    _matmul_bias_gelu[grid](x, w, b, out, m, n, k)
