"""An optimiser step and the four wrapped Optimizer methods without torch._dynamo
(dpgnn_core/training/eager_optim.py): the same numbers as torch's own calls, no
torch._dynamo import in a training process, and torch's way back whenever it matters."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from dpgnn_core.training import eager_optim
from dpgnn_core.training.optim import adam


def _train(make: str, use_eager: bool, steps: int = 7) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    params = list(model.parameters())
    opt = (adam(params, lr=0.05, weight_decay=1e-3) if make == "adam"
           else torch.optim.SGD(params, lr=0.1, momentum=0.9))
    x, y = torch.randn(16, 5), torch.randint(0, 3, (16,))
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()  # type: ignore[no-untyped-call]
        if use_eager:
            eager_optim.step(opt)
        else:
            opt.step()
    state = opt.state_dict()
    opt.load_state_dict(state)
    return [p.detach().clone() for p in params]


@pytest.mark.parametrize("make", ["adam", "sgd"])
def test_a_step_is_torchs_step_bit_for_bit(make: str) -> None:
    ours, torchs = _train(make, True), _train(make, False)
    assert all(torch.equal(a, b) for a, b in zip(ours, torchs, strict=True))


_FRESH = """
import sys, torch
from dpgnn_core.training import eager_optim
from dpgnn_core.training.optim import adam
p = torch.nn.Parameter(torch.zeros(3))
opt = adam([p], lr=0.1, weight_decay=0.0)
for _ in range(3):
    opt.zero_grad()
    p.grad = torch.ones(3)
    eager_optim.step(opt)
opt.load_state_dict(opt.state_dict())
opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(2))]})
print("ours", "torch._dynamo" in sys.modules)
opt.step()  # torch's own step imports it: what the module avoids
print("torch", "torch._dynamo" in sys.modules)
# Now that it is imported (as in a process that compiles), torch's wrapper is used.
cached = getattr(torch.optim.Optimizer.zero_grad.__wrapped__, "__dynamo_disable")
opt.zero_grad()
print(type(cached).__name__, p.grad is None, cached.disabled is not None)
"""


def test_training_imports_no_torch_dynamo_and_torchs_wrapper_is_used_once_it_is() -> None:
    r = subprocess.run([sys.executable, "-c", _FRESH], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines()[-3:] == ["ours False", "torch True", "_Eager True True"], \
        r.stdout


def test_a_step_hook_gets_torchs_step() -> None:
    p = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([p], lr=1.0)
    seen: list[int] = []
    handle = opt.register_step_post_hook(lambda *_: seen.append(1))
    p.grad = torch.ones(2)
    eager_optim.step(opt)
    handle.remove()
    assert seen == [1] and p.tolist() == [-1.0, -1.0]
