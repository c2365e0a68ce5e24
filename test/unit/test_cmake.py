"""The CMake package: examples/cmake (a C program against two cpu kernels) configures, builds
and runs from a clean directory; touching one .tile file reruns tilec for that kernel only and
relinks the program; changing one kernel's OPTIONS rebuilds that kernel only; the repository's
CMakeLists.txt builds the operator library; TARGET ascend without CANN fails at configure
time, and with a CANN toolkit builds through CANN's CMake support.

That last path runs here against a fake toolkit (fake_cann/README.md: CANN's layout, the ASC
language, a bisheng that compiles Ascend C for tilec's CPU twin): tilec -> the project
(``--emit=project``, also tested on its own) -> ExternalProject -> find_package(ASC) and
LANGUAGES ASC -> the library -> a C program that checks its results.  Only the real bisheng
and ACL runtime are not exercised."""
from __future__ import annotations

import errno
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLE_NAMES, REPO

import tilec
from tilec import driver
from tilec.cli import main
from tilec.codegen.ascendc import is_project
from tilec.diagnostics import TilecError
from tilec.runtime.ascend_twin import CXXFLAGS, INCLUDE_DIR, RUNTIME_SOURCES

CMAKE = shutil.which("cmake")
pytestmark = pytest.mark.skipif(CMAKE is None, reason="cmake is not installed")
TILEC = Path(sys.executable).parent / "tilec"
PACKAGE = Path(tilec.__file__).parent / "cmake"


