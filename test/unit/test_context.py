"""The MLIR context of a compile (tilec.dialect.make_context, tilec.mlir): the upstream
dialects tilec builds ops of are loaded and no others, the tile dialect (loaded from IRDL text
after the first context) has every op and trait in every context, and views of tile ops make
the bindings import nothing."""
from __future__ import annotations

import sys
from collections import Counter

import pytest

from tilec.dialect import make_context
from tilec.dialect.ops import Tile
from tilec.mlir import BUILDER_DIALECTS, Dialect, ir, load_dialect, passmanager

TWO_EXPS = """func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "tile.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "tile.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "tile.add"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}"""


def test_a_context_loads_the_dialects_tilec_builds_ops_of_and_no_others() -> None:
    assert {"arith", "builtin", "func", "gpu", "llvm", "math", "memref", "scf"} == \
        set(BUILDER_DIALECTS)
    with make_context() as ctx:
        assert all(ctx.is_dialect_loaded(name) for name in (*BUILDER_DIALECTS, "tile"))
        assert not any(ctx.is_dialect_loaded(name) for name in ("tensor", "vector", "nvvm"))
        ir.Module.parse("%0 = tensor.empty() : tensor<2xf32>")
        assert ctx.is_dialect_loaded("tensor")      # IR text loads what it names


@pytest.mark.parametrize("context", range(3))
def test_every_context_has_every_tile_op_and_its_traits(context: int) -> None:
    with make_context() as ctx:
        assert all(ctx.is_registered_operation(op.OPERATION_NAME) for op in Tile.operations)
        module = ir.Module.parse(TWO_EXPS)
        passmanager.PassManager.parse("builtin.module(cse)").run(module.operation)
        ops = [op.operation.name for op in module.body.operations[0].regions[0].blocks[0]]
        assert ops == ["tile.exp", "tile.add", "func.return"]     # tile.exp is Pure


class _Spy:
    """A meta path finder that counts the imports tried and finds nothing."""

    def __init__(self) -> None:
        self.tried: Counter[str] = Counter()

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        self.tried[name] += 1


def test_views_of_tile_ops_import_nothing(monkeypatch) -> None:
    spy = _Spy()
    monkeypatch.setattr(sys, "meta_path", [spy, *sys.meta_path])
    with make_context():
        module = ir.Module.parse(TWO_EXPS)
        names = [type(op).__name__
                 for op in module.body.operations[0].regions[0].blocks[0].operations]
    assert names == ["ExpOp", "ExpOp", "AddOp", "ReturnOp"]
    assert spy.tried == Counter()


class _Typed(Dialect, name="tilec_test_typed"):
    """A dialect with a type of its own."""


class _Thing(_Typed.Type, name="thing"):
    """Its type."""


def test_a_dialect_with_types_is_refused() -> None:
    with make_context(), pytest.raises(ValueError, match="'tilec_test_typed' defines types"):
        load_dialect(_Typed)
