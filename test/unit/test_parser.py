"""Parser tests: the shared examples, precedence, spans, pragmas, located syntax errors, and
the Lark tables kept between processes."""
from __future__ import annotations

import math
import random
import subprocess
import sys
from pathlib import Path

import pytest
from lark import Lark

from tilec.diagnostics import Span, TilecError
from tilec.frontend import ast
from tilec.frontend import parser as parser_module
from tilec.frontend.astprint import format_ast, format_expr
from tilec.frontend.parser import parse

EXAMPLES = Path(__file__).parents[3] / "shared" / "examples"


def _body(stmts: str) -> str:
    return "func f(x: Tensor[n]) -> Tensor[n] {\n" + stmts + "\n}\n"


def _expr(src: str) -> ast.Expr:
    """The expression of ``return SRC;`` in a one-line function."""
    func = parse(f"func f() -> Tensor[n] {{ return {src}; }}", "e.tile").functions[0]
    ret = func.body[0]
    assert isinstance(ret, ast.Return)
    return ret.values[0]


def _sexp(e: ast.Expr) -> str:
    """Fully parenthesised prefix form, so that a test shows the tree's shape."""
    if isinstance(e, ast.BinOp):
        return f"({e.op} {_sexp(e.lhs)} {_sexp(e.rhs)})"
    if isinstance(e, ast.Unary):
        return f"({e.op} {_sexp(e.operand)})"
    if isinstance(e, ast.Call):
        return f"({e.func} {' '.join(_sexp(a.value) for a in e.args)})"
    if isinstance(e, ast.Index):
        return f"([] {_sexp(e.base)})"
    return format_expr(e)


def _span(node: object) -> tuple[int, int, int, int]:
    """(line, col, end_line, end_col) of a Span or of a node's span."""
    span = node if isinstance(node, Span) else node.span  # type: ignore[attr-defined]
    return (span.line, span.col, span.end_line, span.end_col)


# --- the shared examples ---------------------------------------------------------------------
@pytest.mark.parametrize("name, functions, pragmas", [
    ("layernorm", ["layernorm"], []),
    ("rmsnorm_templated", ["rmsnorm"], ["shape_template"]),
    ("rope", ["rotary_emb"], ["cache_hint"]),
    ("swiglu", ["swiglu"], []),
])
def test_shared_example_parses(name: str, functions: list[str], pragmas: list[str]) -> None:
    path = EXAMPLES / f"{name}.tile"
    module = parse(path.read_text(), str(path))
    assert [f.name for f in module.functions] == functions
    assert [p.name for p in module.pragmas] == pragmas


def test_empty_file_has_no_functions() -> None:
    assert parse("", "empty.tile").items == []
    assert parse("// only a comment\n/* and\n another */\n", "c.tile").items == []


# --- precedence ------------------------------------------------------------------------------
@pytest.mark.parametrize("src, tree", [
    ("x @ w + b", "(+ (@ x w) b)"),
    ("b + x @ w", "(+ b (@ x w))"),
    ("a - b - c", "(- (- a b) c)"),
    ("a / b / c", "(/ (/ a b) c)"),
    ("a @ b @ c", "(@ (@ a b) c)"),
    ("-x * y", "(* (- x) y)"),
    ("-x @ w", "(@ (- x) w)"),
    ("- -x", "(- (- x))"),
    ("a < b + c", "(< a (+ b c))"),
    ("a + b >= c * d", "(>= (+ a b) (* c d))"),
    ("a == b != c", "(!= (== a b) c)"),
    ("a * b + c * d", "(+ (* a b) (* c d))"),
    ("(a + b) * c", "(* (+ a b) c)"),
    ("-x[0:1]", "(- ([] x))"),
    ("f(x)[:, 1:] * 2", "(* ([] (f x)) 2)"),
    ("exp(a + b) - c", "(- (exp (+ a b)) c)"),
])
def test_precedence_and_associativity(src: str, tree: str) -> None:
    expr = _expr(src)
    assert _sexp(expr) == tree
    # The printer's source form parses back to the same tree.
    assert _sexp(_expr(format_expr(expr))) == tree


