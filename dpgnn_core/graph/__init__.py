"""Subgraph and edge samplers whose bounds the privacy analysis rests on (tested, not assumed).

Nothing is re-exported here: import from the submodules (:mod:`.dpgnn_sampler`,
:mod:`.gap_degree`, :mod:`.random_walk`, :mod:`.subgraphs`). The *batch* samplers that pick
each step's batch are :mod:`dpgnn_core.training.dp_sgd`'s.
"""

__all__: list[str] = []
