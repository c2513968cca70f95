"""Interoperability with other graph libraries (optional extras, imported lazily)."""
