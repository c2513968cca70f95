"""``dpgnn privacy``: ε of a training plan, or the noise that meets a target ε."""

from __future__ import annotations

import json
import math
from enum import StrEnum
from typing import Annotated, Any

import typer

# Paragraphs are joined into single lines below: the help renderer wraps them itself.
_CONVENTIONS = """\
Conventions: noise multiplier = noise std / L2 sensitivity.

gaussian: --steps T Gaussian releases (GAP's PMA over T hops). Add/remove; sensitivity 1
(edge level, row-normalised features) or sqrt(D) (node level, degree bound D).

poisson-gaussian: DP-SGD over independent rows kept with probability Q (--sampling-rate).
Add/remove; sensitivity C; multiplier = std / C (Opacus's convention).

uniform-gaussian: fixed-size batches without replacement, Q = m/n (DRW: n >= ceil(N/(L+1))).
Replace-one; sensitivity 2C; multiplier = std / (2C) = Opacus's multiplier / 2.

dpgnn: DP-GNN (Daigavane et al., Thm. 1) with --num-train N --batch-size M --max-degree K
--layers R, replace-one; multiplier lambda = std / (2C N(K,R)), N(K,R) = sum of K^i for
i <= R. --level node_feature (default: a node's features and label, structure public;
N(K,R) marked subgraphs) or node (also its own edge list, directed graphs only; 2N(K,R) - 1
marked subgraphs).

Accountants: rdp (every mechanism); pld (tighter; not for uniform-gaussian). Default: the
tightest sound one, pld, and rdp for uniform-gaussian."""
CONVENTIONS = "\n\n".join(" ".join(p.split("\n")) for p in _CONVENTIONS.split("\n\n"))

app = typer.Typer(help="Privacy accounting: epsilon of a plan, or calibrate its noise.",
                  epilog=CONVENTIONS, no_args_is_help=True, rich_markup_mode=None)


class Mechanism(StrEnum):
    gaussian = "gaussian"
    poisson_gaussian = "poisson-gaussian"
    uniform_gaussian = "uniform-gaussian"
    dpgnn = "dpgnn"


class AccountantName(StrEnum):
    rdp = "rdp"
    pld = "pld"


def _plan(mechanism: Mechanism, *, sampling_rate: float | None, steps: int,
          num_train: int | None, batch_size: int | None, max_degree: int | None,
          layers: int | None, level: str = "node_feature") -> Any:
    """Return z -> Ledger for the chosen mechanism, validating the flags it needs."""
    from dpgnn_core.privacy import (
        DpgnnEvent,
        GaussianEvent,
        Ledger,
        PoissonGaussianEvent,
        UniformGaussianEvent,
        neighbourhood_size,
    )
    from dpgnn_core.privacy.events import PrivacyError

    if level not in ("node_feature", "node"):
        raise PrivacyError(f"--level must be node_feature or node, got {level!r}")

    if mechanism in (Mechanism.poisson_gaussian, Mechanism.uniform_gaussian):
        if sampling_rate is None:
            raise PrivacyError(f"--sampling-rate is required for {mechanism.value}")
    if mechanism == Mechanism.dpgnn:
        missing = [n for n, v in (("--num-train", num_train), ("--batch-size", batch_size),
                                  ("--max-degree", max_degree), ("--layers", layers))
                   if v is None]
        if missing:
            raise PrivacyError(f"{', '.join(missing)} required for dpgnn")

    q = float(sampling_rate or 0.0)  # checked above where the mechanism needs it
    dp_level: Any = level

    def plan(z: float) -> Any:
        if mechanism == Mechanism.gaussian:
            return Ledger().add(GaussianEvent(noise_multiplier=z, count=steps))
        if mechanism == Mechanism.poisson_gaussian:
            return Ledger().add(PoissonGaussianEvent(noise_multiplier=z,
                                                     sampling_rate=q, steps=steps),
                                sampler_scheme="poisson")
        if mechanism == Mechanism.uniform_gaussian:
            return Ledger().add(UniformGaussianEvent(noise_multiplier=z,
                                                     sampling_rate=q, steps=steps),
                                sampler_scheme="fixed_size_without_replacement")
        assert max_degree is not None and layers is not None
        assert num_train is not None and batch_size is not None
        occ = neighbourhood_size(max_degree, layers)
        return Ledger().add(DpgnnEvent(noise_multiplier=z, num_train=num_train,
                                       batch_size=batch_size, max_degree=max_degree,
                                       layers=layers, steps=steps, level=dp_level,
                                       marked=occ if level == "node_feature" else 2 * occ - 1),
                            sampler_scheme="fixed_size_without_replacement")

    return plan


Opt = typer.Option
MechOpt = Annotated[Mechanism, Opt(help="Mechanism (see conventions above).")]
QOpt = Annotated[float | None, Opt(help="Q: sampling rate (poisson/uniform-gaussian).")]
TOpt = Annotated[int, Opt(help="T: steps (releases).")]
DOpt = Annotated[float, Opt(help="delta.")]
NOpt = Annotated[int | None, Opt(help="dpgnn: N, training nodes.")]
MOpt = Annotated[int | None, Opt(help="dpgnn: M, batch size.")]
KOpt = Annotated[int | None, Opt(help="dpgnn: K, maximum in-degree.")]
ROpt = Annotated[int | None, Opt(help="dpgnn: R, layers.")]
LOpt = Annotated[str, Opt(help="dpgnn: node_feature or node (see conventions).")]
AOpt = Annotated[AccountantName | None, Opt(
    help="Accountant; default: pld, or rdp for uniform-gaussian (no PLD for it).")]


