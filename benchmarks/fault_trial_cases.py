"""Fault-trial cases (benchmarks/fault_trial.py): security, data loss, environment, privacy
claims, charges and the raw errors of issue 48's table."""
# ruff: noqa: E501 - tables of cases, one per line
from __future__ import annotations

import pickle
import re
import shutil
from pathlib import Path

from fault_trial import (
    DATA,
    DPGNN,
    HOME,
    MARKER,
    PY,
    ROOT,
    Case,
    Payload,
    W,
    dp,
    nodes_csv,
    planetoid_copy,
    sh,
    write,
)


# ---------------------------------------------------------------- cases
def no_marker_ok(r: dict) -> str | None:
    """The payload must not have run."""
    return "payload ran" if r["marker"] else None


def security_cases() -> list[Case]:
    """Crafted pickles and YAML tags must not run code."""
    cs = []
    for bad, how, nested in [("x", "os", False), ("graph", "os", False), ("ally", "eval", False),
                             ("y", "subprocess", False), ("graph", "os", True),
                             ("tx", "eval", True), ("allx", "subprocess", False)]:
        name = "citeseer" if bad == "x" and how == "os" else "cora"
        src = planetoid_copy(name, bad, how, nested)
        cs.append(Case(f"pickle-{bad}-{how}{'-nested' if nested else ''}", "security",
                       dp("ingest", "--format", "planetoid", "--source", src,
                          "--out", W / f"out-pk-{bad}-{how}-{nested}"),
                       mention=[f"ind.{name}.{bad}"], check=no_marker_ok))
    yml = write("sweeps/evil.yaml", f"""name: evil
epsilons: [1]
seeds: [0]
dataset: !!python/object/apply:os.system ["touch {MARKER}"]
methods: [{{method: dp-mlp}}]
""")
    cs.append(Case("yaml-python-tag-sweep", "security", dp("sweep", yml), check=no_marker_ok))
    cfg = write("cfg/evil.yaml", f"steps: !!python/object/apply:os.system ['touch {MARKER}']\n")
    cs.append(Case("yaml-python-tag-run-config", "security",
                   dp("run", "dp-mlp", "--dataset", W / "ds/syn", "--config", cfg),
                   check=no_marker_ok))
    mat = write("evil.mat", pickle.dumps(Payload()))
    cs.append(Case("pickle-as-mat", "security",
                   dp("ingest", "--format", "facebook100", "--source", mat, "--out", W / "out-pkmat"),
                   mention=["evil.mat"], check=no_marker_ok))
    return cs


