"""The GEMM benchmark (``tilec/bench/gemm.py``, also ``tilec bench --ops gemm``): tilec's matmul
against torch.matmul, NumPy and torch.compile; see that module for the options.

    .venv/bin/python bench/gemm.py [--full] [--quick] [--no-torch] [-o FILE]
"""
import sys

from tilec.bench.gemm import main

if __name__ == "__main__":
    sys.exit(main())
