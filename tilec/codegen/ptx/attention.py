"""The ``attention`` schedule on the tensor cores: FlashAttention-2 for float16/bfloat16.

In: a kernel function with the ``attention`` schedule (tile-attention's fused group, rows
form: ``S = q_row @ transpose(k)``, an element-wise chain, a softmax, a cast, ``@ v``, casts,
the store; :mod:`tilec.tiling.attention`) whose q, k, v and P are all float16 or all
bfloat16 and whose head dimension is a constant multiple of 16 up to 128 (tile-attention
fuses no other for ptx: the target's ``attention_head_max``; the output accumulators of a
larger head would spill).  Out: the
``gpu.func`` of :class:`AttentionLowering`, with the ABI of every ptx kernel plus one
buffer after the results, the workspace (not for a rank-generic kernel), launched with 256
threads, one block per multiprocessor (``.minnctapersm 1``).

How it runs.  The query rows of one key/value head are one sequence of rows: those of its
query heads one after the other (the trailing batch axes over which k and v are broadcast,
then s), so that a grouped-query block reads each K/V block once for all its heads and a
decode's heads fill one block.  A tile is ``BLOCK_M`` such rows (row blocks fastest, then
the remaining batch); the grid's work is ``tiles x splits`` units (tile, split), block ``b``
taking units ``b, b + gridDim.x, ...``, each walking split ``split`` of its tile's key blocks
(:func:`split_range`).  Its 8 warps own 16 rows each.  Q's block is copied
to shared memory once and held in registers as mma A fragments; the key/value blocks of
``BLOCK_N`` keys go through two shared-memory stages by ``cp.async`` (block ``j + 1`` copied
while block ``j`` is computed).  Per block, each warp computes its 16 x 64 scores on
``mma.sync`` m16n8k16 (K read by ``ldmatrix``, stored as ``[key, d]``), applies the
kernel's element-wise chain to each score at its (query row, key) (:data:`.fragments.MMA_C`
gives both; keys past ``t`` are ``-inf``), updates the float32 running maximum and sum of
its two rows per lane (shuffles among the lane's group of four), rescales its output
accumulators, converts ``exp(S - max)`` to the operand type in registers (the C fragments of
two score tiles are the A fragment of ``P @ V``: :func:`.fragments.accumulator_as_operand`)
and adds ``P @ V`` (V by ``ldmatrix.trans``).  Key blocks wholly above the causal diagonal
are never visited (a causal tile's splits divide only the blocks its rows can see).  With one
split, the end divides by the sum (a row whose every score is ``-inf`` gives 0 / 0, NaN, as
``softmax`` does) and runs the kernel's tail (casts) and store per element.

Flash-decoding.  A decode has few tiles (one per key head) against a long key axis, which
would leave most multiprocessors idle; the host (``tilec_cuda_launch_split``) picks the
splits by :func:`attention_splits` on the device's multiprocessor count (enough units to give
each multiprocessor one, each split at least :data:`MIN_SPLIT_BLOCKS` key blocks; prefill
keeps one) and passes ``tiles x splits`` as the grid's rows, from which the kernel takes the
count.  With more than one, a unit writes to the workspace, float32, its unnormalised output
block ``[BLOCK_M, d]`` (relative to its running maxima) and each row's maximum and sum
(``unit_bytes`` of :class:`.kernel.SplitLaunch` per unit; after all units, an int32 counter
per tile that the host zeroes).  Then a fence, a barrier and thread 0's atomic add on its
tile's counter: the block that counts the last split (a fence again) combines the tile's
splits, per element, in split order (a running maximum, the sums and outputs rescaled to
it: deterministic whichever block comes last; a row that sees no key is 0 / 0, NaN, as
unsplit), divides, and runs the tail and store.  The combine is the last block's and not a
second launch: a decode takes microseconds, of which a second launch would be a good part,
and the kernel's tail (casts, the store) stays in one kernel.  Rows past ``rows`` are
neither written nor combined.

The key and value heads of a grouped-query kernel are read where they lie: a batch axis of
extent 1 in k or v has stride 0.
"""
from __future__ import annotations

import math
from typing import Any, Optional

