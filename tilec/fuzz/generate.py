"""Random well-typed ``.tile`` programs over the constructs of language.md.

In: a seed.  Out: a :class:`~tilec.fuzz.program.Program` with its sizes.  The element-wise
built-ins and reduction kinds come from the dialect's tables (``UNARY_OPS``, ``BINARY_OPS``,
``REDUCE_KINDS``), so a new built-in of those shapes is generated without new code; what
needs a special shape has a small function in :data:`CONSTRUCTS`.

Values stay in numerically safe domains: every value carries a bound on its magnitude
(worst case for products, about three standard deviations for sums of random terms), and an
operation that would pass :data:`LIMIT` gets its operand squashed by ``tanh`` first; ``log``,
``sqrt``, ``rsqrt``, ``reciprocal`` and ``pow``'s base read ``abs(x) + 0.5``; a divisor is
``abs(y) + 1``.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import dialect
from ..dialect.ops import BINARY_OPS, OP_KINDS, REDUCE_KINDS, UNARY_OPS
from ..dims import ELLIPSIS, Dim
from .program import Function, Param, Program, Stmt, Type

FLOATS = ("float32", "float16", "bfloat16")
DTYPES = (*FLOATS, "int32")
LIMIT = {"float32": 300.0, "float16": 300.0, "bfloat16": 300.0, "int32": 1e6}
MAX_ELEMENTS = 1 << 18          # per tensor: big enough for a multi-threaded launch
INPUT_BOUND = {"int32": 50.0}   # floats: standard normal clipped to +-4
SMALL = (1, 2, 3, 5, 7, 8, 16, 31, 64, 100, 128, 257)
LARGE = (1000, 1500, 2048, 3000, 4097)
CONSTS = (1, 2, 3, 4, 8)

# operand domain: these read abs(x) + 0.5
POSITIVE = frozenset({"log", "sqrt", "rsqrt", "reciprocal"})
# the magnitude of each unary built-in's result from its operand's; others: b + 1
UNARY_BOUND: dict[str, Callable[[float], float]] = {
    "exp": math.exp, "log": lambda b: max(1.0, math.log(b + 0.5)),
    "sqrt": lambda b: math.sqrt(b + 0.5), "rsqrt": lambda b: 1.5, "reciprocal": lambda b: 2.0,
    "sigmoid": lambda b: 1.0, "tanh": lambda b: 1.0, "sin": lambda b: 1.0,
    "cos": lambda b: 1.0, "erf": lambda b: 1.0, "abs": lambda b: b, "neg": lambda b: b,
    "relu": lambda b: b, "silu": lambda b: b, "gelu": lambda b: b, "gelu_tanh": lambda b: b,
}
MAX_OPERAND = {"exp": 5.0}       # exp's operand beyond this is squashed
OPERATORS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
INT_BINARY = ("add", "sub", "mul", "max", "min")
COMPARES = ("<", "<=", ">", ">=", "==", "!=")


def broadcast(a: tuple, b: tuple) -> tuple | None:
    """NumPy's broadcast of two shapes (``...`` first in both or in neither: the longer
    shape's extra dimensions), or None when they do not broadcast without a run-time check."""
    ga, gb = a[:1] == (ELLIPSIS,), b[:1] == (ELLIPSIS,)
    ca, cb = a[1:] if ga else a, b[1:] if gb else b
    if ga != gb:   # the shape without "..." must not reach into it
        plain, generic = (ca, cb) if gb else (cb, ca)
        if len(plain) > len(generic):
            return None
    elif ga and len(ca) != len(cb):   # "..." would stand at two different places
        return None
    out = []
    for i in range(1, max(len(ca), len(cb)) + 1):
        x = ca[-i] if i <= len(ca) else None
        y = cb[-i] if i <= len(cb) else None
        if x is None or x == Dim.const(1):
            out.append(y if y is not None else x)
        elif y is None or y == Dim.const(1) or x == y:
            out.append(x)
        else:
            return None
    head = (ELLIPSIS,) if ga or gb else ()
    return head + tuple(reversed(out))


