"""The Python runtime: a library that tilec built, loaded with ctypes and called on arrays.

In: the path of a library (``tilec f.tile -o f.so``) whose ``tilec_metadata()`` describes its
entries, and per call NumPy arrays (bfloat16 through ``ml_dtypes``), objects with
``__dlpack__`` (PyTorch CPU tensors of every dtype, bfloat16 and tensors that require grad
included: :mod:`.interop`) and Python scalars.  Out: NumPy arrays, fresh or the caller's
``out=``; fresh tensors sharing the arrays' memory when an argument was a PyTorch tensor.

A call matches arguments to parameters (positional, by name, scalar defaults), checks each
tensor's dtype, binds the shape symbols and the ``...`` extents from the shapes by the rules of
the reference interpreter (a dimension linear in one unknown symbol binds it: an odd size for
``2*hidden`` is an error naming the argument), checks the layout (C-contiguous, aligned;
outputs writable and not overlapping any argument), and calls the C entry, which dispatches
shape-template variants itself.  Mistakes raise TypeError (what was passed) or ValueError
(shapes, layout) naming the argument; a failure inside the library raises RuntimeError with
its ``tilec_last_error()``.

A library built for ``--target ptx`` takes NumPy arrays (copied to the device and back) and
device arrays (``__cuda_array_interface__``, DLPack on a CUDA device): see :mod:`.device`.

This module imports only NumPy, ml_dtypes, ctypes, :mod:`tilec.dims` and :mod:`.device`: a
built library runs where the compiler and MLIR are not installed.
"""
from __future__ import annotations

import ctypes
import json
import os
from dataclasses import dataclass
from typing import Any, Sequence

import ml_dtypes
import numpy as np

from ..binding import Binding
from ..binding import bind as bind_shapes
from ..dims import ELLIPSIS, Dim, parse_dim
from .device import Device
from .interop import from_torch, to_torch, torch_tensor

METADATA_FORMAT = 1
NUMPY_DTYPES = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16),
                "float32": np.dtype(np.float32), "int32": np.dtype(np.int32)}
INT32_RANGE = (-2**31, 2**31 - 1)
PLANS = 64   # argument shapes whose plan a function keeps (then it forgets them all)

Shape = tuple  # (ELLIPSIS?, Dim, ...)


def _shape(entries: list[str] | None) -> Shape | None:
    if entries is None:
        return None
    return tuple(ELLIPSIS if (i == 0 and e == ELLIPSIS) else parse_dim(e)
                 for i, e in enumerate(entries))


def _dims(shape: Shape) -> tuple[Dim, ...]:
    return shape[1:] if shape and shape[0] == ELLIPSIS else shape


def _rank_generic(shape: Shape) -> bool:
    return bool(shape) and shape[0] == ELLIPSIS


@dataclass(frozen=True)
class Param:
    name: str
    kind: str                # "tensor" | "scalar"
    dtype: str
    shape: Shape | None      # None: the function has only template variants
    default: int | float | None


@dataclass(frozen=True)
class Variant:
    binding: dict[str, int]
    params: tuple[Shape, ...]
    results: tuple[Shape, ...]


def bind(shapes: Sequence[tuple[str, Shape]], arrays: Sequence[Any]) -> Binding:
    """Bind symbols and ``...`` extents from ``arrays``' shapes (tensors only, with their
    parameter names); ValueError naming the argument whose shape does not fit."""
    return bind_shapes(shapes, [a.shape for a in arrays])


@dataclass(frozen=True)
class Linear:
    """A dimension ``scale * symbol + offset`` in integers (a constant has no symbol): what
    nearly every shape is made of, bound and evaluated here without :class:`Dim`'s
    fractions, which would cost a small call more than its kernel."""

    symbol: str | None
    scale: int
    offset: int

    @staticmethod
    def of(d: Dim) -> "Linear | None":
        symbols = d.symbols()
        offset = d.terms.get((), 0)
        if not symbols:
            return Linear(None, 0, int(offset)) if offset.denominator == 1 else None
        if len(symbols) > 1 or not d.is_affine():
            return None
        (symbol,) = symbols
        scale = d.terms[(symbol,)]
        if scale.denominator != 1 or offset.denominator != 1 or scale <= 0:
            return None
        return Linear(symbol, int(scale), int(offset))


