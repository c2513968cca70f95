"""Thin Prefect tasks: a spec in, one core call, an artifact on disk, a small manifest out.

Importing this package configures Prefect for the project directory (``DPGNN_HOME``,
default ``./.dpgnn``) before Prefect itself is imported: results and cache records live
under the project, not ``~/.prefect``; analytics are off.
"""

from tasks.config import configure_environment

configure_environment()
