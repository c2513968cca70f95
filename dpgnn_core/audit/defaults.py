"""The audit's defaults, in a module light to import (no torch): the CLI builds its
options from them before any heavy import."""

#: Default β (the bound holds at confidence 1 − β).
DEFAULT_BETA = 0.05
#: Default scale of a node canary's own feature column.
DEFAULT_SCALE = 10.0
#: Default fraction of the canaries guessed (half of them "in", half "out").
DEFAULT_GUESS_FRACTION = 0.5

__all__ = ["DEFAULT_BETA", "DEFAULT_GUESS_FRACTION", "DEFAULT_SCALE"]
