"""tile-attention: find attention, ``softmax(S, axis=-1) @ v`` with ``S = q @ transpose(k)``
followed by an element-wise chain, and mark its ops as one kernel.

In: tensor-level tile IR before ``tile-fuse`` (calls inlined, canonicalized).  Out: the same
ops; those of each attention found carry ``tile.attention = N`` (its number in the function),
which tile-fuse makes one group of, that group's ``tile.fused`` op carrying the description
``tile.attention = {causal = B}``.  Its kernel computes one query row of the output from one
row of scores at a time (never the ``[.., s, t]`` scores); the CPU runs it as blocks of query
rows by blocks of keys with an online softmax (``tilec/tiling/attention.py``).

The pattern, from the second matmul ``M2 = P @ V`` back:

- ``P`` is ``softmax(X, axis=-1)``, possibly cast, read by ``M2`` alone;
- ``X`` is reached from ``M1 = Q @ KT`` through element-wise ops only (scale, additive bias,
  ``where`` masks, casts), each read by the next alone; what else they read (a bias, a mask of
  ``iota`` or of an input's comparison, a scalar) is element-wise or data movement of the
  function's arguments, and joins the group where nothing outside it reads it;
- ``KT`` is ``transpose(K)`` of the last two axes, possibly broadcast over leading axes (the
  grouped-query form ``[b, hkv, 1, d, t]`` against ``[b, hkv, g, s, d]``), and ``V`` an
  argument-made value or a broadcast of one;
- an element-wise epilogue of ``M2`` read by nothing else joins too.

A softmax of a matmul whose result (through casts) is the left operand of a matmul but
misses the pattern is left to tile-fuse; the pass says why, at the softmax, as a remark (a
warning ``tilec --verbose`` shows); one that no matmul reads (a classifier's) is not
attention and draws no remark.  ``causal``
is true where a ``where`` mask is ``iota(axis=-1) <= iota(axis=-2, start=t - s)`` (or ``<``,
``>=``, ``>`` spelled either way), so the CPU skips key blocks above the diagonal.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..dialect import ops as t
from ..dialect.types import tensor_info
from ..dialect.locations import span_of
from ..dims import Dim
from ..mlir import func, ir
from ..pipeline import PassContext, register

MARK_ATTR = "tile.attention"
ELEMENTWISE = frozenset(f"tile.{n}" for n in t.ops_of_kind(t.OpKind.ELEMENTWISE))
MOVEMENT = frozenset(f"tile.{n}" for n in t.ops_of_kind(t.OpKind.MOVEMENT))


@dataclass(frozen=True)
class AttentionOptions:
    # the driver sets it from the target description's ``attention``: the targets without a
    # blocked attention kernel run the unfused kernels
    enabled: bool = True
    # the operand types the target's fused kernel takes, space-separated (empty: all), and
    # the largest head dimension it holds (0: any; else a constant multiple of 16 up to it);
    # the others run the unfused kernels
    types: str = ""
    head_max: int = 0


class NearMiss(Exception):
    """Why the ops around a softmax are not attention."""


@register("tile-attention", "mark softmax(q @ transpose(k) ...) @ v as one attention kernel",
          AttentionOptions)
def attention(module: ir.Module, pc: PassContext) -> None:
    if not pc.options.enabled:
        return
    for op in module.body.operations:
        if not isinstance(op, func.FuncOp):
            continue
        block = op.regions[0].blocks[0]
        found = 0
        for inner in list(block.operations):
            if inner.operation.name != "tile.softmax":
                continue
            try:
                members = _match(inner.operation)
            except NearMiss as why:
                pc.sink.remark(f"attention not fused: {why}", span_of(inner.location))
                continue
            if members is None:
                continue
            refused = _refused(members, pc.options)
            if refused:
                pc.sink.remark(f"attention not fused: {refused}", span_of(inner.location))
                continue
            for member in members:
                member.attributes[MARK_ATTR] = t.i64(found)
            found += 1


def _refused(members: list[ir.Operation], options: AttentionOptions) -> str:
    """Why the target's fused kernel cannot take the attention of ``members`` (its first
    op is ``q @ kT``), '' when it can."""
    first = members[0]
    dtype = tensor_info(first.operands[0].type).dtype
    if options.types and dtype not in options.types.split():
        return f"this target fuses attention of {' and '.join(options.types.split())} " \
            f"only, not {dtype}"
    result = _result(members)
    if options.types and result not in options.types.split():
        # the fused kernel rounds the probabilities to q's type before the sum with v
        # (relative to the running max): a float32 result would show it
        return f"the result is {result}: this target's fused attention rounds the " \
            f"probabilities to {dtype}"
    if not options.head_max:
        return ""
    second = next(m for m in members[1:] if m.name == "tile.matmul")
    heads = {tensor_info(first.operands[0].type).shape[-1],
             tensor_info(second.results[0].type).shape[-1]}
    if len(heads) != 1 or any(not isinstance(h, Dim) or h.value is None or h.value % 16
                              or h.value > options.head_max for h in heads):
        return f"this target fuses attention whose q and v have one constant head " \
            f"dimension, a multiple of 16 up to {options.head_max}, not " \
            f"{' and '.join(sorted(str(h) for h in heads))}"
    return ""


def _result(members: list[ir.Operation]) -> str:
    """The element type of the attention's result: the second matmul's, or its casts'."""
    second = next(m for m in members[1:] if m.name == "tile.matmul")
    value = second.results[0]
    while (user := _only_user(value)) is not None and user.name == "tile.cast" \
            and user in members:
        value = user.results[0]
    return tensor_info(value.type).dtype


