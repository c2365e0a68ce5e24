"""The Unified Buffer plan of one Ascend C kernel: which buffers it allocates and how many
elements one chunk (tile) holds.

In: what the kernel's code uses (queues, temporary slots, mask slots, reduction and gather
scratch, resident copies of cache-hinted tensors).  Out: the chunk size, the largest multiple
of 256 elements with which everything fits the target's UB budget (184 KiB of dav-2201's
192 KiB: the rest is the framework's scratch), or a located error naming every buffer and its
bytes when even 256-element chunks do not fit.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...diagnostics import Span, TilecError

GRANULE = 256          # chunk sizes are multiples: a mask slot (1 bit per element) stays 32-byte
GATHER = 256           # elements one strided (gathered) copy stages, one 32-byte block each
SCALAR_BYTES = 64      # ReadScalar's staging: the raw element and its float32
RESIDENT_SHARE = 2     # rows kept resident (while they fit) may take 1/2 of the budget


def reduce_work_floats(chunk: int) -> int:
    """Floats of ReduceMax's documented minimum work buffer for ``chunk`` float32 elements
    (ReduceSum needs less): one value and index per 256-byte repeat, rounded to a block."""
    repeats = -(-chunk // 64)
    return -(-2 * repeats // 8) * 8


@dataclass
class Plan:
    """The buffers of one kernel (filled while its code is generated)."""

    kernel: str
    in_queues: int = 0
    out_queues: int = 0
    slots: int = 0
    masks: int = 0
    reduces: bool = False
    gathers: bool = False
    scatters: bool = False
    scalars: bool = False
    residents: list[str] = field(default_factory=list)    # what each resident buffer holds
    chunk: int = 0

    def per_element(self) -> list[tuple[str, int]]:
        """(buffers, bytes per chunk element) of everything sized by the chunk."""
        rows = []
        if self.in_queues:
            rows.append((f"{self.in_queues} VECIN queue{'s' if self.in_queues > 1 else ''} "
                         "(inQ) of 2 buffers", 8 * self.in_queues))
        if self.out_queues:
            rows.append(("the VECOUT queue (outQ0) of 2 buffers", 8 * self.out_queues))
        if self.slots:
            rows.append((f"{self.slots} VECCALC slot{'s' if self.slots > 1 else ''} (calc)",
                         4 * self.slots))
        return rows

    def fixed(self, chunk: int) -> list[tuple[str, int]]:
        """(buffer, bytes) of the buffers whose size is not a multiple of the chunk."""
        rows = []
        if self.masks:
            rows.append((f"{self.masks} mask{'s' if self.masks > 1 else ''} (maskBuf)",
                         self.masks * (chunk // 8)))
        if self.reduces:
            rows.append(("reduce (dst and work)", 4 * (8 + reduce_work_floats(chunk))))
        if self.gathers:
            rows.append(("gather stage", GATHER * 32))
        if self.scatters:
            rows.append(("scatter stage", GATHER * 32))
        if self.scalars:
            rows.append(("scalar stage", SCALAR_BYTES))
        return rows

    def bytes_at(self, chunk: int) -> int:
        return sum(b for _, b in self.per_element()) * chunk \
            + sum(b for _, b in self.fixed(chunk))

    def streaming_budget(self, budget: int) -> int:
        """What the chunk-sized buffers may take: all of ``budget``, or the part that rows
        kept resident leave."""
        return budget - budget // RESIDENT_SHARE if self.residents else budget

    def resident_budget(self, budget: int) -> int:
        """What rows kept resident may take of ``budget``."""
        return budget // RESIDENT_SHARE if self.residents else 0

    def choose_chunk(self, budget: int, span: Span | None) -> int:
        """The largest chunk that fits (see the module docstring)."""
        room = self.streaming_budget(budget)
        per = sum(b for _, b in self.per_element())
        chunk = (room // max(per, 1)) // GRANULE * GRANULE
        while chunk >= GRANULE and self.bytes_at(chunk) > room:
            chunk -= GRANULE
        if chunk < GRANULE:
            listing = ", ".join(f"{name} {bytes_} B" for name, bytes_ in
                                [(n, b * GRANULE) for n, b in self.per_element()]
                                + self.fixed(GRANULE))
            raise TilecError(
                f"kernel '{self.kernel}' cannot fit the Unified Buffer: with the smallest "
                f"tile, {GRANULE} elements, its buffers need {self.bytes_at(GRANULE)} bytes, "
                f"more than the {room} bytes of ascend ({listing})", span)
        self.chunk = chunk
        return chunk
