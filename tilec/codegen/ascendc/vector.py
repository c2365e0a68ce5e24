"""Element-wise tile ops as Ascend C level-2 vector instructions on one chunk of elements.

In: operands already in the Unified Buffer (:class:`Vec`: a ``LocalTensor`` of the chunk) or
in scalar registers (:class:`Scalar`), and a tile op name.  Out: the instructions, written to a
:class:`~tilec.codegen.ascendc.cxx.Code`, that compute the op into a temporary: a slot of the
kernel's ``VECCALC`` buffer (``Slot<T>(k)``, one chunk of 4-byte elements each), or a mask
slot (``MaskSlot(k)``, one bit per element).  Every instruction counts ``cnt`` elements.

Float values are computed in float32 (float16/bfloat16 are widened when loaded and rounded at an
explicit cast and when stored); int32 in int32.  Ops without one Ascend C instruction are
composed here; the largest absolute error measured on the twin against float64 NumPy over
[-30, 30] and beyond (``test_ascendc_math.py``; the twin's Exp/Ln/Reciprocal are correctly
rounded, the NPU's approximations add to these):

- sigmoid(x) = 1 / (1 + exp(-x)): 9e-8.  silu(x) = x / (1 + exp(-x)): 1.3e-6 (relative
  1.3e-7).  A huge exp gives 0, not NaN.
- tanh(x) = 1 - 2 / (exp(2 min(x, 40)) + 1): 1.8e-7 (a cancellation near 0, relative 3e-5
  there; the float32 contract's atol is 1e-5), exact +-1 in the tails.
- gelu(x) = 0.5 (x + |x| erf(|x| / sqrt 2)) with erf by Abramowitz-Stegun 7.1.26
  (1 - (a1 t + ... + a5 t^5) exp(-z^2), t = 1 / (1 + p z), |error| < 1.5e-7): 4.7e-7; no
  sign select needed.
- erf(x) = c P(c^2) / Q(c^2) with c = x limited to [-4, 4] (the CPU's rational fit,
  :mod:`..common.erf`: relative accuracy near 0, unlike gelu's form); round(x) is
  ``Cast(..., CAST_RINT)`` (ties to even).
- gelu_tanh(x) = x sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)) (the identity 1 + tanh u =
  2 sigmoid 2u: no cancellation for negative x): 4.8e-7.
- sin/cos: k = rint(x 2/pi), r = x - k pi/2 in three float32 pieces (Cody-Waite), Cephes
  polynomials on [-pi/4, pi/4], the quadrant k mod 4 applied arithmetically (floors by
  ``Cast(..., CAST_FLOOR)``): 1.3e-7 for |x| < 1e4, 1e-6 for |x| < 1e5 (the reduction loses
  bits as k grows).
- pow(a, b) = exp(b ln|a|), negated for a negative base and an odd integer b, NaN for a
  negative base and a non-integer b, 1 when b = 0 or a = 1 (NumPy's rules): relative 1e-6
  for a in (0.01, 10), b in (-4, 4); b in 1, 2, 3, -1 as multiplications.
- softmax (in :mod:`.kernel`): max, exp(x - max), its sum, times 1/sum: 2.5e-7.
- int32 comparisons: exact through float32: s = fa - fb, or float(a - b) where fa == fb
  (then |a - b| <= 256 cannot wrap), compared with 0.  int32 where: b + m (a - b), wrapping.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Union

from ..common import erf as erf_fit
from ..common.values import Lazy, Map, Splat, View
from .cxx import Code, f32, i32

C_TYPE = {"f32": "float", "i32": "int32_t", "float16": "half", "bfloat16": "bfloat16_t",
          "float32": "float", "int32": "int32_t"}
COMPARE = {"lt": "LT", "le": "LE", "gt": "GT", "ge": "GE", "eq": "EQ", "ne": "NE"}
SWAPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}

# Abramowitz & Stegun 7.1.26
ERF_P = 0.3275911
ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
# Cephes sinf/cosf on [-pi/4, pi/4] and pi/2 in three pieces (the first two exact in few bits)
SIN_POLY = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)
COS_POLY = (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2)
HALF_PI = (1.5703125, 4.837512969970703125e-4, 7.54978995489188216e-8)
TANH_CLAMP = 40.0   # tanh(x) is 1 in float32 from x = 9.1; exp(80) stays finite
GELU_TANH = 2.0 * math.sqrt(2.0 / math.pi)


@dataclass(frozen=True)
class Vec:
    """A chunk in UB: ``name`` is a ``LocalTensor`` of ``kind`` (f32, i32, a storage dtype,
    or mask) in temporary slot ``slot``, or owned by the queue ``queue`` (freed to it when
    dead), or by neither (someone else frees it)."""

    name: str
    kind: str
    slot: Optional[int] = None
    queue: Optional[str] = None
    guard: Optional[str] = None  # queue-owned only when this C++ condition is false
    negated: bool = False        # masks: the bit means the predicate does NOT hold


@dataclass(frozen=True)
class Scalar:
    """One value for every element: a C++ expression of type float (f32) or int32_t (i32)."""

    expr: str
    kind: str


Reg = Union[Vec, Scalar]


class SlotPool:
    """Temporary slots handed out and taken back; remembers the most ever in use (the
    buffer plan sizes the slot buffer by it)."""

    def __init__(self) -> None:
        self.free: list[int] = []
        self.count = 0
        self.peak = 0

    def take(self) -> int:
        if self.free:
            self.free.sort()
            return self.free.pop(0)
        self.count += 1
        self.peak = max(self.peak, self.count)
        return self.count - 1

    def give(self, slot: int) -> None:
        self.free.append(slot)

    @contextmanager
    def scope(self) -> Iterator[None]:
        """Slots taken inside are all free again afterwards (one chunk's temporaries)."""
        saved = (list(self.free), self.count)
        try:
            yield
        finally:
            self.free, self.count = saved


class Vector:
    """Emits the instructions of one chunk (see the module docstring).  ``count`` is the C++
    name of the element count; ``names`` numbers the tensors it declares."""

    def __init__(self, code: Code, count: str, slots: SlotPool, masks: SlotPool,
                 names: list[int]) -> None:
        self.code = code
        self.n = count
        self.slots = slots
        self.masks = masks
        self.names = names

    # -- temporaries -----------------------------------------------------------------------------
    def temp(self, kind: str) -> Vec:
        """A fresh temporary of ``kind`` (f32, i32, a 2-byte storage dtype, or mask)."""
        self.names[0] += 1
        name = f"v{self.names[0]}"
        if kind == "mask":
            slot = self.masks.take()
            self.code(f"LocalTensor<uint8_t> {name} = MaskSlot({slot});")
        else:
            slot = self.slots.take()
            self.code(f"LocalTensor<{C_TYPE[kind]}> {name} = Slot<{C_TYPE[kind]}>({slot});")
        return Vec(name, kind, slot)

    def release(self, reg: Reg) -> None:
        """``reg`` is dead: its slot may be taken again, or its queue buffer is freed."""
        if not isinstance(reg, Vec):
            return
        if reg.slot is not None:
            (self.masks if reg.kind == "mask" else self.slots).give(reg.slot)
        elif reg.queue is not None:
            guard = f"if (!{reg.guard}) " if reg.guard else ""
            self.code(f"{guard}{reg.queue}.FreeTensor({reg.name});")

    def tensor(self, x: Reg) -> Vec:
        """``x`` as a tensor: a scalar is duplicated into a temporary (the caller releases
        it)."""
        if isinstance(x, Vec):
            return x
        t = self.temp(x.kind)
        self.code(f"Duplicate({t.name}, {x.expr}, {self.n});")
        return t

    def copy(self, x: Reg, dest: Vec) -> None:
        """``dest = x`` in dest's kind (float32 or int32 values; exact)."""
        if isinstance(x, Scalar):
            self.emit(f"Duplicate({dest.name}, {x.expr}, {self.n})")
        elif x.name != dest.name:
            one = "1.0f" if dest.kind == "f32" else "int32_t(1)"
            self.emit(f"Muls({dest.name}, {x.name}, {one}, {self.n})")

    def constant(self, value: float, kind: str = "f32") -> Vec:
        return self.tensor(Scalar(f32(value) if kind == "f32" else i32(int(value)), kind))

    def emit(self, text: str) -> None:
        self.code(text + ";")

    # -- arithmetic -----------------------------------------------------------------------------
    def binary(self, op: str, a: Reg, b: Reg, dest: Vec) -> None:
        """``dest = a op b`` for add sub mul div max min (not both scalars)."""
        n = self.n
        name = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "max": "Max",
                "min": "Min"}[op]
        if isinstance(a, Vec) and isinstance(b, Vec):
            self.emit(f"{name}({dest.name}, {a.name}, {b.name}, {n})")
        elif op == "div" or (op == "sub" and isinstance(a, Scalar)):
            if op == "sub":       # s - x = -x + s
                assert isinstance(b, Vec)
                self.emit(f"Muls({dest.name}, {b.name}, {self._minus_one(dest.kind)}, {n})")
                self.emit(f"Adds({dest.name}, {dest.name}, {a.expr}, {n})")
                return
            ta, tb = self.tensor(a), self.tensor(b)      # exact division, not times 1/s
            self.emit(f"Div({dest.name}, {ta.name}, {tb.name}, {n})")
            for t, x in ((ta, a), (tb, b)):
                if t is not x:
                    self.release(t)
        else:
            vec, scalar = (a, b) if isinstance(a, Vec) else (b, a)
            assert isinstance(vec, Vec) and isinstance(scalar, Scalar)
            if op == "sub":
                scalar = Scalar(f"-({scalar.expr})", scalar.kind)
            scalar_name = {"add": "Adds", "sub": "Adds", "mul": "Muls", "max": "Maxs",
                           "min": "Mins"}[op]
            self.emit(f"{scalar_name}({dest.name}, {vec.name}, {scalar.expr}, {n})")

    @staticmethod
    def _minus_one(kind: str) -> str:
        return "-1.0f" if kind == "f32" else "int32_t(-1)"

    def unary(self, op: str, x: Vec, dest: Vec) -> None:
        """``dest = op(x)`` for every float unary built-in (and int32 neg): one Ascend C call
        (:data:`UNARY_CALLS`) or a composition (:data:`UNARY_COMPOSED`)."""
        if op in UNARY_CALLS:
            self.emit(f"{UNARY_CALLS[op]}({dest.name}, {x.name}, {self.n})")
        elif op in UNARY_COMPOSED:
            UNARY_COMPOSED[op](self, x, dest)
        else:
            raise AssertionError(f"no vector code for {op}")

    def _neg(self, x: Vec, dest: Vec) -> None:
        self.emit(f"Muls({dest.name}, {x.name}, {self._minus_one(x.kind)}, {self.n})")

    def _one_over_one_plus_exp(self, x: Vec, dest: Vec, scale: str,
                               clamp: str | None = None) -> None:
        """``dest = 1 / (1 + exp(min(scale * x, clamp)))``."""
        n, d = self.n, dest.name
        self.emit(f"Muls({d}, {x.name}, {scale}, {n})")
        if clamp is not None:
            self.emit(f"Mins({d}, {d}, {clamp}, {n})")
        self.emit(f"Exp({d}, {d}, {n})")
        self.emit(f"Adds({d}, {d}, 1.0f, {n})")
        self.emit(f"Reciprocal({d}, {d}, {n})")

    def _sigmoid(self, x: Vec, dest: Vec) -> None:
        self._one_over_one_plus_exp(x, dest, "-1.0f")

    def _tanh(self, x: Vec, dest: Vec) -> None:
        """``1 - 2 / (1 + exp(2x))``, the exponent clamped."""
        self._one_over_one_plus_exp(x, dest, "2.0f", f32(2 * TANH_CLAMP))
        n, d = self.n, dest.name
        self.emit(f"Muls({d}, {d}, -2.0f, {n})")
        self.emit(f"Adds({d}, {d}, 1.0f, {n})")

    def _gelu_tanh(self, x: Vec, dest: Vec) -> None:
        n, s = self.n, x.name
        u = self.temp("f32")           # 2 sqrt(2/pi) (x + 0.044715 x^3)
        self.emit(f"Mul({u.name}, {s}, {s}, {n})")
        self.emit(f"Muls({u.name}, {u.name}, {f32(GELU_TANH * 0.044715)}, {n})")
        self.emit(f"Adds({u.name}, {u.name}, {f32(GELU_TANH)}, {n})")
        self.emit(f"Mul({u.name}, {u.name}, {s}, {n})")
        self._silu(x, u, dest)
        self.release(u)

    def _silu(self, x: Vec, u: Vec, dest: Vec) -> None:
        """``dest = x * sigmoid(u)`` as ``x / (1 + exp(-u))``."""
        n = self.n
        e = self.temp("f32")
        self.emit(f"Muls({e.name}, {u.name}, -1.0f, {n})")
        self.emit(f"Exp({e.name}, {e.name}, {n})")
        self.emit(f"Adds({e.name}, {e.name}, 1.0f, {n})")
        self.emit(f"Div({dest.name}, {x.name}, {e.name}, {n})")
        self.release(e)

    def _gelu(self, x: Vec, dest: Vec) -> None:
        n = self.n
        a, t, q = self.temp("f32"), self.temp("f32"), self.temp("f32")
        self.emit(f"Abs({a.name}, {x.name}, {n})")
        self.emit(f"Muls({a.name}, {a.name}, {f32(math.sqrt(0.5))}, {n})")       # z = |x|/sqrt2
        self._erf_nonnegative(a, t, q)
        self.emit(f"Abs({a.name}, {x.name}, {n})")
        self.emit(f"Mul({q.name}, {q.name}, {a.name}, {n})")
        self.emit(f"Add({q.name}, {q.name}, {x.name}, {n})")
        self.emit(f"Muls({dest.name}, {q.name}, 0.5f, {n})")
        for v in (a, t, q):
            self.release(v)

    def _erf(self, x: Vec, dest: Vec) -> None:
        """``c P(c^2) / Q(c^2)`` (:mod:`..common.erf`) with ``c`` = x limited to [-4, 4], the
        result limited to [-1, 1]; NaN where x is (Mins/Maxs drop a NaN)."""
        n = self.n
        c, t, p, q = (self.temp("f32") for _ in range(4))
        self.emit(f"Mins({c.name}, {x.name}, {f32(erf_fit.ERF_SATURATES)}, {n})")
        self.emit(f"Maxs({c.name}, {c.name}, {f32(-erf_fit.ERF_SATURATES)}, {n})")
        self.emit(f"Mul({t.name}, {c.name}, {c.name}, {n})")
        self._horner(p, t, tuple(erf_fit.ERF_P))
        self._horner(q, t, tuple(erf_fit.ERF_Q))
        self.emit(f"Div({p.name}, {p.name}, {q.name}, {n})")
        self.emit(f"Mul({p.name}, {p.name}, {c.name}, {n})")
        self.emit(f"Mins({p.name}, {p.name}, 1.0f, {n})")
        self.emit(f"Maxs({p.name}, {p.name}, -1.0f, {n})")
        for v in (c, t, q):
            self.release(v)
        number = self.compare("eq", x, x, "f32")
        self.select(number, p, x, "f32", dest)
        self.release(number)
        self.release(p)

    def _round(self, x: Vec, dest: Vec) -> None:
        self.emit(f"Cast({dest.name}, {x.name}, RoundMode::CAST_RINT, {self.n})")

    def _erf_nonnegative(self, a: Vec, t: Vec, q: Vec) -> None:
        """``q = erf(a)`` for ``a`` >= 0 (Abramowitz-Stegun 7.1.26); ``t`` is scratch."""
        n = self.n
        self.emit(f"Muls({t.name}, {a.name}, {f32(ERF_P)}, {n})")
        self.emit(f"Adds({t.name}, {t.name}, 1.0f, {n})")
        self.emit(f"Reciprocal({t.name}, {t.name}, {n})")                    # t = 1/(1+p z)
        self.emit(f"Muls({q.name}, {t.name}, {f32(ERF_A[4])}, {n})")
        for coef in reversed(ERF_A[:4]):
            self.emit(f"Adds({q.name}, {q.name}, {f32(coef)}, {n})")
            self.emit(f"Mul({q.name}, {q.name}, {t.name}, {n})")
        self.emit(f"Mul({t.name}, {a.name}, {a.name}, {n})")
        self.emit(f"Muls({t.name}, {t.name}, -1.0f, {n})")
        self.emit(f"Exp({t.name}, {t.name}, {n})")                            # exp(-z^2)
        self.emit(f"Mul({q.name}, {q.name}, {t.name}, {n})")
        self.emit(f"Muls({q.name}, {q.name}, -1.0f, {n})")
        self.emit(f"Adds({q.name}, {q.name}, 1.0f, {n})")                     # erf(z)

    def _floor(self, dest: Vec, x: Vec) -> None:
        self.emit(f"Cast({dest.name}, {x.name}, RoundMode::CAST_FLOOR, {self.n})")

    def _sin_cos(self, x: Vec, dest: Vec, cosine: bool) -> None:
        n = self.n
        k, r, z, s, c = (self.temp("f32") for _ in range(5))
        self.emit(f"Muls({k.name}, {x.name}, {f32(2 / math.pi)}, {n})")
        self.emit(f"Cast({k.name}, {k.name}, RoundMode::CAST_RINT, {n})")     # quarter turns
        self.emit(f"Muls({z.name}, {k.name}, {f32(-HALF_PI[0])}, {n})")
        self.emit(f"Add({r.name}, {x.name}, {z.name}, {n})")
        for piece in HALF_PI[1:]:
            self.emit(f"Muls({z.name}, {k.name}, {f32(-piece)}, {n})")
            self.emit(f"Add({r.name}, {r.name}, {z.name}, {n})")              # r in [-pi/4, pi/4]
        self.emit(f"Mul({z.name}, {r.name}, {r.name}, {n})")
        self._horner(s, z, SIN_POLY)
        self.emit(f"Mul({s.name}, {s.name}, {z.name}, {n})")
        self.emit(f"Mul({s.name}, {s.name}, {r.name}, {n})")
        self.emit(f"Add({s.name}, {s.name}, {r.name}, {n})")                  # sin r
        self._horner(c, z, COS_POLY)
        self.emit(f"Mul({c.name}, {c.name}, {z.name}, {n})")
        self.emit(f"Mul({c.name}, {c.name}, {z.name}, {n})")
        self.emit(f"Muls({r.name}, {z.name}, -0.5f, {n})")
        self.emit(f"Add({c.name}, {c.name}, {r.name}, {n})")
        self.emit(f"Adds({c.name}, {c.name}, 1.0f, {n})")                     # cos r
        if cosine:
            self.emit(f"Adds({k.name}, {k.name}, 1.0f, {n})")
        # q = k mod 4 = 2 b2 + b1: sin(x) = (1 - 2 b2) (sin r + b1 (cos r - sin r))
        self.emit(f"Muls({z.name}, {k.name}, 0.25f, {n})")
        self._floor(z, z)
        self.emit(f"Muls({z.name}, {z.name}, -4.0f, {n})")
        self.emit(f"Add({k.name}, {k.name}, {z.name}, {n})")                  # q
        self.emit(f"Muls({z.name}, {k.name}, 0.5f, {n})")
        self._floor(z, z)                                                     # b2
        self.emit(f"Muls({r.name}, {z.name}, -2.0f, {n})")
        self.emit(f"Add({k.name}, {k.name}, {r.name}, {n})")                  # b1
        self.emit(f"Sub({c.name}, {c.name}, {s.name}, {n})")
        self.emit(f"Mul({c.name}, {c.name}, {k.name}, {n})")
        self.emit(f"Add({s.name}, {s.name}, {c.name}, {n})")
        self.emit(f"Muls({z.name}, {z.name}, -2.0f, {n})")
        self.emit(f"Adds({z.name}, {z.name}, 1.0f, {n})")
        self.emit(f"Mul({dest.name}, {s.name}, {z.name}, {n})")
        for v in (k, r, z, s, c):
            self.release(v)

    def _horner(self, dest: Vec, z: Vec, coefs: tuple[float, ...]) -> None:
        """``dest = ((c0 z + c1) z + c2) ...``."""
        self.emit(f"Muls({dest.name}, {z.name}, {f32(coefs[0])}, {self.n})")
        for coef in coefs[1:-1]:
            self.emit(f"Adds({dest.name}, {dest.name}, {f32(coef)}, {self.n})")
            self.emit(f"Mul({dest.name}, {dest.name}, {z.name}, {self.n})")
        self.emit(f"Adds({dest.name}, {dest.name}, {f32(coefs[-1])}, {self.n})")

    def power(self, a: Vec, b: Reg, dest: Vec) -> None:
        """``dest = a ** b`` by NumPy's rules (module docstring)."""
        n = self.n
        tb = self.tensor(b)
        m, neg, t, u = (self.temp("f32") for _ in range(4))
        ones = self.constant(1.0)
        mask = self.temp("mask")
        count = f"tilec::CompareCount({n}, 4)"
        self.emit(f"Abs({m.name}, {a.name}, {n})")
        self.emit(f"Ln({m.name}, {m.name}, {n})")
        self.emit(f"Mul({m.name}, {m.name}, {tb.name}, {n})")
        self.emit(f"Exp({m.name}, {m.name}, {n})")                             # |a| ** b
        self.emit(f"Duplicate({t.name}, 0.0f, {n})")
        self.emit(f"Compare({mask.name}, {a.name}, {t.name}, CMPMODE::LT, {count})")
        self.emit(f"Select({neg.name}, {mask.name}, {ones.name}, 0.0f, "
                  f"SELMODE::VSEL_TENSOR_SCALAR_MODE, {n})")                  # a < 0
        self._floor(t, tb)
        self.emit(f"Sub({t.name}, {tb.name}, {t.name}, {n})")                  # frac(b)
        self.emit(f"Duplicate({u.name}, 0.0f, {n})")
        self.emit(f"Compare({mask.name}, {t.name}, {u.name}, CMPMODE::NE, {count})")
        self.emit(f"Select({t.name}, {mask.name}, {ones.name}, 0.0f, "
                  f"SELMODE::VSEL_TENSOR_SCALAR_MODE, {n})")                  # b not integral
        self.emit(f"Muls({u.name}, {tb.name}, 0.5f, {n})")
        self._floor(u, u)
        self.emit(f"Muls({u.name}, {u.name}, -2.0f, {n})")
        self.emit(f"Add({u.name}, {u.name}, {tb.name}, {n})")                  # b mod 2
        self.emit(f"Mul({u.name}, {u.name}, {neg.name}, {n})")
        self.emit(f"Muls({u.name}, {u.name}, -2.0f, {n})")
        self.emit(f"Adds({u.name}, {u.name}, 1.0f, {n})")                      # the sign
        self.emit(f"Mul({m.name}, {m.name}, {u.name}, {n})")
        self.emit(f"Mul({t.name}, {t.name}, {neg.name}, {n})")               # 1: NaN
        self.emit(f"Duplicate({u.name}, 0.5f, {n})")
        self.emit(f"Compare({mask.name}, {t.name}, {u.name}, CMPMODE::LT, {count})")
        self.emit(f"Select({m.name}, {mask.name}, {m.name}, {f32(math.nan)}, "
                  f"SELMODE::VSEL_TENSOR_SCALAR_MODE, {n})")
        self.emit(f"Duplicate({u.name}, 0.0f, {n})")
        self.emit(f"Compare({mask.name}, {tb.name}, {u.name}, CMPMODE::NE, {count})")
        self.emit(f"Select({m.name}, {mask.name}, {m.name}, 1.0f, "
                  f"SELMODE::VSEL_TENSOR_SCALAR_MODE, {n})")                  # b == 0
        self.emit(f"Compare({mask.name}, {a.name}, {ones.name}, CMPMODE::NE, {count})")
        self.emit(f"Select({dest.name}, {mask.name}, {m.name}, 1.0f, "
                  f"SELMODE::VSEL_TENSOR_SCALAR_MODE, {n})")                  # a == 1
        for v in (m, neg, t, u, ones, mask):
            self.release(v)
        if tb is not b:
            self.release(tb)

    # -- comparisons, select and casts -----------------------------------------------------------
    def compare(self, predicate: str, a: Reg, b: Reg, kind: str) -> Vec:
        """The mask of ``a predicate b`` (float32 or int32 operands)."""
        if isinstance(a, Scalar) and isinstance(b, Vec):
            a, b, predicate = b, a, SWAPPED[predicate]
        ta, tb = self.tensor(a), self.tensor(b)
        count = f"tilec::CompareCount({self.n}, 4)"
        mask = self.temp("mask")
        if kind == "f32" or predicate in ("eq", "ne"):
            negated = kind == "i32" and predicate == "ne"
            mode = COMPARE["eq" if negated else predicate]
            self.emit(f"Compare({mask.name}, {ta.name}, {tb.name}, CMPMODE::{mode}, {count})")
            result = Vec(mask.name, "mask", mask.slot, negated=negated)
        else:
            result = mask
            fa, fb, d, e = (self.temp("f32") for _ in range(4))
            diff = self.temp("i32")
            n = self.n
            self.emit(f"Cast({fa.name}, {ta.name}, RoundMode::CAST_RINT, {n})")
            self.emit(f"Cast({fb.name}, {tb.name}, RoundMode::CAST_RINT, {n})")
            self.emit(f"Sub({d.name}, {fa.name}, {fb.name}, {n})")
            self.emit(f"Sub({diff.name}, {ta.name}, {tb.name}, {n})")
            self.emit(f"Cast({e.name}, {diff.name}, RoundMode::CAST_RINT, {n})")
            self.emit(f"Compare({mask.name}, {fa.name}, {fb.name}, CMPMODE::EQ, {count})")
            self.emit(f"Select({d.name}, {mask.name}, {e.name}, {d.name}, "
                      f"SELMODE::VSEL_TENSOR_TENSOR_MODE, {n})")
            self.emit(f"Duplicate({fb.name}, 0.0f, {n})")
            self.emit(f"Compare({mask.name}, {d.name}, {fb.name}, CMPMODE::{COMPARE[predicate]}, "
                      f"{count})")
            for v in (fa, fb, d, e, diff):
                self.release(v)
        for t, x in ((ta, a), (tb, b)):
            if t is not x:
                self.release(t)
        return result

    def select(self, mask: Reg, a: Reg, b: Reg, kind: str, dest: Vec) -> None:
        """``dest = mask ? a : b`` (a scalar mask picks one side for the whole chunk)."""
        if isinstance(mask, Scalar):
            for head, side in ((f"if ({mask.expr})", a), ("else", b)):
                with self.code.block(head):
                    self.copy(side, dest)
            return
        if mask.negated:
            a, b = b, a
        n = self.n
        if kind == "f32":
            ta = self.tensor(a)
            if isinstance(b, Scalar):
                self.emit(f"Select({dest.name}, {mask.name}, {ta.name}, {b.expr}, "
                          f"SELMODE::VSEL_TENSOR_SCALAR_MODE, {n})")
            else:
                self.emit(f"Select({dest.name}, {mask.name}, {ta.name}, {b.name}, "
                          f"SELMODE::VSEL_TENSOR_TENSOR_MODE, {n})")
            if ta is not a:
                self.release(ta)
            return
        ones, m = self.constant(1.0), self.temp("f32")     # int32: b + m (a - b), wrapping
        self.emit(f"Select({m.name}, {mask.name}, {ones.name}, 0.0f, "
                  f"SELMODE::VSEL_TENSOR_SCALAR_MODE, {n})")
        mi, diff = self.temp("i32"), self.temp("i32")
        self.emit(f"Cast({mi.name}, {m.name}, RoundMode::CAST_RINT, {n})")
        ta, tb = self.tensor(a), self.tensor(b)
        self.emit(f"Sub({diff.name}, {ta.name}, {tb.name}, {n})")
        self.emit(f"Mul({mi.name}, {mi.name}, {diff.name}, {n})")
        self.emit(f"Add({dest.name}, {mi.name}, {tb.name}, {n})")
        for t, x in ((ta, a), (tb, b)):
            if t is not x:
                self.release(t)
        for v in (ones, m, mi, diff):
            self.release(v)

    def round_to(self, x: Vec, dtype: str, dest: Vec) -> None:
        """``dest`` = float32 ``x`` rounded to ``dtype`` (float16/bfloat16) and widened."""
        narrow = self.temp(dtype)
        self.emit(f"Cast({narrow.name}, {x.name}, RoundMode::CAST_RINT, {self.n})")
        self.emit(f"Cast({dest.name}, {narrow.name}, RoundMode::CAST_NONE, {self.n})")
        self.release(narrow)

    def convert(self, x: Vec, source: str, target: str, dest: Vec) -> None:
        """``tile.cast`` from ``source`` to ``target`` element type, in compute types."""
        n = self.n
        if source == target == "int32":
            self.copy(x, dest)
            return
        if target == "int32":
            self.emit(f"Cast({dest.name}, {x.name}, RoundMode::CAST_TRUNC, {n})")
            return
        if source == "int32":
            if target == "float32":
                self.emit(f"Cast({dest.name}, {x.name}, RoundMode::CAST_RINT, {n})")
                return
            wide = self.temp("f32")
            self.emit(f"Cast({wide.name}, {x.name}, RoundMode::CAST_RINT, {n})")
            self.round_to(wide, target, dest)
            self.release(wide)
            return
        if target == "float32":      # already float32 values (of a narrower type)
            self.copy(x, dest)
            return
        self.round_to(x, target, dest)