def _accountant(name: AccountantName | None, mechanism: Mechanism) -> str:
    """The named accountant, or the tightest sound one for ``mechanism``."""
    if name is not None:
        return name.value
    return "rdp" if mechanism == Mechanism.uniform_gaussian else "pld"
JOpt = Annotated[bool, Opt("--json", help="Print one JSON object.")]


def _value_rule(name: str) -> tuple[Any, str]:
    """(test, words) for the option ``name``: what every plan of this command needs."""
    if name in ("noise_multiplier", "epsilon"):
        return (lambda v: math.isfinite(v) and v > 0), "a finite number > 0"
    if name == "delta":
        return (lambda v: 0 < v < 1), "in (0, 1)"
    if name == "sampling_rate":
        return (lambda v: 0 < v <= 1), "in (0, 1]"
    return (lambda v: v >= 1), "an integer >= 1"


def check_options(**values: float | None) -> None:
    """Refuse, naming the option, a value no plan takes (``--noise-multiplier inf`` gave
    numpy warnings and a raw ValueError, ``--steps 0`` named no option: issue 48).

    Raises:
        PrivacyError: ``--option VALUE: must be ...``.
    """
    from dpgnn_core.errors import PrivacyError

    for name, value in values.items():
        if value is None:
            continue
        test, words = _value_rule(name)
        if not test(value):
            raise PrivacyError(f"--{name.replace('_', '-')} {value:g}: must be {words}")


def _fail(e: Exception) -> None:
    typer.secho(f"error: {e}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2) from e


@app.command(epilog=CONVENTIONS)
def epsilon(
    mechanism: MechOpt,
    noise_multiplier: Annotated[float, Opt(help="Noise multiplier (see conventions).")],
    sampling_rate: QOpt = None, steps: TOpt = 1, delta: DOpt = 1e-5,
    num_train: NOpt = None, batch_size: MOpt = None, max_degree: KOpt = None,
    layers: ROpt = None, level: LOpt = "node_feature",
    accountant: AOpt = None, as_json: JOpt = False,
) -> None:
    """Epsilon spent by a plan at a given delta."""
    from dpgnn_core.errors import DpgnnError
    from dpgnn_core.privacy import make_accountant

    try:
        check_options(noise_multiplier=noise_multiplier, sampling_rate=sampling_rate,
                      steps=steps, delta=delta, num_train=num_train, batch_size=batch_size,
                      max_degree=max_degree)
        plan = _plan(mechanism, sampling_rate=sampling_rate, steps=steps, num_train=num_train,
                     batch_size=batch_size, max_degree=max_degree, layers=layers,
                     level=level)
        acc = _accountant(accountant, mechanism)
        eps = make_accountant(acc).epsilon(plan(noise_multiplier), delta)
    except DpgnnError as e:
        _fail(e)
    out = {"epsilon": eps, "delta": delta, "noise_multiplier": noise_multiplier,
           "accountant": acc, "mechanism": mechanism.value, "steps": steps}
    if as_json:
        print(json.dumps(out))
    else:
        typer.echo(f"epsilon = {eps:.6g} at delta = {delta:g} ({mechanism.value}, "
                   f"noise multiplier {noise_multiplier:g}, {steps} steps, "
                   f"{acc} accountant)")


@app.command(epilog=CONVENTIONS)
def calibrate(
    mechanism: MechOpt,
    epsilon: Annotated[float, Opt(help="Target epsilon.")],
    sampling_rate: QOpt = None, steps: TOpt = 1, delta: DOpt = 1e-5,
    num_train: NOpt = None, batch_size: MOpt = None, max_degree: KOpt = None,
    layers: ROpt = None, level: LOpt = "node_feature",
    accountant: AOpt = None, as_json: JOpt = False,
) -> None:
    """Smallest noise multiplier whose plan spends at most the target epsilon."""
    from dpgnn_core.errors import DpgnnError
    from dpgnn_core.privacy import calibrate_noise, make_accountant

    try:
        check_options(epsilon=epsilon, sampling_rate=sampling_rate, steps=steps, delta=delta,
                      num_train=num_train, batch_size=batch_size, max_degree=max_degree)
        plan = _plan(mechanism, sampling_rate=sampling_rate, steps=steps, num_train=num_train,
                     batch_size=batch_size, max_degree=max_degree, layers=layers,
                     level=level)
        acc = _accountant(accountant, mechanism)
        cal = calibrate_noise(plan, epsilon, delta, make_accountant(acc))
    except DpgnnError as e:
        _fail(e)
    out = {"epsilon": cal.epsilon, "target_epsilon": epsilon, "delta": delta,
           "noise_multiplier": cal.noise_multiplier, "accountant": acc,
           "mechanism": mechanism.value, "steps": steps}
    if as_json:
        print(json.dumps(out))
    else:
        typer.echo(f"noise multiplier {cal.noise_multiplier:.6g} gives epsilon = "
                   f"{cal.epsilon:.6g} <= {epsilon:g} at delta = {delta:g} "
                   f"({mechanism.value}, {steps} steps, {acc} accountant)")
