"""Host side of a library: kernel-level tile IR -> the C entries of design.md's ABI.

In: a module at kernel level (after ``tile-kernel``): user functions (host schedules, or at
-O0 their own kernels), template variants (``tile.variant_of``) and the module's
``tile.dispatch`` table.  Out (:class:`HostCode`): the C source of the exported entries, the
header documenting them, and the metadata JSON that the Python runtime reads.

An exported entry ``F(inputs..., outputs..., symbols..., [lead_rank, lead_dims,] scalars...,
stream)`` checks the symbols and ``...`` extents, rounds its float16/bfloat16 scalars and
dispatches on the symbols (the exact template match, else the generic function) to an
implementation (:mod:`.schedule`), which checks the dimensions and the program's run-time
conditions, then launches each kernel over its grid rows: on the cpu runtime's thread pool,
(``target="ptx"``) through the CUDA driver API on the caller's stream, the cubin (and PTX)
embedded in the library, or (``ascend``, ``ascend-sim``) through the Ascend C backend's
launcher of each kernel (``tilec_ascend_launch_K``, on CANN or the CPU twin); intermediates
of a device live in its memory.  The targets share everything but that.  C names that clash
with C, C++ or Ascend C names (or with each other) get a ``_`` suffix.
"""
from __future__ import annotations

import functools
import json
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any, Sequence

import jinja2

from ... import __version__
from ...dialect import (BACKWARD_ATTR, DISPATCH_ATTR, DTYPE_TEMPLATE_ATTR, KERNEL_ATTR,
                        LEAD_ATTR, SYMBOLS_ATTR, VARIANT_OF_ATTR, params_of, tensor_info)
from ...dims import ELLIPSIS
from ...mlir import ir
from .backend import HostTarget
from ...tiling.tiler import TileParams
from .schedule import (AttentionLaunch, GemmLaunch, Impl, ImplBuilder, Kernel, Param, c_string, failure,
                       functions_of, strings, with_values)

METADATA_FORMAT = 1
@functools.cache
def _templates(package: str) -> jinja2.Environment:
    """The host templates of a backend's ``package``: its own as ``backend/``, extending the
    shared ones as ``common/``."""
    return jinja2.Environment(
        loader=jinja2.PrefixLoader({
            "common": jinja2.PackageLoader("tilec.codegen.common", "templates"),
            "backend": jinja2.PackageLoader(package, "templates")}),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True)

# Names a generated identifier must not take: C and C++ keywords, Ascend C's types and
# qualifiers, what <stdint.h>/<stddef.h> define, and C library functions that a library or
# its callers link against.  A clash gets a "_" suffix (as often as needed).
RESERVED = frozenset("""
auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef
union unsigned void volatile while bool true false nullptr alignas alignof constexpr
static_assert thread_local typeof typeof_unqual _Alignas _Alignof _Atomic _Bool _Complex
_Generic _Imaginary _Noreturn _Static_assert _Thread_local asm and and_eq bitand bitor catch
char8_t char16_t char32_t class compl concept consteval constinit const_cast co_await
co_return co_yield decltype delete dynamic_cast explicit export friend mutable namespace new
noexcept not not_eq operator or or_eq private protected public reinterpret_cast requires
static_cast template this throw try typeid typename using virtual wchar_t xor xor_eq
half bfloat16_t float16_t bfloat16 __gm__ __aicore__ __global__ GM_ADDR AscendC LocalTensor
GlobalTensor TPipe TQue TBuf DataCopy aclrtStream aclError main NULL offsetof size_t
ptrdiff_t max_align_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t
intptr_t uintptr_t intmax_t uintmax_t malloc calloc realloc free posix_memalign
aligned_alloc memcpy memmove memset memcmp strlen strcmp printf fprintf snprintf vsnprintf
abort exit atexit getenv strtol sysconf errno exp expf log logf sqrt sqrtf tanh tanhf erf
erff sin sinf cos cosf pow powf fabs fabsf fmax fmaxf fmin fminf
""".split())
RESERVED_PATTERN = re.compile(r"(?i:tilec_)|_mlir_|U?INT\w*_(?:MAX|MIN|C)$|"
                              r"(?:SIZE|PTRDIFF|WCHAR|WINT|SIG_ATOMIC)_\w+$")


class CNames:
    """Unique C identifiers for one scope, suffixing ``_`` to reserved or taken names."""

    def __init__(self) -> None:
        self.taken: set[str] = set()

    def take(self, name: str) -> str:
        c_name = name
        if c_name in RESERVED or RESERVED_PATTERN.match(c_name):
            c_name += "_"
        while c_name in self.taken:
            c_name += "_"
        self.taken.add(c_name)
        return c_name