# ---------------------------------------------------------------------------------------------
# A tree of lazy values, evaluated on one chunk


BINARY = ("add", "sub", "mul", "div", "max", "min")


def storage_kind(dtype: str) -> str:
    """The :class:`Vec` kind of a buffer of ``dtype`` as loaded (not widened)."""
    return {"float32": "f32", "int32": "i32"}.get(dtype, dtype)


def compute_kind(dtype: str) -> str:
    """How values of element type ``dtype`` are computed: f32 for every float type, i32, or
    mask (comparisons)."""
    return {"int32": "i32", "bool": "mask"}.get(dtype, "f32")


class Evaluator:
    """Computes a tree of :mod:`lazy values <tilec.codegen.common.values>` whose leaves are
    loaded (``leaves``: view key -> register) with ``vector``; each temporary is released
    after its last use, into the slot of a dying operand where it can be."""

    def __init__(self, vector: Vector, leaves: dict[tuple, Reg],
                 key: Callable[[View], tuple]) -> None:
        self.vector = vector
        self.leaves = leaves
        self.key = key
        self.uses: dict[Any, int] = {}
        self.memo: dict[Any, Reg] = {}

    def _id(self, node: Lazy) -> Any:
        return self.key(node) if isinstance(node, View) else id(node)

    def _count(self, node: Lazy) -> None:
        ident = self._id(node)
        self.uses[ident] = self.uses.get(ident, 0) + 1
        if self.uses[ident] == 1 and isinstance(node, Map):
            for operand in node.operands:
                self._count(operand)

    def root(self, tree: Lazy, into: Optional[Vec] = None) -> Reg:
        """``tree``'s value: in ``into`` when it is a map of ``into``'s kind."""
        self._count(tree)
        return self._eval(tree, into)

    def _eval(self, node: Lazy, into: Optional[Vec] = None) -> Reg:
        ident = self._id(node)
        if ident in self.memo:
            return self.memo[ident]
        if isinstance(node, Splat):
            reg: Reg = Scalar(node.value, compute_kind(node.dtype))
        elif isinstance(node, View):
            reg = self._widened(self.leaves[ident])
        else:
            assert isinstance(node, Map), "a concatenation is written part by part"
            reg = self._map(node, into)
        self.memo[ident] = reg
        return reg

    def _widened(self, reg: Reg) -> Reg:
        """A loaded float16/bfloat16 chunk as float32."""
        if not isinstance(reg, Vec) or reg.kind not in ("float16", "bfloat16"):
            return reg
        wide = self.vector.temp("f32")
        self.vector.emit(f"Cast({wide.name}, {reg.name}, RoundMode::CAST_NONE, {self.vector.n})")
        self.vector.release(reg)
        return wide

    def _done(self, operand: Lazy) -> bool:
        """One use of ``operand`` consumed; whether it is now dead."""
        ident = self._id(operand)
        self.uses[ident] -= 1
        return self.uses[ident] == 0

    def _map(self, node: Map, into: Optional[Vec]) -> Reg:
        v = self.vector
        regs = [self._eval(x) for x in node.operands]
        dying = [r for x, r in zip(node.operands, regs) if self._done(x)]
        if all(isinstance(r, Scalar) for r in regs):     # every leaf is one value per chunk
            k = 1 if node.op == "select" else 0
            regs[k] = v.tensor(regs[k])
            dying.append(regs[k])
        if node.op.startswith("cmp."):
            result = v.compare(node.op[len("cmp."):], regs[0], regs[1],
                               compute_kind(node.operands[0].dtype))
            for r in dying:
                v.release(r)
            return result
        kind = compute_kind(node.dtype)
        dest = into if into is not None and into.kind == kind else None
        reused = None
        if dest is None:
            reused = next((r for r in dying if isinstance(r, Vec) and r.slot is not None
                           and r.kind == kind), None)
            dest = Vec(reused.name, kind, reused.slot) if reused is not None else v.temp(kind)
        self._apply(node, regs, dest)
        for r in dying:
            if r is not reused:
                v.release(r)
        return dest

    def _apply(self, node: Map, regs: list[Reg], dest: Vec) -> None:
        apply = MAP_APPLY.get(node.op, Evaluator._unary)
        apply(self, node, regs, dest)

    def _binary(self, node: Map, regs: list[Reg], dest: Vec) -> None:
        a, b = regs
        self.vector.binary(node.op, a, b, dest)

    def _power(self, node: Map, regs: list[Reg], dest: Vec) -> None:
        v = self.vector
        base = v.tensor(regs[0])
        v.power(base, regs[1], dest)
        if base is not regs[0]:
            v.release(base)

    def _select(self, node: Map, regs: list[Reg], dest: Vec) -> None:
        self.vector.select(regs[0], regs[1], regs[2], compute_kind(node.dtype), dest)

    def _cast(self, node: Map, regs: list[Reg], dest: Vec) -> None:
        v = self.vector
        x = v.tensor(regs[0])
        v.convert(x, node.operands[0].dtype, node.dtype, dest)
        if x is not regs[0]:
            v.release(x)

    def _unary(self, node: Map, regs: list[Reg], dest: Vec) -> None:
        v = self.vector
        x = v.tensor(regs[0])
        v.unary(node.op, x, dest)
        if x is not regs[0]:
            v.release(x)


