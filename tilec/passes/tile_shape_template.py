"""tile-shape-template: one specialised clone of a function per shape-template binding.

In: tile IR whose ``func.func`` ops may carry ``tile.templates = {SYM = array<i64: v, ...>}``
(irgen, from ``#pragma shape_template`` and ``--template``).  Out: for every binding (the
cartesian product of the templates) a clone ``NAME__SYM_V[__SYM2_V2]`` placed after the generic
function, with the bound symbols folded into every tensor type, slice bound and ``tile.check``;
the generic function itself unless the option ``no-generic=true``; and the dispatch table
``tile.dispatch`` on the module (see :mod:`tilec.dialect` for the attributes).  A variant the
front end made (``tile.variant_of`` a function of the module, not yet in its dispatch entry:
the other direction of a run-time broadcast) joins that entry, after its own template clones.
A function without ``tile.templates`` (already specialised, or never templated) is left alone,
so running the pass twice changes nothing.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ..diagnostics import TilecError
from ..dialect import (BINDING_ATTR, DISPATCH_ATTR, STRETCH_ATTR, SYMBOLS_ATTR, TEMPLATES_ATTR,
                       VARIANT_OF_ATTR, tensor_info)
from ..dialect.locations import span_of
from ..dialect.walk import nested_ops
from ..dims import Dim, parse_dim
from ..mlir import func, ir
from ..pipeline import PassContext, register

MAX_VARIANTS = 64

Binding = dict[str, int]


@dataclass(frozen=True)
class ShapeTemplateOptions:
    no_generic: bool = False   # drop the generic functions, leaving ``generic = ""``


@register("tile-shape-template",
          "clone each templated function per binding and record the dispatch table",
          ShapeTemplateOptions)
def shape_template(module: ir.Module, pc: PassContext) -> None:
    """Specialise every function that has ``tile.templates``; ``no-generic=true`` drops the
    generic functions, leaving ``generic = ""`` in their dispatch entries."""
    keep_generic = not pc.options.no_generic
    functions = [op for op in module.body.operations if isinstance(op, func.FuncOp)]
    templated = [f for f in functions if TEMPLATES_ATTR in f.attributes
                 and VARIANT_OF_ATTR not in f.attributes]
    attrs = module.operation.attributes
    table = {n.name: n.attr for n in ir.DictAttr(attrs[DISPATCH_ATTR])} \
        if DISPATCH_ATTR in attrs else {}
    listed = {ir.StringAttr(v["fn"]).value for e in table.values()
              for v in ir.DictAttr(e)["variants"]}
    names = {f.name.value for f in functions}
    variants = [f for f in functions if VARIANT_OF_ATTR in f.attributes   # the front end's
                and f.name.value not in listed
                and ir.StringAttr(f.attributes[VARIANT_OF_ATTR]).value in names]
    if not templated and not variants:
        return
    taken = set(names)
    for f in templated:
        name = f.name.value  # before _specialise, which may erase f
        table[name] = _specialise(f, taken, keep_generic)
    for f in variants:
        _add_variant(table, f, taken)
    attrs[DISPATCH_ATTR] = ir.DictAttr.get(table)


def _add_variant(table: dict[str, ir.Attribute], f: func.FuncOp, taken: set[str]) -> None:
    """Add a variant the front end made (``tile.variant_of`` and ``tile.binding`` already set,
    a function analysed with a symbol fixed) to its function's dispatch entry, after that
    entry's variants: first its own template variants, bound as it is and more, then itself."""
    owner = ir.StringAttr(f.attributes[VARIANT_OF_ATTR]).value
    base = {b.name: ir.IntegerAttr(b.attr).value for b in ir.DictAttr(f.attributes[BINDING_ATTR])}
    entry = ir.DictAttr(table[owner]) if owner in table else None
    generic = entry["generic"] if entry is not None else ir.StringAttr.get(owner)
    entries = list(entry["variants"]) if entry is not None else []
    if TEMPLATES_ATTR in f.attributes:
        entries += list(ir.DictAttr(_specialise(f, taken, True, base, owner))["variants"])
    entries.append(ir.DictAttr.get({"fn": ir.StringAttr.get(f.name.value),
                                    "binding": _binding_attr(base)}))
    table[owner] = ir.DictAttr.get({"generic": generic, "variants": ir.ArrayAttr.get(entries)})


