"""Node and network probes: one module per probe."""
