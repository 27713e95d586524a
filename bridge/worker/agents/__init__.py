"""Faust agents of the worker."""
