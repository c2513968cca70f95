"""Methods: recipes tying data, models, training (and, for private methods, the ledger).

Nothing is re-exported here: import from the submodules (:mod:`.registry` for the contract).
"""

__all__: list[str] = []
