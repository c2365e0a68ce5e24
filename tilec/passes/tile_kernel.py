"""tile-kernel: fused groups (tensor level) -> kernel-level IR.

In: functions partitioned by tile-fuse into ``tile.fused`` groups (or, with option
``all=true``, functions without groups, each then one kernel).  Out: each group outlined into
a private kernel function called from where the group was (the calling function becomes the
host-side schedule: checks, kernel calls, return), whose body describes ONE row of the
kernel's grid (see :mod:`tilec.tiling.rows`):

    func.func private @swiglu__fused0(%arg0: tensor<?x?x?xf16, [...]>) -> tensor<...>
        attributes {tile.kernel = {grid = ["batch", "seq"], schedule = "rows", tile_rows = 0,
                                   row_bytes = "6*hidden", whole_bytes = "0", ...}}
      %0 = "tile.load_row"(%arg0) {axes = array<i64: 0, 1>, space = "local", depth = 1}
      ... the group's ops on rows, each with tile.space = "local" | "register" ...
      %9 = "tile.store_row"(%8) {axes = array<i64: 0, 1>, space = "local", depth = 1}
      return %9

Per target description (option ``target=cpu|ascend|ptx``): every row buffer's memory space
(``local``; ``global`` for an input or output row the target reads or writes where it is,
``register`` for a value it keeps in registers), the queue depth (2 = double buffering where
the target overlaps copies with compute), and the kernel's tile parameters
(:class:`tilec.tiling.tiler.TileParams`: the schedule, the bytes of local memory one row
needs as a dimension polynomial padded to the target's alignment per buffer, the rows per
tile, whether a row streams through local memory in chunks, the two-dimensional blocks of a
layout change).  Only buffers that the target holds whole can exceed its local memory; that
is a located error naming the function, its buffers and the numbers (see
:mod:`tilec.tiling.tiler` for what that is).

A float16/bfloat16 value that one kernel stores only for other kernels (no ``return`` of the
host reads it) is stored as float32 (language.md: it is no ``return`` and keeps at least
float32 precision): the host's call result, the producer's result and ``tile.store_row``,
and the readers' arguments are float32, while the rows on both sides keep the value's type
(:func:`widen`); staged buffers are sized by the float32 element.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from ..diagnostics import TilecError
from ..dialect import BUFFERS_ATTR, FUSED_ATTR, KERNEL_ATTR, REUSE_ATTR
from ..dialect.locations import span_of
from ..dialect.walk import nested_ops
from ..dialect.types import TensorInfo, stored_dtype, tensor_info
from ..dims import ELLIPSIS, Dim, parse_dim
from ..mlir import func, ir
from ..pipeline import PassContext, option, register
from ..tiling.rows import NONE, RowPlan, plan_rows
from ..tiling.split import split_reduction
from ..tiling.attention import attention_tile, scores_function
from ..tiling.targets import TARGETS, TargetDesc
from ..tiling.gemm import gemm_operands
from ..tiling.tiler import (ATTENTION, Buffer, GemmOperands, TileParams, layout_block,
                            parse_gemm_override, plan_gemm, plan_row_tiles)
from .tile_cache_hint import INPUT_HINTS_ATTR


def _i64(v: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)


def _strs(items) -> ir.ArrayAttr:
    return ir.ArrayAttr.get([ir.StringAttr.get(str(x)) for x in items])


def _row_attrs(op: Any, plan: RowPlan) -> dict[str, ir.Attribute]:
    """``op``'s attributes rewritten for rows (axes renumbered, grid entries dropped)."""
    attrs = {name: op.attributes[name] for name in op.attributes}
    name = op.operation.name
    if name == "tile.slice":
        x = op.operands[0]
        shape = tensor_info(x.type).shape
        first = 1 if shape and shape[0] == ELLIPSIS else 0
        grid_axes = set(plan.axes(x))
        keep = [i for i in range(len(shape) - first) if i + first not in grid_axes]
        for key in ("starts", "ends"):
            vals = list(attrs[key])
            attrs[key] = ir.ArrayAttr.get([vals[i] for i in keep])
    elif name in ("tile.concat", "tile.softmax"):
        res = op.results[0]
        rank = len(tensor_info(res.type).shape)
        axis = rank + int(ir.IntegerAttr(attrs["axis"]).value)
        row_rank = len(plan.row_shape(res))
        attrs["axis"] = _i64(plan.row_axis(res, axis) - row_rank)
    elif name == "tile.reduce":
        x = op.operands[0]
        rank = len(tensor_info(x.type).shape)
        row_rank = len(plan.row_shape(x))
        axes = [plan.row_axis(x, rank + int(a)) - row_rank for a in attrs["axes"]]
        attrs["axes"] = ir.DenseI64ArrayAttr.get(sorted(axes))
    elif name == "tile.iota":
        # a row of the whole iota: its shape, and which axis each grid dimension indexes
        res = op.results[0]
        attrs["shape"] = _strs(tensor_info(res.type).shape)
        attrs["axes"] = ir.DenseI64ArrayAttr.get(list(plan.axes(res)))
    elif name == "tile.transpose":
        x, res = op.operands[0], op.results[0]
        perm = [int(p) for p in attrs["perm"]]
        taken = set(plan.axes(res))
        attrs["perm"] = ir.DenseI64ArrayAttr.get(
            [plan.row_axis(x, perm[a]) for a in range(len(perm)) if a not in taken])
    return attrs


