"""tile-fuse: partition each function into fused groups, one ``tile.fused`` op (one kernel) each.

In: tensor-level tile IR, calls inlined (``tile.check`` and ``tile.hint`` ops may be present).
Out: every ``func.func`` body is ``tile.check`` ops, ``tile.fused`` ops and the return; each
``tile.fused`` region holds its group's ops, the hints on them, and yields what leaves the
group.  First ``x * sigmoid(x)`` (either operand order) becomes ``tile.silu(x)`` and ops whose
results nothing uses are erased (a ``tile.hint`` is a use there, and nowhere else).  A function
that already holds ``tile.fused`` ops is left alone.

Groups are grown greedily from the return backwards: an op joins the groups of its users when
the result is legal and the group graph stays acyclic (merges that would make a cycle, a value
leaving a group and coming back through another, are refused); then groups without a matmul
that read the same tensor are merged where that is legal, so that one kernel reads it once.
The kinds of group:

- element-wise: element-wise ops with the data movement around them (slice, concat, reshape,
  broadcast, transpose, cast, constants); all its outputs have one shape, its kernel's domain;
- reduction: ``tile.reduce`` / ``tile.softmax`` ops that all reduce the same axes of values of
  one shape S (the rows), with their prologue (anything feeding them) and epilogue: what
  depends on a reduction is element-wise, a reshape, or a broadcast of a reduced value back
  over its own rows (the reduced axes kept as 1), each of shape S or the reduced shape (axes
  kept or dropped): never data movement across rows; outputs have those shapes;
- matmul: one ``tile.matmul`` with an element-wise epilogue of its result's shape (bias,
  activation) and the data movement feeding that epilogue; the matmul's own operands are made
  by other groups (its producers stay in their own groups: a kernel tiles a matmul over its
  operands in memory), except (option ``weight-views``, on by default) a right operand that
  is a transpose of the last two axes or a broadcast over the batch of a value made outside:
  the kernel reads that value in place.

A group's inputs are function arguments in order, then values in program order; inputs, and
outputs, of equal type are made adjacent, and a group never has more than ``ops.TYPE_RUNS``
distinct input or output types (the operand segments of ``tile.fused``).

Recompute versus materialise.  A value used by several groups is recomputed (its op cloned into
each consumer group) when its producer cone, back to function arguments and constants, is
element-wise / data movement only, at most ``MAX_RECOMPUTE_OPS`` ops, reads at most one
function argument that is not a scalar, and names no ``cache_hint``ed value.  Each consumer
then reads at most the bytes of that one argument (a slice, broadcast, cast or reshape of it
never reads more than the value itself holds, widened casts read less), where materialising
costs a write, one read per consumer and a kernel; and 8 cheap ops per element stay far below
the ratio of compute to memory bandwidth of every target, so recomputing is free where the
kernels are bound by memory, as these are.  Anything else (a reduction or
matmul result, a long chain, a mix of several inputs, a hinted value) is materialised once,
as an output of its group.  A mask (``tile.cmp``) is always recomputed, its operands then
materialised where they must be: no kernel stores a mask.

Attributes of each ``tile.fused`` op:

- ``tile.group = K``: its position among the function's groups (program order, from 0);
- ``tile.buffers = array<i64: ...>``: the number of each of its outputs; outputs are numbered
  across the function's groups in program order, from 0;
- ``tile.reuse = array<i64: ...>``: per output, the number of the buffer whose memory it takes,
  or -1.  Output ``o`` may take buffer ``b`` when ``b`` is an output of an earlier group that
  no function result is, of the same byte size (elements times element size, compared as Dim
  polynomials, ``...`` standing for the product of the leading dimensions),
  not already taken, and dead once this group has run: read by no later group; and either read
  by no group from this one on (dead before it), or read by this group only element-wise at
  the index it writes ``o`` (``o`` has ``b``'s shape and everything this group computes from
  ``b`` is element-wise of that shape), so a kernel has read each element of ``b`` before it
  writes that element of ``o``.  Function arguments are never buffers (nothing the caller
  passed is overwritten), and an output that the function returns never takes one.

Locations: a clone and the ops of a region keep their op's location; ``tile.fused`` takes its
last op's (the root of the group, which computes one of its outputs).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from ..dialect import ops as t
from ..dialect import BUFFERS_ATTR, ELEMENT_BYTES, REUSE_ATTR, stored_dtype, tensor_info
from ..dims import ELLIPSIS, Dim, Shape
from ..mlir import func, ir
from ..pipeline import PassContext, register
from .tile_attention import MARK_ATTR as ATTENTION_ATTR, attention_description

MAX_RECOMPUTE_OPS = 8

ELEMENTWISE = frozenset(f"tile.{n}" for n in t.ops_of_kind(t.OpKind.ELEMENTWISE))
MOVEMENT = frozenset(f"tile.{n}" for n in t.ops_of_kind(t.OpKind.MOVEMENT))
REDUCTIONS = frozenset(f"tile.{n}" for n in t.ops_of_kind(t.OpKind.REDUCTION))
(MATMUL,) = (f"tile.{n}" for n in t.ops_of_kind(t.OpKind.MATMUL))

GROUP_ATTR = "tile.group"


@dataclass(frozen=True)
class FuseOptions:
    # a matmul's group takes a transposed or batch-broadcast weight it reads in place (the
    # driver sets it from the target description's ``weight_views``)
    weight_views: bool = True
    # ... only for a matmul of these element types (space-separated; "": any)
    weight_view_types: str = ""


@register("tile-fuse", "partition functions into fused groups (tile.fused), one per kernel",
          FuseOptions)
def fuse(module: ir.Module, pc: PassContext) -> None:
    """Rewrite silu, then partition every function not partitioned yet (module docstring)."""
    for op in module.body.operations:
        if not isinstance(op, func.FuncOp):
            continue
        block = op.regions[0].blocks[0]
        if any(o.operation.name == t.FusedOp.OPERATION_NAME for o in block.operations):
            continue
        _rewrite_silu(block)
        _erase_dead(block)
        Partition(block, pc.options.weight_views,
                  frozenset(pc.options.weight_view_types.split())).run()


# ---------------------------------------------------------------------------------------------
# Rewrites before partitioning


def _rewrite_silu(block: ir.Block) -> None:
    """``x * sigmoid(x)`` and ``sigmoid(x) * x`` -> ``tile.silu(x)``, at the mul's location."""
    for op in [o.operation for o in block.operations]:
        if op.name != "tile.mul":
            continue
        x = _silu_operand(*op.operands)
        if x is None or x.type != op.results[0].type:
            continue
        with ir.InsertionPoint(op):
            silu = ir.Operation.create("tile.silu", results=[x.type], operands=[x],
                                       loc=op.location)
        op.results[0].replace_all_uses_with(silu.results[0])
        op.erase()


