"""The ``tile`` dialect: ops (``ops.py``) and tensor types (``types.py``)."""
from dataclasses import dataclass
from typing import Any

from .ops import *  # noqa: F401,F403
from .ops import Tile
from .types import ELEMENT_BYTES, TensorInfo, stored_dtype, tensor_info  # noqa: F401
from ..mlir import ir, load_dialect, new_context


def make_context() -> ir.Context:
    """A new MLIR context with the tile dialect loaded, and of the upstream dialects those
    that tilec builds ops of (the rest load on demand: :func:`tilec.mlir.new_context`)."""
    ctx = new_context()
    with ctx:
        load_dialect(Tile)
    return ctx


# Function-level conventions (set by irgen, read by the reference, the passes and backends):
#   func.func @NAME(args...) -> (results...), every argument and result a tile tensor; a scalar
#   parameter is a rank-0 tensor.
#   attributes of the func.func:
#     tile.symbols = ["batch", "seq", ...]  free shape symbols in ABI order (first appearance in
#                                           the parameters), after -D substitution
#     tile.lead = ["$0", ...]               present iff the function is rank-generic (`...`):
#                                           the trailing leading dimensions that operations peel
#                                           off `...` as anonymous symbols, outermost first
#   argument attributes: {tile.name = "x"}; scalars add {tile.scalar, tile.default = <f64|i64>}
#   when the parameter has a default.
SYMBOLS_ATTR = "tile.symbols"
LEAD_ATTR = "tile.lead"
ARG_NAME_ATTR = "tile.name"
ARG_SCALAR_ATTR = "tile.scalar"
ARG_DEFAULT_ATTR = "tile.default"
BACKWARD_ATTR = "tile.backward"     # `#pragma backward(NAME)`: the gradient function
# `#pragma dtype_template(T, [...])`: {function = "NAME", T = "float16"} on the instance
# NAME__float16 of NAME (absent where -D T=... left one instance under the plain name)
DTYPE_TEMPLATE_ATTR = "tile.dtype_template"
# On the op that gives a composite built-in's value (the tile.mul of normalize's
# (x - mean) * rsqrt(var + eps)): the built-in's name, so that the reference applies that
# built-in's allowance row to the steps as a whole; the backends ignore it
BUILTIN_ATTR = "tile.builtin"


@dataclass(frozen=True)
class Param:
    """One parameter of a tile function, as its argument attributes describe it."""

    name: str
    info: TensorInfo
    scalar: bool
    default: int | float | None


def params_of(func_op: Any, unnamed: str = "arg{}") -> list[Param]:
    """The parameters of ``func_op`` in order; one without ``tile.name`` (hand-written IR) is
    named ``unnamed`` with its number."""
    attrs = func_op.attributes
    arg_attrs = list(attrs["arg_attrs"]) if "arg_attrs" in attrs else []
    out = []
    for i, t in enumerate(func_op.type.inputs):
        d = {a.name: a.attr for a in ir.DictAttr(arg_attrs[i])} if i < len(arg_attrs) else {}
        name = ir.StringAttr(d[ARG_NAME_ATTR]).value if ARG_NAME_ATTR in d else unnamed.format(i)
        default = d[ARG_DEFAULT_ATTR].value if ARG_DEFAULT_ATTR in d else None
        out.append(Param(name, tensor_info(t), ARG_SCALAR_ATTR in d, default))
    return out

# Shape templates (irgen sets the first; tile-shape-template consumes it and sets the rest):
#   tile.templates = {seq = array<i64: 2048, 8192>}   on a func.func still to be specialised
#   tile.variant_of = "rmsnorm", tile.binding = {seq = 2048 : i64}   on each specialised clone,
#                                           whose tile.symbols and arguments stay the generic's
#   tile.dispatch = {rmsnorm = {generic = "rmsnorm", variants = [
#       {binding = {seq = 2048 : i64}, fn = "rmsnorm__seq_2048"}, ...]}}   on the module: the
#     exact-match table a caller consults (symbols bound from the arguments); generic = "" when
#     the generic function was dropped (--no-generic)
#   tile.stretch = ["cb"]                  beside tile.templates: symbols a run-time broadcast
#     stretches, whose variant at 1 must serve any value of the other symbols (so their
#     bindings at 1 come alone too, not only in the templates' product)
TEMPLATES_ATTR = "tile.templates"
STRETCH_ATTR = "tile.stretch"
VARIANT_OF_ATTR = "tile.variant_of"
BINDING_ATTR = "tile.binding"
DISPATCH_ATTR = "tile.dispatch"

# Fusion and the kernel level (tile-fuse, tile-cache-hint and tile-kernel set them; the
# backends and the reference read them):
#   on a tile.fused op: tile.buffers = array<i64: ...> (the number of each output),
#     tile.reuse = array<i64: ...> (the buffer each output takes, or -1), tile.cache_hints =
#     [...] (the cache hint of each input); tile-kernel copies them onto the kernel function
#     of the group as tile.fused = {tile.buffers = ..., ...}
#   on a kernel function: tile.kernel = {grid = [...], tile_rows = .., ...} (tile_kernel.py)
#   on a value a cache_hint pragma names: tile.cache_hint = {level = "L1", name = "x", ...}
FUSED_ATTR = "tile.fused"
KERNEL_ATTR = "tile.kernel"
BUFFERS_ATTR = "tile.buffers"
REUSE_ATTR = "tile.reuse"
HINT_ATTR = "tile.cache_hint"
INPUT_HINTS_ATTR = "tile.cache_hints"
