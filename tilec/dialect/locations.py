"""MLIR locations -> source spans, so passes report errors where the user wrote the code."""
from __future__ import annotations

from ..diagnostics import Span
from ..mlir import ir


def span_of(location: ir.Location) -> Span | None:
    """The source span of a location (file:line:col, or the first such inside a fused,
    named or call-site location); None when it has none."""
    if isinstance(location, ir.FileLineColLoc):
        return Span.point(location.filename, location.start_line, location.start_col)
    if isinstance(location, ir.FusedLoc):
        for inner in location.locations:
            span = span_of(inner)
            if span is not None:
                return span
        return None
    for attr in ("child_loc", "callee"):
        inner = getattr(location, attr, None)
        if isinstance(inner, ir.Location):
            return span_of(inner)
    return None
