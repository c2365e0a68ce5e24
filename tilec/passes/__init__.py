"""tilec's passes on tile IR, one file per pass named after it; importing this package
registers them in :data:`tilec.pipeline.REGISTRY`.

Default pipelines by optimisation level (``-O0`` .. ``-O3``; ``--emit=opt`` prints the result):
"""
from __future__ import annotations

import importlib
import pkgutil

_NAMES = [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]
for _name in _NAMES:
    importlib.import_module(f"{__name__}.{_name}")

DEFAULT_PIPELINES: dict[int, str] = {
    0: "tile-shape-template,tile-expand",
    1: "tile-shape-template,tile-expand,tile-canonicalize,cse,tile-attention,tile-fuse,"
       "tile-cache-hint",
}
DEFAULT_PIPELINES[2] = DEFAULT_PIPELINES[3] = DEFAULT_PIPELINES[1]


def default_pipeline(opt_level: int) -> str:
    return DEFAULT_PIPELINES[opt_level]
