"""Row decomposition of a fused group: which leading dimensions become the kernel's grid.

In: the body of one fused group (tile ops over whole tensors).  Out: a :class:`RowPlan`: the
grid dimensions and, for every value of the body, which of its axes each grid dimension
indexes.  A kernel then runs the body once per grid point on *rows*: each value minus its
grid-indexed axes.  Element-wise chains, slices/concats/reshapes/broadcasts that leave the
grid axes alone, reductions over row axes and matmul over its M dimension all keep their
meaning on rows, so the same tile ops describe a row; ops that would move data across rows
(a slice or concat along a grid axis, a reduction over it, a reshape that merges it) make
the grid shorter, down to an empty grid (one row = the whole tensors: correct, not parallel).

The maps are derived backward, from the group's outputs (indexed by every grid dimension) to
its inputs, one rule per op; a value reached with two different maps also shortens the grid.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..dialect.ops import ELEMENTWISE_OPS
from ..dialect.types import TensorInfo, tensor_info
from ..dims import ELLIPSIS, Dim
from ..mlir import ir

AxisMap = tuple[int, ...]   # per grid dimension: an axis of the value, or -1 (does not vary)
NONE = -1
ONE = Dim.const(1)

ELEMENTWISE = {f"tile.{n}" for n in ELEMENTWISE_OPS}


class _Unmappable(Exception):
    """The grid being tried cannot be kept through some op."""


@dataclass
class RowPlan:
    grid: tuple                       # entries of the domain's shape: Dim, or ELLIPSIS
    maps: dict[Any, AxisMap]          # ir.Value -> axis map (values absent: rank-0 / unused)

    def axes(self, value: Any) -> AxisMap:
        return self.maps.get(value, (NONE,) * len(self.grid))

    def row_shape(self, value: Any) -> tuple:
        """The value's shape with its grid-indexed axes removed."""
        info = tensor_info(value.type)
        taken = set(self.axes(value))
        return tuple(d for i, d in enumerate(info.shape) if i not in taken)

    def row_type(self, value: Any) -> ir.Type:
        info = tensor_info(value.type)
        return TensorInfo(info.dtype, self.row_shape(value)).to_mlir()

    def row_axis(self, value: Any, axis: int) -> int:
        """Position in the row of full-shape ``axis`` (which must not be a grid axis)."""
        taken = set(self.axes(value))
        assert axis not in taken
        return axis - sum(1 for a in taken if a != NONE and a < axis)


def _shape(v: Any) -> tuple:
    return tensor_info(v.type).shape


def _ints(attr: Any) -> list[int]:
    return [int(x) for x in attr]


