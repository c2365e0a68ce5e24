"""One implementation of a host entry as C: kernel-level tile IR -> the model that
``templates/host.c.j2`` renders.

In: a function at kernel level (a template variant or a generic function): its ``tile.check``
ops and ``func.call`` of kernel functions, or itself a kernel (-O0).  Out: :class:`Impl`, C
expressions for its dimensions (``d[k]``, each checked to be a non-negative integer), element
counts (``n[k]``), checks, launches and copies, where symbols are ``s[k]``.

Where values live: a kernel that only reshapes its argument is not launched (above -O0):
its result is the argument's buffer, whose bytes a row-major reshape leaves as they are.  A
kernel result that the function returns is written straight into its output (a reshape of it
included); the other kernel results take intermediate buffers ("slots"), allocated before their
kernel and freed after their last reader; an output with a ``tile.reuse`` buffer shares that
buffer's slot, unless a reshape still reads that buffer under another name.  Results no kernel
writes (a parameter, a value returned twice) are copied.

Kernel C ABI (the CPU backend's object):
``void _mlir_ciface_K(MemRef1D* arg..., MemRef1D* res..., MemRef1D* dims, int64_t row_begin,
int64_t row_end)``: one flat row-major buffer per argument and result in storage type (a
rank-0 argument is one float32, or int32), ``dims`` the kernel's ``symbols`` then, for a
rank-generic kernel, the rank and extents of its ``...``; rows of ``grid`` flattened row-major.

On a device (ptx, ascend) the same schedule launches each kernel with device pointers (a
rank-0 argument in its own element type: the entry stages the scalar parameters on the device
first), the kernel's symbols, the product of the ``...`` extents, and (ptx) the dynamic shared
memory the kernel's row needs; intermediates are device memory on the stream, through the
device API named by its prefix (``tilec_cuda``, ``tilec_ascend``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import lcm
from typing import Any, Optional

from ...diagnostics import TilecError
from ...dialect import (BUFFERS_ATTR, ELEMENT_BYTES, FUSED_ATTR, KERNEL_ATTR, REUSE_ATTR, Param,
                       tensor_info)
from ...dialect.locations import span_of
from ...dims import ELLIPSIS, Dim, parse_dim
from ...mlir import ir
from ...tiling.tiler import SPLIT_MIN_ROWS

STORAGE_C = {"float16": "uint16_t", "bfloat16": "uint16_t", "float32": "float", "int32": "int32_t"}
ONE = "INT64_C(1)"
RESHAPE_KERNEL_OPS = frozenset({"tile.load_row", "tile.reshape", "tile.store_row", "func.return"})


def reshapes_only(kernel_fn: Any) -> bool:
    """Whether a kernel only reshapes its one argument into its one result of the same
    element type (the bytes stay as they are)."""
    ins, outs = list(kernel_fn.type.inputs), list(kernel_fn.type.results)
    if len(ins) != 1 or len(outs) != 1 or \
            tensor_info(ins[0]).dtype != tensor_info(outs[0]).dtype:
        return False
    names = [op.operation.name for op in kernel_fn.regions[0].blocks[0].operations]
    return "tile.reshape" in names and set(names) <= RESHAPE_KERNEL_OPS


def c_string(text: str) -> str:
    """``text`` as a C string literal."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.extend(f"\\{b:03o}" for b in ch.encode())
    return '"' + "".join(out) + '"'


def failure(code: str, *pieces: str) -> str:
    """The arguments of ``tilec_fail``: ``pieces`` alternate message text and int64_t C
    expressions, whose values the message shows."""
    texts, values = pieces[0::2], pieces[1::2]
    fmt = "%lld".join(c_string(t.replace("%", "%%"))[1:-1] for t in texts)
    return f'{code}, "{fmt}"' + "".join(f", (long long){v}" for v in values)


def with_values(before: str, values: list[tuple[str, str]], after: str) -> list[str]:
    """Pieces for :func:`failure`: ``before``, ``name = value`` for each (name, C
    expression), ``after``."""
    pieces, text = [], before
    for i, (name, expr) in enumerate(values):
        pieces += [f"{text}{', ' if i else ''}{name} = ", expr]
        text = ""
    return pieces + [text + after]


def strings(attr: Any) -> list[str]:
    return [ir.StringAttr(a).value for a in attr]


