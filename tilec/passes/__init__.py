"""tilec's passes on tile IR, one file per pass; importing this package registers them."""
