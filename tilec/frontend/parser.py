"""Parser of the ``.tile`` language: source text in, :class:`~tilec.frontend.ast.Module` out.

The grammar is ``grammar.lark`` (Lark LALR(1), strict).  Every AST node carries the half-open
:class:`~tilec.diagnostics.Span` of its text.  :func:`parse` raises nothing but
:class:`~tilec.diagnostics.TilecError`.  Lark's analysis of the grammar (about 0.2 s) is done
once and its tables kept in tilec's cache directory (:func:`lark_parser`).

Where a syntax error points: at the first token that cannot continue the program, which the
message names ("found 'let'"); a missing ``;`` is therefore reported at the token after the place
where the ``;`` belongs.  At the end of the input, the error points just past the last token.
A bad character, an unterminated ``/*`` and a misplaced ``#pragma`` point at themselves.

Pragma lines are single tokens; the text after the pragma's name, when it starts with ``(``, is
parsed again as an argument list (rule ``pragma_args``) with the spans of the original line.
"""
from __future__ import annotations

import functools
import hashlib
import io
import os
import re
import sys
from pathlib import Path
from typing import Any, NamedTuple

import lark
from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedToken, VisitError
from lark.tree import Meta
from lark.visitors import Transformer_NonRecursive, v_args

from ..cache import cache_dir
from ..diagnostics import Span, TilecError, register_source
from . import ast

# The deepest parse tree accepted.  Later stages walk the AST recursively; this keeps them well
# inside Python's recursion limit, and turns absurd nesting into a located error.
MAX_NESTING = 200

# Pragmas whose argument list must parse.  Sema only warns about any other pragma, so the text
# after its name is never a syntax error: when it is no argument list, its args are None.
_KNOWN_PRAGMAS = frozenset({"cache_hint", "shape_template", "backward"})

_PRAGMA_HEAD = re.compile(
    r"#pragma[ \t]+(?:(?P<vendor>acl)[ \t]+(?=[A-Za-z_]))?(?P<name>[A-Za-z_][A-Za-z0-9_]*)")

_CLOSER_OF = {"(": ")", "[": "]", "{": "}"}
_OPENER_OF = {closer: opener for opener, closer in _CLOSER_OF.items()}

# How the expected terminals are named in messages, besides quoted punctuation and keywords.
_TERMINAL_WORDS = {"NAME": "a name", "NUMBER": "a number", "PRAGMA": "a '#pragma' line"}
_EXPRESSION_STARTS = frozenset({"a name", "a number", "'('", "'-'", "'true'", "'false'", "'inf'",
                                "'['"})
_TYPE_STARTS = frozenset({"a name", "'Tensor'"})
_OPERATORS = frozenset({"'+'", "'-'", "'*'", "'/'", "'@'",
                        "'<'", "'<='", "'>'", "'>='", "'=='", "'!='"})
_END_OF_FILE = "end of file"
_END_OF_PRAGMA = "end of the '#pragma' line"


def parse(text: str, file: str) -> ast.Module:
    """Parses the source ``text`` of ``file`` into a Module; raises TilecError on any mistake."""
    register_source(file, text)
    tree = _parse_tree(text, file, "start", _END_OF_FILE)
    return _build(_Builder(file, text), tree)


# --- Lark ------------------------------------------------------------------------------------
class _UnterminatedComment(Exception):
    """Raised from the lexer for a ``/*`` comment that runs to the end of the input."""

    def __init__(self, token: Token) -> None:
        super().__init__(token.value)
        self.token = token


def _check_block_comment(token: Token) -> Token:
    """Lexer callback: lets a terminated ``/* */`` comment through."""
    if len(token.value) < 4 or not token.value.endswith("*/"):
        raise _UnterminatedComment(token)
    return token


GRAMMAR = Path(__file__).with_name("grammar.lark")
_LARK_OPTIONS: dict[str, Any] = {"parser": "lalr", "lexer": "basic", "strict": True,
                                  "propagate_positions": True, "start": ["start", "pragma_args"]}
_LEXER_CALLBACKS = {"BLOCK_COMMENT": _check_block_comment}   # saved with the tables by name


_process_parser: list[Lark] = []


def _lark(store_tables: bool = True) -> Lark:
    """The Lark parser of grammar.lark, made once per process (:func:`lark_parser`), its
    tables kept in tilec's cache directory (unless ``store_tables`` is false, as for a
    compile with --no-cache, which stores nothing)."""
    if not _process_parser:
        _process_parser.append(lark_parser(GRAMMAR.read_text(), cache_dir() / "parser",
                                           store_tables))
    return _process_parser[0]


