"""Scalar arithmetic for the kernel lowerings: SSA values of arith/math ops with Python operators.

In: MLIR values of scalar type (f32, f64, i1, i16, i32, i64, index).  Out: ``arith``/``math``
ops built at the current insertion point.  ``Num(a) + 1.5`` builds ``arith.addf`` with an
``arith.constant`` of ``a``'s type; floating operators build floating ops, integer ones
signed integer ops, except ``//`` and ``%``, which divide unsigned (they serve index
arithmetic, on non-negative values).  Comparisons are methods (``a.lt(b)``), not Python operators, because
they build i1 masks, not booleans.  Float comparisons are ordered except ``ne`` (true on
NaN, as in NumPy).
"""
from __future__ import annotations

from typing import Sequence, Union

from ...mlir import arith, ir, math

Operand = Union["Num", int, float]

_FLOAT_PREDICATES = {
    "lt": arith.CmpFPredicate.OLT, "le": arith.CmpFPredicate.OLE,
    "gt": arith.CmpFPredicate.OGT, "ge": arith.CmpFPredicate.OGE,
    "eq": arith.CmpFPredicate.OEQ, "ne": arith.CmpFPredicate.UNE,
}
_INT_PREDICATES = {
    "lt": arith.CmpIPredicate.slt, "le": arith.CmpIPredicate.sle,
    "gt": arith.CmpIPredicate.sgt, "ge": arith.CmpIPredicate.sge,
    "eq": arith.CmpIPredicate.eq, "ne": arith.CmpIPredicate.ne,
}


def f32() -> ir.Type:
    return ir.F32Type.get()


def f64() -> ir.Type:
    return ir.F64Type.get()


def i1() -> ir.Type:
    return ir.IntegerType.get_signless(1)


def i16() -> ir.Type:
    return ir.IntegerType.get_signless(16)


def i32() -> ir.Type:
    return ir.IntegerType.get_signless(32)


def i64() -> ir.Type:
    return ir.IntegerType.get_signless(64)


def index() -> ir.Type:
    return ir.IndexType.get()


def is_float(t: ir.Type) -> bool:
    return isinstance(t, ir.FloatType)


def const(t: ir.Type, value: int | float) -> "Num":
    """An ``arith.constant`` of type ``t``."""
    return Num(arith.constant(t, float(value) if is_float(t) else int(value)))


class Num:
    """A scalar SSA value; operators build arith ops on it at the current insertion point."""

    __slots__ = ("value",)

    def __init__(self, value: ir.Value) -> None:
        self.value = value

    @property
    def type(self) -> ir.Type:
        return self.value.type

    @property
    def floating(self) -> bool:
        return is_float(self.value.type)

    def _operand(self, other: Operand) -> ir.Value:
        return other.value if isinstance(other, Num) else const(self.type, other).value

    def _binary(self, other: Operand, float_op, int_op, swap: bool = False) -> "Num":
        a, b = self.value, self._operand(other)
        if swap:
            a, b = b, a
        return Num((float_op if self.floating else int_op)(a, b))

    def __add__(self, other: Operand) -> "Num":
        return self._binary(other, arith.addf, arith.addi)

    __radd__ = __add__

    def __sub__(self, other: Operand) -> "Num":
        return self._binary(other, arith.subf, arith.subi)

    def __rsub__(self, other: Operand) -> "Num":
        return self._binary(other, arith.subf, arith.subi, swap=True)

    def __mul__(self, other: Operand) -> "Num":
        return self._binary(other, arith.mulf, arith.muli)

    __rmul__ = __mul__

    def __truediv__(self, other: Operand) -> "Num":
        return self._binary(other, arith.divf, arith.divsi)

    def __rtruediv__(self, other: Operand) -> "Num":
        return self._binary(other, arith.divf, arith.divsi, swap=True)

    def __floordiv__(self, other: Operand) -> "Num":
        return self._binary(other, arith.divf, arith.divui)

    def __mod__(self, other: Operand) -> "Num":
        return self._binary(other, arith.remf, arith.remui)

    def __neg__(self) -> "Num":
        return Num(arith.negf(self.value)) if self.floating else 0 - self

    def __and__(self, other: Operand) -> "Num":
        return Num(arith.andi(self.value, self._operand(other)))

    def __or__(self, other: Operand) -> "Num":
        return Num(arith.ori(self.value, self._operand(other)))

    def __xor__(self, other: Operand) -> "Num":
        return Num(arith.xori(self.value, self._operand(other)))

    def __lshift__(self, other: Operand) -> "Num":
        return Num(arith.shli(self.value, self._operand(other)))

    def __rshift__(self, other: Operand) -> "Num":
        """Arithmetic (sign-extending) shift."""
        return Num(arith.shrsi(self.value, self._operand(other)))

    def shr_unsigned(self, other: Operand) -> "Num":
        return Num(arith.shrui(self.value, self._operand(other)))

    def cmp(self, predicate: str, other: Operand) -> "Num":
        """An i1 mask: ``self PREDICATE other`` with PREDICATE in lt le gt ge eq ne."""
        b = self._operand(other)
        if self.floating:
            return Num(arith.cmpf(_FLOAT_PREDICATES[predicate], self.value, b))
        return Num(arith.cmpi(_INT_PREDICATES[predicate], self.value, b))

    def lt(self, other: Operand) -> "Num":
        return self.cmp("lt", other)

    def le(self, other: Operand) -> "Num":
        return self.cmp("le", other)

    def gt(self, other: Operand) -> "Num":
        return self.cmp("gt", other)

    def ge(self, other: Operand) -> "Num":
        return self.cmp("ge", other)

    def eq(self, other: Operand) -> "Num":
        return self.cmp("eq", other)

    def ne(self, other: Operand) -> "Num":
        return self.cmp("ne", other)

    def is_nan(self) -> "Num":
        return Num(arith.cmpf(arith.CmpFPredicate.UNO, self.value, self.value))

    def maximum(self, other: Operand) -> "Num":
        """The larger operand; NaN if either is NaN (``numpy.maximum``)."""
        return self._binary(other, arith.maximumf, arith.maxsi)

    def minimum(self, other: Operand) -> "Num":
        return self._binary(other, arith.minimumf, arith.minsi)


