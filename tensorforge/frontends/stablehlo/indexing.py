"""gather / scatter (the common forms), dynamic_slice."""