def bindings_of(f: func.FuncOp) -> list[Binding]:
    """The cartesian product of ``f``'s templates, symbols in ABI (``tile.symbols``) order."""
    templates = {n.name: list(n.attr) for n in ir.DictAttr(f.attributes[TEMPLATES_ATTR])}
    abi = [ir.StringAttr(s).value for s in f.attributes[SYMBOLS_ATTR]]
    order = sorted(templates, key=lambda s: (abi.index(s) if s in abi else len(abi), s))
    count = math.prod(len(values) for values in templates.values())
    if count > MAX_VARIANTS:
        sizes = " x ".join(f"{len(templates[s])} ({s})" for s in order)
        raise TilecError(f"shape templates of '{f.name.value}' make {sizes} = {count} variants; "
                         f"at most {MAX_VARIANTS} are allowed", span_of(f.location))
    product = [dict(zip(order, values)) for values in itertools.product(*map(templates.get, order))]
    return product + [b for b in _stretched_alone(f, order) if b not in product]


def _stretched_alone(f: func.FuncOp, order: list[str]) -> list[Binding]:
    """Every non-empty set of the stretched symbols (``tile.stretch``) at 1 with the other
    symbols free, most bound first: the generic kernel reads a stretched operand with its own
    strides, right only where the sizes are equal, so a call with some of them 1 needs a
    variant that binds exactly those, whatever the other symbols are."""
    if STRETCH_ATTR not in f.attributes:
        return []
    stretched = {ir.StringAttr(a).value for a in f.attributes[STRETCH_ATTR]}
    stretch = [s for s in order if s in stretched]
    return [{s: 1 for s in chosen} for k in range(len(stretch), 0, -1)
            for chosen in itertools.combinations(stretch, k)]


def variant_name(name: str, binding: Binding) -> str:
    return name + "".join(f"__{sym}_{value}" for sym, value in binding.items())


def binding_text(binding: Binding) -> str:
    return ", ".join(f"{sym} = {value}" for sym, value in binding.items())


def _binding_attr(binding: Binding) -> ir.DictAttr:
    i64 = ir.IntegerType.get_signless(64)
    return ir.DictAttr.get({s: ir.IntegerAttr.get(i64, v) for s, v in binding.items()})


def _specialise(f: func.FuncOp, taken: set[str], keep_generic: bool, base: Binding | None = None,
                owner: str | None = None) -> ir.DictAttr:
    """Insert ``f``'s variants after it, drop ``f`` unless ``keep_generic``; its dispatch
    entry.  ``f`` may itself be a variant of ``owner`` with ``base`` bound: so are its
    clones, with ``base`` in their bindings."""
    name = f.name.value
    bindings = bindings_of(f)
    del f.attributes[TEMPLATES_ATTR]
    if STRETCH_ATTR in f.attributes:
        del f.attributes[STRETCH_ATTR]
    entries = []
    anchor = f.operation
    for binding in bindings:
        vname = variant_name(name, binding)
        if vname in taken:
            raise TilecError(f"variant '{vname}' of '{name}' has the name of another function",
                             span_of(f.location))
        taken.add(vname)
        clone = f.operation.clone(ip=ir.InsertionPoint.after(anchor))
        anchor = clone
        clone.attributes["sym_name"] = ir.StringAttr.get(vname)
        clone.attributes[VARIANT_OF_ATTR] = ir.StringAttr.get(owner or name)
        clone.attributes[BINDING_ATTR] = binding_attr = _binding_attr({**(base or {}),
                                                                       **binding})
        _Folder(binding, vname).function(clone)
        entries.append(ir.DictAttr.get({"fn": ir.StringAttr.get(vname),
                                        "binding": binding_attr}))
    if not keep_generic:
        f.operation.erase()
    return ir.DictAttr.get({"generic": ir.StringAttr.get(name if keep_generic else ""),
                            "variants": ir.ArrayAttr.get(entries)})


