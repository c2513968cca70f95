"""Thin Prefect tasks: a spec in, one core call, an artifact on disk, a small manifest out.

Importing this package configures Prefect for the project directory (``DPGNN_HOME``,
default ``./.dpgnn``) before Prefect itself is imported: results and cache records live
under the project, not ``~/.prefect``; analytics are off. It also spares the process the
garbage collection of its whole heap when it exits (:mod:`dpgnn_core.freeze_at_exit`,
imported first, so that its handler runs after Prefect's and MLflow's).
"""

import dpgnn_core.freeze_at_exit  # noqa: F401 - first: registers gc.freeze at exit
from tasks.config import configure_environment

configure_environment()