def _arg_name(fn: Any, i: int) -> str:
    if "arg_attrs" in fn.attributes:
        attrs = ir.DictAttr(ir.ArrayAttr(fn.attributes["arg_attrs"])[i])
        if "tile.name" in attrs:
            return ir.StringAttr(attrs["tile.name"]).value
    return f"in{i}"


def _hint_levels(fn: Any) -> dict[int, str]:
    """Argument number -> the level of its ``cache_hint``, for the hinted inputs of a group."""
    if FUSED_ATTR not in fn.attributes:
        return {}
    fused = ir.DictAttr(fn.attributes[FUSED_ATTR])
    if INPUT_HINTS_ATTR not in fused:
        return {}
    hints = [ir.DictAttr(h) for h in fused[INPUT_HINTS_ATTR]]
    return {i: ir.StringAttr(h["level"]).value for i, h in enumerate(hints) if "level" in h}


def _erase_dead(block: Any) -> None:
    """Drop ops whose results nothing reads (at -O0 nothing else has): a dead value has no
    place in a row plan.  Users go first, so no op is erased while it still has uses."""
    for op in reversed(list(block.operations)):
        if op.results and not any(list(r.uses) for r in op.results):
            op.erase()


def kernelize(fn: Any, target: TargetDesc, wide: "Widened | None" = None,
              gemm: Optional[tuple[int, int, int]] = None) -> None:
    """Rewrite the body of ``fn`` (one fused group) into kernel-level IR for ``target``;
    ``wide`` names the arguments and results that :func:`widen` stores as float32, ``gemm``
    overrides the tile of a gemm schedule."""
    wide = wide or Widened()
    block = fn.regions[0].blocks[0]
    _erase_dead(block)
    ret = list(block.operations)[-1]
    plan = plan_rows(block, list(ret.operands))
    depth = 2 if target.double_buffer else 1
    levels = _hint_levels(fn)
    new: dict[Any, Any] = {}
    buffers: list[Buffer] = []
    ops = [op for op in block.operations if op.operation.name != "func.return"]
    with fn.location, ir.InsertionPoint.at_block_begin(block):
        for i, arg in enumerate(block.arguments):
            if tensor_info(arg.type).shape == () or not list(arg.uses):
                new[arg] = arg
                continue
            reused = levels.get(i) in target.resident_levels and NONE in plan.axes(arg)
            staged = target.staged_io or reused
            load = ir.Operation.create(
                "tile.load_row", results=[plan.row_type(arg)], operands=[arg],
                attributes={"axes": ir.DenseI64ArrayAttr.get(list(plan.axes(arg))),
                            "space": ir.StringAttr.get("local" if staged else "global"),
                            "depth": _i64(depth)})
            new[arg] = load.result
            if staged:
                buffers.append(Buffer(_arg_name(fn, i),
                                      wide.stored(tensor_info(load.result.type), i in wide.args),
                                      depth))
        for op in ops:
            res = op.results[0] if op.results else None
            results = [plan.row_type(res)] if res is not None else []
            clone = ir.Operation.create(
                op.operation.name, results=results, operands=[new[x] for x in op.operands],
                attributes=_row_attrs(op, plan), loc=op.location)
            if res is not None:
                row = tensor_info(clone.result.type)
                staged = target.staged_ops is None or op.operation.name in target.staged_ops
                space = "local" if staged and row.shape != () else "register"
                clone.attributes["tile.space"] = ir.StringAttr.get(space)
                new[res] = clone.result
                if space == "local":
                    buffers.append(Buffer(f"{op.operation.name[len('tile.'):]}#{len(buffers)}",
                                          row, 1))
        outs = []
        for k, v in enumerate(ret.operands):
            axes = plan.axes(v)
            if NONE in axes:
                raise TilecError("internal: an output of a kernel is not indexed by its grid",
                                 span_of(fn.location))
            store = ir.Operation.create(
                "tile.store_row", results=[v.type], operands=[new[v]],
                attributes={"axes": ir.DenseI64ArrayAttr.get(list(axes)),
                            "space": ir.StringAttr.get("local" if target.staged_io else "global"),
                            "depth": _i64(depth)},
                loc=ret.location)
            if target.staged_io:
                buffers.append(Buffer(f"out{k}", wide.stored(tensor_info(new[v].type),
                                                             k in wide.results), depth))
            outs.append(store.result)
        ir.Operation.create("func.return", operands=outs, loc=ret.location)
    across = any(_reads_across_rows(plan, arg) for arg in block.arguments)
    block_shape = layout_block([op.operation.name for op in ops],
                               [tensor_info(new[v].type) for v in ret.operands], plan.grid,
                               across, target)
    ret.erase()
    for op in reversed(ops):
        op.erase()
    split = split_reduction(block) if target.splits_reductions and not plan.grid else None
    with fn.location:
        _annotate(fn, plan, buffers, target, block_shape, gemm, split)


