"""examples/torch/llama.py on a tiny configuration (2 layers, hidden 64): its RMSNorms, MLPs
(SwiGLU), rotary embeddings and attentions served by tilec kernels give the unmodified
model's logits, eager and under torch.compile(fullgraph=True, dynamic=True) (backend "eager"
here, to keep the suite short: Dynamo still has to capture the whole model in one graph;
the example itself compiles with inductor)."""
from __future__ import annotations

import importlib.util
import sys

from conftest import REPO


def _example():
    spec = importlib.util.spec_from_file_location("llama_example",
                                                  REPO / "examples" / "torch" / "llama.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # for its dataclass
    spec.loader.exec_module(module)
    return module


def test_tiny_llama_matches_the_unmodified_model() -> None:
    replaced, rows, torch_bf16 = _example().compare(hidden=64, layers=2, seq=16, batch=2,
                                                    backend="eager")
    lines = replaced.splitlines()
    assert "model.layers.1.self_attn: LlamaAttention -> TilecAttention" in lines
    assert "model.layers.0.mlp: LlamaMLP -> TilecMLP" in lines
    assert lines[-3:] == ["2 x LlamaAttention -> TilecAttention", "2 x LlamaMLP -> TilecMLP",
                          "5 x LlamaRMSNorm -> TilecRMSNorm"]
    assert [(r.dtype, r.mode) for r in rows] == [("float32", "eager"), ("float32", "compiled"),
                                                 ("bfloat16", "eager"), ("bfloat16", "compiled")]
    for row in rows:
        if row.dtype == "float32":
            assert row.max_diff / row.max_logit < 1e-4, row
            assert row.agreement == 1.0, row
        else:
            assert row.vs_float32 >= torch_bf16, row
