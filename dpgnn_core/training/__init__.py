"""Training loops and metrics. Nothing is re-exported here: import from the submodules."""

from dpgnn_core.training import eager_optim

eager_optim.install()  # before any optimiser is built (eager_optim's docstring)

__all__: list[str] = []
