"""tilec-opt: --split-input-file keeps the file's line numbers in every part; --verify-each
(the default) names the pass that left IR which does not verify; upstream passes run (on tile
ops, whose traits they see) and an unknown pass is named."""
from __future__ import annotations

from tilec.cli import opt_main, split_input
from tilec.mlir import ir
from tilec.pipeline import REGISTRY, PassContext, PassInfo


def test_split_input_pads_each_part_to_its_lines_in_the_file() -> None:
    assert split_input("a\n// -----\nb\n// ----- note\nc") == ["a\n", "\n\nb\n", "\n\n\n\nc"]


def test_split_input_file_prints_the_parts_separated_the_same_way(tmp_path, capsys) -> None:
    path = tmp_path / "f.mlir"
    path.write_text("func.func @a() {\n  return\n}\n// -----\nfunc.func @b() {\n  return\n}\n")
    assert opt_main([str(path), "--split-input-file"]) == 0
    out = capsys.readouterr().out
    assert out.count("module {") == 2
    assert out.index("@a()") < out.index("}\n// -----\nmodule {") < out.index("@b()")


def test_verify_each_names_the_pass_that_broke_the_ir(monkeypatch, tmp_path, capsys) -> None:
    def shift_slice(module: ir.Module, pc: PassContext) -> None:  # a bug a pass could have
        body = module.body.operations[0].regions[0].blocks[0]
        body.operations[0].attributes["starts"] = ir.ArrayAttr.get([ir.StringAttr.get("1")])

    monkeypatch.setitem(REGISTRY, "shift-slice", PassInfo("shift-slice", shift_slice, ""))
    path = tmp_path / "f.mlir"
    path.write_text('func.func @f(%x: tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]> {\n'
                    '  %0 = "tile.slice"(%x) {ends = ["n"], starts = ["0"]} : '
                    '(tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]>\n'
                    '  return %0 : tensor<?xf32, ["n"]>\n}\n')
    assert opt_main([str(path), "-p", "shift-slice"]) == 1
    assert capsys.readouterr().err.startswith(
        f"{path}:2:8: error: IR after shift-slice does not verify: 'tile.slice' gives "
        "Tensor<float32>[n] where its operands make Tensor<float32>[n-1]")
    assert opt_main([str(path), "-p", "shift-slice", "--no-verify-each"]) == 0


TWO_EXPS = ('func.func @f(%x: tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]> {\n'
            '  %0 = "tile.exp"(%x) : (tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]>\n'
            '  %1 = "tile.exp"(%x) : (tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]>\n'
            '  %2 = "tile.add"(%0, %1) : (tensor<?xf32, ["n"]>, tensor<?xf32, ["n"]>) '
            '-> tensor<?xf32, ["n"]>\n'
            '  return %2 : tensor<?xf32, ["n"]>\n}\n')


def test_upstream_passes_run_on_tile_ops_that_are_pure(tmp_path, capsys) -> None:
    path = tmp_path / "f.mlir"
    path.write_text(TWO_EXPS)
    assert opt_main([str(path), "-p", "canonicalize,cse"]) == 0
    out = capsys.readouterr().out
    assert out.count('"tile.exp"') == 1 and '"tile.add"(%0, %0)' in out


def test_an_unknown_pass_is_named(tmp_path, capsys) -> None:
    path = tmp_path / "f.mlir"
    path.write_text(TWO_EXPS)
    assert opt_main([str(path), "-p", "cse,no-such-pass"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("<pass-pipeline>:1:5: error: unknown pass 'no-such-pass' ")
    assert err.splitlines()[1:] == ["cse,no-such-pass", "    ^~~~~~~~~~~~"]
