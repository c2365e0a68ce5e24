"""Reductions and matmul of the Ascend C lowering, on top of its traversals (:mod:`.stream`).

In: a lazy value and the axes to reduce (or the two operands of a matmul row).  Out: the C++
of the passes that compute it and the lazy value of the result:

- over every axis: a scalar accumulated chunk by chunk (``ReduceSum``/``ReduceMax``/
  ``ReduceMin`` into a 32-byte ``red`` with the documented minimum work buffer, then the V->S
  flag before ``GetValue``);
- over the innermost axes, keeping outer ones: such a scalar per kept index, each stored to
  the workspace as one element;
- keeping the innermost axis: an accumulator chunk of it (``Add``/``Max``/``Min``) combined
  with that chunk at every index of the reduced axes, stored to the workspace;
- matmul on the vector unit (correct, slow): per output row and chunk of it, an accumulator
  plus ``lhs[m, k] * rhs[k, chunk]`` over k in blocks of 64 summed apart first (blocked
  summation: a large K stays within the float32 contract), the left side staged in UB a chunk
  at a time and read as scalars after the V->S flag.
"""
from __future__ import annotations

import math
from dataclasses import replace

from ...dims import Dim
from ..common.values import ONE, ZERO, Lazy, Splat, View, numel, reindex
from . import cxx
from .cxx import f32
from .lazy import describe, fix, leaves
from .stream import Chunk, Domain, Stream
from .vector import Scalar, Vec, Vector

IDENTITY = {"sum": 0.0, "mean": 0.0, "max": -math.inf, "min": math.inf}
REDUCE_API = {"sum": "ReduceSum", "mean": "ReduceSum", "max": "ReduceMax", "min": "ReduceMin"}
COMBINE = {"sum": "{a} + {b}", "mean": "{a} + {b}", "max": "({b} > {a} ? {b} : {a})",
           "min": "({b} < {a} ? {b} : {a})"}
VECTOR_COMBINE = {"sum": "Add", "mean": "Add", "max": "Max", "min": "Min"}
SCALAR_COMBINE = {"sum": "Adds", "mean": "Adds", "max": "Maxs", "min": "Mins"}
MATMUL_BLOCK = 64   # products summed apart before the accumulator: float32 error of ~K/64 + 64
                    # additions, not K