def _reads_across_rows(plan: RowPlan, arg: Any) -> bool:
    """Whether the row of argument ``arg`` steps through it across its last axis, which the
    grid indexes: each element of the row on a cache line of its own."""
    shape = tensor_info(arg.type).shape
    return bool(shape) and len(shape) - 1 in plan.axes(arg) and plan.row_shape(arg) != ()


def _symbols(fn: Any) -> list[str]:
    """Every shape symbol the kernel's types mention, sorted: the order of its ``dims``."""
    found: set[str] = set()
    types = list(fn.type.inputs) + list(fn.type.results)
    for op in fn.regions[0].blocks[0].operations:
        types.extend(r.type for r in op.results)
        for name in ("start", "expr"):   # tile.iota, tile.dim
            if op.operation.name in ("tile.iota", "tile.dim") and name in op.attributes:
                found |= parse_dim(ir.StringAttr(op.attributes[name]).value).symbols()
    for t in types:
        for d in tensor_info(t).shape:
            if d != ELLIPSIS:
                found |= d.symbols()
    return sorted(found)


def _annotate(fn: Any, plan: RowPlan, buffers: list[Buffer], target: TargetDesc,
              block: tuple[int, int], gemm: Optional[tuple[int, int, int]],
              split: tuple[Dim, Dim] | None) -> None:
    name = ir.StringAttr(fn.attributes["sym_name"]).value
    params = plan_row_tiles(name, span_of(fn.location), plan.grid, buffers, target, block,
                            split)
    operands = gemm_operands(fn, tuple(plan.grid)) if target.gemm is not None else None
    if operands is not None:
        params = plan_gemm(params, operands, target, gemm)
    tile = attention_tile(fn, tuple(plan.grid), target.attention_types) \
        if target.attention else None
    if tile is not None:
        params = dataclasses.replace(params, schedule=ATTENTION, attention=tile)
    fn.attributes[KERNEL_ATTR] = ir.DictAttr.get({
        "target": ir.StringAttr.get(target.name),
        "symbols": _strs(_symbols(fn)),
        "local_bytes": _i64(target.local_bytes),
        **params.attributes(),
    })