def test_parenthesized_binop_span_includes_the_parentheses() -> None:
    expr = _expr("(a + b) * c")
    assert isinstance(expr, ast.BinOp) and isinstance(expr.lhs, ast.BinOp)
    assert _span(expr) == (1, 32, 1, 43)
    assert _span(expr.lhs) == (1, 33, 1, 38)
    assert _span(expr.op_span) == (1, 40, 1, 41)


# --- spans -----------------------------------------------------------------------------------
def test_spans_of_swiglu() -> None:
    module = parse((EXAMPLES / "swiglu.tile").read_text(), "swiglu.tile")
    func = module.functions[0]
    assert _span(func) == (2, 1, 11, 2)
    assert _span(func.name_span) == (2, 6, 2, 12)
    assert _span(func.close_span) == (11, 1, 11, 2)
    param = func.params[0]
    assert _span(param) == (2, 13, 2, 48)
    assert isinstance(param.type, ast.TensorType)
    assert _span(param.type) == (2, 20, 2, 48)
    assert format_expr(param.type.dims[2]) == "2*hidden"
    assert _span(param.type.dims[2]) == (2, 39, 2, 47)
    let = func.body[0]
    assert isinstance(let, ast.Let)
    assert _span(let) == (4, 3, 4, 33)
    assert _span(let.names[0]) == (4, 7, 4, 8)
    index = let.value
    assert isinstance(index, ast.Index)
    assert _span(index) == (4, 11, 4, 32)
    assert [_span(i) for i in index.items] == [(4, 17, 4, 18), (4, 20, 4, 21), (4, 23, 4, 31)]
    ret = func.body[-1]
    assert isinstance(ret, ast.Return) and isinstance(ret.values[0], ast.BinOp)
    assert _span(ret) == (10, 3, 10, 24)
    assert _span(ret.values[0].op_span) == (10, 12, 10, 13)


def test_spans_of_dtype_default_and_keyword_argument() -> None:
    module = parse((EXAMPLES / "rmsnorm_templated.tile").read_text(), "rms.tile")
    x, _, eps = module.functions[0].params
    assert isinstance(x.type, ast.TensorType) and x.type.dtype == "bfloat16"
    assert x.type.dtype_span is not None and x.type.dtype_span.col == 24
    assert isinstance(eps.type, ast.ScalarType) and eps.type.dtype == "float32"
    assert eps.default is not None and _span(eps.default) == (3, 97, 3, 101)
    ms = module.functions[0].body[1]
    assert isinstance(ms, ast.Let) and isinstance(ms.value, ast.Call)
    axes = ms.value.args[1]
    assert axes.name == "axes" and axes.name_span is not None and axes.name_span.col == 33
    assert _span(axes) == (5, 33, 5, 42)
    assert isinstance(axes.value, ast.ListExpr) and _span(axes.value) == (5, 38, 5, 42)


# --- literals and statement forms ------------------------------------------------------------
def test_numbers_keep_text_and_kind() -> None:
    call = _expr("g(128, 0.5, 2., 1e-6, 1e999999, true, false)")
    assert isinstance(call, ast.Call)
    values = [a.value for a in call.args]
    nums = [v for v in values if isinstance(v, ast.Num)]
    assert [(n.text, n.is_float) for n in nums] == [
        ("128", False), ("0.5", True), ("2.", True), ("1e-6", True), ("1e999999", True)]
    assert isinstance(nums[0].value, int) and nums[0].value == 128
    assert nums[3].value == 1e-6 and math.isinf(nums[4].value)
    assert [v.value for v in values if isinstance(v, ast.Bool)] == [True, False]


def test_negative_default_and_scalar_param() -> None:
    func = parse("func f(k: int32 = -3) -> Tensor[n] { return k; }", "d.tile").functions[0]
    default = func.params[0].default
    assert default is not None
    assert (default.value, default.text, _span(default)) == (-3, "-3", (1, 19, 1, 21))


