"""tilec: an ahead-of-time compiler for AI operators written in the .tile language."""
__version__ = "0.1.0"