def _op(value: Any) -> Optional[ir.Operation]:
    """The op defining ``value`` (None for a block argument)."""
    return None if isinstance(value, ir.BlockArgument) else value.owner.operation


def _only_user(value: Any) -> Optional[ir.Operation]:
    users = [u.owner.operation for u in value.uses]
    return users[0] if len(users) == 1 else None


def _same(a: Optional[ir.Operation], b: Optional[ir.Operation]) -> bool:
    return a is not None and b is not None and a == b


def _single_use(value: Any) -> bool:
    return len(list(value.uses)) == 1


def _match(softmax: ir.Operation) -> Optional[list[ir.Operation]]:
    """The ops of the attention around ``softmax``; None where nothing suggests attention (no
    matmul before it), NearMiss where something is missing."""
    first = _scores_matmul(softmax.operands[0])
    if first is None or not _feeds_a_matmul(softmax.results[0]):
        return None
    if int(ir.IntegerAttr(softmax.attributes["axis"])) != -1:
        raise NearMiss("the softmax is not over the last axis (the keys)")
    chain = _chain(softmax.operands[0], first)
    keys = _keys(first.operands[1])
    _check_operands(first, keys[-1].operands[0])
    tail, second = _after_softmax(softmax)
    values = _values(second.operands[1])
    epilogue = _epilogue(second)
    core = [first, *keys, *chain, softmax, *tail, second, *values, *epilogue]
    sides = _sides(chain, set(core))
    return core + sides


def _feeds_a_matmul(value: Any) -> bool:
    """Whether ``value``, through casts, is the left operand of a matmul (``@ v``): without
    one, a softmax of a matmul is a classifier's, not a near-miss of attention."""
    for use in value.uses:
        user = use.owner.operation
        if user.name == "tile.matmul" and user.operands[0] == value or \
                user.name == "tile.cast" and _feeds_a_matmul(user.results[0]):
            return True
    return False


def _scores_matmul(value: Any) -> Optional[ir.Operation]:
    """The matmul that ``value`` is an element-wise function of, through one operand at
    each op (the others must not depend on a matmul)."""
    op = _op(value)
    if op is not None and op.name in ELEMENTWISE:
        found = [m for m in map(_scores_matmul, op.operands) if m is not None]
        return found[0] if len(found) == 1 else None
    return op if op is not None and op.name == "tile.matmul" else None


