"""A library's functions as PyTorch custom operators (``torch.ops.<namespace>.<function>``).

In: a loaded :class:`~tilec.runtime.loader.Library` and a namespace.  Out: per function an
operator with a schema made from the library metadata, its out-variant ``<function>.out``
(outputs keyword-only and mutated, returning nothing, as vLLM's custom operators do), a kernel
that calls the C entry on the tensors' own memory, a fake implementation that computes the
result shapes symbolically (:mod:`.shapes`), and an autograd formula: the function that
``#pragma backward(NAME)`` names, else one whose backward raises a clear error.

Layout: tensors are passed contiguous; a non-contiguous argument is copied with
``.contiguous()`` first (a transposed view costs one copy), a non-contiguous or overlapping
``out=`` tensor is written through a contiguous temporary.
"""
from __future__ import annotations

import math

import os
import types
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..runtime.loader import Function, Library, Param, load
from . import shapes

TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16,
                "float32": torch.float32, "int32": torch.int32}
DEVICE_TYPES = {"cpu": "cpu", "ascend-sim": "cpu", "ptx": "cuda", "ascend": "npu"}
SCALAR_TYPES = {"int32": "int"}          # every other scalar dtype is a schema "float"


@dataclass
class _Entry:
    """One registered operator; ``function`` is replaced when the same schema is registered
    again (a rebuilt library), so its kernels always call the newest."""

    schema: str
    function: Function
    device_type: str


_REGISTRY: dict[tuple[str, str], _Entry] = {}
_LIBRARIES: dict[str, torch.library.Library] = {}


# --- schemas ---------------------------------------------------------------------------------
def _param_schema(p: Param, with_default: bool) -> str:
    if p.kind == "tensor":
        return f"Tensor {p.name}"
    default = f"={p.default!r}" if with_default and p.default is not None else ""
    if default and math.isinf(p.default):   # a schema has no infinity: None stands for it
        return f"float? {p.name}=None"
    return f"{SCALAR_TYPES.get(p.dtype, 'float')} {p.name}{default}"


def out_names(fn: Function) -> list[str]:
    """The out-variant's keyword names: ``out``, or ``out0, out1, ...``; ``_`` appended
    while one is a parameter's name."""
    base = ["out"] if len(fn.results) == 1 else [f"out{r}" for r in range(len(fn.results))]
    taken = {p.name for p in fn.params}
    names = []
    for name in base:
        while name in taken:
            name += "_"
        names.append(name)
    return names


def schemas(fn: Function) -> tuple[str, str]:
    """(the functional schema, the out-variant's), without the operator's name.  A default
    followed by a parameter without one is left out of the schema (Python's rule)."""
    last = max((i for i, p in enumerate(fn.params) if p.default is None), default=-1)
    params = ", ".join(_param_schema(p, i > last) for i, p in enumerate(fn.params))
    results = ", ".join("Tensor" for _ in fn.results)
    returns = results if len(fn.results) == 1 else f"({results})"
    letters = "abcdefghijklmnopqrstuvwxyz"
    outs = ", ".join(f"Tensor({letters[r % 26]}!) {n}" for r, n in enumerate(out_names(fn)))
    return f"({params}) -> {returns}", f"({params}, *, {outs}) -> ()"


# --- arguments ------------------------------------------------------------------------------
def _tensor(fn: Function, name: str, dtype: str, value: Any, device: torch.device | None,
            device_type: str, qualname: str) -> torch.Tensor:
    role = f"{qualname}: argument '{name}'"
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{role}: expected a tensor of {dtype}, got {type(value).__name__}")
    if value.dtype != TORCH_DTYPES[dtype]:
        raise TypeError(f"{role}: expected dtype {dtype}, got {value.dtype}")
    if value.device.type not in (device_type, "meta"):
        raise ValueError(f"{role}: expected a {device_type} tensor (the library is built for "
                         f"{fn.library.target}), got one on {value.device}")
    if device is not None and value.device != device:
        raise ValueError(f"{role}: on {value.device}, the other tensors on {device}")
    return value


