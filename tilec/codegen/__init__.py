"""Backends: kernel-level tile IR -> target code (``cpu/`` today).  A backend reads only the
kernel-level IR made by tile-kernel and never imports another backend."""