class Reducer(Stream):
    """Reductions and matmul (the module docstring)."""

    def reduce(self, x: Lazy, axes: list[int], kind: str, keepdims: bool) -> Lazy:
        """``kind`` (sum, mean, max, min) over ``axes`` of ``x``: a Splat when it leaves one
        element, else a view of the workspace."""
        sizes = x.sizes
        kept = [a for a in range(len(sizes)) if a not in axes]
        out_sizes = tuple(ONE if a in axes else d for a, d in enumerate(sizes)
                          if keepdims or a not in axes)
        count = numel([sizes[a] for a in axes])
        if isinstance(x, Splat):
            if kind in ("max", "min", "mean"):
                return replace(x, sizes=out_sizes)
            return Splat(self.scalar(f"{x.value} * float({cxx.dim(count)})", "f32"),
                         out_sizes, x.dtype)
        if all(sizes[a] == ONE for a in kept):
            acc = self.reduce_to_scalar(x, kind)
            return Splat(self.mean(acc, kind, count), out_sizes, x.dtype)
        out = self.new_scratch(tuple(sizes[a] for a in kept), "f32")
        self.fence()
        if axes[-1] == len(sizes) - 1:
            self.reduce_rows(x, kind, kept, count, out)
        else:
            self.reduce_columns(x, kind, axes, kept, count, out)
        self.fence()
        source = [kept.index(a) if a in kept else None for a in range(len(sizes))
                  if keepdims or a not in axes]
        result = reindex(out, out_sizes, source)
        assert result is not None, "a view always reindexes"
        return replace(result, dtype=x.dtype)

    def mean(self, acc: str, kind: str, count: Dim) -> str:
        """The finished scalar of a reduction: a mean divides the sum by ``count``."""
        if kind != "mean":
            return acc
        return self.scalar(f"{acc} / float({cxx.dim(count)})", "f32")

    def reduce_to_scalar(self, x: Lazy, kind: str) -> str:
        """``kind`` over every axis of ``x``: chunk by chunk (ReduceSum/Max/Min, the V->S
        flag, GetValue) into a new scalar."""
        code = self.body
        acc = self.fresh("acc")
        code(f"// {acc} <- {kind} of {describe(x)}")
        code(f"float {acc} = {f32(IDENTITY[kind])};")
        domain = Domain.of(x.sizes, list(leaves(x).values()))
        index = ["0"] * len(domain.axes)
        self.plan.reduces = True
        outer = range(len(domain.axes) - 1) if domain.axes else range(0)
        limit = self.limit(list(leaves(x).values()), domain)
        with self.loops(code, domain, outer, index), \
                self.chunks(code, domain, index, False, limit) as at:
            value = self.chunk_value(code, x, domain, at)
            vector = Vector(code, at.count, self.slots, self.masks, self.names)
            if isinstance(value, Scalar):
                part = value.expr if kind in ("max", "min") else \
                    f"{value.expr} * float({at.count})"
            else:
                vector.emit(f"{REDUCE_API[kind]}(red, {value.name}, work, {at.count})")
                vector.release(value)
                self.sync("V_S")
                part = "red.GetValue(0)"
            code(f"{acc} = {COMBINE[kind].format(a=acc, b=part)};")
        return acc

    def reduce_rows(self, x: Lazy, kind: str, kept: list[int], count: Dim, out: View) -> None:
        """A reduction over the innermost axis keeping outer ones: a scalar per kept index,
        each stored as one element."""
        code = self.body
        index = [self.fresh("k") for _ in kept]
        code(f"// {out.buffer.member} <- {kind} of {describe(x)} over its last axes")
        with self.scalar_loops(code, [x.sizes[a] for a in kept], index):
            acc = self.reduce_to_scalar(fix(x, kept, index), kind)
            value = self.mean(acc, kind, count)
            y = self.out_tensor(code, "float32")
            code(f"Duplicate({y.name}, {value}, 1);")
            self.copy_out(code, y, out, Chunk(index), out.strides)

    def reduce_columns(self, x: Lazy, kind: str, axes: list[int], kept: list[int],
                       count: Dim, out: View) -> None:
        """A reduction keeping the innermost axis: an accumulator for a chunk of it,
        combined with that chunk at every index of the reduced axes."""
        code = self.body
        outer = kept[:-1]
        index = [self.fresh("k") for _ in outer]
        code(f"// {out.buffer.member} <- {kind} of {describe(x)} over axes "
             f"{', '.join(map(str, axes))}, column by column")
        with self.scalar_loops(code, [x.sizes[a] for a in outer], index):
            row = fix(x, outer, index)
            row_out = fix(out, list(range(len(outer))), index)
            assert isinstance(row_out, View)
            rest = [a for a in range(len(x.sizes)) if a not in outer]
            reduced = [rest.index(a) for a in axes]
            self.accumulate(row, kind, reduced, count, row_out)

    def accumulate(self, x: Lazy, kind: str, reduced: list[int], count: Dim, out: View
                   ) -> None:
        """``out`` (1-D) = ``kind`` of ``x`` over its ``reduced`` axes (all but the last)."""
        code = self.body
        inner = len(x.sizes) - 1
        acc = self.slots.take()
        with self.chunks(code, Domain.of([x.sizes[inner]], []), ["0"]) as at:
            code(f"LocalTensor<float> acc = Slot<float>({acc});")
            code(f"Duplicate(acc, {f32(IDENTITY[kind])}, {at.count});")
            index = [self.fresh("j") for _ in reduced]
            with self.scalar_loops(code, [x.sizes[a] for a in reduced], index), \
                    self.slots.scope(), self.masks.scope():
                vector = Vector(code, at.count, self.slots, self.masks, self.names)
                value = self.on_chunk(code, fix(x, reduced, index), at)
                if isinstance(value, Scalar):
                    vector.emit(f"{SCALAR_COMBINE[kind]}(acc, acc, {value.expr}, {at.count})")
                else:
                    vector.emit(f"{VECTOR_COMBINE[kind]}(acc, acc, {value.name}, {at.count})")
                    vector.release(value)
            if kind == "mean":
                code(f"Muls(acc, acc, 1.0f / float({cxx.dim(count)}), {at.count});")
            y = self.out_tensor(code, "float32")
            code(f"Muls({y.name}, acc, 1.0f, {at.count});")
            self.copy_out(code, y, out, at, out.strides)
        self.slots.give(acc)

    def matmul(self, lhs: Lazy, rhs: Lazy, out: View) -> None:
        """``out = lhs @ rhs`` on the vector unit: for each output row and chunk of it, an
        accumulator plus ``lhs[m, k] * rhs[k, chunk]`` over k, the left side staged in UB a
        chunk of k at a time and read as scalars (after the V->S flag)."""
        code = self.body
        rows = list(range(len(out.sizes) - 1))
        index = [self.fresh("m") for _ in rows]
        code(f"// {out.buffer.member} <- matmul({describe(lhs)}, {describe(rhs)}) on the "
             "vector unit")
        batch = len(rhs.sizes) - 2
        with self.scalar_loops(code, [out.sizes[a] for a in rows], index):
            lhs_row = fix(lhs, list(range(len(lhs.sizes) - 1)), index[-(len(lhs.sizes) - 1):]
                          if len(lhs.sizes) > 1 else [])
            rhs_mat = fix(rhs, list(range(batch)), index[:batch])
            out_row = fix(out, rows, index)
            assert isinstance(out_row, View)
            self.matmul_row(lhs_row, rhs_mat, out_row)

    def matmul_row(self, lhs: Lazy, rhs: Lazy, out: View) -> None:
        """``out`` (1-D) = ``lhs`` (1-D, K) @ ``rhs`` (K x N)."""
        code = self.body
        acc, part, staged = self.slots.take(), self.slots.take(), self.slots.take()
        k_size, n_size = rhs.sizes
        # a row of a weight read in place across its rows (a transposed one) is gathered:
        # chunks of at most GATHER elements
        strided = any(v.strides[-1] not in (ZERO, ONE) for v in leaves(rhs).values())
        with self.chunks(code, Domain.of([n_size], []), ["0"],
                         limit="GATHER" if strided else "CHUNK") as at:
            code(f"LocalTensor<float> acc = Slot<float>({acc});")
            code(f"Duplicate(acc, 0.0f, {at.count});")
            k_domain = Domain.of([k_size], list(leaves(lhs).values()))
            k_index = ["0"] * len(k_domain.axes)
            with self.chunks(code, k_domain, k_index, False,
                             self.limit(list(leaves(lhs).values()), k_domain)) as kat:
                code(f"LocalTensor<float> lhs = Slot<float>({staged});")
                target = Vec("lhs", "f32")
                value = self.compute(code, lhs, kat, self.copy_in(code, lhs, k_domain, kat),
                                     into=target)
                self.place(Vector(code, kat.count, self.slots, self.masks, self.names), value,
                           target)
                self.sync("V_S")
                kb, kk = self.fresh("kb"), self.fresh("kk")
                start = kat.index[0] if k_domain.axes else "0"
                with code.block(f"for (uint32_t {kb} = 0; {kb} < {kat.count}; "
                                f"{kb} += {MATMUL_BLOCK})"):
                    code(f"LocalTensor<float> part = Slot<float>({part});")
                    code(f"Duplicate(part, 0.0f, {at.count});")
                    end = f"tilec::Min<uint32_t>({kb} + {MATMUL_BLOCK}, {kat.count})"
                    with code.block(f"for (uint32_t {kk} = {kb}; {kk} < {end}; ++{kk})"), \
                            self.slots.scope(), self.masks.scope():
                        code(f"const float a = lhs.GetValue({kk});")
                        row = fix(rhs, [0], [cxx.index(start, kk)])
                        value = self.on_chunk(code, row, at)
                        vector = Vector(code, at.count, self.slots, self.masks, self.names)
                        if isinstance(value, Scalar):
                            vector.emit(f"Adds(part, part, a * {value.expr}, {at.count})")
                        else:
                            term = vector.temp("f32")
                            vector.emit(f"Muls({term.name}, {value.name}, a, {at.count})")
                            vector.emit(f"Add(part, part, {term.name}, {at.count})")
                            vector.release(value)
                    code(f"Add(acc, acc, part, {at.count});")
            y = self.out_tensor(code, "float32")
            code(f"Muls({y.name}, acc, 1.0f, {at.count});")
            self.copy_out(code, y, out, at, out.strides)
        for slot in (acc, part, staged):
            self.slots.give(slot)