@dataclass
class Value:
    type: Type
    bound: float


class Builder:
    """One function's body as it grows: the values so far, and fresh parameters on demand."""

    def __init__(self, rng: np.random.Generator, sizes: dict[str, int], lead: tuple,
                 prefix: str = "", fresh_ok: bool = True) -> None:
        self.rng, self.sizes, self.lead, self.prefix = rng, sizes, lead, prefix
        self.fresh_ok = fresh_ok
        self.floats = FLOATS   # ("float32",) in a dtype template: float32 is written T
        self.params: list[Param] = []
        self.body: list[Stmt] = []
        self.pool: dict[str, Value] = {}
        self.helpers: list[Function] = []
        self.count = 0

    # sizes ---------------------------------------------------------------------------------
    def size(self, d: Dim) -> int:
        return int(d.evaluate(self.sizes))

    def elements(self, t: Type) -> int:
        n = math.prod(self.size(d) for d in t.certain)
        return n * math.prod(self.lead) if t.generic else n

    def fits(self, t: Type) -> bool:
        return all(self.size(d) >= 0 for d in t.certain) and self.elements(t) <= MAX_ELEMENTS

    # values --------------------------------------------------------------------------------
    def choice(self, items):
        return items[int(self.rng.integers(len(items)))]

    def pick(self, ok: Callable[[Value], bool]) -> str | None:
        names = [n for n, v in self.pool.items() if ok(v)]
        if not names:
            return None
        used = {o for s in self.body for o in s.operands}
        leaves = [n for n in names if n not in used]   # chains rather than dead statements
        return self.choice(leaves if leaves and self.rng.random() < 0.75 else names)

    def fresh(self, t: Type, bound: float | None = None) -> str | None:
        if not self.fresh_ok or not self.fits(t):
            return None
        name = f"{self.prefix}x{len(self.params)}"
        self.params.append(Param(name, t))
        self.pool[name] = Value(t, bound or INPUT_BOUND.get(t.dtype, 4.0))
        return name

    def scalar(self, dtype: str) -> str:
        name = f"{self.prefix}s{len(self.params)}"
        default = None
        if self.rng.random() < 0.7:
            default = "3" if dtype == "int32" else self.choice(("0.5", "1e-3", "2.0"))
        passed = default is None or self.rng.random() < 0.5
        self.params.append(Param(name, Type(dtype, ()), True, default, passed))
        self.pool[name] = Value(Type(dtype, ()), 3.0)
        return name

    def add(self, template: str, operands: tuple, t: Type, bound: float,
            constructs: set[str]) -> str | None:
        if not self.fits(t):
            return None
        name = f"{self.prefix}v{self.count}"
        self.count += 1
        self.body.append(Stmt((name,), template, tuple(operands), (t,), frozenset(constructs)))
        self.pool[name] = Value(t, bound)
        return name

    def squash(self, name: str, limit: float) -> tuple[str, float]:
        """``name`` itself, or ``tanh(name)`` (as a statement) when its bound passes ``limit``."""
        v = self.pool[name]
        if v.bound <= limit or v.type.dtype == "int32":
            return name, v.bound
        out = self.add("tanh({0})", (name,), v.type, 1.0, {"elementwise", "unary:tanh"})
        return (out, 1.0) if out else (name, v.bound)

    def random_shape(self, generic: bool) -> tuple:
        rank = int(self.rng.integers(1, 3 if generic else 4))
        dims = []
        symbols = [s for s in self.sizes if s != "h"]
        for _ in range(rank):
            r = self.rng.random()
            if r < 0.55 and symbols:
                dims.append(Dim.sym(self.choice(symbols)))
            elif r < 0.7 and "h" in self.sizes:
                dims.append(Dim.sym("h") * 2)
            else:
                dims.append(Dim.const(self.choice(CONSTS)))
        return ((ELLIPSIS,) if generic else ()) + tuple(dims)

    def dtype(self) -> str:
        r = self.rng.random()
        if self.floats != FLOATS:
            return "float32" if r < 0.85 else "int32"
        return "float32" if r < 0.45 else "float16" if r < 0.65 else \
            "bfloat16" if r < 0.85 else "int32"