def outline(fn: Any) -> list[Any]:
    """Move every ``tile.fused`` group of ``fn`` into a private function marked
    ``tile.fused`` (``@FN__kGROUP``), called where the group was; the kernels made."""
    kernels = []
    fn_name = ir.StringAttr(fn.attributes["sym_name"]).value
    groups = [op for op in fn.regions[0].blocks[0].operations
              if op.operation.name == "tile.fused"]
    for k, fused in enumerate(groups):
        body = fused.regions[0].blocks[0]
        yield_op = list(body.operations)[-1]
        ftype = ir.FunctionType.get([a.type for a in body.arguments],
                                    [v.type for v in yield_op.operands])
        with fused.location, ir.InsertionPoint.after(fn):
            kernel = func.FuncOp(f"{fn_name}__k{k}", ftype, visibility="private")
            entry = kernel.add_entry_block()
        info = {name: fused.attributes[name] for name in fused.attributes
                if name.startswith("tile.")}
        kernel.attributes[FUSED_ATTR] = ir.DictAttr.get(info)
        for old, new in zip(body.arguments, entry.arguments):
            old.replace_all_uses_with(new)
        with fused.location, ir.InsertionPoint(entry):
            for op in list(body.operations)[:-1]:
                op.detach_from_parent()
                ir.InsertionPoint.current.insert(op)
            func.ReturnOp(list(yield_op.operands), loc=yield_op.location)
        yield_op.erase()
        with fused.location, ir.InsertionPoint(fused):
            call = func.CallOp(list(ftype.results), kernel.sym_name.value,
                               list(fused.operands))
        for old, new in zip(fused.results, call.results):
            old.replace_all_uses_with(new)
        fused.erase()
        kernels.append(kernel)
    return kernels


@dataclass(frozen=True)
class Widened:
    """Which arguments and results of one kernel pass float16/bfloat16 values between kernels
    and so are stored as float32 (:func:`widen`)."""
    args: frozenset[int] = frozenset()
    results: frozenset[int] = frozenset()

    @staticmethod
    def stored(info: TensorInfo, wide: bool) -> TensorInfo:
        return info.with_dtype(stored_dtype(info.dtype)) if wide else info


def _callee(call: Any) -> str:
    return ir.FlatSymbolRefAttr(call.attributes["callee"]).value


def _passed_between_kernels(fn: Any) -> list[tuple[Any, int]]:
    """(kernel call, result number) of each float16/bfloat16 value that kernels of ``fn``
    store only for other kernels of ``fn`` (no ``return`` of ``fn`` reads it)."""
    found = []
    for op in fn.regions[0].blocks[0].operations:
        if op.operation.name != "func.call":
            continue
        for j, r in enumerate(op.results):
            users = [u.owner.name for u in r.uses]
            if stored_dtype(tensor_info(r.type).dtype) != tensor_info(r.type).dtype and users \
                    and all(u == "func.call" for u in users):
                found.append((op, j))
    return found


