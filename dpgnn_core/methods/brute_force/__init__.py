"""The brute-force sensitivity checks of the shipped private families: each module computes
a family's pre-noise release on small adversarial datasets and their neighbours and
returns :class:`~dpgnn_core.privacy.sensitivity.SensitivityCheck` objects that the
family declares (its :class:`~dpgnn_core.methods.contract.Implementation`'s
``sensitivity``) and the contract test runs. :mod:`.graphs` holds the adversarial graphs."""