def user_shape(shape: list[str], lead: list[str]) -> str:
    """A shape as the user wrote it: the ``$i`` peeled off ``...`` folded back into it."""
    if shape and shape[0] == ELLIPSIS:
        rest = shape[1:]
        while rest and rest[0] in lead:
            rest = rest[1:]
        shape = [ELLIPSIS] + rest
    return "[" + ", ".join(shape) + "]"



# ---------------------------------------------------------------------------------------------
# Exported entries


@dataclass
class Entry:
    """One exported function: its C signature, documentation and implementations."""

    name: str
    c_name: str
    index: int
    params: list[Param]
    results: list[str]                 # result dtypes
    symbols: list[str]
    lead: list[str] | None
    signatures: list[str]              # the generic's, else each variant's
    param_shapes: list[str]            # as the user wrote them ("per variant" without generic)
    result_shapes: list[str]
    generic: Impl | None = None
    variants: list[tuple[dict[str, int], Impl]] = field(default_factory=list)
    c_params: list[str] = field(default_factory=list)      # C names, parameter order
    c_outs: list[str] = field(default_factory=list)
    c_symbols: list[str] = field(default_factory=list)
    c_lead: tuple[str, str] | None = None
    c_stream: str = "stream"

    @property
    def impls(self) -> list[Impl]:
        return ([self.generic] if self.generic else []) + [impl for _, impl in self.variants]

    @property
    def tensor_params(self) -> list[tuple[Param, str, str]]:
        """(parameter, C name, shape) of each tensor parameter."""
        return [(p, c, shape) for p, c, shape in zip(self.params, self.c_params, self.param_shapes)
                if not p.scalar]

    @property
    def scalar_params(self) -> list[tuple[Param, str]]:
        return [(p, c) for p, c in zip(self.params, self.c_params) if p.scalar]

    def prototype(self) -> str:
        parts = [f"const void* {c}" for _, c, _ in self.tensor_params]
        parts += [f"void* {c}" for c in self.c_outs]
        parts += [f"int64_t {c}" for c in self.c_symbols]
        if self.c_lead:
            parts += [f"int64_t {self.c_lead[0]}", f"const int64_t* {self.c_lead[1]}"]
        parts += [f"{'int32_t' if p.info.dtype == 'int32' else 'float'} {c}"
                  for p, c in self.scalar_params]
        parts.append(f"void* {self.c_stream}")
        return f"{self.c_name}({', '.join(parts)})"

    def call_arguments(self) -> list[str]:
        """What the exported function passes to its entry: arrays of its arguments."""
        def array(c_type: str, items: list[str]) -> str:
            return f"({c_type}[]){{{', '.join(items)}}}" if items else "NULL"

        scalars = [f"{{.{'i' if p.info.dtype == 'int32' else 'f'} = {c}}}"
                   for p, c in self.scalar_params]
        return [array("const void* const", [c for _, c, _ in self.tensor_params]),
                array("void* const", self.c_outs), array("const int64_t", self.c_symbols),
                *(self.c_lead or ("0", "NULL")), array("const tilec_scalar", scalars)]

    def dispatch_text(self) -> str:
        return "; ".join(", ".join(f"{s} = {v}" for s, v in b.items()) for b, _ in self.variants)

    def scalar_rounding(self) -> list[tuple[int, str]]:
        """(k, f16|bf16) for each scalar that the entry rounds to its declared type."""
        kinds = {"float16": "f16", "bfloat16": "bf16"}
        return [(k, kinds[p.info.dtype]) for k, (p, _) in enumerate(self.scalar_params)
                if p.info.dtype in kinds]

    def dispatch_condition(self, binding: dict[str, int]) -> str:
        return " && ".join(f"s[{self.symbols.index(s)}] == INT64_C({v})"
                           for s, v in binding.items())

    def no_variant_failure(self) -> str:
        values = [(s, f"s[{self.symbols.index(s)}]") for s in self.variants[0][0]]
        return failure("TILEC_ERR_NO_VARIANT", *with_values(
            f"{self.name}: no variant for ", values, f" (variants: {self.dispatch_text()}) and "
            "no generic kernel (compiled with --no-generic)"))