def overwrite_cases(ds: dict[str, Path]) -> list[Case]:
    """--overwrite must replace only a dataset folder."""
    plain, notds = W / "plainfile.txt", W / "notds"
    syn = ["--format", "synthetic", "-o", "num_nodes=300"]
    lnk = W / "link-to-notds"
    if not lnk.exists():
        lnk.symlink_to(notds)
    mixed = W / "ds-with-user-file"

    def mk_mixed() -> None:
        if not mixed.exists():
            sh(dp("ingest", *syn, "--out", mixed))
            (mixed / "notes.txt").write_text("my notes\n")

    def ok_replaced(r: dict) -> str | None:
        return None if r["rc"] == 0 else "a dataset folder could not be overwritten"

    return [
        Case("overwrite-regular-file", "data-loss", dp("ingest", *syn, "--out", plain, "--overwrite"),
             protect=[plain], mention=["plainfile.txt"]),
        Case("overwrite-non-dataset-folder", "data-loss",
             dp("ingest", *syn, "--out", notds, "--overwrite"), protect=[notds], mention=["notds"]),
        Case("overwrite-symlink-to-folder", "data-loss",
             dp("ingest", *syn, "--out", lnk, "--overwrite"), protect=[notds], mention=["link-to-notds", "notds"]),
        Case("overwrite-home", "data-loss", dp("ingest", *syn, "--out", HOME, "--overwrite"),
             protect=[HOME / "budget.sqlite", HOME / "mlflow.db"]),
        Case("overwrite-folder-of-datasets", "data-loss",
             dp("ingest", *syn, "--out", W / "ds", "--overwrite"), protect=[ds["cora"], ds["reed"]]),
        Case("no-overwrite-existing-dataset", "data-loss", dp("ingest", *syn, "--out", ds["victim"]),
             protect=[ds["victim"]], mention=["victim", "--overwrite"]),
        Case("no-overwrite-non-dataset-folder", "data-loss", dp("ingest", *syn, "--out", notds),
             protect=[notds], mention=["notds"]),
        Case("overwrite-dataset-with-user-file", "data-loss",
             dp("ingest", *syn, "-o", "seed=3", "--out", mixed, "--overwrite"), setup=mk_mixed,
             protect=[mixed / "notes.txt"]),
        Case("overwrite-real-dataset-ok", "data-loss",
             dp("ingest", *syn, "-o", "seed=9", "--out", ds["victim"], "--overwrite"), expect="ok",
             check=ok_replaced),
        Case("out-under-a-file", "data-loss", dp("ingest", *syn, "--out", plain / "sub"),
             protect=[plain], mention=["plainfile.txt"]),
        Case("out-empty-string", "data-loss", dp("ingest", *syn, "--out", "")),
    ]


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def env_cases(ds: dict[str, Path]) -> list[Case]:
    """Bad environment variables."""
    empty_cwd = W / "emptycwd"
    empty_cwd.mkdir(exist_ok=True)

    def cwd_clean(r: dict) -> str | None:
        left = [p.name for p in empty_cwd.iterdir()]
        return f"wrote {left} into the working folder" if left else None

    ro = W / "rohome"
    fileh = write("home-is-a-file", "x")

    def mk_ro() -> None:
        if not ro.exists():
            shutil.copytree(HOME, ro, ignore=shutil.ignore_patterns("prefect", "locks"))
            for p in [ro, *ro.rglob("*")]:
                p.chmod(0o555 if p.is_dir() else 0o444)

    run = dp("run", "dp-mlp", "--dataset", ds["syn"], "--epsilon", "1", "--steps", "2")
    cs = [
        Case("home-empty-show", "env", dp("budget", "show"), env={"DPGNN_HOME": ""},
             cwd=empty_cwd, check=cwd_clean, mention=["DPGNN_HOME", "home"]),
        Case("home-empty-run", "env", run, env={"DPGNN_HOME": ""}, cwd=empty_cwd, check=cwd_clean,
             mention=["DPGNN_HOME", "home"]),
        Case("home-blank-spaces", "env", dp("budget", "show"), env={"DPGNN_HOME": "   "},
             cwd=empty_cwd, check=cwd_clean),
        Case("home-is-a-file", "env", dp("budget", "show"), env={"DPGNN_HOME": str(fileh)},
             mention=["home-is-a-file"], protect=[fileh]),
        # as an unprivileged user: root writes through a read-only mode
        Case("home-read-only-show", "env", [*NOBODY, *dp("budget", "show")], env={"DPGNN_HOME": str(ro)},
             setup=mk_ro, expect="either", mention=[str(ro)]),
        Case("home-read-only-run", "env", [*NOBODY, *run], env={"DPGNN_HOME": str(ro)}, setup=mk_ro,
             mention=[str(ro)]),
        Case("home-flag-empty", "env", [DPGNN, "--home", "", "budget", "show"], cwd=empty_cwd,
             check=cwd_clean),
    ]
    for v in ["abc", "-1", "0", "nan", "inf", "1e400", ""]:
        cs.append(Case(f"checkpoint-seconds-{v or 'empty'}", "env", run,
                       env={"DPGNN_CHECKPOINT_SECONDS": v}, mention=["DPGNN_CHECKPOINT_SECONDS"],
                       expect="refuse" if v not in ("", "0") else "ok", timeout=60))
    for v in ["fancy", "1"]:
        cs.append(Case(f"progress-{v}", "env", dp("privacy", "epsilon", "--mechanism", "gaussian",
                                                   "--noise-multiplier", "1"),
                       env={"DPGNN_PROGRESS": v}, expect="either"))
    for name, val in [("spec-not-json", "{method: dp-mlp"), ("spec-bad-method", '{"method": "nope"}'),
                      ("spec-bad-eps", '{"method": "dp-mlp", "epsilon": -1}'),
                      ("ingest-not-json", "[1,"), ]:
        var = "DPGNN_RETRAIN_INGEST" if name.startswith("ingest") else "DPGNN_RETRAIN_SPEC"
        cs.append(Case(f"serve-{name}", "env", [PY, str(ROOT / "deployments/serve.py"),
                                                "private-retrain"],
                       env={var: val, "PREFECT_API_URL": "http://127.0.0.1:9/api"},
                       mention=[var], timeout=40, limit=15))
    return cs