def name_of(op: Any) -> str:
    return ir.StringAttr(op.attributes["sym_name"]).value


def functions_of(module: Any) -> dict[str, Any]:
    return {name_of(op): op for op in module.body.operations if op.operation.name == "func.func"}


# ---------------------------------------------------------------------------------------------
# One implementation (a generic function or a template variant) as C


@dataclass
class Kernel:
    """A kernel function as the host calls it."""

    index: int
    symbol: str                       # _mlir_ciface_NAME (cpu), the cubin's entry (ptx)
    buffers: int                      # memrefs before dims: arguments, then results
    shared: Dim = Dim.const(0)        # ptx: dynamic shared memory per block
    row_elements: Dim = Dim.const(1)  # ptx: elements of the largest output row
    gemm: Optional["GemmLaunch"] = None   # cpu: the kernel is the epilogue of a GEMM
    attention: Optional["AttentionLaunch"] = None   # cpu: the kernel runs cpu_attention.c
    split: Any = None                 # ptx: a codegen.ptx.kernel.SplitLaunch (attention)


@dataclass(frozen=True)
class GemmLaunch:
    """What the host passes the CPU GEMM of a ``gemm`` kernel (``cpu_gemm.h``): which
    buffers are A, B and the first result, their element types, how B is read, the tile."""

    lhs: int
    rhs: int
    out: int
    lhs_dtype: str        # TILEC_GEMM_F32, _F16 or _BF16
    rhs_dtype: str
    transpose_b: bool
    broadcast_b: bool
    tile: tuple[int, int, int]   # tile_m, tile_n, block_k


@dataclass(frozen=True)
class AttentionLaunch:
    """What the host passes the CPU attention of an ``attention`` kernel
    (``cpu_attention.h``): the buffers of q, k, v and the output, their element types
    (TILEC_ATTENTION_F32 ...), whether it is causal, and the C symbol of its scores function
    (whose epilogue is called on each block of scores)."""

    q: int
    k: int
    v: int
    out: int
    dtypes: tuple[str, str, str, str]
    causal: bool
    scores: str


@dataclass
class Launch:
    kernel: Kernel
    allocs: list[tuple[int, str]]        # (slot, bytes) allocated before the launch
    staged: list[tuple[str, str, str]]   # (local, f16|bf16, pointer): rank-0 operands as float
    memrefs: list[tuple[str, str]]       # (pointer, elements)
    dims: list[str]
    rank_generic: bool
    ready: str                           # some result has elements
    rows: str
    traffic: str                         # bytes read and written: the runtime's grain
    frees: list[int]                     # slots whose last reader this is
    shared: str = "0"                    # ptx: C expressions of Kernel.shared, .row_elements
    row_elements: str = "1"
    # cpu, a split reduction: C expressions of its tile count and partial results per tile
    # (the rows are the tiles, then one more that combines them, with a workspace memref)
    split: tuple[str, str] | None = None
    # cpu, attention: C expressions of s, t, d, dv, the diagonal, and per axis of the batch its
    # extent and the key's and value's strides
    attention: dict[str, Any] | None = None
    # ptx, attention split over blocks: C expressions of its tiles and key blocks, and the
    # workspace bytes per (tile, split) unit (tilec_cuda_launch_split)
    workspace: tuple[str, str, int] | None = None


@dataclass
class Impl:
    c_name: str
    function: str                                                     # its func.func
    title: str                                                        # for messages
    checks: list[tuple[str, str]] = field(default_factory=list)       # (condition, failure)
    dims: list[tuple[str, int, str]] = field(default_factory=list)    # (numerator, den, failure)
    sizes: list[tuple[str, str]] = field(default_factory=list)        # (elements, failure)
    launches: list[Launch] = field(default_factory=list)
    copies: list[str] = field(default_factory=list)
    slots: int = 0
    perturb: str = ""                                                 # the test hook's damage
    perturb_dtype: str = ""
    scalars: list[tuple[int, str]] = field(default_factory=list)      # device: (k, dtype)