# constructs: each adds one statement (and what it needs), or returns False -------------------

def is_float(v: Value) -> bool:
    return v.type.dtype in FLOATS


def unary(b: Builder, op: str) -> bool:
    name = b.pick(lambda v: is_float(v) and v.type.shape != ())
    if name is None:
        return False
    x, bound = b.squash(name, MAX_OPERAND.get(op, math.inf))
    template = f"{op}(abs({{0}}) + 0.5)" if op in POSITIVE else f"{op}({{0}})"
    arg = bound + 0.5 if op in POSITIVE else bound
    out_bound = UNARY_BOUND.get(op, lambda v: v + 1.0)(arg)
    if out_bound > LIMIT[b.pool[x].type.dtype]:
        x, bound = b.squash(x, 1.0)
        out_bound = UNARY_BOUND.get(op, lambda v: v + 1.0)(bound + 0.5)
    return b.add(template, (x,), b.pool[x].type, out_bound,
                 {"elementwise", f"unary:{op}"}) is not None


def _other(b: Builder, x: str) -> tuple[str | None, str, Type | None, set[str]]:
    """The second operand of a binary op on ``x``: (name or None, its text if a literal,
    the result's type, constructs)."""
    t = b.pool[x].type
    r = b.rng.random()
    if r < 0.2:
        lit = "3" if t.dtype == "int32" else b.choice(("0.5", "2.0", "1.5"))
        return None, lit, t, set()
    if r < 0.35:
        return b.scalar(t.dtype), "", t, set()
    if r < 0.65:
        shape = _broadcast_variant(b, t.shape)
        y = b.pick(lambda v: v.type.dtype == t.dtype and broadcast(t.shape, v.type.shape)
                   is not None and v.type.shape != ()) if r < 0.4 else None
        y = y or b.fresh(Type(t.dtype, shape))
        if y is None:
            return None, "", None, set()
        out = broadcast(t.shape, b.pool[y].type.shape)
        extra = {"broadcast"} if out != b.pool[y].type.shape or out != t.shape else set()
        return y, "", (Type(t.dtype, out) if out is not None else None), extra
    y = b.pick(lambda v: v.type == t) or b.fresh(t)
    return y, "", t, set()


def _broadcast_variant(b: Builder, shape: tuple) -> tuple:
    """A shape that broadcasts against ``shape``: leading dimensions dropped, some set to 1,
    or (for a shape without ``...``) one more leading dimension."""
    generic = shape[:1] == (ELLIPSIS,)
    dims = list(shape[1:] if generic else shape)
    r = b.rng.random()
    if r < 0.3 and not generic and len(dims) < 3:
        return (b.random_shape(False)[0], *dims)
    if r < 0.6 and dims:
        dims = dims[int(b.rng.integers(0, len(dims) + 1)):] if not generic else dims
    dims = [Dim.const(1) if b.rng.random() < 0.4 else d for d in dims]
    return ((ELLIPSIS,) if generic else ()) + tuple(dims)


def binary(b: Builder, op: str) -> bool:
    name = b.pick(lambda v: v.type.shape != () and (is_float(v) or op in INT_BINARY))
    if name is None:
        return False
    t = b.pool[name].type
    limit = LIMIT[t.dtype]
    x, bx = b.squash(name, math.sqrt(limit) if op in ("mul", "pow") else limit / 2)
    y, lit, out, extra = _other(b, x)
    if out is None:
        return False
    by = b.pool[y].bound if y else 2.0
    if op in ("mul", "pow") and y and bx * by > limit:
        y, by = b.squash(y, 1.0)
    if op == "pow" and y and by > 1.0:
        y, by = b.squash(y, 1.0)
    ops = (x, y) if y else (x,)
    rhs = "{1}" if y else lit
    if op == "div":
        template = f"{{0}} / (abs({rhs}) + 1.0)" if y else f"{{0}} / {lit}"
        bound = bx / (1.0 if y else float(lit))
    elif op == "pow":
        template, bound = f"pow(abs({{0}}) + 0.5, {rhs})", (bx + 0.5) ** min(by, 2.0) + 1.0
    elif op in OPERATORS:
        template = f"{{0}} {OPERATORS[op]} {rhs}"
        bound = bx * by if op == "mul" else bx + by
    else:
        template, bound = f"{op}({{0}}, {rhs})", max(bx, by)
    if bound > limit:
        return False
    return b.add(template, ops, out, bound, {"elementwise", f"binary:{op}", *extra}) is not None