def budget_cases(ds: dict[str, Path]) -> list[Case]:
    """Privacy claims: budgets, deltas, unaccounted releases on a budgeted dataset."""
    b, s = ds["synb"], ds["syn"]
    cs = []
    for v in ["0.5", "0", "-1", "nan", "inf", "1", "abc", "1e-400"]:
        cs.append(Case(f"budget-set-delta-{v}", "privacy-claims",
                       dp("budget", "set", ds["cora"], "--epsilon", "4", "--delta", v),
                       mention=["delta", "δ", v]))
    for v in ["0", "-1", "nan", "inf", "abc", "1e400"]:
        cs.append(Case(f"budget-set-epsilon-{v}", "privacy-claims",
                       dp("budget", "set", ds["cora"], "--epsilon", v, "--delta", "1e-5"),
                       mention=["epsilon", "ε", v]))
    cs += [
        Case("budget-set-unknown-dataset", "privacy-claims",
             dp("budget", "set", "no-such-ds", "--epsilon", "4", "--delta", "1e-5"), mention=["no-such-ds"]),
        Case("budget-set-unit-bogus", "privacy-claims",
             dp("budget", "set", ds["cora"], "--epsilon", "4", "--delta", "1e-5", "--unit", "bogus"),
             mention=["bogus"]),
        Case("budget-show-unknown", "privacy-claims", dp("budget", "show", "zzzz-none"), mention=["zzzz-none"]),
        Case("budget-reset-unknown", "privacy-claims", dp("budget", "reset", "zzzz-none", "--reason", "x"),
             mention=["zzzz-none"]),
    ]

    def no_false_fixed_before(r: dict) -> str | None:
        show = sh(dp("budget", "show", s)).stdout
        m = re.search(r"(\d+(?:\.\d+)?) ?% of its bound", show)
        if "fixed before" in show and m and float(m.group(1)) > 100:
            return "budget show claims a filter fixed before releases that exceed it: " + m.group(0)
        return None

    cs.append(Case("budget-set-after-releases", "privacy-claims",
                   dp("budget", "set", s, "--epsilon", "1", "--delta", "1e-4"),
                   expect="either", check=no_false_fixed_before))
    for flag in [["--log-raw-loss"], ["--clip-percentile", "75"], ["--select-on-validation"]]:
        cs.append(Case(f"budgeted-{flag[0].strip('-')}", "privacy-claims",
                       dp("run", "dp-gcn", "--dataset", b, "--epsilon", "1", "--steps", "2", *flag),
                       mention=["--allow-non-private-release"]))
    for m in ["gcn", "mlp"]:
        cs.append(Case(f"budgeted-non-private-{m}", "privacy-claims",
                       dp("run", m, "--dataset", b, "--epochs", "2"), mention=["--allow-non-private-release"]))
    cs.append(Case("budgeted-non-private-flag", "privacy-claims",
                   dp("run", "dp-mlp", "--dataset", b, "--non-private", "--steps", "2"),
                   mention=["--allow-non-private-release"]))
    cs.append(Case("budgeted-exceeds", "privacy-claims",
                   dp("run", "dp-mlp", "--dataset", b, "--epsilon", "5", "--steps", "2"),
                   mention=["budget"], limit=5))
    cs.append(Case("budgeted-insecure-noise", "privacy-claims",
                   dp("run", "dp-mlp", "--dataset", b, "--epsilon", "1", "--steps", "2",
                      "--insecure-reproducible-noise"), expect="refuse"))
    sym = write("csv/sym/edges.csv", "src,dst\n" + "".join(
        f"{i},{(i + 1) % 20}\n{(i + 1) % 20},{i}\n" for i in range(20)))
    symn = write("csv/sym/nodes.csv", nodes_csv(20))

    def warns_undirected(r: dict) -> str | None:
        return None if "--undirected" in r["err"] + r["out"] else "no warning naming --undirected"

    cs.append(Case("symmetric-csv-warns", "privacy-claims",
                   dp("ingest", "--format", "csv", "--source", sym, "--nodes", symn,
                      "--id-col", "id", "--out", W / "out-sym"), expect="ok", check=warns_undirected))

    def lists_twin(r: dict) -> str | None:
        return None if re.search(r"same (graph|edges)", r["out"] + r["err"], re.I) else \
            "no note of the two folders holding the same graph"

    cs.append(Case("datasets-lists-same-graph", "privacy-claims", dp("datasets", W / "ds"),
                   expect="ok", check=lists_twin))
    return cs


