"""The backend registry: a target is a backend class plus one registry line, and nothing
outside the backends and the registry knows a target by name."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO

import tilec
from tilec.cli import main
from tilec.codegen import registry
from tilec.codegen.cpu import CpuBackend
from tilec.codegen.cpu.objects import code_variants

SCALE = """
func scale(x: Tensor<float32>[n]) -> Tensor<float32>[n] {
  return x * 3.0 + 1.0;
}
"""


class ToyBackend(CpuBackend):
    """A target of this test's own: the cpu stages for one x86-64 level only."""

    name = "toy"
    targets = ("toy",)
    arches = ("x86-64-v3",)
    default_arch = "x86-64-v3"
    arch_help = "toy: x86-64-v3 (default)"

    class Options(CpuBackend.Options):
        arches = ("x86-64-v3",)


@pytest.fixture
def toy():
    registry.register(ToyBackend)
    yield ToyBackend
    registry.unregister(ToyBackend)


def test_a_registered_target_builds_a_library_that_runs(toy) -> None:
    lib = tilec.compile_string(SCALE, "scale.tile", target="toy", cache=False)
    x = np.arange(1000, dtype=np.float32)
    np.testing.assert_allclose(lib.scale(x), x * 3 + 1)
    assert lib.metadata["arch"] == "x86-64-v3"
    assert len(code_variants("x86-64-v3")) == 1      # the default cpu build has two


def test_a_registered_target_is_a_command_line_choice(toy, tmp_path: Path, capsys) -> None:
    source = tmp_path / "scale.tile"
    source.write_text(SCALE)
    assert main([str(source), "--target", "toy", "--emit=llvm", "--no-cache"]) == 0
    llvm = capsys.readouterr().out
    assert "define" in llvm and "; ----" not in llvm      # one code variant, unlabelled
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = capsys.readouterr().out
    assert "toy" in help_text and "toy: x86-64-v3 (default)" in help_text
    assert main([str(source), "--target", "toy", "--arch", "x86-64-v4"]) == 1
    assert "unknown --arch 'x86-64-v4' for --target toy; expected one of x86-64-v3" \
        in capsys.readouterr().err


def test_an_unregistered_target_is_no_choice(tmp_path: Path, capsys) -> None:
    source = tmp_path / "scale.tile"
    source.write_text(SCALE)
    assert main([str(source), "--target", "toy"]) == 1
    assert "invalid choice: 'toy'" in capsys.readouterr().err


@pytest.mark.parametrize("target, emit, stages, owners", [
    ("cpu", "cubin", "ast, ir, opt, kernel, llvm, obj, so", "ptx"),
    ("ascend-sim", "project", "ast, ir, opt, kernel, ascendc, so", "ascend"),
    ("ptx", "ascendc", "ast, ir, opt, kernel, gpu, nvvm, llvm, ptx, cubin, so",
     "ascend or ascend-sim"),
])
def test_a_stage_of_another_target_names_the_targets_stages(tmp_path: Path, capsys, target: str,
                                                           emit: str, stages: str,
                                                           owners: str) -> None:
    source = tmp_path / "scale.tile"
    source.write_text(SCALE)
    assert main([str(source), "--target", target, f"--emit={emit}", "--no-cache"]) == 1
    assert f"error: --emit={emit} is not a stage of --target {target}, which emits {stages}; " \
           f"it is for --target {owners}" in capsys.readouterr().err


def test_arch_help_covers_every_backend() -> None:
    text = registry.arch_help()
    for backend in set(registry.BACKENDS.values()):
        assert backend.default_arch in text, backend.name


# (a PyTorch tensor's device.type "cpu" is a device, not a target)
TARGET_NAME = re.compile(
    r"""(?<!device\.type )(==|!=|\bin)\s*[(\[{]?\s*["'](cpu|ptx|ascend|ascend-sim)["']""")


def test_no_target_name_is_compared_outside_the_backends() -> None:
    allowed = [REPO / "tilec" / "codegen" / name for name in ("cpu", "ptx", "ascendc")]
    allowed.append(REPO / "tilec" / "codegen" / "registry.py")
    found = [f"{path.relative_to(REPO)}: {line.strip()}"
             for pattern in ("*.py", "*.j2") for path in sorted((REPO / "tilec").rglob(pattern))
             if not any(path == a or a in path.parents for a in allowed)
             for line in path.read_text().splitlines() if TARGET_NAME.search(line)]
    assert found == []


def test_the_target_name_pattern_finds_a_comparison() -> None:
    assert TARGET_NAME.search('    if options.target == "ascend-sim":')
    assert TARGET_NAME.search('host_memory = target in ("cpu", "ascend-sim")')
    assert TARGET_NAME.search('{% elif target == "ptx" %}')
    assert not TARGET_NAME.search('TargetDesc("cpu", cores=0)')
    assert not TARGET_NAME.search('if torch_tensor(value) and value.device.type == "cpu":')
