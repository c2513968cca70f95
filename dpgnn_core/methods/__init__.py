"""Methods: recipes tying data, models, training (and, for private methods, the ledger)."""