def charge_cases(ds: dict[str, Path]) -> list[Case]:
    """Charged twice, or charged and then failed."""
    b = ds["synb"]
    cs = []
    for v in ["inf", "nan", "0", "-1", "1e308"]:
        cs.append(Case(f"clip-{v}", "double-charge",
                       dp("run", "dp-gcn", "--dataset", b, "--epsilon", "1", "--steps", "2", "--clip", v),
                       mention=["--clip", "clip"]))
    moved = W / "moved-cache"

    def move_away() -> None:
        moved.mkdir(exist_ok=True)
        for sub in ("cache", "artifacts"):
            if (HOME / sub).exists():
                shutil.move(str(HOME / sub), str(moved / sub))

    def restore(r: dict) -> str | None:
        for sub in ("cache", "artifacts"):
            if (moved / sub).exists():
                shutil.rmtree(HOME / sub, ignore_errors=True)
                shutil.move(str(moved / sub), str(HOME / sub))
        return None

    cs.append(Case("lost-cache-rerun", "double-charge",
                   dp("run", "dp-gcn", "--dataset", b, "--epsilon", "1", "--steps", "3"),
                   setup=move_away, check=restore, timeout=90, limit=15))
    b = ds["sync"]
    # the same private run twice at once on a budgeted dataset: one release, one charge
    both = (f"{DPGNN} run dp-mlp --dataset {b} --epsilon 1 --steps 2 --seed 5 > {W}/c1.out 2>&1 & "
            f"{DPGNN} run dp-mlp --dataset {b} --epsilon 1 --steps 2 --seed 5 > {W}/c2.out 2>&1; wait; "
            f"cat {W}/c1.out {W}/c2.out >&2")

    def one_charge(r: dict) -> str | None:
        return None if r["charged"] <= 1 else f"{r['charged']} charges for one run spec"

    cs.append(Case("concurrent-same-run", "double-charge", both, expect="either", check=one_charge,
                   timeout=180, limit=180))
    # the same run again after it completed: a cache hit, no new charge
    cs.append(Case("rerun-cached-no-charge", "double-charge",
                   dp("run", "dp-mlp", "--dataset", b, "--epsilon", "1", "--steps", "2", "--seed", "5"),
                   expect="ok", check=lambda r: None if r["charged"] == 0 else "charged again", timeout=90))
    return cs


