"""lit configuration: every .tile / .mlir file under test/lit is a test.

Tools come from the Python environment running lit (``tilec``, ``tilec-opt``, ``filecheck``).
Substitutions: %examples is the shared examples directory, %S/%s as usual.
Compiles are cached in ``test/lit/Output/tilec-cache`` unless TILEC_CACHE_DIR says otherwise,
never in the user's cache.
"""
import os
import sys
from pathlib import Path

import lit.formats

config.name = "tilec"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".tile", ".mlir"]
config.excludes = ["inputs", "lit.cfg.py"]
config.test_source_root = os.path.dirname(__file__)

repo = Path(__file__).resolve().parents[2]
bindir = os.path.dirname(sys.executable)
config.environment["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
config.environment["PYTHONUNBUFFERED"] = "1"
for var in ("HOME", "TMPDIR"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
config.environment["TILEC_CACHE_DIR"] = (os.environ.get("TILEC_CACHE_DIR")
                                         or str(repo / "test" / "lit" / "Output" / "tilec-cache"))

config.substitutions.append(("%examples", str(repo.parent / "shared" / "examples")))
config.substitutions.append(("%runtime", str(repo / "tilec" / "runtime")))
config.substitutions.append(("%cc", os.environ.get("CC") or "cc"))
config.substitutions.append(("FileCheck", "filecheck"))