def split_returned(fn: Any, kernels: list[Any]) -> None:
    """A float16/bfloat16 kernel result that ``fn`` returns and other kernels read: the
    ``return`` rounds it, the readers must not see it rounded (language.md: a value one kernel
    stores for another keeps at least float32 precision).  The kernel returns it twice, the
    second time for the readers alone, which :func:`widen` then stores as float32."""
    by_name = {ir.StringAttr(k.attributes["sym_name"]).value: k for k in kernels}
    fresh = 1 + max((b for k in kernels for b in _fused_array(k, BUFFERS_ATTR)), default=-1)
    calls = [op for op in fn.regions[0].blocks[0].operations if op.operation.name == "func.call"
             and _callee(op) in by_name]
    for call in calls:
        twice = [j for j, r in enumerate(call.results)
                 if stored_dtype(tensor_info(r.type).dtype) != tensor_info(r.type).dtype
                 and {u.owner.name for u in r.uses} >= {"func.return", "func.call"}]
        if not twice:
            continue
        kernel = by_name[_callee(call)]
        ret = list(kernel.regions[0].blocks[0].operations)[-1]
        with ret.location, ir.InsertionPoint(ret):
            func.ReturnOp([*ret.operands, *(ret.operands[j] for j in twice)])
        ret.erase()
        _retype(kernel)
        if FUSED_ATTR in kernel.attributes:   # the new output: a buffer of its own
            numbers = list(range(fresh, fresh + len(twice)))
            fresh += len(twice)
            _set_fused_arrays(kernel, {BUFFERS_ATTR: _fused_array(kernel, BUFFERS_ATTR) + numbers,
                                       REUSE_ATTR: _fused_array(kernel, REUSE_ATTR)
                                       + [-1] * len(twice)})
        with call.location, ir.InsertionPoint(call):
            types = [r.type for r in call.results]
            split = func.CallOp([*types, *(types[j] for j in twice)], _callee(call),
                                list(call.operands))
        for old, new in zip(call.results, split.results):
            old.replace_all_uses_with(new)
        for n, j in enumerate(twice, start=len(types)):
            for use in [u for u in split.results[j].uses if u.owner.name == "func.call"]:
                use.owner.operands[use.operand_number] = split.results[n]
        call.erase()


def _fused_array(kernel: Any, name: str) -> list[int]:
    if FUSED_ATTR not in kernel.attributes:
        return []
    return [int(x) for x in ir.DenseI64ArrayAttr(ir.DictAttr(kernel.attributes[FUSED_ATTR])[name])]


def _set_fused_arrays(kernel: Any, arrays: dict[str, list[int]]) -> None:
    fused = ir.DictAttr(kernel.attributes[FUSED_ATTR])
    entries = {fused[i].name: fused[i].attr for i in range(len(fused))}
    entries.update({k: ir.DenseI64ArrayAttr.get(v) for k, v in arrays.items()})
    kernel.attributes[FUSED_ATTR] = ir.DictAttr.get(entries)


def widened(fn: Any) -> dict[str, Widened]:
    """Kernel name -> its arguments and results that pass a float16/bfloat16 value between
    kernels of ``fn``: language.md's numerical contract keeps such a value in at least
    float32, so it is stored as float32 (the rows the kernels compute keep their type)."""
    args: dict[str, set[int]] = {}
    results: dict[str, set[int]] = {}
    for call, j in _passed_between_kernels(fn):
        results.setdefault(_callee(call), set()).add(j)
        for use in call.results[j].uses:
            args.setdefault(_callee(use.owner), set()).add(use.operand_number)
    return {k: Widened(frozenset(args.get(k, ())), frozenset(results.get(k, ())))
            for k in args.keys() | results.keys()}


def _wide_type(t: ir.Type) -> ir.Type:
    info = tensor_info(t)
    return info.with_dtype(stored_dtype(info.dtype)).to_mlir()


