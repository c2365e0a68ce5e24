"""What every backend's row lowering shares before it emits anything: a tensor's dimensions
as row sizes, attribute readers, and the op handlers that only re-index a lazy value.

In: the ops of a kernel-level row body (``tile.cmp``, ``tile.broadcast``, ``tile.slice``,
``tile.transpose``, ``tile.reshape``, ``tile.concat``) and the lazy values of their operands.
Out: lazy values (:mod:`.values`) of their results, copying nothing where a view can be
re-indexed.  :class:`LayoutOps` is mixed into the MLIR row lowering (:mod:`.rows`, for cpu
and ptx) and into the Ascend C one; each provides ``env``, ``reindexed``, ``elementwise`` and
``reshape_copy``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from ...dialect.types import TensorInfo, tensor_info
from ...dims import ELLIPSIS, Dim, parse_dim
from ...mlir import ir
from .values import LEAD, ONE, ZERO, Concat, Lazy, Map, ramp

LEAD_DIM = Dim.sym(LEAD)


def shape_of(info: TensorInfo) -> tuple[Dim, ...]:
    """A tensor's dimensions, ``...`` as the one axis of extent :data:`LEAD_DIM`."""
    return tuple(LEAD_DIM if d == ELLIPSIS else d for d in info.shape)


def grid_dim(entry: str) -> Dim:
    """The extent of a grid entry (``...`` as :data:`LEAD_DIM`)."""
    return LEAD_DIM if entry == ELLIPSIS else parse_dim(entry)


def strings(attr: Any) -> list[str]:
    return [ir.StringAttr(a).value for a in attr]


def ints(attr: Any) -> list[int]:
    return [int(a) for a in attr]


class LayoutOps:
    """The handlers (``op_<name>``) of the ops that move elements without computing them."""

    env: dict[Any, Lazy]

    def lazy(self, value: Any) -> Lazy:
        return self.env[value]

    @staticmethod
    def result_info(op: Any) -> TensorInfo:
        return tensor_info(op.results[0].type)

    def reindexed(self, x: Lazy, sizes: Sequence[Dim], source: Sequence[Optional[int]],
                  starts: Optional[Sequence[Dim]] = None) -> Lazy:
        """``x`` re-indexed (:func:`.values.reindex`), through a copy where it cannot be."""
        raise NotImplementedError

    def elementwise(self, op: Any, name: str) -> Lazy:
        raise NotImplementedError

    def reshape_copy(self, x: Lazy, sizes: Sequence[Dim]) -> Lazy:
        """``x`` reshaped to ``sizes`` where more than unit dimensions move."""
        raise NotImplementedError

    def op_cmp(self, op: Any) -> Lazy:
        return self.elementwise(op, "cmp." + ir.StringAttr(op.attributes["predicate"]).value)

    def op_broadcast(self, op: Any) -> Lazy:
        x = self.lazy(op.operands[0])
        sizes = shape_of(self.result_info(op))
        k = len(sizes) - len(x.sizes)
        source = [None if j < k or (x.sizes[j - k] == ONE and sizes[j] != ONE) else j - k
                  for j in range(len(sizes))]
        return self.reindexed(x, sizes, source)

    def op_slice(self, op: Any) -> Lazy:
        x = self.lazy(op.operands[0])
        starts = [parse_dim(s) for s in strings(op.attributes["starts"])]
        k = len(x.sizes) - len(starts)
        return self.reindexed(x, shape_of(self.result_info(op)), range(len(x.sizes)),
                              [ZERO] * k + starts)

    def op_transpose(self, op: Any) -> Lazy:
        x = self.lazy(op.operands[0])
        perm = ints(op.attributes["perm"])
        k = len(x.sizes) - len(perm)
        return self.reindexed(x, shape_of(self.result_info(op)),
                              list(range(k)) + [k + p for p in perm])

    def op_reshape(self, op: Any) -> Lazy:
        """A reshape that only inserts or drops unit dimensions re-indexes; any other is
        :meth:`reshape_copy`'s."""
        x = self.lazy(op.operands[0])
        sizes = shape_of(self.result_info(op))
        old = [a for a, d in enumerate(x.sizes) if d != ONE]
        new = [j for j, d in enumerate(sizes) if d != ONE]
        if [x.sizes[a] for a in old] != [sizes[j] for j in new]:
            return self.reshape_copy(x, sizes)
        source: list[Optional[int]] = [None] * len(sizes)
        for a, j in zip(old, new):
            source[j] = a
        return self.reindexed(x, sizes, source)

    def op_concat(self, op: Any) -> Lazy:
        a, b = (self.lazy(v) for v in op.operands)
        sizes = shape_of(self.result_info(op))
        axis = len(sizes) + int(ir.IntegerAttr(op.attributes["axis"]).value)
        return Concat((a, b), axis, sizes, self.result_info(op).dtype)


@dataclass(frozen=True)
class IotaRow:
    """A ``tile.iota`` in a kernel: its axis, start, whole shape and its row's grid axes."""

    axis: int
    start: Dim
    shape: tuple[Dim, ...]
    grid_axes: tuple[int, ...]

    @staticmethod
    def of(op: Any) -> "IotaRow":
        a = op.attributes
        return IotaRow(int(ir.IntegerAttr(a["axis"]).value),
                       parse_dim(ir.StringAttr(a["start"]).value),
                       tuple(parse_dim(d) for d in strings(a["shape"])), tuple(ints(a["axes"])))

    def grid_axis(self) -> Optional[int]:
        """The grid coordinate its value is (None where its axis is along the row); -1 where
        that axis has extent 1, so the value is ``start`` itself."""
        if self.axis not in self.grid_axes:
            return None
        return -1 if self.shape[self.axis] == ONE else self.grid_axes.index(self.axis)

    def ramp(self, sizes: tuple[Dim, ...]) -> Map:
        """Its row when its axis is along the row: ``start`` plus the index on that axis."""
        row_axis = self.axis - sum(1 for g in self.grid_axes if 0 <= g < self.axis)
        return Map("cast", (ramp(self.start, sizes, row_axis),), sizes, "int32")
