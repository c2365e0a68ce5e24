"""The CMake package: examples/cmake (a C program against two cpu kernels) configures, builds
and runs from a clean directory; touching one .tile file reruns tilec for that kernel only and
relinks the program; changing one kernel's OPTIONS rebuilds that kernel only; the repository's
CMakeLists.txt builds the operator library; TARGET ascend without CANN fails at configure
time.  (Building through CANN itself needs a CANN machine and is not tested here.)"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLE_NAMES, REPO

import tilec

CMAKE = shutil.which("cmake")
pytestmark = pytest.mark.skipif(CMAKE is None, reason="cmake is not installed")
TILEC = Path(sys.executable).parent / "tilec"
PACKAGE = Path(tilec.__file__).parent / "cmake"


def cmake(*args: str | Path, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{TILEC.parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("ASCEND_HOME_PATH", None)
    done = subprocess.run([CMAKE, *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True)
    assert not check or done.returncode == 0, done.stdout + done.stderr
    return done


def build(directory: Path) -> str:
    return cmake("--build", ".", "--", "VERBOSE=1", cwd=directory).stdout


def ran_tilec(log: str) -> list[str]:
    """The kernels whose tilec command ran (their COMMENT lines)."""
    return re.findall(r"^\[\s*\d+%\] tilec (\w+):", log, re.M)


def relinked(log: str) -> bool:
    return "Linking C executable demo" in log


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """examples/cmake copied (so that the test may change it), configured and built."""
    source = tmp_path / "src"
    shutil.copytree(REPO / "examples" / "cmake", source)
    (tmp_path / "build").mkdir()
    cmake("-S", source, "-B", tmp_path / "build", "-G", "Unix Makefiles",
          f"-Dtilec_DIR={PACKAGE}", cwd=tmp_path)
    log = build(tmp_path / "build")
    assert sorted(ran_tilec(log)) == ["rms_scale", "scale_add"] and relinked(log)
    return tmp_path


def run_demo(example: Path) -> None:
    done = subprocess.run([example / "build" / "demo"], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr


def test_the_example_builds_and_runs_from_a_clean_directory(example: Path) -> None:
    run_demo(example)
    for name in ("scale_add", "rms_scale"):
        kernel = example / "build" / "tilec" / name
        assert (kernel / f"{name}.so").exists() and (kernel / f"{name}.h").exists()
    log = build(example / "build")
    assert ran_tilec(log) == [] and not relinked(log)


def test_touching_a_tile_file_rebuilds_that_kernel_only(example: Path) -> None:
    (example / "src" / "rms_scale.tile").touch()
    log = build(example / "build")
    assert ran_tilec(log) == ["rms_scale"]
    assert relinked(log)
    run_demo(example)


def test_changing_a_kernels_options_rebuilds_that_kernel_only(example: Path) -> None:
    lists = example / "src" / "CMakeLists.txt"
    text = lists.read_text()
    lists.write_text(text.replace("SOURCES scale_add.tile TARGET cpu)",
                                  "SOURCES scale_add.tile TARGET cpu OPTIONS -O1)"))
    log = build(example / "build")
    assert ran_tilec(log) == ["scale_add"]
    assert relinked(log)
    run_demo(example)


def test_the_repository_builds_the_operator_library(tmp_path: Path) -> None:
    cmake("-S", REPO, "-B", tmp_path, "-G", "Unix Makefiles", cwd=tmp_path)
    assert sorted(ran_tilec(cmake("--build", ".", "-j2", cwd=tmp_path).stdout)) == \
        sorted(f"op_{name}" for name in EXAMPLE_NAMES)
    for name in EXAMPLE_NAMES:
        header = tmp_path / "tilec" / f"op_{name}" / f"op_{name}.h"
        assert header.exists() and header.with_suffix(".so").exists()


def test_target_ascend_without_cann_fails_at_configure_time(tmp_path: Path) -> None:
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(p LANGUAGES C)\n"
        "find_package(tilec CONFIG REQUIRED)\n"
        f"tilec_add_kernel(k SOURCES {REPO / 'ops' / 'swiglu.tile'} TARGET ascend)\n")
    done = cmake("-S", tmp_path, "-B", tmp_path / "build", f"-Dtilec_DIR={PACKAGE}",
                 cwd=tmp_path, check=False)
    assert done.returncode != 0
    assert "TARGET ascend builds with CANN, and ASCEND_HOME_PATH" in done.stderr


def test_the_package_is_where_tilec_says_and_has_tilecs_version() -> None:
    done = subprocess.run([TILEC, "--cmake-dir"], capture_output=True, text=True)
    assert done.returncode == 0 and Path(done.stdout.strip()) == PACKAGE
    assert (PACKAGE / "tilecConfig.cmake").exists()
    version = (PACKAGE / "tilecConfigVersion.cmake").read_text()
    assert f'set(PACKAGE_VERSION "{tilec.__version__}")' in version