def _signature(name: str, fn: Any, lead: list[str]) -> str:
    """``name(x: bfloat16[seq, hidden], eps: float32 = 1e-06) -> bfloat16[seq, hidden]``."""
    params = []
    for p in params_of(fn):
        shape = "" if p.scalar else user_shape([str(d) for d in p.info.shape], lead)
        default = "" if p.default is None else f" = {p.default}"
        params.append(f"{p.name}: {p.info.dtype}{shape}{default}")
    results = [tensor_info(t) for t in fn.type.results]
    returns = ", ".join(f"{r.dtype}{user_shape([str(d) for d in r.shape], lead)}"
                        for r in results)
    return f"{name}({', '.join(params)}) -> {returns if len(results) == 1 else f'({returns})'}"


def _dispatch_table(module: Any) -> dict[str, tuple[str, list[tuple[str, dict[str, int]]]]]:
    """function -> (generic function or "", [(variant function, binding)])."""
    attrs = module.operation.attributes
    if DISPATCH_ATTR not in attrs:
        return {}
    table = {}
    for item in ir.DictAttr(attrs[DISPATCH_ATTR]):
        entry = ir.DictAttr(item.attr)
        variants = [(ir.StringAttr(v["fn"]).value,
                     {b.name: ir.IntegerAttr(b.attr).value for b in ir.DictAttr(v["binding"])})
                    for v in entry["variants"]]
        table[item.name] = (ir.StringAttr(entry["generic"]).value, variants)
    return table


def _entries(module: Any, kernels: dict[str, Kernel], test_break: str,
             device: str) -> list[Entry]:
    """One entry per user function, in the module's order (a function dropped by
    --no-generic where its first variant is); ``device`` is the device API's prefix, "" on
    the cpu."""
    functions = functions_of(module)
    table = _dispatch_table(module)
    names: list[str] = []
    for name, fn in functions.items():
        if VARIANT_OF_ATTR in fn.attributes:
            name = ir.StringAttr(fn.attributes[VARIANT_OF_ATTR]).value
        elif "sym_visibility" in fn.attributes:
            continue
        if name not in names:
            names.append(name)
    global_names = CNames()
    entries = []
    for index, name in enumerate(names):
        generic, variants = table.get(name, (name, []))
        abi = functions[generic or variants[0][0]]
        symbols = strings(abi.attributes[SYMBOLS_ATTR])
        lead = strings(abi.attributes[LEAD_ATTR]) if LEAD_ATTR in abi.attributes else None
        params = params_of(abi)
        shown = [generic] if generic else [fn for fn, _ in variants]
        types = list(abi.type.inputs) + list(abi.type.results)
        shapes = [user_shape([str(d) for d in tensor_info(t).shape], lead or []) if generic
                  else "(as in each variant)" for t in types]
        entry = Entry(name, global_names.take(name), index, params,
                      [tensor_info(t).dtype for t in abi.type.results], symbols, lead,
                      [_signature(name if f == name else f, functions[f], lead or [])
                       for f in shown], shapes[:len(params)], shapes[len(params):])
        impls = [(generic, None)] if generic else []
        for k, (fn_name, binding) in enumerate(impls + variants):
            title = name if fn_name == name else f"{name} (variant {fn_name})"
            impl = Impl(f"tilec_impl_{index}_{k}", fn_name, title)
            ImplBuilder(functions[fn_name], impl, symbols + (lead or []), functions,
                        kernels, device).build(params, perturbed=test_break in (name, fn_name))
            if binding is None:
                entry.generic = impl
            else:
                entry.variants.append((binding, impl))
        _name_abi(entry)
        entries.append(entry)
    return entries


def _name_abi(entry: Entry) -> None:
    """C names of the entry's parameters, taken in ABI order."""
    names = CNames()
    c_names = {i: names.take(p.name) for i, p in enumerate(entry.params) if not p.scalar}
    entry.c_outs = [names.take(f"out_{r}") for r in range(len(entry.results))]
    entry.c_symbols = [names.take(s) for s in entry.symbols]
    if entry.lead is not None:
        entry.c_lead = (names.take("lead_rank"), names.take("lead_dims"))
    c_names.update({i: names.take(p.name) for i, p in enumerate(entry.params) if p.scalar})
    entry.c_params = [c_names[i] for i in range(len(entry.params))]
    entry.c_stream = names.take("stream")


