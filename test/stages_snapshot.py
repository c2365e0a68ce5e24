"""Write every text stage of every program for every target, to compare two trees of tilec.

A refactoring of the compiler must leave the generated code unchanged.  Run this on the tree
before the change and on the tree after it, and compare:

    .venv/bin/python test/stages_snapshot.py /tmp/before            # on the old tree
    .venv/bin/python test/stages_snapshot.py /tmp/after --against /tmp/before

Programs: ``test/corpus/*.tile``, ``ops/*.tile`` and the shared examples
(``../shared/examples/*.tile``, where they are).  Per target, one compile to its last text stage
(cpu ``llvm``, ptx ``ptx``, ascend and ascend-sim ``ascendc``) records every stage on the way
(``ast ir opt kernel`` and the backend's: ``llvm``; ``gpu nvvm llvm ptx``; ``ascendc``), each
written to ``OUT/<target>/<dir>/<stem>.<stage>.txt``; a compile that fails writes its
diagnostic to ``<stem>.error.txt`` instead.  A second compile to ``so`` stops where the
library's host C is generated (``codegen.common.host.generate``, wrapped here) and writes that C,
its header and its exports as ``<stem>.host.c.txt``, ``.host.h.txt``, ``.exports.txt``: the
library is never linked.  ``--against`` compares the two directories byte
for byte and exits 1 on any difference (a missing, extra or changed file), naming each.
"""
from __future__ import annotations

import argparse
import filecmp
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAST_TEXT_STAGE = {"cpu": "llvm", "ptx": "ptx", "ascend": "ascendc", "ascend-sim": "ascendc"}


class _HostGenerated(Exception):
    """Raised by the wrapped ``generate`` once the host code of a library is made."""

    def __init__(self, host) -> None:
        super().__init__("host code generated")
        self.host = host


def _wrap_generate() -> None:
    """Make ``codegen.common.host.generate`` raise :class:`_HostGenerated` with its result
    (before any backend imports it)."""
    from tilec.codegen.common import host

    original = host.generate

    def generate(*args, **kwargs):
        raise _HostGenerated(original(*args, **kwargs))

    host.generate = generate


def programs() -> list[Path]:
    """Every program to snapshot, as paths relative to the repository root."""
    shared = ROOT.parent / "shared" / "examples"
    found = [*sorted((ROOT / "test" / "corpus").glob("*.tile")),
             *sorted((ROOT / "ops").glob("*.tile")), *sorted(shared.glob("*.tile"))]
    return [Path(p).relative_to(ROOT) if p.is_relative_to(ROOT) else
            Path("..", "shared", "examples", p.name) for p in found]


def snapshot(program: Path, target: str, out: Path) -> None:
    """Write the stages of ``program`` built for ``target`` under ``out``."""
    from tilec.diagnostics import DiagnosticSink, TilecError
    from tilec.driver import CompileOptions, build, read_source

    file = str(program)
    text = read_source(str(ROOT / program))
    stem = out / target / program.parent.name / program.stem
    stem.parent.mkdir(parents=True, exist_ok=True)
    options = CompileOptions(emit=LAST_TEXT_STAGE[target], target=target)
    try:
        built = build(text, file, options, DiagnosticSink(), program.stem, use_cache=False,
                      record_stages=True)
    except TilecError as e:
        Path(f"{stem}.error.txt").write_text(e.render())
        return
    for stage, stage_text in built.stages.items():
        Path(f"{stem}.{stage}.txt").write_text(stage_text)
    Path(f"{stem}.emitted.txt").write_bytes(built.files[""])
    try:
        build(text, file, replace(options, emit="so"), DiagnosticSink(), program.stem,
              use_cache=False)
    except _HostGenerated as generated:
        host = generated.host
        Path(f"{stem}.host.c.txt").write_text(host.source)
        Path(f"{stem}.host.h.txt").write_text(host.header)
        Path(f"{stem}.exports.txt").write_text("\n".join(host.exports) + "\n")
        return
    raise RuntimeError(f"{program} for {target}: the host code was never generated")


def differences(before: Path, after: Path) -> list[str]:
    """Every file that is missing, extra or different in ``after`` (relative paths)."""
    old = {p.relative_to(before) for p in before.rglob("*") if p.is_file()}
    new = {p.relative_to(after) for p in after.rglob("*") if p.is_file()}
    found = [f"missing: {p}" for p in sorted(old - new)]
    found += [f"extra: {p}" for p in sorted(new - old)]
    found += [f"changed: {p}" for p in sorted(old & new)
              if not filecmp.cmp(before / p, after / p, shallow=False)]
    return found


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    p.add_argument("out", type=Path, help="directory to write the stages to (must not exist)")
    p.add_argument("--against", type=Path, help="a previous snapshot to compare with")
    p.add_argument("--targets", default=",".join(LAST_TEXT_STAGE),
                   help="comma-separated targets (default: all)")
    args = p.parse_args()
    args.out.mkdir(parents=True)
    sys.path.insert(0, str(ROOT))
    _wrap_generate()
    for program in programs():
        for target in args.targets.split(","):
            snapshot(program, target, args.out)
    files = sum(1 for f in args.out.rglob("*") if f.is_file())
    print(f"wrote {files} files for {len(programs())} programs to {args.out}")
    if args.against is None:
        return 0
    found = differences(args.against, args.out)
    print("\n".join(found) or f"identical to {args.against}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
