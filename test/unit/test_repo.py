"""Repository invariants: the README's test command is what CI runs; ops/ holds the shared
examples verbatim."""
import re

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


def test_ops_are_the_shared_examples_verbatim():
    for name in EXAMPLE_NAMES:
        assert (OPS / f"{name}.tile").read_bytes() == \
            (SHARED_EXAMPLES / f"{name}.tile").read_bytes(), name