FastShape = tuple[bool, tuple[Linear, ...]]     # (rank-generic, dimensions)


def _fast(shape: Shape | None) -> FastShape | None:
    if shape is None:
        return None
    dims = tuple(Linear.of(d) for d in _dims(shape))
    return None if None in dims else (_rank_generic(shape), dims)


def fast_bind(shapes: Sequence[FastShape], arrays: Sequence[Any]) -> Binding | None:
    """:func:`bind` for shapes of :class:`Linear` dimensions, None where anything does not
    fit (then :func:`bind` says what)."""
    lead: tuple[int, ...] | None = None
    symbols: dict[str, int] = {}
    for (generic, dims), array in zip(shapes, arrays):
        actual = array.shape
        k = len(actual) - len(dims)
        if k < 0 or (k > 0 and not generic):
            return None
        if generic:
            if lead is None:
                lead = actual[:k]
            elif actual[:k] != lead:
                return None
        for d, size in zip(dims, actual[k:]):
            if d.symbol is None:
                if size != d.offset:
                    return None
                continue
            value, rest = divmod(size - d.offset, d.scale)
            if rest or value < 0 or symbols.setdefault(d.symbol, value) != value:
                return None
    return Binding(symbols, lead)


def _extent(d: Dim, symbols: dict[str, int], what: str) -> int:
    value = d.evaluate(symbols)
    if value.denominator != 1 or value < 0:
        raise ValueError(f"{what} is {d} = {value}, not a non-negative integer")
    return int(value)


