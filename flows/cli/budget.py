"""``dpgnn budget``: the per-dataset privacy budget (set, show, reset) over the odometer in
``$DPGNN_HOME/budget.sqlite`` (:mod:`dpgnn_core.budget`)."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(help="The privacy budget of each dataset: every private run, sweep point "
                  "and scheduled run spends from it, and is refused before training when "
                  "it would exceed it.", no_args_is_help=True, rich_markup_mode=None)


#: Said under every odometer: what the two figures are (docs/privacy.md, the odometer).
POST_HOC = ("spent ε per unit is post hoc: the tightest sound ε of the fixed sequence of "
            "releases recorded, counting each in every unit it bears on (∞: a release "
            "bounds nothing about that unit). Runs are admitted by the privacy filter fixed "
            "at `budget set`, which holds when each run is chosen after seeing earlier "
            "ones and can refuse a run the post hoc figure would fit (docs/privacy.md, "
            "\"Privacy budget across runs\")")


def error(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)


def _reason(e: Exception) -> str:
    """One line for an error of a budget command; the budget store's database errors
    (``attempt to write a readonly database`` in a read-only home) name the store and
    the home, as a raw ``OperationalError`` traceback did not."""
    if not isinstance(e, sqlite3.Error):
        return str(e)
    from dpgnn_core.budget import default_store_path
    from dpgnn_core.home import project_dir

    home = project_dir()
    return (f"cannot use the budget store {default_store_path(home)}: {e} (is the project "
            f"home {home} read-only? the store writes there)")


def _store() -> Any:
    from dpgnn_core.budget import BudgetStore, default_store_path
    from dpgnn_core.home import project_dir

    return BudgetStore(default_store_path(project_dir()))


def _dataset(key: str) -> tuple[str, str, str | None]:
    """(sha256, name, folder) of a dataset folder, or of a dataset the store knows by
    sha256 (prefix), folder or name."""
    folder = Path(key)
    if (folder / "manifest.json").is_file():
        from dpgnn_core.data.manifest import load_manifest, quick_problem
        from dpgnn_core.errors import DataError

        m = load_manifest(folder / "manifest.json")
        problem = quick_problem(folder, m)  # light: the manifest's hash and file sizes
        if problem is not None:
            raise DataError(f"refused: {problem}", path=folder / "manifest.json",
                            field="manifest_sha256", value=m.get("manifest_sha256"))
        return str(m["content_sha256"]), str(m.get("name") or folder.name), \
            str(folder.resolve())
    store = _store()
    bid = store.resolve(str(folder.resolve()) if folder.exists() else key)
    s = store.summary(bid)
    v = s.datasets[-1]
    return str(v["sha256"]), str(v["name"]), v["path"]


def _budget_of(store: Any, key: str) -> str:
    """The budget id of the dataset ``key`` names (:func:`_dataset`). A folder re-ingested
    since its last recorded run holds a version the store has not seen yet, which shares
    the folder's budget (:meth:`~dpgnn_core.budget.BudgetStore.register`): the folder's
    budget, found by its path."""
    from dpgnn_core.errors import PrivacyError

    sha, _, folder = _dataset(key)
    try:
        return str(store.resolve(sha))
    except PrivacyError:
        if folder is None:
            raise
        return str(store.resolve(folder))


def _check_delta(folder: str | None, delta: float, allowed: bool) -> str:
    """Refuse a budget δ of at least 1/N_train, as ``dpgnn run`` refuses a run's
    (:func:`dpgnn_core.methods.preflight.check_privacy`): publishing one training record at
    random is (0, 1/N_train)-DP, so such a δ bounds nothing. N_train is read from the
    dataset's manifest; a dataset known only to the store (its folder gone) is held to
    δ < 1/2, which no dataset of two training records or more meets. Returns the note the
    log records when ``allowed`` (``--allow-large-delta``) lets a large δ through."""
    from dpgnn_core.errors import PrivacyError

    manifest = Path(folder) / "manifest.json" if folder else None
    n = 2
    if manifest is not None and manifest.is_file():
        n = int((json.loads(manifest.read_text()).get("split_counts") or {})
                .get("train", 0)) or 2
    if delta < 1.0 / n:
        return ""
    if allowed:
        return f"δ = {delta:g} >= 1/N_train = 1/{n}, allowed by --allow-large-delta"
    raise PrivacyError(
        f"--delta {delta:g} >= 1/N_train = 1/{n} = {1.0 / n:.3g}"
        + (f" ({manifest}: split_counts.train = {n})" if manifest is not None else "")
        + ": publishing one training record at random is (0, 1/N_train)-DP, so this δ does "
        f"not rule out leaking a record; use δ below {1.0 / (10 * n):.3g} (1/(10 N_train), "
        "the runs' default) or pass --allow-large-delta, which the budget's log records")


def same_graph_elsewhere(found: list[tuple[Path, dict[str, Any]]]) -> dict[Path, list[str]]:
    """For ``dpgnn datasets``: per dataset folder, the other folders listed and the budgets
    of the store that hold the same graph (edges and features; issue 48 §3), each named by
    its folder (or name) and budget id. Reads the store only when it exists."""
    from dpgnn_core.data.fingerprint import graph_fingerprint
    from dpgnn_core.home import project_dir

    prints = {p: graph_fingerprint(m) for p, m in found}
    # dpgnn_core.budget's default_store_path, spelled out: importing the budget module pulls
    # in the accountants (SciPy, dp-accounting), which `dpgnn datasets` must not pay for a
    # home without a budget store (tests/flows/test_cli.py).
    path = project_dir() / "budget.sqlite"
    store = _store() if path.is_file() else None
    out: dict[Path, list[str]] = {}
    for p, fp in prints.items():
        if fp is None:
            continue
        mine = str(p.resolve())
        others = {str(q.resolve()): str(q) for q, g in prints.items() if g == fp and q != p}
        if store is not None:
            for b in store.budgets_of_graph(fp):
                if b["path"] != mine:
                    others.setdefault(b["path"] or b["name"],
                                      f"{b['path'] or b['name']} (budget "
                                      f"{b['budget_id'][:12]})")
        if others:
            out[p] = sorted(others.values())
    return out


#: What a budget shares with another of the same graph (``budget show``, ``datasets``).
SAME_GRAPH = ("the same graph (edges and features) has another privacy budget: the "
              "releases of both compose, and neither budget counts the other's "
              "(docs/privacy.md, \"Other rules\")")


def _fmt(x: float | None) -> str:
    return "-" if x is None else ("inf" if math.isinf(x) else f"{x:.4g}")


def _print(summary: Any, same: list[dict[str, Any]] | None = None) -> None:
    from dpgnn_core.budget import UNIT_WORDS

    b = summary.budget
    typer.echo(f"{b.name}  (budget id {b.budget_id[:12]}, {len(summary.datasets)} "
               f"version{'s' if len(summary.datasets) != 1 else ''})")
    if same:
        typer.echo(f"  same graph: {SAME_GRAPH}: " + "; ".join(
            f"{o['path'] or o['name']} (budget id {o['budget_id'][:12]})" for o in same))
    typer.echo("  budget: " + (f"ε = {b.epsilon:g} at δ = {b.delta:g} per protected unit"
                               + (f" (protected: {', '.join(b.filter.units)})"
                                  if b.filter is not None and b.filter.units else
                                  " (protected: the unit of the epoch's first release)")
                               if b.epsilon is not None else
                               "none set (runs proceed; the odometer records them)"))
    if b.filter is not None:
        typer.echo(f"  admission: {b.filter.describe()}")
    _print_guarantee(summary)
    if not summary.spent:
        typer.echo("  spent: " + ("∞ on every unit: " + summary.void_note()
                                  if summary.void_since is not None else "nothing yet"))
    for unit, sp in summary.spent.items():
        rem = summary.remaining(unit)
        f = summary.filter.get(unit)
        rem = rem if f is not None else None  # the budget bounds protected units only
        state = (" (not protected by the budget)" if f is None and b.epsilon is not None
                 else "" if f is None else
                 "; filter: protected, VOID (bounds nothing since release "
                 f"{summary.void_since})" if summary.void_since is not None else
                 f"; filter: protected, {_fmt(100 * f.fits)} % of its bound used"
                 + (f" ({f.note})" if f.note else ""))
        typer.echo(f"  spent on {unit} ({UNIT_WORDS.get(unit, unit)}): post hoc ε = "
                   f"{_fmt(sp.epsilon)} at δ = {sp.delta:.3g}"
                   + (f", remaining ε (post hoc) = {_fmt(rem)}" if rem is not None else "")
                   + state + f"  [{sp.method}"
                   + (f"; unbounded by {', '.join(sp.unbounded)}" if sp.unbounded else "")
                   + "]")
    if summary.spent:
        typer.echo(f"  note: {POST_HOC}")
    if summary.records:
        typer.echo("  releases:")
        typer.echo(f"    {'id':>4}  {'time (UTC)':<25} {'status':<16} {'method':<10} "
                   f"{'unit':<14} {'own ε':>8}  release")
        for r in summary.records:
            typer.echo(f"    {r.id:>4}  {r.created:<25} {r.status:<16} {r.method:<10} "
                       f"{','.join(sorted(r.charge.units())) or '-':<14} "
                       f"{_fmt(r.epsilon):>8}  {(r.release_id or '-')[:12]}"
                       + (f"  ({r.note})" if r.note else ""))
    ends = [i for i, e in enumerate(summary.log) if e["action"] in ("reset", "replace")]
    for i, e in enumerate(summary.log):  # every epoch's end; this epoch's lowerings
        if e["action"] in _ACTIONS and (e["action"] != "lower" or i > max(ends, default=-1)):
            detail = e["detail"].split("; protected units")[0].split("; privacy filter")[0]
            typer.echo(f"  {_ACTIONS[e['action']]} at {e['time']}: {detail}")


#: How ``budget show`` names the log's budget changes.
_ACTIONS = {"reset": "reset (epoch ended)", "replace": "replaced (epoch ended)",
            "lower": "lowered"}


def _print_guarantee(summary: Any) -> None:
    """The epoch's guarantee: the filter fixed before its first release, what a lowering
    or a release without privacy did to it."""
    b = summary.budget
    g = b.stated
    if g is None:
        return
    late = b.covers_from
    line = (f"  guarantee of epoch {b.epoch}: ε = {g.epsilon:g} at δ = {g.delta:g} per "
            "protected unit " + (
                "(the filter fixed before the epoch's first release)" if late is None else
                f"for the releases after release {late['after_release']} only (the budget "
                f"was set at {late['time']}, after {late['releases']} release(s) of this "
                "epoch, which no guarantee covers: their post hoc ε is under spent; the "
                "filter counts them too, so it admits less)"))
    if b.lowered:
        line += (f"; admission lowered within the epoch to ε = {b.epsilon:g} at δ = "
                 f"{b.delta:g} (runs need both filters; a bound chosen after seeing "
                 "releases is not a guarantee fixed in advance)")
    if summary.void_since is not None:
        line += f"; VOID: {summary.void_note()}"
    typer.echo(line)


@app.command("set", help="Set the budget of DATASET (a dataset folder, or a sha256 prefix or "
             "name the store knows): every protected unit's cumulative ε at δ stays below.")
def set_(
    dataset: Annotated[str, typer.Argument(help="Dataset folder (or sha256 prefix / name).")],
    epsilon: Annotated[float, typer.Option(help="Budget ε per protected unit.")],
    delta: Annotated[float, typer.Option(help="δ the cumulative ε is stated at.")],
    unit: Annotated[list[str] | None, typer.Option(
        "--unit", help="A protected unit (repeat for several): edge, node, node_row, "
        "node_feature, graph, record. Every run must bound each (default: the unit of the "
        "first run).")] = None,
    replace: Annotated[bool, typer.Option(
        "--replace", help="Raise or replace a budget whose epoch has released something: "
        "ends that epoch's guarantee here and starts a new epoch under the new budget "
        "(recorded; asks unless --yes). Without it only a lower budget the releases still "
        "fit is accepted.")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    reason: Annotated[str, typer.Option(help="Why (recorded).")] = "",
    allow_large_delta: Annotated[bool, typer.Option(
        "--allow-large-delta", help="Accept a δ of at least 1/N_train, which does not rule "
        "out leaking a whole record (refused otherwise, as `dpgnn run` refuses it; "
        "recorded in the budget's log).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    from dpgnn_core.errors import DpgnnError

    try:
        sha, name, path = _dataset(dataset)
        large = _check_delta(path, delta, allow_large_delta)
        reason = "; ".join(x for x in (reason, large) if x)
        store = _store()
        if replace and not yes and not typer.confirm(
                "replace the budget: the guarantee of its current epoch ends here and a new "
                "epoch starts under the new budget?"):
            error("not replaced")
            raise typer.Exit(1)
        store.set_budget(sha, name, path, epsilon, delta, unit or None, replace=replace,
                         reason=reason)
        summary = store.summary(store.resolve(sha))
        over = [u for u, f in summary.filter.items() if not f.admits]
    except (DpgnnError, OSError, ValueError, sqlite3.Error) as e:
        error(_reason(e))
        raise typer.Exit(2) from e
    if as_json:
        typer.echo(json.dumps(summary.to_dict(), default=str))
        return
    _print(summary)
    for u in over:
        typer.echo(f"warning: unit {u} already exceeds this budget's filter: every "
                   "further private run bearing on it will be refused", err=True)


@app.command(help="What each dataset has spent (composition of every recorded release, per "
             "protected unit), its budget, what remains, and the releases.")
def show(
    dataset: Annotated[str | None, typer.Argument(
        help="Dataset folder, sha256 prefix or name (default: every dataset).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    plot: Annotated[bool, typer.Option(
        "--plot", help="Also write a PNG of cumulative ε over time per dataset and unit "
        "($DPGNN_HOME/budget/epsilon_over_time.png).")] = False,
    all_epochs: Annotated[bool, typer.Option(
        "--all", help="Also list the releases from before a reset.")] = False,
) -> None:
    from dpgnn_core.errors import DpgnnError
    from dpgnn_core.home import project_dir

    try:
        store = _store()
        ids = [_budget_of(store, dataset)] if dataset else store.budget_ids()
        summaries = [store.summary(i, all_epochs=all_epochs) for i in ids]
        same = [store.same_graph(i) for i in ids]
        out: dict[str, Any] = {"store": str(store.path), "datasets": [
            {**s.to_dict(), **({"note": POST_HOC} if s.spent else {}), "same_graph": o}
            for s, o in zip(summaries, same, strict=True)]}
        if plot:
            from dpgnn_core import plots

            series: dict[str, list[tuple[str, float]]] = {}
            caps: dict[str, float | None] = {}
            for i, s in zip(ids, summaries, strict=True):
                for unit, pts in store.timeline(i).items():
                    label = f"{s.budget.name} ({unit})"
                    series[label], caps[label] = pts, s.budget.epsilon
            out["plot"] = str(plots.budget_over_time(
                series, caps, project_dir() / "budget" / "epsilon_over_time.png"))
    except (DpgnnError, OSError, ValueError, sqlite3.Error) as e:
        error(_reason(e))
        raise typer.Exit(2) from e
    if as_json:
        typer.echo(json.dumps(out, default=str))
        return
    if not summaries:
        typer.echo(f"no dataset in {store.path} yet (no private run, no budget set)")
    for s, o in zip(summaries, same, strict=True):
        _print(s, o)
    if plot:
        typer.echo(f"plot: {out['plot']}")


@app.command(help="Start DATASET's odometer again (explicit, recorded in its log; earlier "
             "releases stay listed with --all). A reset does not make earlier releases "
             "private again: use it only when the data owner accepts that.")
def reset(
    dataset: Annotated[str, typer.Argument(help="Dataset folder, sha256 prefix or name.")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    reason: Annotated[str, typer.Option(help="Why (recorded).")] = "",
) -> None:
    from dpgnn_core.errors import DpgnnError

    try:
        store = _store()
        bid = store.resolve(_dataset(dataset)[0])
        s = store.summary(bid)
    except (DpgnnError, OSError, ValueError, sqlite3.Error) as e:
        error(_reason(e))
        raise typer.Exit(2) from e
    spent = ", ".join(f"{u} ε = {_fmt(v.epsilon)}" for u, v in s.spent.items()) or "nothing"
    if not yes and not typer.confirm(f"reset the privacy odometer of {s.budget.name} "
                                     f"(spent: {spent})? Earlier releases stay public"):
        error("not reset")
        raise typer.Exit(1)
    store.reset(bid, reason or "dpgnn budget reset")
    typer.echo(f"reset {s.budget.name}: it had spent {spent}; recorded in its log")
