"""dpgnn_core: the pure library of dpgnn (data, graph sampling, privacy, models, training).

Nothing in this package imports Prefect or MLflow; orchestration lives in ``tasks`` and
``flows``. Only ``__version__`` is defined here: import from the subpackages.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
