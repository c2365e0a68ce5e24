"""Repository invariants: the README's test command is what CI runs; ops/ holds the shared
examples verbatim; the language reference and the package's files."""
import re
import subprocess

import pytest

from conftest import EXAMPLE_NAMES, OPS, REPO, SHARED_EXAMPLES


def _readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    return [ln for ln in block.splitlines() if ln and not ln.startswith("#")]


def test_readme_first_screen_has_two_commands():
    assert len(_readme_commands()) == 2


def test_ci_runs_the_readme_test_command():
    test_cmd = _readme_commands()[1]
    install_and_test = test_cmd.split("&& ", 1)[1]   # after creating the venv
    ci = (REPO / ".ci" / "run").read_text()
    assert install_and_test in ci
    # a failure of any step of it fails CI (set -e ignores all but the last of an && list)
    line = next(ln for ln in ci.splitlines() if install_and_test in ln)
    assert line.endswith("|| exit 1"), line


def test_ops_are_the_shared_examples_verbatim():
    for name in EXAMPLE_NAMES:
        assert (OPS / f"{name}.tile").read_bytes() == \
            (SHARED_EXAMPLES / f"{name}.tile").read_bytes(), name


def test_the_language_reference_is_the_definition_the_project_was_given():
    """docs/language.md (what a clone has) is ../shared/docs/language.md, kept in step."""
    assert (REPO / "docs" / "language.md").read_bytes() == \
        (SHARED_EXAMPLES.parent / "docs" / "language.md").read_bytes()


def test_every_file_of_the_package_is_installed():
    """A non-editable install holds every tracked file under tilec/: Python through the
    package list, the rest through package-data's globs (a missing one broke --target ptx
    and ascend-sim in an installed tilec: no Jinja templates)."""
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11")
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["tilec"]
    tracked = subprocess.run(["git", "ls-files", "tilec"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout.split()
    package = REPO / "tilec"
    missed = [path for path in tracked if not path.endswith(".py")
              and not any((REPO / path).relative_to(package).match(g) for g in globs)]
    assert missed == []


def test_the_public_namespace_is_what_the_readme_documents():
    import tilec

    assert dir(tilec) == ["__version__", "compile", "compile_string", "load", "torch"]
    assert [callable(getattr(tilec, name)) for name in tilec.__all__] == [True] * 3
    assert "torch" not in tilec.__all__      # `from tilec import *` does not import PyTorch
    assert "tilec.torch.register(" in (REPO / "README.md").read_text()