class Function:
    """One entry of a library, called like a Python function (see the module docstring)."""

    def __init__(self, library: "Library", name: str, meta: dict) -> None:
        self.name = name
        self.library = library
        self.signatures: list[str] = meta["signatures"]
        self.__doc__ = "\n".join(self.signatures)
        self.params = [Param(p["name"], p["kind"], p["dtype"], _shape(p["shape"]), p["default"])
                       for p in meta["params"]]
        self.results = [(r["dtype"], _shape(r["shape"])) for r in meta["results"]]
        self.symbols: list[str] = meta["symbols"]
        self.lead: list[str] | None = meta["lead"]
        self.generic: bool = meta["generic"]
        self.broadcasts: list[list] = meta.get("broadcasts", [])
        """``[symbol, to, message, either]`` of each run-time broadcast: ``symbol`` is ``to``
        or 1, or with ``either`` ``to`` may be 1 instead."""
        self.backward: str | None = meta.get("backward")
        """The function of the same library that computes this one's gradients
        (``#pragma backward(NAME)``), or None."""
        self.variants = [Variant(v["binding"], tuple(map(_shape, v["params"])),
                                 tuple(map(_shape, v["results"]))) for v in meta["variants"]]
        fast = [_fast(p.shape) for p in self.params if p.kind == "tensor"]
        self._fast_params = None if None in fast else fast
        shapes = [s for _, s in self.results] + [s for v in self.variants for s in v.results]
        self._fast_results = {s: _fast(s) for s in shapes if s is not None}
        self._plans: dict[tuple, tuple[list[tuple[int, ...]], list[Any]]] = {}
        self._roles = [f"{name}: argument '{p.name}'" for p in self.params]
        self._entry = self._c_entry(library.cdll, meta["c_name"])

    def _c_entry(self, cdll: ctypes.CDLL, c_name: str) -> Any:
        entry = getattr(cdll, c_name)
        types: list[Any] = [ctypes.c_void_p] * (sum(p.kind == "tensor" for p in self.params)
                                                + len(self.results))
        types += [ctypes.c_int64] * len(self.symbols)
        if self.lead is not None:
            types += [ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)]
        types += [ctypes.c_int32 if p.dtype == "int32" else ctypes.c_float
                  for p in self.params if p.kind == "scalar"]
        entry.argtypes = types + [ctypes.c_void_p]
        entry.restype = ctypes.c_int
        return entry

    def __repr__(self) -> str:
        return f"<tilec function {self.signatures[0]} from {self.library.path}>"

    # arguments -------------------------------------------------------------------------------
    def _match(self, args: tuple, kwargs: dict) -> Sequence[Any]:
        if not kwargs and len(args) == len(self.params):
            return args
        names = [p.name for p in self.params]
        if len(args) > len(self.params):
            raise TypeError(f"{self.name}() takes {len(self.params)} argument"
                            f"{'s' if len(self.params) != 1 else ''} ({', '.join(names)}), "
                            f"got {len(args)}")
        given = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in names:
                raise TypeError(f"{self.name}() got an unexpected keyword argument '{key}'; "
                                f"parameters: {', '.join(names)}")
            if key in given:
                raise TypeError(f"{self.name}() got argument '{key}' twice")
            given[key] = value
        values = []
        for p in self.params:
            if p.name in given:
                values.append(given[p.name])
            elif p.default is not None:
                values.append(p.default)
            else:
                raise TypeError(f"{self.name}() missing argument '{p.name}'")
        return values

    @staticmethod
    def _array(dtype: str, value: Any, role: str) -> np.ndarray:
        if torch_tensor(value) and value.device.type == "cpu":
            value = from_torch(value)
        elif isinstance(value, np.generic):   # a NumPy scalar: a rank-0 array of its dtype
            value = np.asarray(value)
        elif not isinstance(value, np.ndarray) and hasattr(value, "__dlpack__"):
            try:
                value = np.from_dlpack(value)
            except (TypeError, ValueError, BufferError, RuntimeError) as e:
                raise TypeError(f"{role}: cannot read {type(value).__name__} through DLPack "
                                f"({e})") from None
        if not isinstance(value, np.ndarray):
            raise TypeError(f"{role}: expected a NumPy array (or a DLPack tensor) of {dtype}, "
                            f"got {type(value).__name__}")
        if value.dtype != NUMPY_DTYPES[dtype]:
            raise TypeError(f"{role}: expected dtype {dtype}, got {value.dtype}")
        return value

    @staticmethod
    def _layout(array: np.ndarray, role: str) -> None:
        if not array.flags.c_contiguous:
            raise ValueError(f"{role}: expected a C-contiguous (row-major) array, got strides "
                             f"{array.strides} for shape {array.shape}; pass "
                             "np.ascontiguousarray(...) (a PyTorch tensor: .contiguous())")
        if not array.flags.aligned:
            raise ValueError(f"{role}: the array is not aligned to its element size")

    def _scalar(self, p: Param, value: Any) -> int | float:
        if isinstance(value, np.ndarray) and value.shape == ():
            value = value.item()
        elif isinstance(value, np.generic):
            value = value.item()
        role = f"{self.name}: argument '{p.name}'"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{role}: expected a {p.dtype} scalar, got {type(value).__name__}")
        if p.dtype != "int32":
            return float(value)
        if not isinstance(value, int):
            raise TypeError(f"{role}: expected an int32, got {value!r}")
        if not INT32_RANGE[0] <= value <= INT32_RANGE[1]:
            raise ValueError(f"{role}: {value} is out of the range of int32")
        return value

    def _binding(self, tensors: list[tuple[Param, np.ndarray]]) -> tuple[Binding, tuple]:
        """The binding of the arguments and the result shapes (generic, else the first
        variant whose shapes the arguments fit)."""
        arrays = [a for _, a in tensors]
        if self.generic:
            found = fast_bind(self._fast_params, arrays) if self._fast_params else None
            if found is not None:
                return found, tuple(shape for _, shape in self.results)
            shapes = [(p.name, p.shape) for p, _ in tensors]
            try:
                return bind(shapes, arrays), tuple(shape for _, shape in self.results)
            except ValueError as e:
                raise ValueError(f"{self.name}: {e}") from None
        tensor_index = [i for i, p in enumerate(self.params) if p.kind == "tensor"]
        for v in self.variants:
            shapes = [(p.name, v.params[i]) for (p, _), i in zip(tensors, tensor_index)]
            try:
                found = bind(shapes, arrays)
            except ValueError:
                continue
            return Binding({**found.symbols, **v.binding}, found.lead), v.results
        variants = "; ".join(", ".join(f"{s} = {x}" for s, x in v.binding.items())
                             for v in self.variants)
        raise ValueError(f"{self.name}: no variant for argument shapes "
                         f"{', '.join(str(a.shape) for a in arrays)} (variants: {variants}) and "
                         "no generic kernel (compiled with --no-generic)")

    def _outputs(self, out: Any, shapes: list[tuple[int, ...]],
                 tensors: list[tuple[Param, np.ndarray]]) -> tuple[list[Any], list[np.ndarray]]:
        """(what the call returns, the arrays the entry writes); ``tensors`` are the tensor
        arguments."""
        if out is None:
            arrays = [np.empty(s, dtype=NUMPY_DTYPES[dtype])
                      for s, (dtype, _) in zip(shapes, self.results)]
            return list(arrays), arrays
        given = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(given) != len(self.results):
            raise TypeError(f"{self.name}(): out= needs {len(self.results)} array"
                            f"{'s' if len(self.results) != 1 else ''} (one per result), got "
                            f"{len(given)}")
        arrays: list[np.ndarray] = []
        for r, (value, shape, (dtype, _)) in enumerate(zip(given, shapes, self.results)):
            role = f"{self.name}: out[{r}]" if len(self.results) > 1 else f"{self.name}: out"
            array = self._array(dtype, value, role)
            if array.shape != shape:
                raise ValueError(f"{role}: expected shape {shape}, got {array.shape}")
            self._layout(array, role)
            if not array.flags.writeable:
                raise ValueError(f"{role}: the array is read-only")
            for k, other in enumerate([a for _, a in tensors] + arrays):
                if np.may_share_memory(array, other):
                    name = f"argument '{tensors[k][0].name}'" if k < len(tensors) else \
                        f"out[{k - len(tensors)}]"
                    raise ValueError(f"{role}: overlaps {name}; outputs must not share memory "
                                     "with arguments or other outputs")
            arrays.append(array)
        return given, arrays

    def _extents(self, shape: Shape, symbols: dict[str, int], r: int) -> tuple[int, ...]:
        """The dimensions of result ``r`` after its ``...``."""
        fast = self._fast_results[shape]
        if fast is not None:
            dims = tuple(d.offset if d.symbol is None else d.scale * symbols[d.symbol] + d.offset
                         for d in fast[1])
            if min(dims, default=0) >= 0:
                return dims
        return tuple(_extent(d, symbols, f"{self.name}: result {r} dimension {i}")
                     for i, d in enumerate(_dims(shape)))

    # the call --------------------------------------------------------------------------------
    def plan(self, tensors: list[tuple[Param, Any]]) -> tuple[list[tuple[int, ...]], list[Any]]:
        """The result shapes of a call on ``tensors`` (each parameter with anything that has a
        ``shape``), and the entry's arguments after the pointers and before the scalars
        (symbols, ``...`` extents); ValueError naming the argument whose shape does not fit."""
        binding, result_shapes = self._binding(tensors)
        missing = [s for s in self.symbols + (self.lead or []) if s not in binding.symbols]
        if missing:
            raise ValueError(f"{self.name}: cannot bind {', '.join(missing)} from the argument "
                             "shapes")
        lead = tuple(binding.lead or ())
        shapes = []
        for r, shape in enumerate(result_shapes):
            dims = self._extents(shape, binding.symbols, r)
            shapes.append(lead + dims if _rank_generic(shape) else dims)
        tail: list[Any] = [binding.symbols[s] for s in self.symbols]
        if self.lead is not None:
            extents = list(lead) + [binding.symbols[s] for s in self.lead]
            tail += [len(extents), (ctypes.c_int64 * max(len(extents), 1))(*extents)]
        return shapes, tail

    def _planned(self, tensors: list[tuple[Param, Any]]) -> tuple[list[tuple[int, ...]],
                                                                  list[Any]]:
        """:meth:`plan`, kept per argument shapes (arrays' shapes are tuples of ints): a call
        on the shapes of an earlier one skips the binding."""
        key = tuple(a.shape for _, a in tensors)
        found = self._plans.get(key)
        if found is None:
            found = self.plan(tensors)
            if len(self._plans) >= PLANS:
                self._plans.clear()
            self._plans[key] = found
        return found

    def invoke(self, pointers: list[int], tail: list[Any], scalars: list[int | float],
               stream: int | None = None) -> None:
        """Call the C entry on device or host ``pointers`` (inputs, then outputs);
        RuntimeError with the library's message when it fails."""
        if self._entry(*pointers, *tail, *scalars, stream) != 0:
            raise RuntimeError(self.library.last_error())

    def __call__(self, *args: Any, out: Any = None, **kwargs: Any) -> Any:
        values = self._match(args, kwargs)
        tensors: list[tuple[Param, np.ndarray]] = []
        roles: list[str] = []
        scalars: list[int | float] = []
        device = self.library.device
        for p, value, role in zip(self.params, values, self._roles):
            if p.kind == "scalar":
                scalars.append(self._scalar(p, value))
                continue
            roles.append(role)
            if device is None:
                tensors.append((p, self._array(p.dtype, value, role)))
            else:
                tensors.append((p, device.tensor(NUMPY_DTYPES[p.dtype], value, role,
                                                 lambda v: self._array(p.dtype, v, role))))
        shapes, tail = self._planned(tensors)
        for (_, array), role in zip(tensors, roles):
            if isinstance(array, np.ndarray):
                self._layout(array, role)
        if device is not None:
            returned = device.call(self._entry, [a for _, a in tensors],
                                   [NUMPY_DTYPES[dtype] for dtype, _ in self.results], shapes,
                                   out, tail + scalars)
            return returned[0] if len(returned) == 1 else tuple(returned)
        returned, outputs = self._outputs(out, shapes, tensors)
        self.invoke([a.ctypes.data for _, a in tensors] + [a.ctypes.data for a in outputs],
                    tail, scalars)
        if out is None and any(torch_tensor(v) for v in values):
            returned = [to_torch(a) for a in returned]   # tensors in, tensors out
        return returned[0] if len(returned) == 1 else tuple(returned)


