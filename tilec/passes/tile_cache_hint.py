"""tile-cache-hint: ``#pragma cache_hint`` -> attributes on the hinted values and their readers.

In: tile IR with ``"tile.hint"(%v) {name, level}`` ops (irgen), usually after tile-fuse, which
moves a hint on a value computed in a group into that group's region.  Out: no ``tile.hint``;

- the hinted value carries ``tile.cache_hint = {level, name, resident, reused_over}``: in its
  function's ``arg_attrs`` for a parameter, as a discardable attribute of its defining op for a
  ``let`` (on the ``tile.fused`` op, in ``tile.cache_hints``, for a group's block argument);
- every ``tile.fused`` op that reads the value gets ``tile.cache_hints``, one dictionary per
  input (``{}`` for an input without a hint), the same fields computed from that group alone:
  what the kernel level reads to keep the hinted part resident.

``resident`` is the part of the hinted tensor that one tile keeps, one dimension expression per
dimension of the hinted tensor; ``reused_over`` names the dimensions of the consumer over which
a tile reuses it.  Both come from following the value's uses through cast, slice, reshape
(inserting or dropping unit dimensions), transpose and into / out of groups, to where it is
broadcast: the broadcast's new dimensions are ``reused_over``; a dimension of the hinted tensor
that the broadcast result indexes outside (before) its first broadcast dimension is fixed per
tile (``1``); any other dimension keeps the hull of the slices read of it.  RoPE's
``rope_freqs[tokens, 2*half]``, sliced into two halves, reshaped to ``[tokens, 1, half]`` and
broadcast over ``heads``, gets ``resident = ["1", "2*half"]``, ``reused_over = ["heads"]``: each
token's row is loaded once and reused for every head.  A value never broadcast is reused by no
tile: ``reused_over = []`` and ``resident`` is all it reads.

An unknown level is a located error (the front end checks it too; tilec-opt reads hand-written
IR).  A hint on a value that fusion keeps in registers (computed in a group and read only
there) is a located warning; its attribute is kept all the same.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import TilecError
from ..dialect import HINT_ATTR, INPUT_HINTS_ATTR, tensor_info
from ..dialect.locations import span_of
from ..dialect.walk import nested_ops
from ..dims import ELLIPSIS, Dim, Shape, parse_dim
from ..mlir import ir
from ..pipeline import PassContext, register

LEVELS = ("L1", "L2", "UB", "SHARED")  # language.md, pragma cache_hint


@register("tile-cache-hint", "turn cache_hint pragmas (tile.hint) into attributes")
def cache_hint(module: ir.Module, pc: PassContext) -> None:
    """Replace every ``tile.hint`` by attributes on its value and on the groups reading it."""
    for hint in nested_ops(module.operation, "tile.hint"):
        _apply(hint, pc)
        hint.erase()


def _apply(hint: ir.Operation, pc: PassContext) -> None:
    """Validate one ``tile.hint`` and set the attributes it asks for (module docstring)."""
    level = ir.StringAttr(hint.attributes["level"]).value
    name = ir.StringAttr(hint.attributes["name"]).value
    span = span_of(hint.location)
    if level not in LEVELS:
        raise TilecError(f"unknown cache level '{level}' in cache_hint({name}, {level}); "
                         "expected one of " + ", ".join(LEVELS), span)
    value = hint.operands[0]
    shape = tensor_info(value.type).shape

    def attr(reaches: list[Reach]) -> ir.DictAttr:
        return _summary(level, name, shape, reaches)

    _set_on_value(value, attr(_reaches(value, _identity(shape), {})))
    for fused, index in _group_reads(value):
        _set_input_hint(fused, index, attr(_reaches(_block(fused).arguments[index],
                                                     _identity(shape), {})))
    if _kept_in_registers(value):
        pc.sink.warn(f"cache_hint({name}, {level}): fusion keeps '{name}' in registers inside "
                     "its group, so no memory level holds it to reuse", span)


# ---------------------------------------------------------------------------------------------
# Where the hint goes


def _set_on_value(value: ir.Value, attr: ir.DictAttr) -> None:
    """``attr`` on a let's defining op, a parameter's ``arg_attrs`` or a group's input."""
    if isinstance(value, ir.OpResult):
        value.owner.attributes[HINT_ATTR] = attr
        return
    owner = value.owner.owner.operation
    if owner.name == "tile.fused":
        _set_input_hint(owner, value.arg_number, attr)
        return
    arg_attrs = list(owner.attributes["arg_attrs"]) if "arg_attrs" in owner.attributes \
        else [ir.DictAttr.get({}) for _ in value.owner.arguments]
    entries = {a.name: a.attr for a in ir.DictAttr(arg_attrs[value.arg_number])}
    arg_attrs[value.arg_number] = ir.DictAttr.get({**entries, HINT_ATTR: attr})
    owner.attributes["arg_attrs"] = ir.ArrayAttr.get(arg_attrs)