def _kernels(module: Any) -> dict[str, Kernel]:
    out: dict[str, Kernel] = {}
    for name, fn in functions_of(module).items():
        if KERNEL_ATTR in fn.attributes:
            # a split reduction's kernel also takes its workspace
            split = "split" in ir.DictAttr(fn.attributes[KERNEL_ATTR])
            buffers = len(fn.type.inputs) + len(fn.type.results) + split
            out[name] = Kernel(len(out), f"_mlir_ciface_{name}", buffers,
                               gemm=_gemm_launch(fn), attention=_attention_launch(fn))
    return out


GEMM_DTYPES = {"float32": "TILEC_GEMM_F32", "float16": "TILEC_GEMM_F16",
               "bfloat16": "TILEC_GEMM_BF16"}


ATTENTION_DTYPES = {"float32": "TILEC_ATTENTION_F32", "float16": "TILEC_ATTENTION_F16",
                    "bfloat16": "TILEC_ATTENTION_BF16"}


def _attention_launch(fn: Any) -> AttentionLaunch | None:
    """How the host runs kernel ``fn`` on the CPU attention, if its schedule is
    ``attention``."""
    tile = TileParams.of(ir.DictAttr(fn.attributes[KERNEL_ATTR])).attention
    if tile is None:
        return None
    inputs = list(fn.type.inputs)
    dtypes = [tensor_info(inputs[k]).dtype for k in (tile.q, tile.k, tile.v)]
    dtypes.append(tensor_info(fn.type.results[0]).dtype)
    return AttentionLaunch(tile.q, tile.k, tile.v, len(inputs),
                           tuple(ATTENTION_DTYPES[d] for d in dtypes), tile.causal,
                           f"_mlir_ciface_{tile.scores}")


def _gemm_launch(fn: Any) -> GemmLaunch | None:
    """How the host runs kernel ``fn`` on the CPU GEMM, if its schedule is ``gemm`` (not the
    scores function of an attention kernel: its epilogue is the attention's to call)."""
    attrs = ir.DictAttr(fn.attributes[KERNEL_ATTR])
    tile = TileParams.of(attrs).gemm
    if tile is None or "scores_of" in attrs:
        return None
    inputs = list(fn.type.inputs)
    dtypes = [tensor_info(inputs[k]).dtype for k in (tile.lhs, tile.rhs)]
    if any(d not in GEMM_DTYPES for d in dtypes):
        return None
    return GemmLaunch(tile.lhs, tile.rhs, len(inputs), GEMM_DTYPES[dtypes[0]],
                      GEMM_DTYPES[dtypes[1]], tile.transpose_b, tile.broadcast_b,
                      (tile.tile_m, tile.tile_n, tile.block_k))


# ---------------------------------------------------------------------------------------------
# Metadata, header, source


def _shape_list(t: ir.Type) -> list[str]:
    return [str(d) for d in tensor_info(t).shape]


def metadata(entries: list[Entry], functions: dict[str, Any], source: str, arch: str,
             target: str) -> dict:
    """What :mod:`tilec.runtime.loader` reads from ``tilec_metadata()`` (see the README).
    Shapes are the generic function's, None when --no-generic dropped it; each variant lists
    its own."""
    out = {}
    for e in entries:
        generic = functions[e.generic.function] if e.generic else None
        params = [{"name": p.name, "c_name": c, "kind": "scalar" if p.scalar else "tensor",
                   "dtype": p.info.dtype, "default": p.default,
                   "shape": _shape_list(generic.type.inputs[i]) if generic else None}
                  for i, (p, c) in enumerate(zip(e.params, e.c_params))]
        results = [{"dtype": dtype, "shape": _shape_list(generic.type.results[r]) if generic
                    else None} for r, dtype in enumerate(e.results)]
        variants = [{"function": impl.function, "binding": binding,
                     "params": [_shape_list(t) for t in functions[impl.function].type.inputs],
                     "results": [_shape_list(t) for t in functions[impl.function].type.results]}
                    for binding, impl in e.variants]
        out[e.name] = {"c_name": e.c_name, "signatures": e.signatures, "params": params,
                       "results": results, "symbols": e.symbols, "lead": e.lead,
                       "generic": generic is not None, "variants": variants}
        abi = functions[e.generic.function if e.generic else e.variants[0][1].function]
        out[e.name]["broadcasts"] = _broadcasts(abi, [b for b, _ in e.variants])
        if DTYPE_TEMPLATE_ATTR in abi.attributes:
            out[e.name]["dtype_template"] = {
                a.name: ir.StringAttr(a.attr).value
                for a in ir.DictAttr(abi.attributes[DTYPE_TEMPLATE_ATTR])}
        if BACKWARD_ATTR in abi.attributes:
            out[e.name]["backward"] = ir.StringAttr(abi.attributes[BACKWARD_ATTR]).value
    return {"format": METADATA_FORMAT, "target": target, "arch": arch, "tilec": __version__,
            "source": source, "functions": out}


