"""The compile cache: hits, what makes a miss, damaged entries, concurrent compiles, and the
outputs (``--emit``, ``-o``, ``--dump-dir``) a hit must still produce."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import tilec
from tilec import driver
from tilec.cache import Store
from tilec.cli import main

SOURCE = """\
func scale_add(x: Tensor<f32>[n], y: Tensor<f32>[n], a: float32 = 2.0) -> Tensor<f32>[n] {
  return y + a * x;
}
"""
TILEC = Path(sys.executable).parent / "tilec"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("TILEC_CACHE_DIR", str(path))
    return path


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "scale_add.tile"
    path.write_text(SOURCE)
    return path


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The stages tilec really compiled (not served from the cache), in order."""
    done: list[str] = []
    compile_files = driver.compile_files

    def count(text_, file, options, sink, name):
        done.append(options.emit)
        return compile_files(text_, file, options, sink, name)

    monkeypatch.setattr(driver, "compile_files", count)
    return done


def tilec_main(*args: str | Path) -> None:
    assert main([str(a) for a in args]) == 0


def entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("entries/*/*"))


def test_a_second_identical_compile_is_a_hit(cache: Path, source: Path, tmp_path: Path,
                                             compiles: list[str],
                                             capsys: pytest.CaptureFixture) -> None:
    tilec_main(source, "-o", tmp_path / "a" / "scale_add.so", "--verbose")
    assert "compile cache miss" in capsys.readouterr().err
    tilec_main(source, "-o", tmp_path / "b" / "scale_add.so", "--verbose")
    assert "compile cache hit" in capsys.readouterr().err
    assert compiles == ["so"]
    for name in ("scale_add.so", "scale_add.h"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert len(entries(cache)) == 1


@pytest.mark.parametrize("change", ["source byte", "option", "define value", "tilec source",
                                    "C compiler"])
def test_any_change_to_the_input_misses(change: str, cache: Path, source: Path, tmp_path: Path,
                                        compiles: list[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    base = [source, "-D", "n=8", "-o", tmp_path / "scale_add.so"]
    tilec_main(*base)
    tilec_main(*base)
    assert compiles == ["so"]
    args = list(base)
    if change == "source byte":
        source.write_text(SOURCE.replace("2.0", "3.0"))
    elif change == "option":
        args.append("-O1")
    elif change == "define value":
        args[2] = "n=9"
    elif change == "tilec source":
        monkeypatch.setattr(driver, "_compiler_digest", lambda: "an edited tilec")
    else:
        monkeypatch.setenv("CC", "cc -fno-common")
    tilec_main(*args)
    assert compiles == ["so", "so"]
    assert len(entries(cache)) == 2


@pytest.mark.parametrize("damage", ["truncated library", "modified header", "missing stage",
                                    "truncated manifest"])
def test_a_damaged_entry_is_detected_and_rebuilt(damage: str, cache: Path, source: Path,
                                                 tmp_path: Path, compiles: list[str]) -> None:
    output = tmp_path / "scale_add.so"
    tilec_main(source, "-o", output)
    built = output.read_bytes()
    (entry,) = entries(cache)
    if damage == "truncated library":
        library = entry / "out" / "scale_add.so"
        library.write_bytes(library.read_bytes()[:1000])
    elif damage == "modified header":
        header = entry / "out" / "scale_add.h"
        header.write_text(header.read_text().replace("scale_add", "scale_add_"))
    elif damage == "missing stage":
        (entry / "stages" / "opt.txt").unlink()
    else:
        manifest = entry / "manifest.json"
        manifest.write_bytes(manifest.read_bytes()[:40])
    output.unlink()
    tilec_main(source, "-o", output)
    assert compiles == ["so", "so"]
    assert output.read_bytes() == built
    tilec_main(source, "-o", output)          # healed: the rebuilt entry serves
    assert compiles == ["so", "so"]
    assert len(entries(cache)) == 1


def test_eight_concurrent_compiles_of_one_file_agree(cache: Path, source: Path,
                                                     tmp_path: Path) -> None:
    outputs = [tmp_path / f"out{i}" / "scale_add.so" for i in range(8)]
    runs = [subprocess.Popen([TILEC, source, "-o", out, "--verbose"], stderr=subprocess.PIPE,
                             text=True) for out in outputs]
    reports = [run.communicate()[1] for run in runs]
    assert [run.returncode for run in runs] == [0] * 8, reports
    assert all("compile cache" in r for r in reports)
    assert len({out.read_bytes() for out in outputs}) == 1
    assert len({out.with_suffix(".h").read_bytes() for out in outputs}) == 1
    assert len(entries(cache)) == 1
    assert list((cache / "tmp").iterdir()) == []       # every loser removed its copy


def test_a_hit_honours_emit_output_and_dump_dir(cache: Path, source: Path, tmp_path: Path,
                                                compiles: list[str],
                                                capsys: pytest.CaptureFixture) -> None:
    tilec_main(source, "-o", tmp_path / "first" / "scale_add.so")
    tilec_main(source, "-o", tmp_path / "second" / "scale_add.so", "--dump-dir",
               tmp_path / "dump")
    assert compiles == ["so"]
    assert (tmp_path / "second" / "scale_add.h").read_bytes() == \
        (tmp_path / "first" / "scale_add.h").read_bytes()
    dumps = sorted(p.name for p in (tmp_path / "dump").iterdir())
    assert dumps == [f"scale_add.{s}.txt" for s in ("ast", "ir", "kernel", "llvm", "opt")]
    capsys.readouterr()
    for stage in ("ast", "ir", "opt", "kernel"):
        tilec_main(source, f"--emit={stage}", "--no-cache")
        printed = capsys.readouterr().out
        assert (tmp_path / "dump" / f"scale_add.{stage}.txt").read_text() == printed
    assert "define void @" in (tmp_path / "dump" / "scale_add.llvm.txt").read_text()

    tilec_main(source, "--emit=ir")
    printed = capsys.readouterr().out
    tilec_main(source, "--emit=ir", "-o", tmp_path / "ir.mlir")
    assert (tmp_path / "ir.mlir").read_text() == printed
    tilec_main(source, "--emit=obj", "-o", tmp_path / "k.o")
    assert (tmp_path / "k.o").read_bytes()[:4] == b"\x7fELF"
    assert compiles == ["so", "ast", "ir", "opt", "kernel", "ir", "obj"]


def test_a_hit_reports_the_warnings_again(cache: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture) -> None:
    source = tmp_path / "w.tile"
    source.write_text("#pragma unroll(4)\n" + SOURCE)
    for _ in range(2):
        tilec_main(source, "--emit=opt")
        err = capsys.readouterr().err
        assert f"{source}:1:9: warning: unknown pragma 'unroll' is ignored" in err
        assert "#pragma unroll(4)\n        ^~~~~~\n" in err


def test_no_cache_compiles_every_time_and_stores_nothing(cache: Path, source: Path,
                                                         tmp_path: Path,
                                                         compiles: list[str]) -> None:
    for _ in range(2):
        tilec_main(source, "-o", tmp_path / "scale_add.so", "--no-cache", "--dump-dir",
                   tmp_path / "dump")
    assert compiles == ["so", "so"]
    assert not cache.exists()
    assert (tmp_path / "dump" / "scale_add.kernel.txt").exists()


def test_reporting_options_bypass_the_cache(cache: Path, source: Path, compiles: list[str],
                                            capsys: pytest.CaptureFixture) -> None:
    for _ in range(2):
        tilec_main(source, "--emit=opt", "--time-passes")
        assert "Pass execution timing report" in capsys.readouterr().err
    assert compiles == ["opt", "opt"]


def test_cache_info_and_clear(cache: Path, source: Path, tmp_path: Path,
                              capsys: pytest.CaptureFixture) -> None:
    tilec_main(source, "-o", tmp_path / "scale_add.so")
    tilec_main(source, "--emit=ir")
    (cache / "notes.txt").write_text("not tilec's")
    capsys.readouterr()
    tilec_main("cache", "info")
    info = capsys.readouterr().out
    assert f"location: {cache}\n" in info and "entries:  2\n" in info
    size = int(info.split("size:")[1].split()[0])
    assert size > (tmp_path / "scale_add.so").stat().st_size
    tilec_main("cache", "clear")
    assert capsys.readouterr().out == f"removed 2 entries from {cache}\n"
    tilec_main("cache", "info")
    assert "entries:  0\n" in capsys.readouterr().out
    assert (cache / "notes.txt").read_text() == "not tilec's"


def test_the_python_api_loads_from_the_cache(cache: Path, source: Path,
                                             compiles: list[str]) -> None:
    import numpy as np

    first = tilec.compile(str(source))
    second = tilec.compile(str(source))
    assert compiles == ["so"]
    x, y = np.arange(5, dtype=np.float32), np.ones(5, dtype=np.float32)
    np.testing.assert_array_equal(second.scale_add(x, y), y + 2 * x)
    np.testing.assert_array_equal(first.scale_add(x, y, 0.5), y + 0.5 * x)


def test_the_store_serves_what_was_published_and_drops_what_is_damaged(tmp_path: Path) -> None:
    store = Store(tmp_path)
    key = "ab" * 32
    assert store.lookup(key) is None
    path = store.publish(key, {"out/f.so": b"library", "stages/ir.txt": b"ir"}, {"m": 1})
    assert path == tmp_path / "entries" / "ab" / key
    entry = store.lookup(key)
    assert entry is not None and entry.files["out/f.so"] == b"library" and entry.meta == {"m": 1}
    # a second publish of the key loses the race: the first entry stays, nothing is left over
    assert store.publish(key, {"out/f.so": b"other"}, {}) == path
    assert store.lookup(key).files["out/f.so"] == b"library"
    assert list((tmp_path / "tmp").iterdir()) == []
    (path / "stages" / "ir.txt").write_bytes(b"IR")
    assert store.lookup(key) is None and not path.exists()
    # a cache it cannot write never fails a compile
    (tmp_path / "readonly").mkdir()
    (tmp_path / "readonly" / "entries").write_text("a file where a directory should be")
    assert Store(tmp_path / "readonly").publish(key, {"f": b""}, {}) is None
