"""``torch.save`` that fails like a file write.

PyTorch reports a failed write (a full disk, say) as ``RuntimeError: [enforce fail at
inline_container.cc:...] PytorchStreamWriter failed writing file ...``, which names neither
the path nor the reason a user can act on. :func:`torch_save` turns it into an
:class:`OSError` carrying the path and, when the disk is full, ``ENOSPC``.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any

import torch

#: Less free space than this after a failed write: the disk is full.
_FULL_BYTES = 1 << 20


def torch_save(obj: Any, path: str | Path, *, target: str | Path | None = None) -> None:
    """``torch.save(obj, path)``; a failed write raises :class:`OSError` naming ``target``
    (the file the user knows, when ``path`` is its temporary sibling; default ``path``).

    Raises:
        OSError: ``ENOSPC`` when the disk is full (or the target is ``/dev/full``),
            else ``EIO`` with PyTorch's message.
    """
    path = Path(path)
    try:
        torch.save(obj, path)
    except RuntimeError as e:
        if "PytorchStreamWriter" not in str(e) and "enforce fail" not in str(e):
            raise
        code = errno.EIO
        try:
            full = (os.path.realpath(path) == "/dev/full"
                    or shutil.disk_usage(path.parent).free < _FULL_BYTES)
        except OSError:
            full = False
        if full:
            code = errno.ENOSPC
        raise OSError(code, os.strerror(code) if full else f"write failed ({e})",
                      str(target or path)) from e