def where(b: Builder) -> bool:
    x = b.pick(lambda v: v.type.shape != ())
    if x is None:
        return False
    t = b.pool[x].type
    a = b.pick(lambda v: v.type == t) if b.rng.random() < 0.5 else None
    a = a or b.pick(lambda v: v.type.shape == t.shape and v.type.dtype != t.dtype) or x
    zero = "0" if b.pool[a].type.dtype == "int32" else "0.0"
    y = b.pick(lambda v: v.type == t) if b.rng.random() < 0.6 else None
    cmp = b.choice(COMPARES)
    ops = (a, x) + ((y,) if y else ())
    other = "{2}" if y else ("0" if t.dtype == "int32" else "0.5")
    bound = max(b.pool[x].bound, b.pool[y].bound if y else 0.5)
    return b.add(f"where({{0}} {cmp} {zero}, {{1}}, {other})", ops, t, bound,
                 {"where", "compare"}) is not None


def cast(b: Builder) -> bool:
    x = b.pick(lambda v: v.type.shape != ())
    if x is None:
        return False
    t = b.pool[x].type
    to = b.choice((*b.floats, "int32"))
    if to == "int32" and t.dtype != "int32":
        x, _ = b.squash(x, 1e4)
    bound = b.pool[x].bound
    if to != "int32" and bound > LIMIT[to]:
        return False
    return b.add(f"cast({{0}}, {to})", (x,), Type(to, t.shape), bound,
                 {"cast", f"cast:{t.dtype}->{to}"}) is not None


def _axes(b: Builder, t: Type, count: int | None = None) -> list[int]:
    rank = len(t.certain)
    k = count or int(b.rng.integers(1, rank + 1))
    chosen = sorted(int(a) for a in b.rng.choice(rank, size=k, replace=False))
    if t.generic or b.rng.random() < 0.5:
        return [a - rank for a in chosen]
    return chosen


def reduce(b: Builder, kind: str) -> bool:
    name = b.pick(lambda v: is_float(v) and len(v.type.certain) >= 1)
    if name is None:
        return False
    t = b.pool[name].type
    axes = _axes(b, t)
    rank = len(t.certain)
    positive = [a % rank for a in axes]
    count = math.prod(b.size(t.certain[a]) for a in positive)
    keep = b.choice((None, True, False))
    x, bound = b.squash(name, 10.0 if kind == "var" else LIMIT[t.dtype])
    out_bound = {"sum": bound * 3 * math.sqrt(count) + bound, "var": bound * bound}.get(
        kind, bound)
    if out_bound > LIMIT[t.dtype]:
        return False
    head = (ELLIPSIS,) if t.generic else ()
    dims = tuple(Dim.const(1) if i in positive else d for i, d in enumerate(t.certain)
                 if keep is not False or i not in positive)
    keeps = "" if keep is None else f", keepdims={'true' if keep else 'false'}"
    template = f"reduce_{kind}({{0}}, axes={axes}{keeps})"
    constructs = {"reduce", f"reduce:{kind}", "keepdims" if keep is not False else "dropdims"}
    return b.add(template, (x,), Type(t.dtype, head + dims), out_bound, constructs) is not None


def softmax(b: Builder) -> bool:
    x = b.pick(lambda v: is_float(v) and len(v.type.certain) >= 1)
    if x is None:
        return False
    t = b.pool[x].type
    axis = b.choice(("", f", axis={_axes(b, t, 1)[0]}"))
    return b.add(f"softmax({{0}}{axis})", (x,), t, 1.0, {"softmax"}) is not None


