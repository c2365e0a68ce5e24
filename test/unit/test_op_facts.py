"""Op facts are stated once, in the dialect: every tensor-level op has a kind there, each
backend's tables cover the ops of the kinds it lowers element by element, and no file outside
the dialect restates an op list, an element size or a shared attribute name."""
from __future__ import annotations

import re

import pytest

from conftest import REPO
from tilec.codegen.ascendc import vector as ascend_vector
from tilec.codegen.cpu import kernel as cpu_kernel
from tilec.codegen.ptx import kernel as ptx_kernel
from tilec.dialect import ops as t
from tilec.dialect.types import ELEMENT_BYTES, MLIR_DTYPE
from tilec.harness import allowance, reference

# ops that are no tensor-level computation: structure, checks, hints and the kernel level
NOT_COMPUTING = {"fused", "yield", "check", "hint", "load_row", "store_row"}


def _op_names() -> set[str]:
    classes = [*t.UNARY.values(), *t.BINARY.values(),
               *(v for v in vars(t).values() if isinstance(v, type))]
    return {c.OPERATION_NAME[len("tile."):] for c in classes if hasattr(c, "OPERATION_NAME")}


def test_every_tensor_level_op_has_one_kind() -> None:
    assert set(t.OP_KINDS) == _op_names() - NOT_COMPUTING
    assert t.ELEMENTWISE_OPS == {*t.UNARY_OPS, *t.BINARY_OPS, "cmp", "select", "cast"}
    assert t.TRANSCENDENTAL_OPS <= t.ELEMENTWISE_OPS
    kinds = [t.ops_of_kind(k) for k in t.OpKind]
    assert sum(len(k) for k in kinds) == len(t.OP_KINDS) and set().union(*kinds) == set(t.OP_KINDS)


def test_every_element_type_has_a_size() -> None:
    assert set(ELEMENT_BYTES) == set(MLIR_DTYPE)


@pytest.mark.parametrize("table, covers", [
    (cpu_kernel._FLOAT_UNARY, set(t.UNARY_OPS) - {"neg"}),
    (ptx_kernel._UNARY, set(t.UNARY_OPS) - {"neg"}),
    ({**ascend_vector.UNARY_CALLS, **ascend_vector.UNARY_COMPOSED}, set(t.UNARY_OPS)),
    (reference.UNARY, set(t.UNARY_OPS)),
    (reference.BINARY, set(t.BINARY_OPS)),
    (allowance.UNARY, set(t.UNARY_OPS)),
    (allowance.BINARY, set(t.BINARY_OPS)),
], ids=["cpu", "ptx", "ascend", "reference-unary", "reference-binary", "allowance-unary",
        "allowance-binary"])
def test_each_table_has_a_row_per_op_of_the_dialect(table: dict, covers: set[str]) -> None:
    """A new unary built-in fails here until every backend, the reference and the rounding
    allowance (its condition number) have its row."""
    assert covers <= set(table), sorted(covers - set(table))


def test_the_ascend_unary_emitters_are_one_table() -> None:
    calls, composed = set(ascend_vector.UNARY_CALLS), set(ascend_vector.UNARY_COMPOSED)
    assert not calls & composed
    assert set(ascend_vector.MAP_APPLY) == set(ascend_vector.BINARY) | {"pow", "select", "cast"}


RESTATED = [
    (re.compile(r"^ELEMENT_BYTES\s*=", re.M), "ELEMENT_BYTES"),
    (re.compile(r"^[A-Z_]*_ATTR\s*=\s*\"tile\.(kernel|fused|buffers|reuse|cache_hints?)\"", re.M),
     "a shared attribute name"),
    (re.compile(r"\"exp\",\s*\"log\",\s*\"sqrt\""), "the element-wise op list"),
    (re.compile(r"\"sigmoid\",\s*\"tanh\",\s*\"silu\""), "the transcendental op list"),
    (re.compile(r"\[\"tile\.(kernel|fused|cache_hints)\"\]"), "an attribute name"),
]


def test_no_file_outside_the_dialect_restates_an_op_fact() -> None:
    found = []
    for path in sorted((REPO / "tilec").rglob("*.py")):
        if path.parent.name == "dialect":
            continue
        text = path.read_text()
        for pattern, what in RESTATED:
            if pattern.search(text):
                found.append(f"{path.relative_to(REPO)}: {what}")
    assert found == []
