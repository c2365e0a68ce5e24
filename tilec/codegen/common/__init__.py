"""What every backend shares: the backend interface, host code, linking, row lowering."""