def _silu_operand(lhs: ir.Value, rhs: ir.Value) -> ir.Value | None:
    for x, s in ((lhs, rhs), (rhs, lhs)):
        if isinstance(s, ir.OpResult) and s.owner.name == "tile.sigmoid" \
                and s.owner.operands[0] == x:
            return x
    return None


def _erase_dead(block: ir.Block) -> None:
    """Erase ops whose results nothing uses (tile ops are pure), last first."""
    for op in reversed(list(block.operations)):
        if op.results and all(not list(r.uses) for r in op.results):
            op.erase()


# ---------------------------------------------------------------------------------------------
# The partition


@dataclass(eq=False)
class Node:
    """One op of the function, or a clone of one made to recompute it in another group."""

    op: ir.Operation
    index: int  # position of ``op`` in the function: a topological order, shared by clones
    operands: list[Source]
    group: Group = field(init=False)

    @property
    def type(self) -> ir.Type:
        return self.op.results[0].type

    @property
    def shape(self) -> Shape:
        return tensor_info(self.type).shape


Source = Node | int  # an op's value, or a function argument by position


@dataclass(eq=False)
class Group:
    """A set of nodes that becomes one ``tile.fused`` op; an attention (tile-attention's
    mark) is sealed: it takes no other node and joins no other group."""

    nodes: list[Node]
    attention: bool = False


@dataclass
class GroupPlan:
    """A group ready to be built: members in order, and its inputs and outputs ordered so
    that equal types are adjacent (see ``ops.TYPE_RUNS``)."""

    members: list[Node]
    inputs: list[Source]
    outputs: list[Node]


