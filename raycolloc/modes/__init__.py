"""Collocation modes: naive time-slicing, MPS and MIG."""
