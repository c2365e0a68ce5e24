"""The layer rules of pyproject.toml's ``[tool.importlinter]`` hold, and a wrong import breaks
them (lint-imports over a copy of the package with one import added)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

LINT_IMPORTS = str(Path(sys.executable).parent / "lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}   # the copy's tilec, not the installed one
    return subprocess.run([LINT_IMPORTS, "--no-cache"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_contracts_hold() -> None:
    done = lint_imports(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 kept, 0 broken" in done.stdout


@pytest.mark.parametrize("module, line, contract", [
    ("runtime/device.py", "import tilec.driver", "the runtime never imports the compiler or MLIR"),
    ("runtime/loader.py", "import torch_mlir", "the runtime never imports the compiler or MLIR"),
    ("codegen/ptx/kernel.py", "from ..cpu import mathlib", "backends never import each other"),
    ("codegen/cpu/objects.py", "from ...driver import build",
     "backends import only codegen/common and below"),
    ("dialect/ops.py", "from ..passes import tile_fuse",
     "the dialect never imports passes or codegen"),
    ("driver.py", "from .harness import verify", "the compiler never imports the harness"),
])
def test_a_wrong_import_breaks_a_contract(tmp_path: Path, module: str, line: str,
                                          contract: str) -> None:
    shutil.copytree(REPO / "tilec", tmp_path / "tilec",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    with open(tmp_path / "tilec" / module, "a") as f:
        f.write(f"\n{line}  # deliberately wrong\n")
    done = lint_imports(tmp_path)
    assert done.returncode == 1
    assert f"{contract} BROKEN" in done.stdout     # (others may break too, transitively)