class Partition:
    """The groups of one function body and how to build them."""

    def __init__(self, block: ir.Block, weight_views: bool = True,
                 weight_view_types: frozenset[str] = frozenset()) -> None:
        self.weight_views = weight_views
        self.weight_view_types = weight_view_types
        self.arguments = list(block.arguments)
        ops = [op.operation for op in block.operations]  # not OpViews: tile.hint has a `name`
        self.ret = ops[-1]
        by_value: dict[ir.Value, Node] = {}
        self.nodes: list[Node] = []
        self.hints: list[tuple[ir.Operation, Source]] = []
        self.users: dict[Node, list[Node]] = {}
        for index, op in enumerate(ops[:-1]):
            if op.name == "tile.check":
                continue
            sources = [self._source(v, by_value) for v in op.operands]
            if op.name == "tile.hint":
                self.hints.append((op, sources[0]))
                continue
            node = Node(op, index, sources)
            node.group = Group([node])
            by_value[op.results[0]] = node
            self.nodes.append(node)
            self.users[node] = []
            for s in dict.fromkeys(sources):
                if isinstance(s, Node):
                    self.users[s].append(node)
        self.returned = [self._source(v, by_value) for v in self.ret.operands]
        self.hinted = {s for _, s in self.hints if isinstance(s, Node)}

    def _source(self, value: ir.Value, by_value: dict[ir.Value, Node]) -> Source:
        if isinstance(value, ir.BlockArgument):
            return value.arg_number
        return by_value[value]

    # grouping -------------------------------------------------------------------------------
    def run(self) -> None:
        """Group the function's ops, then replace them by one ``tile.fused`` op per group."""
        self._group_attention()
        for node in reversed(list(self.nodes)):
            consumers = self._consumer_groups(node)
            if len(consumers) > 1 and (self._recomputable(node) or _is_mask(node)):
                for group in consumers[1:]:
                    self._clone_into(node, group)
            for group in self._consumer_groups(node):
                self._try_merge(node.group, group)
        self._merge_siblings()
        plans = [self._plan(g) for g in self._ordered_groups()]
        buffers, reuse = self._reuse(plans)
        self._build(plans, buffers, reuse)

    def _group_attention(self) -> None:
        """One sealed group of the ops of each attention that tile-attention marked."""
        marked: dict[int, list[Node]] = {}
        for node in self.nodes:
            if ATTENTION_ATTR in node.op.attributes:
                marked.setdefault(int(ir.IntegerAttr(node.op.attributes[ATTENTION_ATTR])),
                                  []).append(node)
        for nodes in marked.values():
            group = Group(nodes, attention=True)
            for node in nodes:
                node.group = group

    def _merge_siblings(self) -> None:
        """Merge groups without a matmul that read the same tensor (not a scalar), where that
        is legal, so that one kernel reads it once."""
        for source in [*range(len(self.arguments)), *self.nodes]:
            if not tensor_info(self._type(source)).shape:
                continue
            readers = [n for n in self.nodes if source in n.operands
                       and (isinstance(source, int) or n.group is not source.group)]
            groups = [g for g in dict.fromkeys(n.group for n in readers)
                      if all(n.op.name != MATMUL for n in g.nodes)]
            for group in groups[1:]:
                self._try_merge(group, groups[0])

    def _consumer_groups(self, node: Node) -> list[Group]:
        """The other groups that read ``node``, in the order of their first reader."""
        groups = dict.fromkeys(u.group for u in self.users[node])
        groups.pop(node.group, None)
        return list(groups)

    def _recomputable(self, node: Node) -> bool:
        """The recompute rule of the module docstring."""
        cone: set[Node] = set()
        tensor_args: set[int] = set()
        stack = [node]
        while stack:
            n = stack.pop()
            if n in cone:
                continue
            if n in self.hinted or n.op.name not in ELEMENTWISE | MOVEMENT:
                return False
            cone.add(n)
            for s in n.operands:
                if isinstance(s, Node):
                    stack.append(s)
                elif tensor_info(self.arguments[s].type).shape:
                    tensor_args.add(s)
        return len(cone) <= MAX_RECOMPUTE_OPS and len(tensor_args) <= 1

    def _clone_into(self, node: Node, group: Group) -> None:
        """Give ``group`` its own copy of ``node`` if the result is a legal group."""
        clone = Node(node.op, node.index, list(node.operands))
        clone.group = Group([clone])
        readers = [u for u in self.users[node] if u.group is group]
        self._redirect(readers, node, clone)
        self.users[clone] = readers
        for s in dict.fromkeys(clone.operands):
            if isinstance(s, Node):
                self.users[s].append(clone)
        if self._try_merge(clone.group, group):
            self.nodes.append(clone)
            return
        self._redirect(readers, clone, node)
        for s in dict.fromkeys(clone.operands):
            if isinstance(s, Node):
                self.users[s].remove(clone)
        del self.users[clone]

    def _redirect(self, readers: list[Node], old: Node, new: Node) -> None:
        for r in readers:
            r.operands = [new if s is old else s for s in r.operands]
            self.users[old].remove(r)
        self.users.setdefault(new, []).extend(readers)

    def _try_merge(self, a: Group, b: Group) -> bool:
        """Merge group ``a`` into ``b`` if that is legal and makes no cycle."""
        if a.attention or b.attention:
            return False
        members = set(a.nodes) | set(b.nodes)
        if self._path_between(a, b) or self._path_between(b, a) or not self._legal(members):
            return False
        for n in a.nodes:
            n.group = b
        b.nodes.extend(a.nodes)
        a.nodes.clear()
        return True

    def _successors(self, group: Group) -> set[Group]:
        return {u.group for n in group.nodes for u in self.users[n]} - {group}

    def _path_between(self, a: Group, b: Group) -> bool:
        """Whether a path leads from ``a`` to ``b`` through some other group, so that merging
        them would make a cycle."""
        seen: set[Group] = set()
        stack = list(self._successors(a) - {b})
        while stack:
            g = stack.pop()
            if g is b:
                return True
            if g not in seen:
                seen.add(g)
                stack.extend(self._successors(g))
        return False

    # legality -------------------------------------------------------------------------------
    def _used_outside(self, node: Node, members: set[Node]) -> bool:
        return node in self.returned or any(u not in members for u in self.users[node])

    def _legal(self, members: set[Node]) -> bool:
        """Whether ``members`` form one of the three kinds of group (module docstring)."""
        outputs = [n for n in members if self._used_outside(n, members)]
        inputs = {s for n in members for s in n.operands if s not in members}
        input_types = {self._type(s) for s in inputs}
        if len(input_types) > t.TYPE_RUNS or len({n.type for n in outputs}) > t.TYPE_RUNS:
            return False
        names = [n.op.name for n in members]
        if any(name not in ELEMENTWISE | MOVEMENT | REDUCTIONS | {MATMUL} for name in names):
            return len(members) == 1
        matmuls = [n for n in members if n.op.name == MATMUL]
        reductions = [n for n in members if n.op.name in REDUCTIONS]
        if matmuls:
            return not reductions and len(matmuls) == 1 and self._matmul_legal(
                matmuls[0], members, outputs)
        if reductions:
            return self._reduction_legal(reductions, members, outputs)
        return len({n.shape for n in outputs}) <= 1

    def _matmul_legal(self, matmul: Node, members: set[Node], outputs: list[Node]) -> bool:
        lhs, rhs = matmul.operands
        if lhs in members or rhs in members and not self._weight_view(rhs, matmul, members):
            return False
        epilogue = self._downstream([matmul], members)
        return all(n.op.name in ELEMENTWISE and n.shape == matmul.shape for n in epilogue) \
            and all(n.shape == matmul.shape for n in outputs)

    def _weight_view(self, node: Node, matmul: Node, members: set[Node]) -> bool:
        """Whether ``node``, the right operand of ``matmul``, is a view of a value made
        outside the group that a matmul kernel reads in place: a transpose of its last two
        axes (a Linear weight ``[.., N, K]``) or a broadcast of a ``[K, N]`` over the batch,
        read by the matmul alone."""
        if not self.weight_views or self.users[node] != [matmul] \
                or any(s in members for s in node.operands):
            return False
        types = {tensor_info(matmul.type).dtype, tensor_info(node.op.operands[0].type).dtype}
        if self.weight_view_types and not types <= self.weight_view_types:
            return False
        if node.op.name == "tile.transpose":
            perm = list(ir.DenseI64ArrayAttr(node.op.attributes["perm"]))
            n = len(perm)
            return n >= 2 and perm == list(range(n - 2)) + [n - 1, n - 2]
        source = _operand_shape(node)
        return node.op.name == "tile.broadcast" and len(source) == 2 and \
            tuple(source) == tuple(node.shape[-2:])

    def _reduction_legal(self, reductions: list[Node], members: set[Node],
                         outputs: list[Node]) -> bool:
        rows = {_row(n) for n in reductions}
        if len(rows) != 1:
            return False
        (row,) = rows
        kept, dropped = _reduced(*row)
        shapes = {row[0], kept, dropped}
        # a broadcast stretches reduced axes back over the row, never other rows' values
        spread = {kept} | ({dropped} if dropped == () else set())
        epilogue = self._downstream(reductions, members)
        return all(n.shape in shapes and (
            n.op.name in ELEMENTWISE | REDUCTIONS | {"tile.reshape"}
            or n.op.name == "tile.broadcast" and _operand_shape(n) in spread)
            for n in epilogue) and all(n.shape in shapes for n in outputs)

    def _downstream(self, roots: Iterable[Node], members: set[Node]) -> set[Node]:
        """The members computed from ``roots`` (excluded), transitively."""
        seen: set[Node] = set()
        stack = [u for r in roots for u in self.users[r] if u in members]
        while stack:
            n = stack.pop()
            if n not in seen:
                seen.add(n)
                stack.extend(u for u in self.users[n] if u in members)
        return seen

    def _type(self, source: Source) -> ir.Type:
        return self.arguments[source].type if isinstance(source, int) else source.type

    # planning -------------------------------------------------------------------------------
    def _ordered_groups(self) -> list[Group]:
        """The groups in a topological order, ties broken by program order."""
        groups = list(dict.fromkeys(n.group for n in self.nodes))
        preds = {g: {s.group for n in g.nodes for s in n.operands
                     if isinstance(s, Node) and s.group is not g} for g in groups}
        first = {g: min(n.index for n in g.nodes) for g in groups}
        order: list[Group] = []
        while len(order) < len(groups):
            ready = [g for g in groups if g not in order and preds[g] <= set(order)]
            if not ready:
                raise AssertionError("tile-fuse made a cycle between groups")
            order.append(min(ready, key=first.__getitem__))
        return order

    def _plan(self, group: Group) -> GroupPlan:
        members = sorted(group.nodes, key=lambda n: n.index)
        inside = set(members)
        inputs = sorted({s for n in members for s in n.operands if s not in inside},
                        key=_program_order)
        outputs = [n for n in members if self._used_outside(n, inside)]
        return GroupPlan(members, _by_type(inputs, self._type), _by_type(outputs, _node_type))

    def _reuse(self, plans: list[GroupPlan]) -> tuple[dict[Node, int], dict[Node, int]]:
        """The number of every output, and of the buffer each output takes, -1 for none
        (module docstring)."""
        number = {n: i for i, n in enumerate(n for p in plans for n in p.outputs)}
        readers = {n: [k for k, p in enumerate(plans) if n in p.inputs] for n in number}
        free: list[Node] = []  # intermediate buffers nobody has taken, in number order
        reuse: dict[Node, int] = {}
        for k, plan in enumerate(plans):
            for out in plan.outputs:
                taken = None if out in self.returned else next(
                    (b for b in free if _bytes(b) == _bytes(out) and max(readers[b]) <= k
                     and (max(readers[b]) < k or self._in_place(plan, b, out))), None)
                reuse[out] = -1 if taken is None else number[taken]
                if taken is not None:
                    free.remove(taken)
            free += [n for n in plan.outputs if n not in self.returned]
        return number, reuse

    def _in_place(self, plan: GroupPlan, buffer: Node, out: Node) -> bool:
        if buffer not in plan.inputs or out.shape != buffer.shape:
            return False
        readers = [n for n in plan.members if buffer in n.operands]
        later = self._downstream(readers, set(plan.members)) | set(readers)
        return all(n.op.name in ELEMENTWISE and n.shape == buffer.shape for n in later)

    # building -------------------------------------------------------------------------------
    def _build(self, plans: list[GroupPlan], buffers: dict[Node, int],
               reuse: dict[Node, int]) -> None:
        outer: dict[Source, ir.Value] = dict(enumerate(self.arguments))
        for k, plan in enumerate(plans):
            fused = self._build_group(plan, outer)
            fused.attributes[GROUP_ATTR] = t.i64(k)
            fused.attributes[BUFFERS_ATTR] = _i64_array(buffers[n] for n in plan.outputs)
            fused.attributes[REUSE_ATTR] = _i64_array(reuse[n] for n in plan.outputs)
            if plan.members[0].group.attention:
                fused.attributes[ATTENTION_ATTR] = attention_description(fused)
        for i, s in enumerate(self.returned):
            self.ret.operands[i] = outer[s]
        for hint, source in self.hints:
            if isinstance(source, Node):
                hint.erase()
        originals = {n.index: n.op for n in self.nodes}
        for index in sorted(originals, reverse=True):
            originals[index].erase()

    def _build_group(self, plan: GroupPlan, outer: dict[Source, ir.Value]) -> ir.Operation:
        with ir.InsertionPoint(self.ret):
            fused = t.fused([outer[s] for s in plan.inputs], [n.type for n in plan.outputs],
                            plan.members[-1].op.location)
        values = [outer[s] for s in plan.inputs]
        block = ir.Block.create_at_start(fused.regions[0], [v.type for v in values],
                                         [v.location for v in values])
        inner: dict[Source, ir.Value] = dict(zip(plan.inputs, block.arguments))
        with ir.InsertionPoint(block):
            for n in plan.members:
                attributes = {k: v for k, v in dict(n.op.attributes).items()
                              if k != ATTENTION_ATTR}
                inner[n] = ir.Operation.create(
                    n.op.name, results=[n.type], operands=[inner[s] for s in n.operands],
                    attributes=attributes, loc=n.op.location).results[0]
            for hint, source in self.hints:
                if isinstance(source, Node) and source.group is plan.members[0].group:
                    ir.Operation.create(hint.name, operands=[inner[source]],
                                        attributes=dict(hint.attributes), loc=hint.location)
            t.yield_([inner[n] for n in plan.outputs], fused.location)
        outer.update(zip(plan.outputs, fused.results))
        return fused


