"""Streaming lazy values through the Unified Buffer: the traversals of an Ascend C kernel.

In: trees of lazy values (:mod:`.lazy`) and where they go.  Out: C++ in the row body of a
kernel: loops over a domain (the value's axes, merged where every view is contiguous across
them, after the core's rows when rows and row are flattened), and in the innermost loop a
chunk of up to ``CHUNK`` elements (several short rows, each padded to a 16-element pitch, when
the row is short): the copy-in of every leaf (a ``TQue<VECIN, 2>`` per leaf; a scalar read for
a leaf constant along the chunk; a gather for a strided one; a resident row kept in UB), the
tree's vector instructions (:mod:`.vector`), and the copy-out through ``TQue<VECOUT, 2>``
(a scatter for a strided destination).  Values that must be in memory to be read again go to
the core's global workspace, between ``PipeBarrier<PIPE_ALL>`` fences.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Iterator, Optional, Sequence

from ...dialect import ELEMENT_BYTES
from ...dims import Dim
from ..common.values import (ONE, ZERO, Concat, Lazy, Map, View, concat_parts, is_ramp, numel,
                             row_major)
from . import cxx
from .cxx import Code
from .lazy import Base, Gm, describe, grid_var, is_grid, leaves, view_key
from .plan import Plan
from .vector import (C_TYPE, Evaluator, Reg, Scalar, SlotPool, Vec, Vector, compute_kind,
                     storage_kind)



@dataclass(frozen=True)
class Axis:
    """A loop of a traversal: indices ``start`` to ``start + extent`` (C++ expressions), its
    extent as a dimension when it is one."""

    extent: str
    size: Optional[Dim]
    start: str = "0"
    end: str = ""

    @property
    def stop(self) -> str:
        if self.end:
            return self.end
        return self.extent if self.start == "0" else f"{self.start} + {self.extent}"


@dataclass
class Domain:
    """Axes and, for every view (by key), its stride along each axis."""

    axes: list[Axis]
    strides: dict[tuple, list[Dim]]

    @staticmethod
    def of(sizes: Sequence[Dim], views: Sequence[View],
           flat: Optional[tuple[Axis, dict[tuple, Dim]]] = None) -> "Domain":
        axes = [Axis(cxx.dim(d), d) for d in sizes]
        strides = {view_key(v): list(v.strides) for v in views}
        if flat is not None:
            axes.insert(0, flat[0])
            for key, s in strides.items():
                s.insert(0, flat[1][key])
        return Domain(axes, strides).merged()

    def merged(self) -> "Domain":
        """Size-1 axes dropped; an axis folded into the next where every view steps over it
        exactly as over the next axis' whole extent."""
        keep = [k for k, a in enumerate(self.axes) if a.size != ONE]
        axes = [self.axes[k] for k in keep]
        strides = {key: [s[k] for k in keep] for key, s in self.strides.items()}
        k = 0
        while k + 1 < len(axes):
            outer, inner = axes[k], axes[k + 1]
            if inner.size is not None and inner.start == "0" and all(
                    s[k] == s[k + 1] * inner.size for s in strides.values()):
                size = outer.size * inner.size if outer.size is not None else None
                extent = cxx.dim(size) if size is not None else \
                    f"({outer.extent}) * {inner.extent}"
                start = "0" if outer.start == "0" else f"{outer.start} * {inner.extent}"
                end = f"{outer.end} * {inner.extent}" if outer.end else ""
                axes[k:k + 2] = [Axis(extent, size, start, end)]
                for s in strides.values():
                    s[k:k + 2] = [s[k + 1]]
            else:
                k += 1
        return Domain(axes, strides)


@dataclass
class Chunk:
    """One chunk of a traversal: the index expression of each axis, and the chunk's rows,
    row length, UB row pitch and element count (C++ expressions)."""

    index: list[str]
    rows: str = "1"
    length: str = "1"
    pitch: str = "0"
    count: str = "1"
    row_axis: Optional[int] = None      # the pitched axis, if any
    inner: Optional[int] = None         # the chunked axis, if any