from ...dialect.types import tensor_info
from ...dims import Dim, parse_dim
from ...mlir import arith, gpu, ir, llvm, nvvm, scf
from ...mlir import math as mmath
from ...tiling.attention import AttentionTile
from ...tiling.targets import TARGETS
from ..common.layout import shape_of
from ..common.rows import grid_point
from ..common.scalar import Num, const, f32, i32, index, select, to_int
from ..common.values import Lazy, Splat
from .fragments import (MMA_A, MMA_B, MMA_C, Source, accumulator_as_operand, affine,
                        ldmatrix_origins)
from .gemm import COPY_BYTES, OPERAND_TYPES, THREADS, GemmLowering, _Operand
from .kernel import SplitLaunch, _for, _gep

BLOCK_M = 128                # query rows per block: 16 per warp
BLOCK_N = 64                 # keys per block
WARP_ROWS = 16
P_OPERAND = accumulator_as_operand(MMA_C, MMA_A)
MIN_SPLIT_BLOCKS = 4         # key blocks a split takes at least (256 keys)


def attention_splits(tiles: int, key_blocks: int, sms: int) -> int:
    """Into how many splits the grid divides the key blocks of each of its ``tiles`` (row
    blocks): 1 when the tiles alone fill the ``sms`` multiprocessors (a block of this kernel
    fills one: its registers), else enough splits that ``tiles * splits`` covers them, each
    of at least :data:`MIN_SPLIT_BLOCKS` key blocks.  ``tilec_cuda_attention_splits`` is this
    rule in the host's C."""
    if tiles <= 0 or tiles >= sms:
        return 1
    return max(1, min(-(-sms // tiles), key_blocks // MIN_SPLIT_BLOCKS))


def split_range(blocks: Any, splits: Any, split: Any) -> tuple[Any, Any]:
    """Key blocks ``[first, end)`` of split ``split`` of ``splits`` over ``blocks`` (ints or
    index values): as even as integers allow."""
    return split * blocks // splits, (split + 1) * blocks // splits


def head_dim(fn: Any, tile: AttentionTile) -> Optional[int]:
    """The constant head dimension of q, k and v, None if it is not one."""
    sizes = {tensor_info(fn.type.inputs[i]).shape[-1] for i in (tile.q, tile.k, tile.v)}
    if len(sizes) != 1:
        return None
    d = next(iter(sizes))
    return d.value if isinstance(d, Dim) else None


def supported(fn: Any, tile: Optional[AttentionTile]) -> bool:
    """Whether the attention kernel ``fn`` runs on the tensor cores here."""
    if tile is None:
        return False
    dtypes = {tensor_info(fn.type.inputs[i]).dtype for i in (tile.q, tile.k, tile.v)}
    ops = [op.operation for op in fn.regions[0].blocks[0].operations]
    second = [op for op in ops if op.name == "tile.matmul"][1]
    dtypes.add(tensor_info(second.operands[0].type).dtype)
    d = head_dim(fn, tile)
    return (len(dtypes) == 1 and dtypes <= set(OPERAND_TYPES) and d is not None
            and d % 16 == 0 and 16 <= d <= TARGETS["ptx"].attention_head_max)


class NeedsMemory(Exception):
    """The kernel's chain needs a value in shared memory (a concatenation, a layout change
    of a computed value): its copy, a sweep of the block's threads ending in a barrier,
    cannot run inside one score element's code.  The caller lowers the kernel by rows."""


class AttentionLowering(GemmLowering):
    """The FlashAttention-2 kernel of one ``attention`` kernel function (module docstring)."""

    def __init__(self, fn: Any, tile: AttentionTile) -> None:
        super(GemmLowering, self).__init__(fn)
        self.attention = tile
        self.kind = OPERAND_TYPES[self.inputs[tile.q].dtype]
        self.element, self.chunk = 2, COPY_BYTES // 2
        self.d = head_dim(fn, tile)
        self.q_block = _Operand(BLOCK_M, self.d)
        self.kv_block = _Operand(BLOCK_N, self.d)
        ops = [op.operation for op in fn.regions[0].blocks[0].operations]
        self.matmuls = [op for op in ops if op.name == "tile.matmul"]
        self.mode = "scores"
        self.workspaces = 0 if self.rank_generic else 1
        self.acc_value: Optional[Num] = None
        self.column: Optional[Num] = None
        self.captured: Optional[Num] = None

    def build(self, module_body: ir.Block) -> Any:
        """The kernel, 256 threads, one block per multiprocessor (``.minnctapersm 1``): what
        the split rule counts on, and what lets ptxas hold a 64-wide head's split path in
        registers (left to itself it aims at two blocks, 128 registers, and spills)."""
        kernel = super().build(module_body)
        func = list(module_body.operations)[-1]
        func.attributes["nvvm.minctasm"] = ir.IntegerAttr.get(i32(), 1)
        return kernel

    # -- the frame -----------------------------------------------------------------------------
    def _extents(self) -> tuple[list[Dim], list[Dim], Dim, Dim]:
        """The batch axes, the query-head axes that share a key head, s and t."""
        q_shape = shape_of(self.inputs[self.attention.q])
        k_shape = shape_of(self.inputs[self.attention.k])
        batch_shape = shape_of(self.outputs[0])[:-2]
        heads = shared_heads(batch_shape, k_shape[:-2],
                             shape_of(self.inputs[self.attention.v])[:-2])
        cut = len(batch_shape) - heads
        return list(batch_shape[:cut]), list(batch_shape[cut:]), q_shape[-2], k_shape[-2]

    def split_launch(self) -> Optional[SplitLaunch]:
        """The host's view of the split (module docstring): none for a rank-generic kernel,
        which keeps a block per tile."""
        if not self.workspaces:
            return None
        batch, heads, s, t = self._extents()
        count, group = Dim.const(1), s
        for e in batch:
            count = count * e
        for e in heads:
            group = group * e
        return SplitLaunch(count, group, t, BLOCK_M, BLOCK_N, 4 * BLOCK_M * (self.d + 2))

    def _row_loop(self, first: Num, last: Num) -> None:
        """Instead of rows: the (tile, split) units, tiles being (batch, query block), strided
        over the blocks; the host passes ``tiles * splits`` as the grid's rows."""
        batch_dims, head_dims, s, t = self._extents()
        self.s, self.t = self.dim(s), self.dim(t)
        self.batch_extents = [self.dim(d) for d in batch_dims]
        self.head_extents = [self.dim(d) for d in head_dims]
        batch, self.rows = const(index(), 1), self.s
        for e in self.batch_extents:
            batch = batch * e
        for e in self.head_extents:
            self.rows = self.rows * e
        self.q_tiles = (self.rows + (BLOCK_M - 1)) // BLOCK_M
        self.tiles = batch * self.q_tiles
        self.splits = const(index(), 1)
        if self.workspaces:
            whole = self.grid_rows // select(self.tiles.gt(0), self.tiles, const(index(), 1))
            self.splits = select(whole.gt(1), whole, const(index(), 1))
        self.diagonal = self.dim(parse_dim(self.attention.diagonal))
        self._frame()
        loop = scf.ForOp(Num(gpu.block_id(gpu.Dimension.x)).value,
                         (self.tiles * self.splits).value,
                         Num(gpu.grid_dim(gpu.Dimension.x)).value)
        self.entry = ir.InsertionPoint(loop.operation)
        with ir.InsertionPoint(loop.body):
            self._tile(Num(loop.induction_variable))
            scf.YieldOp([])

    def _frame(self) -> None:
        warp = self.tid // 32
        self.lane = self.tid % 32
        self.warp_row = warp * WARP_ROWS
        self.q_shared = self._buffer("attention_q", self.q_block.stage_bytes)
        self.k_shared = self._buffer("attention_k", 2 * self.kv_block.stage_bytes)
        self.v_shared = self._buffer("attention_v", 2 * self.kv_block.stage_bytes)
        a = self.attention
        self.aligned = self._aligned_rows(self.arg_buffers[a.q], const(index(), self.d)) \
            & self._aligned_rows(self.arg_buffers[a.k], const(index(), self.d)) \
            & self._aligned_rows(self.arg_buffers[a.v], const(index(), self.d))

    def _kv_base(self, number: int) -> Num:
        """The element offset of this tile's key (or value) head: the batch coordinates,
        those of the operand's axes of extent 1 dropped (a grouped-query broadcast)."""
        shape = shape_of(self.inputs[number])[:len(self.batch_coords)]
        offset = const(index(), 0)
        for coord, extent in zip(self.batch_coords, shape):
            offset = offset * self.dim(extent) + (coord if str(extent) != "1" else 0)
        return offset * self.t * self.d

    # -- one tile ------------------------------------------------------------------------------
    def _tile(self, unit: Num) -> None:
        """(tile, split) unit ``unit``: its query block against its split's key blocks."""
        tile, split = unit // self.splits, unit % self.splits
        b, self.row0 = tile // self.q_tiles, (tile % self.q_tiles) * BLOCK_M
        self.batch = b
        extents = self.batch_extents
        self.batch_coords = grid_point(b, extents) if len(extents) > 1 else \
            [b] if extents else []
        self.k_base, self.v_base = (self._kv_base(n) for n in (self.attention.k,
                                                               self.attention.v))
        first, end = split_range(self._key_blocks(), self.splits, split)
        # the lane's two rows (accumulator elements 0, 1 and 2, 3) and their grid points
        self.lane_rows = [self.row0 + self.warp_row + self._place(e)[0] for e in (0, 2)]
        self.lane_coords = [self._coords(row) for row in self.lane_rows]
        self._copy_block(self.q_shared, self.q_block, const(index(), 0), self._q_place(),
                   self.attention.q)
        nvvm.cp_async_commit_group()
        self._load_keys(first, end)
        nvvm.cp_async_wait_group(1)
        self.barrier()
        q = [self._ldmatrix_rows(self.q_shared, self.q_block, const(index(), 0),
                                 self.warp_row, ks * 16, False) for ks in range(self.d // 16)]
        out = self._key_loop(q, first, end)
        if self.workspaces:
            whole = scf.IfOp(self.splits.eq(1).value, [], has_else=True)
            with ir.InsertionPoint(whole.then_block):
                self._finish(out)
                scf.YieldOp([])
            with ir.InsertionPoint(whole.else_block):
                self._partial(out, unit)
                self._last_combines(_opaque(tile), _opaque(self.tiles * self.splits),
                                    _opaque(self.splits))
                scf.YieldOp([])
        else:
            self._finish(out)
        self.barrier()             # the next tile's copies reuse the buffers

    def _key_blocks(self) -> Num:
        """Key blocks this row block visits: all, or up to the causal diagonal of its last
        query (none when even that one sees no key)."""
        blocks = (self.t + (BLOCK_N - 1)) // BLOCK_N
        if not self.attention.causal:
            return blocks
        last = self.row0 + (BLOCK_M - 1)
        last = select(last.lt(self.rows), last, self.rows - 1)
        one_head = (self.row0 // self.s).eq(last // self.s)
        query = select(one_head, last % self.s, self.s - 1)
        reach = query + self.diagonal + 1              # keys 0 .. reach - 1 are seen
        seen = (reach + (BLOCK_N - 1)) // BLOCK_N
        seen = select(reach.gt(0), seen, const(index(), 0))
        return select(seen.lt(blocks), seen, blocks)

    # -- global -> shared ----------------------------------------------------------------------
    def _q_place(self):
        def place(row: Num, chunk: Num) -> tuple[Num, Num]:
            r, c = self.row0 + row, chunk * self.chunk
            first = (self.batch * self.rows + r) * self.d + c
            return first, select(r.lt(self.rows), const(index(), self.d) - c,
                                 const(index(), 0))
        return place

    def _kv_place(self, base: Num, block: Num):
        def place(row: Num, chunk: Num) -> tuple[Num, Num]:
            key, c = block * BLOCK_N + row, chunk * self.chunk
            first = base + key * self.d + c
            return first, select(key.lt(self.t), const(index(), self.d) - c,
                                 const(index(), 0))
        return place

    def _load_keys(self, block: Num, blocks: Num) -> None:
        """K and V of key block ``block`` into its stage (nothing past the last), then a
        commit."""
        inside = scf.IfOp(block.lt(blocks).value)
        with ir.InsertionPoint(inside.then_block):
            stage = block % 2
            self._copy_block(self.k_shared, self.kv_block, stage,
                       self._kv_place(self.k_base, block), self.attention.k)
            self._copy_block(self.v_shared, self.kv_block, stage,
                       self._kv_place(self.v_base, block), self.attention.v)
            scf.YieldOp([])
        nvvm.cp_async_commit_group()

    def _copy_block(self, shared: ir.Value, block: _Operand, stage: Num, place,
                    number: int) -> None:
        per_row = block.cols // self.chunk
        source = self.arg_buffers[number]
        for c in range(-(-block.rows * per_row // THREADS)):
            flat = self.tid + c * THREADS
            row, chunk = flat // per_row, flat % per_row
            guard = scf.IfOp(row.lt(block.rows).value)
            with ir.InsertionPoint(guard.then_block):
                first, count = place(row, chunk)
                count = select(count.lt(0), const(index(), 0), count)
                count = select(count.gt(self.chunk), const(index(), self.chunk), count)
                offset = stage * block.stage_bytes + (row * block.pitch + chunk * self.chunk) * 2
                dest = _gep(shared, offset, ir.IntegerType.get_signless(8))
                first = select(count.gt(0), first, const(index(), 0))
                src = _gep(source, first, ir.IntegerType.get_signless(16))
                self._copy_chunk(dest, src, count)
                scf.YieldOp([])

    # -- the key loop --------------------------------------------------------------------------
    def _key_loop(self, q: list[list[ir.Value]], first: Num, blocks: Num) -> list[Num]:
        """Key blocks ``first`` to ``blocks``; carried: the running maximum of the lane's two
        rows, their partial sums, and the output accumulators (``d / 8`` tiles of 4)."""
        minus = const(f32(), -math.inf)
        zero = const(f32(), 0.0)
        carried = [minus, minus, zero, zero] + [zero] * (self.d // 8 * 4)
        loop = scf.ForOp(first.value, blocks.value, const(index(), 1).value,
                         [v.value for v in carried])
        with ir.InsertionPoint(loop.body):
            j = Num(loop.induction_variable)
            state = [Num(v) for v in loop.inner_iter_args]
            nvvm.cp_async_wait_group(0)
            self.barrier()
            self._load_keys(j + 1, blocks)
            scores = self._scores(q, j % 2)
            scores = self._chain(scores, j)
            out = self._online_softmax(scores, state, j % 2)
            scf.YieldOp([v.value for v in out])
        nvvm.cp_async_wait_group(0)
        return [Num(r) for r in loop.results]

    def _ldmatrix_rows(self, shared: ir.Value, block: _Operand, stage: Num, row0: Num,
                       col: int, trans: bool) -> list[ir.Value]:
        """An ldmatrix.x4 of the 16 x 16 block at (row0, col) of a stage: A's registers
        (as stored), or with ``trans`` (V, ``[key, d]``) B's b0b1, b2b3 of two n8 tiles."""
        if trans:
            sources = [Source(MMA_B, r, (0, 8 * t)) for t in range(2) for r in range(2)]
            origins = ldmatrix_origins(sources, False, True)
        else:
            origins = ldmatrix_origins([Source(MMA_A, r) for r in range(4)], False, False)
        address = self._lane_address(shared, block, stage, origins, row0,
                                     const(index(), col))
        return self._ldmatrix(address, trans=trans)

    def _scores(self, q: list[list[ir.Value]], stage: Num) -> list[Num]:
        """This warp's 16 x BLOCK_N scores: BLOCK_N / 8 tiles of 4 accumulators."""
        zero = const(f32(), 0.0)
        acc = [zero] * (BLOCK_N // 8 * 4)
        origins = ldmatrix_origins([Source(MMA_B, r, (0, 8 * t)) for t in range(2)
                                    for r in range(2)], True, False)
        for ks in range(self.d // 16):
            for p in range(BLOCK_N // 16):     # K stored [key, d]: the B of Q K^T transposed
                address = self._lane_address(self.k_shared, self.kv_block, stage, origins,
                                             const(index(), p * 16), const(index(), ks * 16))
                regs = self._ldmatrix(address, trans=False)
                for half in range(2):
                    n = (2 * p + half) * 4
                    acc[n:n + 4] = self._mma(q[ks], regs[2 * half:2 * half + 2], acc[n:n + 4])
        return acc

    def _place(self, element: int) -> tuple[Num, Num]:
        """(row in the warp's 16, column in its n8 tile) of accumulator ``element``."""
        return self._lane_form(element, 0), self._lane_form(element, 1)

    def _chain(self, scores: list[Num], block: Num) -> list[Num]:
        """The kernel's element-wise chain on each score, ``-inf`` outside ``[s, t]``."""
        out = []
        for n in range(BLOCK_N // 8):
            for e in range(MMA_C.elements):
                col = block * BLOCK_N + n * 8 + self._place(e)[1]
                out.append(self._score(e // 2, col, scores[n * 4 + e]))
        return out

    def _score(self, half: int, col: Num, value: Num) -> Num:
        """The chain's value at key ``col`` of the lane's row ``half``."""
        row = self.lane_rows[half]
        inside = scf.IfOp((row.lt(self.rows) & col.lt(self.t)).value, [f32()], has_else=True)
        with ir.InsertionPoint(inside.then_block):
            self.mode, self.acc_value, self.column = "scores", value, col
            self.coords = self.lane_coords[half]
            self.body()
            scf.YieldOp([self.captured.value])
        with ir.InsertionPoint(inside.else_block):
            scf.YieldOp([const(f32(), -math.inf).value])
        return Num(inside.results[0])

    # -- the online softmax --------------------------------------------------------------------
    def _online_softmax(self, scores: list[Num], state: list[Num], stage: Num) -> list[Num]:
        """The running maxima and sums of the lane's rows (element ``e`` of a tile is row
        ``e // 2``), the accumulators rescaled, then ``+= P @ V``."""
        maxima, sums, out = state[0:2], state[2:4], state[4:]
        probs = list(scores)
        scales = []
        for r in range(2):
            mine = [scores[i] for i in range(len(scores)) if (i % 4) // 2 == r]
            top = mine[0]
            for v in mine[1:]:
                top = top.maximum(v)
            for offset in (1, 2):
                top = top.maximum(_shuffle(top, offset))
            new = maxima[r].maximum(top)
            shift = select(new.eq(-math.inf), const(f32(), 0.0), new)
            scales.append(_exp(maxima[r] - shift))
            total = const(f32(), 0.0)
            for i in range(len(scores)):
                if (i % 4) // 2 == r:
                    probs[i] = _exp(scores[i] - shift)
                    total = total + probs[i]
            maxima[r] = new
            sums[r] = sums[r] * scales[r] + total
        out = [v * scales[(i % 4) // 2] for i, v in enumerate(out)]
        out = self._products(probs, out, stage)
        return maxima + sums + out

    def _products(self, probs: list[Num], out: list[Num], stage: Num) -> list[Num]:
        """``out += P @ V``: P's A fragments from the score tiles, in registers."""
        for kk in range(BLOCK_N // 16):
            a = []
            for r in range(MMA_A.elements // 2):
                pair = [P_OPERAND[2 * r + j] for j in range(2)]
                a.append(self._pack([probs[(2 * kk + h.tile) * 4 + h.element] for h in pair]))
            for p in range(self.d // 16):
                regs = self._ldmatrix_rows(self.v_shared, self.kv_block, stage,
                                           const(index(), kk * 16), p * 16, True)
                for half in range(2):
                    n = (2 * p + half) * 4
                    out[n:n + 4] = self._mma(a, regs[2 * half:2 * half + 2], out[n:n + 4])
        return out

    def _pack(self, pair: list[Num]) -> ir.Value:
        """Two float32 values rounded to the operand type, as one 32-bit register."""
        element = ir.F16Type.get() if self.kind == "f16" else ir.BF16Type.get()
        vector = llvm.mlir_poison(ir.VectorType.get([2], element))
        for j, value in enumerate(pair):
            narrow = arith.truncf(element, value.value)
            vector = llvm.insertelement(vector, narrow, const(i32(), j).value)
        return llvm.bitcast(i32(), vector)

    # -- the end -------------------------------------------------------------------------------
    def _finish(self, state: list[Num]) -> None:
        sums = _row_sums(state[2:4])
        out = state[4:]
        for n in range(self.d // 8):
            for e in range(MMA_C.elements):
                value = out[n * 4 + e] / sums[e // 2]
                self._output(e // 2, self._place(e)[1] + n * 8, value)

    def _output(self, half: int, col: Num, value: Num) -> None:
        inside = scf.IfOp(self.lane_rows[half].lt(self.rows).value)
        with ir.InsertionPoint(inside.then_block):
            self.mode, self.acc_value, self.column = "output", value, col
            self.coords = self.lane_coords[half]
            self.body()
            scf.YieldOp([])

    # -- a split: the workspace and the combine ------------------------------------------------
    def _unit_base(self, unit: Num) -> Num:
        """The float offset of (tile, split) unit ``unit`` in the workspace: its unnormalised
        output block ``[BLOCK_M, d]``, then the maxima and sums of its rows."""
        return unit * (BLOCK_M * (self.d + 2))

    def _partial(self, state: list[Num], unit: Num) -> None:
        """This split's rows to the workspace: the accumulators as they are (relative to
        the running maxima), each row's maximum and sum by the first lane of its group."""
        maxima, sums, out = state[0:2], _row_sums(state[2:4]), state[4:]
        base = self._unit_base(unit)
        for half in range(2):
            # the lane's place is opaque here: its offsets, computed before the key loop,
            # would be registers held through it
            r = _opaque(self.warp_row + self._place(2 * half)[0])
            at = _opaque(base + r * self.d + self._place(2 * half)[1])
            inside = scf.IfOp(self.lane_rows[half].lt(self.rows).value)
            with ir.InsertionPoint(inside.then_block):
                for n in range(self.d // 8):
                    for e in (2 * half, 2 * half + 1):
                        step = affine(MMA_C, e, 1).constant - affine(MMA_C, 2 * half, 1).constant
                        self._put(at + (n * 8 + step), out[n * 4 + e])
                first_lane = scf.IfOp((self.lane % 4).eq(0).value)
                with ir.InsertionPoint(first_lane.then_block):
                    self._put(base + BLOCK_M * self.d + r, maxima[half])
                    self._put(base + BLOCK_M * (self.d + 1) + r, sums[half])
                    scf.YieldOp([])
                scf.YieldOp([])

    def _put(self, offset: Num, value: Num) -> None:
        llvm.store(value.value, _gep(self.workspace, offset, f32()))

    def _get(self, offset: Num) -> Num:
        return Num(llvm.load(f32(), _gep(self.workspace, offset, f32())))

    def _last_combines(self, tile: Num, units: Num, splits: Num) -> None:
        """The tile's counter (after the units' floats) counts its finished splits; the
        block that finishes last combines them.  Fences order the partial results before
        the count and the combine's reads after it; the verdict goes through shared
        memory (Q's buffer, whose fragments are in registers by now)."""
        counters = _gep(self.workspace, self._unit_base(units), f32())
        flag = self.q_shared
        _fence()
        self.barrier()
        first = scf.IfOp(self.tid.eq(0).value)
        with ir.InsertionPoint(first.then_block):
            counter = _gep(counters, tile, i32())
            done = llvm.atomicrmw(llvm.AtomicBinOp.add, counter, const(i32(), 1).value,
                                  llvm.AtomicOrdering.monotonic)
            count = to_int(splits, i32())
            last = Num(done).eq(count - 1)
            llvm.store(select(last, count, const(i32(), 0)).value, flag)
            scf.YieldOp([])
        self.barrier()
        # the combine's split count is this load, so that nothing it computes from the count
        # is hoisted above the key loop (registers held through it)
        count = Num(llvm.load(i32(), flag))
        combine = scf.IfOp(count.ne(0).value)
        with ir.InsertionPoint(combine.then_block):
            _fence()
            self._combine(tile, to_int(count, index()))
            scf.YieldOp([])

    def _combine(self, tile: Num, splits: Num) -> None:
        """Each element of the tile's rows, spread over the threads: the splits' outputs
        rescaled to their largest maximum and summed, in split order, divided by their
        rescaled sums (0 / 0, NaN, for a row that sees no key); then the kernel's tail."""
        loop = scf.ForOp(self.tid.value, const(index(), BLOCK_M * self.d).value,
                         const(index(), THREADS).value)
        with ir.InsertionPoint(loop.body):
            flat = Num(loop.induction_variable)
            r, col = flat // self.d, flat % self.d
            row = self.row0 + r
            inside = scf.IfOp(row.lt(self.rows).value)
            with ir.InsertionPoint(inside.then_block):
                value = self._combined(tile * splits, splits, r, col)
                self.mode, self.acc_value, self.column = "output", value, col
                self.coords = self._coords(row)
                self.body()
                scf.YieldOp([])
            scf.YieldOp([])

    def _combined(self, first_unit: Num, splits: Num, r: Num, col: Num) -> Num:
        """Row ``r``, column ``col`` of the tile combined over its splits, in split order:
        a running maximum, the sum and the output rescaled to it as it grows."""
        def add(i: Num, acc: list[Num]) -> list[Num]:
            top, total, value = acc
            base = self._unit_base(first_unit + i)
            m = self._get(base + BLOCK_M * self.d + r)
            new = top.maximum(m)
            shift = select(new.eq(-math.inf), const(f32(), 0.0), new)
            old, mine = _exp(top - shift), _exp(m - shift)
            return [new, total * old + self._get(base + BLOCK_M * (self.d + 1) + r) * mine,
                    value * old + self._get(base + r * self.d + col) * mine]

        zero = const(f32(), 0.0)
        _, total, value = _for(const(index(), 0), splits, const(index(), 1),
                               [const(f32(), -math.inf), zero, zero], add)
        return value / total

    def _coords(self, row: Num) -> list[Num]:
        """The grid point of row ``row`` of this tile's key/value head."""
        heads = self.head_extents
        if not heads:
            return self.batch_coords + [row]
        inner = grid_point(row // self.s, heads) if len(heads) > 1 else \
            [row // self.s] if heads else []
        return self.batch_coords + inner + [row % self.s]

    # -- the kernel's ops, per element ---------------------------------------------------------
    def copy(self, x: Lazy) -> Any:
        raise NeedsMemory(self.name)

    def matmul(self, op: Any) -> Lazy:
        info = self.result_info(op)
        mine = (op.operation == self.matmuls[0]) == (self.mode == "scores")
        value = self.acc_value if mine else const(f32(), 0.0)
        return Splat(value, tuple(shape_of(info)), info.dtype)

    def softmax(self, op: Any) -> Lazy:
        """Scores mode: the chain's value at this key, kept; never a softmax of a row."""
        x = self.lazy(op.operands[0])
        if self.mode == "scores":
            self.captured = self.load(x, [self.column], {})
        return Splat(const(f32(), 0.0), x.sizes, x.dtype)

    def store_row(self, op: Any) -> None:
        if self.mode == "output":
            super().store_row(op)


def shared_heads(batch: Any, k: Any, v: Any) -> int:
    """How many trailing batch axes k and v are both broadcast over (extent 1 where the
    output's is not): query heads that share a key/value head."""
    count = 0
    for out, kd, vd in reversed(list(zip(batch, k, v))):
        if str(kd) != "1" or str(vd) != "1" or str(out) == "1":
            break
        count += 1
    return count


def _row_sums(sums: list[Num]) -> list[Num]:
    """The lane's two partial row sums, summed over its group of four lanes."""
    out = list(sums)
    for r in range(2):
        for offset in (1, 2):
            out[r] = out[r] + _shuffle(out[r], offset)
    return out


def _opaque(x: Num) -> Num:
    """``x`` through an empty side-effecting asm: what the code after the key loop computes
    from it stays there (LLVM would hoist it before the loop, a register held through it)."""
    wide = to_int(x, ir.IntegerType.get_signless(64))
    return to_int(Num(llvm.inline_asm(wide.type, [wide.value], "mov.b64 $0, $1;", "=l,l",
                                      has_side_effects=True)), index())


def _fence() -> None:
    """``fence.acq_rel.gpu``: this thread's global writes before, reads after."""
    llvm.FenceOp(llvm.AtomicOrdering.acq_rel, syncscope="device")


def _shuffle(value: Num, offset: int) -> Num:
    return Num(gpu.shuffle(value.value, const(i32(), offset).value, const(i32(), 32).value,
                           gpu.ShuffleMode.XOR)[0])


def _exp(x: Num) -> Num:
    return Num(mmath.exp(x.value))