UNARY_CALLS = {"exp": "Exp", "log": "Ln", "sqrt": "Sqrt", "rsqrt": "Rsqrt", "abs": "Abs",
               "reciprocal": "Reciprocal", "relu": "Relu"}
"""The unary built-ins that are one Ascend C vector call."""

UNARY_COMPOSED: dict[str, Callable[[Vector, Vec, Vec], None]] = {
    "neg": Vector._neg,
    "sigmoid": Vector._sigmoid,
    "silu": lambda v, x, dest: v._silu(x, x, dest),
    "tanh": Vector._tanh,
    "gelu": Vector._gelu,
    "gelu_tanh": Vector._gelu_tanh,
    "sin": lambda v, x, dest: v._sin_cos(x, dest, False),
    "cos": lambda v, x, dest: v._sin_cos(x, dest, True),
    "erf": Vector._erf,
    "round": Vector._round,
}
"""The unary built-ins composed of several calls."""

MAP_APPLY: dict[str, Callable[[Evaluator, Map, list[Reg], Vec], None]] = {
    **{op: Evaluator._binary for op in BINARY},
    "pow": Evaluator._power,
    "select": Evaluator._select,
    "cast": Evaluator._cast,
}
"""How the evaluator computes a map of each op that is not unary (:meth:`Evaluator._unary`)."""
