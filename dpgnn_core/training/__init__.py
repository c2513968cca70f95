"""Training loops and metrics."""
