"""The explanation branch of the pipeline: a private graph classifier's non-private twin
and GNNExplainer on both.

With ``explain_graphs > 0`` a private graph classifier (an entry with ``explains``) is
compared with its twin: the same spec without privacy, trained through the same cached
``train`` task on the same training graphs, a non-private release of its own (admitted
first, :func:`plan_twin`; logged as its own MLflow run, linked). :func:`explain_with_twin`
then trains the twin and explains ``explain_graphs`` test graphs under both models.
"""

from __future__ import annotations

from typing import Any

from tasks.budget import admit_non_private
from tasks.cached import run_cached as _run
from tasks.refs import DatasetRef


def twin_note(method: str) -> str:
    """What a refusal of the twin ``method`` (the non-private graph classifier) says."""
    return (f"the GNNExplainer comparison trains {method}, a non-private twin of this "
            "model, on the same training graphs (--explain-graphs 0 skips it)")


def plan_twin(the_method: Any, spec: Any, ds: DatasetRef, explain_graphs: int,
              allowed: bool) -> tuple[Any, dict[str, str]]:
    """The twin's spec and the tags of its admission as a non-private release, or
    ``(None, {})`` where there is none (not a private graph classifier, or
    ``explain_graphs`` is 0). Runs before anything trains: a dataset with a budget refuses
    the twin (:func:`tasks.budget.admit_non_private`) unless ``allowed``."""
    if not (the_method.explains and getattr(spec, "epsilon", None) is not None
            and explain_graphs > 0):
        return None, {}
    twin_spec = the_method.spec_type(**{**spec.model_dump(), "epsilon": None, "method": None})
    twin_tags = admit_non_private(ds, twin_spec.method, allowed=allowed,
                                  what=twin_note(twin_spec.method))
    return twin_spec, twin_tags


def explain_with_twin(ds: DatasetRef, model: dict[str, Any], twin_spec: Any, refresh: bool,
                      states: dict[str, str], count: int
                      ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train the twin (cached; state ``train_nonprivate``) and explain ``count`` test graphs
    under the private ``model`` and the twin (cached; state ``explain``).

    Returns:
        tuple: the twin's model reference and the explanation's result.
    """
    from tasks.explain import explain
    from tasks.train import train

    twin, states["train_nonprivate"] = _run(train, refresh, dataset=ds, spec=twin_spec)
    explained, states["explain"] = _run(explain, refresh, dataset=ds, private=model,
                                        nonprivate=twin, count=count)
    return twin, explained