def cmake(*args: str | Path, cwd: Path, check: bool = True,
          library_path: Path | None = None) -> subprocess.CompletedProcess:
    """cmake with tilec on PATH and no ASCEND_HOME_PATH; ``library_path`` is LD_LIBRARY_PATH
    (as CANN's set_env.sh sets it)."""
    env = {**os.environ, "PATH": f"{TILEC.parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("ASCEND_HOME_PATH", None)
    if library_path is not None:
        env["LD_LIBRARY_PATH"] = str(library_path)
    done = subprocess.run([CMAKE, *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True)
    assert not check or done.returncode == 0, done.stdout + done.stderr
    return done


def build(directory: Path) -> str:
    return cmake("--build", ".", "--", "VERBOSE=1", cwd=directory).stdout


def ran_tilec(log: str) -> list[str]:
    """The kernels whose tilec command ran (their COMMENT lines, as make or ninja shows them)."""
    return re.findall(r"^\[[^]]*\] tilec (\w+):", log, re.M)


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
    names = sorted(p.stem for p in (REPO / "ops").glob("*.tile"))
    assert set(EXAMPLE_NAMES) <= set(names)
    cmake("-S", REPO, "-B", tmp_path, "-G", "Unix Makefiles", cwd=tmp_path)
    assert sorted(ran_tilec(cmake("--build", ".", "-j2", cwd=tmp_path).stdout)) == \
        [f"op_{name}" for name in names]
    for name in names:
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


# ---------------------------------------------------------------------------------------------
# --emit=project: the CMake project TARGET ascend builds, written without CANN

SCALE = """func scale(x: Tensor<f32>[n, m], w: Tensor<f32>[m]) -> Tensor<f32>[n, m] {
  return x * w;
}
"""
PROJECT_FILES = ["CMakeLists.txt", "cpu_runtime.c", "cpu_runtime.h", "exports.map", "k.h",
                 "k.host.c", "k.kernels.asc", "k.launch.asc", "tilec_ascend.h"]


@pytest.fixture
def scale_tile(tmp_path: Path, monkeypatch) -> Path:
    """A small .tile file, with no CANN in the environment."""
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    path = tmp_path / "scale.tile"
    path.write_text(SCALE)
    return path


def emit_project(tile: Path, *more: str) -> int:
    return main([str(tile), "--target", "ascend", "--emit=project", *more])


def test_emit_project_writes_the_cann_project_without_cann(scale_tile: Path,
                                                           tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert emit_project(scale_tile, "-o", str(out / "k.ascend")) == 0
    assert [p.name for p in out.iterdir()] == ["k.ascend"]      # nothing left beside it
    project = out / "k.ascend"
    assert sorted(p.name for p in project.iterdir()) == PROJECT_FILES
    cmake_lists = (project / "CMakeLists.txt").read_text()
    assert cmake_lists.startswith("# Generated by tilec: builds k.so for dav-2201 with CANN's")
    assert "find_package(ASC REQUIRED)\nproject(k LANGUAGES ASC CXX)" in cmake_lists
    assert "$<$<COMPILE_LANGUAGE:ASC>:--npu-arch=dav-2201>" in cmake_lists
    assert "int scale(const void* x, const void* w, void* out_0, int64_t n, int64_t m, " \
           "void* stream);" in (project / "k.h").read_text()
    assert "tilec_scale__k0<<<" in (project / "k.launch.asc").read_text()    # not the twin's


def test_emit_project_without_o_writes_the_stem_dot_ascend(scale_tile: Path, tmp_path: Path,
                                                           monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert emit_project(scale_tile) == 0
    assert (tmp_path / "scale.ascend" / "scale.h").is_file()


def test_emit_project_replaces_a_project_tilec_wrote_and_is_cached(scale_tile: Path,
                                                                   tmp_path: Path,
                                                                   capsys) -> None:
    project = tmp_path / "k.ascend"
    project.mkdir()                                   # an empty directory may be taken
    assert emit_project(scale_tile, "-o", str(project)) == 0
    (project / "stale.txt").write_text("from an older compile")
    (project / "build").mkdir()
    capsys.readouterr()
    assert emit_project(scale_tile, "-o", str(project), "--verbose") == 0
    assert "tilec: compile cache hit" in capsys.readouterr().err
    assert sorted(p.name for p in project.iterdir()) == PROJECT_FILES
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("kind", ["directory", "file"])
def test_emit_project_leaves_what_tilec_did_not_write(scale_tile: Path, tmp_path: Path,
                                                      capsys, kind: str) -> None:
    output = tmp_path / "k.ascend"
    if kind == "directory":
        output.mkdir()
        mine = output / "CMakeLists.txt"
        expected = f"cannot write '{output}': the directory exists and tilec did not write it"
    else:
        mine = output
        expected = f"cannot write the directory '{output}': a file is in the way"
    mine.write_text("project(mine)\n")
    assert emit_project(scale_tile, "-o", str(output)) == 1
    assert expected in capsys.readouterr().err
    assert mine.read_text() == "project(mine)\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.ascend", "scale.tile"]


@pytest.mark.parametrize("target", ["ascend-sim", "cpu"])
def test_emit_project_is_for_target_ascend(scale_tile: Path, tmp_path: Path, capsys,
                                           target: str) -> None:
    assert main([str(scale_tile), "--target", target, "--emit=project",
                 "-o", str(tmp_path / "k.ascend")]) == 1
    error = capsys.readouterr().err
    assert f"error: --emit=project is not a stage of --target {target}, which emits " in error
    assert "; it is for --target ascend\n" in error
    assert not (tmp_path / "k.ascend").exists()


def test_a_failed_replacement_puts_the_previous_project_back(tmp_path: Path,
                                                             monkeypatch) -> None:
    target = tmp_path / "k.ascend"
    driver.write_directory(str(target), {"CMakeLists.txt": b"# Generated by tilec: old\n"},
                           is_project)
    rename, failed = os.rename, []

    def rename_failing_into_place(source: str | Path, destination: str | Path) -> None:
        """The first rename to ``target`` once the old one is aside fails."""
        if Path(destination) == target and not target.exists() and not failed:
            failed.append(source)
            raise OSError(errno.EIO, "injected failure")
        rename(source, destination)

    monkeypatch.setattr(driver.os, "rename", rename_failing_into_place)
    with pytest.raises(TilecError, match="injected failure"):
        driver.write_directory(str(target), {"CMakeLists.txt": b"# Generated by tilec: new\n"},
                               is_project)
    assert failed and (target / "CMakeLists.txt").read_bytes() == b"# Generated by tilec: old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["k.ascend"]


# ---------------------------------------------------------------------------------------------
# TARGET ascend through CANN's CMake support, on a fake CANN toolkit (about 6 s a generator)

FAKE_CANN = Path(__file__).resolve().parent / "fake_cann"


def compile_library(sources: list[Path], output: Path, *flags: str) -> None:
    subprocess.run(["c++", *CXXFLAGS, "-O2", "-fPIC", "-shared", *flags, *map(str, sources),
                    "-o", str(output)], check=True)


@pytest.fixture(scope="module")
def fake_cann(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake toolkit of fake_cann/README.md, assembled once: its ASCEND_HOME_PATH."""
    home = tmp_path_factory.mktemp("cann")
    platform_dir = home / f"{platform.machine()}-linux"
    lib64 = platform_dir / "lib64"
    (lib64 / "cmake").mkdir(parents=True)
    (platform_dir / "ccec_compiler" / "bin").mkdir(parents=True)
    (home / "lib64").symlink_to(lib64.relative_to(home))
    shutil.copy(FAKE_CANN / "ASCConfig.cmake", lib64 / "cmake")
    shutil.copytree(FAKE_CANN / "asc_modules",
                    home / "compiler" / "tikcpp" / "ascendc_kernel_cmake" / "asc_modules")
    shutil.copytree(FAKE_CANN / "include", home / "include")
    for header in INCLUDE_DIR.glob("*.h"):
        shutil.copy(header, home / "include")
    bisheng = platform_dir / "ccec_compiler" / "bin" / "bisheng"
    script = (FAKE_CANN / "bisheng").read_text()
    bisheng.write_text(f"#!{sys.executable}\n" + script.partition("\n")[2])
    bisheng.chmod(0o755)
    compile_library([FAKE_CANN / "ascendcl.cpp"], lib64 / "libascendcl.so",
                    f"-I{home / 'include'}")
    compile_library(list(RUNTIME_SOURCES), lib64 / "libruntime.so")
    return home


@pytest.mark.parametrize("generator", [
    pytest.param("Ninja", marks=pytest.mark.skipif(shutil.which("ninja") is None,
                                                   reason="ninja is not installed")),
    "Unix Makefiles"])
def test_target_ascend_builds_through_cann_cmake_on_a_fake_toolkit(tmp_path: Path,
                                                                   fake_cann: Path,
                                                                   generator: str) -> None:
    """The whole TARGET ascend path except the real bisheng: configure (with Ninja too, whose
    build needs every file's producer known) with the toolkit and an ASC compiler given as
    CMake variables (no ASCEND_HOME_PATH in the environment), build, run; a second build does
    nothing; touching the .tile file reruns tilec, rebuilds the library and relinks the
    program."""
    source, build_dir = tmp_path / "src", tmp_path / "build"
    shutil.copytree(FAKE_CANN / "consumer", source)
    (source / "ops").mkdir()
    shutil.copy(REPO / "ops" / "swiglu.tile", source / "ops")
    compiler = tmp_path / "tools" / "bisheng"       # not where the toolkit would find it
    compiler.parent.mkdir()
    compiler.symlink_to(fake_cann / f"{platform.machine()}-linux" / "ccec_compiler" / "bin" /
                        "bisheng")
    cmake("-S", source, "-B", build_dir, "-G", generator, f"-Dtilec_DIR={PACKAGE}",
          f"-DASCEND_HOME_PATH={fake_cann}", f"-DCMAKE_ASC_COMPILER={compiler}", cwd=tmp_path)

    def build_and_run() -> str:
        log = cmake("--build", build_dir, cwd=tmp_path, library_path=fake_cann / "lib64").stdout
        done = subprocess.run([build_dir / "demo"], capture_output=True, text=True,
                              env={**os.environ, "LD_LIBRARY_PATH": str(fake_cann / "lib64")})
        assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr
        return log

    log = build_and_run()
    assert ran_tilec(log) == ["k"] and "Linking ASC shared library" in log and relinked(log)
    kernel = build_dir / "tilec" / "k"
    assert is_project(kernel / "k.ascend")
    assert (kernel / "k.so").is_file() and (kernel / "k.h").is_file()
    cache = (kernel / "build" / "CMakeCache.txt").read_text()
    assert f"ASCEND_HOME_PATH:PATH={fake_cann}\n" in cache
    assert re.search(rf"^CMAKE_ASC_COMPILER:\w+={re.escape(str(compiler))}$", cache, re.M)

    log = build_and_run()
    assert ran_tilec(log) == [] and "Linking ASC" not in log and not relinked(log)

    (source / "ops" / "swiglu.tile").touch()
    log = build_and_run()
    assert ran_tilec(log) == ["k"] and "Linking ASC shared library" in log and relinked(log)


def test_target_ascend_on_the_command_line_builds_with_the_toolkit(tmp_path: Path,
                                                                  fake_cann: Path) -> None:
    """``tilec --target ascend -o k.so`` with bisheng under ASCEND_HOME_PATH builds the same
    project itself (CMake in a temporary directory); the library exports the entries only."""
    env = {**os.environ, "ASCEND_HOME_PATH": str(fake_cann)}
    done = subprocess.run([TILEC, REPO / "ops" / "swiglu.tile", "--target", "ascend",
                           "--no-cache", "-o", tmp_path / "k.so"],
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.h", "k.so"]
    exported = subprocess.run(["nm", "-D", "--defined-only", tmp_path / "k.so"],
                              capture_output=True, text=True, check=True).stdout
    assert re.search(r" T swiglu$", exported, re.M)
    assert "tilec_ascend_launch_0" not in exported


CUBE_LINEAR = """
func linear(x: Tensor<f16>[m, k], w: Tensor<f16>[n, k], b: Tensor<f16>[n]) -> Tensor<f16>[m, n] {
  return x @ transpose(w, perm=[1, 0]) + b;
}
func attend(q: Tensor<f16>[h, s, d], k: Tensor<f16>[h, t, d], v: Tensor<f16>[h, t, d])
    -> Tensor<f16>[h, s, d] {
  let scores = q @ transpose(k, [0, 2, 1]) * 0.125;
  return softmax(where(iota([s, t], axis=1) <= iota([s, t], axis=0), scores, -inf), axis=-1) @ v;
}
"""

RUN_LINEAR = """
import sys
import numpy as np
import tilec
lib = tilec.load(sys.argv[1])
rng = np.random.default_rng(0)
x, w, b = (rng.uniform(-1, 1, s).astype(np.float16) for s in ((70, 90), (300, 90), (300,)))
want = (x.astype(np.float64) @ w.astype(np.float64).T).astype(np.float16) + b
got = lib.linear(x, w, b)
np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=4e-3, atol=4e-3)
q, k, v = (rng.uniform(-1, 1, (2, 20, 64)).astype(np.float16) for _ in range(3))
s = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 2, 1) * 0.125
s = np.where(np.tril(np.ones((20, 20), bool)), s, -np.inf)
p = np.exp(s - s.max(-1, keepdims=True))
want = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
np.testing.assert_allclose(lib.attend(q, k, v).astype(np.float64), want, rtol=1e-2, atol=1e-2)
print("ok")
"""


def test_cube_kernels_build_with_the_toolkit_and_run(tmp_path: Path, fake_cann: Path) -> None:
    """Mixed AIC/AIV kernels (a half Linear layer on the Cube, a fused causal attention)
    through the CANN project on the fake toolkit: bisheng compiles them, and <<<>>> runs them
    on the twin, which starts each launch over as a mixed one at the kernel's
    KERNEL_TASK_TYPE_DEFAULT."""
    tile = tmp_path / "linear.tile"
    tile.write_text(CUBE_LINEAR)
    assert main([str(tile), "--target", "ascend", "--emit=ascendc", "-o",
                 str(tmp_path / "k.asc")]) == 0
    assert (tmp_path / "k.asc").read_text().count(
        "KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);") == 2
    env = {**os.environ, "ASCEND_HOME_PATH": str(fake_cann)}
    done = subprocess.run([TILEC, tile, "--target", "ascend", "--no-cache", "-o",
                           tmp_path / "k.so"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    run = subprocess.run([sys.executable, "-c", RUN_LINEAR, tmp_path / "k.so"],
                         env={**env, "LD_LIBRARY_PATH": str(fake_cann / "lib64")},
                         capture_output=True, text=True)
    assert (run.returncode, run.stdout) == (0, "ok\n"), run.stderr