def _dtype_name(value: Any) -> str | None:
    """The dtype of an array or tensor argument as the language names it (else its own
    name), None for a Python scalar."""
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return None
    text = str(dtype).removeprefix("torch.")
    return {"half": "float16", "float": "float32", "int": "int32"}.get(text, text)


class DtypeDispatch:
    """``NAME`` of a dtype template (``#pragma dtype_template(T, [...])``): calls the instance
    ``NAME__DTYPE`` whose tensor parameters of type ``T`` have the arguments' dtype."""

    def __init__(self, name: str, symbol: str, instances: dict[str, Function]) -> None:
        self.name = name
        self.symbol = symbol
        self.instances = instances          # dtype -> function
        first = next(iter(instances.values()))
        self.params = first.params
        # the tensor parameters whose dtype differs between instances: those of type T (with
        # one instance, that instance's own dtype checks name the argument)
        self.typed = [i for i, p in enumerate(first.params) if p.kind == "tensor" and len(
            {f.params[i].dtype for f in instances.values()}) == len(instances) > 1]
        self.__doc__ = "\n".join(s for f in instances.values() for s in f.signatures)

    def __repr__(self) -> str:
        return f"<tilec dtype template {self.name} over {', '.join(self.instances)}>"

    def select(self, args: tuple, kwargs: dict) -> Function:
        """The instance for these arguments; TypeError naming the argument whose dtype none
        has (or that disagrees with an earlier one)."""
        first = next(iter(self.instances.values()))
        values = first._match(args, kwargs)
        chosen: tuple[str, str] | None = None      # (dtype, the parameter that chose it)
        for i in self.typed:
            name = self.params[i].name
            dtype = _dtype_name(values[i])
            taken = {f.params[i].dtype: d for d, f in self.instances.items()}
            if dtype not in taken:
                raise TypeError(f"{self.name}: argument '{name}' has dtype {dtype}; "
                                f"{self.symbol} of {self.name} is one of "
                                f"{', '.join(self.instances)}")
            if chosen is None:
                chosen = (taken[dtype], name)
            elif taken[dtype] != chosen[0]:
                raise TypeError(f"{self.name}: argument '{name}' has dtype {dtype}, but "
                                f"'{chosen[1]}' makes {self.symbol} {chosen[0]}")
        if chosen is None and len(self.instances) > 1:
            raise TypeError(f"{self.name}: no tensor argument decides {self.symbol}; call one "
                            f"of {', '.join(f.name for f in self.instances.values())}")
        return self.instances[chosen[0]] if chosen else first

    def __call__(self, *args: Any, out: Any = None, **kwargs: Any) -> Any:
        return self.select(args, kwargs)(*args, out=out, **kwargs)


