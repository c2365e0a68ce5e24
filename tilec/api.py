"""The compiler's Python API: ``.tile`` source -> a loaded library, in-process.

In: a path or source text, a target and :class:`~tilec.driver.CompileOptions` fields as
keywords (``defines={"seq": 2048}``, ``templates=...``, ``no_generic=True``, ``opt_level=``,
``arch=``).  Out: the :class:`~tilec.runtime.loader.Library` that ``tilec.load`` returns.
Libraries come from the compile cache (:func:`tilec.driver.build`; see
:func:`tilec.driver.cache_key` for what it is keyed by) and are loaded from it;
``cache=False`` builds into a temporary directory that is removed once the library is loaded.
"""
from __future__ import annotations

import dataclasses
import re
import tempfile
from pathlib import Path
from typing import Any

from .diagnostics import DiagnosticSink, default_sink
from .driver import CompileOptions, build, read_source, write_outputs
from .runtime.loader import Library, load

OPTIONS = tuple(f.name for f in dataclasses.fields(CompileOptions) if f.name != "emit")


def _options(target: str, options: dict[str, Any]) -> CompileOptions:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"unknown compile option '{unknown[0]}'; options: {', '.join(OPTIONS)}")
    return CompileOptions(emit="so", **{**options, "target": target})


def compile_string(text: str, name: str = "<string>", target: str = "cpu", *,
                   cache: bool = True, sink: DiagnosticSink | None = None,
                   **options: Any) -> Library:
    """Compile ``.tile`` source ``text`` (``name`` is the file its diagnostics show) and load
    the library; TilecError for a mistake in the program."""
    opts = _options(target, options)
    stem = re.sub(r"\W+", "_", Path(name).stem).strip("_") or "tilec"
    built = build(text, name, opts, sink or default_sink(), stem, use_cache=cache)
    if built.output is not None:
        return load(built.output)
    with tempfile.TemporaryDirectory(prefix="tilec-") as tmp:
        path = Path(tmp) / f"{stem}.so"
        write_outputs(str(path), built.files)
        return load(path)   # the loaded library outlives its file


def compile(path: str, target: str = "cpu", **options: Any) -> Library:  # noqa: A001
    """Compile the ``.tile`` file at ``path`` and load the library (see
    :func:`compile_string` for ``cache``, ``sink`` and the options)."""
    return compile_string(read_source(path), str(path), target, **options)