def select(cond: Num, a: Operand, b: Operand) -> Num:
    """``cond ? a : b``; a Python number takes the type of the other operand."""
    if not isinstance(a, Num):
        a = const(b.type, a)
    if not isinstance(b, Num):
        b = const(a.type, b)
    return Num(arith.select(cond.value, a.value, b.value))


def logical_not(a: Num) -> Num:
    return a ^ const(i1(), 1)


def floor(x: Num) -> Num:
    return Num(math.floor(x.value))


def round_even(x: Num) -> Num:
    return Num(math.roundeven(x.value))


def sqrt(x: Num) -> Num:
    return Num(math.sqrt(x.value))


def fabs(x: Num) -> Num:
    return Num(math.absf(x.value))


def bitcast(x: Num, t: ir.Type) -> Num:
    return Num(arith.bitcast(t, x.value))


def to_float(x: Num, t: ir.Type) -> Num:
    """Signed integer -> float, or a float widened / narrowed to ``t`` (round to nearest)."""
    if not x.floating:
        return Num(arith.sitofp(t, x.value))
    width, target = x.type.width, t.width
    if width == target:
        return x
    return Num(arith.extf(t, x.value) if width < target else arith.truncf(t, x.value))


def to_int(x: Num, t: ir.Type) -> Num:
    """Float -> signed integer (toward zero), or an integer sign-extended / truncated to ``t``.
    Index values convert with ``index_cast``."""
    if x.floating:
        return Num(arith.fptosi(t, x.value))
    if isinstance(x.type, ir.IndexType) or isinstance(t, ir.IndexType):
        return Num(arith.index_cast(t, x.value))
    width, target = x.type.width, t.width
    if width == target:
        return x
    return Num(arith.extsi(t, x.value) if width < target else arith.trunci(t, x.value))


def zero_extend(x: Num, t: ir.Type) -> Num:
    return Num(arith.extui(t, x.value))


def multiply_add(a: Num, b: Operand, c: Operand) -> Num:
    """``a * b + c`` (floats), which LLVM may contract to one fused multiply-add (one rounding)
    where the CPU has it."""
    contract = arith.FastMathFlags.contract
    product = arith.mulf(a.value, a._operand(b), fastmath=contract)
    return Num(arith.addf(product, a._operand(c), fastmath=contract))


def horner(x: Num, coefficients: Sequence[float]) -> Num:
    """``c0*x^(n-1) + c1*x^(n-2) + ... + c(n-1)``: coefficients from the highest power."""
    acc = const(x.type, coefficients[0])
    for c in coefficients[1:]:
        acc = multiply_add(acc, x, c)
    return acc
