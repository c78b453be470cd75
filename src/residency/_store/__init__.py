"""Stores: where sessions' journals and immutable content live."""
