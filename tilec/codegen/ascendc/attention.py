"""Fused attention on Atlas A2 (910B): both products on the Cube, the online softmax on the
vector cores, one mixed kernel (``KERNEL_TYPE_MIX_AIC_1_2``).

In: a kernel that tile-kernel gave the ``attention`` schedule (:mod:`tilec.tiling.attention`:
q, k and v of one type, half or bfloat16, on this target), and its scores function
``NAME__scores`` (the element-wise chain between ``q @ transpose(k)`` and the softmax).
Out: :class:`AttentionPlan` (None for any other kernel) and, from :func:`generate`, the
kernel's source: the AIC's class (``templates/attention_cube.asc.j2``) and the AIV's methods
(``templates/attention_aiv.asc.j2``) inside the usual vector class.

A task is up to ``BM`` query rows of one batch index (the vector cores of a block take half
each); tasks are dealt to the blocks in turn.  For each key block of ``BN`` keys that is not
wholly above the causal diagonal, the AIC computes ``S = Q K^T`` (GM -> L1 with ND2NZ ->
L0A/L0B by ``LoadData`` -> ``Mmad`` into L0C in float -> ``Fixpipe`` to the block's S slot),
sets flag 0; each AIV waits, runs the chain on its rows of S (the row lowering of the scores
function, sliced to the block's columns) into its X rows, folds X into each row's running max
and sum, writes ``P = exp(X - m)`` in the operand type to the P slot, sets flag 1; the AIC
waits (both AIVs), computes ``O = P V`` into the O slot, sets flag 2; the AIVs rescale their
accumulator rows by ``exp(m_old - m_new)`` and add O.  Two slots of each (the block's parity),
so the AIC computes block j + 1's scores while the AIVs work on block j.  Grouped-query
attention indexes the key/value head (a batch axis of extent 1 in k or v has stride 0).

Figures (docs/ascendc.md, CANN "Storage Units" for dav-2201): L0A holds 2 x BM x TK halves
(16 KiB of 64), L0B 2 x TK x TN (32 KiB of 64), L0C BM x TN floats (32 KiB of 128), L1
2 x (8 + 16) KiB of 512; the AIV's UB takes ``UB_BYTES`` for the accumulator (BM / 2 rows of
``DV_MAX`` floats) and a block's rows, the chain lowering the rest of the 184 KiB budget.
ND2NZ's srcDValue is a uint16 (DataCopy ND2NZ page): d and dv at most 65535; the accumulator
holds dv <= ``DV_MAX``: beyond, the launch fails naming the limit.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from ...dialect import KERNEL_ATTR
from ...dialect.types import tensor_info
from ...dims import Dim, parse_dim
from ...mlir import ir
from ...tiling.attention import AttentionTile
from ...tiling.tiler import ATTENTION
from ..common.layout import shape_of
from ..common.values import ONE, ZERO, View, numel, row_major, slice_part
from . import cxx
from .lazy import Base, Gm
from .plan import reduce_work_floats
from .source import TEMPLATES
from .vector import C_TYPE

BM, BN, DV_MAX = 64, 128, 256
"""Query rows per task, keys per block, the value columns the accumulator holds."""
ND2NZ_MAX = 65535
SLOT_BYTES = 2 * BM * BN * 4 + 2 * BM * BN * 2 + 2 * BM * DV_MAX * 4 + BM * BN * 4
"""GM per block: two S slots, two P slots, two O slots, the AIVs' X rows (ATT_BLOCK_BYTES)."""
WORK = reduce_work_floats(BN)
UB_BYTES = (BM // 2 * DV_MAX + 2 * BN + DV_MAX + 16 + WORK) * 4 + BN * 2 + DV_MAX * 2
J0, WIDTH = "attj0", "attbn"
"""Symbols standing for the block's first key and its width in the chain's lowering (the C++
variables ``j0`` and ``bn`` of the AIV's Scores)."""


@dataclass(frozen=True)
class AttentionPlan:
    """How an attention kernel runs on the Cube and the vector cores (module docstring)."""

    tile: AttentionTile
    scores: Any            # the scores function (func.func)
    dtype: str             # q, k and v
    out_dtype: str
    s: Dim
    t: Dim
    d: Dim
    dv: Dim
    batch: tuple[Dim, ...]                   # the output's batch extents
    k_strides: tuple[Dim, ...]               # per batch axis (0 where k broadcasts)
    v_strides: tuple[Dim, ...]

    @property
    def guard(self) -> str:
        return f"({cxx.dim(self.dv)}) > {DV_MAX} || ({cxx.dim(self.d)}) > {ND2NZ_MAX}"


def plan(fn: Any, kernel: Any) -> Optional[AttentionPlan]:
    """The plan of kernel ``fn`` (its ``tile.kernel`` attribute ``kernel``), or None."""
    if ir.StringAttr(kernel["schedule"]).value != ATTENTION or "attention" not in kernel:
        return None
    tile = AttentionTile.of(kernel["attention"])
    inputs = [tensor_info(t) for t in fn.type.inputs]
    out = tensor_info(fn.type.results[0])
    q, k, v = inputs[tile.q], inputs[tile.k], inputs[tile.v]
    if len({q.dtype, k.dtype, v.dtype}) != 1 or q.dtype not in C_TYPE or q.dtype == "float32":
        return None
    scores = _function(fn, tile.scores)
    return AttentionPlan(tile, scores, q.dtype, out.dtype, q.shape[-2], k.shape[-2],
                         q.shape[-1], v.shape[-1], tuple(out.shape[:-2]),
                         _strides(shape_of(k)), _strides(shape_of(v)))


def _function(fn: Any, name: str) -> Any:
    for op in fn.operation.parent.regions[0].blocks[0].operations:
        if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == name:
            return op
    raise KeyError(name)


def _strides(shape: tuple[Dim, ...]) -> tuple[Dim, ...]:
    """Row-major strides of the batch axes, 0 on an axis of extent 1."""
    strides = row_major(shape)[:-2]
    return tuple(ZERO if d == ONE else st for d, st in zip(shape[:-2], strides))


def is_scores(fn: Any) -> bool:
    """Whether kernel ``fn`` is the scores function of an attention kernel (its chain is
    lowered inside that kernel, never launched)."""
    return "scores_of" in ir.DictAttr(fn.attributes[KERNEL_ATTR])


def generate(kernel: Any) -> Any:
    """The :class:`~.kernel.KernelSource` of attention kernel ``kernel`` (an AscendKernel)."""
    from .kernel import AscendKernel, KernelSource

    p = kernel.attention
    chain = AscendKernel(p.scores, kernel.budget - UB_BYTES, kernel.sink)
    chain.cube = None
    chain.name, chain.entry, chain.symbols = kernel.name, kernel.entry, kernel.symbols
    lowering = _chain_lowering()(chain, False, False, frozenset())
    lowering.run()
    lowering.plan.choose_chunk(chain.budget, kernel.span)
    out = Gm("gmOut0", p.out_dtype)
    lowering.globals = [g for g in lowering.globals if not g[1].startswith("out")] + [
        (out, "out0", cxx.dim(numel(shape_of(kernel.outputs[0]))))]
    text = lowering.render(attention=_context(kernel, p, lowering))
    text = text.replace(f"t.{cxx.symbol_field(J0)}", "j0").replace(
        f"t.{cxx.symbol_field(WIDTH)}", "bn")
    buffers = tuple((pointer, f"{elements} * sizeof({C_TYPE[gm.dtype]})")
                    for gm, pointer, elements in lowering.globals)
    return KernelSource(kernel.name, kernel.entry, text, f"{kernel.entry}_tiling",
                        tuple(kernel.symbols), False, tuple(kernel.grid),
                        lowering.workspace * 4, buffers, lowering.plan.chunk,
                        f"CORES / 2 * {SLOT_BYTES}", p.guard,
                        f"value rows longer than {DV_MAX} or d beyond {ND2NZ_MAX} elements "
                        "(the fused attention's accumulator, one ND2NZ copy)")


def _context(kernel: Any, p: AttentionPlan, lowering: Any) -> dict[str, Any]:
    """What kernel.asc.j2 renders of the attention."""
    entry, tiling = kernel.entry, f"{kernel.entry}_tiling"
    causal = p.tile.causal
    common = {"entry": entry, "tiling": tiling, "ctype": C_TYPE[p.dtype],
              "s": cxx.dim(p.s), "t": cxx.dim(p.t), "d": cxx.dim(p.d), "dv": cxx.dim(p.dv),
              "batches": cxx.dim(numel(p.batch)), "bm": BM, "bn": BN, "dv_max": DV_MAX}
    inputs = kernel.inputs
    cube = TEMPLATES.get_template("attention_cube.asc.j2").render(
        **common, causal=causal,
        diagonal=cxx.dim(parse_dim(p.tile.diagonal)) if causal else "0",
        axes=[{"extent": cxx.dim(e), "k": cxx.dim(ks), "v": cxx.dim(vs)}
              for e, ks, vs in zip(p.batch, p.k_strides, p.v_strides)],
        **{f"{n}_elements": cxx.dim(numel(shape_of(inputs[i])))
           for n, i in (("q", p.tile.q), ("k", p.tile.k), ("v", p.tile.v))})
    methods = TEMPLATES.get_template("attention_aiv.asc.j2").render(
        **common, out_ctype=C_TYPE[p.out_dtype], work=WORK,
        prologue=lowering.prologue.lines, coordinates=lowering.coordinate_lines(),
        chain=lowering.body.lines)
    return {"text": cube.rstrip() + "\n", "methods": methods.rstrip(),
            "aic_args": [f"in{p.tile.q}", f"in{p.tile.k}", f"in{p.tile.v}"]}


def _chain_lowering() -> type:
    """The row lowering of a scores function whose matmul is the AIC's block of S (row
    ``sBase``) and whose store writes the chain's result, sliced to the block's keys, to the
    AIV's X rows."""
    from .kernel import _Lowering

    class ChainLowering(_Lowering):
        def op_matmul(self, op: Any) -> View:
            info = self.result_info(op)
            return View(Gm("gmS", "float32"), "float32", Base((("sBase", ONE, None),)), ZERO,
                        tuple(shape_of(info)), (ONE,), info.dtype)

        def op_store_row(self, op: Any) -> None:
            x = self.lazy(op.operands[0])
            width = Dim.sym(WIDTH)
            block = slice_part(x, len(x.sizes) - 1, Dim.sym(J0), width)
            dest = View(Gm("gmX", "float32"), "float32", Base((("xRow", Dim.const(BN), None),)),
                        ZERO, (width,), (ONE,), "float32")
            self.write(replace(block, dtype="float32") if block.dtype != "float32" else block,
                       dest)

    return ChainLowering
