"""Tensor types of the ``tile`` dialect.

A tile tensor is a builtin ``tensor`` whose encoding lists each dimension symbolically, so that
upstream passes and the MLIR parser handle it unchanged:

    tensor<?x?x?xf16, ["batch", "seq", "2*hidden"]>   symbolic dimensions
    tensor<?x?xf32, ["...", "$0"]>                     rank-generic: "..." is one MLIR dimension
                                                       standing for all leading dimensions
    tensor<4x8xf16>                                    all dimensions known: no encoding
    tensor<f32>                                        a scalar (rank 0)

Element types: f16, bf16, f32, i32, and i1 for masks.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from ..dims import ELLIPSIS, Dim, Shape, certain, has_ellipsis, parse_dim, shape_str
from ..mlir import ir

# language name -> (canonical name, MLIR spelling)
DTYPE_ALIASES = {
    "float16": "float16", "f16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "f32": "float32",
    "int32": "int32", "i32": "int32",
}
MLIR_DTYPE = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "int32": "i32", "bool": "i1"}
DTYPE_FROM_MLIR = {v: k for k, v in MLIR_DTYPE.items()}
FLOAT_DTYPES = ("float16", "bfloat16", "float32")
ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "int32": 4, "bool": 1}
"""Bytes of one element of each element type in memory (a mask takes a byte per element)."""
STORED_DTYPE = {"float16": "float32", "bfloat16": "float32"}
"""The element type a kernel stores a value of each narrow float type in when another kernel
reads it (language.md, numerical contract: such a value is no ``return`` and keeps at least
float32 precision); other types are stored as they are."""


def stored_dtype(dtype: str) -> str:
    """The element type of a buffer that passes a value of ``dtype`` between kernels."""
    return STORED_DTYPE.get(dtype, dtype)


def mlir_element_type(dtype: str) -> ir.Type:
    return {
        "float16": ir.F16Type.get,
        "bfloat16": ir.BF16Type.get,
        "float32": ir.F32Type.get,
        "int32": lambda: ir.IntegerType.get_signless(32),
        "bool": lambda: ir.IntegerType.get_signless(1),
    }[dtype]()


@dataclass(frozen=True)
class TensorInfo:
    """What the front end and the passes know of a tensor: element type and shape."""

    dtype: str
    shape: Shape  # entries: Dim, or ELLIPSIS first

    @property
    def rank_generic(self) -> bool:
        return has_ellipsis(self.shape)

    @property
    def dims(self) -> tuple[Dim, ...]:
        """The dimensions after the ellipsis (all of them when there is none)."""
        return certain(self.shape)

    def with_dtype(self, dtype: str) -> "TensorInfo":
        return TensorInfo(dtype, self.shape)

    def with_dims(self, dims: tuple[Dim, ...]) -> "TensorInfo":
        prefix = (ELLIPSIS,) if self.rank_generic else ()
        return TensorInfo(self.dtype, prefix + tuple(dims))

    def __str__(self) -> str:
        return f"Tensor<{self.dtype}>{shape_str(self.shape)}"

    def to_mlir(self) -> ir.RankedTensorType:
        dyn = ir.ShapedType.get_dynamic_size()
        sizes = []
        symbolic = False
        for d in self.shape:
            if d == ELLIPSIS or d.value is None:
                sizes.append(dyn)
                symbolic = True
            else:
                sizes.append(d.value)
        elt = mlir_element_type(self.dtype)
        if not symbolic:
            return ir.RankedTensorType.get(sizes, elt)
        enc = ir.ArrayAttr.get([ir.StringAttr.get(str(d)) for d in self.shape])
        return ir.RankedTensorType.get(sizes, elt, enc)


def tensor_info(t: ir.Type) -> TensorInfo:
    """Read a tile tensor type back; raises ValueError for anything else."""
    if not isinstance(t, ir.RankedTensorType):
        raise ValueError(f"not a ranked tensor type: {t}")
    t = ir.RankedTensorType(t)
    elt = str(t.element_type)
    if elt not in DTYPE_FROM_MLIR:
        raise ValueError(f"unsupported element type {elt} in {t}")
    if t.encoding is None:
        if not t.has_static_shape:
            raise ValueError(f"{t} has dynamic dimensions but no encoding naming them")
        shape = tuple(Dim.const(s) for s in t.shape)
    else:
        entries = tuple(ir.StringAttr(a).value for a in ir.ArrayAttr(t.encoding))
        if len(entries) != t.rank:
            raise ValueError(f"encoding of {t} does not have one entry per dimension")
        shape = _encoded_shape(entries)
    return TensorInfo(DTYPE_FROM_MLIR[elt], shape)


@functools.lru_cache(maxsize=4096)
def _encoded_shape(entries: tuple[str, ...]) -> Shape:
    """The shape an encoding spells (``Dim`` is immutable, so one parse serves every type
    that spells it the same way)."""
    return tuple(ELLIPSIS if (e == ELLIPSIS and i == 0) else parse_dim(e)
                 for i, e in enumerate(entries))