def _arguments(entry: _Entry, qualname: str, args: tuple) -> tuple[list, list, torch.device]:
    """(tensor parameters with their tensors, scalars, the device), checked."""
    fn = entry.function
    tensors: list[tuple[Param, torch.Tensor]] = []
    scalars: list[int | float] = []
    device = None
    # The dispatcher leaves out trailing arguments equal to their defaults.
    args = tuple(args) + tuple(p.default for p in fn.params[len(args):])
    for p, value in zip(fn.params, args):
        if p.kind == "scalar" and value is None and p.default is not None:
            value = p.default      # an infinite default (see _param_schema)
        if p.kind == "scalar":
            symbolic = isinstance(value, (torch.SymInt, torch.SymFloat))
            scalars.append(value if symbolic else fn._scalar(p, value))
            continue
        tensor = _tensor(fn, p.name, p.dtype, value, device, entry.device_type, qualname)
        device = tensor.device
        tensors.append((p, tensor))
    return tensors, scalars, device or torch.device(entry.device_type)


def _stream(device: torch.device) -> int | None:
    if device.type == "cuda":
        return torch.cuda.current_stream(device).cuda_stream
    if device.type == "npu":
        return torch.npu.current_stream(device).npu_stream   # torch_npu's
    return None


def _launch(fn: Function, inputs: list[torch.Tensor], outputs: list[torch.Tensor],
            tail: list[Any], scalars: list[int | float], device: torch.device) -> None:
    pointers = [t.data_ptr() for t in inputs] + [t.data_ptr() for t in outputs]
    fn.invoke(pointers, tail, scalars, _stream(device))


def _plan(fn: Function, tensors: list[tuple[Param, torch.Tensor]]) -> tuple[list, list]:
    return fn.plan([(p, t) for p, t in tensors])


# --- kernels ---------------------------------------------------------------------------------
def _kernel(entry: _Entry, qualname: str) -> Callable[..., Any]:
    def kernel(*args: Any) -> Any:
        fn = entry.function
        tensors, scalars, device = _arguments(entry, qualname, args)
        tensors = [(p, t.contiguous()) for p, t in tensors]
        result_shapes, tail = _plan(fn, tensors)
        outs = [torch.empty(s, dtype=TORCH_DTYPES[d], device=device)
                for s, (d, _) in zip(result_shapes, fn.results)]
        _launch(fn, [t for _, t in tensors], outs, tail, scalars, device)
        return outs[0] if len(outs) == 1 else tuple(outs)
    return kernel


def _out_tensors(entry: _Entry, qualname: str, kwargs: dict, device: torch.device,
                 expected: list) -> list[torch.Tensor]:
    fn = entry.function
    outs = []
    for name, shape, (dtype, _) in zip(out_names(fn), expected, fn.results):
        out = _tensor(fn, name, dtype, kwargs[name], device, entry.device_type, qualname)
        if tuple(out.shape) != tuple(shape):
            raise ValueError(f"{qualname}: argument '{name}': expected shape {tuple(shape)}, "
                             f"got {tuple(out.shape)}")
        outs.append(out)
    return outs


def _shares_memory(a: torch.Tensor, others: list[torch.Tensor]) -> bool:
    storage = a.untyped_storage().data_ptr()
    return any(o.untyped_storage().data_ptr() == storage for o in others)


def _out_kernel(entry: _Entry, qualname: str) -> Callable[..., None]:
    def kernel(*args: Any, **kwargs: Any) -> None:
        fn = entry.function
        tensors, scalars, device = _arguments(entry, qualname, args)
        inputs = [t.contiguous() for _, t in tensors]
        result_shapes, tail = _plan(fn, list(zip([p for p, _ in tensors], inputs)))
        outs = _out_tensors(entry, qualname, kwargs, device, result_shapes)
        direct = [o.is_contiguous() and not _shares_memory(o, inputs + outs[:r] + outs[r + 1:])
                  for r, o in enumerate(outs)]
        targets = [o if ok else torch.empty_like(o, memory_format=torch.contiguous_format)
                   for o, ok in zip(outs, direct)]
        _launch(fn, inputs, targets, tail, scalars, device)
        for o, t, ok in zip(outs, targets, direct):
            if not ok:
                o.copy_(t)
    return kernel


# --- fake (meta) implementations -------------------------------------------------------------
def _check(conditions: list[tuple[Any, str]], qualname: str) -> None:
    for cond, why in conditions:
        torch._check_value(cond, lambda why=why: f"{qualname}: {why}")


