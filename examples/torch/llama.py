"""A small Llama from Hugging Face transformers with tilec kernels in it, checked end to end.

The model is built from a configuration with random weights (nothing is downloaded).  Its
RMSNorms, its SwiGLU MLP (gate and up projections fused into one matmul), its rotary
embedding and its attention are replaced by modules calling ``ops/rmsnorm.tile`` and
``ops/llama.tile`` through ``tilec.torch``; the matmuls stay PyTorch's.  Printed: what was
replaced, then for float32 and bfloat16, eager and under ``torch.compile``, the logits'
largest difference from the unmodified model and the argmax agreement, and for bfloat16 the
agreement of PyTorch's own bfloat16 model with its float32 one.

    python examples/torch/llama.py [--hidden 128] [--layers 2] [--seq 32] [--backend inductor]
"""
from __future__ import annotations

import argparse
import copy
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP, LlamaRMSNorm

import tilec
import tilec.torch

OPS = Path(__file__).resolve().parents[2] / "ops"
SUFFIX = {torch.float32: "f32", torch.bfloat16: "bf16"}


def register_ops() -> None:
    """Make the kernels ``torch.ops.tilec.*`` (compiled once, then from tilec's cache)."""
    for name in ("rmsnorm.tile", "llama.tile"):
        tilec.torch.register(tilec.compile(str(OPS / name)))


def _op(name: str, dtype: torch.dtype):
    return getattr(torch.ops.tilec, f"{name}_{SUFFIX[dtype]}")


class TilecRMSNorm(nn.Module):
    def __init__(self, old: LlamaRMSNorm) -> None:
        super().__init__()
        self.weight = old.weight
        self.eps = old.variance_epsilon

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        return _op("rmsnorm", x.dtype)(rows, self.weight, self.eps).view(x.shape)


class TilecMLP(nn.Module):
    """down(silu(gate(x)) * up(x)) with up and gate as one matmul, then tilec's SwiGLU."""

    def __init__(self, old: LlamaMLP) -> None:
        super().__init__()
        weight = torch.cat([old.up_proj.weight, old.gate_proj.weight]).detach()
        self.up_gate = nn.Linear(weight.shape[1], weight.shape[0], bias=False,
                                 dtype=weight.dtype)
        self.up_gate.weight = nn.Parameter(weight)
        self.down_proj = old.down_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(_op("swiglu", x.dtype)(self.up_gate(x)))


class TilecAttention(nn.Module):
    """Llama attention: PyTorch's projections, tilec's rotary embedding and attention."""

    def __init__(self, old: LlamaAttention) -> None:
        super().__init__()
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(self, name, getattr(old, name))
        self.head_dim, self.scaling = old.head_dim, old.scaling
        self.groups, self.layer_idx = old.num_key_value_groups, old.layer_idx

    def forward(self, hidden_states: torch.Tensor, position_embeddings: tuple,
                attention_mask: torch.Tensor | None = None, past_key_values=None,
                **kwargs) -> tuple[torch.Tensor, None]:
        b, s, _ = hidden_states.shape
        dtype, d = hidden_states.dtype, self.head_dim
        cos, sin = (t.expand(b, s, d).reshape(b * s, d) for t in position_embeddings)
        rope = _op("rope", dtype)
        q = rope(self.q_proj(hidden_states).view(b * s, -1, d), cos, sin)
        k = rope(self.k_proj(hidden_states).view(b * s, -1, d), cos, sin)
        q, k = (t.view(b, s, -1, d).transpose(1, 2) for t in (q, k))   # views, as in HF
        v = self.v_proj(hidden_states).view(b, s, -1, d).transpose(1, 2)
        if past_key_values is not None:
            k, v = past_key_values.update(k, v, self.layer_idx)
        k, v = (t.repeat_interleave(self.groups, dim=1) for t in (k, v))
        mask = additive_mask(attention_mask, b, s, k.shape[2], hidden_states.device)
        out = _op("attention", dtype)(q, k, v, mask, self.scaling)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1)), None


def additive_mask(mask: torch.Tensor | None, b: int, s: int, t: int,
                  device: torch.device) -> torch.Tensor:
    """Hugging Face's mask (additive, boolean or None for causal) as float32 [b, 1, s, t]."""
    low = torch.finfo(torch.float32).min
    if mask is None:
        mask = torch.full((s, t), low, device=device).triu(t - s + 1)
    elif mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, device=device).masked_fill(~mask, low)
    return mask.float().expand(b, 1, s, t).contiguous()


FACTORIES = {LlamaRMSNorm: TilecRMSNorm, LlamaMLP: TilecMLP, LlamaAttention: TilecAttention}


def tiny_llama(hidden: int, layers: int, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=512, hidden_size=hidden, intermediate_size=2 * hidden + 32,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, attn_implementation="eager")
    return LlamaForCausalLM(config).eval()


@dataclass
class Row:
    dtype: str
    mode: str
    max_diff: float          # max |tilec logits - unmodified logits|, same dtype
    max_logit: float
    agreement: float         # argmax agreement with the unmodified model, same dtype
    vs_float32: float        # argmax agreement with the unmodified float32 model

    def __str__(self) -> str:
        return (f"{self.dtype:9} {self.mode:8} max|diff| {self.max_diff:.3g} "
                f"(/ max|logit| {self.max_diff / self.max_logit:.3g})  argmax agreement "
                f"{self.agreement:.1%}, with float32 PyTorch {self.vs_float32:.1%}")


def _agreement(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.argmax(-1) == b.argmax(-1)).float().mean().item()


def compare(hidden: int = 128, layers: int = 2, seq: int = 32, batch: int = 2,
            backend: str = "inductor") -> tuple[str, list[Row], float]:
    """(what was replaced, a row per dtype and mode, PyTorch's own bfloat16-vs-float32
    argmax agreement)."""
    register_ops()
    reference = tiny_llama(hidden, layers)
    tokens = torch.randint(0, reference.config.vocab_size, (batch, seq))
    rows: list[Row] = []
    with torch.no_grad():
        want32 = reference(tokens).logits.float()
        torch_bf16 = _agreement(copy.deepcopy(reference).to(torch.bfloat16)(tokens).logits, want32)
        for dtype in (torch.float32, torch.bfloat16):
            plain = copy.deepcopy(reference).to(dtype)
            want = plain(tokens).logits.float()
            model = copy.deepcopy(plain)
            replaced = tilec.torch.replace(model, FACTORIES)
            compiled = torch.compile(model, backend=backend, dynamic=True, fullgraph=True)
            for mode, run in (("eager", model), ("compiled", compiled)):
                got = run(tokens).logits.float()
                rows.append(Row(str(dtype).removeprefix("torch."), mode,
                                (got - want).abs().max().item(), want.abs().max().item(),
                                _agreement(got, want), _agreement(got, want32)))
    return str(replaced), rows, torch_bf16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--backend", default="inductor", help="torch.compile's backend")
    args = parser.parse_args()
    replaced, rows, torch_bf16 = compare(args.hidden, args.layers, args.seq, args.batch,
                                         args.backend)
    print(replaced)
    for row in rows:
        print(row)
    print(f"PyTorch's own bfloat16 model: argmax agreement with float32 {torch_bf16:.1%}")


if __name__ == "__main__":
    main()
