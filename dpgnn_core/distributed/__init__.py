"""The partitioned path (issue 51): private computations over a partitioned dataset folder
(:mod:`dpgnn_core.data.partitioned`) as Dask work, each with exactly the privacy event
of its single-process counterpart. :mod:`.pma`: GAP's private multi-hop aggregation."""

#: The method families that train from a partitioned dataset
#: (:data:`dpgnn_core.distributed.fits.FITS`; named here so that the command line knows
#: them without importing torch).
PARTITIONED_FAMILIES = ("gap", "dp-mlp")
