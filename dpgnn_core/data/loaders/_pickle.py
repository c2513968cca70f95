"""A restricted unpickler for Planetoid's raw files (``ind.<name>.*``).

Those files are Python pickles, and a pickle names the functions it calls to rebuild its
objects: ``pickle.load`` of a crafted ``ind.citeseer.x`` can run ``os.system``. This one
resolves only the globals that Planetoid's files hold (numpy arrays and dtypes, scipy
sparse matrices, and the ``graph`` file's ``defaultdict`` of lists) and refuses any other
before it is imported or called, naming the file and the global.

The allow-list is what the published files (kimiyoung/planetoid, as PyG reads them) and
the same objects pickled again by a current numpy and scipy (protocols 0 to 5) reference,
under each module name those libraries have used (``numpy.core`` / ``numpy._core``,
``scipy.sparse.csr`` / ``scipy.sparse._csr``; Python 2's ``__builtin__`` and
``copy_reg``, which the standard unpickler maps to ``builtins`` and ``copyreg`` after this
check), and the helpers that protocols 0 to 2 name (``copyreg._reconstructor``;
``_codecs.encode``, admitted for the ``latin1`` codec only). None of them runs code a file
chooses: they build arrays, dtypes, sparse matrices, lists and dicts from data.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from dpgnn_core.errors import DataError

_SPARSE = ("csr_matrix", "csc_matrix", "coo_matrix", "lil_matrix")
_SPARSE_MODULES = {f"scipy.sparse.{p}{kind}": f"{kind}_matrix"
                   for p in ("", "_") for kind in ("csr", "csc", "coo", "lil")}

#: ``(module, name)`` pairs a Planetoid pickle may name.
ALLOWED: frozenset[tuple[str, str]] = frozenset(
    {(core, "_reconstruct") for core in ("numpy.core.multiarray", "numpy._core.multiarray")}
    | {(core, "scalar") for core in ("numpy.core.multiarray", "numpy._core.multiarray")}
    | {(core, "_frombuffer") for core in ("numpy.core.numeric", "numpy._core.numeric")}
    | {("numpy", "ndarray"), ("numpy", "dtype")}
    | {(module, name) for module, name in _SPARSE_MODULES.items()}
    | {("scipy.sparse", name) for name in _SPARSE}
    | {(b, t) for b in ("__builtin__", "builtins") for t in ("list", "dict", "object")}
    | {("collections", "defaultdict"), ("copy_reg", "_reconstructor"),
       ("copyreg", "_reconstructor"), ("_codecs", "encode")}
)
_LATIN1 = ("latin1", "latin-1", "iso-8859-1", "iso8859-1")


def _latin1_encode(text: str, encoding: str = "utf-8") -> bytes:
    """``_codecs.encode`` as Python 3 writes ``bytes`` into a protocol-2 pickle
    (``encode(text, 'latin1')``); any other codec is refused (a codec name imports a
    module of the ``encodings`` package)."""
    if not isinstance(text, str) or encoding.lower() not in _LATIN1:
        raise RefusedGlobal("_codecs", f"encode (codec {encoding!r})")
    return text.encode("latin1")


class RefusedGlobal(pickle.UnpicklingError):
    """A pickle named a global outside :data:`ALLOWED`."""

    def __init__(self, module: str, name: str) -> None:
        self.global_name = f"{module}.{name}"
        super().__init__(self.global_name)


class PlanetoidUnpickler(pickle.Unpickler):
    """:class:`pickle.Unpickler` that resolves only :data:`ALLOWED` globals."""

    def find_class(self, module: str, name: str) -> Any:
        """The global ``module.name`` if allowed, else :class:`RefusedGlobal` (raised
        before the module is imported)."""
        if (module, name) not in ALLOWED:
            raise RefusedGlobal(module, name)
        if (module, name) == ("_codecs", "encode"):
            return _latin1_encode
        if module.startswith("scipy.sparse"):  # the public name: no deprecation warning
            import scipy.sparse

            return getattr(scipy.sparse, name)
        if module.startswith("numpy.core."):  # numpy 2 moved it to numpy._core
            import numpy

            if hasattr(numpy, "_core"):
                module = module.replace("numpy.core.", "numpy._core.", 1)
        return super().find_class(module, name)


def load_planetoid_pickle(path: Path) -> Any:
    """Unpickle one Planetoid part with :class:`PlanetoidUnpickler` (``latin1``, as the
    Python 2 files need).

    Raises:
        DataError: the file names a global outside :data:`ALLOWED` (one line naming the
            file and the global), or is not a pickle that loads.
    """
    with open(path, "rb") as f:
        try:
            return PlanetoidUnpickler(f, encoding="latin1").load()
        except RefusedGlobal as e:
            raise DataError(
                f"refused to unpickle: the file calls {e.global_name}, which no Planetoid "
                "file holds (only numpy arrays, scipy sparse matrices and a dict of lists "
                "are read); it was not run", path=path, field="pickle global",
                value=e.global_name) from None
        except Exception as e:  # truncated or not a pickle: the unpickler's own words
            reason = str(e).splitlines()[0] if str(e) else ""
            raise DataError(f"cannot unpickle Planetoid part: {type(e).__name__}: {reason}",
                            path=path) from e
