"""Run-time support of built libraries: the Python loader (``loader.py``, NumPy only) and the
C runtime compiled into every CPU library (``cpu_runtime.c``/``.h``: thread pool, errors)."""