def _broadcasts(fn: Any, bindings: list[dict[str, int]]) -> list[list[Any]]:
    """``[symbol, to, message, either]`` of each run-time broadcast (``bcast`` check) of
    ``fn``: the symbol must equal ``to`` or be 1, or with ``either`` (a variant binds ``to``
    to 1 alone, the front end's other direction) ``to`` may be 1 instead."""
    out: list[list[Any]] = []
    for op in fn.regions[0].blocks[0].operations:
        if op.operation.name != "tile.check" or \
                ir.StringAttr(op.attributes["rel"]).value != "bcast":
            continue
        lhs, rhs, message = (ir.StringAttr(op.attributes[k]).value
                             for k in ("lhs", "rhs", "message"))
        out.append([lhs, rhs, message, {rhs: 1} in bindings])
    return out


@dataclass(frozen=True)
class HostCode:
    """The host C of a library, its header, its metadata, and the symbols it exports."""

    source: str
    header: str
    metadata: dict
    exports: list[str]
    gemm: bool = False     # whether a kernel runs on the CPU GEMM (the runtime's cpu_gemm.c)
    attention: bool = False   # ... on the CPU attention (cpu_attention.c)


@dataclass(frozen=True)
class DeviceCode:
    """What a device library launches: each kernel function's launch description and, for
    ptx, the cubin and the PTX it embeds (loaded by the driver when the GPU is newer than the
    cubin's arch).  An ascend library's kernels are in its own sources (the Ascend C
    backend's launcher file)."""

    cubin: bytes
    ptx: str
    kernels: dict[str, Kernel]


def _byte_lines(data: bytes, width: int = 24) -> list[str]:
    return [", ".join(str(b) for b in data[i:i + width]) + ","
            for i in range(0, len(data), width)]


def generate(module: Any, *, name: str, source: str, arch: str, target: HostTarget,
             test_break: str = "", device: DeviceCode | None = None,
             cpu_code: Sequence[Any] = ()) -> HostCode:
    """The host code of library ``name`` (the stem of ``name.so``/``name.h``) compiled from
    ``source`` for ``arch`` and ``target``: kernels in the library, or those of ``device``.  A cpu
    library's kernels are compiled once per ``cpu_code`` (``cpu.CodeVariant``: the first runs
    unless the CPU has the x86-64 level of a later one).
    ``test_break`` names a function, or one of its template variants, whose first result's
    element 0 the code perturbs: the hook that proves verification fails (where outputs are
    host memory: cpu and ascend-sim)."""
    kernels = _kernels(module) if device is None else device.kernels
    entries = _entries(module, kernels, test_break if target.host_memory else "", target.api)
    meta = metadata(entries, functions_of(module), source, arch, target.name)
    context = {
        "entries": entries, "kernels": list(kernels.values()), "version": __version__,
        "source": source, "name": name, "arch": arch, "target": target.name,
        "api": target.api, "host_memory": target.host_memory,
        "guard": re.sub(r"\W", "_", name).upper(),
        "metadata_lines": [c_string(chunk) for chunk in textwrap.wrap(
            json.dumps(meta, sort_keys=True), 92, expand_tabs=False, replace_whitespace=False,
            drop_whitespace=False, break_on_hyphens=False)],
        "perturbed": sorted({impl.perturb_dtype for e in entries for impl in e.impls
                             if impl.perturb_dtype}),
        "cubin_lines": _byte_lines(device.cubin) if device else [],
        "ptx_lines": [c_string(line + "\n") for line in device.ptx.splitlines()] if device
        else [],
        "cpu_default": cpu_code[0].arch if cpu_code else arch,
        "cpu_required": cpu_code[0].level if cpu_code else 0,
        "cpu_variants": list(reversed(cpu_code[1:])),   # the highest level first
    }
    exports = [e.c_name for e in entries] + ["tilec_last_error", "tilec_record_error",
                                             "tilec_metadata"]
    exports += target.exports
    templates = _templates(target.templates)
    return HostCode(templates.get_template("backend/host.c.j2").render(context),
                    templates.get_template("backend/header.h.j2").render(context), meta, exports,
                    any(k.gemm is not None for k in kernels.values()),
                    any(k.attention is not None for k in kernels.values()))
