"""Shared fixtures: paths of the repository, the shared examples and the operator library."""
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED_EXAMPLES = REPO.parent / "shared" / "examples"
OPS = REPO / "ops"
EXAMPLE_NAMES = ("swiglu", "layernorm", "rmsnorm_templated", "rope")


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_examples() -> Path:
    assert SHARED_EXAMPLES.is_dir(), f"missing {SHARED_EXAMPLES}"
    return SHARED_EXAMPLES