def normalize(b: Builder) -> bool:
    name = b.pick(lambda v: is_float(v) and len(v.type.certain) >= 1)
    if name is None:
        return False
    x, _ = b.squash(name, 10.0)
    t = b.pool[x].type
    n = b.size(t.certain[-1])
    eps = b.choice(("", ", eps=1e-3"))
    template = (f"normalize({{0}}, reduce_mean({{0}}, axes=[-1]), "
                f"reduce_var({{0}}, axes=[-1]){eps})")
    return b.add(template, (x,), t, math.sqrt(n) + 1, {"normalize", "reduce"}) is not None


def _slice_choices(b: Builder, d: Dim) -> list[tuple[str, Dim]]:
    """(text, resulting dimension) of the slices of a dimension ``d`` valid at the sizes."""
    n = b.size(d)
    found = []
    if n >= 2:
        found += [(f"1:{d}", d - 1), (f"0:{d}-1", d - 1)]
    if n >= 3 and not d.is_const():
        found.append((f"1:{d}-1", d - 2))
    half = d.div(2) if d.terms and all(c % 2 == 0 for c in d.terms.values()) else None
    if half is not None and b.size(half) >= 1:
        found += [(f"0:{half}", half), (f"{half}:{d}", d - half)]
    if d.is_const() and n >= 3:
        lo = int(b.rng.integers(0, n - 1))
        hi = int(b.rng.integers(lo + 1, n + 1))
        found.append((f"{lo}:{hi}", Dim.const(hi - lo)))
    return found


def slice_(b: Builder) -> bool:
    x = b.pick(lambda v: len(v.type.certain) >= 1)
    if x is None:
        return False
    t = b.pool[x].type
    dims = list(t.certain)
    axes = [i for i, d in enumerate(dims) if _slice_choices(b, d)]
    if not axes:
        return False
    parts = [":"] * len(dims)
    for i in axes:
        if b.rng.random() < 0.6 or i == axes[-1]:
            text, dims[i] = b.choice(_slice_choices(b, t.certain[i]))
            parts[i] = text
    if t.generic:
        parts = ["...", *parts]
    elif b.rng.random() < 0.3 and parts[0] == ":":
        parts = ["...", *parts[1:]]
    shape = ((ELLIPSIS,) if t.generic else ()) + tuple(dims)
    symbolic = any(":" in p and not p.replace(":", "").isdigit() for p in parts if p != ":")
    constructs = {"slice", "slice_symbolic"} if symbolic else {"slice"}
    if "..." in parts:
        constructs.add("slice_ellipsis")
    template = "{0}[" + ", ".join(parts) + "]"
    return b.add(template, (x,), Type(t.dtype, shape), b.pool[x].bound, constructs) is not None


def concat(b: Builder) -> bool:
    x = b.pick(lambda v: len(v.type.certain) >= 1)
    if x is None:
        return False
    t = b.pool[x].type
    axis = _axes(b, t, 1)[0]
    pos = axis % len(t.certain)
    r = b.rng.random()
    if r < 0.3:
        y = x
    else:
        d = t.certain[pos] if r < 0.6 else Dim.const(b.choice(CONSTS))
        dims = list(t.certain)
        dims[pos] = d
        y = b.fresh(Type(t.dtype, ((ELLIPSIS,) if t.generic else ()) + tuple(dims)))
        if y is None:
            return False
    dims = list(t.certain)
    dims[pos] = dims[pos] + b.pool[y].type.certain[pos]
    shape = ((ELLIPSIS,) if t.generic else ()) + tuple(dims)
    bound = max(b.pool[x].bound, b.pool[y].bound)
    return b.add(f"concat({{0}}, {{1}}, axis={axis})", (x, y), Type(t.dtype, shape), bound,
                 {"concat"}) is not None


def transpose(b: Builder) -> bool:
    x = b.pick(lambda v: not v.type.generic and len(v.type.shape) >= 2)
    if x is None:
        return False
    t = b.pool[x].type
    rank = len(t.shape)
    perm = list(range(rank))
    while perm == list(range(rank)):
        perm = [int(p) for p in b.rng.permutation(rank)]
    shape = tuple(t.shape[p] for p in perm)
    return b.add(f"transpose({{0}}, perm={perm})", (x,), Type(t.dtype, shape),
                 b.pool[x].bound, {"transpose"}) is not None