def _set_input_hint(fused: ir.Operation, index: int, attr: ir.DictAttr) -> None:
    attrs = fused.attributes
    entries = list(attrs[INPUT_HINTS_ATTR]) if INPUT_HINTS_ATTR in attrs \
        else [ir.DictAttr.get({}) for _ in fused.operands]
    entries[index] = attr
    attrs[INPUT_HINTS_ATTR] = ir.ArrayAttr.get(entries)


def _group_reads(value: ir.Value) -> list[tuple[ir.Operation, int]]:
    """The ``tile.fused`` ops that read ``value`` (through the group's results when a group
    computes it), with the operand index."""
    reads = []
    for use in value.uses:
        user = use.owner.operation
        if user.name == "tile.fused":
            reads.append((user, use.operand_number))
        elif user.name == "tile.yield":
            reads += _group_reads(user.parent.results[use.operand_number])
    return reads


def _kept_in_registers(value: ir.Value) -> bool:
    """Computed inside a group and read only there."""
    return isinstance(value, ir.OpResult) \
        and value.owner.operation.parent.operation.name == "tile.fused" \
        and all(use.owner.operation.name != "tile.yield" for use in value.uses)


def _block(fused: ir.Operation) -> ir.Block:
    return fused.regions[0].blocks[0]


# ---------------------------------------------------------------------------------------------
# The resident part


Origin = list[int | None]  # per dimension of a value: the hinted tensor's dimension it indexes
Windows = dict[int, tuple[Dim, Dim]]  # hinted dimension -> the [start, end) read of it


@dataclass
class Reach:
    """How one use reads the hinted tensor."""

    windows: Windows
    fixed: frozenset[int] = frozenset()  # hinted dimensions a tile fixes (outside a broadcast)
    reused_over: tuple[str, ...] = ()  # the consumer's dimensions a broadcast adds


def _identity(shape: Shape) -> Origin:
    return list(range(len(shape)))


def _reaches(value: ir.Value, origin: Origin, windows: Windows) -> list[Reach]:
    """Follow ``value`` (whose dimensions index the hinted tensor as ``origin`` says) through
    its uses to where each is consumed."""
    out: list[Reach] = []
    for use in value.uses:
        op = use.owner.operation
        name = op.name
        if name == "tile.hint":
            continue
        if name == "tile.fused":
            out += _reaches(_block(op).arguments[use.operand_number], origin, windows)
        elif name == "tile.yield":
            out += _reaches(op.parent.results[use.operand_number], origin, windows)
        elif name == "tile.cast":
            out += _reaches(op.results[0], origin, windows)
        elif name == "tile.slice":
            out += _reaches(op.results[0], origin, _sliced(op, origin, windows))
        elif name == "tile.transpose":
            out += _reaches(op.results[0], _transposed(op, origin), windows)
        elif name == "tile.reshape" and (moved := _reshaped(op, origin)) is not None:
            out += _reaches(op.results[0], moved, windows)
        elif name == "tile.broadcast":
            out.append(_broadcast(op, origin, windows))
        else:
            out.append(Reach(windows))
    return out