def symbolic_shapes(fn: Function, tensors: list[tuple[Param, torch.Tensor]],
                    qualname: str) -> list[tuple]:
    """The result shapes for ``tensors``' (possibly symbolic) sizes: a generic kernel's
    relations become ``torch._check`` facts; template-only functions guard on their
    variants' sizes."""
    if fn.generic:
        try:
            solution = shapes.solve([(p.name, p.shape) for p, _ in tensors],
                                    [t.shape for _, t in tensors])
            shapes.broadcasts(fn.broadcasts, solution)
            found = shapes.result_shapes([s for _, s in fn.results], solution)
        except ValueError as e:
            raise ValueError(f"{qualname}: {e}") from None
        _check(solution.conditions, qualname)
        return found
    index = [i for i, p in enumerate(fn.params) if p.kind == "tensor"]
    for v in fn.variants:
        try:
            solution = shapes.solve([(p.name, v.params[i]) for (p, _), i in zip(tensors, index)],
                                    [t.shape for _, t in tensors])
        except ValueError:
            continue
        if all(bool(c) for c, _ in solution.conditions):
            found = shapes.result_shapes(list(v.results), solution)
            _check(solution.conditions, qualname)
            return found
    raise ValueError(f"{qualname}: no variant for argument shapes "
                     f"{', '.join(str(tuple(t.shape)) for _, t in tensors)} and no generic "
                     "kernel (compiled with --no-generic)")


def _fake(entry: _Entry, qualname: str) -> Callable[..., Any]:
    def fake(*args: Any) -> Any:
        fn = entry.function
        tensors, _, device = _arguments(entry, qualname, args)
        found = symbolic_shapes(fn, tensors, qualname)
        outs = [torch.empty(s, dtype=TORCH_DTYPES[d], device=device)
                for s, (d, _) in zip(found, fn.results)]
        return outs[0] if len(outs) == 1 else tuple(outs)
    return fake


def _out_fake(entry: _Entry, qualname: str) -> Callable[..., None]:
    def fake(*args: Any, **kwargs: Any) -> None:
        fn = entry.function
        tensors, _, device = _arguments(entry, qualname, args)
        found = symbolic_shapes(fn, tensors, qualname)
        for name, shape, (dtype, _) in zip(out_names(fn), found, fn.results):
            out = _tensor(fn, name, dtype, kwargs[name], device, entry.device_type, qualname)
            torch._check_value(out.dim() == len(shape),
                               lambda name=name: f"{qualname}: argument '{name}': wrong rank")
            for a, b in zip(out.shape, shape):
                torch._check_value(a == b, lambda name=name: f"{qualname}: argument '{name}': "
                                   f"expected shape {tuple(shape)}")
    return fake


# --- autograd --------------------------------------------------------------------------------
@torch.library.custom_op("tilec_internal::no_backward", mutates_args=())
def _no_backward(x: torch.Tensor, message: str) -> torch.Tensor:
    """Stands for the gradient of an operator without a backward: raises when it runs, so
    that a compiled graph fails where eager ``backward()`` does, not while it is traced."""
    raise RuntimeError(message)


@_no_backward.register_fake
def _(x: torch.Tensor, message: str) -> torch.Tensor:
    return torch.empty_like(x)


def _no_backward_formula(fn: Function, qualname: str) -> Callable[..., tuple]:
    message = (f"{qualname} has no backward: name one in its .tile file with "
               "'#pragma backward(NAME)' inside the function (see the README)")

    def backward(ctx: Any, *grads: Any) -> tuple:
        return tuple(_no_backward(grads[0], message) if p.kind == "tensor" else None
                     for p in fn.params)
    return backward


def _setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
    ctx.tensor_inputs = [isinstance(i, torch.Tensor) for i in inputs]
    ctx.scalars = [None if t else i for i, t in zip(inputs, ctx.tensor_inputs)]
    ctx.save_for_backward(*[i for i in inputs if isinstance(i, torch.Tensor)])
    outputs = output if isinstance(output, tuple) else (output,)
    ctx.result_like = [torch.zeros_like(o, device="meta") for o in outputs]


def _backward_formula(backward_op: Any) -> Callable[..., tuple]:
    def backward(ctx: Any, *grads: Any) -> tuple:
        saved = iter(ctx.saved_tensors)
        args = [next(saved) if t else s for t, s in zip(ctx.tensor_inputs, ctx.scalars)]
        device = ctx.saved_tensors[0].device
        filled = [g if g is not None else torch.zeros(m.shape, dtype=m.dtype, device=device)
                  for g, m in zip(grads, ctx.result_like)]
        found = backward_op(*args, *filled)
        found = iter(found if isinstance(found, tuple) else (found,))
        return tuple(next(found) if t else None for t in ctx.tensor_inputs)
    return backward