def raw_cases(ds: dict[str, Path]) -> list[Case]:
    """Issue 48's table of raw, late or misleading errors, and their neighbours."""
    s, b = ds["syn"], ds["synb"]
    run = ["run", "dp-gcn", "--dataset", s, "--epsilon", "1"]
    ogb = W / "ogb-trunc"
    if not ogb.exists():
        shutil.copytree(DATA / "ogbg_molbace", ogb)
        e = ogb / "raw" / "edge.csv.gz"
        data = e.read_bytes()
        e.write_bytes(data[: len(data) // 2])
    badman = W / "ds-bad-manifest"
    if not badman.exists():
        shutil.copytree(s, badman)
        (badman / "manifest.json").write_text("{not json")

    def datasets_marks(r: dict) -> str | None:
        return None if "ds-bad-manifest" in r["out"] + r["err"] else "folder silently omitted"

    big = "1180591620717411303424"  # 2**70
    cs = [
        Case("seed-2pow70", "raw-errors", dp(*run, "--steps", "2", "--seed", big), mention=["--seed", "seed"]),
        Case("steps-1e9", "raw-errors", dp(*run, "--steps", "1000000000"), mention=["steps"]),
        Case("privacy-steps-1e12", "raw-errors",
             dp("privacy", "epsilon", "--mechanism", "gaussian", "--noise-multiplier", "1",
                "--steps", "1000000000000"), mention=["steps"]),
        Case("noise-multiplier-1e-9", "raw-errors", dp(*run[:-2], "--noise-multiplier", "1e-9",
                                                       "--epsilon", "1", "--steps", "2"),
             mention=["noise"]),
        Case("graph-norm-batch", "raw-errors",
             dp("run", "dp-graph-gcn", "--dataset", ds["er"], "--epsilon", "1", "--norm", "batch"),
             mention=["norm", "batch"]),
        Case("ogb-truncated-gz", "raw-errors",
             dp("ingest", "--format", "ogb", "--source", ogb, "--out", W / "out-ogbt"),
             mention=["edge.csv.gz"]),
        Case("manifest-invalid-run", "raw-errors", dp(*run[:2], "--dataset", badman, "--epsilon", "1"),
             mention=["manifest.json"]),
        Case("manifest-invalid-datasets", "raw-errors", dp("datasets", W), expect="either",
             check=datasets_marks),
        Case("server-port-0", "raw-errors", dp("server", "start", "--port", "0"), mention=["port"]),
        Case("server-port-70000", "raw-errors", dp("server", "start", "--port", "70000"), mention=["port"]),
        Case("server-port-abc", "raw-errors", dp("server", "start", "--port", "abc"), mention=["port"]),
        Case("server-db-bogus", "raw-errors", dp("server", "start", "--database-url", "bogus://x"),
             mention=["database"]),
        Case("epsilon-1e-9", "raw-errors", dp("run", "dp-mlp", "--dataset", s, "--epsilon", "1e-9",
                                              "--steps", "2"), mention=["epsilon", "ε"], timeout=60),
        Case("budget-refusal-fast", "raw-errors",
             dp("run", "dp-gcn", "--dataset", b, "--epsilon", "50", "--steps", "2"),
             mention=["budget"], limit=5),
        Case("tracking-uri-broken", "raw-errors",
             dp("run", "dp-mlp", "--dataset", s, "--epsilon", "1", "--steps", "2", "--tracking-uri",
                "sqlite:////nonexistent-dir/x/mlflow.db"), mention=["tracking", "mlflow", "nonexistent"],
             timeout=60),
        Case("help-piped-full-names", "docs", f"env -u COLUMNS {DPGNN} run dp-gcn --help | cat",
             expect="ok",
             check=lambda r: None if "--insecure-reproducible-noise" in r["out"] else
             "piped --help cuts option names"),
        Case("gap-edp-budget-split", "docs",
             dp("run", "gap-edp", "--dataset", s, "--epsilon", "1", "--budget-split", "1,1,1"),
             mention=["budget-split", "budget_split"]),
    ]
    return cs
