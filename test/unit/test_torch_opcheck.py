"""torch.library.opcheck on every function of ops/*.tile and of the corpus programs, as
tilec.torch registers them: the schema, the fake (meta) implementation against the kernel,
AOT dispatch with dynamic shapes, and the autograd registration (with inputs that require
grad where the function is differentiable: float tensors)."""
from __future__ import annotations

import functools

import pytest
import torch
from conftest import OPS
from test_corpus import PROGRAMS
from test_corpus_cpu import library as corpus_library

import tilec
import tilec.torch
from tilec.dims import ELLIPSIS
from tilec.torch.ops import TORCH_DTYPES, out_names

# Functions left out, with the reason.  (None today: every function passes.)
DEFAULT_SIZE = 5
INT_RANGES: dict[str, tuple[int, int]] = {
    # cache lengths: a batch entry with none cached is a row of NaN (softmax over nothing, as
    # the language says), which opcheck's comparison of eager and traced outputs finds unequal
    # to itself; sample 1 .. t instead
    "ops/attention_decode:attention_decode": (1, DEFAULT_SIZE + 1),
}
INT_RANGE = (-20, 20)

LEAD = (2, 3)
NO_GRAD_UTILS = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")


@functools.cache
def registered(key: str) -> tuple[str, tilec.runtime.loader.Library]:
    """The library of ``key`` (``ops/NAME`` or a corpus program; compiled as
    test_corpus_cpu compiles it, so a worker that ran that test finds it cached), registered
    in a namespace of its own: corpus programs reuse function names."""
    if key.startswith("ops/"):
        lib = tilec.compile(str(OPS / f"{key[4:]}.tile"))
    else:
        lib = corpus_library(key)
    namespace = "t_" + key.replace("/", "_")
    tilec.torch.register(lib, namespace)
    return namespace, lib


def _sizes(key: str) -> dict[str, int]:
    """The smallest binding of a corpus program's header whose sizes are not all 1."""
    bindings = [b for b, _ in PROGRAMS[key].sizes] if key in PROGRAMS else [{}]
    useful = [b for b in bindings if any(v > 1 for v in b.values())] or bindings
    return min(useful, key=lambda b: sum(b.values()))


def _tensor(shape: tuple[int, ...], dtype: str, grad: bool,
            ints: tuple[int, int] = INT_RANGE) -> torch.Tensor:
    if dtype == "int32":
        return torch.randint(*ints, shape, dtype=torch.int32)
    t = (torch.rand(shape) + 0.5).to(TORCH_DTYPES[dtype])      # positive: log, sqrt, pow
    return t.requires_grad_(grad)


def sample(fn, symbols: dict[str, int], grad: bool, ints: tuple[int, int] = INT_RANGE) -> tuple:
    """Arguments for ``fn`` with its shape symbols at ``symbols`` (others DEFAULT_SIZE) and
    int32 elements in ``ints``."""
    variant = fn.variants[0] if not fn.generic else None
    env = {s: symbols.get(s, DEFAULT_SIZE) for s in fn.symbols + (fn.lead or [])}
    if variant is not None:
        env.update(variant.binding)
    args = []
    for i, p in enumerate(fn.params):
        if p.kind == "scalar":
            args.append(p.default if p.default is not None else
                        (3 if p.dtype == "int32" else 0.5))
            continue
        declared = variant.params[i] if variant is not None else p.shape
        lead = LEAD if declared and declared[0] == ELLIPSIS else ()
        dims = [d for d in declared if d != ELLIPSIS]
        args.append(_tensor(lead + tuple(int(d.evaluate(env)) for d in dims), p.dtype, grad,
                            ints))
    return tuple(args)



KEYS = [f"ops/{p.stem}" for p in sorted(OPS.glob("*.tile"))]
KEYS += [key for key in PROGRAMS if key.startswith("corpus/")]


@pytest.mark.parametrize("key", KEYS)
def test_opcheck_every_function(key: str) -> None:
    namespace, lib = registered(key)
    torch.manual_seed(0)
    for name, fn in lib.functions.items():
        differentiable = all(p.dtype != "int32" for p in fn.params if p.kind == "tensor")
        args = sample(fn, _sizes(key), grad=differentiable,
                      ints=INT_RANGES.get(f"{key}:{name}", INT_RANGE))
        plain = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
        packet = getattr(getattr(torch.ops, namespace), name)
        if fn.backward is not None:
            torch.library.opcheck(packet.default, args)
        else:   # its backward raises by design: AOT dispatch on inputs that need no grad
            torch.library.opcheck(packet.default, args, test_utils="test_autograd_registration")
            torch.library.opcheck(packet.default, plain, test_utils=NO_GRAD_UTILS)
        outs = packet.default(*plain)
        outs = outs if isinstance(outs, tuple) else (outs,)
        kwargs = {n: torch.empty_like(o) for n, o in zip(out_names(fn), outs)}
        torch.library.opcheck(packet.out, plain, kwargs,
                              test_utils=("test_schema", "test_faketensor"))
