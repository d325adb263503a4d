"""while / case."""