def test_return_and_let_forms() -> None:
    func = parse(_body("  let (a, b) = split(x);\n  return (a);\n  return (a, b);\n"
                       "  return (a + b) * 2;"), "r.tile").functions[0]
    let, single, pair, product = func.body
    assert isinstance(let, ast.Let) and let.destructure
    assert [n.id for n in let.names] == ["a", "b"]
    assert isinstance(single, ast.Return) and not single.parenthesized
    assert isinstance(pair, ast.Return) and pair.parenthesized and len(pair.values) == 2
    assert isinstance(product, ast.Return) and not product.parenthesized


def test_tuple_results_and_rank_generic_types() -> None:
    func = parse("func f(x: Tensor<f32>[..., n]) -> (Tensor[...], Tensor<i32>[]) "
                 "{ return (x, x); }", "t.tile").functions[0]
    assert func.results_parenthesized and len(func.results) == 2
    param_type = func.params[0].type
    assert isinstance(param_type, ast.TensorType)
    assert isinstance(param_type.dims[0], ast.EllipsisExpr)
    assert isinstance(func.results[1], ast.TensorType) and func.results[1].dims == []


# --- pragmas ---------------------------------------------------------------------------------
@pytest.mark.parametrize("line, vendor, name_col", [
    ("#pragma acl cache_hint(x, L1)", "acl", 13),
    ("#pragma cache_hint(x, L1)", None, 9),
])
def test_cache_hint_with_and_without_vendor(line: str, vendor: str | None,
                                            name_col: int) -> None:
    (pragma,) = parse(line + "\n", "p.tile").pragmas
    assert (pragma.name, pragma.vendor, pragma.text) == ("cache_hint", vendor, line)
    assert pragma.name_span.col == name_col
    assert _span(pragma) == (1, 1, 1, len(line) + 1)
    assert pragma.args is not None
    assert [type(a) for a in pragma.args] == [ast.Name, ast.Name]
    assert [a.id for a in pragma.args if isinstance(a, ast.Name)] == ["x", "L1"]
    # Argument spans are columns of the original line.
    assert pragma.args[0].span.col == name_col + len("cache_hint(")


def test_shape_template_arguments() -> None:
    pragma = parse((EXAMPLES / "rmsnorm_templated.tile").read_text(), "r.tile").pragmas[0]
    assert pragma.args is not None
    seq, values = pragma.args
    assert isinstance(seq, ast.Name) and _span(seq) == (2, 24, 2, 27)
    assert isinstance(values, ast.ListExpr) and _span(values) == (2, 29, 2, 48)
    assert [n.value for n in values.items if isinstance(n, ast.Num)] == [2048, 8192, 32768]


@pytest.mark.parametrize("line, name, vendor", [
    ("#pragma omp parallel for", "omp", None),
    ("#pragma unroll", "unroll", None),
    ("#pragma acl", "acl", None),
    ("#pragma acl vectorize always", "vectorize", "acl"),
    ("#pragma foo(a = b, $)", "foo", None),
    ("#pragma foo(a, b) trailing words", "foo", None),
])
def test_unknown_pragma_is_not_a_syntax_error(line: str, name: str, vendor: str | None) -> None:
    (pragma,) = parse(line + "\n", "u.tile").pragmas
    assert (pragma.name, pragma.vendor, pragma.args, pragma.text) == (name, vendor, None, line)


def test_unknown_pragma_with_an_argument_list_keeps_it() -> None:
    (pragma,) = parse("#pragma unroll(4) // four times\n", "u.tile").pragmas
    assert pragma.args is not None and [format_expr(a) for a in pragma.args] == ["4"]


def test_pragma_inside_a_body_is_a_statement() -> None:
    func = parse(_body("  #pragma cache_hint(x, UB)\r\n  return x;"), "b.tile").functions[0]
    pragma = func.body[0]
    assert isinstance(pragma, ast.Pragma) and pragma.name == "cache_hint"
    assert pragma.text == "#pragma cache_hint(x, UB)"
    assert pragma.args is not None and _span(pragma.args[1]) == (2, 25, 2, 27)


# --- syntax errors ---------------------------------------------------------------------------
H = "func f(x: Tensor[n]) -> Tensor[n] {\n"   # the function body starts at 1:35