def prepare(store_tables: bool) -> None:
    """Make this process's parser now; with ``store_tables`` false, write no tables."""
    _lark(store_tables)


def lark_parser(grammar: str, tables: Path, store_tables: bool = True) -> Lark:
    """The Lark parser of ``grammar``, loaded from its tables in the directory ``tables``
    when a process wrote them there, else built and (``store_tables``) its tables written
    there for the next.

    The tables' file is named by a digest of everything they depend on (the grammar, the
    options, the versions of Lark and Python) and starts with a digest of the rest of it, so
    that a damaged file is rebuilt, never used; it is written whole under another name, then
    renamed.  Where it cannot be written (a read-only install), every process builds the
    parser."""
    path = tables_path(grammar, tables)
    try:
        return _load_tables(path.read_bytes())
    except (OSError, ValueError):
        pass
    parser = Lark(grammar, **_LARK_OPTIONS, lexer_callbacks=_LEXER_CALLBACKS)
    if store_tables:
        _store_tables(parser, path)
    return parser


def tables_path(grammar: str, tables: Path) -> Path:
    """Where in the directory ``tables`` the tables of ``grammar`` are kept: a name that
    changes with the grammar, the options and the versions of Lark and Python."""
    key = repr((grammar, sorted(_LARK_OPTIONS.items()), sorted(_LEXER_CALLBACKS),
                lark.__version__, sys.version_info[:2]))
    return tables / f"{GRAMMAR.stem}.{hashlib.sha256(key.encode()).hexdigest()[:32]}.lark-tables"


def _load_tables(data: bytes) -> Lark:
    """The parser whose tables (behind a digest line) are ``data``; ValueError when the
    digest does not match or Lark cannot read them."""
    digest, _, saved = data.partition(b"\n")
    if digest != hashlib.sha256(saved).hexdigest().encode():
        raise ValueError("the tables' digest does not match")
    try:
        return Lark.load(io.BytesIO(saved))
    except Exception as e:   # what the pickled tables refer to may have changed
        raise ValueError(f"Lark cannot read the tables: {e}") from None


def _store_tables(parser: Lark, path: Path) -> None:
    """Write the tables of ``parser`` to ``path`` (atomically), or nothing when it cannot."""
    saved = io.BytesIO()
    parser.save(saved)
    data = hashlib.sha256(saved.getvalue()).hexdigest().encode() + b"\n" + saved.getvalue()
    staged = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(staged, path)
    except OSError:
        os.unlink(staged)


@functools.cache
def _terminal_names() -> dict[str, str]:
    """Terminal name -> how a message names it ("';'", "a name")."""
    parser = _lark()
    return {t.name: f"'{t.pattern.value}'" if t.pattern.type == "str" else _TERMINAL_WORDS[t.name]
            for t in parser.terminals if t.name not in parser.lexer_conf.ignore}


def _parse_tree(text: str, file: str, start: str, end_of_input: str) -> Tree:
    """Parses ``text`` from the rule ``start`` into a Lark tree no deeper than MAX_NESTING.

    ``end_of_input`` names the end of ``text`` in messages.  Tokens are fed one by one so that
    the brackets still open are known when an error comes.
    """
    parser = _lark().parse_interactive(text, start=start)
    brackets = _Brackets()
    last: Token | None = None
    try:
        for token in parser.lexer_thread.lex(parser.parser_state):
            parser.feed_token(token)
            brackets.feed(token)
            last = token
        tree = parser.feed_eof(last)
    except UnexpectedCharacters as e:
        raise TilecError(_bad_character(e.char), Span.point(file, e.line, e.column)) from None
    except _UnterminatedComment as e:
        tok = e.token
        raise TilecError("unterminated comment: '/*' without a closing '*/'",
                         Span(file, tok.line, tok.column, tok.line, tok.column + 2)) from None
    except UnexpectedToken as e:
        # accepts() tries each terminal, so it is exact where LALR merged lookaheads are not.
        raise _token_error(e.token, parser.accepts(), file, brackets, last,
                           end_of_input) from None
    _check_nesting(tree, file)
    return tree