def _first_certain(shape: Shape) -> int:
    return 1 if shape and shape[0] == ELLIPSIS else 0


def _sliced(op: ir.Operation, origin: Origin, windows: Windows) -> Windows:
    first = _first_certain(tensor_info(op.operands[0].type).shape)
    starts = [parse_dim(ir.StringAttr(a).value) for a in op.attributes["starts"]]
    ends = [parse_dim(ir.StringAttr(a).value) for a in op.attributes["ends"]]
    out = dict(windows)
    for j, (start, end) in enumerate(zip(starts, ends)):
        d = origin[first + j]
        if d is not None:
            base = windows[d][0] if d in windows else Dim.const(0)
            out[d] = (base + start, base + end)
    return out


def _transposed(op: ir.Operation, origin: Origin) -> Origin:
    perm = list(op.attributes["perm"])
    first = len(origin) - len(perm)
    return origin[:first] + [origin[first + p] for p in perm]


def _reshaped(op: ir.Operation, origin: Origin) -> Origin | None:
    """``origin`` carried through a reshape that only inserts or drops unit dimensions; None
    for any other reshape, which this pass does not follow."""
    src = tensor_info(op.operands[0].type).shape
    dst = tensor_info(op.results[0].type).shape
    kept = [(d, o) for d, o in zip(src, origin) if d != Dim.const(1)]
    if [d for d, _ in kept] != [d for d in dst if d != Dim.const(1)]:
        return None
    carried = iter(o for _, o in kept)
    return [None if d == Dim.const(1) else next(carried) for d in dst]


def _broadcast(op: ir.Operation, origin: Origin, windows: Windows) -> Reach:
    src = tensor_info(op.operands[0].type).shape
    dst = tensor_info(op.results[0].type).shape
    offset = len(dst) - len(src)
    added = [j for j in range(len(dst)) if j < offset
             or (src[j - offset] == Dim.const(1) and dst[j] != Dim.const(1))]
    if not added:
        return Reach(windows)
    fixed = {origin[j - offset] for j in range(offset, added[0])} - {None}
    return Reach(windows, frozenset(fixed), tuple(str(dst[j]) for j in added))


def _summary(level: str, name: str, shape: Shape, reaches: list[Reach]) -> ir.DictAttr:
    fixed = set().union(*(r.fixed for r in reaches))
    reused = dict.fromkeys(n for r in reaches for n in r.reused_over)
    resident = ["1" if d in fixed else _hull(size, [r.windows.get(d) for r in reaches])
                for d, size in enumerate(shape)]
    return ir.DictAttr.get({
        "level": ir.StringAttr.get(level),
        "name": ir.StringAttr.get(name),
        "resident": _strings(resident),
        "reused_over": _strings(reused),
    })


def _hull(size: Dim | str, windows: list[tuple[Dim, Dim] | None]) -> str:
    """The extent of the union of ``windows`` of a dimension (None: all of it)."""
    if size == ELLIPSIS or not windows or None in windows:
        return str(size)
    lo, hi = windows[0]
    for start, end in windows[1:]:
        lo = _pick(lo, start, lower=True)
        hi = _pick(hi, end, lower=False)
        if lo is None or hi is None:
            return str(size)
    return str(hi - lo)


def _pick(a: Dim | None, b: Dim, lower: bool) -> Dim | None:
    """The lower (or higher) of two dimensions, None when that depends on the symbols."""
    if a is None:
        return None
    b_above = (b - a).nonneg()
    if b_above is None:
        return None
    return (a if b_above else b) if lower else (b if b_above else a)


def _strings(items) -> ir.ArrayAttr:
    return ir.ArrayAttr.get([ir.StringAttr.get(s) for s in items])
