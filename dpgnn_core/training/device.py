"""Device choice: CUDA when present, CPU otherwise, overridable."""

from __future__ import annotations

import torch

from dpgnn_core.errors import DeviceError


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` picks CUDA when available; ``cuda`` without a GPU is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceError("device 'cuda' requested but torch sees no CUDA device")
    return torch.device(name)