def _reshapes(b: Builder, dims: list) -> list[list]:
    found = []
    if len(dims) < 4:
        i = int(b.rng.integers(0, len(dims) + 1))
        found.append(dims[:i] + [Dim.const(1)] + dims[i:])
    ones = [i for i, d in enumerate(dims) if d == Dim.const(1)]
    if ones and len(dims) > 1:
        found.append(dims[:ones[0]] + dims[ones[0] + 1:])
    if len(dims) >= 2:
        found.append(list(reversed(dims)))
    for i in range(len(dims) - 1):
        if dims[i].is_const() or dims[i + 1].is_const():
            found.append(dims[:i] + [dims[i] * dims[i + 1]] + dims[i + 2:])
    for i, d in enumerate(dims):
        if d.terms and all(c % 2 == 0 for c in d.terms.values()) and d != Dim.const(2):
            found.append(dims[:i] + [d.div(2), Dim.const(2)] + dims[i + 1:])
    return found


def reshape(b: Builder) -> bool:
    x = b.pick(lambda v: not v.type.generic)
    if x is None:
        return False
    t = b.pool[x].type
    choices = _reshapes(b, list(t.shape))
    if not choices:
        return False
    dims = b.choice(choices)
    text = ", ".join(str(d) for d in dims)
    return b.add(f"reshape({{0}}, [{text}])", (x,), Type(t.dtype, tuple(dims)),
                 b.pool[x].bound, {"reshape"}) is not None


def matmul(b: Builder) -> bool:
    name = b.pick(lambda v: is_float(v) and not v.type.generic and 2 <= len(v.type.shape) <= 3)
    if name is None or not b.fresh_ok:
        return False
    x, bx = b.squash(name, 1.0)
    t = b.pool[x].type
    k = t.shape[-1]
    j = b.random_shape(False)[0]
    w = b.fresh(Type(t.dtype, (*t.shape[:-2], k, j)))
    if w is None:
        return False
    bound = bx * 4.0 * 3 * math.sqrt(max(b.size(k), 1)) + 1
    if bound > LIMIT[t.dtype]:
        bound = LIMIT[t.dtype]   # the squashed operand keeps the typical sum far below
    template = b.choice(("{0} @ {1}", "matmul({0}, {1})"))
    return b.add(template, (x, w), Type(t.dtype, (*t.shape[:-1], j)), bound,
                 {"matmul"}) is not None


def call(b: Builder) -> bool:
    """A helper function of its own symbols, called on a value of the body."""
    x = b.pick(lambda v: not v.type.generic and len(v.type.shape) >= 1)
    if x is None or not b.fresh_ok or b.floats != FLOATS:
        return False
    t = b.pool[x].type
    index = len(b.helpers)
    symbols = {f"p{index}{i}": d for i, d in enumerate(t.shape)}
    sizes = {s: b.size(d) for s, d in symbols.items()}
    inner = Builder(b.rng, sizes, (), prefix=f"h{index}_", fresh_ok=False)
    param = Param("a", Type(t.dtype, tuple(Dim.sym(s) for s in symbols)))
    inner.params.append(param)
    inner.pool["a"] = Value(param.type, b.pool[x].bound)
    grow(inner, int(b.rng.integers(1, 4)), HELPER_CONSTRUCTS)
    if not inner.body:
        return False
    helper = finish(inner, f"helper{index}", several=b.rng.random() < 0.4).pruned(params=False)
    b.helpers.append(helper)
    names = tuple(f"{b.prefix}v{b.count}_{i}" for i in range(len(helper.results)))
    b.count += 1
    types = tuple(Type(r.dtype, tuple(d.subst(symbols) for d in r.shape))
                  for r in helper.result_types)
    args = ", ".join("{0}" if p.name == "a" else "2" if p.type.dtype == "int32" else "0.25"
                     for p in helper.params if not p.scalar or p.passed)
    b.body.append(Stmt(names, f"{helper.name}({args})", (x,), types, frozenset({"call"})))
    for n, rt, r in zip(names, types, helper.results):
        b.pool[n] = Value(rt, inner.pool[r].bound)
    return True


