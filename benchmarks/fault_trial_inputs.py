"""Fault-trial cases (benchmarks/fault_trial.py): malformed inputs, bad option values, sweep
specs, files changed between steps, concurrent commands."""
# ruff: noqa: E501 - tables of cases, one per line
from __future__ import annotations

import gzip
import shutil
from collections.abc import Callable
from pathlib import Path

from fault_trial import (
    DATA,
    DPGNN,
    Case,
    W,
    csv_case,
    dp,
    edges_csv,
    nodes_csv,
    sh,
    write,
)


def input_cases() -> list[Case]:
    """Malformed CSV edge lists, node tables, ids, cells, encodings."""
    n = nodes_csv()
    e = edges_csv()
    nan_feat = nodes_csv(feat=lambda i: "nan" if i == 7 else "0.5")
    c = [
        csv_case("empty-edges", "", n, mention=["edges.csv"]),
        csv_case("header-only", "src,dst\n", n, mention=["edges.csv"]),
        csv_case("text-id", e + "a,b\n", n, mention=["edges.csv", "a"]),
        csv_case("negative-id", e + "-3,4\n", n, mention=["-3"]),
        csv_case("id-out-of-range", e + "3,99\n", n, mention=["99"]),
        csv_case("id-above-2pow63", e + "3,18446744073709551617\n", n,
                 mention=["18446744073709551617", "2^63"]),
        csv_case("id-float", e + "1.5,2\n", n, mention=["1.5"]),
        csv_case("id-nan", e + "nan,2\n", n, mention=["nan", "edges.csv"]),
        csv_case("id-empty-cell", e + ",2\n", n, mention=["edges.csv"]),
        csv_case("duplicate-edge", e + "0,1\n", n, mention=["duplicate", "--dedupe-edges"]),
        csv_case("self-loop", e + "4,4\n", n, mention=["self", "--remove-self-loops"]),
        csv_case("missing-src-col", "a,b\n0,1\n", n, mention=["src"]),
        csv_case("src-col-bogus", e, n, extra=("--src-col", "nope"), mention=["nope"]),
        csv_case("ragged-row", e + "1,2,3\n", n, mention=["edges.csv"]),
        csv_case("semicolon-delim", e.replace(",", ";"), n, mention=["edges.csv", "src"]),
        csv_case("utf16-file", e.encode("utf-16"), n, mention=["edges.csv"]),
        csv_case("binary-garbage", bytes(range(256)) * 8, n, mention=["edges.csv"]),
        csv_case("gzip-named-csv", gzip.compress(e.encode()), n, expect="either", mention=("edges.csv",)),
        csv_case("nodes-nan-feature", e, nan_feat, mention=["nan", "f1"]),
        csv_case("nodes-inf-feature", e, nodes_csv(feat=lambda i: "inf" if i == 3 else "1"),
                 mention=["inf", "f1"]),
        csv_case("nodes-1e308-feature", e, nodes_csv(feat=lambda i: "1e308" if i == 3 else "1"),
                 mention=["1e308", "f1"]),
        csv_case("nodes-1e400-feature", e, nodes_csv(feat=lambda i: "1e400" if i == 3 else "1"),
                 mention=["1e400", "inf", "f1"]),
        csv_case("nodes-text-feature", e, nodes_csv(feat=lambda i: "abc" if i == 3 else "1"),
                 extra=("--feature-cols", "f1,f2"), mention=["abc"]),
        csv_case("nodes-duplicate-id", e, n + "5,1,0.1,0\n", mention=["5", "duplicate", "unique"]),
        csv_case("nodes-missing-id", e, "id,label,f1,f2\n" + "".join(
            f"{i},{i % 2},0.1,0\n" for i in range(29)), mention=["29", "nodes.csv"]),
        csv_case("nodes-latin1-label", e, nodes_csv(label=lambda i: "caf\xe9" if i < 15 else "x").encode(
            "latin-1"), expect="either",
                 check=lambda r: "labels stored as Python bytes reprs (b'...')" if "b'" in r["err"] + r["out"] else None),
        csv_case("nodes-all-unlabeled", e, nodes_csv(label=lambda i: ""), mention=["label"]),
        csv_case("nodes-id-col-bogus", e, n, extra=("--id-col", "nope"), mention=["nope"]),
        csv_case("nodes-label-col-bogus", e, n, extra=("--label-col", "nope"), mention=["nope"]),
        csv_case("nodes-feature-col-bogus", e, n, extra=("--feature-cols", "f1,nope"), mention=["nope"]),
        csv_case("nodes-empty-file", e, "", mention=["nodes.csv"]),
        csv_case("nodes-missing-file", e, None, extra=("--nodes", str(W / "nope.csv")),
                 mention=["nope.csv"]),
        csv_case("split-col-bogus-value", e, "id,label,f1,f2,sp\n" + "".join(
            f"{i},{i % 2},0.1,0,{'banana' if i == 2 else 'train'}\n" for i in range(30)),
                 extra=("--split-col", "sp"), mention=["banana"]),
        csv_case("fractions-sum-1.5", e, n, extra=("--fractions", "0.5,0.5,0.5"), mention=["fraction"]),
        csv_case("fractions-negative", e, n, extra=("--fractions", "-0.1,0.6,0.5"), mention=["fraction", "-0.1"]),
        csv_case("fractions-nan", e, n, extra=("--fractions", "nan,0.5,0.5"), mention=["fraction", "nan"]),
        csv_case("fractions-text", e, n, extra=("--fractions", "a,b,c"), mention=["fraction", "a"]),
        csv_case("fractions-two", e, n, extra=("--fractions", "0.5,0.5"), mention=["fraction"]),
        csv_case("relabel-strings-ok", "src,dst\nann,bob\nbob,cy\ncy,ann\n",
                 "id,label,f1\nann,1,0.1\nbob,0,0.2\ncy,1,0.3\n", extra=("--relabel",), expect="either"),
        csv_case("source-missing", e, n, mention=["edges.csv"]) if False else Case(
            "csv-source-missing", "input:csv", dp("ingest", "--format", "csv", "--source",
                                                  W / "missing.csv", "--out", W / "out-miss"),
            mention=["missing.csv"]),
        Case("csv-source-wrong-ext", "input:csv", dp("ingest", "--format", "csv", "--source",
                                                     write("edges.parquet", e), "--out", W / "out-ext"),
             mention=["edges.parquet"]),
        Case("csv-source-folder-empty", "input:csv", dp("ingest", "--format", "csv", "--source",
                                                        W / "notds", "--out", W / "out-fold"),
             mention=["notds"], protect=[W / "notds"]),
    ]
    return c


