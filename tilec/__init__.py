"""tilec: an ahead-of-time compiler for AI operators written in the .tile language.

``tilec.load(path)`` loads a built library (NumPy only: no compiler, no MLIR);
``tilec.compile(path, target="cpu", **options)`` and ``tilec.compile_string(text, ...)``
build one in-process and load it.  They are imported on first use, so ``import tilec`` stays
light.  ``tilec.torch`` (``pip install tilec[torch]``) registers a library's functions as
PyTorch operators; it is imported on first use too, and only it imports PyTorch.
"""
__version__ = "0.1.0"

_LAZY = {"load": "tilec.runtime.loader", "compile": "tilec.api", "compile_string": "tilec.api"}
_SUBMODULES = ("torch",)     # not in __all__: `from tilec import *` must not import PyTorch
__all__ = ["compile", "compile_string", "load"]


def __getattr__(name: str) -> object:
    import importlib
    if name in _SUBMODULES:
        return importlib.import_module(f"tilec.{name}")
    if name not in _LAZY:
        raise AttributeError(f"module 'tilec' has no attribute '{name}'")
    return getattr(importlib.import_module(_LAZY[name]), name)


def __dir__() -> list[str]:
    return sorted(__all__ + ["__version__", *_SUBMODULES])
