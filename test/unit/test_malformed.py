"""The CLI on malformed programs: each ends with exit status 1 and a located
``FILE:LINE:COL: error:`` line (or compiles, for the valid edge cases in COMPILES), never with a
Python traceback or an internal error.

Inputs: the hand-made corpus in ``malformed/`` (truncated examples, huge numbers, unicode, NUL
and control bytes, empty-ish files, absurd shapes, recursion...), plus generated ones: the
shared examples cut at many points, random bytes and random token soup from fixed seeds, and
deep nesting.  Most run in-process through ``tilec.cli.main``; a few through a real process.
"""
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLE_NAMES, SHARED_EXAMPLES
from tilec.cli import main

CORPUS = Path(__file__).with_name("malformed")

# Files of the corpus that are valid programs (some print warnings): exit status 0.
COMPILES = frozenset({
    "empty.tile", "only-whitespace.tile", "only-comments.tile", "unknown-pragma-only.tile",
    "unknown-pragma-garbage.tile", "truncated-rope-in-pragma-name.tile", "unicode-comments.tile",
    "crlf-and-tabs.tile", "zero-params-scalar-result.tile", "rank-64.tile", "zero-size.tile",
    "huge-but-valid-shape.tile", "byte-order-mark.tile",
})

TOKENS = ("func", "let", "return", "Tensor", "<", ">", "[", "]", "(", ")", "{", "}", ",", ";",
          ":", "->", "=", "+", "-", "*", "/", "@", "...", "==", "x", "n", "float32", "exp",
          "reduce_sum", "axes", "1", "2.5", "true", "\n", "#pragma cache_hint(x, L1)\n")


def _line_count(path: Path) -> int:
    return path.read_bytes().decode("utf-8", errors="replace").count("\n") + 1


def _assert_fails_located(path: Path, status: int, stderr: str) -> None:
    """Exit status 1, and the first line is FILE:LINE:COL: error: inside the file, followed by
    the source line and a caret line."""
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    assert status == 1, stderr
    lines = stderr.split("\n")
    located = re.match(rf"{re.escape(str(path))}:(\d+):(\d+): error: ", lines[0])
    assert located, stderr
    line, col = int(located[1]), int(located[2])
    assert 1 <= line <= _line_count(path) and col >= 1, stderr
    assert lines[2].strip().startswith("^"), stderr


def _check(path: Path, capsys: pytest.CaptureFixture[str], compiles: bool = False) -> None:
    status = main([str(path), "--emit=ir"])
    out, err = capsys.readouterr()
    if compiles:
        assert status == 0 and out.startswith("module"), err
        assert "error" not in err, err
    else:
        _assert_fails_located(path, status, err)


def test_corpus_is_large_and_mostly_errors():
    files = {p.name for p in CORPUS.glob("*.tile")}
    assert len(files - COMPILES) >= 40
    assert COMPILES <= files


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*.tile")))
def test_corpus_file(name: str, capsys: pytest.CaptureFixture[str]):
    _check(CORPUS / name, capsys, compiles=name in COMPILES)


def _is_complete(prefix: str, text: str) -> bool:
    """A prefix of an example is a valid program when it is the whole program, or comments
    and at most a pragma cut inside its name (an unknown pragma is only a warning)."""
    if prefix.rstrip() == text.rstrip():
        return True
    rest = re.sub(r"//[^\n]*", "", prefix).strip()
    pragma = re.fullmatch(r"#pragma[ \t]+(?:acl[ \t]+)?(\w+)", rest)
    return not rest or (pragma is not None and pragma[1] not in ("cache_hint", "shape_template"))


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_truncated_examples(example: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    text = (SHARED_EXAMPLES / f"{example}.tile").read_text()
    for cut in range(0, len(text), 3):
        path = tmp_path / f"{example}-{cut}.tile"
        path.write_text(text[:cut])
        _check(path, capsys, compiles=_is_complete(text[:cut], text))


@pytest.mark.parametrize("seed", range(20))
def test_random_bytes(seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    rng = random.Random(seed)
    path = tmp_path / f"bytes-{seed}.tile"
    path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))))
    _check(path, capsys)


@pytest.mark.parametrize("seed", range(20))
def test_random_tokens(seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    rng = random.Random(seed)
    path = tmp_path / f"tokens-{seed}.tile"
    path.write_text(" ".join(rng.choice(TOKENS) for _ in range(rng.randrange(1, 120))))
    _check(path, capsys)


def _body(expr: str) -> str:
    return f"func f(x: Tensor[n]) -> Tensor[n] {{\n  return {expr};\n}}\n"


DEEP = {
    # Parentheses leave no node behind: 10000 of them are a valid program.
    "parens-10000": (_body("(" * 10000 + "x" + ")" * 10000), True),
    "calls-3000": (_body("exp(" * 3000 + "x" + ")" * 3000), False),
    "negations-10000": (_body("-" * 10000 + "x"), False),
    "sum-5000-terms": (_body(" + ".join(["x"] * 5000)), False),
    "unclosed-parens-10000": (_body("(" * 10000 + "x"), False),
    "nested-lists-3000": (_body("reduce_sum(x, axes=" + "[" * 3000 + "]" * 3000 + ")"), False),
    "slices-3000": (_body("x" + "[:]" * 3000), False),
}


@pytest.mark.parametrize("name", sorted(DEEP))
def test_deep_nesting(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    text, compiles = DEEP[name]
    path = tmp_path / f"{name}.tile"
    path.write_text(text)
    _check(path, capsys, compiles)


@pytest.mark.parametrize("name", ["nul-in-expression.tile", "call-chain-70.tile", "empty.tile"])
def test_real_process(name: str):
    """The installed entry point behaves like main(): status, located message, no traceback."""
    path = CORPUS / name
    proc = subprocess.run([sys.executable, "-m", "tilec.cli", str(path), "--emit=ir"],
                          capture_output=True, text=True, timeout=60)
    if name in COMPILES:
        assert proc.returncode == 0 and proc.stdout.startswith("module"), proc.stderr
    else:
        _assert_fails_located(path, proc.returncode, proc.stderr)


def test_real_process_deep_nesting(tmp_path: Path):
    path = tmp_path / "calls-3000.tile"
    path.write_text(DEEP["calls-3000"][0])
    proc = subprocess.run([sys.executable, "-m", "tilec.cli", str(path), "--emit=ir"],
                          capture_output=True, text=True, timeout=60)
    _assert_fails_located(path, proc.returncode, proc.stderr)
