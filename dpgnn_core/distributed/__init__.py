"""The partitioned path (issue 51): private computations over a partitioned dataset folder
(:mod:`dpgnn_core.data.partitioned`) as Dask work, each with exactly the privacy event
of its single-process counterpart. :mod:`.pma`: GAP's private multi-hop aggregation."""