# language 1.1: each generator joins the table once the dialect has its op ----------------------

def iota(b: Builder) -> bool:
    """An index tensor the shape of a value; with ``inf``, a causal mask over that value."""
    x = b.pick(lambda v: not v.type.generic and len(v.type.shape) >= 1)
    if x is None:
        return False
    t = b.pool[x].type
    rank = len(t.shape)
    dims = ", ".join(str(d) for d in t.shape)
    axis = int(b.rng.integers(-rank, rank))
    start = b.choice(("", ", start=1", f", start={t.shape[axis]}", ", start=-2"))
    bound = max(b.size(d) for d in t.shape) + 2.0 + b.size(t.shape[axis])
    if rank >= 2 and t.dtype in FLOATS and b.rng.random() < 0.5:
        fill = b.choice(("-inf", "-inf", "inf", "0.0"))
        template = (f"where(iota([{dims}], axis=-1) <= iota([{dims}], axis=-2{start}), "
                    f"{{0}}, {fill})")
        out_bound = math.inf if "inf" in fill else b.pool[x].bound
        constructs = {"iota", "where", "inf"} if "inf" in fill else {"iota", "where"}
        return b.add(template, (x,), t, out_bound, constructs) is not None
    return b.add(f"iota([{dims}], axis={axis}{start})", (), Type("int32", t.shape), bound,
                 {"iota"}) is not None


def dim(b: Builder) -> bool:
    """A dimension of a value, as a number in its arithmetic."""
    x = b.pick(lambda v: len(v.type.certain) >= 1 and v.bound < LIMIT[v.type.dtype] / 2)
    if x is None:
        return False
    t = b.pool[x].type
    d = b.choice(t.certain)
    if t.dtype == "int32":
        return b.add(f"{{0}} + dim({d})", (x,), t, b.pool[x].bound + b.size(d),
                     {"dim", "elementwise"}) is not None
    return b.add(f"{{0}} * rsqrt(cast(dim({d}), {t.dtype}))", (x,), t, b.pool[x].bound,
                 {"dim", "elementwise", "cast"}) is not None


def arg_reduce(b: Builder) -> bool:
    """argmax/argmin of a parameter: a computed value's near ties would flip the index."""
    inputs = [p.name for p in b.params if not p.scalar and p.type.dtype in FLOATS
              and p.type.certain]
    if not inputs:
        return False
    x = b.choice(inputs)
    t = b.pool[x].type
    axis = _axes(b, t, 1)[0]
    pos = axis % len(t.certain)
    keep = b.choice((None, True, False))
    dims = tuple(Dim.const(1) if i == pos else d for i, d in enumerate(t.certain)
                 if keep is not False or i != pos)
    keeps = "" if keep is None else f", keepdims={'true' if keep else 'false'}"
    kind = b.choice(("argmax", "argmin"))
    shape = ((ELLIPSIS,) if t.generic else ()) + dims
    return b.add(f"{kind}({{0}}, axis={axis}{keeps})", (x,), Type("int32", shape),
                 float(b.size(t.certain[pos])), {"argmax", f"arg:{kind}"}) is not None


def _unaries() -> list[tuple[str, float, Callable[[Builder], bool]]]:
    return [(f"unary:{op}", 1.0 / len(UNARY_OPS), lambda b, op=op: unary(b, op))
            for op in UNARY_OPS]


def _binaries() -> list[tuple[str, float, Callable[[Builder], bool]]]:
    return [(f"binary:{op}", 1.2 / len(BINARY_OPS), lambda b, op=op: binary(b, op))
            for op in BINARY_OPS]


def _reductions() -> list[tuple[str, float, Callable[[Builder], bool]]]:
    return [(f"reduce:{k}", 0.6 / len(REDUCE_KINDS), lambda b, k=k: reduce(b, k))
            for k in REDUCE_KINDS]