class ImplBuilder:
    """Builds the :class:`Impl` of ``fn``: symbols are ``s[k]`` in C (the entry's symbols,
    then those peeled off ``...``), dimensions ``d[k]``, element counts ``n[k]``; ``device``
    is the device API's prefix ("" on the cpu)."""

    def __init__(self, fn: Any, impl: Impl, symbols: list[str], functions: dict[str, Any],
                 kernels: dict[str, Kernel], device: str = "") -> None:
        self.fn = fn
        self.device = device
        self.impl = impl
        self.symbol_index = {s: i for i, s in enumerate(symbols)}
        self.functions = functions
        self.kernels = kernels
        self.dim_index: dict[Dim, int] = {}
        self.size_index: dict[Any, int] = {}

    # dimensions -----------------------------------------------------------------------------
    def sym(self, name: str) -> str:
        if name == ELLIPSIS:
            return "ir_lead_numel"
        if name not in self.symbol_index:
            raise TilecError(f"internal: '{self.impl.title}' needs symbol '{name}', which the "
                             "caller does not pass", span_of(self.fn.location))
        return f"s[{self.symbol_index[name]}]"

    def scaled(self, d: Dim, den: int) -> str:
        """C for ``d * den`` (an integer polynomial), with overflow checks."""
        expr = ""
        for mono, coef in sorted(d.terms.items()):
            term = f"INT64_C({int(coef * den)})"
            for s in mono:
                term = f"tilec_mul({term}, {self.sym(s)}, &overflow)"
            expr = f"tilec_add({expr}, {term}, &overflow)" if expr else term
        return expr or "INT64_C(0)"

    def dim(self, d: Dim, what: str) -> str:
        """C for dimension ``d``, checked once to be a non-negative integer."""
        if d.value is not None:
            return f"INT64_C({d.value})"
        if len(d.symbols()) == 1 and d == Dim.sym(next(iter(d.symbols()))):
            return self.sym(next(iter(d.symbols())))
        if d not in self.dim_index:
            den = lcm(*(c.denominator for c in d.terms.values()))
            pieces = with_values(f"{self.impl.title}: {what} is {d} with ",
                                  [(s, self.sym(s)) for s in sorted(d.symbols())],
                                  ", not a non-negative integer")
            self.dim_index[d] = len(self.impl.dims)
            self.impl.dims.append((self.scaled(d, den), den,
                                   failure("TILEC_ERR_ARGUMENT", *pieces)))
        return f"d[{self.dim_index[d]}]"

    def size(self, value: Any, what: str) -> str:
        """``n[k]``: the element count of ``value``, computed and checked once."""
        if value not in self.size_index:
            expr = ONE
            for i, d in enumerate(tensor_info(value.type).shape):
                factor = "ir_lead_numel" if d == ELLIPSIS else self.dim(d, f"{what} dimension {i}")
                expr = factor if expr == ONE else f"tilec_mul({expr}, {factor}, &overflow)"
            self.size_index[value] = len(self.impl.sizes)
            self.impl.sizes.append((expr, failure(
                "TILEC_ERR_ARGUMENT", f"{self.impl.title}: {what} has too many elements")))
        return f"n[{self.size_index[value]}]"

    def check(self, op: Any) -> None:
        """A ``tile.check`` as a C condition, compared exactly (sides scaled to integers)."""
        a = op.attributes
        lhs, rhs = parse_dim(a["lhs"].value), parse_dim(a["rhs"].value)
        if a["rel"].value in ("int", "i32"):
            self.integer_check(op, lhs, a["rel"].value == "i32")
            return
        den = lcm(*(c.denominator for c in (lhs - rhs).terms.values()), 1)
        left, right = self.scaled(lhs, den), self.scaled(rhs, den)
        relation = "<=" if a["rel"].value == "le" else "=="
        condition = f"{left} {relation} {right}"
        if a["rel"].value == "bcast":
            condition = f"({condition} || {left} == INT64_C({den}))"
        span = span_of(op.location)
        where = f"{span.located()}: " if span else ""
        scale = f" (times {den})" if den != 1 else ""
        self.impl.checks.append((
            condition,
            failure("TILEC_ERR_CHECK", f"{where}{a['message'].value} ({a['lhs'].value} = ",
                    left, f", {a['rhs'].value} = ", right, f"{scale})")))

    def integer_check(self, op: Any, lhs: Dim, int32: bool) -> None:
        """A ``tile.check`` of relation ``int`` (``lhs`` times its denominator divides by it)
        or ``i32`` (and within int32, both bounds times that denominator)."""
        den = lcm(*(c.denominator for c in lhs.terms.values()), 1)
        value = self.scaled(lhs, den)
        condition = f"{value} % INT64_C({den}) == 0"
        if int32:
            condition += (f" && {value} >= INT64_C({-2**31 * den})"
                          f" && {value} <= INT64_C({(2**31 - 1) * den})")
        span = span_of(op.location)
        where = f"{span.located()}: " if span else ""
        pieces = with_values(f"{where}{op.attributes['message'].value} (",
                             [(s, self.sym(s)) for s in sorted(lhs.symbols())], ")")
        self.impl.checks.append((condition, failure("TILEC_ERR_CHECK", *pieces)))

    # the schedule ---------------------------------------------------------------------------
    def build(self, params: list[Param], perturbed: bool) -> Impl:
        """Fill in the implementation; ``perturbed`` adds the test hook's damage."""
        block = self.fn.regions[0].blocks[0]
        where: dict[Any, str] = {}        # value -> C pointer to its elements
        scalar: dict[Any, int] = {}       # scalar parameter -> k of sc[k]
        tensors = 0
        for p, arg in zip(params, block.arguments):
            if p.scalar:
                scalar[arg] = len(scalar)
                where[arg] = f"(void*)(dsc + {8 * scalar[arg]})" if self.device else \
                    f"(void*)&sc[{scalar[arg]}]"
                self.impl.scalars.append((scalar[arg], p.info.dtype))
            else:
                where[arg] = f"(void*)in[{tensors}]"
                tensors += 1
                self.size(arg, f"argument '{p.name}'")
        ops = list(block.operations)
        results = list(ops[-1].operands)
        for r, v in enumerate(results):
            self.size(v, f"result {r}")
        for op in ops[:-1]:
            if op.operation.name == "tile.check":
                self.check(op)
        calls, alias = self.elide_reshapes(self.calls(ops[:-1], list(block.arguments), results))
        results = [alias.get(v, v) for v in results]
        placed = self.place_results(calls, results, where)
        slot_of = self.place_intermediates(calls, where, set(alias.values()))
        last_reader = {slot_of[v]: i for i, (_, operands, outs) in enumerate(calls)
                       for v in operands + outs if v in slot_of}
        allocated: set[int] = set()
        for i, (kernel_fn, operands, outs) in enumerate(calls):
            allocs = []
            for v in outs:
                slot = slot_of.get(v)
                if slot is not None and slot not in allocated:
                    allocated.add(slot)
                    allocs.append((slot, self.slot_bytes(slot, slot_of)))
            frees = sorted(s for s, last in last_reader.items() if last == i)
            self.impl.launches.append(
                self.launch(kernel_fn, operands, outs, where, scalar, allocs, frees))
        self.copy_results(results, placed, where, scalar)
        if perturbed and results:
            self.impl.perturb_dtype = tensor_info(results[0].type).dtype
            self.impl.perturb = f"if ({self.size(results[0], 'result 0')} > 0) " \
                                f"tilec_perturb_{self.impl.perturb_dtype}(out[0]);"
        self.impl.slots = len(set(slot_of.values()))
        return self.impl

    def calls(self, ops: list[Any], args: list[Any], results: list[Any]) -> list[tuple]:
        """(kernel function, operands, results) of each launch, in order."""
        if KERNEL_ATTR in self.fn.attributes:      # -O0: the function is its own kernel
            return [(self.fn, args, results)]
        calls = []
        for op in ops:
            name = op.operation.name
            if name == "func.call":
                callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                calls.append((self.functions[callee], list(op.operands), list(op.results)))
            elif name not in ("tile.check", "tile.hint"):
                raise TilecError(f"internal: the host schedule of '{self.impl.title}' has "
                                 f"'{name}'", span_of(op.location))
        return calls

    def elide_reshapes(self, calls: list[tuple]) -> tuple[list[tuple], dict[Any, Any]]:
        """The calls without those of kernels that only reshape (:func:`reshapes_only`), the
        readers of their results reading the reshaped value instead; and the map from each
        dropped result to that value.  -O0 keeps every kernel."""
        if KERNEL_ATTR in self.fn.attributes:
            return calls, {}
        alias: dict[Any, Any] = {}
        kept = []
        for kernel_fn, operands, outs in calls:
            operands = [alias.get(v, v) for v in operands]
            if reshapes_only(kernel_fn):
                alias[outs[0]] = operands[0]
            else:
                kept.append((kernel_fn, operands, outs))
        return kept, alias

    @staticmethod
    def place_results(calls: list[tuple], results: list[Any], where: dict) -> set[int]:
        """A kernel result that the function returns is written straight into ``out[r]``
        (its first return position); the positions placed so."""
        produced = {v for _, _, outs in calls for v in outs}
        placed = set()
        for r, v in enumerate(results):
            if v in produced and v not in where:
                where[v] = f"out[{r}]"
                placed.add(r)
        return placed

    @staticmethod
    def place_intermediates(calls: list[tuple], where: dict, reshaped: set[Any]) \
            -> dict[Any, int]:
        """A slot for every other kernel result; an output takes its ``tile.reuse``
        buffer's slot unless that buffer's value is ``reshaped`` (read under another name,
        whose last reader the reuse did not see)."""
        slot_of: dict[Any, int] = {}
        value_of_buffer: dict[int, Any] = {}
        slots = 0
        for kernel_fn, _, outs in calls:
            numbers = reuse = [-1] * len(outs)
            if FUSED_ATTR in kernel_fn.attributes:
                fused = ir.DictAttr(kernel_fn.attributes[FUSED_ATTR])
                numbers = [int(x) for x in ir.DenseI64ArrayAttr(fused[BUFFERS_ATTR])]
                reuse = [int(x) for x in ir.DenseI64ArrayAttr(fused[REUSE_ATTR])]
            for v, number, taken in zip(outs, numbers, reuse):
                value_of_buffer[number] = v
                if v in where:
                    continue
                shared = value_of_buffer.get(taken) if taken >= 0 else None
                if shared in slot_of and shared not in reshaped:
                    slot_of[v] = slot_of[shared]
                else:
                    slot_of[v], slots = slots, slots + 1
                where[v] = f"buf[{slot_of[v]}]"
        return slot_of

    def slot_bytes(self, slot: int, slot_of: dict[Any, int]) -> str:
        expr = ""
        for v, s in slot_of.items():
            if s == slot:
                element = ELEMENT_BYTES[tensor_info(v.type).dtype]
                n = f"{self.size(v, 'an intermediate')} * {element}"
                expr = f"tilec_max({expr}, {n})" if expr else n
        return expr

    def launch(self, kernel_fn: Any, operands: list[Any], outs: list[Any], where: dict,
               scalar: dict, allocs: list[tuple[int, str]], frees: list[int]) -> Launch:
        name = name_of(kernel_fn)
        attrs = ir.DictAttr(kernel_fn.attributes[KERNEL_ATTR])
        staged, memrefs, traffic = [], [], ""
        for v in operands + outs:
            info = tensor_info(v.type)
            if v in scalar:
                memrefs.append((where[v], ONE))
                continue
            n = self.size(v, f"a buffer of kernel '{name}'")
            bytes_ = f"tilec_mul({n}, {ELEMENT_BYTES[info.dtype]}, &overflow)"
            traffic = f"tilec_add({traffic}, {bytes_}, &overflow)" if traffic else bytes_
            if info.shape == () and info.dtype in ("float16", "bfloat16") and v in operands \
                    and not self.device:
                local = f"staged_{len(staged)}"
                staged.append((local, "f16" if info.dtype == "float16" else "bf16", where[v]))
                memrefs.append((f"&{local}", ONE))
            else:
                memrefs.append((where[v], n))
        rows = ONE
        for g in strings(attrs["grid"]):
            extent = "ir_lead_numel" if g == ELLIPSIS else \
                self.dim(parse_dim(g), f"a grid dimension of kernel '{name}'")
            rows = extent if rows == ONE else f"tilec_mul({rows}, {extent}, &overflow)"
        # every result has every grid axis: rows cannot overflow once one result has elements
        ready = " || ".join(f"{self.size(v, 'a kernel result')} > 0" for v in outs)
        rank_generic = any(tensor_info(t).rank_generic
                           for t in list(kernel_fn.type.inputs) + list(kernel_fn.type.results))
        kernel = self.kernels[name]
        split = None
        if "split" in attrs:
            extent = self.dim(parse_dim(ir.StringAttr(attrs["split_rows"]).value),
                              f"the reduced axis of kernel '{name}'")
            width = self.dim(parse_dim(ir.StringAttr(attrs["split_width"]).value),
                             f"a partial result of kernel '{name}'")
            tiles = f"tilec_split_tiles({extent}, {ir.IntegerAttr(attrs['split']).value}, " \
                    f"{SPLIT_MIN_ROWS})"
            split = (tiles, width)
        return Launch(kernel, allocs, staged, memrefs,
                      [self.sym(s) for s in strings(attrs["symbols"])], rank_generic, ready,
                      rows, traffic or "INT64_C(0)", frees,
                      self.dim(kernel.shared, f"the shared memory of kernel '{name}'"),
                      self.dim(kernel.row_elements, f"a row of kernel '{name}'"), split,
                      self.attention_extents(kernel_fn, kernel.attention),
                      self.workspace(name, kernel.split))

    def workspace(self, name: str, split: Any) -> tuple[str, str, int] | None:
        """:attr:`Launch.workspace` of a ptx kernel whose keys the grid splits."""
        if split is None:
            return None
        what = f"a dimension of kernel '{name}'"
        group = self.dim(split.group, what)
        tiles = f"tilec_mul({self.dim(split.batch, what)}, ({group} + " \
                f"{split.block_rows - 1}) / {split.block_rows}, &overflow)"
        blocks = f"({self.dim(split.keys, what)} + {split.block_keys - 1}) / {split.block_keys}"
        return tiles, blocks, split.unit_bytes

    def attention_extents(self, kernel_fn: Any, launch: Optional[AttentionLaunch]) \
            -> dict[str, Any] | None:
        """The C expressions of :attr:`Launch.attention` for ``kernel_fn``."""
        if launch is None:
            return None
        inputs = [tensor_info(t).shape for t in kernel_fn.type.inputs]
        out = tensor_info(kernel_fn.type.results[0]).shape
        q, k, v = inputs[launch.q], inputs[launch.k], inputs[launch.v]
        what = "a dimension of an attention"
        batch = out[:-2]

        def strides(shape: tuple) -> list[str]:
            step, out_strides = shape[-2] * shape[-1], []
            for axis in reversed(range(len(batch))):
                own = shape[axis]
                out_strides.append("INT64_C(0)" if own == Dim.const(1) else
                                   self.scaled(step, 1))
                step = step * own
            return list(reversed(out_strides))
        diagonal = parse_dim(ir.StringAttr(ir.DictAttr(ir.DictAttr(
            kernel_fn.attributes[KERNEL_ATTR])["attention"])["diagonal"]).value)
        return {"s": self.dim(out[-2], what), "t": self.dim(k[-2], what),
                "d": self.dim(q[-1], what), "dv": self.dim(out[-1], what),
                "diagonal": self.scaled(diagonal, 1),
                "extents": [self.dim(d, what) for d in batch],
                "k_strides": strides(k), "v_strides": strides(v)}

    def copy_results(self, results: list[Any], placed: set[int], where: dict,
                     scalar: dict) -> None:
        """Results no kernel writes: a parameter, or a value returned twice."""
        for r, v in enumerate(results):
            if r in placed:
                continue
            dtype = tensor_info(v.type).dtype
            if v in scalar and not self.device:
                k = scalar[v]
                value = {"float32": f"sc[{k}].f", "int32": f"sc[{k}].i",
                         "float16": f"tilec_f32_to_f16(sc[{k}].f)",
                         "bfloat16": f"tilec_f32_to_bf16(sc[{k}].f)"}[dtype]
                self.impl.copies.append(f"*({STORAGE_C[dtype]}*)out[{r}] = {value};")
            elif self.device:
                n = self.size(v, f"result {r}")
                self.impl.copies.append(
                    f"if ((status = {self.device}_copy(out[{r}], {where[v]}, "
                    f"{n} * {ELEMENT_BYTES[dtype]}, stream)) != TILEC_OK) goto done;")
            else:
                n = self.size(v, f"result {r}")
                self.impl.copies.append(
                    f"tilec_copy(out[{r}], {where[v]}, {n} * {ELEMENT_BYTES[dtype]});")
