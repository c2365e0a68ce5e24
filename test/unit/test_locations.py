"""Source spans through MLIR locations: code inlined from a call keeps its place in the callee
and the calls it came through, and diagnostics show both."""
from __future__ import annotations

from tilec.diagnostics import Diagnostic, Span, register_source
from tilec.dialect import make_context
from tilec.dialect.locations import span_of
from tilec.mlir import ir

SOURCE = ("func inner(a: Tensor[n]) -> Tensor[n] {\n  return exp(a);\n}\n"
          "func outer(a: Tensor[n]) -> Tensor[n] {\n  return inner(a);\n}\n"
          "func top(a: Tensor[n]) -> Tensor[n] {\n  return outer(a);\n}\n")


def test_a_call_site_location_is_the_callee_inlined_at_each_call() -> None:
    with make_context():
        exp, call_inner, call_outer = (ir.Location.file("f.tile", line, 10)
                                       for line in (2, 5, 8))
        span = span_of(ir.Location.callsite(exp, [call_inner, call_outer]))
    assert span == Span.point("f.tile", 2, 10)
    assert span.inlined_at == (Span.point("f.tile", 5, 10), Span.point("f.tile", 8, 10))
    assert span.located() == "f.tile:2:10 (inlined at f.tile:5:10) (inlined at f.tile:8:10)"


def test_a_diagnostic_shows_each_call_as_a_note() -> None:
    register_source("f.tile", SOURCE)
    span = Span("f.tile", 2, 10, 2, 16, (Span("f.tile", 5, 10, 5, 18),
                                         Span("f.tile", 8, 10, 8, 18)))
    assert Diagnostic("error", "bad", span).render().splitlines() == [
        "f.tile:2:10: error: bad", "  return exp(a);", "         ^~~~~~",
        "f.tile:5:10: note: inlined from this call", "  return inner(a);", "         ^~~~~~~~",
        "f.tile:8:10: note: inlined from this call", "  return outer(a);", "         ^~~~~~~~"]


def test_spans_survive_json_with_their_calls() -> None:
    span = Span("f.tile", 2, 10, 2, 16, (Span.point("f.tile", 5, 10),))
    again = Span.from_json(span.to_json())
    assert again == span and again.inlined_at == span.inlined_at