SYNTAX_ERRORS = [
    # (source, line, col, message)
    (H + "  let y = x\n  return y;\n}\n", 2, 12,
     "expected ';' at the end of the statement, before 'return' on line 3"),
    (H + "  return x\n}\n", 2, 11,
     "expected ';' at the end of the statement, before '}' on line 3"),
    (H + "  let y = x return y;\n}\n", 2, 13, "expected ';' after the statement, found 'return'"),
    (H + "  let y = exp(x;\n}\n", 2, 16,
     "expected ')' to close '(' opened at 2:14, found ';'"),
    (H + "  return f(a b);\n}\n", 2, 14,
     "expected ')' to close '(' opened at 2:11, found 'b'"),
    (H + "  let y = x[0:1;\n}\n", 2, 16,
     "expected ']' to close '[' opened at 2:12, found ';'"),
    ("func f(x: Tensor[n) -> Tensor[n] { return x; }", 1, 19,
     "expected ']' to close '[' opened at 1:17, found ')'"),
    (H + "  return x[0];\n}\n", 2, 13, "expected ':' in the slice (a subscript is ':', "
     "'a:b', 'a:', ':b' or '...'), found ']'"),
    (H + "  return x;\n", 2, 12,
     "unexpected end of file: missing '}' to close the body of function 'f' opened at 1:35"),
    (H + "  return x;\n}\n}\n", 4, 1, "unexpected '}' with no matching '{'"),
    (H + "  let y = x);\n}\n", 2, 12, "unexpected ')' with no matching '('"),
    (H + "  return f(x];\n}\n", 2, 13, "unexpected ']' with no matching '['"),
    ("func f(x: Tensor[n]", 1, 20,
     "unexpected end of file: missing ')' to close '(' opened at 1:7"),
    ("func f(x: Tensor[n]) -> ", 1, 24, "unexpected end of file: expected a type or '('"),
    (H + "  /* a comment\n  return x;\n}\n", 2, 3,
     "unterminated comment: '/*' without a closing '*/'"),
    (H + "  let y = x $ 2;\n}\n", 2, 13, "unexpected character '$'"),
    (H + "  let é = x;\n}\n", 2, 7, "unexpected character 'é'"),
    (H + "  return x\x00;\n}\n", 2, 11, "unexpected character U+0000"),
    (H + "  return x\ufffd;\n}\n", 2, 11,
     "bytes that are not UTF-8 text (a .tile file is UTF-8)"),
    ("#include <x>\n", 1, 1,
     "unexpected character '#' (only a '#pragma' line may start with '#')"),
    (H + "  let = x;\n}\n", 2, 7, "expected a name or '(' after 'let', found '='"),
    (H + "  let let = x;\n}\n", 2, 7, "expected a name or '(' after 'let', found 'let'"),
    (H + "  let y = ;\n}\n", 2, 11, "expected an expression after '=', found ';'"),
    (H + "  return f(a, );\n}\n", 2, 15, "expected an expression after ',', found ')'"),
    (H + "  y = x;\n}\n", 2, 3,
     "expected a '#pragma' line, 'let', 'return' or '}' after '{', found 'y'"),
    ("let x = 1;", 1, 1, "expected a '#pragma' line or 'func', found 'let'"),
    ("func (x: Tensor[n]) -> Tensor[n] { return x; }", 1, 6,
     "expected a name after 'func', found '('"),
    ("func f(x Tensor[n]) -> Tensor[n] { return x; }", 1, 10,
     "expected ':' after 'x', found 'Tensor'"),
    ("func f(x: Tensor[n]) Tensor[n] { return x; }", 1, 22,
     "expected '->' after ')', found 'Tensor'"),
    ("func f(x: Tensor[n]) -> Tensor[n] let", 1, 35, "expected '{' after ']', found 'let'"),
    ("func f(e: float32 = x) -> Tensor[n] { return e; }", 1, 21,
     "expected a number or 'inf' after '=', found 'x'"),
    ("func f(inf: Tensor[n]) -> Tensor[n] { return inf; }", 1, 8,
     "'inf' is a keyword (the float infinity), not a name"),
    (H + "  let inf = x;\n  return inf;\n}\n", 2, 7,
     "'inf' is a keyword (the float infinity), not a name"),
    (H + "  let y = x; #pragma cache_hint(x, L1)\n}\n", 2, 14, "'#pragma' must begin a line"),
    ("#pragma   \n", 1, 8, "expected a pragma name after '#pragma'"),
    ("#pragma cache_hint x\n", 1, 20, "expected '(' after pragma 'cache_hint'"),
    ("#pragma acl cache_hint(x L1)\n", 1, 26,
     "expected ')' to close '(' opened at 1:23, found 'L1'"),
    ("#pragma shape_template(seq, [1, 2\n", 1, 34,
     "unexpected end of the '#pragma' line: missing ']' to close '[' opened at 1:29"),
    ("#pragma cache_hint(x, L1) extra\n", 1, 27,
     "expected end of the '#pragma' line after ')', found 'extra'"),
    (H + "  return x * " + "9" * 5000 + ";\n}\n", 2, 14,
     "integer literal with 5000 digits is too large"),
    (H + "  return " + "-" * 300 + "x;\n}\n", 2, 207,
     "expression nested too deeply (more than 200 levels)"),
]


