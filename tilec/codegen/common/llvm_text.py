"""LLVM IR text written by the MLIR bindings' LLVM (24-git), rewritten for llvmlite's (22).

In: LLVM IR text from ``translate_module_to_llvmir``.  Out: the same module, with the
floating-point literals that the two parsers read differently rewritten: LLVM 24 prints
``+inf``, ``-qnan``, ``+nan(0x1)``, decimals rounded to the literal's type and ``f0x<bits>``;
LLVM 22 wants exact decimals or ``0x`` + the double's bits for float/double, ``0xH``/``0xR`` +
bits for half/bfloat.  Both backends (cpu, ptx) cross this way.
"""
from __future__ import annotations

import re
import struct

import ml_dtypes
import numpy as np

_FLOAT_TYPE = r"(?<![\w@%.$])(half|bfloat|float|double)\b"
_LITERAL = (r"(?<![\w@%.$])([-+](?:inf|qnan|s?nan\(0x[0-9a-fA-F]+\))"
            r"|f0x[0-9a-fA-F]+|-?\d+\.\d+e[-+]\d+)")
_TOKEN = re.compile(f"{_FLOAT_TYPE}|{_LITERAL}")
_BITS = {"half": 16, "bfloat": 16, "float": 32, "double": 64}


def _bits_of(literal: str, fp_type: str) -> int:
    """The bit pattern, in ``fp_type``, of an LLVM 24 floating-point literal."""
    width = _BITS[fp_type]
    if literal.startswith("f0x"):
        return int(literal[3:], 16)
    sign = 1 << (width - 1) if literal.startswith("-") else 0
    exponent_bits = {16: 5, 32: 8, 64: 11}[width] if fp_type != "bfloat" else 8
    mantissa_bits = width - 1 - exponent_bits
    all_ones = ((1 << exponent_bits) - 1) << mantissa_bits
    quiet = 1 << (mantissa_bits - 1)
    body = literal.lstrip("+-")
    if body == "inf":
        return sign | all_ones
    if body == "qnan":
        return sign | all_ones | quiet
    if body.endswith(")"):
        payload = int(body[body.index("(") + 1:-1], 16)
        return sign | all_ones | (0 if body.startswith("snan") else quiet) | payload
    value = float(literal)
    numpy_type = {"half": np.float16, "bfloat": ml_dtypes.bfloat16, "float": np.float32,
                  "double": np.float64}[fp_type]
    unsigned = {16: np.uint16, 32: np.uint32, 64: np.uint64}[width]
    return int(np.array(value, dtype=numpy_type).view(unsigned))


def _llvm22_literal(literal: str, fp_type: str) -> str:
    bits = _bits_of(literal, fp_type)
    if fp_type == "half":
        return f"0xH{bits:04X}"
    if fp_type == "bfloat":
        return f"0xR{bits:04X}"
    if fp_type == "float":
        # LLVM writes a float literal as the double of equal value (NaN payload moved up)
        as_float = struct.unpack("<f", struct.pack("<I", bits))[0]
        if as_float != as_float:
            sign, payload = bits >> 31, bits & 0x7FFFFF
            return f"0x{(sign << 63) | (0x7FF << 52) | (payload << 29):016X}"
        bits = struct.unpack("<Q", struct.pack("<d", as_float))[0]
    return f"0x{bits:016X}"


def _may_hold_literal(line: str) -> bool:
    """Whether ``line`` holds one of the substrings that every literal of :data:`_LITERAL`
    contains ("inf", "nan", "f0x", or an exponent's "e+"/"e-"): the cheap test that spares
    the other lines, most of a module, the regular expression."""
    return "inf" in line or "nan" in line or "f0x" in line or "e+" in line or "e-" in line


def _rewrite_line(line: str) -> str:
    """``line`` with its LLVM 24 literals rewritten, each in the floating-point type named
    last before it."""
    current = None

    def rewrite(m: re.Match) -> str:
        nonlocal current
        if m.group(1):
            current = m.group(1)
            return m.group(0)
        if current is None:
            raise ValueError(f"no floating-point type before literal {m.group(0)!r} "
                             f"in: {line}")
        return _llvm22_literal(m.group(2), current)

    return _TOKEN.sub(rewrite, line)


def to_llvm22_text(text: str) -> str:
    """Rewrite LLVM 24's floating-point literals in LLVM IR ``text`` for LLVM 22's parser.
    A literal's type is the floating-point type named last before it on its line (how the
    printer writes operands: ``fadd float %x, 1.5``, ``phi float [ -inf, %b ]``,
    ``splat (half 0xH3C00)``)."""
    return "\n".join(_rewrite_line(line) if _may_hold_literal(line) else line
                     for line in text.split("\n"))