# ops with a dimension expression in a string attribute, which a variant folds like its types
DIM_ATTRS = {"tile.iota": ("start",), "tile.dim": ("expr",)}


class _Folder:
    """Substitutes one binding into a cloned function, in place."""

    def __init__(self, binding: Binding, variant: str) -> None:
        self.env = {sym: Dim.const(value) for sym, value in binding.items()}
        self.where = f"in variant '{variant}' ({binding_text(binding)})"

    def function(self, f: ir.Operation) -> None:
        with f.location:
            signature = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
            f.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
                [self.type(t, f) for t in signature.inputs],
                [self.type(t, f) for t in signature.results]))
            for op in nested_ops(f):
                if self.op(op):
                    op.erase()

    def op(self, op: ir.Operation) -> bool:
        """Fold the types of ``op``'s results and block arguments and its dimension
        attributes; True for a check that now always holds."""
        for region in op.regions:
            for block in region.blocks:
                for arg in block.arguments:
                    arg.set_type(self.type(arg.type, op))
        for res in op.results:
            res.set_type(self.type(res.type, op))
        if op.name == "tile.slice":
            for key in ("starts", "ends"):
                bounds = [self.dim(parse_dim(ir.StringAttr(a).value), op)
                          for a in op.attributes[key]]
                op.attributes[key] = ir.ArrayAttr.get([ir.StringAttr.get(str(d)) for d in bounds])
        for key in DIM_ATTRS.get(op.name, ()):   # values, not sizes: they may be negative
            d = parse_dim(ir.StringAttr(op.attributes[key]).value).subst(self.env)
            op.attributes[key] = ir.StringAttr.get(str(d))
        return op.name == "tile.check" and self.check(op)

    def type(self, t: ir.Type, op: ir.Operation) -> ir.Type:
        if not isinstance(t, ir.RankedTensorType) or t.encoding is None:
            return t
        info = tensor_info(t)
        return info.with_dims(tuple(self.dim(d, op) for d in info.dims)).to_mlir()

    def dim(self, d: Dim, op: ir.Operation) -> Dim:
        folded = d.subst(self.env)
        if folded.is_const() and (folded.value is None or folded.value < 0):
            raise TilecError(f"{self.where}: dimension '{d}' is {folded}, not a non-negative "
                             "integer", span_of(op.location))
        return folded

    def check(self, op: ir.Operation) -> bool:
        """Fold a ``tile.check``; True when it now always holds, an error when it never can."""
        attrs = op.attributes
        lhs = parse_dim(attrs["lhs"].value).subst(self.env)
        rhs = parse_dim(attrs["rhs"].value).subst(self.env)
        gap = rhs - lhs
        rel = attrs["rel"].value
        if rel in ("int", "i32") and lhs.is_const():
            if lhs.value is None or rel == "i32" and not -2**31 <= lhs.value < 2**31:
                raise TilecError(f"{self.where}: {attrs['message'].value} ({lhs})",
                                 span_of(op.location))
            return True
        if rel in ("int", "i32"):
            attrs["lhs"] = ir.StringAttr.get(str(lhs))
            return False
        if rel == "le":
            holds = gap.nonneg()
        else:
            holds = (gap == Dim.const(0)) if gap.is_const() else None
        if rel == "bcast" and lhs == Dim.const(1):
            holds = True
        elif rel == "bcast" and holds is False and not lhs.is_const():
            holds = None              # lhs may still be 1
        if holds is False:
            broken = ">" if rel == "le" else "!="
            raise TilecError(f"{self.where}: {attrs['message'].value} ({lhs} {broken} {rhs})",
                             span_of(op.location))
        attrs["lhs"] = ir.StringAttr.get(str(lhs))
        attrs["rhs"] = ir.StringAttr.get(str(rhs))
        return holds is True