@dataclass(frozen=True)
class Resident:
    """A row of an input kept in UB while it fits and until another row is asked for:
    ``size`` elements of ``dtype`` in the single buffer of queue ``resQ{index}`` (tensor
    ``res{index}``, the global index of its first element ``resStart{index}``, kept when
    ``resident{index}``)."""

    index: int
    dtype: str
    size: Dim
    hint: str               # what it holds: the hinted name, or why it is kept
    hinted: bool            # first served of the UB kept for resident rows

    @property
    def bytes(self) -> Dim:
        return self.size * ELEMENT_BYTES[self.dtype]


class NotFlat(Exception):
    """Flattening rows with the row does not work for this kernel: go row by row."""


class Stream:
    """The row body of one kernel under construction and what its code uses (the buffer
    plan, temporaries, resident rows, the workspace); see the module docstring.  ``grid`` is
    the extent of each grid dimension; ``flat``: traversals run over the core's rows and the
    row at once; ``keep``: leaves several passes over a row read, kept resident (None: no
    row is, not even a cache-hinted one)."""

    def __init__(self, name: str, grid: Sequence[Dim], flat: bool,
                 keep: Optional[frozenset[tuple]]) -> None:
        self.grid = list(grid)
        self.flat = flat
        self.keep = keep
        self.plan = Plan(name)
        self.slots = SlotPool()
        self.masks = SlotPool()
        self.names = [0]
        self.counter = 0
        self.queues_used = 0
        self.body = Code()                 # one row (flat: every row of the core)
        self.gm_in: list[Gm] = []
        self.hinted: dict[Gm, str] = {}    # cache-hinted inputs the grid reuses: their names
        self.streamed: set[Gm] = set()     # hinted inputs too large to keep: never kept
        self.residents: dict[tuple, Resident] = {}
        self.passes: dict[tuple, int] = {}      # input leaf -> traversals reading it
        self.notes: list[str] = []         # said in the kernel's comment
        self.workspace = ZERO              # 4-byte elements of scratch per core
        self.scratch: dict[str, Gm] = {}

    # -- the row body --------------------------------------------------------------------------
    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    def scalar(self, expr: str, kind: str) -> str:
        """``expr`` held in a new constant of the row body."""
        name = self.fresh("s")
        self.body(f"const {C_TYPE[kind]} {name} = {expr};")
        return name

    def sync(self, event: str) -> None:
        self.body(f"SetFlag<HardEvent::{event}>(EVENT_ID0);")
        self.body(f"WaitFlag<HardEvent::{event}>(EVENT_ID0);")

    # -- the workspace -------------------------------------------------------------------------
    def fence(self) -> None:
        """Every pipe's work so far is done: orders the workspace's writers and readers."""
        self.body("PipeBarrier<PIPE_ALL>();")

    def scratch_gm(self, kind: str) -> Gm:
        """The core's workspace as a GlobalTensor of float (f32) or int32_t (i32)."""
        if kind not in self.scratch:
            self.scratch[kind] = Gm("wsF" if kind == "f32" else "wsI",
                                    "float32" if kind == "f32" else "int32")
        return self.scratch[kind]

    def new_scratch(self, sizes: Sequence[Dim], kind: str) -> View:
        """A row-major region of the core's workspace."""
        if self.flat:
            raise NotFlat
        gm = self.scratch_gm(kind)
        view = View(gm, gm.dtype, None, self.workspace, tuple(sizes), row_major(sizes),
                    gm.dtype)
        self.workspace = self.workspace + numel(sizes)
        return view

    def copy(self, x: Lazy) -> View:
        """``x`` written to a new scratch region."""
        view = self.new_scratch(x.sizes, compute_kind(x.dtype))
        self.fence()
        self.write(x, view)
        self.fence()
        return replace(view, dtype=x.dtype)

    # -- one chunk -----------------------------------------------------------------------------
    def address(self, view: View, index: Sequence[str],
                strides: Optional[Sequence[Dim]] = None) -> str:
        """The element index of ``view`` at loop indices ``index`` (one per stride)."""
        strides = view.strides if strides is None else strides
        base = "0"
        if isinstance(view.base, Base):
            # flattened, the grid's coordinates are one axis of the traversal
            terms = tuple(t for t in view.base.terms if not (self.flat and is_grid(t[0])))
            base = Base(terms).expr()
        offset = cxx.dim(view.offset) if view.offset != ZERO else "0"
        return cxx.index(base, offset, *(cxx.times(i, s) for i, s in zip(index, strides)))

    def read_scalar(self, code: Code, gm: Gm, address: str) -> str:
        """One element of ``gm`` into a scalar register (through UB: ``ReadScalar``)."""
        self.plan.scalars = True
        name = self.fresh("s")
        kind = compute_kind(gm.dtype)
        code(f"const {C_TYPE[kind]} {name} = tilec::ReadScalar({gm.member}[{address}], scalars);")
        return name

    def chunk_value(self, code: Code, tree: Lazy, domain: Domain, at: Chunk) -> Reg:
        """Copy in the leaves of ``tree`` for chunk ``at`` of ``domain`` and compute it."""
        return self.compute(code, tree, at, self.copy_in(code, tree, domain, at))

    def compute(self, code: Code, tree: Lazy, at: Chunk, loaded: dict[tuple, Reg],
                into: Optional[Vec] = None) -> Reg:
        """``tree`` on chunk ``at`` from its ``loaded`` leaves: in ``into`` when that is a
        map's kind, else wherever it ends."""
        vector = Vector(code, at.count, self.slots, self.masks, self.names)
        return Evaluator(vector, loaded, view_key).root(tree, into)

    def copy_in(self, code: Code, tree: Lazy, domain: Domain, at: Chunk) -> dict[tuple, Reg]:
        """The leaves of ``tree`` for chunk ``at`` of ``domain``: the copies in of every
        contiguous leaf issued first (each through its own VECIN queue, or a resident row),
        then their DeQue; scalars and gathered leaves as they come."""
        vector = Vector(code, at.count, self.slots, self.masks, self.names)
        loaded: dict[tuple, Reg] = {}
        queued: list[tuple[View, list[Dim], int, Optional[Resident]]] = []
        self.queues_used = 0
        for key, view in leaves(tree).items():
            strides = domain.strides[key]
            inner = strides[at.inner] if at.inner is not None else ZERO
            if is_ramp(view):
                loaded[key] = self.ramp(code, vector, view, strides, at, inner)
            elif inner == ZERO:
                index = ["0" if k == at.inner else x for k, x in enumerate(at.index)]
                loaded[key] = Scalar(self.read_scalar(code, view.buffer, self.address(
                    view, index, strides)), compute_kind(view.buffer.dtype))
            elif inner != ONE:
                loaded[key] = self.gather(code, vector, view, strides, at)
            else:
                queued.append((view, strides, self.queue(), self.resident(view, domain)))
        for view, strides, q, resident in queued:
            c_type = C_TYPE[view.buffer.dtype]
            row_stride = strides[at.row_axis] if at.row_axis is not None else ZERO
            address = self.address(view, at.index, strides)
            copy = [f"x{q} = inQ{q}.AllocTensor<{c_type}>();",
                    f"tilec::CopyIn(x{q}, {view.buffer.member}[{address}], {at.rows}, "
                    f"{at.length}, {cxx.dim(row_stride)}, {at.pitch});",
                    f"inQ{q}.EnQue(x{q});"]
            if resident is None:
                code(f"LocalTensor<{c_type}> " + copy[0])
                code(copy[1])
                code(copy[2])
                continue
            code(f"LocalTensor<{c_type}> x{q};")
            with code.block(f"if (resident{resident.index})", "} else {"):
                start = self.address(view, ["0"] * len(at.index), strides)
                code(f"tilec::Keep(resQ{resident.index}, res{resident.index}, "
                     f"resStart{resident.index}, {view.buffer.member}, {start}, "
                     f"{cxx.dim(resident.size)});")
                code(f"x{q} = res{resident.index}[{at.index[0]}];")
            code.depth += 1
            for line in copy:
                code(line)
            code.depth -= 1
            code("}")
        for view, strides, q, resident in queued:
            c_type = C_TYPE[view.buffer.dtype]
            guard = f"if (!resident{resident.index}) " if resident is not None else ""
            code(f"{guard}x{q} = inQ{q}.DeQue<{c_type}>();")
            loaded[view_key(view)] = Vec(f"x{q}", storage_kind(view.buffer.dtype),
                                         queue=f"inQ{q}",
                                         guard=f"resident{resident.index}" if resident else None)
        return loaded

    def ramp(self, code: Code, vector: Vector, view: View, strides: list[Dim], at: Chunk,
             inner: Dim) -> Reg:
        """An iota's leaf (:func:`~..common.values.ramp`: its address is its value) for chunk
        ``at``: a scalar when it is constant along the chunk, else written by the scalar unit
        (``tilec::Ramp``)."""
        first = self.address(view, at.index, strides)
        if inner == ZERO:
            return Scalar(f"int32_t({first})", "i32")
        out = vector.temp("i32")
        row_step = strides[at.row_axis] if at.row_axis is not None else ZERO
        code(f"tilec::Ramp({out.name}, {first}, {at.rows}, {at.length}, {cxx.dim(row_step)}, "
             f"{cxx.dim(inner)}, {at.pitch});")
        return out

    def resident(self, view: View, domain: Domain) -> Optional[Resident]:
        """The resident copy of a leaf of an input (a contiguous row, the whole traversal):
        of a cache-hinted input that the grid reuses, or one that several passes over the row
        read; None for any other leaf."""
        if self.keep is None or view.buffer not in self.gm_in or len(domain.axes) != 1 or \
                domain.axes[0].size is None or self.flat:
            return None
        key = view_key(view)
        self.passes[key] = self.passes.get(key, 0) + 1
        invariant = bool(self.grid) and (not isinstance(view.base, Base)
                                         or not view.base.terms)
        if view.buffer in self.streamed or (view.buffer not in self.hinted
                                            and key not in self.keep and not invariant):
            return None
        if key not in self.residents:
            if view.buffer in self.hinted:
                what = self.hinted[view.buffer]
            else:
                what = f"{view.buffer.member}, " + ("the same for every row" if invariant
                                                   else "read by several passes over a row")
                self.notes.append(f"a row of {what}: kept in UB while it fits")
            self.residents[key] = Resident(len(self.residents), view.buffer.dtype,
                                           domain.axes[0].size, what,
                                           view.buffer in self.hinted)
        return self.residents[key]

    def queue(self) -> int:
        """A VECIN queue for one more leaf of the current chunk."""
        q = self.queues_used
        self.queues_used += 1
        self.plan.in_queues = max(self.plan.in_queues, self.queues_used)
        return q

    def gather(self, code: Code, vector: Vector, view: View, strides: list[Dim],
               at: Chunk) -> Vec:
        """A leaf whose inner stride is not 1: staged one element per 32-byte block, then
        moved into place by the scalar unit (``Gather``)."""
        self.plan.gathers = True
        raw = vector.temp(storage_kind(view.buffer.dtype))
        address = self.address(view, at.index, strides)
        code(f"tilec::Gather({raw.name}, {view.buffer.member}[{address}], {at.length}, "
             f"{cxx.dim(strides[at.inner])}, stageBuf.Get<{C_TYPE[view.buffer.dtype]}>());")
        return raw

    # -- traversals ----------------------------------------------------------------------------
    def domain(self, sizes: Sequence[Dim], views: Sequence[View]) -> Domain:
        """The domain of a traversal over ``sizes`` reading ``views`` (flattened: the core's
        rows first)."""
        flat = None
        if self.flat:
            flat = (Axis("rowEnd - rowBegin", None, "rowBegin", "rowEnd"),
                    {view_key(v): self.flat_stride(v) for v in views})
        return Domain.of(sizes, views, flat)

    def flat_stride(self, view: View) -> Dim:
        """How far ``view`` moves from one row to the next, when its offset is linear in the
        flattened row number; else :class:`NotFlat`."""
        if not isinstance(view.base, Base) or not view.base.terms:
            return ZERO
        steps = {var: (stride, extent) for var, stride, extent in view.base.terms}
        if any(extent is not None for _, extent in steps.values()):
            raise NotFlat
        step = steps.get(grid_var(len(self.grid) - 1), (ZERO, None))[0]
        scale = ONE
        for j in reversed(range(len(self.grid))):
            if steps.get(grid_var(j), (ZERO, None))[0] != step * scale:
                raise NotFlat
            scale = scale * self.grid[j]
        return step

    @contextmanager
    def loops(self, code: Code, domain: Domain, axes: Sequence[int], index: list[str]
              ) -> Iterator[None]:
        """Scalar loops over ``axes`` of ``domain``; their variables go into ``index``."""
        bounds = []
        for a in axes:
            index[a] = self.fresh("i")
            bounds.append((index[a], domain.axes[a].start, domain.axes[a].stop))
        with code.loops(bounds):
            yield

    @contextmanager
    def scalar_loops(self, code: Code, sizes: Sequence[Dim], index: list[str]
                     ) -> Iterator[None]:
        """Loops over ``sizes`` with the variables named in ``index``."""
        with code.loops([(var, 0, cxx.dim(size)) for var, size in zip(index, sizes)]):
            yield

    @contextmanager
    def chunks(self, code: Code, domain: Domain, index: list[str], pitched: bool = False,
               limit: str = "CHUNK") -> Iterator[Chunk]:
        """The chunk loop over the last axis of ``domain`` (and, ``pitched``, several rows
        of the axis before it per chunk); the other axes' loop variables must already be in
        ``index``.  Every chunk's temporaries are free again after it."""
        if not domain.axes:
            with self.slots.scope(), self.masks.scope():
                yield Chunk(index)
            return
        inner = len(domain.axes) - 1
        axis = domain.axes[inner]
        k = self.fresh("")       # one number for the names of this chunk loop
        n, c, length, count = f"n{k}", f"c{k}", f"len{k}", f"cnt{k}"
        code(f"const int64_t {n} = {axis.extent};")
        opened = 0
        if pitched:
            row_axis = inner - 1
            rows_axis = domain.axes[row_axis]
            pitch, tile, step, r, rows = (f"{stem}{k}" for stem in ("pitch", "tileRows",
                                                                    "step", "r", "rows"))
            end = rows_axis.stop
            code(f"const uint32_t {pitch} = tilec::Pitch({n}), "
                 f"{tile} = tilec::TileRows({n}, CHUNK);")
            code(f"const int64_t {step} = {tile} > 1 ? {n} : {limit};")
            code(f"for (int64_t {r} = {rows_axis.start}; {r} < {end}; {r} += {tile}) {{")
            code.depth += 1
            opened += 1
            code(f"const uint32_t {rows} = tilec::Min<int64_t>({tile}, {end} - {r});")
            index[row_axis] = r
        else:
            step = limit
        code(f"for (int64_t {c} = 0; {c} < {n}; {c} += {step}) {{")
        code.depth += 1
        opened += 1
        index[inner] = c if axis.start == "0" else f"{axis.start} + {c}"
        code(f"const uint32_t {length} = tilec::Min<int64_t>({step}, {n} - {c});")
        if pitched:
            code(f"const uint32_t {count} = ({rows} - 1) * {pitch} + {length};")
            at = Chunk(index, rows, length, pitch, count, row_axis, inner)
        else:
            code(f"const uint32_t {count} = {length};")
            at = Chunk(index, "1", length, "0", count, None, inner)
        with self.slots.scope(), self.masks.scope():
            yield at
        for _ in range(opened):
            code.depth -= 1
            code("}")

    @staticmethod
    def pitchable(views: Sequence[View], domain: Domain) -> bool:
        """Whether rows of the last axis may share a chunk: two axes or more, and every view
        contiguous along the last one."""
        return len(domain.axes) >= 2 and all(domain.strides[view_key(v)][-1] == ONE
                                             for v in views)

    @staticmethod
    def limit(views: Sequence[View], domain: Domain) -> str:
        """The chunk length: CHUNK, or GATHER when a view is gathered or scattered."""
        strided = domain.axes and any(domain.strides[view_key(v)][-1] not in (ZERO, ONE)
                                      for v in views)
        return "GATHER" if strided else "CHUNK"

    def out_tensor(self, code: Code, dtype: str) -> Vec:
        """A tensor of the VECOUT queue for a chunk of a ``dtype`` buffer."""
        self.plan.out_queues = 1
        c_type = C_TYPE[dtype]
        name = self.fresh("y")
        code(f"LocalTensor<{c_type}> {name} = outQ0.AllocTensor<{c_type}>();")
        return Vec(name, storage_kind(dtype))

    def copy_out(self, code: Code, out: Vec, dest: View, at: Chunk, strides: Sequence[Dim]
                 ) -> None:
        """The computed ``out`` through the VECOUT queue to ``dest`` at chunk ``at`` (its
        elements scattered when ``dest`` is not contiguous along the chunk)."""
        c_type = C_TYPE[dest.buffer.dtype]
        row_stride = strides[at.row_axis] if at.row_axis is not None else ZERO
        inner = strides[at.inner] if at.inner is not None else ONE
        address = self.address(dest, at.index, strides)
        code(f"outQ0.EnQue({out.name});")
        code(f"{out.name} = outQ0.DeQue<{c_type}>();")
        if inner in (ZERO, ONE):
            code(f"tilec::CopyOut({dest.buffer.member}[{address}], {out.name}, {at.rows}, "
                 f"{at.length}, {cxx.dim(row_stride)}, {at.pitch});")
        else:
            self.plan.scatters = True
            code(f"tilec::Scatter({dest.buffer.member}[{address}], {out.name}, {at.length}, "
                 f"{cxx.dim(inner)}, scatterBuf.Get<{c_type}>());")
        code(f"outQ0.FreeTensor({out.name});")

    def write(self, x: Lazy, dest: View) -> None:
        """Compute ``x`` into ``dest`` (a concatenation part by part)."""
        if isinstance(x, Concat):
            for part, into in concat_parts(x, dest):
                self.write(part, into)
            return
        if isinstance(x, Map) and x.op == "cast" and x.dtype == dest.buffer.dtype and \
                x.dtype in ("float16", "bfloat16") and x.operands[0].dtype != "int32":
            x = x.operands[0]        # the store rounds to the same type: round once
        code = self.body
        views = list(leaves(x).values()) + [dest]
        domain = self.domain(dest.sizes, views)
        index = ["0"] * len(domain.axes)
        pitched = self.pitchable(views, domain)
        outer = range(len(domain.axes) - (2 if pitched else 1)) if domain.axes else range(0)
        code(f"// {dest.buffer.member} <- {describe(x)}")
        with self.loops(code, domain, outer, index), \
                self.chunks(code, domain, index, pitched, self.limit(views, domain)) as at:
            loaded = self.copy_in(code, x, domain, at)
            out = self.out_tensor(code, dest.buffer.dtype)
            value = self.compute(code, x, at, loaded, into=out)
            self.place(Vector(code, at.count, self.slots, self.masks, self.names), value, out)
            self.copy_out(code, out, dest, at, domain.strides[view_key(dest)])

    def place(self, vector: Vector, value: Reg, out: Vec) -> None:
        """A chunk's value into the out tensor (of the storage type)."""
        if isinstance(value, Vec) and value.name == out.name:
            return
        if out.kind in ("float16", "bfloat16"):
            tensor = vector.tensor(value)
            vector.emit(f"Cast({out.name}, {tensor.name}, RoundMode::CAST_RINT, {vector.n})")
            vector.release(tensor)
            return
        vector.copy(value, out)
        vector.release(value)

    def on_chunk(self, code: Code, x: Lazy, at: Chunk) -> Reg:
        """1-D ``x`` computed at 1-D chunk ``at`` of an enclosing traversal."""
        domain = Domain.of(x.sizes, list(leaves(x).values()))
        chunk = Chunk(at.index[:len(domain.axes)], "1", at.length, "0", at.count, None,
                      0 if domain.axes else None)
        return self.chunk_value(code, x, domain, chunk)

    def vector_scalar(self, tree: Map) -> str:
        """A map of scalars computed on the vector unit (one element) and read back."""
        code = self.body
        kind = compute_kind(tree.dtype)
        name = self.fresh("s")
        code(f"{C_TYPE[kind]} {name};  // {describe(tree)} on the vector unit")
        with code.block(""), self.slots.scope(), self.masks.scope():
            value = self.chunk_value(code, tree, Domain([], {}), Chunk([]))
            vector = Vector(code, "1", self.slots, self.masks, self.names)
            tensor = vector.tensor(value)
            self.sync("V_S")
            code(f"{name} = {tensor.name}.GetValue(0);")
        return name
