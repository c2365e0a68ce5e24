"""``tilec bench``: benchmarks shipped with tilec (``cpu_ops``: its CPU kernels against NumPy
and PyTorch), so that an installed tilec runs them too; their recorded results live in the
source checkout's ``bench/results/``."""