# ---------------------------------------------------------------------------------------------
# Helpers


def _program_order(source: Source) -> tuple[int, int]:
    """Function arguments by position, then values in program order."""
    return (1, source.index) if isinstance(source, Node) else (0, source)


def _node_type(node: Node) -> ir.Type:
    return node.type


Item = TypeVar("Item")


def _by_type(items: Iterable[Item], type_of: Callable[[Item], ir.Type]) -> list[Item]:
    """``items`` with equal types made adjacent, types in order of first appearance."""
    rank = {ty: i for i, ty in enumerate(dict.fromkeys(map(type_of, items)))}
    return sorted(items, key=lambda x: rank[type_of(x)])


def _row(node: Node) -> tuple[Shape, tuple[int, ...]]:
    """The shape a reduction reduces and its (negative) axes."""
    attrs = node.op.attributes
    if node.op.name == "tile.softmax":
        axes: tuple[int, ...] = (ir.IntegerAttr(attrs["axis"]).value,)
    else:
        axes = tuple(attrs["axes"])
    return _operand_shape(node), axes


def _operand_shape(node: Node) -> Shape:
    return tensor_info(node.op.operands[0].type).shape


def _reduced(shape: Shape, axes: Sequence[int]) -> tuple[Shape, Shape]:
    """``shape`` reduced over ``axes``, with the axes kept as 1 and with them dropped."""
    reduced = {len(shape) + a for a in axes}
    kept = tuple(Dim.const(1) if i in reduced else d for i, d in enumerate(shape))
    dropped = tuple(d for i, d in enumerate(shape) if i not in reduced)
    return kept, dropped


def _bytes(node: Node) -> Dim:
    """The byte size of the buffer of an intermediate value (float16/bfloat16 stored as
    float32, see tile-kernel), ``...`` standing for the product of the leading dims."""
    info = tensor_info(node.type)
    size = Dim.const(ELEMENT_BYTES[stored_dtype(info.dtype)])
    for d in info.shape:
        size = size * (Dim.sym(ELLIPSIS) if d == ELLIPSIS else d)
    return size


def _i64_array(values: Iterable[int]) -> ir.Attribute:
    return ir.DenseI64ArrayAttr.get(list(values))


def _is_mask(node: Node) -> bool:
    """Whether ``node`` makes a mask, which no kernel can store: it is recomputed by every
    group that reads it."""
    return tensor_info(node.type).dtype == "bool"