def _chain(value: Any, first: ir.Operation) -> list[ir.Operation]:
    """The element-wise ops from ``first`` up to ``value``, each read once."""
    if not _single_use(first.results[0]):
        raise NearMiss("the scores q @ transpose(k) are read by more than the softmax chain")
    chain = []
    op = _op(value)
    while op != first:
        if not _single_use(op.results[0]):
            raise NearMiss(f"'{op.name}' between the scores and the softmax is read elsewhere")
        chain.append(op)
        on_path = [v for v in op.operands if _same(_op(v), first) or _same(_scores_matmul(v), first)]
        op = _op(on_path[0])
    return chain


def _check_operands(first: ir.Operation, key: Any) -> None:
    """The shapes the CPU kernel reads: q, k and the scores of one rank, without '...', in
    floating point."""
    values = {"q": first.operands[0], "k": key, "the scores": first.results[0]}
    infos = {name: tensor_info(v.type) for name, v in values.items()}
    if any(i.rank_generic for i in infos.values()):
        raise NearMiss("a shape is rank-generic ('...')")
    if len({len(i.shape) for i in infos.values()}) != 1:
        raise NearMiss("k's rank is not q's (broadcast it to [.., 1, t, d] with reshape)")
    if any(i.dtype not in ("float32", "float16", "bfloat16") for i in infos.values()):
        raise NearMiss("q, k or the scores are not floating point")


def _keys(value: Any) -> list[ir.Operation]:
    """The transpose (and broadcast) that make ``transpose(k)`` of a key made elsewhere."""
    ops = []
    op = _op(value)
    if op is not None and op.name == "tile.broadcast" and _single_use(op.results[0]):
        ops.append(op)
        op = _op(op.operands[0])
    if op is None or op.name != "tile.transpose" or not _swaps_last_two(op) \
            or not _single_use(op.results[0]):
        raise NearMiss("the scores' right operand is not transpose(k) of the last two axes")
    return ops + [op]


def _swaps_last_two(op: ir.Operation) -> bool:
    perm = [int(p) for p in ir.DenseI64ArrayAttr(op.attributes["perm"])]
    n = len(perm)
    return n >= 2 and perm == list(range(n - 2)) + [n - 1, n - 2]


def _after_softmax(softmax: ir.Operation) -> tuple[list[ir.Operation], ir.Operation]:
    """The casts after the softmax and the matmul with v that reads them."""
    tail = []
    value = softmax.results[0]
    while True:
        user = _only_user(value)
        if user is None:
            raise NearMiss("the softmax is read by more than one op (the probabilities "
                           "would be stored)")
        if user.name == "tile.matmul" and user.operands[0] == value:
            return tail, user
        if user.name != "tile.cast":
            raise NearMiss(f"the softmax is followed by '{user.name}', not @ v")
        tail.append(user)
        value = user.results[0]


def _values(value: Any) -> list[ir.Operation]:
    op = _op(value)
    if op is not None and op.name == "tile.broadcast" and _single_use(op.results[0]):
        return [op]
    return []


def _epilogue(second: ir.Operation) -> list[ir.Operation]:
    """The casts after ``second``, each read once (the runtime stores the output in its
    type; anything else is a kernel of its own)."""
    out = []
    value = second.results[0]
    while _single_use(value):
        user = _only_user(value)
        if user.name != "tile.cast":
            break
        out.append(user)
        value = user.results[0]
    return out


def _sides(chain: list[ir.Operation], inside: set[ir.Operation]) -> list[ir.Operation]:
    """What the chain reads besides the scores: element-wise and data-movement ops of
    arguments that nothing outside reads (the rest stays an input of the kernel)."""
    out: list[ir.Operation] = []
    stack = [v for op in chain for v in op.operands]
    while stack:
        op = _op(stack.pop())
        if op is None or op in inside:
            continue
        if op.name not in ELEMENTWISE | MOVEMENT:
            continue    # made by a kernel of its own: an input of the attention's
        if any(u.owner.operation not in inside for u in op.results[0].uses):
            continue
        inside.add(op)
        out.append(op)
        stack.extend(op.operands)
    return out


