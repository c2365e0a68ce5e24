"""The ``tile`` dialect: ops (``ops.py``) and tensor types (``types.py``)."""
from .ops import *  # noqa: F401,F403
from .ops import Tile
from .types import TensorInfo, tensor_info  # noqa: F401
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

# Shape templates (irgen sets the first; tile-shape-template consumes it and sets the rest):
#   tile.templates = {seq = array<i64: 2048, 8192>}   on a func.func still to be specialised
#   tile.variant_of = "rmsnorm", tile.binding = {seq = 2048 : i64}   on each specialised clone,
#                                           whose tile.symbols and arguments stay the generic's
#   tile.dispatch = {rmsnorm = {generic = "rmsnorm", variants = [
#       {binding = {seq = 2048 : i64}, fn = "rmsnorm__seq_2048"}, ...]}}   on the module: the
#     exact-match table a caller consults (symbols bound from the arguments); generic = "" when
#     the generic function was dropped (--no-generic)
TEMPLATES_ATTR = "tile.templates"
VARIANT_OF_ATTR = "tile.variant_of"
BINDING_ATTR = "tile.binding"
DISPATCH_ATTR = "tile.dispatch"
