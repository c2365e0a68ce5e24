"""Shared fixtures: paths of the repository, the shared examples and the operator library;
every test compiles into a cache of its session's own, never the user's."""
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED_EXAMPLES = REPO.parent / "shared" / "examples"
OPS = REPO / "ops"
EXAMPLE_NAMES = ("swiglu", "layernorm", "rmsnorm_templated", "rope")
AVX512 = {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}   # x86-64-v4's


def has_avx512() -> bool:
    """Whether /proc/cpuinfo lists x86-64-v4's AVX-512 features for this machine's CPU: where
    a library of the default --arch runs its x86-64-v4 code."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return AVX512 <= set(line.split(":", 1)[1].split())
    return False


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