# (name, weight, generator); the element-wise and reduction rows come from the dialect's tables
CONSTRUCTS = [*_unaries(), *_binaries(), *_reductions(),
              ("where", 0.25, where), ("cast", 0.3, cast), ("softmax", 0.12, softmax),
              ("normalize", 0.08, normalize), ("slice", 0.25, slice_),
              ("concat", 0.2, concat), ("transpose", 0.2, transpose),
              ("reshape", 0.2, reshape), ("matmul", 0.15, matmul), ("call", 0.12, call)]
# language 1.1 constructs, each once the dialect has its op
DTYPE_TEMPLATES = hasattr(dialect, "DTYPE_TEMPLATE_ATTR")
CONSTRUCTS += [row for op, row in (("iota", ("iota", 0.25, iota)), ("dim", ("dim", 0.1, dim)),
                                   ("arg_reduce", ("argmax", 0.15, arg_reduce)))
               if op in OP_KINDS]
HELPER_CONSTRUCTS = [c for c in CONSTRUCTS if c[0] not in ("call", "matmul")]


def grow(b: Builder, statements: int, table: list) -> None:
    weights = np.array([w for _, w, _ in table])
    tries = 0
    while len(b.body) < statements and tries < statements * 8:
        tries += 1
        _, _, make = table[int(b.rng.choice(len(table), p=weights / weights.sum()))]
        make(b)


def finish(b: Builder, name: str, several: bool) -> Function:
    """The function of ``b``'s body, returning its last value and, if ``several``, another."""
    made = [n for s in b.body for n in s.names]
    results = [made[-1]]
    others = [n for n in made[:-1] if n not in results]
    if several and others:
        results.append(b.choice(others))
    types = []
    for r in results:
        t = b.pool[r].type
        if t.dtype in FLOATS and b.rng.random() < 0.15:
            t = Type(b.choice(b.floats), t.shape)
        types.append(t)
    return Function(name, tuple(b.params), tuple(b.body), tuple(results), tuple(types))


def _sizes(rng: np.random.Generator) -> dict[str, int]:
    names = [s for s in ("n", "d", "h") if rng.random() < 0.6] or ["n"]
    return {s: int(rng.choice(LARGE if rng.random() < 0.15 else SMALL)) for s in names}


def generate(seed: int, index: int) -> Program:
    """The program ``index`` of a run seeded ``seed`` (the same pair, the same program)."""
    rng = np.random.default_rng([seed, index])
    sizes = _sizes(rng)
    generic = rng.random() < 0.12
    lead = tuple(int(x) for x in rng.integers(1, 6, size=int(rng.integers(0, 3)))) \
        if generic else ()
    b = Builder(rng, sizes, lead)
    template = DTYPE_TEMPLATES and rng.random() < 0.08
    if template:
        b.floats = ("float32",)
    for _ in range(int(rng.integers(1, 3))):
        for _attempt in range(10):
            if b.fresh(Type(b.dtype(), b.random_shape(generic))):
                break
    if not b.pool:
        b.fresh(Type("float32", ((ELLIPSIS,) if generic else ()) + (Dim.const(4),)))
    grow(b, int(rng.integers(2, 9)), CONSTRUCTS)
    if not b.body:
        unary(b, "abs") or cast(b)
    main = finish(b, "main", several=rng.random() < 0.3).pruned()
    symbols = [s for s in sizes if any(s in str(d) for p in main.params for d in p.type.shape)]
    if symbols and rng.random() < 0.12:
        s = str(rng.choice(symbols))
        larger = [v for v in SMALL if v >= sizes[s]] or [sizes[s]]   # slices stay in range
        values = sorted({sizes[s] if rng.random() < 0.5 else int(rng.choice(larger)),
                         int(rng.choice(larger))})
        main = dataclasses.replace(main, pragmas=(f"#pragma shape_template({s}, {values})",))
    instance = b.choice(FLOATS) if template else None
    return Program((*b.helpers, main), sizes, lead, seed=index,
                   dtype_template=instance).pruned()