def _dispatchers(functions: dict[str, Function], meta: dict) -> dict[str, DtypeDispatch]:
    groups: dict[str, dict[str, Function]] = {}
    symbols: dict[str, str] = {}
    for name, m in meta.items():
        t = m.get("dtype_template")
        if t:
            group = t["function"]
            symbol = next(k for k in t if k != "function")
            symbols[group] = symbol
            groups.setdefault(group, {})[t[symbol]] = functions[name]
    return {g: DtypeDispatch(g, symbols[g], inst) for g, inst in groups.items()
            if g not in functions}


class Library:
    """A loaded library: one :class:`Function` per entry, as an attribute (``lib.swiglu``)
    or by name (``lib["swiglu"]``, for a name that an attribute of this class has)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        try:
            self.cdll = ctypes.CDLL(os.path.abspath(self.path))
            read = self.cdll.tilec_metadata
        except OSError as e:
            raise OSError(f"cannot load '{self.path}': {e}") from None
        except AttributeError:
            raise ValueError(f"'{self.path}' is not a library built by tilec (it has no "
                             "tilec_metadata)") from None
        read.restype = ctypes.c_char_p
        self.metadata: dict = json.loads(read().decode())
        if self.metadata.get("format") != METADATA_FORMAT:
            raise ValueError(f"'{self.path}' has metadata format {self.metadata.get('format')}; "
                             f"this runtime reads format {METADATA_FORMAT}")
        self.cdll.tilec_last_error.restype = ctypes.c_char_p
        self.target: str = self.metadata.get("target", "cpu")
        # a library whose buffers are device memory exports the helpers that move them
        self.device = Device(self.cdll, self.last_error) \
            if hasattr(self.cdll, "tilec_device_alloc") else None
        self.cpu_code: str | None = None
        """The code a cpu library's kernels run here: its ``--arch``, or with the default
        x86-64-v3+v4 the level this CPU has (``TILEC_CPU=x86-64-v3`` keeps x86-64-v3); None
        for other targets and for libraries of tilec versions without ``tilec_cpu_code``."""
        code = getattr(self.cdll, "tilec_cpu_code", None)
        if code is not None:
            code.restype = ctypes.c_char_p
            self.cpu_code = code().decode()
        self.functions = {name: Function(self, name, meta)
                          for name, meta in self.metadata["functions"].items()}
        self.dispatchers = _dispatchers(self.functions, self.metadata["functions"])
        """``NAME`` -> the :class:`DtypeDispatch` over its dtype template's instances
        ``NAME__float16``... (each also a function of its own)."""

    def last_error(self) -> str:
        return self.cdll.tilec_last_error().decode(errors="replace")

    def __getitem__(self, name: str) -> "Function | DtypeDispatch":
        if name in self.functions:
            return self.functions[name]
        return self.dispatchers[name]

    def __getattr__(self, name: str) -> "Function | DtypeDispatch":
        functions = self.__dict__.get("functions", {})
        dispatchers = self.__dict__.get("dispatchers", {})
        if name in functions:
            return functions[name]
        if name in dispatchers:
            return dispatchers[name]
        raise AttributeError(f"'{self.__dict__.get('path')}' has no function '{name}'; it has: "
                             f"{', '.join(list(functions) + list(dispatchers)) or 'none'}")

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.functions) | set(self.dispatchers))

    def __repr__(self) -> str:
        return f"<tilec library {self.path}: {', '.join(self.functions)}>"


def load(path: str | os.PathLike) -> Library:
    """Load a library built by tilec (``tilec f.tile -o f.so``)."""
    return Library(path)