def _operand_maps(op: Any, rmap: AxisMap) -> list[AxisMap]:
    """Maps of ``op``'s operands given its result's map (the rules of the module docstring)."""
    name = op.operation.name
    operands = list(op.operands)
    res_shape = _shape(op.results[0])
    if name in ("tile.constant", "tile.iota", "tile.dim"):
        return []
    if name in ELEMENTWISE:
        return [tuple(NONE for _ in rmap) if _shape(x) == () else rmap for x in operands]
    if name == "tile.broadcast":
        k = len(res_shape) - len(_shape(operands[0]))
        return [tuple(a - k if a != NONE and a - k >= 0 else NONE for a in rmap)]
    if name == "tile.slice":
        x_shape = _shape(operands[0])
        first = 1 if x_shape and x_shape[0] == ELLIPSIS else 0
        starts = [ir.StringAttr(s).value for s in op.attributes["starts"]]
        ends = [ir.StringAttr(s).value for s in op.attributes["ends"]]
        for a in rmap:
            if a >= first:
                i = a - first
                if starts[i] != "0" or ends[i] != str(x_shape[a]):
                    raise _Unmappable
        return [rmap]
    if name == "tile.concat":
        axis = len(res_shape) + int(ir.IntegerAttr(op.attributes["axis"]).value)
        if axis in rmap:
            raise _Unmappable
        return [rmap, rmap]
    if name == "tile.softmax":
        axis = len(res_shape) + int(ir.IntegerAttr(op.attributes["axis"]).value)
        if axis in rmap:
            raise _Unmappable
        return [rmap]
    if name == "tile.transpose":
        perm = _ints(op.attributes["perm"])
        first = len(res_shape) - len(perm)       # a leading `...` stays in place
        return [tuple(NONE if a == NONE else (a if a < first else first + perm[a - first])
                      for a in rmap)]
    if name == "tile.reduce":
        x_shape = _shape(operands[0])
        reduced = {len(x_shape) + a for a in _ints(op.attributes["axes"])}
        keep = bool(ir.BoolAttr(op.attributes["keepdims"]).value)
        kept_axes = list(range(len(x_shape))) if keep else \
            [i for i in range(len(x_shape)) if i not in reduced]
        out = []
        for a in rmap:
            if a == NONE:
                out.append(NONE)
                continue
            xa = kept_axes[a]
            if xa in reduced:
                raise _Unmappable
            out.append(xa)
        return [tuple(out)]
    if name == "tile.matmul":
        r = len(res_shape)
        if r - 1 in rmap:       # rows of a matmul are rows of its lhs, never columns of rhs
            raise _Unmappable
        lhs = tuple(NONE if a == r - 1 else a for a in rmap)
        rhs = tuple(NONE if a == r - 2 else a for a in rmap)
        return [lhs, rhs]
    if name == "tile.reshape":
        return [_reshape_map(_shape(operands[0]), res_shape, rmap)]
    raise _Unmappable   # an op this analysis does not know keeps its operands whole


def _reshape_map(x: tuple, r: tuple, rmap: AxisMap) -> AxisMap:
    """Grid axes of a reshape must lie in the leading part that both shapes share (size-1
    axes may be inserted or dropped there); everything after it is reshaped within a row."""
    corr: dict[int, int] = {}
    i = k = 0
    while i < len(r):
        if k < len(x) and r[i] == x[k]:
            corr[i] = k
            i, k = i + 1, k + 1
        elif r[i] == ONE:
            corr[i] = NONE
            i += 1
        elif k < len(x) and x[k] == ONE:
            k += 1
        else:
            break
    if any(a != NONE and a not in corr for a in rmap):
        raise _Unmappable
    mapped = [a for a in rmap if a != NONE]
    if mapped and max(mapped) >= i:
        raise _Unmappable
    return tuple(NONE if a == NONE else corr[a] for a in rmap)


def _try(body: Any, outputs: Sequence[Any], domain: tuple, g: int) -> RowPlan:
    maps: dict[Any, AxisMap] = {}

    def merge(v: Any, m: AxisMap) -> None:
        if all(a == NONE for a in m) and _shape(v) == ():
            return
        old = maps.get(v)
        if old is not None and old != m:
            raise _Unmappable
        maps[v] = m

    n = len(domain)
    for out in outputs:
        s = _shape(out)
        k = n - len(s)
        m = []
        for j in range(g):
            a = j - k
            if a < 0 or s[a] != domain[j]:
                raise _Unmappable           # an output must be written once per grid point
            m.append(a)
        merge(out, tuple(m))
    for op in reversed(list(body.operations)):
        if not op.results or op.operation.name == "func.return":
            continue
        rmap = maps.get(op.results[0])
        if rmap is None:
            continue
        for x, m in zip(op.operands, _operand_maps(op, rmap)):
            merge(x, m)
    return RowPlan(domain[:g], maps)


def plan_rows(body: Any, outputs: Sequence[Any]) -> RowPlan:
    """The longest grid (leading dims of the largest output) that every op keeps, leaving at
    least one axis in each output's row."""
    domain = max((_shape(o) for o in outputs), key=len)
    for g in range(len(domain) - 1, 0, -1):
        try:
            return _try(body, outputs, domain, g)
        except _Unmappable:
            continue
    return RowPlan((), {})
