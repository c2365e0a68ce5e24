"""The backend registry: every ``--target`` and the backend class that builds it.

The command line takes its ``--target`` and ``--arch`` choices and help from here, and the
driver its backend; a new target is one backend package plus one :func:`register` line (a
test may register one of its own).  Importing this module loads no MLIR: the backend packages
import their stages when they run.
"""
from __future__ import annotations

from ..diagnostics import TilecError
from ..tiling import targets as descriptions
from .ascendc import AscendBackend
from .common.backend import KERNEL, Backend, Stage
from .cpu import CpuBackend
from .ptx import PtxBackend

SHARED_STAGES = ("ast", "ir", "opt", KERNEL)
"""The stages every target goes through before its backend's."""

BACKENDS: dict[str, type[Backend]] = {}
"""``--target`` name -> its backend, in the order they were registered."""


def register(backend: type[Backend]) -> None:
    """Make each of ``backend``'s targets a ``--target``, and its target description one
    that tile-kernel knows."""
    descriptions.register(backend.description)
    for target in backend.targets:
        BACKENDS[target] = backend


def unregister(backend: type[Backend]) -> None:
    """Undo :func:`register` (for a test's own backend)."""
    for target in backend.targets:
        del BACKENDS[target]


def targets() -> tuple[str, ...]:
    return tuple(BACKENDS)


def backend_of(target: str) -> type[Backend]:
    try:
        return BACKENDS[target]
    except KeyError:
        raise TilecError(f"unknown --target '{target}'; expected one of "
                         + ", ".join(BACKENDS)) from None


def all_stages() -> tuple[str, ...]:
    """Every ``--emit`` name: the shared stages, each backend's in the order first seen, and
    last the backends' last stages (their default)."""
    names = dict.fromkeys(SHARED_STAGES)
    for target, backend in BACKENDS.items():
        names.update(dict.fromkeys(backend.stage_table(target)))
    last = {b.stages[-1].name for b in BACKENDS.values()}
    return tuple(sorted(names, key=lambda name: name in last))


def stage_of(target: str, emit: str) -> Stage | None:
    """Stage ``emit`` of ``target``'s backend (None for a shared stage); a located error
    naming the target's stages when it has none of that name."""
    if emit in SHARED_STAGES:
        return None
    table = backend_of(target).stage_table(target)
    if emit in table:
        return table[emit]
    if emit not in all_stages():
        raise TilecError(f"unknown stage '{emit}'; expected one of " + ", ".join(all_stages()))
    others = [t for t, b in BACKENDS.items() if emit in b.stage_table(t)]
    raise TilecError(f"--emit={emit} is not a stage of --target {target}, which emits "
                     f"{', '.join([*SHARED_STAGES, *table])}; it is for --target "
                     + " or ".join(others))


def arch_help() -> str:
    """The ``--arch`` help: each backend's arches, its default marked."""
    return "; ".join(dict.fromkeys(b.arch_help for b in BACKENDS.values()))


for _backend in (CpuBackend, PtxBackend, AscendBackend):
    register(_backend)
