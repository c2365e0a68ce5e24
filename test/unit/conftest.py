"""Shared fixtures: paths of the repository, the shared examples and the operator library;
every test compiles into a cache of its session's own, never the user's."""
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED_EXAMPLES = REPO.parent / "shared" / "examples"
OPS = REPO / "ops"
EXAMPLE_NAMES = ("swiglu", "layernorm", "rmsnorm_templated", "rope")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--ascend-sweep", action="store_true",
                     help="run the ascend-sim corpus test over every size combination")


@pytest.fixture(scope="session", autouse=True)
def private_compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """TILEC_CACHE_DIR for the whole session (and the processes it starts)."""
    path = tmp_path_factory.getbasetemp() / "tilec-cache"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TILEC_CACHE_DIR", str(path))
        yield path


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_examples() -> Path:
    assert SHARED_EXAMPLES.is_dir(), f"missing {SHARED_EXAMPLES}"
    return SHARED_EXAMPLES
