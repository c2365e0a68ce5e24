"""Backends: kernel-level tile IR -> target code (``cpu/``, ``ptx/``, ``ascendc/``; what they
share is in ``common/``).  A backend reads only the kernel-level IR made by tile-kernel and
never imports another backend."""
