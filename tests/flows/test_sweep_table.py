"""Issue 29 §5: the sweep's (and the demo's) results table, piped, is not squeezed to 80
columns: a Markdown table as wide as its content."""

from __future__ import annotations

import pytest

from flows.cli.sweep import _print_table

LONG = {"batch_size": 16384, "hidden": 64, "hops": 2, "lr": 0.02, "max_degree": 100,
        "steps": 60}


def _best(method: str, eps: float | None, config: dict[str, object]) -> dict[str, object]:
    return {"method": method, "epsilon": eps, "config": config, "val_accuracy_mean": 0.61,
            "test_accuracy_mean": 0.6, "test_accuracy_std": 0.01, "seeds": 3,
            "candidates": 4}


def test_piped_table_is_markdown_sized_to_content(capsys: pytest.CaptureFixture[str]) -> None:
    _print_table({"best": [_best("dp-gcn", 4.0, LONG), _best("gcn", None, {})], "rows": []})
    out = capsys.readouterr().out.splitlines()
    conf = ", ".join(f"{k}={v}" for k, v in sorted(LONG.items()))
    assert out[0].startswith("| method | ε ") and "configuration (best on validation)" in out[0]
    assert set(out[1]) <= {"|", "-"}
    assert f"| {conf} |" in out[2] and "…" not in "".join(out)  # nothing cut short
    assert out[3].startswith("| gcn    | ∞ ") and "| defaults " in out[3]
    assert len({len(line) for line in out}) == 1 and len(out[0]) > 80


def test_markdown_table_escapes_pipes() -> None:
    from flows.cli.sweep import markdown_table

    lines = markdown_table(["a", "b"], [["x|y", "1"]])
    assert lines == ["| a    | b |", "|------|---|", "| x\\|y | 1 |"]
