"""Thin Prefect tasks: a spec in, one core call, an artifact on disk, a small manifest out.

Importing this package configures Prefect for the project directory (``DPGNN_HOME``,
default ``./.dpgnn``) before Prefect itself is imported: results and cache records live
under the project, not ``~/.prefect``; analytics are off. It also spares the process the
garbage collection of its whole heap when it exits
(:func:`tasks.config.no_collection_at_exit`).
"""

from tasks.config import configure_environment, no_collection_at_exit

configure_environment()
no_collection_at_exit()
