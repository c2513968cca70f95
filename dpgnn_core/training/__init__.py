"""Training loops and metrics. Nothing is re-exported here: import from the submodules."""

__all__: list[str] = []
