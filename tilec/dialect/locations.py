"""MLIR locations -> source spans, so passes report errors where the user wrote the code."""
from __future__ import annotations

from dataclasses import replace

from ..diagnostics import Span
from ..mlir import ir


def span_of(location: ir.Location) -> Span | None:
    """The source span of a location (file:line:col, or the first such inside a fused or
    named location; a call-site location's callee, inlined at its callers); None when it has
    none."""
    if isinstance(location, ir.FileLineColLoc):
        return Span.point(location.filename, location.start_line, location.start_col)
    if isinstance(location, ir.CallSiteLoc):
        callee, caller = span_of(location.callee), span_of(location.caller)
        if callee is None or caller is None:
            return callee or caller
        return replace(callee, inlined_at=(replace(caller, inlined_at=()),
                                           *caller.inlined_at))
    if isinstance(location, ir.FusedLoc):
        for inner in location.locations:
            span = span_of(inner)
            if span is not None:
                return span
        return None
    inner = getattr(location, "child_loc", None)
    return span_of(inner) if isinstance(inner, ir.Location) else None