def _register_autograd(namespace: str, fn: Function, library: torch.library.Library) -> None:
    qualname = f"{namespace}::{fn.name}"
    if fn.backward is None:
        torch.library.register_autograd(qualname, _no_backward_formula(fn, f"torch.ops."
                                        f"{namespace}.{fn.name}"), lib=library)
        return
    backward_op = getattr(getattr(torch.ops, namespace), fn.backward).default
    torch.library.register_autograd(qualname, _backward_formula(backward_op),
                                    setup_context=_setup_context, lib=library)


# --- registration ----------------------------------------------------------------------------
def _exists(namespace: str, name: str) -> bool:
    return hasattr(getattr(torch.ops, namespace), name)


def _claim(namespace: str, fn: Function, schema: str) -> _Entry | None:
    """The existing entry when ``fn`` was registered with this schema before (it then serves
    ``fn``), None when the name is free; an error naming any other holder."""
    entry = _REGISTRY.get((namespace, fn.name))
    shown = f"torch.ops.{namespace}.{fn.name}"
    if entry is not None:
        if entry.schema != schema:
            raise RuntimeError(f"{shown} is already registered with schema {fn.name}"
                               f"{entry.schema} (from {entry.function.library.path}), not "
                               f"{fn.name}{schema} (from {fn.library.path}); pass another "
                               "namespace= to register")
        entry.function = fn
        return entry
    if _exists(namespace, fn.name):
        raise RuntimeError(f"{shown} already exists and was not registered by tilec; pass "
                           "another namespace= to register")
    return None


def _device_type(lib: Library) -> str:
    if lib.target not in DEVICE_TYPES:
        raise RuntimeError(f"'{lib.path}' is a library for --target {lib.target}, which has no "
                           f"PyTorch device here; known: {', '.join(DEVICE_TYPES)}")
    if DEVICE_TYPES[lib.target] == "npu":
        try:
            import torch_npu  # noqa: F401  (registers the NPU device with PyTorch)
        except ImportError:
            raise RuntimeError(f"'{lib.path}' is an ascend library: registering it needs "
                               "torch_npu, which is not installed") from None
    return DEVICE_TYPES[lib.target]


def _define(namespace: str, fn: Function, device_type: str) -> _Entry:
    functional, out = schemas(fn)
    library = _LIBRARIES.setdefault(namespace, torch.library.Library(namespace, "FRAGMENT"))
    entry = _Entry(functional, fn, device_type)
    qualname = f"{namespace}::{fn.name}"
    shown = f"torch.ops.{namespace}.{fn.name}"
    library.define(f"{fn.name}{functional}")
    library.define(f"{fn.name}.out{out}")
    # One kernel for every device (CompositeExplicitAutograd): it checks the tensors' device
    # itself, so a tensor on the wrong device gets an error that names it.
    torch.library.register_kernel(qualname, None, _kernel(entry, shown), lib=library)
    torch.library.register_kernel(f"{qualname}.out", None, _out_kernel(entry, shown),
                                  lib=library)
    torch.library.register_fake(qualname, _fake(entry, shown), lib=library)
    torch.library.register_fake(f"{qualname}.out", _out_fake(entry, shown), lib=library)
    return entry


def register(lib: Library | str | os.PathLike, namespace: str = "tilec") -> types.SimpleNamespace:
    """Make every function of ``lib`` (a loaded library, or the path of one; a ``.tile``
    file is compiled for the CPU) ``torch.ops.<namespace>.<function>``; returns those
    operators by name.  Registering the same functions again is harmless (the newest library
    serves them); a name taken by anything else is an error that names it."""
    if not isinstance(lib, Library):
        path = os.fspath(lib)
        if path.endswith(".tile"):
            from ..api import compile as compile_tile
            lib = compile_tile(path)
        else:
            lib = load(path)
    if not namespace.isidentifier():
        raise ValueError(f"namespace {namespace!r} is not an identifier")
    device_type = _device_type(lib)
    new = []
    for fn in lib.functions.values():
        if _claim(namespace, fn, schemas(fn)[0]) is None:
            _REGISTRY[(namespace, fn.name)] = _define(namespace, fn, device_type)
            new.append(fn)
    for fn in new:
        _register_autograd(namespace, fn, _LIBRARIES[namespace])
    packets = getattr(torch.ops, namespace)
    return types.SimpleNamespace(**{name: getattr(packets, name) for name in lib.functions})
