"""The Ascend C kernel file: the preamble of helpers and one class and entry per kernel,
rendered from ``templates/kernels.asc.j2`` and ``templates/kernel.asc.j2``.

In: what :mod:`.kernel` decided for each kernel (as template context).  Out: C++ text, the
same for bisheng (``--target ascend``) and for the host compiler with the CPU twin
(``--target ascend-sim``).
"""
from __future__ import annotations

from typing import Any

import jinja2

from .cxx import dim, symbol_field
from .vector import C_TYPE

TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("tilec.codegen.ascendc", "templates"),
    undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
    keep_trailing_newline=True)
TEMPLATES.globals.update(field=symbol_field, ctype=lambda dtype: C_TYPE[dtype])


def render_kernel(context: dict[str, Any]) -> str:
    """One kernel's tiling struct, class and entry."""
    return TEMPLATES.get_template("kernel.asc.j2").render(context).rstrip() + "\n"


def render_file(kernels: list[str], *, version: str, source: str, name: str, target: str,
                arch: str) -> str:
    """The kernel file of a library: the preamble, then ``kernels``."""
    return TEMPLATES.get_template("kernels.asc.j2").render(
        kernels=kernels, version=version, source=source, name=name, target=target, arch=arch)


def render_launch(kernels: list[Any], *, twin: bool, kernels_file: str, cores: int,
                  version: str, source: str, name: str, target: str, arch: str) -> str:
    """The launcher file: device memory and ``tilec_ascend_launch_K`` for each kernel K (in
    ``kernels`` order), for the twin or for CANN."""
    return TEMPLATES.get_template("launch.asc.j2").render(
        kernels=[{"name": k.name, "entry": k.entry, "tiling": k.tiling, "symbols": k.symbols,
                  "rank_generic": k.rank_generic, "buffers": k.buffers,
                  "workspace": dim(k.workspace), "cube": k.cube, "cube_guard": k.cube_guard,
                  "cube_why": k.cube_why}
                 for k in kernels],
        twin=twin, kernels_file=kernels_file, cores=cores, version=version, source=source,
        name=name, target=target, arch=arch)
