"""The ``tile`` dialect: ops (``ops.py``) and tensor types (``types.py``)."""
from .ops import *  # noqa: F401,F403
from .ops import Tile
from .types import TensorInfo, tensor_info  # noqa: F401
from ..mlir import ir




def make_context() -> ir.Context:
    """A new MLIR context with the tile dialect loaded."""
    ctx = ir.Context()
    with ctx:
        Tile.load()
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
