"""The Ascend C CPU twin (--target ascend-sim): where its header and runtime live.

Generated Ascend C compiles unchanged with ``g++ -std=c++17 -I INCLUDE_DIR`` and links
``RUNTIME_SOURCES``; README.md gives the launch contract and the rules the twin enforces.
"""
from pathlib import Path

INCLUDE_DIR = Path(__file__).resolve().parent
RUNTIME_SOURCES = (INCLUDE_DIR / "twin_runtime.cpp", INCLUDE_DIR / "twin_cube.cpp")
CXXFLAGS = ("-std=c++17", f"-I{INCLUDE_DIR}")