def widen(fn: Any, kernels: dict[str, Any]) -> None:
    """Retype the buffers :func:`widened` names as float32: the call results in ``fn``, the
    producing kernel's result and ``tile.store_row``, the reading kernels' arguments (their
    ``tile.load_row`` still gives a row of the value's own type, unrounded)."""
    for call, j in _passed_between_kernels(fn):
        result = call.results[j]
        readers = [(_callee(u.owner), u.operand_number) for u in result.uses]
        result.set_type(_wide_type(result.type))
        producer = kernels[_callee(call)]
        ret = list(producer.regions[0].blocks[0].operations)[-1]
        ret.operands[j].set_type(_wide_type(ret.operands[j].type))
        _retype(producer)
        for name, i in readers:
            kernels[name].regions[0].blocks[0].arguments[i].set_type(
                _wide_type(kernels[name].regions[0].blocks[0].arguments[i].type))
            _retype(kernels[name])


def _retype(kernel: Any) -> None:
    """Make ``kernel``'s function type that of its entry block and its return."""
    block = kernel.regions[0].blocks[0]
    ret = list(block.operations)[-1]
    kernel.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [a.type for a in block.arguments], [v.type for v in ret.operands]))


def _drop_unapplied_hints(module: ir.Module, pc: PassContext) -> None:
    """``tile.hint`` ops left because tile-cache-hint did not run (as at -O0): each one is a
    warning, since a hint is never dropped silently, and is removed."""
    for hint in nested_ops(module.operation, "tile.hint"):
        name, level = (ir.StringAttr(hint.attributes[a]).value for a in ("name", "level"))
        pc.sink.warn(f"cache_hint({name}, {level}) is not applied: the tile-cache-hint pass did "
                     "not run (it runs at -O1 and above)", span_of(hint.location))
        hint.erase()


@dataclass(frozen=True)
class KernelOptions:
    target: str = option("cpu", choices=lambda: TARGETS)   # the description to tile for
    all: bool = False   # a function without groups is itself one kernel
    # every matmul kernel's tile (tile_m x tile_n x block_k) instead of the target's
    gemm: str = ""


@register("tile-kernel", "build kernel-level IR (grid, rows, buffers) for a target",
          KernelOptions)
def tile_kernel(module: ir.Module, pc: PassContext) -> None:
    """Outline each fused group into a kernel function and kernelize it (module docstring).
    With ``all=true`` a function without groups is itself one kernel."""
    target_name = pc.options.target
    every = pc.options.all
    try:
        gemm = parse_gemm_override(pc.options.gemm)
    except ValueError as e:
        raise TilecError(f"tile-kernel: {e}") from None
    _drop_unapplied_hints(module, pc)
    for fn in list(module.body.operations):
        if fn.operation.name != "func.func" or KERNEL_ATTR in fn.attributes:
            continue
        kernels = outline(fn)
        if not kernels and (every or FUSED_ATTR in fn.attributes):
            kernels = [fn]
        split_returned(fn, kernels)
        wide = widened(fn)
        for kernel in kernels:
            kernelize(kernel, TARGETS[target_name],
                      wide.get(ir.StringAttr(kernel.attributes["sym_name"]).value), gemm)
        with fn.location:
            widen(fn, {ir.StringAttr(k.attributes["sym_name"]).value: k for k in kernels})
        for kernel in kernels:
            _add_scores_function(kernel, TARGETS[target_name])


def _add_scores_function(kernel: Any, target: TargetDesc) -> None:
    """Beside an ``attention`` kernel, its scores function (:mod:`tilec.tiling.attention`),
    with the ``gemm`` schedule of q @ transpose(k), whose epilogue the runtime calls."""
    params = TileParams.of(ir.DictAttr(kernel.attributes[KERNEL_ATTR]))
    if params.attention is None:
        return
    with kernel.location:
        scores = scores_function(kernel, params.attention)
        operands = GemmOperands(params.attention.q, params.attention.k, True, False)
        gemm = plan_gemm(dataclasses.replace(params, attention=None), operands, target)
        scores.attributes[KERNEL_ATTR] = ir.DictAttr.get({
            "target": ir.StringAttr.get(target.name),
            "symbols": _strs(_symbols(scores)),
            "local_bytes": _i64(target.local_bytes),
            "scores_of": ir.StringAttr.get(ir.StringAttr(kernel.attributes["sym_name"]).value),
            **gemm.attributes(),
        })
