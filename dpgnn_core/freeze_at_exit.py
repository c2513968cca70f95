"""Importing this module spares the process the garbage collection of its heap at exit.

It registers :func:`gc.freeze` as an exit handler, once per process (a module is imported
once), so that the garbage collections of the interpreter's finalisation skip every object
that exists by then.

Why: when a process ends, CPython tears its modules down and runs its cyclic garbage
collector over whatever is left; after torch, ``torch._dynamo``, Prefect and MLflow are
imported that is millions of objects. Importing what a ``dpgnn run`` imports and exiting
took 16.7 s of CPU, 12.2 s with the heap frozen first, 12.1 s with no finalisation at all
(``os._exit``): a third of the cost of a short command, spent after it has finished. The
heavy processes import it first: every ``dpgnn`` command, sweep worker and flow run
(through :mod:`tasks`) and the forkserver of a sweep's local Dask cluster (through
:data:`flows.sweep.FORKSERVER_PRELOAD`; 7.7-8.8 s of CPU to import what it preloads and
exit, 5.8-7.0 s with the freeze).

Imported before the libraries, it runs after the exit handlers they register (handlers run
in reverse order): Prefect's and MLflow's still run, and what they leave is still
collected. Not given up: every file, database and record dpgnn writes is written, committed
and closed (or renamed into place) when it is written, and logging flushes its handlers in
its own exit handler. Given up: objects in reference cycles at exit are not finalised
before the process ends, which CPython does not promise either; the memory goes back with
the process.

Only the standard library: the forkserver imports it before anything reads the
environment.
"""

import atexit
import gc

atexit.register(gc.freeze)