@pytest.mark.parametrize("src, line, col, message", SYNTAX_ERRORS)
def test_syntax_error_location_and_message(src: str, line: int, col: int,
                                           message: str) -> None:
    with pytest.raises(TilecError) as info:
        parse(src, "bad.tile")
    assert info.value.span is not None
    assert (info.value.span.line, info.value.span.col) == (line, col)
    assert info.value.message == message
    assert "__ANON" not in message and "RBRACE" not in message


def test_syntax_error_renders_with_a_caret() -> None:
    with pytest.raises(TilecError) as info:
        parse(H + "  let y = x return y;\n}\n", "caret.tile")
    assert info.value.render().splitlines() == [
        "caret.tile:2:13: error: expected ';' after the statement, found 'return'",
        "  let y = x return y;",
        "            ^~~~~~",
    ]


# --- robustness ------------------------------------------------------------------------------
def test_deeply_nested_parentheses_parse() -> None:
    expr = _expr("(" * 5000 + "x + 1" + ")" * 5000)
    assert isinstance(expr, ast.BinOp) and _sexp(expr) == "(+ x 1)"


@pytest.mark.parametrize("src", [
    "-" * 5000 + "x",
    "f(" * 5000 + "x" + ")" * 5000,
    "x" + "[0:1]" * 5000,
    "x" + " + x" * 5000,
    "(" * 5000 + "x",
    "[" * 5000,
])
def test_deep_nesting_is_a_located_error(src: str) -> None:
    with pytest.raises(TilecError) as info:
        _expr(src)
    assert info.value.span is not None and info.value.span.line == 1


def test_random_bytes_only_raise_tilec_errors() -> None:
    for seed in range(200):
        rng = random.Random(seed)
        text = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))).decode("latin-1")
        try:
            parse(text, "random.tile")
        except TilecError as e:
            assert e.span is not None and e.span.line >= 1 and e.span.col >= 1


def test_mangled_examples_only_raise_tilec_errors() -> None:
    sources = [p.read_text() for p in sorted(EXAMPLES.glob("*.tile"))]
    for seed in range(300):
        rng = random.Random(seed)
        chars = list(rng.choice(sources))
        for _ in range(rng.randrange(1, 4)):
            chars.insert(rng.randrange(len(chars)), rng.choice("()[]{};,:=<>-*/.#$\"x1 \n"))
        try:
            parse("".join(chars), "mangled.tile")
        except TilecError as e:
            assert e.span is not None


# --- AST dump --------------------------------------------------------------------------------
def test_format_ast_of_swiglu() -> None:
    path = EXAMPLES / "swiglu.tile"
    lines = format_ast(parse(path.read_text(), str(path))).splitlines()
    assert lines[:10] == [
        "Module swiglu.tile",
        "  Func swiglu @2:6",
        "    Param input: Tensor[batch, seq, 2*hidden] @2:13",
        "    Result Tensor[batch, seq, hidden] @2:53",
        "    Let x @4:3",
        "      Index @4:11",
        "        Name input @4:11",
        "        Slice : @4:17",
        "        Slice : @4:20",
        "        Slice 0:hidden @4:23",
    ]
    assert lines[-4:] == ["    Return @10:3", "      BinOp * @10:10", "        Name x @10:10",
                          "        Name silu_gate @10:14"]


