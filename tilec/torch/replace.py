"""Swap a model's modules for tilec-backed ones, and say which.

In: an ``nn.Module`` and ``{ModuleClass: factory}`` where ``factory(old) -> new module``.
Out: the model, changed in place, and the list of what was replaced (printable).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from torch import nn


@dataclass(frozen=True)
class Replaced:
    name: str        # the module's qualified name in the model
    old: str         # its class
    new: str         # the class of what replaced it

    def __str__(self) -> str:
        return f"{self.name}: {self.old} -> {self.new}"


class Report(list):
    """The :class:`Replaced` entries, one line each, then a count per class."""

    def __str__(self) -> str:
        counts: dict[tuple[str, str], int] = {}
        for r in self:
            counts[(r.old, r.new)] = counts.get((r.old, r.new), 0) + 1
        summary = [f"{n} x {old} -> {new}" for (old, new), n in counts.items()]
        return "\n".join([str(r) for r in self] + (summary or ["nothing replaced"]))


def replace(model: nn.Module,
            factories: Mapping[type, Callable[[nn.Module], nn.Module]]) -> Report:
    """Replace every submodule of ``model`` whose class is a key of ``factories`` (exactly:
    a subclass is left alone) by ``factories[cls](module)``; returns what it replaced.  A
    replaced module's own submodules are not visited."""
    report = Report()
    replaced: list[str] = []
    for name, module in list(model.named_modules()):
        factory = factories.get(type(module))
        if factory is None or any(name.startswith(p + ".") for p in replaced):
            continue
        if not name:
            raise ValueError(f"replace: the model itself is a {type(module).__name__}; "
                             "replace it directly")
        new = factory(module)
        if not isinstance(new, nn.Module):
            raise TypeError(f"replace: the factory for {type(module).__name__} returned "
                            f"{type(new).__name__}, not an nn.Module")
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, child, new)
        replaced.append(name)
        report.append(Replaced(name, type(module).__name__, type(new).__name__))
    return report
