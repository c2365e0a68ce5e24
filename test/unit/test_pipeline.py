"""Typed pass options: the pipeline parser fills each pass's frozen options dataclass from
``NAME{key=value ...}``, converting and checking every value, and a wrong one is a TilecError
naming the pass and the option, located in the pipeline's text."""
from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass

import pytest

from tilec import passes  # noqa: F401  (registers the tilec passes)
from tilec.diagnostics import TilecError
from tilec.mlir import ir
from tilec.pipeline import (PIPELINE_FILE, REGISTRY, NoOptions, PassContext, PassInfo,
                            option, options_help, parse_pipeline, register, run_pipeline,
                            with_options)


@dataclass(frozen=True)
class ToyOptions:
    rounds: int = 1
    mode: str = option("fast", choices=lambda: ("fast", "slow"))
    label: str = ""
    dry_run: bool = False


@pytest.fixture
def toy(monkeypatch) -> list:
    """Register pass 'toy' with ToyOptions; the list collects the options of each run."""
    seen: list = []

    def run(module: ir.Module, pc: PassContext) -> None:
        seen.append(pc.options)

    monkeypatch.setitem(REGISTRY, "toy", PassInfo("toy", run, "", ToyOptions))
    return seen


def options_of(text: str, index: int = 0):
    kind, (info, options) = parse_pipeline(text)[index]
    assert kind == "tilec"
    return options


def error_of(text: str) -> TilecError:
    with pytest.raises(TilecError) as caught:
        parse_pipeline(text)
    return caught.value


def test_each_value_is_converted_to_its_field_type(toy) -> None:
    got = options_of("toy{rounds=3 mode=slow label=x dry-run=true}")
    assert got == ToyOptions(rounds=3, mode="slow", label="x", dry_run=True)
    assert options_of("toy") == ToyOptions()
    assert options_of("toy{dry-run}").dry_run is True          # a bare flag is true
    assert options_of("toy{ dry-run=false  rounds=-2 }") == ToyOptions(rounds=-2)


def test_options_are_frozen_and_reach_the_pass(toy) -> None:
    with ir.Context(), ir.Location.unknown():
        run_pipeline(ir.Module.create(), parse_pipeline("cse,toy{rounds=4},toy"))
    assert toy == [ToyOptions(rounds=4), ToyOptions()]
    with pytest.raises(FrozenInstanceError):
        toy[0].rounds = 5  # type: ignore[misc]


def test_the_real_passes_declare_their_options() -> None:
    assert options_of("tile-shape-template{no-generic=true}").no_generic is True
    kernel = options_of("tile-kernel{all=true target=ascend}")
    assert (kernel.target, kernel.all) == ("ascend", True)
    assert options_of("tile-kernel").target == "cpu"
    assert options_of("tile-fuse{weight-views=false}").weight_views is False
    assert options_of("tile-fuse").weight_views is True
    assert options_of("tile-cache-hint") == NoOptions()


@pytest.mark.parametrize("text, message, col", [
    ("toy{rounds=many}", "toy: option 'rounds' expects an integer, got 'many'", 5),
    ("toy{mode=medium}", "toy: option 'mode' expects one of fast, slow, got 'medium'", 5),
    ("toy{dry-run=yes}", "toy: option 'dry-run' expects true or false, got 'yes'", 5),
    ("toy{rounds}", "toy: option 'rounds' needs a value (rounds=...)", 5),
    ("cse,toy{speed=2}", "toy has no option 'speed'; options: rounds, mode, label, dry-run", 9),
    ("toy{dry_run=true}", "toy has no option 'dry_run'; options: rounds, mode, label, dry-run",
     5),
    ("toy{label=a rounds=1 label=b}", "toy: option 'label' is given twice", 22),
    ("tile-cache-hint{level=2}", "tile-cache-hint has no option 'level'; it takes none", 17),
    ("tile-kernel{target=gpu}",
     "tile-kernel: option 'target' expects one of cpu, ascend, ptx, got 'gpu'", 13),
])
def test_a_wrong_option_names_the_pass_and_the_option_where_it_is(toy, text, message,
                                                                   col) -> None:
    error = error_of(text)
    assert error.message == message
    assert (error.span.file, error.span.line, error.span.col) == (PIPELINE_FILE, 1, col)


def test_the_error_quotes_the_pipeline_with_a_caret_under_the_option(toy) -> None:
    rendered = error_of("builtin.module(cse, toy{rounds=x})").render().splitlines()
    assert rendered[0] == (f"{PIPELINE_FILE}:1:25: error: toy: option 'rounds' expects an "
                           "integer, got 'x'")
    assert rendered[1:] == ["builtin.module(cse, toy{rounds=x})", " " * 24 + "^~~~~~~~"]


def test_an_unknown_pass_is_located_too() -> None:
    error = error_of("cse, tile-fusion")
    assert error.message.startswith("unknown pass 'tile-fusion' (tilec passes: ")
    assert (error.span.col, error.span.end_col) == (6, 17)


def test_with_options_sets_a_field_of_one_pass_only(toy) -> None:
    steps = with_options(parse_pipeline("toy,cse,tile-shape-template"), "tile-shape-template",
                         no_generic=True)
    assert steps[0][1][1] == ToyOptions() and steps[1] == ("upstream", "cse")
    assert steps[2][1][1].no_generic is True


def test_options_must_be_a_frozen_dataclass_of_plain_types() -> None:
    @dataclass
    class Mutable:
        n: int = 0

    @dataclass(frozen=True)
    class Floaty:
        scale: float = 1.0

    with pytest.raises(TypeError, match="must be a frozen dataclass"):
        register("bad-mutable", "", Mutable)
    with pytest.raises(TypeError, match="Floaty.scale is <class 'float'>, not bool, int or str"):
        register("bad-float", "", Floaty)
    assert "bad-mutable" not in REGISTRY and "bad-float" not in REGISTRY


def test_options_help_says_each_option_its_values_and_default() -> None:
    toy = PassInfo("toy", lambda module, pc: None, "", ToyOptions)
    assert options_help(toy) == ("rounds=INT (default 1), mode=fast|slow (default fast), "
                                 'label=STR (default ""), dry-run=true|false (default false)')
    assert options_help(REGISTRY["tile-cache-hint"]) == ""
    assert options_help(REGISTRY["tile-fuse"]) == ("weight-views=true|false (default true), "
                                                   'weight-view-types=STR (default "")')


def test_tilec_opt_help_lists_the_passes_with_their_options(capsys) -> None:
    from tilec.cli import opt_main

    with pytest.raises(SystemExit) as done:
        opt_main(["--help"])
    assert done.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("tilec passes (PASS{option=value ...}; or any upstream MLIR pass):")
    assert lines[at + 1].split()[0] == "tile-attention"
    kernel = next(i for i, line in enumerate(lines) if line.split()[:1] == ["tile-kernel"])
    assert lines[kernel + 1].split() == ["options:", "target=cpu|ascend|ptx", "(default", "cpu),",
                                         "all=true|false", "(default", "false),",
                                         "gemm=STR", "(default", '"")']