def test_format_ast_of_pragmas_and_keywords() -> None:
    text = format_ast(parse((EXAMPLES / "rope.tile").read_text(), "rope.tile"))
    assert "  Pragma acl cache_hint @2:1\n    Name rope_freqs @2:24\n    Name L1 @2:36\n" in text
    assert "        Kwarg axis @10:51\n          Unary - @10:56\n            Num 1 @10:57\n" in text
    unknown = format_ast(parse("#pragma omp parallel for\n", "omp.tile"))
    assert unknown == "Module omp.tile\n  Pragma omp (unparsed) @1:1\n"


# --- the Lark parser's tables, kept between processes ----------------------------------------
GRAMMAR_TEXT = parser_module.GRAMMAR.read_text()


class _NeverBuilt(Lark):
    """Lark whose parsers can be loaded but not built."""

    def __init__(self, *args, **kwargs) -> None:
        raise AssertionError("the parser was built, not loaded")


def _trees(parser: Lark) -> list:
    """The trees ``parser`` makes of the shared examples and the corpus."""
    sources = [*EXAMPLES.glob("*.tile"), *(Path(__file__).parents[1] / "corpus").glob("*.tile")]
    return [parser.parse(path.read_text(), start="start") for path in sorted(sources)]


def test_a_second_process_loads_the_parser_the_first_built(tmp_path, monkeypatch) -> None:
    built = parser_module.lark_parser(GRAMMAR_TEXT, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == \
        [parser_module.tables_path(GRAMMAR_TEXT, tmp_path).name]
    monkeypatch.setattr(parser_module, "Lark", _NeverBuilt)
    loaded = parser_module.lark_parser(GRAMMAR_TEXT, tmp_path)
    assert _trees(loaded) == _trees(built) and len(_trees(built)) >= 20
    with pytest.raises(parser_module._UnterminatedComment):   # its lexer callback kept
        loaded.parse("/* never closed", start="start")


def test_damaged_tables_are_rebuilt_and_replaced(tmp_path) -> None:
    parser_module.lark_parser(GRAMMAR_TEXT, tmp_path)
    path = parser_module.tables_path(GRAMMAR_TEXT, tmp_path)
    damaged = bytearray(path.read_bytes())
    damaged[len(damaged) // 2] ^= 1
    path.write_bytes(bytes(damaged))
    with pytest.raises(ValueError, match="digest"):
        parser_module._load_tables(bytes(damaged))
    assert _trees(parser_module.lark_parser(GRAMMAR_TEXT, tmp_path)) == \
        _trees(parser_module.lark_parser(GRAMMAR_TEXT, tmp_path / "fresh"))
    assert _trees(parser_module._load_tables(path.read_bytes())) == \
        _trees(parser_module.lark_parser(GRAMMAR_TEXT, tmp_path / "fresh"))


def test_tables_that_cannot_be_written_only_cost_time(tmp_path) -> None:
    (tmp_path / "file").write_text("in the way of a directory")
    parser = parser_module.lark_parser(GRAMMAR_TEXT, tmp_path / "file" / "tables")
    assert parser.parse("func f() -> Tensor[n] { return x; }", start="start")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_the_tables_name_is_the_same_in_every_process_and_changes_with_the_grammar() -> None:
    here = parser_module.tables_path(GRAMMAR_TEXT, Path("/t"))
    there = subprocess.run(
        [sys.executable, "-c", "from pathlib import Path; from tilec.frontend import parser; "
         "print(parser.tables_path(parser.GRAMMAR.read_text(), Path('/t')))"],
        capture_output=True, text=True, check=True).stdout.strip()
    assert there == str(here)
    assert parser_module.tables_path(GRAMMAR_TEXT + "\n", Path("/t")) != here
