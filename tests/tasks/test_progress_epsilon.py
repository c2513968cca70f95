"""The ε of the progress line: enough significant digits, never rounded down (issue 29)."""

from __future__ import annotations

import pytest

from tasks.progress import format_epsilon


@pytest.mark.parametrize(("eps", "shown"), [
    (9.995e-05, "1.00e-04"), (1e-4, "1.00e-04"), (1.234e-7, "1.24e-07"),
    (0.0099, "0.00990"), (0.001, "0.00100"), (0.0123, "0.0123"), (0.12345, "0.124"),
    (0.5, "0.500"), (2.1, "2.10"), (2.1001, "2.11"), (123.4, "123.40"), (0.0, "0.00"),
    (float("inf"), "inf"),
])
def test_format_epsilon(eps: float, shown: str) -> None:
    assert format_epsilon(eps) == shown


@pytest.mark.parametrize("eps", [9.995e-05, 3.3333e-06, 0.0123456, 0.987654, 7.77777])
def test_format_epsilon_never_under_reports(eps: float) -> None:
    shown = float(format_epsilon(eps))
    assert eps <= shown <= eps * 1.01  # three significant digits, rounded up


def test_progress_line_of_a_tiny_budget() -> None:
    import io

    from tasks.progress import Progress

    out = io.StringIO()
    with Progress("dp-mlp", 10, target_epsilon=1e-4, stream=out, mode="plain") as p:
        p.update(10, loss=1.0, epsilon=9.995e-05)
    assert "eps 1.00e-04/1.00e-04" in out.getvalue()  # one form (issue 33 §7)