def format_cases(ds: dict[str, Path]) -> list[Case]:
    """Real-format loaders fed missing, truncated or wrong files; synthetic options."""
    pm = W / "planetoid-missing"
    if not pm.exists():
        shutil.copytree(DATA / "planetoid/Cora/raw", pm)
        (pm / "ind.cora.ty").unlink()
    pt = W / "planetoid-trunc"
    if not pt.exists():
        shutil.copytree(DATA / "planetoid/Cora/raw", pt)
        d = (pt / "ind.cora.allx").read_bytes()
        (pt / "ind.cora.allx").write_bytes(d[: len(d) // 3])
    pi = W / "planetoid-badindex"
    if not pi.exists():
        shutil.copytree(DATA / "planetoid/Cora/raw", pi)
        (pi / "ind.cora.test.index").write_text("1\n2\nabc\n")
    mt = write("trunc.mat", (DATA / "facebook100/Reed98.mat").read_bytes()[:5000])
    mtxt = write("text.mat", "this is not a mat file\n")
    tu = W / "tu-empty"
    tu.mkdir(exist_ok=True)
    ogbs = W / "ogb-nosplit"
    if not ogbs.exists():
        shutil.copytree(DATA / "ogbg_molbace", ogbs)
        shutil.rmtree(ogbs / "split")
    out = W / "out-fmt"
    syn = ["ingest", "--format", "synthetic", "--out", out]
    cs = [
        Case("planetoid-missing-file", "input:formats", dp("ingest", "--format", "planetoid", "--source", pm,
                                                           "--out", out), mention=["ind.cora.ty"]),
        Case("planetoid-truncated", "input:formats", dp("ingest", "--format", "planetoid", "--source", pt,
                                                        "--out", out), mention=["ind.cora.allx"]),
        Case("planetoid-bad-index", "input:formats", dp("ingest", "--format", "planetoid", "--source", pi,
                                                        "--out", out), mention=["test.index", "abc"]),
        Case("planetoid-empty-folder", "input:formats", dp("ingest", "--format", "planetoid", "--source",
                                                           W / "notds", "--out", out), mention=["notds"]),
        Case("fb-truncated-mat", "input:formats", dp("ingest", "--format", "facebook100", "--source", mt,
                                                     "--out", out), mention=["trunc.mat"]),
        Case("fb-text-mat", "input:formats", dp("ingest", "--format", "facebook100", "--source", mtxt,
                                                "--out", out), mention=["text.mat"]),
        Case("fb-target-bogus", "input:formats",
             dp("ingest", "--format", "facebook100", "--source", DATA / "facebook100/Reed98.mat",
                "--target", "bogus", "--out", out), mention=["bogus"]),
        Case("fb-min-class-huge", "input:formats",
             dp("ingest", "--format", "facebook100", "--source", DATA / "facebook100/Reed98.mat",
                "--min-class-size", "1000000", "--out", out), mention=["min", "class"]),
        Case("fb-min-class-negative", "input:formats",
             dp("ingest", "--format", "facebook100", "--source", DATA / "facebook100/Reed98.mat",
                "--min-class-size", "-1", "--out", out), mention=["min", "-1"]),
        Case("tu-empty-folder", "input:formats", dp("ingest", "--format", "tu", "--source", tu,
                                                    "--out", out), mention=["tu-empty", "_A.txt"]),
        Case("ogb-no-split", "input:formats", dp("ingest", "--format", "ogb", "--source", ogbs,
                                                 "--out", out), mention=["split"]),
        Case("ogb-split-bogus", "input:formats",
             dp("ingest", "--format", "ogb", "--source", DATA / "ogbg_molbace", "--split", "nope",
                "--out", out), mention=["nope"]),
        Case("format-bogus", "input:formats", dp("ingest", "--format", "bogus", "--out", out),
             mention=["bogus", "format"]),
        Case("dgl-not-installed-or-missing", "input:formats",
             dp("ingest", "--format", "dgl", "--source", W / "nope.bin", "--out", out),
             mention=["nope.bin", "dgl"]),
        Case("name-with-slash", "input:formats", dp(*syn[:3], "-o", "num_nodes=300", "--name", "../../evil",
                                                    "--out", W / "out-name"), expect="either",
             check=lambda r: "wrote outside --out" if (W.parent / "evil").exists() else None),
        Case("fingerprint-merge-on-wrong-format", "input:formats",
             dp(*syn, "-o", "num_nodes=300", "--fingerprint-merge"), mention=["fingerprint"]),
        Case("option-unknown", "input:formats", dp(*syn, "-o", "num_nodes=300", "-o", "bogus=1"),
             mention=["bogus"]),
        Case("option-no-equals", "input:formats", dp(*syn, "-o", "num_nodes"), mention=["num_nodes"]),
        Case("option-bad-json", "input:formats", dp(*syn, "-o", "fractions=[0.5,"), mention=["fractions"]),
    ]
    for k, vals in {"num_nodes": ["0", "-1", "abc", "1e30", "NaN", "1000000000000", "2.5"],
                    "avg_degree": ["-1", "NaN", "Infinity", "1e12"],
                    "homophily": ["2", "-0.1", "NaN"], "feature_dim": ["0", "-5"],
                    "num_classes": ["0", "1", "1000"], "power_law": ["1.5", "-3"],
                    "feature_signal": ["-1", "Infinity"], "seed": ["-1", "1180591620717411303424", "\"x\""]}.items():
        for v in vals:
            extra = [] if k == "num_nodes" else ["-o", "num_nodes=300"]
            own = ["ingest", "--format", "synthetic", "--out", W / f"out-syn-{k}-{v.strip(chr(34))}"]
            cs.append(Case(f"synthetic-{k}-{v}", "input:options", dp(*own, *extra, "-o", f"{k}={v}"),
                           mention=[k, k.replace("_", "-")]))
    return cs


def option_cases(ds: dict[str, Path]) -> list[Case]:
    """Bad option values for run, audit, privacy, budget, sweep: refused before training."""
    s = ds["syn"]
    bad = {
        "--steps": ["0", "-1", "abc", "nan", "1e9"],
        "--lr": ["0", "-1", "nan", "inf"],
        "--epsilon": ["0", "-1", "nan", "inf", "abc"],
        "--delta": ["0", "-1", "1", "nan", "0.5"],
        "--batch-size": ["0", "-1", "1000000000000"],
        "--noise-multiplier": ["0", "-1", "nan", "inf"],
        "--hidden": ["0", "-1", "1000000000"],
        "--layers": ["0", "-1"],
        "--max-degree": ["0", "-1"],
        "--accountant": ["bogus"], "--level": ["bogus"], "--device": ["bogus"],
        "--activation": ["bogus"], "--optimizer": ["bogus"], "--clipping": ["bogus"],
        "--select-every": ["0"], "--layer-clips": ["1,2", "1,nan,1"],
        "--clip-percentile": ["150", "-5", "nan"], "--backend": ["bogus"],
    }
    cs = []
    for opt, vals in bad.items():
        for v in vals:
            args = ["run", "dp-gcn", "--dataset", s]
            if opt != "--epsilon":  # --noise-multiplier trains until --epsilon is spent
                args += ["--epsilon", "1"]
            if opt != "--steps":
                args += ["--steps", "2"]
            if opt == "--layer-clips":
                args += ["--clipping", "layerwise"]
            cs.append(Case(f"run{opt}={v}", "input:options", dp(*args, opt, v),
                           mention=[opt, opt.strip("-").replace("-", "_"), v], timeout=60))
    o = W / "cfg"
    o.mkdir(exist_ok=True)
    cs += [
        Case("run-level-node-undirected", "input:options",
             dp("run", "dp-gcn", "--dataset", s, "--epsilon", "1", "--level", "node"), mention=["node", "directed"]),
        Case("run-device-cuda-absent", "input:options",
             dp("run", "dp-gcn", "--dataset", s, "--epsilon", "1", "--steps", "2", "--device", "cuda"),
             expect="either", mention=["cuda"], timeout=60),
        Case("run-set-steps-abc", "input:options", dp("run", "dp-gcn", "--epsilon", "1", "--dataset", s, "--set", "steps=abc"),
             mention=["steps"]),
        Case("run-set-unknown", "input:options", dp("run", "dp-gcn", "--epsilon", "1", "--dataset", s, "--set", "bogus=1"),
             mention=["bogus"]),
        Case("run-set-no-equals", "input:options", dp("run", "dp-gcn", "--epsilon", "1", "--dataset", s, "--set", "steps"),
             mention=["steps"]),
        Case("run-config-missing", "input:options",
             dp("run", "dp-gcn", "--epsilon", "1", "--dataset", s, "--config", o / "none.toml"), mention=["none.toml"]),
        Case("run-config-bad-toml", "input:options",
             dp("run", "dp-gcn", "--epsilon", "1", "--dataset", s, "--config", write("cfg/bad.toml", "steps = = 3\n")),
             mention=["bad.toml"]),
        Case("run-config-wrong-type", "input:options",
             dp("run", "dp-gcn", "--epsilon", "1", "--dataset", s, "--config", write("cfg/wt.toml", 'steps = "many"\n')),
             mention=["steps", "wt.toml"]),
        Case("run-config-nan", "input:options",
             dp("run", "dp-gcn", "--dataset", s, "--config", write("cfg/nan.toml", "epsilon = nan\n")),
             mention=["epsilon", "nan"]),
        Case("run-dataset-missing", "input:options", dp("run", "dp-gcn", "--epsilon", "1", "--dataset", W / "nope"),
             mention=["nope"]),
        Case("run-dataset-is-file", "input:options", dp("run", "dp-gcn", "--epsilon", "1", "--dataset", W / "plainfile.txt"),
             mention=["plainfile.txt"]),
        Case("run-dataset-not-dataset", "input:options", dp("run", "dp-gcn", "--epsilon", "1", "--dataset", W / "notds"),
             mention=["notds"], protect=[W / "notds"]),
        Case("run-method-bogus", "input:options", dp("run", "bogus", "--epsilon", "1", "--dataset", s), mention=["bogus"]),
        Case("run-graph-method-on-node-ds", "input:options",
             dp("run", "dp-graph-gcn", "--dataset", s, "--epsilon", "1"), mention=["graph"]),
        Case("run-node-method-on-graph-ds", "input:options",
             dp("run", "dp-gcn", "--dataset", ds["er"], "--epsilon", "1"), mention=["graph", "node"]),
        Case("run-experiment-empty", "input:options",
             dp("run", "dp-gcn", "--dataset", s, "--epsilon", "1", "--steps", "2", "--experiment", ""),
             mention=["experiment"], timeout=90),
    ]
    for opt, v in [("--canaries", "1"), ("--canaries", "0"), ("--canaries", "abc"), ("--runs", "3"),
                   ("--canaries", "1000000"), ("--epsilon", "nan"), ("--steps", "-1")]:
        args = ["audit", "dp-mlp", "--dataset", s, "--epsilon", "1"] if opt != "--epsilon" else \
            ["audit", "dp-mlp", "--dataset", s]
        cs.append(Case(f"audit{opt}={v}", "input:options", dp(*args, opt, v), mention=[opt.strip("-"), v],
                       timeout=60))
    pe = ["privacy", "epsilon", "--mechanism"]
    for cid, args, m in [
        ("steps-0", [*pe, "gaussian", "--noise-multiplier", "1", "--steps", "0"], "steps"),
        ("steps--1", [*pe, "gaussian", "--noise-multiplier", "1", "--steps", "-1"], "steps"),
        ("nm-0", [*pe, "gaussian", "--noise-multiplier", "0"], "noise"),
        ("nm--1", [*pe, "gaussian", "--noise-multiplier", "-1"], "noise"),
        ("nm-nan", [*pe, "gaussian", "--noise-multiplier", "nan"], "noise"),
        ("nm-inf", [*pe, "gaussian", "--noise-multiplier", "inf"], "noise"),
        ("q-1.5", [*pe, "poisson-gaussian", "--noise-multiplier", "1", "--sampling-rate", "1.5"], "sampling"),
        ("q-0", [*pe, "poisson-gaussian", "--noise-multiplier", "1", "--sampling-rate", "0"], "sampling"),
        ("q-nan", [*pe, "poisson-gaussian", "--noise-multiplier", "1", "--sampling-rate", "nan"], "sampling"),
        ("q-missing", [*pe, "poisson-gaussian", "--noise-multiplier", "1"], "sampling"),
        ("delta-0", [*pe, "gaussian", "--noise-multiplier", "1", "--delta", "0"], "delta"),
        ("delta-1", [*pe, "gaussian", "--noise-multiplier", "1", "--delta", "1"], "delta"),
        ("delta-nan", [*pe, "gaussian", "--noise-multiplier", "1", "--delta", "nan"], "delta"),
        ("mech-bogus", [*pe, "bogus", "--noise-multiplier", "1"], "mechanism"),
        ("dpgnn-missing-n", [*pe, "dpgnn", "--noise-multiplier", "1"], "num-train"),
        ("dpgnn-batch>n", [*pe, "dpgnn", "--noise-multiplier", "1", "--num-train", "10", "--batch-size",
                           "100", "--max-degree", "3", "--layers", "1"], "batch"),
        ("dpgnn-n-0", [*pe, "dpgnn", "--noise-multiplier", "1", "--num-train", "0", "--batch-size",
                       "1", "--max-degree", "3", "--layers", "1"], "num"),
        ("dpgnn-level-bogus", [*pe, "dpgnn", "--noise-multiplier", "1", "--num-train", "100",
                               "--batch-size", "10", "--max-degree", "3", "--layers", "1", "--level",
                               "bogus"], "bogus"),
        ("uniform-pld", [*pe, "uniform-gaussian", "--noise-multiplier", "1", "--sampling-rate", "0.1",
                         "--accountant", "pld"], "pld"),
        ("calib-eps-0", ["privacy", "calibrate", "--mechanism", "gaussian", "--epsilon", "0"], "epsilon"),
        ("calib-eps-nan", ["privacy", "calibrate", "--mechanism", "gaussian", "--epsilon", "nan"], "epsilon"),
        ("calib-eps-inf", ["privacy", "calibrate", "--mechanism", "gaussian", "--epsilon", "inf"], "epsilon"),
        ("calib-eps-1e-9-steps-1e9", ["privacy", "calibrate", "--mechanism", "gaussian", "--epsilon", "1e-9",
                                      "--steps", "1000000000"], "steps"),
    ]:
        cs.append(Case(f"privacy-{cid}", "input:options", dp(*args), mention=[m, m.replace("-", "_")]))
    return cs


def sweep_cases(ds: dict[str, Path]) -> list[Case]:
    """Sweep spec errors: refused before Dask starts or anything trains."""
    s = ds["syn"]
    good = f'name = "ft"\ndataset = "{s}"\nepsilons = [1]\nseeds = [0]\n[[methods]]\nmethod = "dp-mlp"\n'
    variants = {
        "syntax": ("name = = 1\n", ["toml", "line"]),
        "empty": ("", ["name", "dataset", "methods"]),
        "no-methods": (good.split("[[methods]]")[0], ["methods"]),
        "unknown-method": (good.replace("dp-mlp", "bogus"), ["bogus"]),
        "eps-negative": (good.replace("[1]", "[-1]"), ["epsilon", "-1"]),
        "eps-text": (good.replace("[1]", '["a"]'), ["epsilon", "a"]),
        "eps-nan": (good.replace("[1]", "[nan]"), ["epsilon", "nan"]),
        "eps-inf": (good.replace("[1]", "[inf]"), ["epsilon", "inf"]),
        "seed-huge": (good.replace("seeds = [0]", "seeds = [9223372036854775807]"), ["seed"]),
        "unknown-key": (good + "bogus = 1\n", ["bogus"]),
        "dataset-missing": (good.replace(str(s), "/nonexistent/ds"), ["/nonexistent/ds"]),
        "name-slash": (good.replace('"ft"', '"../evil"'), ["name"]),
        "method-bad-option": (good + "options = {steps = -5}\n", ["steps"]),
        "method-unknown-option": (good + "options = {bogus = 1}\n", ["bogus"]),
        "selection-bogus": (good.replace("seeds = [0]", 'seeds = [0]\nselection = "bogus"'), ["selection"]),
        "ingest-source-missing": (good.replace(f'dataset = "{s}"\n', "") +
                                  '[dataset]\nformat = "csv"\nsource = "/nonexistent/e.csv"\n',
                                  ["/nonexistent/e.csv"]),
        "ingest-format-bogus": (good.replace(f'dataset = "{s}"\n', "") +
                                '[dataset]\nformat = "bogus"\nsource = "x"\n', ["bogus", "format"]),
        "budget-nonprivate": (good.replace(str(s), str(ds["synb"])).replace("dp-mlp", "mlp"),
                              ["--allow-non-private-release"]),
        "budget-exceeds": (good.replace(str(s), str(ds["synb"])).replace("[1]", "[40]"), ["budget"]),
    }
    cs = []
    for k, (text, m) in variants.items():
        cs.append(Case(f"sweep-{k}", "input:sweep", dp("sweep", write(f"sweeps/{k}.toml", text)),
                       mention=m, timeout=60))
    cs.append(Case("sweep-file-missing", "input:sweep", dp("sweep", W / "sweeps/none.toml"),
                   mention=["none.toml"]))
    cs.append(Case("sweep-json-bad", "input:sweep", dp("sweep", write("sweeps/bad.json", "{\"name\": ")),
                   mention=["bad.json"]))
    cs.append(Case("sweep-workers-0", "input:sweep", dp("sweep", write("sweeps/good.toml", good),
                                                         "--workers", "0"), mention=["workers"]))
    cs.append(Case("sweep-dask-address-bad", "input:sweep",
                   dp("sweep", W / "sweeps/good.toml", "--dask-address", "tcp://127.0.0.1:9"),
                   mention=["127.0.0.1:9", "dask"], timeout=60, limit=15))
    return cs


def files_cases(ds: dict[str, Path]) -> list[Case]:
    """Dataset files missing or changed between ingest and run; concurrent commands."""
    def broken(name: str, mutate: Callable[[Path], None]) -> Path:
        d = W / f"ds-{name}"
        if not d.exists():
            shutil.copytree(ds["syn"], d)
            mutate(d)
        return d

    def first(d: Path, pat: str) -> Path:
        return sorted(d.glob(pat))[0]

    rm = broken("rm-parquet", lambda d: first(d, "*.parquet").unlink())
    tr = broken("trunc-parquet", lambda d: first(d, "*.parquet").write_bytes(
        first(d, "*.parquet").read_bytes()[:100]))
    same = broken("same-size-edit", lambda d: first(d, "*.parquet").write_bytes(
        bytes(reversed(first(d, "*.parquet").read_bytes()))))
    man = broken("manifest-edited", lambda d: (d / "manifest.json").write_text(
        (d / "manifest.json").read_text().replace('"num_nodes": 300', '"num_nodes": 301')))
    manempty = broken("manifest-empty", lambda d: (d / "manifest.json").write_text(""))
    mannone = broken("manifest-missing", lambda d: (d / "manifest.json").unlink())
    run = ["run", "dp-mlp", "--epsilon", "1", "--steps", "2", "--dataset"]
    cs = [
        Case("run-parquet-removed", "files", dp(*run, rm), mention=["ds-rm-parquet"]),
        Case("run-parquet-truncated", "files", dp(*run, tr), mention=["ds-trunc-parquet"]),
        Case("run-parquet-same-size-edit", "files", dp(*run, same), mention=["ds-same-size-edit"]),
        Case("run-manifest-edited", "files", dp(*run, man), mention=["manifest"]),
        Case("run-manifest-empty", "files", dp(*run, manempty), mention=["manifest"]),
        Case("run-manifest-missing", "files", dp(*run, mannone), mention=["manifest", "ds-manifest-missing"]),
        Case("budget-set-broken-dataset", "files",
             dp("budget", "set", tr, "--epsilon", "1", "--delta", "1e-5"), mention=["ds-trunc-parquet"]),
        Case("export-dgl-bogus-run", "files", dp("export-dgl", "nonexistent-run-id", "--out", W / "g.bin"),
             expect="refuse", mention=["nonexistent-run-id", "dgl"]),
    ]
    cc = W / "conc"
    both = (f"{DPGNN} ingest --format synthetic -o num_nodes=60000 --out {cc} > {W}/i1.out 2>&1 & "
            f"sleep 0.5; {DPGNN} ingest --format synthetic -o num_nodes=60000 -o seed=1 --out {cc} "
            f"> {W}/i2.out 2>&1; r2=$?; wait %1; r1=$?; cat {W}/i1.out {W}/i2.out >&2; "
            f"echo $r1 $r2; test $r1 -eq 0 -a $r2 -ne 0 -o $r1 -ne 0 -a $r2 -eq 0")

    def one_wins(r: dict) -> str | None:
        v = sh(dp("datasets", cc))
        return None if v.returncode == 0 and (cc / "manifest.json").exists() else \
            f"no valid dataset left: {v.stderr[-200:]}"

    cs.append(Case("concurrent-ingest-same-out", "data-loss", both, expect="ok", check=one_wins,
                   timeout=180))
    bo = W / "conc2"
    both_ow = (f"{DPGNN} ingest --format synthetic -o num_nodes=60000 --out {bo} --overwrite >/dev/null 2>{W}/o1 & "
               f"sleep 0.5; {DPGNN} ingest --format synthetic -o num_nodes=60000 -o seed=1 --out {bo} "
               f"--overwrite > /dev/null 2>{W}/o2; r2=$?; wait %1; r1=$?; cat {W}/o1 {W}/o2 >&2; echo $r1 $r2; "
               f"test $r1 -eq 0 -a $r2 -ne 0 -o $r1 -ne 0 -a $r2 -eq 0")
    cs.append(Case("concurrent-ingest-overwrite", "data-loss", both_ow, expect="ok", timeout=180))
    bs = (f"for i in 1 2 3; do {DPGNN} budget set {ds['cora2']} --epsilon $((i+3)) --delta 1e-5 "
          f"--reason r$i & done; wait; {DPGNN} budget show {ds['cora2']} --json > /dev/null")
    cs.append(Case("concurrent-budget-set", "privacy-claims", bs, expect="ok", timeout=60))
    return cs
