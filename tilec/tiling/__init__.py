"""The kernel level's view of targets and rows: target descriptions, row plans."""
