"""Source spans and the one error type of tilec.

Every mistake in a user's program becomes a :class:`TilecError` carrying a :class:`Span`; it is
rendered as ``FILE:LINE:COL: error: MESSAGE``, the source line, and a caret under the span.
Warnings use the same rendering and are collected by a :class:`DiagnosticSink`.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TextIO


@dataclass(frozen=True)
class Span:
    """A half-open source range; lines and columns count from 1.  Code of a function inlined
    into its caller keeps its own span, with the calls it was inlined through in
    ``inlined_at``, innermost first; a diagnostic shows each as a note."""

    file: str
    line: int
    col: int
    end_line: int
    end_col: int
    inlined_at: tuple["Span", ...] = field(default=(), compare=False)

    @staticmethod
    def point(file: str, line: int, col: int) -> "Span":
        return Span(file, line, col, line, col + 1)

    def to(self, other: "Span") -> "Span":
        """The span from the start of ``self`` to the end of ``other``."""
        return Span(self.file, self.line, self.col, other.end_line, other.end_col,
                    self.inlined_at)

    def located(self) -> str:
        """``FILE:LINE:COL``, followed by the calls the code was inlined through: how run-time
        messages, which show no source line, say where."""
        return str(self) + "".join(f" (inlined at {site})" for site in self.inlined_at)

    def to_json(self) -> dict:
        return {"file": self.file, "line": self.line, "col": self.col, "end_line": self.end_line,
                "end_col": self.end_col, "inlined_at": [s.to_json() for s in self.inlined_at]}

    @staticmethod
    def from_json(d: dict) -> "Span":
        return Span(d["file"], d["line"], d["col"], d["end_line"], d["end_col"],
                    tuple(Span.from_json(s) for s in d.get("inlined_at", ())))

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


# Source texts by file name, so that any diagnostic can quote its line without threading the
# text through every layer.  Registered by the parser (and by tilec-opt for .mlir inputs).
_SOURCES: dict[str, str] = {}


def register_source(file: str, text: str) -> None:
    _SOURCES[file] = text


def source_line(file: str, line: int) -> str | None:
    text = _SOURCES.get(file)
    if text is None:
        return None
    lines = text.split("\n")  # as the lexer counts lines
    if 1 <= line <= len(lines):
        return lines[line - 1].removesuffix("\r")
    return None


@dataclass
class Diagnostic:
    severity: str  # "error" | "warning" | "note"
    message: str
    span: Span | None = None
    notes: list["Diagnostic"] = field(default_factory=list)
    remark: bool = False  # why an optimisation did not happen: shown only where asked (--verbose)

    def render(self) -> str:
        head = f"{self.span}: " if self.span else "tilec: "
        out = [f"{head}{self.severity}: {self.message}"]
        if self.span is not None:
            text = source_line(self.span.file, self.span.line)
            if text is not None:
                text = text.replace("\t", " ")
                start = max(self.span.col, 1)
                if self.span.end_line == self.span.line:
                    width = max(self.span.end_col - start, 1)
                else:
                    width = max(len(text) - start + 1, 1)
                out.append(text)
                out.append(" " * (start - 1) + "^" + "~" * (width - 1))
            for site in self.span.inlined_at:
                out.append(Diagnostic("note", "inlined from this call", site).render())
        for note in self.notes:
            out.append(note.render())
        return "\n".join(out)


class TilecError(Exception):
    """A user-facing error: a located diagnostic, never a traceback."""

    def __init__(self, message: str, span: Span | None = None,
                 notes: list[Diagnostic] | None = None) -> None:
        super().__init__(message)
        self.diagnostic = Diagnostic("error", message, span, notes or [])

    @property
    def span(self) -> Span | None:
        return self.diagnostic.span

    @property
    def message(self) -> str:
        return self.diagnostic.message

    def render(self) -> str:
        return self.diagnostic.render()

    def __str__(self) -> str:
        return self.render()


class DiagnosticSink:
    """Collects warnings; errors are raised as :class:`TilecError` instead."""

    def __init__(self, stream: TextIO | None = None, remarks: bool = False) -> None:
        self.stream = stream
        self.remarks = remarks          # print remarks too (tilec --verbose)
        self.warnings: list[Diagnostic] = []

    def warn(self, message: str, span: Span | None = None) -> None:
        diag = Diagnostic("warning", message, span)
        self.warnings.append(diag)
        if self.stream is not None:
            print(diag.render(), file=self.stream)

    def remark(self, message: str, span: Span | None = None) -> None:
        """A warning kept with the others (and in the compile cache) but printed only by a
        sink that shows remarks, so that asking for them never changes what is compiled."""
        diag = Diagnostic("warning", message, span, remark=True)
        self.warnings.append(diag)
        if self.stream is not None and self.remarks:
            print(diag.render(), file=self.stream)


def default_sink() -> DiagnosticSink:
    return DiagnosticSink(sys.stderr)


def note(message: str, span: Span | None = None) -> Diagnostic:
    return Diagnostic("note", message, span)