def _check_nesting(tree: Tree, file: str) -> None:
    """Raises at the leftmost node deeper than MAX_NESTING (an iterative walk)."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            raise TilecError(f"expression nested too deeply (more than {MAX_NESTING} levels)",
                             _meta_span(file, node.meta))
        stack.extend((child, depth + 1) for child in reversed(node.children)
                     if isinstance(child, Tree))


# --- syntax errors ---------------------------------------------------------------------------
class _Open(NamedTuple):
    closer: str
    what: str             # "'(' opened at 3:14", "the body of function 'f' opened at 2:80"


class _Brackets:
    """The brackets left open by the tokens accepted so far, innermost last."""

    def __init__(self) -> None:
        self.open: list[_Open] = []
        self._function = ""
        self._previous: Token | None = None

    def feed(self, token: Token) -> None:
        """Takes the next accepted token into account."""
        if token.type == "NAME" and self._previous is not None and self._previous.type == "FUNC":
            self._function = token.value
        self._previous = token
        if token.value in _OPENER_OF:
            self.open.pop()   # the parser accepted it, so it closes the innermost bracket
        elif token.value in _CLOSER_OF:
            what = (f"the body of function '{self._function}'" if token.value == "{"
                    else f"'{token.value}'")
            self.open.append(_Open(_CLOSER_OF[token.value],
                                   f"{what} opened at {token.line}:{token.column}"))

    def innermost(self) -> _Open | None:
        return self.open[-1] if self.open else None

    def closes_any(self, closer: str) -> bool:
        return any(o.closer == closer for o in self.open)


def _token_error(token: Token, accepts: set[str], file: str, brackets: _Brackets,
                 last: Token | None, end_of_input: str) -> TilecError:
    """The TilecError for ``token``, which cannot continue the program where the terminals
    ``accepts`` could."""
    names = _terminal_names()
    expected = {end_of_input if n == "$END" else names[n] for n in accepts}
    innermost = brackets.innermost()
    if token.type == "$END":
        span = (Span.point(file, 1, 1) if last is None
                else Span.point(file, last.end_line, last.end_column))
        if innermost is not None:
            return TilecError(f"unexpected {end_of_input}: missing '{innermost.closer}' to close "
                              f"{innermost.what}", span)
        described = _describe(expected, end_of_input)
        return TilecError(f"unexpected {end_of_input}"
                          + (f": expected {described}" if described else ""), span)

    span = _token_span(file, token)
    found = _token_words(token)
    if token.type == "INF" and "a name" in expected:
        return TilecError("'inf' is a keyword (the float infinity), not a name", span)
    if token.value in _OPENER_OF and not brackets.closes_any(token.value):
        return TilecError(f"unexpected {found} with no matching '{_OPENER_OF[token.value]}'",
                          span)
    if innermost is not None and innermost.closer in ")]" and f"'{innermost.closer}'" in expected:
        return TilecError(f"expected '{innermost.closer}' to close {innermost.what}, "
                          f"found {found}", span)
    if innermost is not None and innermost.closer == "]" and "':'" in expected:
        return TilecError("expected ':' in the slice (a subscript is ':', 'a:b', 'a:', ':b' or "
                          f"'...'), found {found}", span)
    if "';'" in expected:
        if last is not None and token.line > last.end_line:  # point where the ';' belongs
            return TilecError(f"expected ';' at the end of the statement, before {found} on "
                              f"line {token.line}",
                              Span.point(file, last.end_line, last.end_column))
        return TilecError(f"expected ';' after the statement, found {found}", span)
    described = _describe(expected, end_of_input)
    if described is None:
        return TilecError(f"unexpected {found}", span)
    after = "" if last is None else f" after {_token_words(last)}"
    return TilecError(f"expected {described}{after}, found {found}", span)


def _describe(expected: set[str], end_of_input: str) -> str | None:
    """"an expression, ',' or ')'" for a set of expected terminals; None when too many."""
    words = set(expected)
    if _EXPRESSION_STARTS - {"'['"} <= words:
        words = words - _EXPRESSION_STARTS | {"an expression"}
    elif _TYPE_STARTS <= words:
        words = words - _TYPE_STARTS | {"a type"}
    words -= _OPERATORS
    if len(words) > 1:
        words.discard(end_of_input)
    if not words or len(words) > 4:
        return None
    ordered = sorted(words, key=lambda w: (w.startswith("'"), w))
    return ordered[0] if len(ordered) == 1 else ", ".join(ordered[:-1]) + " or " + ordered[-1]


def _token_words(token: Token) -> str:
    """How a message names a token of the input: "'let'", "a '#pragma' line"."""
    if token.type == "PRAGMA":
        return "a '#pragma' line"
    text = token.value if len(token.value) <= 24 else token.value[:20] + "..."
    return f"'{text}'"


def _bad_character(char: str) -> str:
    """The message for a character that no token starts with."""
    if char == "#":
        return "unexpected character '#' (only a '#pragma' line may start with '#')"
    if char == "'":
        return "unexpected character \"'\""
    if char == "\ufffd":   # what read_source makes of bytes that are not UTF-8
        return "bytes that are not UTF-8 text (a .tile file is UTF-8)"
    shown = f"'{char}'" if char.isprintable() and not char.isspace() else f"U+{ord(char):04X}"
    return f"unexpected character {shown}"


# --- spans -----------------------------------------------------------------------------------
def _token_span(file: str, token: Token) -> Span:
    return Span(file, token.line, token.column, token.end_line, token.end_column)


def _meta_span(file: str, meta: Meta) -> Span:
    return Span(file, meta.line, meta.column, meta.end_line, meta.end_column)


# --- tree -> AST -----------------------------------------------------------------------------
class _Results(NamedTuple):
    types: list[ast.TypeExpr]
    parenthesized: bool


def _build(builder: "_Builder", tree: Tree) -> Any:
    """Runs the builder; a TilecError raised inside it comes out as itself."""
    try:
        return builder.transform(tree)
    except VisitError as e:
        if isinstance(e.orig_exc, TilecError):
            raise e.orig_exc from None
        raise


@v_args(meta=True)
class _Builder(Transformer_NonRecursive):
    """Builds the AST of one file from its Lark tree: one method per rule (or alias)."""

    def __init__(self, file: str, text: str) -> None:
        super().__init__(visit_tokens=False)
        self.file = file
        self.text = text

    def _span(self, meta: Meta) -> Span:
        return _meta_span(self.file, meta)

    def _tok(self, token: Token) -> Span:
        return _token_span(self.file, token)

    # items
    def start(self, meta: Meta, items: list[ast.FuncDef | ast.Pragma]) -> ast.Module:
        return ast.Module(self.file, items)

    def func_def(self, meta: Meta, children: list) -> ast.FuncDef:
        name, *middle, close = children
        at = next(i for i, c in enumerate(middle) if isinstance(c, _Results))
        results: _Results = middle[at]
        return ast.FuncDef(name.value, self._tok(name), middle[:at], results.types,
                           results.parenthesized, middle[at + 1:], self._span(meta),
                           self._tok(close))

    def param(self, meta: Meta, children: list) -> ast.Param:
        name, type_, default = children
        return ast.Param(name.value, self._tok(name), type_, default, self._span(meta))

    def default(self, meta: Meta, children: list[Token | None]) -> ast.Num:
        minus, number = children
        num = self._number(number)
        if minus is None:
            return num
        return ast.Num(-num.value, "-" + num.text, num.is_float, self._span(meta))

    def single_result(self, meta: Meta, children: list[ast.TypeExpr]) -> _Results:
        return _Results(children, False)

    def result_tuple(self, meta: Meta, children: list[ast.TypeExpr]) -> _Results:
        return _Results(children, True)

    def tensor_type(self, meta: Meta, children: list) -> ast.TensorType:
        dtype, *dims = children
        return ast.TensorType(None if dtype is None else dtype.value,
                              None if dtype is None else self._tok(dtype), dims, self._span(meta))

    def scalar_type(self, meta: Meta, children: list[Token]) -> ast.ScalarType:
        return ast.ScalarType(children[0].value, self._span(meta))

    def ellipsis(self, meta: Meta, children: list) -> ast.EllipsisExpr:
        return ast.EllipsisExpr(self._span(meta))

    # statements
    def let_stmt(self, meta: Meta, children: list) -> ast.Let:
        name, value = children
        return ast.Let([ast.Name(name.value, self._tok(name))], value, False, self._span(meta))

    def let_tuple(self, meta: Meta, children: list) -> ast.Let:
        *names, value = children
        return ast.Let([ast.Name(n.value, self._tok(n)) for n in names], value, True,
                       self._span(meta))

    def return_stmt(self, meta: Meta, children: list[ast.Expr]) -> ast.Return:
        return ast.Return(children, False, self._span(meta))

    def return_tuple(self, meta: Meta, children: list[ast.Expr]) -> ast.Return:
        return ast.Return(children, True, self._span(meta))

    def pragma(self, meta: Meta, children: list[Token]) -> ast.Pragma:
        """``#pragma [acl] NAME REST``: REST is parsed as arguments when it starts with '('."""
        token = children[0]
        text = token.value.rstrip()
        line, col = token.line, token.column
        span = Span(self.file, line, col, line, col + len(text))
        line_start = self.text.rfind("\n", 0, token.start_pos) + 1
        if self.text[line_start:token.start_pos].strip():
            raise TilecError("'#pragma' must begin a line", span)
        head = _PRAGMA_HEAD.match(text)
        if head is None:
            after = text[len("#pragma"):]
            blank = len(after) - len(after.lstrip())
            raise TilecError("expected a pragma name after '#pragma'",
                             Span.point(self.file, line, col + len("#pragma") + blank))
        name = head["name"]
        name_span = Span(self.file, line, col + head.start("name"), line, col + head.end("name"))
        args = self._pragma_args(name, text[head.end():], line, col + head.end())
        return ast.Pragma(name, name_span, args, head["vendor"], text, span)

    def _pragma_args(self, name: str, rest: str, line: int, col: int) -> list[ast.Expr] | None:
        """The arguments in ``rest`` (which starts at ``line:col``), or None for an unknown
        pragma whose rest is not an argument list."""
        blank = len(rest) - len(rest.lstrip())
        if not rest.lstrip().startswith("("):
            if name in _KNOWN_PRAGMAS:
                raise TilecError(f"expected '(' after pragma '{name}'",
                                 Span.point(self.file, line, col + blank))
            return None
        # Padding puts every token of the rest at its line and column in the file.
        padded = "\n" * (line - 1) + " " * (col - 1) + rest
        try:
            return _build(self, _parse_tree(padded, self.file, "pragma_args", _END_OF_PRAGMA))
        except TilecError:
            if name in _KNOWN_PRAGMAS:
                raise
            return None

    def pragma_args(self, meta: Meta, children: list[ast.Expr]) -> list[ast.Expr]:
        return children

    # expressions
    def binop(self, meta: Meta, children: list) -> ast.BinOp:
        lhs, op, rhs = children
        return ast.BinOp(op.value, lhs, rhs, self._span(meta), self._tok(op))

    def neg(self, meta: Meta, children: list) -> ast.Unary:
        return ast.Unary("-", children[1], self._span(meta))

    def index(self, meta: Meta, children: list) -> ast.Index:
        base, *items = children
        return ast.Index(base, items, self._span(meta))

    def slice(self, meta: Meta, children: list[ast.Expr | None]) -> ast.SliceItem:
        start, end = children
        return ast.SliceItem(start, end, self._span(meta))

    def call(self, meta: Meta, children: list) -> ast.Call:
        name, *args = children
        return ast.Call(name.value, self._tok(name), args, self._span(meta))

    def positional_arg(self, meta: Meta, children: list[ast.Expr]) -> ast.Arg:
        return ast.Arg(None, children[0], self._span(meta))

    def keyword_arg(self, meta: Meta, children: list) -> ast.Arg:
        name, value = children
        return ast.Arg(name.value, value, self._span(meta), self._tok(name))

    def list_expr(self, meta: Meta, children: list[ast.Expr]) -> ast.ListExpr:
        return ast.ListExpr(children, self._span(meta))

    def number(self, meta: Meta, children: list[Token]) -> ast.Num:
        return self._number(children[0])

    def name(self, meta: Meta, children: list[Token]) -> ast.Name:
        return ast.Name(children[0].value, self._span(meta))

    def inf_lit(self, meta: Meta, children: list[Token]) -> ast.Num:
        return self._number(children[0])

    def true_lit(self, meta: Meta, children: list) -> ast.Bool:
        return ast.Bool(True, self._span(meta))

    def false_lit(self, meta: Meta, children: list) -> ast.Bool:
        return ast.Bool(False, self._span(meta))

    def _number(self, token: Token) -> ast.Num:
        """int for an integer literal, float (perhaps inf) for one with '.' or an exponent."""
        text = token.value
        if text == "inf":
            return ast.Num(float("inf"), text, True, self._tok(token))
        if any(c in text for c in ".eE"):
            return ast.Num(float(text), text, True, self._tok(token))
        try:
            value = int(text)
        except ValueError:   # more digits than Python converts (sys.get_int_max_str_digits)
            raise TilecError(f"integer literal with {len(text)} digits is too large",
                             self._tok(token)) from None
        return ast.Num(value, text, False, self._tok(token))
