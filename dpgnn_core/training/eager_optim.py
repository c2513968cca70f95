"""An optimiser step, and ``torch.optim.Optimizer``'s ``add_param_group``, ``zero_grad``,
``state_dict`` and ``load_state_dict``, without importing ``torch._dynamo``.

torch imports ``torch._dynamo`` (with sympy: ~1.3 s of CPU) the first time a process builds
an optimiser or takes a step, for ``torch.compile`` only: the four methods are wrapped by
``torch._disable_dynamo`` (whose first call builds a wrapper that keeps a compile trace out
of them), and every optimiser's ``step`` by ``_use_grad_for_differentiable``, which imports
it to call ``torch._dynamo.graph_break()`` (nothing, outside a trace) around the update.
Every process that trained paid it: each `dpgnn run`, each sweep worker, each test process.
dpgnn compiles nothing. Here, while ``torch._dynamo`` is not imported (so no trace can be
running):

* :func:`install` puts :class:`_Eager` where torch caches the wrapper of the four methods
  (``fn.__dynamo_disable``, read at each call): it calls the function itself, or torch's
  own wrapper once ``torch._dynamo`` is imported (someone compiles);
* :func:`step` runs the optimiser's own update as ``_use_grad_for_differentiable`` does
  (gradients off unless the optimiser is ``differentiable``), inside torch's step wrapper's
  profiler record, without the two graph breaks. With ``torch._dynamo`` imported, or a step
  hook registered (which torch's wrapper runs), it is ``optimizer.step()``.

Why by hand: torch has no switch for either. tests/dpgnn_core/test_eager_optim.py checks
both against torch's own calls, bit for bit, and that training imports no ``torch._dynamo``;
torch is pinned (2.13.0), and where its functions are not wrapped as expected the plain
calls are made.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.optim import optimizer as _optimizer

__all__ = ["METHODS", "install", "step"]

#: The Optimizer methods torch 2.13 wraps with ``torch._disable_dynamo``.
METHODS = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")
_ATTR = "__dynamo_disable"  # torch._compile's cache attribute (not name-mangled there)


class _Eager:
    """Stands in for torch's cached wrapper of ``fn``: ``fn`` itself while
    ``torch._dynamo`` is not imported, else ``torch._dynamo.disable(fn)`` as torch builds it."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.disabled: Callable[..., Any] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if "torch._dynamo" not in sys.modules:
            return self.fn(*args, **kwargs)
        if self.disabled is None:
            import torch._dynamo

            self.disabled = torch._dynamo.disable(self.fn, True, wrapping=False)
        return self.disabled(*args, **kwargs)


def install() -> list[str]:
    """Put :class:`_Eager` on the four methods' functions, unless torch already cached its
    wrapper there; returns the methods it changed."""
    done = []
    for name in METHODS:
        fn = getattr(getattr(torch.optim.Optimizer, name, None), "__wrapped__", None)
        if fn is None or getattr(fn, _ATTR, None) is not None:
            continue
        setattr(fn, _ATTR, _Eager(fn))
        done.append(name)
    return done


def _hooked(optimizer: torch.optim.Optimizer) -> bool:
    return bool(_optimizer._global_optimizer_pre_hooks or _optimizer._global_optimizer_post_hooks
                or optimizer._optimizer_step_pre_hooks or optimizer._optimizer_step_post_hooks)


@functools.cache
def _update(wrapped: Callable[..., Any]) -> Callable[..., Any] | None:
    """The optimiser's own update under a class's ``step`` (looked up once per class's
    step); None where that step is not torch's two wrappers around it."""
    update: Callable[..., Any] = inspect.unwrap(wrapped)
    if update is wrapped or getattr(wrapped, "__wrapped__", None) is update:
        return None
    return update


def step(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.step()`` (no closure), without importing ``torch._dynamo`` (module
    docstring)."""
    update = _update(type(optimizer).step)
    if update is None or "torch._dynamo" in sys.modules or _hooked(optimizer):
        optimizer.step()
        return
    with torch.autograd.profiler.record_function(
            f"Optimizer.step#{type(optimizer).__name__}.step"):
        with torch.set_grad_enabled(bool(optimizer.defaults.get("differentiable", False))):
            update(optimizer)
        optimizer._optimizer_step_code()