def attention_description(fused: ir.Operation) -> ir.Attribute:
    """The ``tile.attention`` dictionary of the ``tile.fused`` op of an attention:
    ``causal``, and ``diagonal``, the key index of query row 0's last key (a dimension
    expression: ``-s+t`` when the queries are the last s of t keys)."""
    diagonal = None
    for op in fused.regions[0].blocks[0].operations:
        if op.operation.name == "tile.select" and _stays_minus_inf(op.operation):
            diagonal = diagonal or _causal_diagonal(op.operation)
    entries = {"causal": ir.BoolAttr.get(diagonal is not None)}
    if diagonal is not None:
        entries["diagonal"] = ir.StringAttr.get(diagonal)
    return ir.DictAttr.get(entries)


def _is_minus_inf(value: Any) -> bool:
    op = _op(value)
    return op is not None and op.name == "tile.constant" and \
        ir.FloatAttr(op.attributes["value"]).value == float("-inf")


def _positive(value: Any) -> bool:
    """Whether the scalar ``value`` is positive by construction (a scale)."""
    op = _op(value)
    if op is None:
        return False
    if op.name == "tile.constant":
        return ir.FloatAttr(op.attributes["value"]).value > 0 \
            if isinstance(op.attributes["value"], ir.FloatAttr) else False
    if op.name in ("tile.rsqrt", "tile.sqrt", "tile.exp"):
        return True
    return op.name == "tile.cast" and _op(op.operands[0]) is not None and \
        _op(op.operands[0]).name == "tile.dim"


def _stays_minus_inf(select: ir.Operation) -> bool:
    """Whether a -inf that ``select`` chooses reaches the softmax as -inf: what follows on the
    way is a cast, an addition, a subtraction from it, a product or quotient by a positive
    scale, or another mask to -inf; so a block of keys it masks whole can be skipped."""
    value = select.results[0]
    while True:
        user = _only_user(value)
        if user is None:
            return False
        if user.name == "tile.softmax":
            return True
        others = [v for v in user.operands if v != value]
        ok = user.name in ("tile.cast", "tile.add") or \
            user.name == "tile.sub" and user.operands[0] == value or \
            user.name in ("tile.mul", "tile.div") and len(others) == 1 and \
            _positive(others[0]) and (user.name == "tile.mul" or user.operands[0] == value) or \
            user.name == "tile.select" and user.operands[1] == value and \
            _is_minus_inf(user.operands[2])
        if not ok:
            return False
        value = user.results[0]


def _iota(value: Any) -> Optional[tuple[int, str, int]]:
    """(axis from the end, start, rank) of the iota ``value`` is, through broadcasts."""
    op = _op(value)
    while op is not None and op.name == "tile.broadcast":
        op = _op(op.operands[0])
    if op is None or op.name != "tile.iota":
        return None
    rank = len(ir.RankedTensorType(op.results[0].type).shape)
    axis = int(ir.IntegerAttr(op.attributes["axis"]))
    return axis - rank, ir.StringAttr(op.attributes["start"]).value, rank


def _causal_diagonal(select: ir.Operation) -> Optional[str]:
    """The diagonal of ``where(key <= query + D, scores, -inf)`` (either side), else None."""
    if not _is_minus_inf(select.operands[2]):
        return None
    cmp = _op(select.operands[0])
    while cmp is not None and cmp.name == "tile.broadcast":
        cmp = _op(cmp.operands[0])
    if cmp is None or cmp.name != "tile.cmp":
        return None
    lhs, rhs = _iota(cmp.operands[0]), _iota(cmp.operands[1])
    predicate = ir.StringAttr(cmp.attributes["predicate"]).value
    if predicate == "ge":
        lhs, rhs, predicate = rhs, lhs, "le"
    if predicate != "le" or lhs is None or rhs is None:
        return None
    if lhs[0] != -1 or rhs[0] != -2 or lhs[1] != "0":
        return None
    return rhs[1]
